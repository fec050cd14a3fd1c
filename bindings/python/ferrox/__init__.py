"""Python binding of ferrox (ctypes over the C API in include/ferrox.h).

    import ferrox
    with ferrox.Model("model.gguf") as model, ferrox.Batcher(model) as b:
        row = b.submit("Once upon a time", max_tokens=32, seed=42)
        for event in row:                     # steps the batcher as needed
            if isinstance(event, ferrox.Text):
                print(event.text, end="")

    # or, inside asyncio, cooperatively:
    async for event in row: ...

Ownership: Model, Batcher, Row and Lease each own one C handle and release
it in close()/release() (also via `with`). Closing twice is harmless. A
handle dropped without closing is reclaimed by the garbage collector as a
safety net: a Model or Batcher is freed there directly (nothing else can be
using it), while a Row or Lease only queues itself and the batcher
releases it at its next step, because the collector may run on any thread
and the batcher's calls must stay on one thread at a time.

Threads: no thread is ever started by the binding. Batcher calls are
serialized by a lock (the C library requires one thread at a time), except
Row.cancel(), which may be called from any thread at any time, even while
another thread is inside step(), as fx_cancel allows.
"""

import asyncio
import collections
import ctypes
import dataclasses
import enum
import itertools
import json as _json
import operator
import os
import threading
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _capi
from ._capi import lib

__all__ = [
    "Status", "Finish", "SpecialToken", "TokenType", "FerroxError", "Model",
    "ModelInfo", "TensorInfo", "LeaseState", "Batcher", "Row", "Lease",
    "Text", "Token", "Done", "Usage", "Completion", "ToolFormat",
    "apply_chat_template", "chat_families", "chat_stop_strings",
    "detect_chat_template", "json_schema_to_grammar", "render_chat_template",
    "tool_format_trigger", "tools_to_grammar", "version",
]


class _Enum(enum.IntEnum):
    """An IntEnum that prints as its name ("Finish.LENGTH"), on every
    Python: since 3.11 IntEnum's str() and format() give the bare number."""

    def __str__(self) -> str:
        return "%s.%s" % (type(self).__name__, self.name)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Status(_Enum):
    """fx_status: every fallible call's result (values fixed forever)."""
    OK = 0
    INVALID_ARG = 1
    NOMEM = 2
    IO = 3
    UNSUPPORTED = 4
    TRUNCATED = 5
    BAD_MAGIC = 6
    BAD_VERSION = 7
    TOO_LARGE = 8
    BAD_TYPE = 9
    BAD_TENSOR = 10
    BAD_OFFSET = 11
    BAD_ALIGNMENT = 12
    DUPLICATE = 13
    MISSING = 14
    BAD_SHAPE = 15
    BAD_HPARAMS = 16
    BUFFER_TOO_SMALL = 17
    BAD_VOCAB = 18
    BAD_TEMPLATE = 19
    STALE_HANDLE = 20
    REENTRANT = 21
    NO_ROOM = 22
    INTERNAL = 23
    GRAMMAR = 24
    ALL_BANNED = 25


class Finish(_Enum):
    """fx_finish_reason: why a row ended."""
    NONE = 0
    EOS = 1
    STOP = 2
    LENGTH = 3
    CANCELLED = 4
    ERROR = 5


class SpecialToken(_Enum):
    """fx_special_token: which special token Model.special_token finds."""
    BOS = 0
    EOS = 1
    UNK = 2
    SEP = 3
    PAD = 4
    EOT = 5
    EOM = 6
    MASK = 7


class TokenType(_Enum):
    """A token's GGUF type (tokenizer.ggml.token_type), from
    Model.token_type; UNDEFINED for an id outside the vocabulary."""
    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


class LeaseState(_Enum):
    """fx_lease_state: where a lease stands (Lease.state)."""
    NONE = 0
    PENDING = 1    # queued, or being computed
    PINNED = 2     # computed and pinned: rows continuing it adopt it
    UNPINNED = 3   # computed, nothing pinned: rows compute its tokens


class ToolFormat(_Enum):
    """fx_tool_format: how a model family writes a tool call."""
    HERMES = 0   # <tool_call>{"name": N, "arguments": {...}}</tool_call>
    LLAMA3 = 1   # {"name": N, "parameters": {...}}
    MISTRAL = 2  # [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]


_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1
_I32_MAX = 2**31 - 1


def _int_arg(name: str, value: Any, hi: int, lo: int = 0) -> int:
    """value as an int in lo..hi, checked here because ctypes wraps an
    integer that does not fit its C type (max_tokens=-1 would reach the
    library as 4294967295)."""
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError("ferrox: %s must be an int, not %s"
                        % (name, type(value).__name__)) from None
    if not lo <= n <= hi:
        raise ValueError("ferrox: %s=%d is out of range (%d..%d)"
                         % (name, n, lo, hi))
    return n


