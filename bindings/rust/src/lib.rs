//! Safe Rust binding of ferrox: Llama-family GGUF models on the CPU, many
//! requests ("rows") at once, driven from the caller's own loop.
//!
//! ```no_run
//! use ferrox::{Batcher, BatcherOptions, Event, Model, Request};
//! let model = Model::load("model.gguf")?;
//! let batcher = Batcher::new(&model, &BatcherOptions::default())?;
//! let row = batcher.submit(&Request::text("Once upon a time").max_tokens(32).seed(42))?;
//! for event in row.events() {           // steps the batcher as needed
//!     if let Event::Text(t) = event? { print!("{}", t); }
//! }
//! # Ok::<(), ferrox::Error>(())
//! ```
//!
//! Ownership: `Model`, `Batcher`, `Row` and `Lease` each own one C handle
//! and release it in `Drop`. A `Batcher` keeps its `Model` alive, and rows
//! and leases keep their batcher alive, so no handle can outlive what it
//! points into. `Row::release` and `Lease::release` end them early and may
//! be called more than once.
//!
//! Threads: every type is `Send` and `Sync`. ferrox.h allows `fx_cancel`
//! from any thread at any time and every other batcher call from one thread
//! at a time; the binding holds a mutex around all batcher calls except
//! `fx_cancel`, so `Row::cancel` works from another thread even while a
//! step runs. See the `unsafe impl`s for each justification.

pub mod sys;

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The ABI major this crate was written against (FX_VERSION_MAJOR).
const ABI_MAJOR: u32 = 0;

// ------------------------------------------------------------------ errors --

/// A status code of ferrox.h (`fx_status`). A newtype rather than an enum:
/// the library only appends codes, and one this crate does not know must
/// still be representable.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

const STATUS_NAMES: [&str; 26] = [
    "OK",
    "INVALID_ARG",
    "NOMEM",
    "IO",
    "UNSUPPORTED",
    "TRUNCATED",
    "BAD_MAGIC",
    "BAD_VERSION",
    "TOO_LARGE",
    "BAD_TYPE",
    "BAD_TENSOR",
    "BAD_OFFSET",
    "BAD_ALIGNMENT",
    "DUPLICATE",
    "MISSING",
    "BAD_SHAPE",
    "BAD_HPARAMS",
    "BUFFER_TOO_SMALL",
    "BAD_VOCAB",
    "BAD_TEMPLATE",
    "STALE_HANDLE",
    "REENTRANT",
    "NO_ROOM",
    "INTERNAL",
    "GRAMMAR",
    "ALL_BANNED",
];

#[allow(missing_docs)]
impl Status {
    pub const OK: Status = Status(0);
    pub const INVALID_ARG: Status = Status(1);
    pub const NOMEM: Status = Status(2);
    pub const IO: Status = Status(3);
    pub const UNSUPPORTED: Status = Status(4);
    pub const TRUNCATED: Status = Status(5);
    pub const BAD_MAGIC: Status = Status(6);
    pub const BAD_VERSION: Status = Status(7);
    pub const TOO_LARGE: Status = Status(8);
    pub const BAD_TYPE: Status = Status(9);
    pub const BAD_TENSOR: Status = Status(10);
    pub const BAD_OFFSET: Status = Status(11);
    pub const BAD_ALIGNMENT: Status = Status(12);
    pub const DUPLICATE: Status = Status(13);
    pub const MISSING: Status = Status(14);
    pub const BAD_SHAPE: Status = Status(15);
    pub const BAD_HPARAMS: Status = Status(16);
    pub const BUFFER_TOO_SMALL: Status = Status(17);
    pub const BAD_VOCAB: Status = Status(18);
    pub const BAD_TEMPLATE: Status = Status(19);
    pub const STALE_HANDLE: Status = Status(20);
    pub const REENTRANT: Status = Status(21);
    pub const NO_ROOM: Status = Status(22);
    pub const INTERNAL: Status = Status(23);
    pub const GRAMMAR: Status = Status(24);
    pub const ALL_BANNED: Status = Status(25);

    /// The library's short description ("truncated file").
    pub fn description(self) -> &'static str {
        // fx_status_str returns a static string for every value.
        unsafe { static_str(sys::fx_status_str(self.0)) }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match STATUS_NAMES.get(self.0 as usize) {
            Some(name) if self.0 >= 0 => f.write_str(name),
            _ => write!(f, "Status({})", self.0),
        }
    }
}

/// A failed call: its status and the library's message.
#[derive(Clone, Debug)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    fn new(status: i32, message: impl Into<String>) -> Error {
        Error {
            status: Status(status),
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ferrox: {:?} ({})",
            self.status,
            self.status.description()
        )?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// # Safety
/// `p` is NULL or a NUL-terminated string that lives for the program.
unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    CStr::from_ptr(p).to_str().unwrap_or("")
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for this call.
unsafe fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(1, "a string contains a NUL byte"))
}

fn errbuf_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The linked library's version string, e.g. "0.1.0".
pub fn version() -> &'static str {
    unsafe { static_str(sys::fx_version_string()) }
}

fn check_version() -> Result<()> {
    if unsafe { sys::fx_version_number() } / 1_000_000 != ABI_MAJOR {
        return Err(Error::new(
            4,
            format!("library {} has another ABI major", version()),
        ));
    }
    Ok(())
}

/// Ignores mutex poisoning: the guarded data stays consistent because no
/// code path panics half-way through changing it, and a panic elsewhere
/// must not make every later call fail.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ------------------------------------------------------------------- model --

/// A loaded GGUF model. Cloning is cheap and shares the one C handle.
#[derive(Clone)]
pub struct Model {
    inner: Arc<ModelInner>,
}

struct ModelInner {
    raw: *mut sys::fx_model,
    /// Held around every call that may record an error in the model, so
    /// that the message read after a failure is that failure's
    /// (fx_model_errmsg is one per model, not per call), and around batcher
    /// creation and destruction, which update a plain counter in the model.
    lock: Mutex<()>,
}

// SAFETY: an fx_model has no thread affinity, so it may be freed on any
// thread (Send). Shared use (Sync): the tokenizer functions only read the
// vocabulary and ferrox.h allows them on one model from several threads;
// the only thing any &self call writes is the last-error message and the
// batcher count, and those calls hold `lock`.
unsafe impl Send for ModelInner {}
unsafe impl Sync for ModelInner {}

impl Drop for ModelInner {
    fn drop(&mut self) {
        // Last reference: no Batcher holds the model any more (each keeps a
        // clone), so this really frees it instead of only marking it.
        unsafe { sys::fx_model_free(self.raw) }
    }
}

/// Options of `Model::load_with`.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Read metadata and vocabulary only: enough to tokenize, not to
    /// create a Batcher.
    pub vocab_only: bool,
    /// Compute from the file mapping, copying nothing
    /// (FX_MODEL_MAPPED_WEIGHTS): pages shared between processes, slower
    /// decode.
    pub mapped_weights: bool,
}

