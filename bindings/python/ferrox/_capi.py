"""ctypes declarations of include/ferrox.h.

Every structure mirrors the header field for field. The ones that have an
_init function are initialized through the exported fx_*_init_sized with
ctypes.sizeof of the structure here (the header's fx_*_init are inline and
pass the C sizeof, which ctypes cannot see). The library then writes only
inside that size, and struct_size tells it which layout this binding has;
the test suite checks that the library's defaults land on the fields
declared here, so a layout that drifted from the header fails a test
instead of corrupting memory.
"""

import ctypes
import ctypes.util
import os
import threading

c_int32_p = ctypes.POINTER(ctypes.c_int32)

# The ABI major this binding was written against (FX_VERSION_MAJOR). While
# it is 0 a major bump means a break, so a different major is refused.
ABI_MAJOR = 0


class Allocator(ctypes.Structure):
    # The binding always passes the C library's allocator (all NULL); the
    # fields exist only so the enclosing structures have the right layout.
    _fields_ = [
        ("malloc_fn", ctypes.c_void_p),
        ("realloc_fn", ctypes.c_void_p),
        ("free_fn", ctypes.c_void_p),
        ("user", ctypes.c_void_p),
    ]


class ModelParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("allocator", Allocator),
        ("log_fn", ctypes.c_void_p),
        ("log_user", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("arch", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("gguf_version", ctypes.c_uint32),
        ("vocab_only", ctypes.c_uint32),
        ("n_vocab", ctypes.c_uint32),
        ("n_ctx_train", ctypes.c_uint32),
        ("n_embd", ctypes.c_uint32),
        ("n_layer", ctypes.c_uint32),
        ("n_head", ctypes.c_uint32),
        ("n_head_kv", ctypes.c_uint32),
        ("n_ff", ctypes.c_uint32),
        ("n_rot", ctypes.c_uint32),
        ("rope_freq_base", ctypes.c_float),
        ("rms_norm_eps", ctypes.c_float),
        ("n_params", ctypes.c_uint64),
        ("n_tensors", ctypes.c_uint64),
        ("n_meta", ctypes.c_uint64),
        ("file_size", ctypes.c_uint64),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_uint32),
        ("type_name", ctypes.c_char_p),
        ("n_dims", ctypes.c_uint32),
        ("dims", ctypes.c_uint64 * 4),
        ("offset", ctypes.c_uint64),
        ("n_bytes", ctypes.c_uint64),
    ]


class BatcherParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("max_rows", ctypes.c_uint32),
        ("max_step_tokens", ctypes.c_uint32),
        ("n_ctx", ctypes.c_uint32),
        ("block_tokens", ctypes.c_uint32),
        ("kv_bytes", ctypes.c_uint64),
        ("n_threads", ctypes.c_uint32),
        ("allocator", Allocator),
        ("log_fn", ctypes.c_void_p),
        ("log_user", ctypes.c_void_p),
        ("log_level", ctypes.c_int),
    ]


class LogitBias(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("bias", ctypes.c_float)]


class TokenLogprob(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("logprob", ctypes.c_float)]


class Request(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("prompt", ctypes.c_char_p),
        ("prompt_len", ctypes.c_size_t),
        ("prompt_tokens", c_int32_p),
        ("n_prompt_tokens", ctypes.c_size_t),
        ("max_tokens", ctypes.c_uint32),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_uint32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_size_t),
        ("stop_tokens", c_int32_p),
        ("n_stop_tokens", ctypes.c_size_t),
        ("lease", ctypes.c_void_p),
        ("user", ctypes.c_void_p),
        ("grammar", ctypes.c_char_p),
        ("grammar_len", ctypes.c_size_t),
        ("grammar_root", ctypes.c_char_p),
        ("typical_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("penalty_last_n", ctypes.c_uint32),
        ("logit_bias", ctypes.POINTER(LogitBias)),
        ("n_logit_bias", ctypes.c_size_t),
        ("n_logprobs", ctypes.c_uint32),
        ("grammar_triggers", ctypes.POINTER(ctypes.c_char_p)),
        ("n_grammar_triggers", ctypes.c_size_t),
        ("grammar_trigger_tokens", c_int32_p),
        ("n_grammar_trigger_tokens", ctypes.c_size_t),
    ]


class Usage(ctypes.Structure):
    _fields_ = [
        ("prompt_tokens", ctypes.c_uint32),
        ("cached_tokens", ctypes.c_uint32),
        ("completion_tokens", ctypes.c_uint32),
        ("queue_seconds", ctypes.c_double),
        ("ttft_seconds", ctypes.c_double),
        ("total_seconds", ctypes.c_double),
    ]


