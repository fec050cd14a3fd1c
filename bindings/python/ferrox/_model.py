"""Models: loading, information, the tokenizer and chat templates."""

import ctypes
import dataclasses
import os
import threading
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from . import _capi
from ._capi import lib
from ._common import (FerroxError, SpecialToken, Status, TokenType, _bytes,
                      _enum, _errbuf, _text, _token, _token_array)
from ._chat import _chat_ex, _chat_flags, _messages

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


class Model:
    """A loaded GGUF model (fx_model). Close it, or use `with`.

    Tokenizer and chat calls may come from several threads; they are
    serialized on the model so that the error message read after a failure
    belongs to that failure (fx_model_errmsg is per model, not per call).
    """

    def __init__(self, path, *, vocab_only: bool = False,
                 mapped_weights: bool = False, eager_copy: bool = False):
        """vocab_only: metadata and vocabulary only (enough to tokenize).
        mapped_weights: compute from the file mapping, copying nothing
        (FX_MODEL_MAPPED_WEIGHTS: shared between processes, slower
        decode).
        eager_copy: make the copy of the weights whole at the first
        Batcher (FX_MODEL_EAGER_COPY), not a slice in each of its first
        steps: a slower start, every step at full speed."""
        L = lib()
        params = _capi.ModelParams()
        _capi.init(L, "model_params", params)
        if vocab_only:
            params.flags |= _capi.MODEL_VOCAB_ONLY
        if mapped_weights:
            params.flags |= _capi.MODEL_MAPPED_WEIGHTS
        if eager_copy:
            params.flags |= _capi.MODEL_EAGER_COPY
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