/// The model's hyperparameters (fx_model_info).
#[derive(Clone, Debug)]
#[allow(missing_docs)]
pub struct ModelInfo {
    pub arch: String,
    pub name: String,
    pub gguf_version: u32,
    pub vocab_only: bool,
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

/// One entry of the file's tensor table (fx_tensor_info).
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// The ggml type id stored in the file.
    pub type_id: u32,
    /// "f32", "q8_0", ...
    pub type_name: &'static str,
    /// `dims[0]` is the contiguous one.
    pub dims: Vec<u64>,
    /// Byte offset of the data within the file.
    pub offset: u64,
    pub n_bytes: u64,
}

/// fx_special_token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum SpecialToken {
    Bos = 0,
    Eos = 1,
    Unk = 2,
    Sep = 3,
    Pad = 4,
    Eot = 5,
    Eom = 6,
    Mask = 7,
}

/// One turn of a conversation for the chat templates.
#[derive(Clone, Copy, Debug)]
pub struct ChatMessage<'a> {
    /// "system", "user" or "assistant".
    pub role: &'a str,
    pub content: &'a str,
}

/// Flags of the chat-template calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChatOptions {
    /// End with the assistant turn opener (add_generation_prompt).
    pub add_assistant: bool,
    /// Keep the template's leading BOS text.
    pub with_bos: bool,
}

impl ChatOptions {
    fn flags(self) -> u32 {
        (if self.add_assistant {
            sys::FX_CHAT_ADD_ASSISTANT
        } else {
            0
        }) | (if self.with_bos {
            sys::FX_CHAT_WITH_BOS
        } else {
            0
        })
    }
}