class Event(ctypes.Structure):
    # fx_event as the header has it now, the first layout plus
    # grammar_start, polled with fx_poll_sized and this structure's size:
    # only a size that covers grammar_start gets it filled. text is
    # c_void_p, not c_char_p: it is not NUL-terminated and may contain NUL
    # bytes, so it is read with ctypes.string_at(text, len).
    _fields_ = [
        ("type", ctypes.c_int),
        ("row", ctypes.c_void_p),
        ("user", ctypes.c_void_p),
        ("text", ctypes.c_void_p),
        ("text_len", ctypes.c_size_t),
        ("finish", ctypes.c_int),
        ("status", ctypes.c_int),
        ("stop_index", ctypes.c_int32),
        ("usage", Usage),
        ("tokens", c_int32_p),
        ("n_tokens", ctypes.c_size_t),
        ("token", ctypes.c_int32),
        ("logprob", ctypes.c_float),
        ("top", ctypes.POINTER(TokenLogprob)),
        ("n_top", ctypes.c_size_t),
        ("grammar_start", ctypes.c_int64),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [
        ("role", ctypes.c_char_p),
        ("content", ctypes.c_char_p),
        ("content_len", ctypes.c_size_t),
    ]


class ChatOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("context_json", ctypes.c_char_p),
        ("now", ctypes.c_int64),
        ("bos_token", ctypes.c_char_p),
        ("eos_token", ctypes.c_char_p),
    ]


class Tool(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("parameters", ctypes.c_char_p)]


# Flag values, copied from ferrox.h (they never change: the header only
# appends).
MODEL_VOCAB_ONLY = 0x1
MODEL_MAPPED_WEIGHTS = 0x2
MODEL_EAGER_COPY = 0x4
TOKENIZE_ADD_SPECIAL = 0x1
TOKENIZE_PARSE_SPECIAL = 0x2
DETOKENIZE_REMOVE_SPECIAL = 0x1
DETOKENIZE_RENDER_SPECIAL = 0x2
CHAT_ADD_ASSISTANT = 0x1
CHAT_WITH_BOS = 0x2
BATCHER_NO_PREFIX_CACHE = 0x1
BATCHER_FAST = 0x2
BATCHER_KV_F16 = 0x4
REQUEST_IGNORE_EOS = 0x1
REQUEST_PARSE_SPECIAL = 0x2
REQUEST_NO_BOS = 0x4
REQUEST_JSON = 0x8
MAX_LOGPROBS = 20

EVENT_TEXT = 1
EVENT_DONE = 2
EVENT_TOKEN = 3

ERR_BUFFER_TOO_SMALL = 17
ERR_STALE_HANDLE = 20

_P = ctypes.POINTER
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_u32 = ctypes.c_uint32
_int = ctypes.c_int
_cp = ctypes.c_char_p

