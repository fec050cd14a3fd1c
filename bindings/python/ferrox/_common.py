"""Status codes and the other enums, FerroxError, and the argument and
text helpers every module uses."""

import ctypes
import enum
import json as _json
import operator
from typing import Any, Sequence

from ._capi import lib

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