/// Chat messages as C structures. The CStrings behind the pointers are
/// returned too and must outlive the call.
fn chat_messages(msgs: &[ChatMessage<'_>]) -> Result<(Vec<sys::fx_chat_message>, Vec<CString>)> {
    let mut keep = Vec::new();
    let mut out = Vec::new();
    for m in msgs {
        let role = cstring(m.role)?;
        let content = CString::new(m.content)
            .map_err(|_| Error::new(1, "chat message content contains a NUL byte"))?;
        out.push(sys::fx_chat_message {
            role: role.as_ptr(),
            content: content.as_ptr(),
            content_len: 0, // NUL-terminated: CString guarantees no NUL inside
        });
        keep.push(role);
        keep.push(content);
    }
    Ok((out, keep))
}

fn opt_cstring(s: Option<&str>) -> Result<Option<CString>> {
    match s {
        Some(s) => cstring(s).map(Some),
        None => Ok(None),
    }
}

fn opt_ptr(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
}

impl Model {
    /// Opens, maps and validates a GGUF file.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Model::load_with(path, &ModelOptions::default())
    }

    /// `load` with options.
    pub fn load_with(path: impl AsRef<Path>, opts: &ModelOptions) -> Result<Model> {
        check_version()?;
        use std::os::unix::ffi::OsStrExt;
        let cpath = CString::new(path.as_ref().as_os_str().as_bytes())
            .map_err(|_| Error::new(1, "the path contains a NUL byte"))?;
        let mut params: sys::fx_model_params = unsafe { std::mem::zeroed() };
        unsafe { sys::fx_model_params_init(&mut params) };
        if opts.vocab_only {
            params.flags |= sys::FX_MODEL_VOCAB_ONLY;
        }
        if opts.mapped_weights {
            params.flags |= sys::FX_MODEL_MAPPED_WEIGHTS;
        }
        let mut raw = std::ptr::null_mut();
        let mut err = [0u8; 1024];
        let st = unsafe {
            sys::fx_model_load(
                cpath.as_ptr(),
                &params,
                &mut raw,
                err.as_mut_ptr() as *mut c_char,
                err.len(),
            )
        };
        if st != sys::FX_OK {
            return Err(Error::new(st, errbuf_text(&err)));
        }
        Ok(Model {
            inner: Arc::new(ModelInner {
                raw,
                lock: Mutex::new(()),
            }),
        })
    }

    /// Runs `f` under the model's lock; FX_OK (and BUFFER_TOO_SMALL when
    /// `too_small_ok`) are returned, anything else becomes an Error with
    /// the model's message.
    fn call(&self, too_small_ok: bool, f: impl FnOnce(*mut sys::fx_model) -> i32) -> Result<i32> {
        let _guard = lock(&self.inner.lock);
        let st = f(self.inner.raw);
        if st == sys::FX_OK || (too_small_ok && st == sys::FX_ERR_BUFFER_TOO_SMALL) {
            return Ok(st);
        }
        Err(Error::new(st, unsafe {
            owned_str(sys::fx_model_errmsg(self.inner.raw))
        }))
    }

    /// Calls a fill-a-buffer function, a second time with the size it
    /// asked for if the first buffer was too small.
    fn sized(
        &self,
        f: impl Fn(*mut sys::fx_model, *mut c_char, usize, &mut usize) -> i32,
    ) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        loop {
            let mut n = 0usize;
            let cap = buf.len();
            let st = self.call(true, |m| f(m, buf.as_mut_ptr() as *mut c_char, cap, &mut n))?;
            if st == sys::FX_OK {
                buf.truncate(n);
                return Ok(buf);
            }
            buf = vec![0u8; n + 1];
        }
    }

    /// The model's hyperparameters.
    pub fn info(&self) -> Result<ModelInfo> {
        let mut i: sys::fx_model_info = unsafe { std::mem::zeroed() };
        unsafe { sys::fx_model_info_init(&mut i) };
        self.call(false, |m| unsafe { sys::fx_model_get_info(m, &mut i) })?;
        // The strings live as long as the model, which `self` keeps alive.
        Ok(ModelInfo {
            arch: unsafe { owned_str(i.arch) },
            name: unsafe { owned_str(i.name) },
            gguf_version: i.gguf_version,
            vocab_only: i.vocab_only != 0,
            n_vocab: i.n_vocab,
            n_ctx_train: i.n_ctx_train,
            n_embd: i.n_embd,
            n_layer: i.n_layer,
            n_head: i.n_head,
            n_head_kv: i.n_head_kv,
            n_ff: i.n_ff,
            n_rot: i.n_rot,
            rope_freq_base: i.rope_freq_base,
            rms_norm_eps: i.rms_norm_eps,
            n_params: i.n_params,
            n_tensors: i.n_tensors,
            n_meta: i.n_meta,
            file_size: i.file_size,
        })
    }

    /// The file's metadata in file order: each key and its value as text
    /// (numbers in decimal, strings quoted with C escapes, arrays
    /// summarized; fx_model_meta_format).
    pub fn metadata(&self) -> Result<Vec<(String, String)>> {
        let n = unsafe { sys::fx_model_meta_count(self.inner.raw) };
        let mut out = Vec::new();
        for i in 0..n {
            // Keys live as long as the model, which `self` keeps alive.
            let key = unsafe { owned_str(sys::fx_model_meta_key(self.inner.raw, i)) };
            let mut value = self.sized(|m, buf, cap, need| unsafe {
                sys::fx_model_meta_format(m, i, buf, cap, need)
            })?;
            value.pop(); // `needed` counts the terminating NUL
            out.push((key, String::from_utf8_lossy(&value).into_owned()));
        }
        Ok(out)
    }

    /// The file's tensor table, in file order.
    pub fn tensors(&self) -> Result<Vec<TensorInfo>> {
        let n = unsafe { sys::fx_model_tensor_count(self.inner.raw) };
        let mut out = Vec::new();
        for i in 0..n {
            let mut t: sys::fx_tensor_info = unsafe { std::mem::zeroed() };
            unsafe { sys::fx_tensor_info_init(&mut t) };
            self.call(false, |m| unsafe { sys::fx_model_tensor_get(m, i, &mut t) })?;
            let n_dims = (t.n_dims as usize).min(t.dims.len());
            out.push(TensorInfo {
                // The name lives as long as the model; the type name is static.
                name: unsafe { owned_str(t.name) },
                type_id: t.type_,
                type_name: unsafe { static_str(t.type_name) },
                dims: t.dims[..n_dims].to_vec(),
                offset: t.offset,
                n_bytes: t.n_bytes,
            });
        }
        Ok(out)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> u32 {
        unsafe { sys::fx_model_vocab_size(self.inner.raw) }
    }

    /// The id of a special token, or None when the vocabulary has none.
    pub fn special_token(&self, which: SpecialToken) -> Option<i32> {
        let t = unsafe { sys::fx_model_special_token(self.inner.raw, which as i32) };
        if t < 0 {
            None
        } else {
            Some(t)
        }
    }

    /// Whether generation stops at this token (EOS, EOT or EOM).
    pub fn is_eog(&self, token: i32) -> bool {
        unsafe { sys::fx_token_is_eog(self.inner.raw, token) != 0 }
    }

    /// The token's GGUF type (1 normal ... 6 byte; 0 undefined).
    pub fn token_type(&self, token: i32) -> i32 {
        unsafe { sys::fx_token_type(self.inner.raw, token) }
    }

    /// Text (any bytes; invalid UTF-8 never fails) to token ids.
    /// `add_special` adds BOS/EOS as the vocabulary asks; `parse_special`
    /// turns special-token text into the special token.
    pub fn tokenize(
        &self,
        text: impl AsRef<[u8]>,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<i32>> {
        let text = text.as_ref();
        let flags = (if add_special {
            sys::FX_TOKENIZE_ADD_SPECIAL
        } else {
            0
        }) | (if parse_special {
            sys::FX_TOKENIZE_PARSE_SPECIAL
        } else {
            0
        });
        let mut toks = vec![0i32; text.len() + 4]; // rarely more tokens than bytes
        loop {
            let mut n = 0usize;
            let cap = toks.len();
            let st = self.call(true, |m| unsafe {
                sys::fx_tokenize(
                    m,
                    text.as_ptr() as *const c_char,
                    text.len(),
                    flags,
                    toks.as_mut_ptr(),
                    cap,
                    &mut n,
                )
            })?;
            if st == sys::FX_OK {
                toks.truncate(n);
                return Ok(toks);
            }
            toks = vec![0i32; n];
        }
    }

    /// The bytes one token stands for (possibly part of a character).
    pub fn token_to_piece(&self, token: i32, render_special: bool) -> Result<Vec<u8>> {
        let flags = if render_special {
            sys::FX_DETOKENIZE_RENDER_SPECIAL
        } else {
            0
        };
        self.sized(|m, buf, cap, n| unsafe { sys::fx_token_to_piece(m, token, flags, buf, cap, n) })
    }

    /// The bytes of a token sequence.
    pub fn detokenize_bytes(
        &self,
        tokens: &[i32],
        remove_special: bool,
        render_special: bool,
    ) -> Result<Vec<u8>> {
        let flags = (if remove_special {
            sys::FX_DETOKENIZE_REMOVE_SPECIAL
        } else {
            0
        }) | (if render_special {
            sys::FX_DETOKENIZE_RENDER_SPECIAL
        } else {
            0
        });
        self.sized(|m, buf, cap, n| unsafe {
            sys::fx_detokenize(m, tokens.as_ptr(), tokens.len(), flags, buf, cap, n)
        })
    }

    /// The text of a token sequence (a split character becomes U+FFFD).
    pub fn detokenize(
        &self,
        tokens: &[i32],
        remove_special: bool,
        render_special: bool,
    ) -> Result<String> {
        let b = self.detokenize_bytes(tokens, remove_special, render_special)?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    /// Renders a conversation with the model's chat template (`template`
    /// None) or with `template`: a family name such as "chatml", or
    /// template text.
    pub fn apply_chat_template(
        &self,
        template: Option<&str>,
        msgs: &[ChatMessage<'_>],
        opts: ChatOptions,
    ) -> Result<String> {
        let (arr, _keep) = chat_messages(msgs)?;
        let tmpl = opt_cstring(template)?;
        let flags = opts.flags();
        let mut out = self.sized(|m, buf, cap, n| unsafe {
            sys::fx_chat_apply(
                m,
                opt_ptr(&tmpl),
                arr.as_ptr(),
                arr.len(),
                flags,
                buf,
                cap,
                n,
            )
        })?;
        out.pop(); // `needed` counts the terminating NUL
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// `render_chat_template` with the model's template (`template` None)
    /// or `template`, and the model's BOS/EOS texts unless `opts` sets
    /// them.
    pub fn render_chat_template(
        &self,
        template: Option<&str>,
        msgs: &[ChatMessage<'_>],
        opts: &ChatTemplateOptions<'_>,
    ) -> Result<String> {
        // Under the model's lock: the call records its message in the
        // model too (the error here takes it from the errbuf).
        let _guard = lock(&self.inner.lock);
        render_chat(self.inner.raw, template, msgs, opts)
    }

    /// The family of the model's template (`template` None) or of
    /// `template`, e.g. "llama3".
    pub fn chat_family(&self, template: Option<&str>) -> Result<&'static str> {
        let tmpl = opt_cstring(template)?;
        let mut fam: *const c_char = std::ptr::null();
        self.call(false, |m| unsafe {
            sys::fx_chat_detect(m, opt_ptr(&tmpl), &mut fam)
        })?;
        Ok(unsafe { static_str(fam) })
    }

    /// The token ids that end an assistant turn under the chat template.
    pub fn chat_stop_tokens(&self, template: Option<&str>) -> Result<Vec<i32>> {
        let tmpl = opt_cstring(template)?;
        let mut ids = vec![0i32; 8];
        loop {
            let mut n = 0usize;
            let cap = ids.len();
            let st = self.call(true, |m| unsafe {
                sys::fx_model_chat_stop_tokens(m, opt_ptr(&tmpl), ids.as_mut_ptr(), cap, &mut n)
            })?;
            if st == sys::FX_OK {
                ids.truncate(n);
                return Ok(ids);
            }
            ids = vec![0i32; n];
        }
    }
}

/// Renders a conversation without a model: `template` is a family name
/// (see `chat_families`) or template text.
pub fn apply_chat_template(
    template: &str,
    msgs: &[ChatMessage<'_>],
    opts: ChatOptions,
) -> Result<String> {
    let (arr, _keep) = chat_messages(msgs)?;
    let tmpl = cstring(template)?;
    let mut err = [0u8; 1024];
    let mut buf = vec![0u8; 1024];
    loop {
        let mut needed = 0usize;
        let st = unsafe {
            sys::fx_chat_apply_template(
                tmpl.as_ptr(),
                arr.as_ptr(),
                arr.len(),
                opts.flags(),
                buf.as_mut_ptr() as *mut c_char,
                buf.len(),
                &mut needed,
                err.as_mut_ptr() as *mut c_char,
                err.len(),
            )
        };
        if st == sys::FX_OK {
            return Ok(errbuf_text(&buf));
        }
        if st != sys::FX_ERR_BUFFER_TOO_SMALL {
            return Err(Error::new(st, errbuf_text(&err)));
        }
        buf = vec![0u8; needed];
    }
}

/// Options of `render_chat_template` (fx_chat_options).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChatTemplateOptions<'a> {
    /// add_generation_prompt and the leading BOS.
    pub chat: ChatOptions,
    /// A JSON object whose members become template variables ("tools",
    /// "enable_thinking", "documents" ...). A "messages" member (objects
    /// with any fields: tool_calls, name ...) is the conversation; `msgs`
    /// must then be empty.
    pub context_json: Option<&'a str>,
    /// strftime_now's clock, seconds since 1970 UTC; 0 means now.
    pub now: i64,
    /// The bos_token text; None for the model's (without a model: the
    /// family's usual one, or "").
    pub bos_token: Option<&'a str>,
    /// The eos_token text, as `bos_token`.
    pub eos_token: Option<&'a str>,
}

/// Calls one of the functions that write NUL-terminated text, and a
/// failure's message to an errbuf, once more with the size it asked for
/// if the first buffer was too small.
fn sized_text(
    mut f: impl FnMut(*mut c_char, usize, &mut usize, *mut c_char, usize) -> i32,
) -> Result<String> {
    let mut err = [0u8; 1024];
    let mut buf = vec![0u8; 1024];
    loop {
        let mut needed = 0usize;
        let st = f(
            buf.as_mut_ptr() as *mut c_char,
            buf.len(),
            &mut needed,
            err.as_mut_ptr() as *mut c_char,
            err.len(),
        );
        if st == sys::FX_OK {
            return Ok(errbuf_text(&buf));
        }
        if st != sys::FX_ERR_BUFFER_TOO_SMALL {
            return Err(Error::new(st, errbuf_text(&err)));
        }
        buf = vec![0u8; needed];
    }
}

/// fx_chat_apply_ex; `model` is NULL when `template` is given.
fn render_chat(
    model: *const sys::fx_model,
    template: Option<&str>,
    msgs: &[ChatMessage<'_>],
    opts: &ChatTemplateOptions<'_>,
) -> Result<String> {
    let (arr, _keep) = chat_messages(msgs)?;
    let tmpl = opt_cstring(template)?;
    let context = opt_cstring(opts.context_json)?;
    let bos = opt_cstring(opts.bos_token)?;
    let eos = opt_cstring(opts.eos_token)?;
    let mut o: sys::fx_chat_options = unsafe { std::mem::zeroed() };
    unsafe { sys::fx_chat_options_init(&mut o) };
    o.flags = opts.chat.flags();
    o.context_json = opt_ptr(&context);
    o.now = opts.now;
    o.bos_token = opt_ptr(&bos);
    o.eos_token = opt_ptr(&eos);
    // NULL with 0 messages: the conversation may come from the context.
    let msgs_ptr = if arr.is_empty() {
        std::ptr::null()
    } else {
        arr.as_ptr()
    };
    sized_text(|buf, cap, needed, eb, ecap| unsafe {
        sys::fx_chat_apply_ex(
            model,
            opt_ptr(&tmpl),
            msgs_ptr,
            arr.len(),
            &o,
            buf,
            cap,
            needed,
            eb,
            ecap,
        )
    })
}

/// Renders a conversation with template text as transformers'
/// apply_chat_template does (fx_chat_apply_ex): extra template variables
/// from `opts.context_json`, strftime_now on `opts.now`, BOS/EOS texts of
/// the caller's choosing. `msgs` may be empty when the context carries
/// "messages".
pub fn render_chat_template(
    template: &str,
    msgs: &[ChatMessage<'_>],
    opts: &ChatTemplateOptions<'_>,
) -> Result<String> {
    render_chat(std::ptr::null(), Some(template), msgs, opts)
}

/// The texts that end an assistant turn in the template's family
/// (`template`: a family name or template text), for stop strings.
pub fn chat_stop_strings(template: &str) -> Result<Vec<&'static str>> {
    let tmpl = cstring(template)?;
    let mut out: Vec<*const c_char> = vec![std::ptr::null(); 8];
    loop {
        let mut n = 0usize;
        let st = unsafe {
            sys::fx_chat_stop_strings(tmpl.as_ptr(), out.as_mut_ptr(), out.len(), &mut n)
        };
        if st == sys::FX_OK {
            // Static strings, per ferrox.h.
            return Ok(out[..n].iter().map(|&p| unsafe { static_str(p) }).collect());
        }
        if st != sys::FX_ERR_BUFFER_TOO_SMALL {
            return Err(Error::new(st, "template not recognized"));
        }
        out = vec![std::ptr::null(); n];
    }
}

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

/// The family of template text (or of a family name): "jinja" for text
/// that resembles no family, which is still rendered by the interpreter.
pub fn detect_chat_template(template: &str) -> Result<&'static str> {
    let tmpl = cstring(template)?;
    let mut fam: *const c_char = std::ptr::null();
    let st = unsafe { sys::fx_chat_detect(std::ptr::null(), tmpl.as_ptr(), &mut fam) };
    if st != sys::FX_OK {
        // Without a model the library keeps no message.
        return Err(Error::new(st, ""));
    }
    Ok(unsafe { static_str(fam) })
}

/// The chat-template families accepted by name.
pub fn chat_families() -> Vec<&'static str> {
    let n = unsafe { sys::fx_chat_family_count() };
    (0..n)
        .map(|i| unsafe { static_str(sys::fx_chat_family_name(i)) })
        .collect()
}

// ----------------------------------------------------------------- events --

/// Why a row ended (fx_finish_reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation or stop token.
    Eos,
    /// A stop string.
    Stop,
    /// max_tokens or the context reached.
    Length,
    Cancelled,
    /// The row failed; see `Done::status`.
    Error,
    /// A reason newer than this crate.
    Other(i32),
}

impl Finish {
    fn from_raw(v: i32) -> Finish {
        match v {
            1 => Finish::Eos,
            2 => Finish::Stop,
            3 => Finish::Length,
            4 => Finish::Cancelled,
            5 => Finish::Error,
            v => Finish::Other(v),
        }
    }
}

/// A row's token counts and clocks.
#[derive(Clone, Copy, Debug)]
pub struct Usage {
    /// Including the lease's.
    pub prompt_tokens: u32,
    /// Of which taken from the prefix cache.
    pub cached_tokens: u32,
    pub completion_tokens: u32,
    pub queue: Duration,
    pub ttft: Duration,
    pub total: Duration,
}

/// A generated token with its log-probability and the most likely
/// alternatives, most likely first.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: i32,
    pub logprob: f32,
    pub top: Vec<(i32, f32)>,
}

/// A chunk of a row's output, never split inside a character. It
/// dereferences to `str` and prints as its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Text {
    pub text: String,
    /// For a row with a lazy grammar: the byte offset in the row's output
    /// where its trigger starts, from the first Text that reaches it on;
    /// None before that and for every other row.
    pub grammar_start: Option<u64>,
}

