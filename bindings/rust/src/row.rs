//! Rows and leases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::*;

// -------------------------------------------------------------------- rows --

/// One request in a batcher. Read its events with `next_event`, `events`
/// or `wait`; they step the batcher when the row has nothing waiting, which
/// advances every other row too. Dropping the row releases it (cancelling
/// it if it still runs).
pub struct Row {
    pub(crate) shared: Arc<Shared>,
    pub(crate) id: usize,
    pub(crate) handle: usize, // a generation-counted id, never dereferenced
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
    pub(crate) row: &'a Row,
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
    pub(crate) shared: Arc<Shared>,
    pub(crate) handle: usize, // a generation-counted id, never dereferenced
    pub(crate) released: AtomicBool,
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