# name: (restype, argtypes). Declaring every argument type makes ctypes
# convert and check Python values instead of guessing (a guessed int for a
# size_t or a pointer is silently truncated to 32 bits).
_SIGNATURES = {
    "fx_version_number": (_u32, []),
    "fx_version_string": (_cp, []),
    "fx_status_str": (_cp, [_int]),
    "fx_model_params_init_sized": (None, [_P(ModelParams), _sz]),
    "fx_model_load": (_int, [_cp, _P(ModelParams), _P(_vp), _cp, _sz]),
    "fx_model_free": (None, [_vp]),
    "fx_model_errmsg": (_cp, [_vp]),
    "fx_model_info_init_sized": (None, [_P(ModelInfo), _sz]),
    "fx_model_get_info": (_int, [_vp, _P(ModelInfo)]),
    "fx_model_meta_count": (ctypes.c_uint64, [_vp]),
    "fx_model_meta_key": (_cp, [_vp, ctypes.c_uint64]),
    "fx_model_meta_format": (_int, [_vp, ctypes.c_uint64, _vp, _sz,
                                    _P(_sz)]),
    "fx_tensor_info_init_sized": (None, [_P(TensorInfo), _sz]),
    "fx_model_tensor_count": (ctypes.c_uint64, [_vp]),
    "fx_model_tensor_get": (_int, [_vp, ctypes.c_uint64, _P(TensorInfo)]),
    "fx_tokenize": (_int, [_vp, _cp, _sz, _u32, c_int32_p, _sz, _P(_sz)]),
    "fx_token_to_piece": (_int, [_vp, ctypes.c_int32, _u32, _vp, _sz,
                                 _P(_sz)]),
    "fx_detokenize": (_int, [_vp, c_int32_p, _sz, _u32, _vp, _sz, _P(_sz)]),
    "fx_model_vocab_size": (_u32, [_vp]),
    "fx_model_special_token": (ctypes.c_int32, [_vp, _int]),
    "fx_token_is_eog": (_int, [_vp, ctypes.c_int32]),
    "fx_token_type": (_int, [_vp, ctypes.c_int32]),
    "fx_chat_apply": (_int, [_vp, _cp, _P(ChatMessage), _sz, _u32, _vp, _sz,
                             _P(_sz)]),
    "fx_chat_apply_template": (_int, [_cp, _P(ChatMessage), _sz, _u32, _vp,
                                      _sz, _P(_sz), _cp, _sz]),
    "fx_chat_detect": (_int, [_vp, _cp, _P(_cp)]),
    "fx_chat_options_init_sized": (None, [_P(ChatOptions), _sz]),
    "fx_chat_apply_ex": (_int, [_vp, _cp, _P(ChatMessage), _sz,
                                _P(ChatOptions), _vp, _sz, _P(_sz), _cp,
                                _sz]),
    "fx_chat_stop_strings": (_int, [_cp, _P(_cp), _sz, _P(_sz)]),
    "fx_json_schema_to_grammar": (_int, [_cp, _sz, _vp, _sz, _P(_sz), _cp,
                                         _sz]),
    "fx_tools_to_grammar": (_int, [_P(Tool), _sz, _int, _vp, _sz, _P(_sz),
                                   _cp, _sz]),
    "fx_tool_format_trigger": (_cp, [_int]),
    "fx_chat_family_count": (_sz, []),
    "fx_chat_family_name": (_cp, [_sz]),
    "fx_model_chat_stop_tokens": (_int, [_vp, _cp, c_int32_p, _sz, _P(_sz)]),
    "fx_batcher_params_init_sized": (None, [_P(BatcherParams), _sz]),
    "fx_batcher_create": (_int, [_vp, _P(BatcherParams), _P(_vp), _cp, _sz]),
    "fx_batcher_free": (None, [_vp]),
    "fx_batcher_errmsg": (_cp, [_vp]),
    "fx_request_init_sized": (None, [_P(Request), _sz]),
    "fx_submit": (_int, [_vp, _P(Request), _P(_vp)]),
    "fx_step": (_int, [_vp]),
    "fx_batcher_pending": (_u32, [_vp]),
    "fx_poll_sized": (_int, [_vp, _P(Event), _sz, _P(_int)]),
    "fx_cancel": (_int, [_vp, _vp]),
    "fx_row_release": (_int, [_vp, _vp]),
    "fx_lease_create": (_int, [_vp, _cp, _sz, _u32, _P(_vp)]),
    "fx_lease_status": (_int, [_vp, _vp, _P(_int)]),
    "fx_lease_ready": (_int, [_vp, _vp]),
    "fx_lease_pinned": (_int, [_vp, _vp]),
    "fx_lease_release": (_int, [_vp, _vp]),
}

_lib = None
_lib_lock = threading.Lock()


def _find_library():
    path = os.environ.get("FERROX_LIBRARY")
    if path:
        return path
    # find_library searches the linker's paths for an installed
    # libferrox.so; the SONAME is the fallback the dynamic loader resolves
    # through LD_LIBRARY_PATH.
    return ctypes.util.find_library("ferrox") or "libferrox.so.0"


def lib():
    """The loaded library, declared and version-checked on first use.

    Loading is deferred to the first call so that `import ferrox` works
    (for Status values, help()) even where the library is not installed.
    """
    global _lib
    with _lib_lock:
        if _lib is None:
            path = _find_library()
            try:
                handle = ctypes.CDLL(path)
            except OSError as e:
                raise ImportError(
                    "ferrox: cannot load the C library %r (set FERROX_LIBRARY "
                    "to the path of libferrox.so): %s" % (path, e)) from e
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            major = handle.fx_version_number() // 1000000
            if major != ABI_MAJOR:
                raise ImportError(
                    "ferrox: %s is version %s, this binding needs major %d"
                    % (path, handle.fx_version_string().decode(), ABI_MAJOR))
            _lib = handle
        return _lib


def init(lib, name, obj):
    """Fills obj (a ctypes structure) with the library's defaults through
    fx_<name>_init_sized, passing this binding's own size of it."""
    getattr(lib, "fx_%s_init_sized" % name)(ctypes.byref(obj),
                                            ctypes.sizeof(obj))