impl std::ops::Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl<'a> PartialEq<&'a str> for Text {
    fn eq(&self, other: &&'a str) -> bool {
        self.text == *other
    }
}

/// How a row ended: its last event.
#[derive(Clone, Debug)]
pub struct Done {
    pub finish: Finish,
    /// Why, when `finish` is `Finish::Error`.
    pub status: Status,
    /// Stop: which stop string; Eos: the token; otherwise -1.
    pub stop_index: i32,
    pub usage: Usage,
    /// The generated token ids.
    pub tokens: Vec<i32>,
    /// A lazy grammar's trigger: its byte offset in the output, or None.
    pub grammar_start: Option<u64>,
}

/// One event of a row.
#[derive(Clone, Debug)]
pub enum Event {
    /// A chunk of output.
    Text(Text),
    /// Only for requests with `n_logprobs`.
    Token(TokenLogprobs),
    Done(Done),
}

fn duration(s: f64) -> Duration {
    // Duration::from_secs_f64 panics on negative or non-finite input.
    if s.is_finite() && s > 0.0 {
        Duration::from_secs_f64(s)
    } else {
        Duration::from_secs(0)
    }
}

/// fx_event.grammar_start: -1 (no lazy grammar, or no trigger yet) is None.
fn start(v: i64) -> Option<u64> {
    if v < 0 {
        None
    } else {
        Some(v as u64)
    }
}

