//! Requests: what `Batcher::submit` takes.

use std::sync::Arc;

use crate::*;

// ---------------------------------------------------------------- request --

#[derive(Clone)]
pub(crate) enum Prompt {
    Text(String),
    Tokens(Vec<i32>),
}

/// A generation request, built with chained setters. A setting left unset
/// keeps the library's default (fx_request_init).
#[derive(Clone)]
pub struct Request {
    pub(crate) prompt: Prompt,
    pub(crate) max_tokens: Option<u32>,
    pub(crate) temperature: Option<f32>,
    pub(crate) top_k: Option<u32>,
    pub(crate) top_p: Option<f32>,
    pub(crate) min_p: Option<f32>,
    pub(crate) typical_p: Option<f32>,
    pub(crate) seed: Option<u64>,
    pub(crate) repeat_penalty: Option<f32>,
    pub(crate) presence_penalty: Option<f32>,
    pub(crate) frequency_penalty: Option<f32>,
    pub(crate) penalty_last_n: Option<u32>,
    pub(crate) n_logprobs: Option<u32>,
    pub(crate) stop: Vec<String>,
    pub(crate) stop_tokens: Vec<i32>,
    pub(crate) logit_bias: Vec<(i32, f32)>,
    pub(crate) grammar: Option<String>,
    pub(crate) grammar_root: Option<String>,
    pub(crate) grammar_triggers: Vec<String>,
    pub(crate) grammar_trigger_tokens: Vec<i32>,
    pub(crate) json: bool,
    pub(crate) ignore_eos: bool,
    pub(crate) parse_special: bool,
    pub(crate) no_bos: bool,
    pub(crate) lease: Option<(Arc<Shared>, usize)>,
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
