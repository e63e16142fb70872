//! The executor: one iterator type per pipeline operator.
//!
//! Iterators are pull-based, like tf.data's: each stage's `next` pulls from its input.
//! Asynchronous stages ([`prefetch`], [`parallel_map`], parallel [`interleave`]) run their
//! work on threads they own and hand results through bounded channels; dropping such an
//! iterator closes its channels and joins its threads, so stopping early never leaks a thread
//! or hangs.

pub mod batch;
pub mod enumerate;
pub mod filter;
pub mod index_shuffle;
pub mod interleave;
pub mod map;
pub mod memory_cache;
pub mod padded_batch;
pub mod parallel_map;
pub mod parallel_map_batch;
pub mod prefetch;
pub mod refill;
pub mod repeat;
pub mod replay;
pub mod results;
pub mod shard;
pub mod shuffle;
pub mod slices;
pub mod state;
pub mod take_skip;
pub mod threads;
pub mod unbatch;
pub mod zip;

use crate::element::Element;
use crate::error::{Error, Result};
use crate::row_slots::RowSlots;
pub use state::State;

/// The bad records skipped before where `it` stands (see [`State::skipped`]), or the error of
/// a stage that cannot report its state.
pub fn skipped_by(it: &dyn ElementIter) -> Result<u64> {
    it.state().map(|s| s.skipped_total())
}

/// [`skipped_by`] an input whose state is not saved with its consumer's (a restore replays
/// it): one that cannot report its state counts none, as its consumer's state needs no more
/// of it.
pub fn skipped_by_unsaved(it: &dyn ElementIter) -> u64 {
    skipped_by(it).unwrap_or(0)
}

/// An iterator over elements; `Ok(None)` is the end.
pub trait ElementIter: Send {
    fn next(&mut self) -> Result<Option<Element>>;

    /// Like [`next`](ElementIter::next), offering `row`, the element's row of a batch, as
    /// where its fields may be written. Stages that make elements with native ops hand it on
    /// to them (see [`RowSlots`]); the others ignore it.
    fn next_into(&mut self, row: &RowSlots) -> Result<Option<Element>> {
        let _ = row;
        self.next()
    }

    /// Whether [`next_timed`](ElementIter::next_timed) reports how long its calls took (a
    /// metered stage times them anyway), so that a caller timing its pulls need not read the
    /// clock again.
    fn times_itself(&self) -> bool {
        false
    }

    /// [`next_into`](ElementIter::next_into) with `row`, else [`next`](ElementIter::next),
    /// and, where the iterator [times itself](ElementIter::times_itself), when the call began
    /// and how long it took.
    fn next_timed(&mut self, row: Option<&RowSlots>) -> (Result<Option<Element>>, Option<Timed>) {
        let r = match row {
            Some(row) => self.next_into(row),
            None => self.next(),
        };
        (r, None)
    }

    /// Where the iterator stands after the last element it handed out (see [`state`]).
    fn state(&self) -> Result<State> {
        Err(state::unsupported("this stage", "it keeps no position"))
    }
}

pub type BoxIter = Box<dyn ElementIter>;

/// When a call began and how long it took.
pub type Timed = (std::time::Instant, std::time::Duration);

/// Set when the consumer of a pipeline is gone: stages that may loop without producing an
/// element (a `filter` rejecting everything) check it and stop.
pub type CancelFlag = std::sync::Arc<std::sync::atomic::AtomicBool>;

/// Makes a fresh iterator over some dataset (for `repeat`, `cache` and `interleave`).
pub type MakeIter = Box<dyn FnMut() -> Result<BoxIter> + Send>;

/// An iterator over a fixed list of results, for tests and tiny sources.
pub struct VecIter {
    items: std::vec::IntoIter<Result<Element>>,
}

impl VecIter {
    pub fn boxed(items: Vec<Result<Element>>) -> BoxIter {
        Box::new(VecIter {
            items: items.into_iter(),
        })
    }
}

impl ElementIter for VecIter {
    fn next(&mut self) -> Result<Option<Element>> {
        self.items.next().transpose()
    }
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`, turning a panic into [`Error::WorkerPanic`] for stage `step` (for the operators
/// that call user code on the pulling thread).
pub fn catch_panic<T>(step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(Error::WorkerPanic {
            step: step.to_string(),
            message: panic_message(payload.as_ref()),
        }),
    }
}

/// Wraps an iterator so that it ends for good after its first error or end.
pub struct Fused {
    inner: Option<BoxIter>,
}

impl Fused {
    pub fn wrap(inner: BoxIter) -> BoxIter {
        Box::new(Fused { inner: Some(inner) })
    }
}

impl ElementIter for Fused {
    fn state(&self) -> Result<State> {
        match &self.inner {
            Some(inner) => inner.state(),
            None => Err(state::unsupported("the pipeline", "it has ended")),
        }
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let Some(inner) = self.inner.as_mut() else {
            return Ok(None);
        };
        let r = inner.next();
        if !matches!(r, Ok(Some(_))) {
            // Drop the inner pipeline now: its threads stop at once.
            self.inner = None;
        }
        r
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use crate::dtype::DType;
    use crate::element::names;
    use crate::tensor::Tensor;

    /// Elements `{"x": i}` for i in range.
    pub fn ints(range: std::ops::Range<i64>) -> BoxIter {
        let n = names(&["x"]);
        VecIter::boxed(
            range
                .map(|i| {
                    Ok(Element::new(
                        n.clone(),
                        vec![Tensor::from_slice(DType::I64, vec![], &[i]).unwrap()],
                    ))
                })
                .collect(),
        )
    }

    pub fn value(e: &Element) -> i64 {
        e.tensors[0].typed::<i64>().unwrap()[0]
    }

    pub fn drain(mut it: BoxIter) -> Vec<i64> {
        let mut out = Vec::new();
        while let Some(e) = it.next().unwrap() {
            out.extend_from_slice(e.tensors[0].typed::<i64>().unwrap());
        }
        out
    }
}