/// Copies an event out of the library: its pointers are valid only until
/// the next fx_poll.
///
/// # Safety
/// `e` was just filled by fx_poll.
unsafe fn convert_event(e: &sys::fx_event) -> Option<Event> {
    unsafe fn slice<'a, T>(p: *const T, n: usize) -> &'a [T] {
        if n == 0 || p.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(p, n)
        }
    }
    match e.type_ {
        sys::FX_EVENT_TEXT => {
            let bytes = slice(e.text as *const u8, e.text_len);
            // The library promises whole UTF-8 characters; lossy only keeps
            // a library bug from becoming a panic in the host's loop.
            Some(Event::Text(Text {
                text: String::from_utf8_lossy(bytes).into_owned(),
                grammar_start: start(e.grammar_start),
            }))
        }
        sys::FX_EVENT_TOKEN => Some(Event::Token(TokenLogprobs {
            token: e.token,
            logprob: e.logprob,
            top: slice(e.top, e.n_top)
                .iter()
                .map(|t| (t.token, t.logprob))
                .collect(),
        })),
        sys::FX_EVENT_DONE => Some(Event::Done(Done {
            finish: Finish::from_raw(e.finish),
            status: Status(e.status),
            stop_index: e.stop_index,
            usage: Usage {
                prompt_tokens: e.usage.prompt_tokens,
                cached_tokens: e.usage.cached_tokens,
                completion_tokens: e.usage.completion_tokens,
                queue: duration(e.usage.queue_seconds),
                ttft: duration(e.usage.ttft_seconds),
                total: duration(e.usage.total_seconds),
            },
            tokens: slice(e.tokens, e.n_tokens).to_vec(),
            grammar_start: start(e.grammar_start),
        })),
        _ => None, // an event type newer than this crate
    }
}

// ---------------------------------------------------------------- batcher --

/// Options of `Batcher::new`; None keeps the library's default
/// (fx_batcher_params_init).
#[derive(Clone, Debug, Default)]
pub struct BatcherOptions {
    /// Rows admitted at once.
    pub max_rows: Option<u32>,
    /// Tokens one step may run through the model (bounds its latency).
    pub max_step_tokens: Option<u32>,
    /// Most positions one row may use.
    pub n_ctx: Option<u32>,
    /// KV block size in positions.
    pub block_tokens: Option<u32>,
    /// Memory for the KV cache.
    pub kv_bytes: Option<u64>,
    /// The batcher starts n_threads - 1 worker threads.
    pub n_threads: Option<u32>,
    /// Never adopt or publish prefixes.
    pub no_prefix_cache: bool,
    /// OpenBLAS for large matmuls: faster, but not batch-invariant.
    pub fast: bool,
}

struct Shared {
    raw: *mut sys::fx_batcher,
    state: Mutex<State>,
    model: Model,
}

struct State {
    rows: HashMap<usize, RowState>, // by the request's user id
    next_id: usize,
}

struct RowState {
    events: VecDeque<Event>,
    ended: bool, // its Done was polled
}

// SAFETY: an fx_batcher has no thread affinity (its worker threads are its
// own), so it may move between threads and be freed on any (Send). Shared
// use (Sync): ferrox.h requires every batcher call but fx_cancel to come
// from one thread at a time, and every such call here is made while
// holding `state`; fx_cancel is documented as safe from any thread at any
// time, even during fx_step. `raw` stays valid until Drop, and rows and
// leases hold an Arc<Shared>, so no call can follow fx_batcher_free.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Drop for Shared {
    fn drop(&mut self) {
        // Under the model's lock: freeing a batcher updates a counter in
        // the model that another thread may be changing. The model itself
        // is dropped after this body (it is a field), so after the free.
        let _guard = lock(&self.model.inner.lock);
        unsafe { sys::fx_batcher_free(self.raw) }
    }
}

impl Shared {
    fn fail(&self, st: i32) -> Error {
        // Only called with `state` held: the message belongs to our call.
        Error::new(st, unsafe { owned_str(sys::fx_batcher_errmsg(self.raw)) })
    }

    /// One fx_step and the routing of its events; `state` is held.
    fn step_locked(&self, state: &mut State) -> Result<()> {
        let st = unsafe { sys::fx_step(self.raw) };
        // Events from before a failure still reach their rows.
        let mut ev: sys::fx_event = unsafe { std::mem::zeroed() };
        let mut poll_st = sys::FX_OK;
        // Our own size of fx_event: the library writes exactly that much,
        // so a newer library never writes past it.
        let size = std::mem::size_of::<sys::fx_event>();
        while unsafe { sys::fx_poll_sized(self.raw, &mut ev, size, &mut poll_st) } != 0 {
            let row = match state.rows.get_mut(&(ev.user as usize)) {
                Some(row) => row,
                None => continue, // released after the event was queued
            };
            if let Some(event) = unsafe { convert_event(&ev) } {
                if let Event::Done(_) = event {
                    row.ended = true;
                }
                row.events.push_back(event);
            }
        }
        if st != sys::FX_OK {
            return Err(self.fail(st));
        }
        if poll_st != sys::FX_OK {
            return Err(self.fail(poll_st));
        }
        Ok(())
    }
}

