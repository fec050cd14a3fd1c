package ferrox

// Tests of the calls added for tool use: fx_chat_apply_ex on a published
// template, JSON Schema and tool-call grammars, lazy grammar triggers and
// fx_event.grammar_start.

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chatData reads a file of tests/data/chat: FERROX_TEST_CHAT_DATA (set by
// the ctest), or its place in the source tree.
func chatData(t *testing.T, parts ...string) string {
	t.Helper()
	dir := os.Getenv("FERROX_TEST_CHAT_DATA")
	if dir == "" {
		dir = filepath.Join("..", "..", "tests", "data", "chat")
	}
	b, err := os.ReadFile(filepath.Join(append([]string{dir}, parts...)...))
	if err != nil {
		t.Fatal(err) // a broken setup, not a reason to skip
	}
	return string(b)
}

const qwen = "Qwen-Qwen2.5-7B-Instruct"

func TestRenderChatTemplateWithTools(t *testing.T) {
	tmpl := chatData(t, "templates", qwen+".jinja")
	ctx := chatData(t, "contexts", "tools.json")
	want := chatData(t, "expected", qwen+"--tools.txt")
	bos, eos := "<s>", "</s>"
	out, err := RenderChatTemplate(tmpl, nil, &ChatTemplateOptions{
		Flags: ChatAddAssistant, Context: ctx, Now: time.Unix(1721952000, 0),
		BOSToken: &bos, EOSToken: &eos,
	})
	if err != nil || out != want {
		t.Fatalf("without a model: %v\n%q\nwant\n%q", err, out, want)
	}
	// The model's own BOS/EOS texts are <s> and </s>.
	m := load(t)
	out, err = m.RenderChatTemplate(tmpl, nil, &ChatTemplateOptions{Flags: ChatAddAssistant, Context: ctx})
	if err != nil || out != want {
		t.Fatalf("with the model: %v\n%q", err, out)
	}
	// Messages from the argument, tools from the context.
	var parsed struct{ Tools []json.RawMessage }
	if err := json.Unmarshal([]byte(ctx), &parsed); err != nil {
		t.Fatal(err)
	}
	toolsOnly, _ := json.Marshal(map[string]interface{}{"tools": parsed.Tools})
	out, err = m.RenderChatTemplate(tmpl, []ChatMessage{{"user", "Weather in Oslo?"}},
		&ChatTemplateOptions{Flags: ChatAddAssistant, Context: string(toolsOnly)})
	if err != nil || !strings.Contains(out, `"name": "get_weather"`) ||
		!strings.HasSuffix(out, "Weather in Oslo?<|im_end|>\n<|im_start|>assistant\n") {
		t.Fatalf("tools context: %v\n%q", err, out)
	}
	// strftime_now runs on the given clock.
	out, err = RenderChatTemplate("{{ strftime_now('%Y-%m-%d') }}", []ChatMessage{{"user", "x"}},
		&ChatTemplateOptions{Now: time.Date(2024, 7, 26, 12, 0, 0, 0, time.UTC)})
	if err != nil || out != "2024-07-26" {
		t.Fatalf("strftime_now: %q %v", out, err)
	}
}

func TestRenderChatTemplateErrors(t *testing.T) {
	var fe *Error
	m := load(t)
	// The synthetic model has no template of its own.
	_, err := m.RenderChatTemplate("", []ChatMessage{{"user", "x"}}, nil)
	if !errors.Is(err, ErrMissing) || !errors.As(err, &fe) || fe.Message == "" {
		t.Fatalf("no template: %v", err)
	}
	_, err = RenderChatTemplate("{{ raise_exception('no tools here') }}", []ChatMessage{{"user", "x"}}, nil)
	if !errors.Is(err, ErrBadTemplate) || !errors.As(err, &fe) || !strings.Contains(fe.Message, "no tools here") {
		t.Fatalf("raise_exception: %v", err)
	}
	_, err = RenderChatTemplate("{{ messages }}", []ChatMessage{{"user", "x"}}, &ChatTemplateOptions{Context: "[1, 2]"})
	if !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) || fe.Message == "" {
		t.Fatalf("context not an object: %v", err)
	}
	_, err = RenderChatTemplate("{{ messages }}", []ChatMessage{{"user", "x"}},
		&ChatTemplateOptions{Context: `{"messages": [{"role": "user", "content": "y"}]}`})
	if !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("messages twice: %v", err)
	}
	_, err = RenderChatTemplate("{{ x }}", []ChatMessage{{"user", "x"}}, &ChatTemplateOptions{Context: "{\"a\": 1}\x00"})
	if !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("a NUL in the context: %v", err)
	}
	if _, err := RenderChatTemplate("", []ChatMessage{{"user", "x"}}, nil); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("no template text: %v", err)
	}
}

