//! The batcher.

use std::collections::{HashMap, VecDeque};
use std::os::raw::c_char;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::*;

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
    /// Keys and values stored as f16: half the KV memory, each rounded
    /// once when stored.
    pub kv_f16: bool,
}

pub(crate) struct Shared {
    pub(crate) raw: *mut sys::fx_batcher,
    pub(crate) state: Mutex<State>,
    pub(crate) model: Model,
}

pub(crate) struct State {
    pub(crate) rows: HashMap<usize, RowState>, // by the request's user id
    pub(crate) next_id: usize,
}

pub(crate) struct RowState {
    pub(crate) events: VecDeque<Event>,
    pub(crate) ended: bool, // its Done was polled
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
    pub(crate) fn fail(&self, st: i32) -> Error {
        // Only called with `state` held: the message belongs to our call.
        Error::new(st, unsafe { owned_str(sys::fx_batcher_errmsg(self.raw)) })
    }

    /// One fx_step and the routing of its events; `state` is held.
    pub(crate) fn step_locked(&self, state: &mut State) -> Result<()> {
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
    pub(crate) shared: Arc<Shared>,
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
        if opts.kv_f16 {
            p.flags |= sys::FX_BATCHER_KV_F16;
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