/// Rows in flight over one model (fx_batcher). Dropping it ends the rows
/// that are not held elsewhere; a `Row` or `Lease` keeps the C batcher
/// alive until it is dropped too.
pub struct Batcher {
    shared: Arc<Shared>,
}

impl Batcher {
    /// Creates a batcher over a loaded (not vocabulary-only) model.
    pub fn new(model: &Model, opts: &BatcherOptions) -> Result<Batcher> {
        let mut p: sys::fx_batcher_params = unsafe { std::mem::zeroed() };
        unsafe { sys::fx_batcher_params_init(&mut p) };
        if let Some(v) = opts.max_rows {
            p.max_rows = v;
        }
        if let Some(v) = opts.max_step_tokens {
            p.max_step_tokens = v;
        }
        if let Some(v) = opts.n_ctx {
            p.n_ctx = v;
        }
        if let Some(v) = opts.block_tokens {
            p.block_tokens = v;
        }
        if let Some(v) = opts.kv_bytes {
            p.kv_bytes = v;
        }
        if let Some(v) = opts.n_threads {
            p.n_threads = v;
        }
        if opts.no_prefix_cache {
            p.flags |= sys::FX_BATCHER_NO_PREFIX_CACHE;
        }
        if opts.fast {
            p.flags |= sys::FX_BATCHER_FAST;
        }
        let mut raw = std::ptr::null_mut();
        let mut err = [0u8; 1024];
        let st = {
            let _guard = lock(&model.inner.lock); // see Shared::drop
            unsafe {
                sys::fx_batcher_create(
                    model.inner.raw,
                    &p,
                    &mut raw,
                    err.as_mut_ptr() as *mut c_char,
                    err.len(),
                )
            }
        };
        if st != sys::FX_OK {
            return Err(Error::new(st, errbuf_text(&err)));
        }
        let state = State {
            rows: HashMap::new(),
            next_id: 0,
        };
        Ok(Batcher {
            shared: Arc::new(Shared {
                raw,
                state: Mutex::new(state),
                model: model.clone(),
            }),
        })
    }

    /// Queues a request and returns its row at once (never runs the
    /// model). Errors: e.g. `Status::GRAMMAR` for a grammar that does not
    /// compile (the message has its line and column), `Status::NO_ROOM` for
    /// a request that can never fit.
    pub fn submit(&self, req: &Request) -> Result<Row> {
        let mut r: sys::fx_request = unsafe { std::mem::zeroed() };
        unsafe { sys::fx_request_init(&mut r) };
        // Everything `r` points to is owned by `req` or by the locals below
        // and outlives fx_submit, which copies it all.
        match &req.prompt {
            Prompt::Text(t) => {
                r.prompt = t.as_ptr() as *const c_char;
                r.prompt_len = t.len();
            }
            Prompt::Tokens(t) => {
                r.prompt_tokens = t.as_ptr();
                r.n_prompt_tokens = t.len();
            }
        }
        macro_rules! set {
            ($($field:ident),*) => { $(if let Some(v) = req.$field { r.$field = v; })* };
        }
        set!(
            max_tokens,
            temperature,
            top_k,
            top_p,
            min_p,
            typical_p,
            seed,
            repeat_penalty,
            presence_penalty,
            frequency_penalty,
            penalty_last_n,
            n_logprobs
        );
        let stops = req
            .stop
            .iter()
            .map(|s| cstring(s))
            .collect::<Result<Vec<_>>>()?;
        let stop_ptrs: Vec<*const c_char> = stops.iter().map(|s| s.as_ptr()).collect();
        if !stop_ptrs.is_empty() {
            r.stop = stop_ptrs.as_ptr();
            r.n_stop = stop_ptrs.len();
        }
        if !req.stop_tokens.is_empty() {
            r.stop_tokens = req.stop_tokens.as_ptr();
            r.n_stop_tokens = req.stop_tokens.len();
        }
        let bias: Vec<sys::fx_logit_bias> = req
            .logit_bias
            .iter()
            .map(|&(token, bias)| sys::fx_logit_bias { token, bias })
            .collect();
        if !bias.is_empty() {
            r.logit_bias = bias.as_ptr();
            r.n_logit_bias = bias.len();
        }
        if let Some(g) = &req.grammar {
            r.grammar = g.as_ptr() as *const c_char;
            r.grammar_len = g.len();
        }
        let root = opt_cstring(req.grammar_root.as_deref())?;
        r.grammar_root = opt_ptr(&root);
        let triggers = req
            .grammar_triggers
            .iter()
            .map(|s| cstring(s))
            .collect::<Result<Vec<_>>>()?;
        let trigger_ptrs: Vec<*const c_char> = triggers.iter().map(|s| s.as_ptr()).collect();
        if !trigger_ptrs.is_empty() {
            r.grammar_triggers = trigger_ptrs.as_ptr();
            r.n_grammar_triggers = trigger_ptrs.len();
        }
        if !req.grammar_trigger_tokens.is_empty() {
            r.grammar_trigger_tokens = req.grammar_trigger_tokens.as_ptr();
            r.n_grammar_trigger_tokens = req.grammar_trigger_tokens.len();
        }
        r.flags |= (if req.json { sys::FX_REQUEST_JSON } else { 0 })
            | (if req.ignore_eos {
                sys::FX_REQUEST_IGNORE_EOS
            } else {
                0
            })
            | (if req.parse_special {
                sys::FX_REQUEST_PARSE_SPECIAL
            } else {
                0
            })
            | (if req.no_bos {
                sys::FX_REQUEST_NO_BOS
            } else {
                0
            });
        if let Some((owner, handle)) = &req.lease {
            if !Arc::ptr_eq(owner, &self.shared) {
                return Err(Error::new(1, "the lease belongs to another batcher"));
            }
            r.lease = *handle as *mut sys::fx_lease;
        }

        let mut state = lock(&self.shared.state);
        // Ids from 1: a user id of 0 would be a NULL user pointer.
        state.next_id += 1;
        let id = state.next_id;
        r.user = id as *mut std::os::raw::c_void;
        let mut row = std::ptr::null_mut();
        let st = unsafe { sys::fx_submit(self.shared.raw, &r, &mut row) };
        if st != sys::FX_OK {
            return Err(self.shared.fail(st));
        }
        state.rows.insert(
            id,
            RowState {
                events: VecDeque::new(),
                ended: false,
            },
        );
        Ok(Row {
            shared: self.shared.clone(),
            id,
            handle: row as usize,
        })
    }

    /// One bounded tick (fx_step): admit, prefill, decode. The events it
    /// produces are routed to their rows. Only batcher-wide failures are
    /// returned.
    pub fn step(&self) -> Result<()> {
        let mut state = lock(&self.shared.state);
        self.shared.step_locked(&mut state)
    }

