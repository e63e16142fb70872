//! Random access to the elements of a pass by position: what `global_shuffle` needs of its
//! input, and what a restored shuffle buffer reads its elements through.

use std::sync::Arc;

use stoker_core::element::Element;
use stoker_core::exec::shuffle::ReadBuffer;
use stoker_core::exec::State;
use stoker_core::Result;

/// Random access to the elements of one pass of a step, by their position in the pass.
pub trait RandomAccess: Send + Sync + 'static {
    /// The number of elements in the pass (may read whole indexes to count them).
    fn count(&self) -> Result<u64>;
    /// Gets ready to hand out the elements before position `upto` (e.g. reads the indexes
    /// saying where they are), so that a caller can have that done alongside other work.
    fn prepare(&self, _upto: u64) -> Result<()> {
        Ok(())
    }
    /// The elements at `positions`, in that order.
    fn get(&self, positions: &[u64]) -> Result<Vec<Element>>;
    /// Like [`get`](RandomAccess::get), where bad elements are skipped (the pipeline's
    /// `on_bad_record=skip`): `None` at a position whose element is bad (a damaged record, an
    /// op that failed on it), so that the positions stay those of the pass. With `count`, what
    /// reading them finds (skips, warnings) is counted in the stages' stats; without, it was
    /// counted already (by the run a restore goes on from).
    fn get_or_skip(&self, positions: &[u64], count: bool) -> Result<Vec<Option<Element>>> {
        let _ = count;
        Ok(self.get(positions)?.into_iter().map(Some).collect())
    }
    /// Counts, in the stages' stats, the losses that lie at no position (damage that took
    /// records' headers, found when the access was opened under the skip policy): once, by a
    /// pass that reads every position from the first. The records counted.
    fn count_unplaced_losses(&self) -> u64 {
        0
    }
    /// Whether [`get_or_skip`](RandomAccess::get_or_skip) may skip positions. A pass run in
    /// order skips them too, and then hands out fewer elements before a position than there
    /// are positions: what a restored shuffle buffer holds cannot be found by position.
    fn may_skip(&self) -> bool {
        false
    }
    /// The state of the step's iterator after the first `upto` elements of the pass.
    fn state_at(&self, upto: u64) -> Result<State>;
    /// A reader of the elements at `positions` (any of them, any time after, on any thread)
    /// and the state after `upto`: what a restored shuffle buffer needs, which some sources
    /// find in one pass over their order.
    fn reader_and_state_at(
        self: Arc<Self>,
        positions: Vec<u64>,
        upto: u64,
    ) -> Result<(ReadBuffer, State)> {
        let state = self.state_at(upto)?;
        Ok((reader_by_get(self, positions), state))
    }
}

/// A reader of the elements at `positions` through [`RandomAccess::get`].
pub fn reader_by_get<A: RandomAccess + ?Sized>(access: Arc<A>, positions: Vec<u64>) -> ReadBuffer {
    Box::new(move |which: &[usize]| {
        let wanted: Vec<u64> = which.iter().map(|&k| positions[k]).collect();
        access.get(&wanted)
    })
}
