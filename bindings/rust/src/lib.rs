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

mod batcher;
mod chat;
mod error;
mod events;
mod grammar;
mod model;
mod request;
mod row;

pub use batcher::*;
pub use chat::*;
pub use error::*;
pub use events::*;
pub use grammar::*;
pub use model::*;
pub use request::*;
pub use row::*;
