//! Models: loading, information, the tokenizer and the model's chat templates.

use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::*;

// ------------------------------------------------------------------- model --

/// A loaded GGUF model. Cloning is cheap and shares the one C handle.
#[derive(Clone)]
pub struct Model {
    pub(crate) inner: Arc<ModelInner>,
}

pub(crate) struct ModelInner {
    pub(crate) raw: *mut sys::fx_model,
    /// Held around every call that may record an error in the model, so
    /// that the message read after a failure is that failure's
    /// (fx_model_errmsg is one per model, not per call), and around batcher
    /// creation and destruction, which update a plain counter in the model.
    pub(crate) lock: Mutex<()>,
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
    /// Make the copy of the weights whole at the first Batcher
    /// (FX_MODEL_EAGER_COPY), not a slice in each of its first steps: a
    /// slower start, every step at full speed.
    pub eager_copy: bool,
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
        if opts.eager_copy {
            params.flags |= sys::FX_MODEL_EAGER_COPY;
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
