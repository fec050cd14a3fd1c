// Structured output: JSON Schema and tool-call grammars.

package ferrox

/*
#include <stdint.h>
#include <stdlib.h>
#include <ferrox.h>
*/
import "C"

import "unsafe"

// ------------------------------------------------------ structured output --

// JSONSchemaToGrammar converts a JSON Schema (JSON text) to a GBNF grammar
// for Request.Grammar: the output is one JSON value the schema allows. A
// schema outside the supported subset is an *Error with ErrInvalidArg and
// a message naming the keyword and where it is.
func JSONSchemaToGrammar(schema string) (string, error) {
	var mem cmem
	defer mem.free()
	cs, n := mem.bytes(schema)
	if n == 0 {
		// schema_len 0 would mean NUL-terminated; an empty schema is no JSON.
		return "", &Error{Op: "fx_json_schema_to_grammar", Status: ErrInvalidArg, Message: "empty schema"}
	}
	return sizedText("fx_json_schema_to_grammar", func(buf *C.char, cap C.size_t, needed *C.size_t, eb *C.char, ecap C.size_t) C.fx_status {
		return C.fx_json_schema_to_grammar(cs, n, buf, cap, needed, eb, ecap)
	})
}

// Tool is one tool a model may call.
type Tool struct {
	Name string // 1-64 of [A-Za-z0-9_.-]
	// Parameters is the JSON Schema of its arguments (the subset of
	// JSONSchemaToGrammar); "" means any JSON object.
	Parameters string
}

// ToolFormat is how a model family writes a tool call (fx_tool_format).
type ToolFormat int

// The tool-call formats of ferrox.h.
const (
	// ToolFormatHermes: <tool_call>{"name": N, "arguments": {...}}</tool_call>
	// (Qwen 2.5 and 3, Hermes 2 Pro, SmolLM3).
	ToolFormatHermes ToolFormat = C.FX_TOOL_FORMAT_HERMES
	// ToolFormatLlama3: {"name": N, "parameters": {...}} (Llama 3.1-3.3).
	ToolFormatLlama3 ToolFormat = C.FX_TOOL_FORMAT_LLAMA3
	// ToolFormatMistral: [TOOL_CALLS][{"name": N, "arguments": {...}}, ...].
	ToolFormatMistral ToolFormat = C.FX_TOOL_FORMAT_MISTRAL
)

// Trigger is the text the format's tool call starts with ("<tool_call>"):
// the trigger of its lazy grammar. An unknown format is an error.
func (f ToolFormat) Trigger() (string, error) {
	p := C.fx_tool_format_trigger(C.fx_tool_format(f))
	if p == nil {
		return "", &Error{Op: "fx_tool_format_trigger", Status: ErrInvalidArg, Message: "unknown tool format"}
	}
	return C.GoString(p), nil // static
}

// ToolsToGrammar returns the lazy grammar of a call to one of tools in
// format: set it as Request.Grammar with format.Trigger() in
// Request.GrammarTriggers, and the model answers in prose or calls one of
// the tools with arguments its schema allows. Errors (no tools, a bad
// name, a schema outside the subset) are *Error with the library's
// message, which names the tool.
func ToolsToGrammar(tools []Tool, format ToolFormat) (string, error) {
	const op = "fx_tools_to_grammar"
	if len(tools) == 0 {
		return "", &Error{Op: op, Status: ErrInvalidArg, Message: "no tools"}
	}
	var mem cmem
	defer mem.free()
	arr := (*C.fx_tool)(mem.alloc(uintptr(len(tools)) * C.sizeof_fx_tool))
	s := unsafe.Slice(arr, len(tools))
	for i, t := range tools {
		var err error
		if s[i].name, err = mem.cstr(op, "a tool name", t.Name); err != nil {
			return "", err
		}
		if t.Parameters != "" {
			if s[i].parameters, err = mem.cstr(op, "a tool's parameters", t.Parameters); err != nil {
				return "", err
			}
		}
	}
	return sizedText(op, func(buf *C.char, cap C.size_t, needed *C.size_t, eb *C.char, ecap C.size_t) C.fx_status {
		return C.fx_tools_to_grammar(arr, C.size_t(len(tools)), C.fx_tool_format(format), buf, cap, needed, eb, ecap)
	})
}
