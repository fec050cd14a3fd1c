//! Structured output: JSON Schema and tool-call grammars.

use std::os::raw::c_char;

use crate::*;

// -------------------------------------------------------- structured output --

/// The GBNF grammar of a JSON Schema (JSON text), for `Request::grammar`:
/// the output is one JSON value the schema allows. A schema outside the
/// supported subset is `Status::INVALID_ARG` with a message naming the
/// keyword and where it is.
pub fn json_schema_to_grammar(schema: &str) -> Result<String> {
    if schema.is_empty() {
        // schema_len 0 would mean NUL-terminated.
        return Err(Error::new(1, "empty schema"));
    }
    sized_text(|buf, cap, needed, eb, ecap| unsafe {
        sys::fx_json_schema_to_grammar(
            schema.as_ptr() as *const c_char,
            schema.len(),
            buf,
            cap,
            needed,
            eb,
            ecap,
        )
    })
}

/// One tool a model may call (fx_tool).
#[derive(Clone, Copy, Debug)]
pub struct Tool<'a> {
    /// 1-64 of [A-Za-z0-9_.-].
    pub name: &'a str,
    /// JSON Schema of its arguments (the subset of
    /// `json_schema_to_grammar`); None: any JSON object.
    pub parameters: Option<&'a str>,
}

/// How a model family writes a tool call (fx_tool_format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": N, "arguments": {...}}</tool_call>`: Qwen 2.5
    /// and 3, Hermes 2 Pro, SmolLM3.
    Hermes,
    /// `{"name": N, "parameters": {...}}`: Llama 3.1 to 3.3.
    Llama3,
    /// `[TOOL_CALLS][{"name": N, "arguments": {...}}, ...]`: Mistral.
    Mistral,
}

impl ToolFormat {
    fn raw(self) -> std::os::raw::c_int {
        match self {
            ToolFormat::Hermes => sys::FX_TOOL_FORMAT_HERMES,
            ToolFormat::Llama3 => sys::FX_TOOL_FORMAT_LLAMA3,
            ToolFormat::Mistral => sys::FX_TOOL_FORMAT_MISTRAL,
        }
    }

    /// The text the format's tool call starts with ("<tool_call>"): the
    /// trigger of its lazy grammar.
    pub fn trigger(self) -> &'static str {
        // Static, and never NULL for a format this enum can name.
        unsafe { static_str(sys::fx_tool_format_trigger(self.raw())) }
    }
}

/// The lazy grammar of a call to one of `tools` in `format`
/// (fx_tools_to_grammar): give it to `Request::grammar` with
/// `format.trigger()` in `Request::grammar_triggers`, and the model
/// answers in prose or calls one of the tools with arguments its schema
/// allows. Errors carry the library's message, which names the tool.
pub fn tools_to_grammar(tools: &[Tool<'_>], format: ToolFormat) -> Result<String> {
    let mut keep = Vec::new();
    let mut arr = Vec::new();
    for t in tools {
        let name = cstring(t.name)?;
        let params = opt_cstring(t.parameters)?;
        arr.push(sys::fx_tool {
            name: name.as_ptr(),
            parameters: opt_ptr(&params),
        });
        keep.push((name, params));
    }
    sized_text(|buf, cap, needed, eb, ecap| unsafe {
        sys::fx_tools_to_grammar(
            arr.as_ptr(),
            arr.len(),
            format.raw(),
            buf,
            cap,
            needed,
            eb,
            ecap,
        )
    })
}
