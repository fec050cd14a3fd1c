//! What a row produces: events, finish reasons, usage.

use std::fmt;
use std::time::Duration;

use crate::*;

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

pub(crate) fn duration(s: f64) -> Duration {
    // Duration::from_secs_f64 panics on negative or non-finite input.
    if s.is_finite() && s > 0.0 {
        Duration::from_secs_f64(s)
    } else {
        Duration::from_secs(0)
    }
}

/// fx_event.grammar_start: -1 (no lazy grammar, or no trigger yet) is None.
pub(crate) fn start(v: i64) -> Option<u64> {
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
pub(crate) unsafe fn convert_event(e: &sys::fx_event) -> Option<Event> {
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
