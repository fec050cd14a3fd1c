package ferrox

// The Go binding against the real library and a small synthetic model.
// FERROX_TEST_MODEL names the model (the ctest binding_go sets it, with
// CGO_CFLAGS/CGO_LDFLAGS/LD_LIBRARY_PATH for the library).

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

func modelPath(t *testing.T) string {
	p := os.Getenv("FERROX_TEST_MODEL")
	if _, err := os.Stat(p); err != nil {
		// A broken setup, not a reason to skip.
		t.Fatalf("FERROX_TEST_MODEL %q: %v", p, err)
	}
	return p
}

func load(t *testing.T) *Model {
	m, err := LoadModel(modelPath(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func newBatcher(t *testing.T, m *Model) *Batcher {
	b, err := NewBatcher(m, &BatcherOptions{NCtx: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func submit(t *testing.T, b *Batcher, req Request) *Row {
	t.Helper()
	row, err := b.Submit(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { row.Close() })
	return row
}

func wait(t *testing.T, row *Row) *Completion {
	t.Helper()
	c, err := row.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func request(prompt string, maxTokens uint32, f func(*Request)) Request {
	r := NewRequest(prompt)
	r.MaxTokens = maxTokens
	if f != nil {
		f(&r)
	}
	return r
}

func sampled(seed uint64) func(*Request) {
	return func(r *Request) { r.Temperature, r.Seed = 0.9, seed }
}

func ignoreEOS(r *Request) { r.IgnoreEOS = true }

func TestVersion(t *testing.T) {
	if !regexp.MustCompile(`^0\.\d+\.\d+$`).MatchString(Version()) || VersionMajor() != 0 {
		t.Fatalf("version %q major %d", Version(), VersionMajor())
	}
}

// A status the library describes must have its constant here: the list
// below follows ferrox.go's, and the first code past it must be unknown.
func TestEveryLibraryStatusHasAConstant(t *testing.T) {
	all := []Status{StatusOK, ErrInvalidArg, ErrNoMem, ErrIO, ErrUnsupported,
		ErrTruncated, ErrBadMagic, ErrBadVersion, ErrTooLarge, ErrBadType,
		ErrBadTensor, ErrBadOffset, ErrBadAlignment, ErrDuplicate, ErrMissing,
		ErrBadShape, ErrBadHparams, ErrBufferTooSmall, ErrBadVocab,
		ErrBadTemplate, ErrStaleHandle, ErrReentrant, ErrNoRoom, ErrInternal,
		ErrGrammar, ErrAllBanned}
	for i, s := range all {
		if int(s) != i || s.String() == "unknown status" {
			t.Errorf("constant %d is %d (%q)", i, int(s), s.String())
		}
	}
	if next := Status(len(all)); next.String() != "unknown status" {
		t.Errorf("the library knows status %d (%q); ferrox.go does not", len(all), next.String())
	}
}

func TestModelInfoAndTokenizer(t *testing.T) {
	m := load(t)
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Arch != "llama" || info.NLayer != 4 || info.NEmbd != 256 || int(info.NVocab) != m.VocabSize() {
		t.Fatalf("info %+v, vocab %d", info, m.VocabSize())
	}
	text := "Hello world, once upon a time"
	toks, err := m.Tokenize(text, AddSpecial)
	if err != nil {
		t.Fatal(err)
	}
	bos, ok := m.SpecialToken(TokenBOS)
	if !ok || toks[0] != bos {
		t.Fatalf("tokens %v, BOS %d %v", toks, bos, ok)
	}
	back, err := m.Detokenize(toks, RemoveSpecial)
	if err != nil || back != text {
		t.Fatalf("detokenize: %q %v", back, err)
	}
	var pieces []byte
	for _, tok := range toks[1:] {
		p, err := m.TokenToPiece(tok, 0)
		if err != nil {
			t.Fatal(err)
		}
		pieces = append(pieces, p...)
	}
	if strings.TrimSpace(string(pieces)) != text {
		t.Fatalf("pieces %q", pieces)
	}
	eos, _ := m.SpecialToken(TokenEOS)
	if !m.IsEOG(eos) || m.IsEOG(toks[1]) {
		t.Fatal("IsEOG")
	}
	// More tokens than the first guess and more bytes than the first
	// detokenize buffer: both retry paths.
	var words []string
	for i := 0; i < 400; i++ {
		words = append(words, string(rune('0'+i%10)))
	}
	long := strings.Join(words, " ")
	toks, err = m.Tokenize(long, 0)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := m.Detokenize(toks, 0); err != nil || back != long {
		t.Fatalf("long round trip: %v", err)
	}
	_, err = m.Detokenize([]int32{int32(m.VocabSize()) + 5}, 0)
	var fe *Error
	if !errors.As(err, &fe) || fe.Status != ErrInvalidArg || !strings.Contains(fe.Message, "out of range") {
		t.Fatalf("bad token: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := LoadModel("/nonexistent/ferrox-model.gguf", nil)
	var fe *Error
	if !errors.Is(err, ErrIO) || !errors.As(err, &fe) || !strings.Contains(fe.Message, "ferrox-model.gguf") {
		t.Fatalf("missing file: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "junk.gguf")
	if err := os.WriteFile(junk, []byte(strings.Repeat("not a model", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(junk, nil); !errors.Is(err, ErrBadMagic) {
		t.Fatalf("junk file: %v", err)
	}
	vm, err := LoadModel(modelPath(t), &ModelOptions{VocabOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if info, _ := vm.Info(); !info.VocabOnly {
		t.Fatal("vocab-only info")
	}
	if _, err := NewBatcher(vm, nil); err == nil {
		t.Fatal("a batcher over a vocabulary-only model")
	}
}

func TestChat(t *testing.T) {
	msgs := []ChatMessage{{"system", "Be brief."}, {"user", "Hi"}}
	out, err := ApplyChatTemplate("chatml", msgs, ChatAddAssistant)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if err != nil || out != want {
		t.Fatalf("chatml: %q %v", out, err)
	}
	var long []ChatMessage
	for i := 0; i < 9; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		long = append(long, ChatMessage{role, strings.Repeat("word ", 50)})
	}
	if out, err := ApplyChatTemplate("chatml", long, 0); err != nil || len(out) < 2000 {
		t.Fatalf("long conversation: %d %v", len(out), err)
	}
	fams := ChatFamilies()
	sort.Strings(fams)
	if i := sort.SearchStrings(fams, "llama3"); i == len(fams) || fams[i] != "llama3" {
		t.Fatalf("families %v", fams)
	}
	if _, err := ApplyChatTemplate("{% unknown %}", msgs, 0); !errors.Is(err, ErrBadTemplate) {
		t.Fatalf("unknown template: %v", err)
	}
	if _, err := ApplyChatTemplate("chatml", []ChatMessage{{"robot", "x"}}, 0); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("unknown role: %v", err)
	}

	m := load(t)
	if out, err := m.ApplyChatTemplate("llama2", []ChatMessage{{"user", "Hi"}}, 0); err != nil || out != "[INST] Hi [/INST]" {
		t.Fatalf("llama2: %q %v", out, err)
	}
	// The synthetic model has no template of its own.
	if _, err := m.ApplyChatTemplate("", msgs, 0); !errors.Is(err, ErrMissing) {
		t.Fatalf("model template: %v", err)
	}
	if fam, err := m.ChatFamily("zephyr"); err != nil || fam != "zephyr" {
		t.Fatalf("family %q %v", fam, err)
	}
	eos, _ := m.SpecialToken(TokenEOS)
	ids, err := m.ChatStopTokens("chatml")
	if err != nil || len(ids) == 0 || ids[len(ids)-1] != eos {
		t.Fatalf("stop tokens %v %v", ids, err)
	}
}

func TestRowsAreDeterministic(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	prompts := []string{"Once upon a time", "The dragon said", "Once upon a time"}
	var rows []*Row
	for _, p := range prompts {
		rows = append(rows, submit(t, b, request(p, 12, sampled(7))))
	}
	other := submit(t, b, request("Once upon a time", 12, sampled(8)))
	if b.Pending() != 4 {
		t.Fatalf("pending %d", b.Pending())
	}
	if err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	var res []*Completion
	for _, r := range rows {
		c := wait(t, r)
		if c.Text == "" || int(c.Usage.CompletionTokens) != len(c.Tokens) {
			t.Fatalf("completion %+v", c)
		}
		res = append(res, c)
	}
	if res[0].Text != res[2].Text || res[0].Text == res[1].Text || res[0].Text == wait(t, other).Text {
		t.Fatalf("texts %q %q %q", res[0].Text, res[1].Text, res[2].Text)
	}
	alone := wait(t, submit(t, newBatcher(t, m), request("Once upon a time", 12, sampled(7))))
	if alone.Text != res[0].Text {
		t.Fatalf("alone %q, batched %q", alone.Text, res[0].Text)
	}
}

// Rows waited on from several goroutines at once: the batcher serializes
// its C calls, and every row still gets exactly its own tokens.
func TestConcurrentGoroutines(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	want := map[uint64]string{}
	for seed := uint64(1); seed <= 4; seed++ {
		want[seed] = wait(t, submit(t, b, request("Once upon", 10, sampled(seed)))).Text
	}
	var wg sync.WaitGroup
	got := make([]string, 5)
	errs := make([]error, 5)
	for seed := uint64(1); seed <= 4; seed++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			req := request("Once upon", 10, sampled(seed))
			row, err := b.Submit(context.Background(), &req)
			if err != nil {
				errs[seed] = err
				return
			}
			defer row.Close()
			c, err := row.Wait()
			if err != nil {
				errs[seed] = err
				return
			}
			got[seed] = c.Text
		}(seed)
	}
	wg.Wait()
	for seed := uint64(1); seed <= 4; seed++ {
		if errs[seed] != nil || got[seed] != want[seed] {
			t.Fatalf("seed %d: %q %v, want %q", seed, got[seed], errs[seed], want[seed])
		}
	}
}

func TestEventsInOrder(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	row := submit(t, b, request("Once upon a time", 8, ignoreEOS))
	var text []byte
	var done Event
	for {
		ev, err := row.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case EventText:
			if done.Type != 0 {
				t.Fatal("text after done")
			}
			text = append(text, ev.Text...)
		case EventDone:
			done = ev
		default:
			t.Fatalf("event %+v", ev)
		}
	}
	if done.Finish != FinishLength || len(done.Tokens) != 8 || !row.Ended() {
		t.Fatalf("done %+v", done)
	}
	var pieces []byte
	for _, tok := range done.Tokens {
		p, _ := m.TokenToPiece(tok, 0)
		pieces = append(pieces, p...)
	}
	if string(text) != string(pieces) {
		t.Fatalf("text %q, pieces %q", text, pieces)
	}
}

func TestPromptTokensAndStop(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	full := wait(t, submit(t, b, request("The dragon said", 16, ignoreEOS)))
	toks, _ := m.Tokenize("The dragon said", AddSpecial)
	byIDs := wait(t, submit(t, b, request("", 16, func(r *Request) {
		r.PromptTokens, r.IgnoreEOS = toks, true
	})))
	if byIDs.Text != full.Text {
		t.Fatalf("token prompt %q, text prompt %q", byIDs.Text, full.Text)
	}
	runes := []rune(full.Text)
	stop := string(runes[len(runes)/2 : len(runes)/2+3])
	c := wait(t, submit(t, b, request("The dragon said", 16, func(r *Request) {
		r.IgnoreEOS, r.Stop = true, []string{"\x01never", stop}
	})))
	if c.Finish != FinishStop || c.StopIndex != 1 || c.Text != full.Text[:strings.Index(full.Text, stop)] {
		t.Fatalf("stop %q: %+v", stop, c)
	}
}

func TestSamplingOptions(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	base := wait(t, submit(t, b, request("Once", 6, sampled(3))))
	banned := base.Tokens[0]
	c := wait(t, submit(t, b, request("Once", 6, func(r *Request) {
		sampled(3)(r)
		r.LogitBias = map[int32]float32{banned: float32(math.Inf(-1))}
		r.TopK, r.TopP, r.MinP, r.TypicalP = 40, 0.95, 0.01, 0.99
		r.RepeatPenalty, r.PresencePenalty, r.FrequencyPenalty, r.PenaltyLastN = 1.1, 0.1, 0.1, 16
	})))
	for _, tok := range c.Tokens {
		if tok == banned {
			t.Fatalf("banned token %d in %v", banned, c.Tokens)
		}
	}
	lp := wait(t, submit(t, b, request("Once", 5, func(r *Request) { r.NLogprobs, r.IgnoreEOS = 3, true })))
	if len(lp.Logprobs) != 5 {
		t.Fatalf("%d token events", len(lp.Logprobs))
	}
	for i, ev := range lp.Logprobs {
		if ev.Token != lp.Tokens[i] || ev.Logprob > 0 || len(ev.Top) != 3 ||
			ev.Top[0].Logprob < ev.Top[1].Logprob || ev.Top[1].Logprob < ev.Top[2].Logprob {
			t.Fatalf("token event %+v", ev)
		}
	}
	req := request("Once", 4, func(r *Request) { r.NLogprobs = 21 })
	if _, err := b.Submit(context.Background(), &req); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("too many logprobs: %v", err)
	}
}

func TestGrammarAndJSON(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	for seed := uint64(0); seed < 3; seed++ {
		c := wait(t, submit(t, b, request("Answer:", 8, func(r *Request) {
			r.Temperature, r.Seed, r.Grammar = 1, seed, `root ::= "yes" | "no"`
		})))
		if (c.Text != "yes" && c.Text != "no") || c.Finish != FinishEOS {
			t.Fatalf("grammar output %q %v", c.Text, c.Finish)
		}
	}
	c := wait(t, submit(t, b, request("Answer:", 8, func(r *Request) {
		r.Grammar, r.GrammarRoot = `answer ::= "maybe"`, "answer"
	})))
	if c.Text != "maybe" {
		t.Fatalf("grammar root: %q", c.Text)
	}
	bad := request("x", 4, func(r *Request) { r.Grammar = `root ::= "unterminated` })
	_, err := b.Submit(context.Background(), &bad)
	var fe *Error
	if !errors.Is(err, ErrGrammar) || !errors.As(err, &fe) || !strings.Contains(fe.Message, "line 1") {
		t.Fatalf("bad grammar: %v", err)
	}
	j := wait(t, submit(t, b, request("Data:", 24, func(r *Request) {
		r.JSON, r.Temperature, r.Seed = true, 0.7, 11
	})))
	if s := strings.TrimLeft(j.Text, " \t\r\n"); s == "" || !strings.ContainsAny(s[:1], `{["-0123456789tfn`) {
		t.Fatalf("json output %q", j.Text)
	}
	both := request("x", 4, func(r *Request) { r.JSON, r.Grammar = true, `root ::= "a"` })
	if _, err := b.Submit(context.Background(), &both); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("json and grammar: %v", err)
	}
	long := request("Once upon a time", 1000, nil)
	if _, err := b.Submit(context.Background(), &long); !errors.Is(err, ErrNoRoom) {
		t.Fatalf("no room: %v", err)
	}
	if b.Pending() != 0 {
		t.Fatal("a refused request is pending")
	}
}

func TestCancel(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	row := submit(t, b, request("Once", 200, ignoreEOS))
	b.Step()
	b.Step()
	if err := row.Cancel(); err != nil {
		t.Fatal(err)
	}
	if err := row.Cancel(); err != nil {
		t.Fatal(err)
	}
	c := wait(t, row)
	if c.Finish != FinishCancelled || c.Usage.CompletionTokens >= 200 {
		t.Fatalf("cancelled row %+v", c)
	}
	if err := row.Cancel(); err != nil {
		t.Fatalf("cancel after the end: %v", err)
	}
}

func TestContextCancelsRow(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)

	// Cancelled before waiting: the row ends at the next step.
	ctx, cancel := context.WithCancel(context.Background())
	req := request("Once", 200, ignoreEOS)
	row, err := b.Submit(ctx, &req)
	if err != nil {
		t.Fatal(err)
	}
	defer row.Close()
	b.Step()
	cancel()
	c, err := row.Wait()
	if !errors.Is(err, context.Canceled) || c == nil || c.Finish != FinishCancelled {
		t.Fatalf("cancelled context: %+v %v", c, err)
	}

	// A deadline that passes while Wait is stepping: whichever sees it
	// first ends the row, the watcher goroutine's fx_cancel (possibly in
	// the middle of a Step) or Next's check between steps.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	req2 := request("Once", 2000, ignoreEOS)
	b2, err := NewBatcher(m, &BatcherOptions{NCtx: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	row2, err := b2.Submit(ctx2, &req2)
	if err != nil {
		t.Fatal(err)
	}
	defer row2.Close()
	c, err = row2.Wait()
	if !errors.Is(err, context.DeadlineExceeded) || c.Finish != FinishCancelled || c.Usage.CompletionTokens >= 2000 {
		t.Fatalf("deadline: %+v %v", c, err)
	}
}

func TestCloseTwice(t *testing.T) {
	m, err := LoadModel(modelPath(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatcher(m, &BatcherOptions{NCtx: 128})
	if err != nil {
		t.Fatal(err)
	}
	m.Close() // deferred: the batcher still needs it
	row := submit(t, b, request("Once", 50, ignoreEOS))
	b.Step()
	if row.Close() != nil || row.Close() != nil || !row.Ended() {
		t.Fatal("row close twice")
	}
	if _, err := row.Next(); err != io.EOF {
		t.Fatalf("next after close: %v", err)
	}
	b.Step()
	if b.Pending() != 0 {
		t.Fatal("released row still pending")
	}
	done := submit(t, b, request("Once", 2, nil))
	wait(t, done)
	if done.Close() != nil {
		t.Fatal("close after the end")
	}
	if b.Close() != nil || b.Close() != nil || m.h != nil {
		t.Fatal("batcher close twice, or the model outlived it")
	}
	if row.Close() != nil || row.Cancel() != nil || m.Close() != nil {
		t.Fatal("calls after close")
	}
	req := request("Once", 2, nil)
	if _, err := b.Submit(context.Background(), &req); err == nil {
		t.Fatal("submit after close")
	}
	if _, err := m.Tokenize("x", 0); err == nil {
		t.Fatal("tokenize after close")
	}
}

// A Row dropped without Close is released by the batcher, on the
// batcher's side, after the garbage collector finds it.
func TestFinalizerReleasesDroppedRow(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	func() {
		req := request("Once", 100, ignoreEOS)
		if _, err := b.Submit(context.Background(), &req); err != nil {
			t.Fatal(err)
		}
	}()
	for i := 0; i < 100 && b.Pending() > 0; i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
		if err := b.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if b.Pending() != 0 {
		t.Fatal("the dropped row was never released")
	}
}

func TestLease(t *testing.T) {
	m := load(t)
	b := newBatcher(t, m)
	// Long enough for whole KV blocks (16 positions): those are pinned.
	prefix := "You are a knight of the realm. You guard the northern gate, speak little and never leave your post."
	lease, err := b.NewLease(prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := lease.State(); s != LeasePending || err != nil {
		t.Fatalf("new lease: %v %v", s, err)
	}
	for i := 0; i < 10 && !lease.Ready(); i++ {
		b.Step()
	}
	if !lease.Ready() {
		t.Fatal("lease never ready")
	}
	if !lease.Pinned() {
		t.Fatal("lease ready but not pinned")
	}
	if s, err := lease.State(); s != LeasePinned || err != nil {
		t.Fatalf("pinned lease: %v %v", s, err)
	}
	suffix, _ := m.Tokenize(" Speak:", 0)
	c := wait(t, submit(t, b, request("", 6, func(r *Request) { r.PromptTokens, r.Lease = suffix, lease })))
	whole, _ := m.Tokenize(prefix, AddSpecial)
	whole = append(whole, suffix...)
	plain := wait(t, submit(t, b, request("", 6, func(r *Request) { r.PromptTokens = whole })))
	if int(c.Usage.PromptTokens) != len(whole) || c.Text != plain.Text {
		t.Fatalf("lease row %+v, plain %+v", c, plain)
	}
	if lease.Close() != nil || lease.Close() != nil {
		t.Fatal("lease close twice")
	}
	req := request("x", 2, func(r *Request) { r.Lease = lease })
	if _, err := b.Submit(context.Background(), &req); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("released lease: %v", err)
	}
	if _, err := lease.State(); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("state of a closed lease: %v", err)
	}
	// A prefix shorter than one KV block is computed but not pinned.
	short, err := b.NewLease("Hi", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	if err := b.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, err := short.State(); s != LeaseUnpinned || err != nil {
		t.Fatalf("short lease: %v %v", s, err)
	}
}

func TestMetadataAndTensors(t *testing.T) {
	m := load(t)
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := m.Metadata()
	if err != nil || uint64(len(meta)) != info.NMeta {
		t.Fatalf("metadata: %d entries, %v", len(meta), err)
	}
	values := map[string]string{}
	for _, e := range meta {
		values[e.Key] = e.Value
	}
	if meta[0].Key != "general.architecture" || values["general.architecture"] != `"llama"` ||
		values["llama.block_count"] != "4" ||
		!strings.HasPrefix(values["tokenizer.ggml.tokens"], `[string x 32000: "<unk>", "<s>", "</s>"`) {
		t.Fatalf("metadata %v", values)
	}
	tensors, err := m.Tensors()
	if err != nil || uint64(len(tensors)) != info.NTensors {
		t.Fatalf("tensors: %d, %v", len(tensors), err)
	}
	var emb *TensorInfo
	for i := range tensors {
		if tensors[i].Name == "token_embd.weight" {
			emb = &tensors[i]
		}
		if tensors[i].Offset+tensors[i].NBytes > info.FileSize {
			t.Fatalf("tensor outside the file: %+v", tensors[i])
		}
	}
	if emb == nil || len(emb.Dims) != 2 || emb.Dims[0] != 256 || emb.Dims[1] != uint64(info.NVocab) ||
		emb.TypeName == "" || emb.NBytes == 0 {
		t.Fatalf("token_embd.weight: %+v", emb)
	}
	m.Close()
	if _, err := m.Metadata(); err == nil {
		t.Fatal("metadata of a closed model")
	}
}

// An F16 KV cache runs (the same text on two batchers, one sharing its
// batch with another row).
func TestKVF16(t *testing.T) {
	m := load(t)
	var texts []string
	for rows := 1; rows <= 2; rows++ {
		b, err := NewBatcher(m, &BatcherOptions{NCtx: 256, KVF16: true})
		if err != nil {
			t.Fatal(err)
		}
		r := submit(t, b, request("Once upon", 12, sampled(7)))
		if rows == 2 {
			submit(t, b, request("The dragon said", 12, sampled(8)))
		}
		texts = append(texts, wait(t, r).Text)
		b.Close()
	}
	if texts[0] == "" || texts[0] != texts[1] {
		t.Fatalf("alone %q, batched %q", texts[0], texts[1])
	}
}

// The same tokens computed from the file mapping as from the copy, made
// over the first steps or at once.
func TestMappedWeights(t *testing.T) {
	var texts []string
	for _, opts := range []ModelOptions{{}, {MappedWeights: true}, {EagerCopy: true}} {
		m, err := LoadModel(modelPath(t), &opts)
		if err != nil {
			t.Fatal(err)
		}
		b := newBatcher(t, m)
		texts = append(texts, wait(t, submit(t, b, request("Once upon", 12, sampled(7)))).Text)
		b.Close()
		m.Close()
	}
	if texts[0] == "" || texts[0] != texts[1] || texts[0] != texts[2] {
		t.Fatalf("copied %q, mapped %q, copied at once %q", texts[0], texts[1], texts[2])
	}
}