def _token(name: str, value: Any) -> int:
    """A token id: 0..2**31-1 (ids past the vocabulary are the library's
    to refuse)."""
    return _int_arg(name, value, _I32_MAX)


def _token_array(name: str, tokens: Sequence[int]) -> Any:
    return (ctypes.c_int32 * len(tokens))(*[_token(name, t) for t in tokens])


def _enum(cls, value):
    # A newer library may append codes this binding does not know yet; they
    # stay plain ints rather than failing the conversion.
    try:
        return cls(value)
    except ValueError:
        return value


class FerroxError(Exception):
    """A call failed: `status` is the Status, `message` the library's text
    (fx_model_errmsg, fx_batcher_errmsg or the errbuf of a load)."""

    def __init__(self, status, message=""):
        self.status = _enum(Status, status)
        self.message = message
        name = lib().fx_status_str(int(status)).decode()
        super().__init__("%s (%s)%s" % (
            getattr(self.status, "name", self.status), name,
            ": " + message if message else ""))


def version() -> str:
    """The linked library's version string, e.g. "0.1.0"."""
    return lib().fx_version_string().decode()


def _text(b: bytes) -> str:
    # The library promises UTF-8 that never splits a character; "replace"
    # only guards a host against a library bug turning into an exception in
    # the middle of its frame loop.
    return b.decode("utf-8", errors="replace")


def _bytes(s) -> bytes:
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def _cstr(name: str, s) -> bytes:
    """s as bytes for a string the library reads up to its NUL: a NUL
    inside would silently cut it there, so it raises instead."""
    b = _bytes(s)
    if b"\0" in b:
        raise ValueError("ferrox: %s contains a NUL byte" % name)
    return b


def _errbuf():
    return ctypes.create_string_buffer(1024)


# ---------------------------------------------------------------- events --

@dataclasses.dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    queue_seconds: float
    ttft_seconds: float
    total_seconds: float


@dataclasses.dataclass(frozen=True)
class Text:
    """A chunk of a row's output (never split inside a character).
    grammar_start: for a row with a lazy grammar, the byte offset in the
    row's output where its trigger starts, from the first Text that
    reaches it on; None before that and for every other row."""
    text: str
    grammar_start: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Token:
    """A generated token with its log-probability and the most likely
    alternatives, most likely first (requests with n_logprobs > 0)."""
    token: int
    logprob: float
    top: Tuple[Tuple[int, float], ...]


@dataclasses.dataclass(frozen=True)
class Done:
    """The row ended; always its last event."""
    finish: Finish
    status: Status          # why, when finish is Finish.ERROR
    stop_index: int         # STOP: which stop string; EOS: the token; or -1
    usage: Usage
    tokens: Tuple[int, ...]
    # Lazy grammar: where its trigger starts in the output, or None.
    grammar_start: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Completion:
    """Everything a row produced, from Row.result()."""
    text: str
    finish: Finish
    stop_index: int
    usage: Usage
    tokens: Tuple[int, ...]
    logprobs: Tuple[Token, ...]
    # Lazy grammar: the byte offset in the output (text.encode()) where
    # the grammar's trigger starts, or None if it never came.
    grammar_start: Optional[int] = None


def _start(ev):
    # -1 in C: no lazy grammar, or its trigger has not come yet.
    return None if ev.grammar_start < 0 else ev.grammar_start


def _convert(ev: _capi.Event):
    # Pointers in the event are valid only until the next fx_poll, so
    # everything is copied out here.
    if ev.type == _capi.EVENT_TEXT:
        return Text(_text(ctypes.string_at(ev.text, ev.text_len)
                          if ev.text_len else b""), _start(ev))
    if ev.type == _capi.EVENT_TOKEN:
        top = tuple((ev.top[i].token, ev.top[i].logprob)
                    for i in range(ev.n_top))
        return Token(ev.token, ev.logprob, top)
    if ev.type == _capi.EVENT_DONE:
        u = ev.usage
        return Done(_enum(Finish, ev.finish), _enum(Status, ev.status),
                    ev.stop_index,
                    Usage(u.prompt_tokens, u.cached_tokens,
                          u.completion_tokens, u.queue_seconds,
                          u.ttft_seconds, u.total_seconds),
                    tuple(ev.tokens[:ev.n_tokens]) if ev.n_tokens else (),
                    _start(ev))
    return None


# ----------------------------------------------------------------- model --

@dataclasses.dataclass(frozen=True)
class ModelInfo:
    arch: str
    name: str
    gguf_version: int
    vocab_only: bool
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_rot: int
    rope_freq_base: float
    rms_norm_eps: float
    n_params: int
    n_tensors: int
    n_meta: int
    file_size: int


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One entry of the file's tensor table (fx_tensor_info)."""
    name: str
    type: int               # the ggml type id stored in the file
    type_name: str          # "f32", "q8_0", ...
    dims: Tuple[int, ...]   # n_dims of them; dims[0] is the contiguous one
    offset: int             # byte offset of the data within the file
    n_bytes: int


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


