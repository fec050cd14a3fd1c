"""Chat templates without a model, and the chat-message arrays."""

import ctypes
from typing import Any, Optional

from . import _capi
from ._capi import lib
from ._common import (FerroxError, Status, _bytes, _cstr, _errbuf, _int_arg,
                      _json_text, _sized_text, _text)

def _messages(messages):
    """Chat messages as a ctypes array, plus the byte strings it points to
    (returned so that they outlive the call)."""
    keep = []
    arr = (_capi.ChatMessage * len(messages))()
    for i, m in enumerate(messages):
        role, content = ((m["role"], m["content"]) if isinstance(m, dict)
                         else m)
        r, c = _bytes(role), _bytes(content)
        keep += [r, c]
        # An explicit length, so that a NUL inside content is reported
        # (FX_ERR_INVALID_ARG) instead of silently cutting the text.
        arr[i] = _capi.ChatMessage(r, c, len(c))
        if not c:
            # content_len 0 means "NUL-terminated", which b"" also is.
            arr[i].content_len = 0
    return arr, keep


def _chat_flags(add_assistant, with_bos):
    return ((_capi.CHAT_ADD_ASSISTANT if add_assistant else 0)
            | (_capi.CHAT_WITH_BOS if with_bos else 0))


def apply_chat_template(template: str, messages, *,
                        add_assistant: bool = False,
                        with_bos: bool = False) -> str:
    """Renders a conversation without a model: `template` is a family name
    (see chat_families()) or template text."""
    L = lib()
    arr, _keep = _messages(messages)
    needed = ctypes.c_size_t()
    err = _errbuf()
    cap = 1024
    while True:
        buf = ctypes.create_string_buffer(cap)
        st = L.fx_chat_apply_template(_bytes(template), arr, len(arr),
                                      _chat_flags(add_assistant, with_bos),
                                      buf, cap, ctypes.byref(needed), err,
                                      len(err))
        if st == Status.OK:
            return _text(buf.value)
        if st != Status.BUFFER_TOO_SMALL:
            raise FerroxError(st, _text(err.value))
        cap = needed.value


def _chat_ex(model_handle, template, messages, context, add_assistant,
             with_bos, now, bos_token, eos_token) -> str:
    """fx_chat_apply_ex; model_handle may be None when template is set."""
    L = lib()
    arr, _keep = _messages(messages or [])
    opts = _capi.ChatOptions()
    L.fx_chat_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
    opts.flags = _chat_flags(add_assistant, with_bos)
    # Locals, so that every string opts points to outlives the call.
    ctx = None if context is None else _cstr("context", _json_text(context))
    bos = None if bos_token is None else _cstr("bos_token", bos_token)
    eos = None if eos_token is None else _cstr("eos_token", eos_token)
    opts.context_json, opts.bos_token, opts.eos_token = ctx, bos, eos
    opts.now = _int_arg("now", now, 2**63 - 1, -2**63)
    tmpl = None if template is None else _cstr("template", template)
    return _sized_text(L.fx_chat_apply_ex, model_handle, tmpl,
                       arr if len(arr) else None, len(arr),
                       ctypes.byref(opts))


def render_chat_template(template: str, messages=None, *,
                         context: Any = None,
                         add_assistant: bool = False, with_bos: bool = False,
                         now: int = 0, bos_token: Optional[str] = None,
                         eos_token: Optional[str] = None) -> str:
    """Renders template text as transformers' apply_chat_template does
    (fx_chat_apply_ex): `context` holds extra template variables (tools,
    enable_thinking, ...), a dict or JSON object text, and may carry
    "messages" with any fields instead of `messages`; `now` is
    strftime_now's clock (seconds, 0: now). Without a model, bos_token and
    eos_token default to the family's usual texts (or "")."""
    return _chat_ex(None, template, messages, context, add_assistant,
                    with_bos, now, bos_token, eos_token)


def chat_stop_strings(template: str) -> list:
    """The texts that end an assistant turn in the template's family
    (template: a family name or template text), for stop strings."""
    L = lib()
    tmpl = _bytes(template)
    n = ctypes.c_size_t()
    cap = 8
    while True:
        out = (ctypes.c_char_p * cap)()
        st = L.fx_chat_stop_strings(tmpl, out, cap, ctypes.byref(n))
        if st == Status.OK:
            return [_text(out[i]) for i in range(n.value)]
        if st != Status.BUFFER_TOO_SMALL:
            raise FerroxError(st, "template not recognized")
        cap = n.value


def detect_chat_template(template: str) -> str:
    """The family name of a template text (or of a family name)."""
    fam = ctypes.c_char_p()
    st = lib().fx_chat_detect(None, _bytes(template), ctypes.byref(fam))
    if st != Status.OK:
        raise FerroxError(st, "template not recognized")
    return _text(fam.value or b"")


def chat_families() -> list:
    L = lib()
    return [L.fx_chat_family_name(i).decode()
            for i in range(L.fx_chat_family_count())]
