//! Raw declarations of `include/ferrox.h`, written by hand.
//!
//! Every `#[repr(C)]` structure mirrors the header field for field. The
//! ones with an `_init` function carry `struct_size`: they are initialized
//! through the exported `fx_*_init_sized` with this crate's own size (the
//! header's `fx_*_init` are inline; the wrappers at the end of this file
//! mirror them), so the library never writes past the Rust struct. The
//! test suite checks that the library's defaults land on the fields
//! declared here, so a field added to the header and forgotten here fails
//! a test instead of corrupting memory. C enums are `c_int`: a value from a newer library
//! must never become an invalid Rust enum.

#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

pub type fx_status = c_int;

/// Opaque handles. Rows and leases are generation-counted ids that only
/// look like pointers; they are never dereferenced on this side.
#[repr(C)]
pub struct fx_model {
    _private: [u8; 0],
}
#[repr(C)]
pub struct fx_batcher {
    _private: [u8; 0],
}
#[repr(C)]
pub struct fx_row {
    _private: [u8; 0],
}
#[repr(C)]
pub struct fx_lease {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_allocator {
    pub malloc_fn: *mut c_void,
    pub realloc_fn: *mut c_void,
    pub free_fn: *mut c_void,
    pub user: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_model_params {
    pub struct_size: u32,
    pub flags: u32,
    pub allocator: fx_allocator,
    pub log_fn: *mut c_void,
    pub log_user: *mut c_void,
    pub log_level: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_model_info {
    pub struct_size: u32,
    pub arch: *const c_char,
    pub name: *const c_char,
    pub gguf_version: u32,
    pub vocab_only: u32,
    pub n_vocab: u32,
    pub n_ctx_train: u32,
    pub n_embd: u32,
    pub n_layer: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub n_ff: u32,
    pub n_rot: u32,
    pub rope_freq_base: f32,
    pub rms_norm_eps: f32,
    pub n_params: u64,
    pub n_tensors: u64,
    pub n_meta: u64,
    pub file_size: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_tensor_info {
    pub struct_size: u32,
    pub name: *const c_char,
    pub type_: u32,
    pub type_name: *const c_char,
    pub n_dims: u32,
    pub dims: [u64; 4],
    pub offset: u64,
    pub n_bytes: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_batcher_params {
    pub struct_size: u32,
    pub flags: u32,
    pub max_rows: u32,
    pub max_step_tokens: u32,
    pub n_ctx: u32,
    pub block_tokens: u32,
    pub kv_bytes: u64,
    pub n_threads: u32,
    pub allocator: fx_allocator,
    pub log_fn: *mut c_void,
    pub log_user: *mut c_void,
    pub log_level: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_logit_bias {
    pub token: i32,
    pub bias: f32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_token_logprob {
    pub token: i32,
    pub logprob: f32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_request {
    pub struct_size: u32,
    pub flags: u32,
    pub prompt: *const c_char,
    pub prompt_len: usize,
    pub prompt_tokens: *const i32,
    pub n_prompt_tokens: usize,
    pub max_tokens: u32,
    pub temperature: f32,
    pub top_k: u32,
    pub top_p: f32,
    pub min_p: f32,
    pub seed: u64,
    pub stop: *const *const c_char,
    pub n_stop: usize,
    pub stop_tokens: *const i32,
    pub n_stop_tokens: usize,
    pub lease: *mut fx_lease,
    pub user: *mut c_void,
    pub grammar: *const c_char,
    pub grammar_len: usize,
    pub grammar_root: *const c_char,
    pub typical_p: f32,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub penalty_last_n: u32,
    pub logit_bias: *const fx_logit_bias,
    pub n_logit_bias: usize,
    pub n_logprobs: u32,
    pub grammar_triggers: *const *const c_char,
    pub n_grammar_triggers: usize,
    pub grammar_trigger_tokens: *const i32,
    pub n_grammar_trigger_tokens: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_usage {
    pub prompt_tokens: u32,
    pub cached_tokens: u32,
    pub completion_tokens: u32,
    pub queue_seconds: f64,
    pub ttft_seconds: f64,
    pub total_seconds: f64,
}

/// fx_event as the header has it now: the first layout plus
/// grammar_start, polled with fx_poll_sized and this structure's size
/// (only a size that covers grammar_start gets it filled).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_event {
    pub type_: c_int,
    pub row: *mut fx_row,
    pub user: *mut c_void,
    pub text: *const c_char,
    pub text_len: usize,
    pub finish: c_int,
    pub status: fx_status,
    pub stop_index: i32,
    pub usage: fx_usage,
    pub tokens: *const i32,
    pub n_tokens: usize,
    pub token: i32,
    pub logprob: f32,
    pub top: *const fx_token_logprob,
    pub n_top: usize,
    pub grammar_start: i64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_chat_message {
    pub role: *const c_char,
    pub content: *const c_char,
    pub content_len: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_chat_options {
    pub struct_size: u32,
    pub flags: u32,
    pub context_json: *const c_char,
    pub now: i64,
    pub bos_token: *const c_char,
    pub eos_token: *const c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct fx_tool {
    pub name: *const c_char,
    pub parameters: *const c_char,
}

pub const FX_TOOL_FORMAT_HERMES: c_int = 0;
pub const FX_TOOL_FORMAT_LLAMA3: c_int = 1;
pub const FX_TOOL_FORMAT_MISTRAL: c_int = 2;

pub const FX_OK: fx_status = 0;
pub const FX_ERR_BUFFER_TOO_SMALL: fx_status = 17;
pub const FX_ERR_STALE_HANDLE: fx_status = 20;

pub const FX_MODEL_VOCAB_ONLY: u32 = 0x1;
pub const FX_MODEL_MAPPED_WEIGHTS: u32 = 0x2;
pub const FX_MODEL_EAGER_COPY: u32 = 0x4;
pub const FX_TOKENIZE_ADD_SPECIAL: u32 = 0x1;
pub const FX_TOKENIZE_PARSE_SPECIAL: u32 = 0x2;
pub const FX_DETOKENIZE_REMOVE_SPECIAL: u32 = 0x1;
pub const FX_DETOKENIZE_RENDER_SPECIAL: u32 = 0x2;
pub const FX_CHAT_ADD_ASSISTANT: u32 = 0x1;
pub const FX_CHAT_WITH_BOS: u32 = 0x2;
pub const FX_BATCHER_NO_PREFIX_CACHE: u32 = 0x1;
pub const FX_BATCHER_FAST: u32 = 0x2;
pub const FX_BATCHER_KV_F16: u32 = 0x4;
pub const FX_REQUEST_IGNORE_EOS: u32 = 0x1;
pub const FX_REQUEST_PARSE_SPECIAL: u32 = 0x2;
pub const FX_REQUEST_NO_BOS: u32 = 0x4;
pub const FX_REQUEST_JSON: u32 = 0x8;
pub const FX_MAX_LOGPROBS: u32 = 20;

pub const FX_EVENT_TEXT: c_int = 1;
pub const FX_EVENT_DONE: c_int = 2;
pub const FX_EVENT_TOKEN: c_int = 3;

extern "C" {
    pub fn fx_version_number() -> u32;
    pub fn fx_version_string() -> *const c_char;
    pub fn fx_status_str(status: fx_status) -> *const c_char;

    pub fn fx_model_params_init_sized(params: *mut fx_model_params, size: usize);
    pub fn fx_model_load(
        path: *const c_char,
        params: *const fx_model_params,
        out_model: *mut *mut fx_model,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_model_free(model: *mut fx_model);
    pub fn fx_model_errmsg(model: *const fx_model) -> *const c_char;
    pub fn fx_model_info_init_sized(info: *mut fx_model_info, size: usize);
    pub fn fx_model_get_info(model: *const fx_model, info: *mut fx_model_info) -> fx_status;

    pub fn fx_model_meta_count(model: *const fx_model) -> u64;
    pub fn fx_model_meta_key(model: *const fx_model, index: u64) -> *const c_char;
    pub fn fx_model_meta_format(
        model: *const fx_model,
        index: u64,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> fx_status;
    pub fn fx_tensor_info_init_sized(info: *mut fx_tensor_info, size: usize);
    pub fn fx_model_tensor_count(model: *const fx_model) -> u64;
    pub fn fx_model_tensor_get(
        model: *const fx_model,
        index: u64,
        info: *mut fx_tensor_info,
    ) -> fx_status;

    pub fn fx_tokenize(
        model: *const fx_model,
        text: *const c_char,
        text_len: usize,
        flags: u32,
        tokens: *mut i32,
        max_tokens: usize,
        n_tokens: *mut usize,
    ) -> fx_status;
    pub fn fx_token_to_piece(
        model: *const fx_model,
        token: i32,
        flags: u32,
        buf: *mut c_char,
        buf_size: usize,
        n_bytes: *mut usize,
    ) -> fx_status;
    pub fn fx_detokenize(
        model: *const fx_model,
        tokens: *const i32,
        n_tokens: usize,
        flags: u32,
        buf: *mut c_char,
        buf_size: usize,
        n_bytes: *mut usize,
    ) -> fx_status;
    pub fn fx_model_vocab_size(model: *const fx_model) -> u32;
    pub fn fx_model_special_token(model: *const fx_model, which: c_int) -> i32;
    pub fn fx_token_is_eog(model: *const fx_model, token: i32) -> c_int;
    pub fn fx_token_type(model: *const fx_model, token: i32) -> c_int;

    pub fn fx_chat_apply(
        model: *const fx_model,
        tmpl: *const c_char,
        msgs: *const fx_chat_message,
        n_msgs: usize,
        flags: u32,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
    ) -> fx_status;
    pub fn fx_chat_apply_template(
        tmpl: *const c_char,
        msgs: *const fx_chat_message,
        n_msgs: usize,
        flags: u32,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_chat_detect(
        model: *const fx_model,
        tmpl: *const c_char,
        family: *mut *const c_char,
    ) -> fx_status;
    pub fn fx_chat_options_init_sized(opts: *mut fx_chat_options, size: usize);
    pub fn fx_chat_apply_ex(
        model: *const fx_model,
        tmpl: *const c_char,
        msgs: *const fx_chat_message,
        n_msgs: usize,
        opts: *const fx_chat_options,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_chat_stop_strings(
        tmpl: *const c_char,
        out: *mut *const c_char,
        cap: usize,
        n: *mut usize,
    ) -> fx_status;
    pub fn fx_json_schema_to_grammar(
        schema: *const c_char,
        schema_len: usize,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_tools_to_grammar(
        tools: *const fx_tool,
        n_tools: usize,
        format: c_int,
        buf: *mut c_char,
        buf_size: usize,
        needed: *mut usize,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_tool_format_trigger(format: c_int) -> *const c_char;
    pub fn fx_chat_family_count() -> usize;
    pub fn fx_chat_family_name(index: usize) -> *const c_char;
    pub fn fx_model_chat_stop_tokens(
        model: *const fx_model,
        tmpl: *const c_char,
        ids: *mut i32,
        cap: usize,
        n: *mut usize,
    ) -> fx_status;

    pub fn fx_batcher_params_init_sized(params: *mut fx_batcher_params, size: usize);
    pub fn fx_batcher_create(
        model: *mut fx_model,
        params: *const fx_batcher_params,
        out_batcher: *mut *mut fx_batcher,
        errbuf: *mut c_char,
        errbuf_size: usize,
    ) -> fx_status;
    pub fn fx_batcher_free(batcher: *mut fx_batcher);
    pub fn fx_batcher_errmsg(batcher: *const fx_batcher) -> *const c_char;
    pub fn fx_request_init_sized(request: *mut fx_request, size: usize);
    pub fn fx_submit(
        batcher: *mut fx_batcher,
        request: *const fx_request,
        out_row: *mut *mut fx_row,
    ) -> fx_status;
    pub fn fx_step(batcher: *mut fx_batcher) -> fx_status;
    pub fn fx_batcher_pending(batcher: *const fx_batcher) -> u32;
    pub fn fx_poll_sized(
        batcher: *mut fx_batcher,
        event: *mut fx_event,
        event_size: usize,
        status: *mut fx_status,
    ) -> c_int;
    pub fn fx_cancel(batcher: *mut fx_batcher, row: *mut fx_row) -> fx_status;
    pub fn fx_row_release(batcher: *mut fx_batcher, row: *mut fx_row) -> fx_status;
    pub fn fx_lease_create(
        batcher: *mut fx_batcher,
        text: *const c_char,
        text_len: usize,
        flags: u32,
        out_lease: *mut *mut fx_lease,
    ) -> fx_status;
    pub fn fx_lease_status(
        batcher: *const fx_batcher,
        lease: *const fx_lease,
        state: *mut c_int,
    ) -> fx_status;
    pub fn fx_lease_ready(batcher: *const fx_batcher, lease: *const fx_lease) -> c_int;
    pub fn fx_lease_pinned(batcher: *const fx_batcher, lease: *const fx_lease) -> c_int;
    pub fn fx_lease_release(batcher: *mut fx_batcher, lease: *mut fx_lease) -> fx_status;
}

/// `fx_model_params_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `params` must point to a writable `fx_model_params` (or be NULL).
pub unsafe fn fx_model_params_init(params: *mut fx_model_params) {
    fx_model_params_init_sized(params, std::mem::size_of::<fx_model_params>())
}

/// `fx_model_info_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `info` must point to a writable `fx_model_info` (or be NULL).
pub unsafe fn fx_model_info_init(info: *mut fx_model_info) {
    fx_model_info_init_sized(info, std::mem::size_of::<fx_model_info>())
}

/// `fx_batcher_params_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `params` must point to a writable `fx_batcher_params` (or be NULL).
pub unsafe fn fx_batcher_params_init(params: *mut fx_batcher_params) {
    fx_batcher_params_init_sized(params, std::mem::size_of::<fx_batcher_params>())
}

/// `fx_request_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `request` must point to a writable `fx_request` (or be NULL).
pub unsafe fn fx_request_init(request: *mut fx_request) {
    fx_request_init_sized(request, std::mem::size_of::<fx_request>())
}

/// `fx_chat_options_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `opts` must point to a writable `fx_chat_options` (or be NULL).
pub unsafe fn fx_chat_options_init(opts: *mut fx_chat_options) {
    fx_chat_options_init_sized(opts, std::mem::size_of::<fx_chat_options>())
}

/// `fx_tensor_info_init` as the C header has it (an inline there): the exported sized
/// initializer, given this crate's own size of the struct.
///
/// # Safety
/// `info` must point to a writable `fx_tensor_info` (or be NULL).
pub unsafe fn fx_tensor_info_init(info: *mut fx_tensor_info) {
    fx_tensor_info_init_sized(info, std::mem::size_of::<fx_tensor_info>())
}
