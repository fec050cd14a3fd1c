"""What a row produces: Text, Token and Done events, Usage, Completion."""

import ctypes
import dataclasses
from typing import Optional, Tuple

from . import _capi
from ._common import Finish, Status, _enum, _text

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
