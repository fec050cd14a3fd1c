"""The batcher, its rows and leases."""

import asyncio
import collections
import ctypes
import itertools
import threading
from typing import Dict, Optional, Sequence, Union

from . import _capi
from ._capi import lib
from ._common import (FerroxError, Finish, LeaseState, Status, _U32_MAX,
                      _U64_MAX, _bytes, _cstr, _enum, _errbuf, _int_arg, _text,
                      _token, _token_array)
from ._events import Completion, Done, Text, Token, _convert
from ._model import Model

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
                 prefix_cache: bool = True, fast: bool = False,
                 kv_f16: bool = False):
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
        if kv_f16:
            p.flags |= _capi.BATCHER_KV_F16
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