func TestChatStopStringsAndTokenType(t *testing.T) {
	s, err := ChatStopStrings("chatml")
	if err != nil || len(s) == 0 || s[0] != "<|im_end|>" {
		t.Fatalf("chatml stop strings %q %v", s, err)
	}
	if _, err := ChatStopStrings("{% unclosed"); !errors.Is(err, ErrBadTemplate) {
		t.Fatalf("bad template: %v", err)
	}
	if fam, err := DetectChatTemplate(chatData(t, "templates", qwen+".jinja")); err != nil || fam != "chatml" {
		t.Fatalf("Qwen 2.5's family: %q %v", fam, err)
	}
	if fam, err := DetectChatTemplate("{{ messages }}"); err != nil || fam != "jinja" {
		t.Fatalf("plain jinja: %q %v", fam, err)
	}
	if _, err := DetectChatTemplate("{% unclosed"); !errors.Is(err, ErrBadTemplate) {
		t.Fatalf("bad template: %v", err)
	}
	m := load(t)
	eos, _ := m.SpecialToken(TokenEOS)
	if tt := m.TokenType(eos); tt != TokenTypeControl {
		t.Fatalf("EOS type %d", tt)
	}
	if tt := m.TokenType(int32(m.VocabSize())); tt != TokenTypeUndefined {
		t.Fatalf("out of range type %d", tt)
	}
}

func TestJSONSchemaGrammar(t *testing.T) {
	g, err := JSONSchemaToGrammar(`{"type": "object", "properties": {
		"n": {"type": "integer", "minimum": 0, "maximum": 9},
		"ok": {"type": "boolean"}}, "required": ["n", "ok"]}`)
	if err != nil || !strings.Contains(g, "root ::=") {
		t.Fatalf("grammar %q %v", g, err)
	}
	m := load(t)
	b := newBatcher(t, m)
	for seed := uint64(0); seed < 3; seed++ {
		c := wait(t, submit(t, b, request("Data:", 64, func(r *Request) {
			r.Grammar, r.Temperature, r.Seed = g, 1, seed
		})))
		var v map[string]interface{}
		if err := json.Unmarshal([]byte(c.Text), &v); err != nil || c.Finish != FinishEOS || len(v) != 2 {
			t.Fatalf("output %q %v %v", c.Text, c.Finish, err)
		}
		if n, ok := v["n"].(float64); !ok || n != float64(int(n)) || n < 0 || n > 9 {
			t.Fatalf("n in %q", c.Text)
		}
		if _, ok := v["ok"].(bool); !ok {
			t.Fatalf("ok in %q", c.Text)
		}
	}

	var fe *Error
	_, err = JSONSchemaToGrammar(`{"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 3}}}`)
	if !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) ||
		!strings.Contains(fe.Message, "multipleOf") || !strings.Contains(fe.Message, "/properties/age") {
		t.Fatalf("unsupported keyword: %v", err)
	}
	if _, err := JSONSchemaToGrammar("{not json"); !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) || fe.Message == "" {
		t.Fatalf("not json: %v", err)
	}
	if _, err := JSONSchemaToGrammar(""); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("empty: %v", err)
	}
}