    /// Rows queued or running.
    pub fn pending(&self) -> u32 {
        let _state = lock(&self.shared.state);
        unsafe { sys::fx_batcher_pending(self.shared.raw) }
    }

    /// Steps until no row is queued or running.
    pub fn run(&self) -> Result<()> {
        while self.pending() > 0 {
            self.step()?;
        }
        Ok(())
    }

    /// Pins a prefix many rows share (fx_lease_create); the following
    /// steps compute it. Pass it to `Request::lease`.
    pub fn lease(&self, text: &str, parse_special: bool, no_bos: bool) -> Result<Lease> {
        let flags = (if parse_special {
            sys::FX_REQUEST_PARSE_SPECIAL
        } else {
            0
        }) | (if no_bos { sys::FX_REQUEST_NO_BOS } else { 0 });
        let _state = lock(&self.shared.state);
        let mut raw = std::ptr::null_mut();
        let st = unsafe {
            sys::fx_lease_create(
                self.shared.raw,
                text.as_ptr() as *const c_char,
                text.len(),
                flags,
                &mut raw,
            )
        };
        if st != sys::FX_OK {
            return Err(self.shared.fail(st));
        }
        Ok(Lease {
            shared: self.shared.clone(),
            handle: raw as usize,
            released: AtomicBool::new(false),
        })
    }

    /// The model this batcher runs.
    pub fn model(&self) -> &Model {
        &self.shared.model
    }
}

// ---------------------------------------------------------------- request --

#[derive(Clone)]
enum Prompt {
    Text(String),
    Tokens(Vec<i32>),
}

