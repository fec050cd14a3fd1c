//! Chat templates without a model, and the chat-message structures.

use std::ffi::CString;
use std::os::raw::c_char;

use crate::*;

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
    pub(crate) fn flags(self) -> u32 {
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
pub(crate) fn chat_messages(
    msgs: &[ChatMessage<'_>],
) -> Result<(Vec<sys::fx_chat_message>, Vec<CString>)> {
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

pub(crate) fn opt_cstring(s: Option<&str>) -> Result<Option<CString>> {
    match s {
        Some(s) => cstring(s).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn opt_ptr(s: &Option<CString>) -> *const c_char {
    s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
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
    sized_text(|buf, cap, needed, err, err_cap| unsafe {
        sys::fx_chat_apply_template(
            tmpl.as_ptr(),
            arr.as_ptr(),
            arr.len(),
            opts.flags(),
            buf,
            cap,
            needed,
            err,
            err_cap,
        )
    })
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
pub(crate) fn sized_text(
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
pub(crate) fn render_chat(
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