// Two tools whose calls are finite (an enum, bounded integers), so a row
// that starts one always ends.
var testTools = []Tool{
	{Name: "get_weather", Parameters: `{"type": "object",
		"properties": {"city": {"enum": ["Paris", "Oslo"]}}, "required": ["city"]}`},
	{Name: "add", Parameters: `{"type": "object", "properties": {
		"a": {"type": "integer", "minimum": 0, "maximum": 99},
		"b": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a", "b"]}`},
}

var hermesCall = regexp.MustCompile(`(?s)^<tool_call>\n?(.*?)\n?</tool_call>`)

// checkHermesCall parses the Hermes call text starts with and checks its
// arguments against testTools' schemas; it returns the rest of text.
func checkHermesCall(t *testing.T, text string) string {
	t.Helper()
	m := hermesCall.FindStringSubmatchIndex(text)
	if m == nil {
		t.Fatalf("no tool call at %q", text)
	}
	var call struct {
		Name      string
		Arguments map[string]interface{}
	}
	dec := json.NewDecoder(strings.NewReader(text[m[2]:m[3]]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&call); err != nil {
		t.Fatalf("call %q: %v", text[m[2]:m[3]], err)
	}
	switch call.Name {
	case "get_weather":
		if c := call.Arguments["city"]; len(call.Arguments) != 1 || (c != "Paris" && c != "Oslo") {
			t.Fatalf("get_weather arguments %v", call.Arguments)
		}
	case "add":
		for _, k := range []string{"a", "b"} {
			v, ok := call.Arguments[k].(float64)
			if len(call.Arguments) != 2 || !ok || v != float64(int(v)) || v < 0 || v > 99 {
				t.Fatalf("add arguments %v", call.Arguments)
			}
		}
	default:
		t.Fatalf("tool %q", call.Name)
	}
	return text[m[1]:]
}

// steer makes the synthetic model (random weights) write words first, token
// by token: each token's logit bias is 100 below the one before, and the
// presence penalty pushes a token already written below every later one.
func steer(t *testing.T, m *Model, words string, r *Request) {
	t.Helper()
	ids, err := m.Tokenize(words, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.LogitBias = map[int32]float32{}
	for i, id := range ids {
		if _, dup := r.LogitBias[id]; dup {
			t.Fatalf("%q repeats token %d", words, id)
		}
		r.LogitBias[id] = 1000 - 100*float32(i)
	}
	r.PresencePenalty = 100 * float32(len(ids)+1)
}

func TestToolFormats(t *testing.T) {
	for f, want := range map[ToolFormat]string{
		ToolFormatHermes: "<tool_call>", ToolFormatLlama3: `{"name"`, ToolFormatMistral: "[TOOL_CALLS]",
	} {
		if got, err := f.Trigger(); err != nil || got != want {
			t.Fatalf("format %d: %q %v", f, got, err)
		}
	}
	if _, err := ToolFormat(9).Trigger(); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("unknown format: %v", err)
	}
	var fe *Error
	_, err := ToolsToGrammar([]Tool{{Name: "bad name!"}}, ToolFormatHermes)
	if !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) || !strings.Contains(fe.Message, "tool 0's name") {
		t.Fatalf("bad name: %v", err)
	}
	_, err = ToolsToGrammar([]Tool{{Name: "ok", Parameters: `{"type": "object", "not": {}}`}}, ToolFormatHermes)
	if !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) || !strings.Contains(fe.Message, "not") {
		t.Fatalf("bad schema: %v", err)
	}
	if _, err := ToolsToGrammar(nil, ToolFormatHermes); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("no tools: %v", err)
	}
	if _, err := ToolsToGrammar(testTools, ToolFormat(9)); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("unknown format: %v", err)
	}
	if _, err := ToolsToGrammar([]Tool{{Name: "a\x00b"}}, ToolFormatHermes); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("a NUL in a name: %v", err)
	}
	// Any JSON object as arguments: the grammar still starts with the
	// trigger.
	if g, err := ToolsToGrammar([]Tool{{Name: "anything"}}, ToolFormatMistral); err != nil || !strings.Contains(g, `"[TOOL_CALLS]"`) {
		t.Fatalf("mistral: %q %v", g, err)
	}
}

