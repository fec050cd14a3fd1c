"""Structured output: JSON Schema and tool-call grammars."""


from . import _capi
from ._capi import lib
from ._common import ToolFormat, _cstr, _json_text, _sized_text

def json_schema_to_grammar(schema) -> str:
    """The GBNF grammar of a JSON Schema (a dict, a bool, or JSON text), for
    submit(grammar=...): the output is one JSON value the schema allows.
    A schema outside the supported subset raises FerroxError
    (Status.INVALID_ARG) whose message names the keyword and where."""
    data = _json_text(schema)
    return _sized_text(lib().fx_json_schema_to_grammar, data, len(data))


def _tool(t):
    """(name, parameters) from a tool given as a (name, parameters) pair, a
    {"name", "parameters"} dict, or an OpenAI-style {"type": "function",
    "function": {...}} entry -- the `tools` a chat template reads."""
    if isinstance(t, dict):
        f = t.get("function", t)
        if not isinstance(f, dict) or "name" not in f:
            raise ValueError("ferrox: a tool without a name: %r" % (t,))
        return f["name"], f.get("parameters")
    name, params = t
    return name, params


def tools_to_grammar(tools, format: ToolFormat = ToolFormat.HERMES) -> str:
    """The lazy grammar of a call to one of `tools` in a family's format
    (fx_tools_to_grammar). Submit it with
    grammar_triggers=[tool_format_trigger(format)]: the model answers in
    prose, or calls one of the tools with arguments its schema allows.
    Each tool is a {"name", "parameters"} dict (parameters: a JSON Schema
    dict or text, None for any object), a (name, parameters) pair, or an
    OpenAI-style {"type": "function", "function": {...}} entry."""
    fmt = ToolFormat(format)
    tools = list(tools)
    keep = []
    arr = (_capi.Tool * len(tools))()
    for i, t in enumerate(tools):
        name, params = _tool(t)
        n = _cstr("a tool name", name)
        p = None if params is None else _cstr("parameters", _json_text(params))
        keep += [n, p]
        arr[i] = _capi.Tool(n, p)
    return _sized_text(lib().fx_tools_to_grammar, arr, len(arr), int(fmt))


def tool_format_trigger(format: ToolFormat) -> str:
    """The text a format's tool call starts with ("<tool_call>" for
    Hermes): the trigger of its lazy grammar."""
    fmt = ToolFormat(format)
    return lib().fx_tool_format_trigger(int(fmt)).decode()