/// A generation request, built with chained setters. A setting left unset
/// keeps the library's default (fx_request_init).
#[derive(Clone)]
pub struct Request {
    prompt: Prompt,
    max_tokens: Option<u32>,
    temperature: Option<f32>,
    top_k: Option<u32>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    typical_p: Option<f32>,
    seed: Option<u64>,
    repeat_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    penalty_last_n: Option<u32>,
    n_logprobs: Option<u32>,
    stop: Vec<String>,
    stop_tokens: Vec<i32>,
    logit_bias: Vec<(i32, f32)>,
    grammar: Option<String>,
    grammar_root: Option<String>,
    grammar_triggers: Vec<String>,
    grammar_trigger_tokens: Vec<i32>,
    json: bool,
    ignore_eos: bool,
    parse_special: bool,
    no_bos: bool,
    lease: Option<(Arc<Shared>, usize)>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $t:ty),* $(,)?) => {
        $($(#[$doc])* pub fn $name(mut self, v: $t) -> Self { self.$name = Some(v); self })*
    };
}

impl Request {
    fn with(prompt: Prompt) -> Request {
        Request {
            prompt,
            max_tokens: None,
            temperature: None,
            top_k: None,
            top_p: None,
            min_p: None,
            typical_p: None,
            seed: None,
            repeat_penalty: None,
            presence_penalty: None,
            frequency_penalty: None,
            penalty_last_n: None,
            n_logprobs: None,
            stop: Vec::new(),
            stop_tokens: Vec::new(),
            logit_bias: Vec::new(),
            grammar: None,
            grammar_root: None,
            grammar_triggers: Vec::new(),
            grammar_trigger_tokens: Vec::new(),
            json: false,
            ignore_eos: false,
            parse_special: false,
            no_bos: false,
            lease: None,
        }
    }

    /// A text prompt, tokenized at submit (with BOS as the vocabulary says).
    pub fn text(prompt: impl Into<String>) -> Request {
        Request::with(Prompt::Text(prompt.into()))
    }

    /// A prompt of token ids.
    pub fn tokens(prompt: impl Into<Vec<i32>>) -> Request {
        Request::with(Prompt::Tokens(prompt.into()))
    }

    setters! {
        /// Tokens to generate at most.
        max_tokens: u32,
        /// <= 0: greedy.
        temperature: f32,
        /// 0: off.
        top_k: u32,
        /// 1: off.
        top_p: f32,
        /// 0: off.
        min_p: f32,
        /// 1: off.
        typical_p: f32,
        /// The row's random stream: same seed, same tokens.
        seed: u64,
        /// 1: off.
        repeat_penalty: f32,
        presence_penalty: f32,
        frequency_penalty: f32,
        /// Tokens the penalties look back.
        penalty_last_n: u32,
        /// 1..=20: Event::Token with that many alternatives.
        n_logprobs: u32,
    }

    /// Strings that end generation (not emitted).
    pub fn stop<S: Into<String>>(mut self, stops: impl IntoIterator<Item = S>) -> Self {
        self.stop = stops.into_iter().map(Into::into).collect();
        self
    }

    /// Extra token ids that end generation.
    pub fn stop_tokens(mut self, tokens: impl Into<Vec<i32>>) -> Self {
        self.stop_tokens = tokens.into();
        self
    }

    /// Adds `bias` to a token's logit before sampling; f32::NEG_INFINITY
    /// bans it.
    pub fn logit_bias(mut self, token: i32, bias: f32) -> Self {
        self.logit_bias.push((token, bias));
        self
    }

    /// A GBNF grammar the output must match.
    pub fn grammar(mut self, gbnf: impl Into<String>) -> Self {
        self.grammar = Some(gbnf.into());
        self
    }

    /// The grammar's start rule (default "root").
    pub fn grammar_root(mut self, rule: impl Into<String>) -> Self {
        self.grammar_root = Some(rule.into());
        self
    }

    /// Makes the grammar (or `json`) lazy: the row samples freely until
    /// its output contains one of these strings, and the grammar, which
    /// must start with the trigger, holds it from there (see
    /// `tools_to_grammar`). `Text::grammar_start` says where it took over.
    pub fn grammar_triggers<S: Into<String>>(
        mut self,
        triggers: impl IntoIterator<Item = S>,
    ) -> Self {
        self.grammar_triggers = triggers.into_iter().map(Into::into).collect();
        self
    }

    /// Like `grammar_triggers`, for token ids: sampling one of them starts
    /// the grammar.
    pub fn grammar_trigger_tokens(mut self, tokens: impl Into<Vec<i32>>) -> Self {
        self.grammar_trigger_tokens = tokens.into();
        self
    }

    /// The output is one JSON value (a built-in grammar; not with
    /// `grammar`).
    pub fn json(mut self, on: bool) -> Self {
        self.json = on;
        self
    }

    /// Keep going past end-of-generation tokens.
    pub fn ignore_eos(mut self, on: bool) -> Self {
        self.ignore_eos = on;
        self
    }

    /// Special-token text in a text prompt becomes the special token.
    pub fn parse_special(mut self, on: bool) -> Self {
        self.parse_special = on;
        self
    }

    /// Do not add BOS to a text prompt.
    pub fn no_bos(mut self, on: bool) -> Self {
        self.no_bos = on;
        self
    }

    /// Continue a pinned prefix.
    pub fn lease(mut self, lease: &Lease) -> Self {
        self.lease = Some((lease.shared.clone(), lease.handle));
        self
    }
}

// -------------------------------------------------------------------- rows --

/// One request in a batcher. Read its events with `next_event`, `events`
/// or `wait`; they step the batcher when the row has nothing waiting, which
/// advances every other row too. Dropping the row releases it (cancelling
/// it if it still runs).
pub struct Row {
    shared: Arc<Shared>,
    id: usize,
    handle: usize, // a generation-counted id, never dereferenced
}

/// Everything a row produced, from `Row::wait`.
#[derive(Clone, Debug)]
pub struct Completion {
    pub text: String,
    pub finish: Finish,
    pub stop_index: i32,
    pub usage: Usage,
    pub tokens: Vec<i32>,
    /// The Token events, for requests with `n_logprobs`.
    pub logprobs: Vec<TokenLogprobs>,
    /// A lazy grammar's trigger: its byte offset in `text`, or None.
    pub grammar_start: Option<u64>,
}

impl Row {
    /// The next event, stepping the batcher as needed; None after Done or
    /// once the row was released.
    pub fn next_event(&self) -> Result<Option<Event>> {
        let mut state = lock(&self.shared.state);
        loop {
            let row = match state.rows.get_mut(&self.id) {
                Some(row) => row,
                None => return Ok(None), // released
            };
            if let Some(ev) = row.events.pop_front() {
                return Ok(Some(ev));
            }
            if row.ended {
                return Ok(None);
            }
            self.shared.step_locked(&mut state)?;
            let stuck = state
                .rows
                .get(&self.id)
                .map_or(false, |r| r.events.is_empty() && !r.ended)
                && unsafe { sys::fx_batcher_pending(self.shared.raw) } == 0;
            if stuck {
                // Nothing left to run yet the row never ended: a library
                // bug. An error beats spinning the caller's loop forever.
                return Err(Error::new(
                    23,
                    "row has not ended but the batcher has nothing pending",
                ));
            }
        }
    }

    /// An iterator over the row's events.
    pub fn events(&self) -> Events<'_> {
        Events { row: self }
    }

    /// Runs the row to its end and returns what it produced (from the
    /// events not yet read). A failed row is an Error with its status.
    pub fn wait(&self) -> Result<Completion> {
        let mut text = String::new();
        let mut logprobs = Vec::new();
        while let Some(ev) = self.next_event()? {
            match ev {
                Event::Text(t) => text.push_str(&t),
                Event::Token(t) => logprobs.push(t),
                Event::Done(d) => {
                    if d.finish == Finish::Error {
                        return Err(Error {
                            status: d.status,
                            message: "the row failed".into(),
                        });
                    }
                    return Ok(Completion {
                        text,
                        finish: d.finish,
                        stop_index: d.stop_index,
                        usage: d.usage,
                        tokens: d.tokens,
                        logprobs,
                        grammar_start: d.grammar_start,
                    });
                }
            }
        }
        Err(Error::new(20, "the row was released before it ended"))
    }

    /// Asks the row to end: Done with `Finish::Cancelled` at the next step,
    /// unless it finished first. Callable from any thread, even while
    /// another is stepping (it does not take the batcher's lock).
    pub fn cancel(&self) -> Result<()> {
        let st = unsafe { sys::fx_cancel(self.shared.raw, self.handle as *mut sys::fx_row) };
        // STALE_HANDLE: the row already ended (or was released), which is
        // what cancelling asks for.
        if st == sys::FX_OK || st == sys::FX_ERR_STALE_HANDLE {
            Ok(())
        } else {
            Err(Error::new(st, "fx_cancel failed"))
        }
    }

    /// Whether the row has ended (its Done may be unread) or was released.
    pub fn is_ended(&self) -> bool {
        let state = lock(&self.shared.state);
        state.rows.get(&self.id).map_or(true, |r| r.ended)
    }

    /// Releases the row: cancelled if running, no more events. Calling it
    /// again, or after the row ended, does nothing.
    pub fn release(&self) -> Result<()> {
        let mut state = lock(&self.shared.state);
        match state.rows.remove(&self.id) {
            Some(row) if !row.ended => {
                let st = unsafe {
                    sys::fx_row_release(self.shared.raw, self.handle as *mut sys::fx_row)
                };
                if st != sys::FX_OK {
                    return Err(self.shared.fail(st));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        // Nothing useful can be done with an error here; the row is gone
        // from the binding either way.
        let _ = self.release();
    }
}

/// Iterator over a row's events (see `Row::events`).
pub struct Events<'a> {
    row: &'a Row,
}

impl<'a> Iterator for Events<'a> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.row.next_event() {
            Ok(Some(ev)) => Some(Ok(ev)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

// ------------------------------------------------------------------ leases --

/// A prefix pinned in the KV cache (fx_lease). Dropping it unpins it; rows
/// already using it are unaffected.
pub struct Lease {
    shared: Arc<Shared>,
    handle: usize, // a generation-counted id, never dereferenced
    released: AtomicBool,
}

/// Where a lease stands (fx_lease_state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Queued, or being computed.
    Pending,
    /// Computed and pinned: rows continuing it adopt its blocks.
    Pinned,
    /// Computed, but nothing could be pinned: rows compute its tokens.
    Unpinned,
    /// A state newer than this crate.
    Other(i32),
}

impl Lease {
    /// Where the lease stands; `Status::STALE_HANDLE` once released.
    pub fn state(&self) -> Result<LeaseState> {
        let _state = lock(&self.shared.state);
        if self.released.load(Ordering::Relaxed) {
            return Err(Error::new(20, "the lease is released"));
        }
        let mut s = 0;
        let st = unsafe {
            sys::fx_lease_status(self.shared.raw, self.handle as *const sys::fx_lease, &mut s)
        };
        if st != sys::FX_OK {
            // fx_lease_status records no message; the status says it.
            return Err(Error::new(st, ""));
        }
        Ok(match s {
            1 => LeaseState::Pending,
            2 => LeaseState::Pinned,
            3 => LeaseState::Unpinned,
            v => LeaseState::Other(v),
        })
    }

    /// Whether the prefix is computed (pinned or not: `is_pinned`).
    pub fn is_ready(&self) -> bool {
        let _state = lock(&self.shared.state);
        !self.released.load(Ordering::Relaxed)
            && unsafe { sys::fx_lease_ready(self.shared.raw, self.handle as *const sys::fx_lease) }
                != 0
    }

    /// Whether the prefix's KV blocks are pinned in the cache (`is_ready`
    /// is also true for a lease that ended without a pin: a prefix shorter
    /// than one block, no room, or no prefix cache).
    pub fn is_pinned(&self) -> bool {
        let _state = lock(&self.shared.state);
        !self.released.load(Ordering::Relaxed)
            && unsafe { sys::fx_lease_pinned(self.shared.raw, self.handle as *const sys::fx_lease) }
                != 0
    }

    /// Unpins the prefix. Calling it again does nothing.
    pub fn release(&self) -> Result<()> {
        let _state = lock(&self.shared.state);
        if self.released.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        let st =
            unsafe { sys::fx_lease_release(self.shared.raw, self.handle as *mut sys::fx_lease) };
        if st != sys::FX_OK {
            return Err(self.shared.fail(st));
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