func TestLazyToolCallGrammar(t *testing.T) {
	trigger, err := ToolFormatHermes.Trigger()
	if err != nil {
		t.Fatal(err)
	}
	g, err := ToolsToGrammar(testTools, ToolFormatHermes)
	if err != nil {
		t.Fatal(err)
	}
	m := load(t)
	b, err := NewBatcher(m, &BatcherOptions{NCtx: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The model writes some prose, then the trigger; the grammar must hold
	// everything from there to complete calls.
	req := request("Weather?", 600, func(r *Request) {
		r.Grammar, r.GrammarTriggers = g, []string{trigger}
	})
	steer(t, m, "Sure"+trigger, &req)
	row := submit(t, b, req)
	var out string
	var starts []int64
	var done Event
	for {
		ev, err := row.Next()
		if err != nil {
			break
		}
		switch ev.Type {
		case EventText:
			out += ev.Text
			starts = append(starts, ev.GrammarStart)
		case EventDone:
			done = ev
		}
	}
	if done.Finish != FinishEOS || done.GrammarStart <= 0 || done.GrammarStart >= int64(len(out)) {
		t.Fatalf("done %v start %d, output %q", done.Finish, done.GrammarStart, out)
	}
	start := done.GrammarStart
	if !strings.HasPrefix(strings.TrimSpace(out[:start]), "Sure") {
		t.Fatalf("prose %q", out[:start])
	}
	// -1 until a Text reaches the trigger, then its offset.
	seen := false
	for _, s := range starts {
		if s == start {
			seen = true
		} else if seen || s != -1 {
			t.Fatalf("grammar_start of the Text events: %v", starts)
		}
	}
	if !seen {
		t.Fatalf("no Text reported the trigger: %v", starts)
	}
	text := out[start:]
	if !strings.HasPrefix(text, trigger) {
		t.Fatalf("the grammar starts at %q", text)
	}
	for text != "" { // every call the grammar allowed, back to back
		text = checkHermesCall(t, text)
		if text != "" {
			if text[0] != '\n' {
				t.Fatalf("between two calls: %q", text)
			}
			text = text[1:]
		}
	}

	// Without the trigger the same request never meets the grammar.
	free := request("Weather?", 12, nil)
	steer(t, m, "Sure"+trigger, &free)
	c := wait(t, submit(t, b, free))
	if !strings.Contains(c.Text, trigger) || c.GrammarStart != -1 {
		t.Fatalf("free run %q start %d", c.Text, c.GrammarStart)
	}
	// Trigger errors come back from Submit with the library's message.
	var fe *Error
	bad := request("x", 4, func(r *Request) { r.Grammar, r.GrammarTriggers = g, []string{""} })
	if _, err := b.Submit(context.Background(), &bad); !errors.Is(err, ErrInvalidArg) || !errors.As(err, &fe) || fe.Message == "" {
		t.Fatalf("empty trigger: %v", err)
	}
	bad = request("x", 4, func(r *Request) { r.Grammar, r.GrammarTriggers = g, []string{"<tool\x00"} })
	if _, err := b.Submit(context.Background(), &bad); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("a NUL in a trigger: %v", err)
	}
	bad = request("x", 4, func(r *Request) {
		r.Grammar, r.GrammarTriggerTokens = g, []int32{int32(m.VocabSize())}
	})
	if _, err := b.Submit(context.Background(), &bad); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("trigger token out of range: %v", err)
	}
}

func TestPlainRowsHaveNoGrammarStart(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	row := submit(t, b, request("Hi", 3, nil))
	n := 0
	for {
		ev, err := row.Next()
		if err != nil {
			break
		}
		if (ev.Type == EventText || ev.Type == EventDone) && ev.GrammarStart != -1 {
			t.Fatalf("grammar_start %d in %+v", ev.GrammarStart, ev)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no events")
	}
}