class Model:
    """A loaded GGUF model (fx_model). Close it, or use `with`.

    Tokenizer and chat calls may come from several threads; they are
    serialized on the model so that the error message read after a failure
    belongs to that failure (fx_model_errmsg is per model, not per call).
    """

    def __init__(self, path, *, vocab_only: bool = False,
                 mapped_weights: bool = False):
        """vocab_only: metadata and vocabulary only (enough to tokenize).
        mapped_weights: compute from the file mapping, copying nothing
        (FX_MODEL_MAPPED_WEIGHTS: shared between processes, slower
        decode)."""
        L = lib()
        params = _capi.ModelParams()
        _capi.init(L, "model_params", params)
        if vocab_only:
            params.flags |= _capi.MODEL_VOCAB_ONLY
        if mapped_weights:
            params.flags |= _capi.MODEL_MAPPED_WEIGHTS
        out = ctypes.c_void_p()
        err = _errbuf()
        st = L.fx_model_load(os.fsencode(os.fspath(path)),
                             ctypes.byref(params), ctypes.byref(out), err,
                             len(err))
        if st != Status.OK:
            raise FerroxError(st, _text(err.value))
        self._handle = out.value
        self._lock = threading.Lock()
        # Batchers open on this model. fx_model_free with batchers alive
        # only marks the model, but that mark is not atomic against a
        # batcher being freed on another thread, so the binding keeps the
        # count itself and frees the model after the last batcher.
        self._batchers = 0
        self._closed = False

    def close(self) -> None:
        """Releases the model (after the last batcher using it closes)."""
        with self._lock:
            self._closed = True
            self._maybe_free()

    def _maybe_free(self):
        if self._closed and self._batchers == 0 and self._handle:
            lib().fx_model_free(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Safety net only (see the module docstring); a Batcher keeps its
        # Model alive, so this never runs while one uses the handle.
        if getattr(self, "_handle", None):
            lib().fx_model_free(self._handle)
            self._handle = None

    def _check(self):
        if self._closed:
            raise ValueError("ferrox: the model is closed")

    def _call(self, fn, *args, ok=(Status.OK,)):
        """fn(handle, *args) under the model's lock; a status outside `ok`
        raises with the model's message, read under the same lock."""
        with self._lock:
            self._check()
            st = fn(self._handle, *args)
            if st not in ok:
                raise FerroxError(st, _text(
                    lib().fx_model_errmsg(self._handle)))
            return st

    @property
    def info(self) -> ModelInfo:
        L = lib()
        i = _capi.ModelInfo()
        _capi.init(L, "model_info", i)
        self._call(L.fx_model_get_info, ctypes.byref(i))
        return ModelInfo(
            _text(i.arch or b""), _text(i.name or b""), i.gguf_version,
            bool(i.vocab_only), i.n_vocab, i.n_ctx_train, i.n_embd,
            i.n_layer, i.n_head, i.n_head_kv, i.n_ff, i.n_rot,
            i.rope_freq_base, i.rms_norm_eps, i.n_params, i.n_tensors,
            i.n_meta, i.file_size)

    def metadata(self) -> Dict[str, str]:
        """The file's metadata in file order, each value as the library
        writes it as text: numbers in decimal, strings quoted with C
        escapes, arrays summarized (fx_model_meta_format)."""
        L = lib()
        out = {}
        with self._lock:
            self._check()
            for i in range(L.fx_model_meta_count(self._handle)):
                # Keys live as long as the model: copied at once anyway.
                key = _text(L.fx_model_meta_key(self._handle, i) or b"")
                need = ctypes.c_size_t()
                cap = 256
                while True:
                    buf = ctypes.create_string_buffer(cap)
                    st = L.fx_model_meta_format(self._handle, i, buf, cap,
                                                ctypes.byref(need))
                    if st == Status.OK:
                        break
                    if st != Status.BUFFER_TOO_SMALL:
                        raise FerroxError(st, _text(
                            L.fx_model_errmsg(self._handle)))
                    cap = need.value
                out[key] = _text(buf.value)
        return out

    def tensors(self) -> "list[TensorInfo]":
        """The file's tensor table, in file order."""
        L = lib()
        out = []
        with self._lock:
            self._check()
            for i in range(L.fx_model_tensor_count(self._handle)):
                t = _capi.TensorInfo()
                _capi.init(L, "tensor_info", t)
                st = L.fx_model_tensor_get(self._handle, i, ctypes.byref(t))
                if st != Status.OK:
                    raise FerroxError(st, _text(
                        L.fx_model_errmsg(self._handle)))
                out.append(TensorInfo(
                    _text(t.name or b""), t.type, _text(t.type_name or b""),
                    tuple(t.dims[:t.n_dims]), t.offset, t.n_bytes))
        return out

    @property
    def vocab_size(self) -> int:
        self._check()
        return lib().fx_model_vocab_size(self._handle)

    def special_token(self, which: SpecialToken) -> Optional[int]:
        """The id of a special token, or None if the vocabulary has none.
        A value that is not a SpecialToken raises ValueError."""
        which = SpecialToken(which)
        self._check()
        t = lib().fx_model_special_token(self._handle, int(which))
        return None if t < 0 else t

    def is_eog(self, token: int) -> bool:
        token = _token("token", token)
        self._check()
        return bool(lib().fx_token_is_eog(self._handle, token))

    def token_type(self, token: int) -> TokenType:
        token = _token("token", token)
        self._check()
        return _enum(TokenType, lib().fx_token_type(self._handle, token))

    def tokenize(self, text: Union[str, bytes], *, add_special: bool = True,
                 parse_special: bool = False) -> list:
        data = _bytes(text)
        flags = ((_capi.TOKENIZE_ADD_SPECIAL if add_special else 0)
                 | (_capi.TOKENIZE_PARSE_SPECIAL if parse_special else 0))
        n = ctypes.c_size_t()
        cap = len(data) + 4  # rarely more tokens than bytes; else retried
        while True:
            buf = (ctypes.c_int32 * cap)()
            st = self._call(lib().fx_tokenize, data, len(data), flags, buf,
                            cap, ctypes.byref(n),
                            ok=(Status.OK, Status.BUFFER_TOO_SMALL))
            if st == Status.OK:
                return buf[:n.value]
            cap = n.value

    def _sized_bytes(self, fn, *args) -> bytes:
        """Calls a fill-a-buffer function twice at most: the first call
        reports the size needed when the guess was too small."""
        n = ctypes.c_size_t()
        cap = 256
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = self._call(fn, *args, buf, cap, ctypes.byref(n),
                            ok=(Status.OK, Status.BUFFER_TOO_SMALL))
            if st == Status.OK:
                return buf.raw[:n.value]
            cap = n.value

    def token_to_piece(self, token: int, *,
                       render_special: bool = False) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        flags = _capi.DETOKENIZE_RENDER_SPECIAL if render_special else 0
        return self._sized_bytes(lib().fx_token_to_piece,
                                 _token("token", token), flags)

    def detokenize_bytes(self, tokens: Sequence[int], *,
                         remove_special: bool = False,
                         render_special: bool = False) -> bytes:
        flags = ((_capi.DETOKENIZE_REMOVE_SPECIAL if remove_special else 0)
                 | (_capi.DETOKENIZE_RENDER_SPECIAL if render_special else 0))
        arr = _token_array("tokens", tokens)
        return self._sized_bytes(lib().fx_detokenize, arr, len(tokens),
                                 flags)

    def detokenize(self, tokens: Sequence[int], **kw) -> str:
        return _text(self.detokenize_bytes(tokens, **kw))

    def apply_chat_template(self, messages, *,
                            template: Optional[str] = None,
                            add_assistant: bool = False,
                            with_bos: bool = False) -> str:
        """Renders messages ([{"role": ..., "content": ...}] or (role,
        content) pairs) with the model's template, or with `template` (a
        family name such as "chatml", or template text)."""
        arr, _keep = _messages(messages)
        tmpl = _bytes(template) if template is not None else None
        needed = ctypes.c_size_t()
        cap = 1024
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = self._call(lib().fx_chat_apply, tmpl, arr, len(arr),
                            _chat_flags(add_assistant, with_bos), buf, cap,
                            ctypes.byref(needed),
                            ok=(Status.OK, Status.BUFFER_TOO_SMALL))
            if st == Status.OK:
                return _text(buf.value)
            cap = needed.value

    def render_chat_template(self, messages=None, *,
                             template: Optional[str] = None,
                             context: Any = None,
                             add_assistant: bool = False,
                             with_bos: bool = False, now: int = 0,
                             bos_token: Optional[str] = None,
                             eos_token: Optional[str] = None) -> str:
        """render_chat_template with the model's template (template None)
        or `template`, and the model's BOS/EOS texts unless given."""
        with self._lock:
            self._check()
            return _chat_ex(self._handle, template, messages, context,
                            add_assistant, with_bos, now, bos_token,
                            eos_token)

    def chat_family(self, template: Optional[str] = None) -> str:
        """The chat-template family of the model's template (or of
        `template`), e.g. "llama2"."""
        fam = ctypes.c_char_p()
        self._call(lib().fx_chat_detect,
                   _bytes(template) if template is not None else None,
                   ctypes.byref(fam))
        return _text(fam.value or b"")

    def chat_stop_tokens(self, template: Optional[str] = None) -> list:
        """Token ids that end an assistant turn under the chat template."""
        tmpl = _bytes(template) if template is not None else None
        n = ctypes.c_size_t()
        cap = 8
        while True:
            ids = (ctypes.c_int32 * cap)()
            st = self._call(lib().fx_model_chat_stop_tokens, tmpl, ids, cap,
                            ctypes.byref(n),
                            ok=(Status.OK, Status.BUFFER_TOO_SMALL))
            if st == Status.OK:
                return ids[:n.value]
            cap = n.value


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


def _sized_text(fn, *args) -> str:
    """fn(*args, buf, size, &needed, errbuf, errbuf_size), the calls that
    write NUL-terminated text and their message to an errbuf: once more
    with the size it asked for if the first buffer was too small."""
    needed = ctypes.c_size_t()
    err = _errbuf()
    cap = 1024
    while True:
        buf = ctypes.create_string_buffer(cap)
        st = fn(*args, buf, cap, ctypes.byref(needed), err, len(err))
        if st == Status.OK:
            return _text(buf.value)
        if st != Status.BUFFER_TOO_SMALL:
            raise FerroxError(st, _text(err.value))
        cap = needed.value


def _json_text(value) -> bytes:
    """JSON given as text (str or bytes) is passed as is; anything else is
    serialized."""
    if isinstance(value, (str, bytes, bytearray)):
        return _bytes(value)
    return _json.dumps(value).encode("utf-8")


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


# --------------------------------------------------------------- batcher --

class _RowState:
    """The batcher's side of a row: its handle and undelivered events.
    Kept apart from Row so that the batcher never keeps a Row alive, and a
    Row dropped by the host can be noticed (Row.__del__)."""
    __slots__ = ("uid", "handle", "events", "ended")

    def __init__(self, uid, handle):
        self.uid = uid  # the request's user pointer, which routes events
        self.handle = handle
        self.events = collections.deque()
        # True once the row's DONE was polled or the row was released:
        # its C handle is stale from then on.
        self.ended = False


class Batcher:
    """Rows in flight over one model (fx_batcher). Close it, or use `with`.

    Keyword arguments left at None keep the library's defaults
    (fx_batcher_params_init).
    """

    def __init__(self, model: Model, *, max_rows: Optional[int] = None,
                 max_step_tokens: Optional[int] = None,
                 n_ctx: Optional[int] = None,
                 block_tokens: Optional[int] = None,
                 kv_bytes: Optional[int] = None,
                 n_threads: Optional[int] = None,
                 prefix_cache: bool = True, fast: bool = False):
        L = lib()
        p = _capi.BatcherParams()
        _capi.init(L, "batcher_params", p)
        for name, value, hi in (("max_rows", max_rows, _U32_MAX),
                                ("max_step_tokens", max_step_tokens, _U32_MAX),
                                ("n_ctx", n_ctx, _U32_MAX),
                                ("block_tokens", block_tokens, _U32_MAX),
                                ("kv_bytes", kv_bytes, _U64_MAX),
                                ("n_threads", n_threads, _U32_MAX)):
            if value is not None:
                setattr(p, name, _int_arg(name, value, hi))
        if not prefix_cache:
            p.flags |= _capi.BATCHER_NO_PREFIX_CACHE
        if fast:
            p.flags |= _capi.BATCHER_FAST
        self._handle = None
        out = ctypes.c_void_p()
        err = _errbuf()
        # Under the model's lock: creating and freeing batchers updates a
        # plain counter inside the C model.
        with model._lock:
            model._check()
            st = L.fx_batcher_create(model._handle, ctypes.byref(p),
                                     ctypes.byref(out), err, len(err))
            if st == Status.OK:
                model._batchers += 1
        if st != Status.OK:
            raise FerroxError(st, _text(err.value))
        self._model = model
        self._handle = out.value
        # _lock: the one-thread-at-a-time rule for every call but
        # fx_cancel. _free_lock: fx_cancel runs outside _lock (it may
        # overlap fx_step) but never after fx_batcher_free.
        self._lock = threading.RLock()
        self._free_lock = threading.Lock()
        self._rows: Dict[int, _RowState] = {}  # request user id -> state
        self._ids = itertools.count(1)  # 0 would be a NULL user pointer
        # Rows and leases dropped without release(), left by __del__ for
        # the batcher's own thread (list.append is atomic under the GIL).
        self._orphan_rows: "list[_RowState]" = []
        self._orphan_leases: "list[int]" = []

    def close(self) -> None:
        """Ends every row without events and frees the batcher."""
        model = self._model
        with self._lock, self._free_lock, model._lock:
            if self._handle is None:
                return
            lib().fx_batcher_free(self._handle)
            self._handle = None
            for state in self._rows.values():
                state.ended = True
            self._rows.clear()
            model._batchers -= 1
            model._maybe_free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()

    def _check(self):
        if self._handle is None:
            raise ValueError("ferrox: the batcher is closed")

    def _fail(self, st):
        raise FerroxError(st, _text(lib().fx_batcher_errmsg(self._handle)))

    @property
    def pending(self) -> int:
        """Rows queued or running."""
        with self._lock:
            self._check()
            return lib().fx_batcher_pending(self._handle)

    def submit(self, prompt: Union[str, bytes, Sequence[int]], *,
               max_tokens: Optional[int] = None,
               temperature: Optional[float] = None,
               top_k: Optional[int] = None, top_p: Optional[float] = None,
               min_p: Optional[float] = None,
               typical_p: Optional[float] = None, seed: Optional[int] = None,
               repeat_penalty: Optional[float] = None,
               presence_penalty: Optional[float] = None,
               frequency_penalty: Optional[float] = None,
               penalty_last_n: Optional[int] = None,
               stop: Sequence[str] = (), stop_tokens: Sequence[int] = (),
               logit_bias: Optional[Dict[int, float]] = None,
               grammar: Optional[str] = None,
               grammar_root: Optional[str] = None,
               grammar_triggers: Sequence[str] = (),
               grammar_trigger_tokens: Sequence[int] = (),
               json: bool = False,
               n_logprobs: Optional[int] = None, ignore_eos: bool = False,
               parse_special: bool = False, no_bos: bool = False,
               lease: Optional["Lease"] = None) -> "Row":
        """Queues a request (text, or a list of token ids) and returns its
        Row at once. None keeps the library's default for that setting.
        grammar_triggers / grammar_trigger_tokens make the grammar (or
        json) lazy: the row samples freely until its output contains one
        of the strings (or samples one of the tokens), and the grammar,
        which must start with the trigger, holds it from there (see
        tools_to_grammar). Raises FerroxError (e.g. Status.GRAMMAR for a
        grammar that does not compile, with the line and column in the
        message)."""
        L = lib()
        r = _capi.Request()
        _capi.init(L, "request", r)
        # Every ctypes object the request points to stays referenced by a
        # local until fx_submit returns; the library copies them all.
        if isinstance(prompt, (str, bytes, bytearray)):
            text = _bytes(prompt)
            r.prompt, r.prompt_len = text, len(text)
        else:
            toks = _token_array("prompt", prompt)
            r.prompt_tokens, r.n_prompt_tokens = toks, len(prompt)
        for name, count, hi in (("max_tokens", max_tokens, _U32_MAX),
                                ("top_k", top_k, _U32_MAX),
                                ("seed", seed, _U64_MAX),
                                ("penalty_last_n", penalty_last_n, _U32_MAX),
                                ("n_logprobs", n_logprobs, _U32_MAX)):
            if count is not None:
                setattr(r, name, _int_arg(name, count, hi))
        for name, value in (("temperature", temperature), ("top_p", top_p),
                            ("min_p", min_p), ("typical_p", typical_p),
                            ("repeat_penalty", repeat_penalty),
                            ("presence_penalty", presence_penalty),
                            ("frequency_penalty", frequency_penalty)):
            if value is not None:
                setattr(r, name, value)
        stops = [_bytes(s) for s in stop]
        stop_arr = (ctypes.c_char_p * len(stops))(*stops)
        if stops:
            r.stop, r.n_stop = stop_arr, len(stops)
        stop_tok = _token_array("stop_tokens", stop_tokens)
        if stop_tokens:
            r.stop_tokens, r.n_stop_tokens = stop_tok, len(stop_tokens)
        bias = logit_bias or {}
        bias_arr = (_capi.LogitBias * len(bias))(
            *[_capi.LogitBias(_token("logit_bias token", t), b)
              for t, b in bias.items()])
        if bias:
            r.logit_bias, r.n_logit_bias = bias_arr, len(bias)
        if grammar is not None:
            g = _bytes(grammar)
            r.grammar, r.grammar_len = g, len(g)
        if grammar_root is not None:
            r.grammar_root = _bytes(grammar_root)
        if isinstance(grammar_triggers, (str, bytes)):
            # A bare string would become one trigger per character.
            raise TypeError("ferrox: grammar_triggers is a sequence of "
                            "strings, not one string")
        triggers = [_cstr("a grammar trigger", t) for t in grammar_triggers]
        trig_arr = (ctypes.c_char_p * len(triggers))(*triggers)
        if triggers:
            r.grammar_triggers = trig_arr
            r.n_grammar_triggers = len(triggers)
        trig_tok = _token_array("grammar_trigger_tokens",
                                grammar_trigger_tokens)
        if grammar_trigger_tokens:
            r.grammar_trigger_tokens = trig_tok
            r.n_grammar_trigger_tokens = len(grammar_trigger_tokens)
        r.flags |= ((_capi.REQUEST_JSON if json else 0)
                    | (_capi.REQUEST_IGNORE_EOS if ignore_eos else 0)
                    | (_capi.REQUEST_PARSE_SPECIAL if parse_special else 0)
                    | (_capi.REQUEST_NO_BOS if no_bos else 0))
        with self._lock:
            self._check()
            if lease is not None:
                r.lease = lease._live_handle(self)
            uid = next(self._ids)
            r.user = uid
            out = ctypes.c_void_p()
            st = L.fx_submit(self._handle, ctypes.byref(r), ctypes.byref(out))
            if st != Status.OK:
                self._fail(st)
            state = _RowState(uid, out.value)
            self._rows[uid] = state
            return Row(self, state)

    def lease(self, text: Union[str, bytes], *, parse_special: bool = False,
              no_bos: bool = False) -> "Lease":
        """Pins a prefix many rows share (fx_lease_create); it is computed
        by the following steps. Pass it to submit(lease=...)."""
        data = _bytes(text)
        flags = ((_capi.REQUEST_PARSE_SPECIAL if parse_special else 0)
                 | (_capi.REQUEST_NO_BOS if no_bos else 0))
        with self._lock:
            self._check()
            out = ctypes.c_void_p()
            st = lib().fx_lease_create(self._handle, data, len(data), flags,
                                       ctypes.byref(out))
            if st != Status.OK:
                self._fail(st)
            return Lease(self, out.value)

    def _release_orphans(self):
        L = lib()
        while self._orphan_rows:
            state = self._orphan_rows.pop()
            if not state.ended:
                state.ended = True
                self._rows.pop(state.uid, None)
                L.fx_row_release(self._handle, state.handle)
        while self._orphan_leases:
            L.fx_lease_release(self._handle, self._orphan_leases.pop())

    def _dispatch(self) -> int:
        """Routes every queued event to its row; returns the status of the
        poll that found none (FX_OK unless polling itself failed)."""
        L = lib()
        ev = _capi.Event()
        st = ctypes.c_int(Status.OK)
        # The binding's own size of fx_event: the library writes exactly
        # that much, so a newer library never writes past it.
        while L.fx_poll_sized(self._handle, ctypes.byref(ev),
                              ctypes.sizeof(ev), ctypes.byref(st)):
            state = self._rows.get(ev.user)
            if state is None:
                continue  # a row released after the event was queued
            converted = _convert(ev)
            if converted is None:
                continue  # an event type newer than this binding
            state.events.append(converted)
            if isinstance(converted, Done):
                state.ended = True
                del self._rows[ev.user]
        return st.value

    def step(self) -> None:
        """One bounded tick (fx_step); the events it produces are routed to
        their rows. Raises FerroxError on a batcher-wide failure."""
        with self._lock:
            self._check()
            self._release_orphans()
            st = lib().fx_step(self._handle)
            # Events produced before a failure still reach their rows.
            poll_st = self._dispatch()
            if st != Status.OK:
                self._fail(st)
            if poll_st != Status.OK:
                self._fail(poll_st)

    def run(self) -> None:
        """Steps until no row is queued or running."""
        while self.pending:
            self.step()

    def _step_for(self, state):
        """Steps on behalf of a row that has no event waiting."""
        self.step()
        if not state.events and not state.ended and self.pending == 0:
            # Nothing is left to run yet the row never ended: a library
            # bug. Raising beats spinning the host's loop forever.
            raise FerroxError(Status.INTERNAL, "row has not ended but the "
                              "batcher has nothing pending")

    def _cancel(self, state):
        with self._free_lock:
            if self._handle is None or state.ended:
                return
            st = lib().fx_cancel(self._handle, state.handle)
        # STALE_HANDLE: the row finished in a step that raced this call; it
        # has ended either way, which is what the caller asked for.
        if st not in (Status.OK, Status.STALE_HANDLE):
            raise FerroxError(st, "fx_cancel failed")

    def _release(self, state):
        with self._lock:
            if self._handle is None or state.ended:
                return
            state.ended = True
            state.events.clear()
            self._rows.pop(state.uid, None)
            st = lib().fx_row_release(self._handle, state.handle)
            if st != Status.OK:
                self._fail(st)


class Row:
    """One request in a batcher. Iterate it (`for ev in row`, or `async
    for ev in row`) for its events: Text, Token (with n_logprobs) and
    finally Done. Iterating steps the batcher when the row has no event
    waiting, which advances every other row too."""

    def __init__(self, batcher: Batcher, state: _RowState):
        self._batcher = batcher
        self._state = state

    @property
    def done(self) -> bool:
        """True once the row ended (its Done may still be unread)."""
        return self._state.ended

    def _next(self):
        state = self._state
        return state.events.popleft() if state.events else None

    def __iter__(self):
        return self.events()

    def events(self):
        """The row's events, stepping the batcher as needed."""
        while True:
            ev = self._next()
            if ev is not None:
                yield ev
                if isinstance(ev, Done):
                    return
                continue
            if self._state.ended:
                return  # released: no more events
            self._batcher._step_for(self._state)

    def __aiter__(self):
        return self.stream()

    async def stream(self):
        """The row's events for asyncio: one step at a time, yielding to
        the event loop after each (await asyncio.sleep(0)) so other tasks
        run between steps. No thread is involved; a step blocks the loop
        for at most one bounded tick (max_step_tokens). Cancelling the task
        that iterates cancels the row."""
        try:
            while True:
                ev = self._next()
                if ev is not None:
                    yield ev
                    if isinstance(ev, Done):
                        return
                    continue
                if self._state.ended:
                    return
                self._batcher._step_for(self._state)
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancel()
            raise

    @staticmethod
    def _collect(events):
        """(Done or None, text, Token events) from an event iterator."""
        parts, logprobs = [], []
        for ev in events:
            if isinstance(ev, Text):
                parts.append(ev.text)
            elif isinstance(ev, Token):
                logprobs.append(ev)
            else:
                return ev, "".join(parts), tuple(logprobs)
        return None, "".join(parts), tuple(logprobs)

    def _completion(self, done, text, logprobs) -> Completion:
        if done is None:
            raise ValueError("ferrox: the row was released before it ended")
        if done.finish == Finish.ERROR:
            raise FerroxError(done.status, "the row failed")
        return Completion(text, done.finish, done.stop_index, done.usage,
                          done.tokens, logprobs, done.grammar_start)

    def result(self) -> Completion:
        """Runs the row to its end and returns what it produced (from the
        events not yet read). Raises FerroxError if the row failed."""
        return self._completion(*self._collect(self.events()))

    async def aresult(self) -> Completion:
        """result() for asyncio, stepping cooperatively like stream()."""
        parts, logprobs = [], []
        async for ev in self.stream():
            if isinstance(ev, Text):
                parts.append(ev.text)
            elif isinstance(ev, Token):
                logprobs.append(ev)
            else:
                return self._completion(ev, "".join(parts), tuple(logprobs))
        return self._completion(None, "", ())

    def cancel(self) -> None:
        """Asks the row to end (Done with Finish.CANCELLED at the next
        step, unless it finishes first). Callable from any thread."""
        self._batcher._cancel(self._state)

    def release(self) -> None:
        """The host is done with the row: it is cancelled if running and
        delivers no more events. Calling it again, or after the row ended,
        does nothing."""
        self._batcher._release(self._state)

    close = release

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        state = getattr(self, "_state", None)
        if state is not None and not state.ended:
            self._batcher._orphan_rows.append(state)


class Lease:
    """A prefix pinned in the KV cache (fx_lease). Release it, or use
    `with`; rows already using it are unaffected."""

    def __init__(self, batcher: Batcher, handle):
        self._batcher = batcher
        self._handle = handle

    def _live_handle(self, batcher):
        if self._handle is None:
            raise ValueError("ferrox: the lease is released")
        if batcher is not self._batcher:
            raise ValueError("ferrox: the lease belongs to another batcher")
        return self._handle

    @property
    def state(self) -> LeaseState:
        """Where the lease stands (fx_lease_status). Raises ValueError once
        released, FerroxError (Status.STALE_HANDLE) if the library no longer
        knows it."""
        b = self._batcher
        with b._lock:
            b._check()
            if self._handle is None:
                raise ValueError("ferrox: the lease is released")
            st_out = ctypes.c_int(0)
            st = lib().fx_lease_status(b._handle, self._handle,
                                       ctypes.byref(st_out))
            if st != Status.OK:
                # fx_lease_status records no message; the status says it.
                raise FerroxError(st)
            return _enum(LeaseState, st_out.value)

    @property
    def ready(self) -> bool:
        """True once the prefix is computed (pinned or not: see pinned)."""
        b = self._batcher
        with b._lock:
            b._check()
            return (self._handle is not None
                    and bool(lib().fx_lease_ready(b._handle, self._handle)))

    @property
    def pinned(self) -> bool:
        """True while the prefix's blocks are pinned in the KV cache."""
        b = self._batcher
        with b._lock:
            b._check()
            return (self._handle is not None
                    and bool(lib().fx_lease_pinned(b._handle, self._handle)))

    def release(self) -> None:
        b = self._batcher
        with b._lock:
            if self._handle is None or b._handle is None:
                self._handle = None
                return
            handle, self._handle = self._handle, None
            st = lib().fx_lease_release(b._handle, handle)
            if st != Status.OK:
                b._fail(st)

    close = release

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self._batcher._orphan_leases.append(self._handle)
