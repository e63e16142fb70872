//! `cache()` in memory: the first complete pass records the elements; later passes hand out
//! the same buffers (no copy). A pass stopped early records nothing, as in tf.data.

use std::sync::{Arc, Mutex};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

/// The cached elements of one `cache()` step, shared by all iterations of the pipeline.
#[derive(Debug, Default)]
pub struct MemoryCache {
    filled: Mutex<Option<Filled>>,
}

/// The elements, the epoch of the pass that recorded them, and its skip counts.
type Filled = (Arc<Vec<Element>>, u64, Arc<FillCounts>);

/// The bad records the pass that filled a cache had skipped after each element it took, and
/// in all: a restore of that pass that finds the cache filled goes on counting from them.
#[derive(Debug, Default)]
struct FillCounts {
    after: Vec<u64>,
    total: u64,
}

/// Makes the cache's input for the pass of epoch `epoch`.
pub type MakeAt<'a> = &'a mut dyn FnMut(u64) -> Result<BoxIter>;

const OP: &str = "cache";

impl MemoryCache {
    pub fn new() -> Arc<MemoryCache> {
        Arc::new(MemoryCache::default())
    }

    pub fn is_filled(&self) -> bool {
        self.filled.lock().map(|f| f.is_some()).unwrap_or(false)
    }

    fn contents(&self) -> Option<Filled> {
        self.filled.lock().ok().and_then(|f| f.clone())
    }

    /// An iterator that replays the cache, or fills it from a fresh input iterator made for
    /// the pass of epoch `epoch`.
    pub fn iterate(self: &Arc<Self>, epoch: u64, make_input: MakeAt<'_>) -> Result<BoxIter> {
        Ok(match self.contents() {
            Some((elements, epoch, _)) => Box::new(Replay {
                elements,
                next: 0,
                epoch,
                skipped: 0,
                fill: None,
            }),
            None => Box::new(Fill {
                input: Some(make_input(epoch)?),
                collected: Vec::new(),
                counts: Vec::new(),
                cache: Arc::clone(self),
                epoch,
                skipped: 0,
                recount: Default::default(),
                replaying: None,
            }),
        })
    }

    /// Restored at a state from [`ElementIter::state`]. A replay goes on from the cache when
    /// this process has filled it; otherwise (a new process) the cache is filled again: the
    /// input is run again at the epoch of the pass that filled it, through the elements
    /// handed out so far, which it keeps, and goes on from there.
    pub fn restore(self: &Arc<Self>, make_input: MakeAt<'_>, state: &State) -> Result<BoxIter> {
        let (position, epoch) = (state.int(OP, 1)?, state.int(OP, 2)?);
        if let Some((elements, filled_at, counts)) = self.contents() {
            if position as usize > elements.len() {
                return Err(crate::exec::state::mismatch(OP));
            }
            // A state of the pass that filled it counts on as that pass did.
            let filling = state.int(OP, 0)? == 0;
            return Ok(Box::new(Replay {
                elements,
                next: position as usize,
                epoch: filled_at,
                skipped: state.skipped,
                fill: filling.then_some((counts, false)),
            }));
        }
        let mut input = make_input(epoch)?;
        let mut collected = Vec::with_capacity(position as usize);
        let mut counts = Vec::with_capacity(position as usize);
        for _ in 0..position {
            match input.next()? {
                Some(e) => collected.push(e),
                None => return Err(crate::exec::state::mismatch(OP)),
            }
            counts.push(crate::exec::skipped_by_unsaved(&*input));
        }
        let replaying = (state.int(OP, 0)? == 1).then_some(state.skipped);
        let counted = crate::exec::skipped_by_unsaved(&*input);
        let recount = match replaying {
            // The fill's own counts, not the replay's: what this run counts is the fill pass's.
            Some(_) => Default::default(),
            None => crate::exec::state::Recount::after_restore(state.skipped, counted),
        };
        let counts = counts.into_iter().map(|n| recount.of(n)).collect();
        Ok(Box::new(Fill {
            input: Some(input),
            collected,
            counts,
            cache: Arc::clone(self),
            epoch,
            skipped: 0,
            recount,
            replaying,
        }))
    }
}

struct Replay {
    elements: Arc<Vec<Element>>,
    next: usize,
    epoch: u64,
    /// Bad records skipped in this pass, as restored (a pass after the fill skips none).
    skipped: u64,
    /// Going on with the pass that filled the cache (a restore of it in this process): its
    /// counts, and whether the end was handed out.
    fill: Option<(Arc<FillCounts>, bool)>,
}

impl ElementIter for Replay {
    fn state(&self) -> Result<State> {
        let skipped = match &self.fill {
            None => self.skipped,
            Some((counts, true)) => counts.total,
            Some((counts, false)) => self
                .next
                .checked_sub(1)
                .and_then(|k| counts.after.get(k).copied())
                .unwrap_or(0),
        };
        Ok(State::leaf(vec![1, self.next as u64, self.epoch]).with_skipped(skipped))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let e = self.elements.get(self.next).cloned();
        match (&e, &mut self.fill) {
            (Some(_), _) => self.next += 1,
            (None, Some((_, ended))) => *ended = true,
            (None, None) => {}
        }
        Ok(e)
    }
}

struct Fill {
    input: Option<BoxIter>,
    collected: Vec<Element>,
    /// The skip count after each element collected.
    counts: Vec<u64>,
    cache: Arc<MemoryCache>,
    epoch: u64,
    /// Bad records the fill pass skipped, once its input ended.
    skipped: u64,
    /// Its skip count from its input's (whose state is not saved).
    recount: crate::exec::state::Recount,
    /// Restored from a replay's state (a pass after the one that filled it): the count of
    /// that pass, whatever filling the cache again passes over.
    replaying: Option<u64>,
}

impl Fill {
    /// Bad records the fill pass skipped before where it stands (its input's state is not
    /// saved).
    fn counted(&self) -> u64 {
        match &self.input {
            Some(input) => self.recount.of(crate::exec::skipped_by_unsaved(&**input)),
            None => self.skipped,
        }
    }

    /// Bad records this pass skipped before where it stands.
    fn skipped(&self) -> u64 {
        self.replaying.unwrap_or_else(|| self.counted())
    }
}

impl ElementIter for Fill {
    fn state(&self) -> Result<State> {
        let (mode, handed) = match &self.input {
            Some(_) => (0, self.collected.len() as u64),
            // Filled: as a replay at its end.
            None => (1, self.cache.contents().map_or(0, |(e, ..)| e.len() as u64)),
        };
        Ok(State::leaf(vec![mode, handed, self.epoch]).with_skipped(self.skipped()))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let Some(input) = self.input.as_mut() else {
            return Ok(None);
        };
        match input.next()? {
            Some(e) => {
                self.collected.push(e.clone());
                self.counts.push(self.counted());
                Ok(Some(e))
            }
            None => {
                self.skipped = self.counted();
                self.input = None;
                let all = Arc::new(std::mem::take(&mut self.collected));
                let counts = Arc::new(FillCounts {
                    after: std::mem::take(&mut self.counts),
                    total: self.skipped,
                });
                if let Ok(mut f) = self.cache.filled.lock() {
                    f.get_or_insert((all, self.epoch, counts));
                }
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn second_pass_is_served_from_the_cache_without_copies() {
        let cache = MemoryCache::new();
        let opened = Arc::new(AtomicUsize::new(0));
        let o = Arc::clone(&opened);
        let mut make = move |_: u64| -> Result<BoxIter> {
            o.fetch_add(1, Ordering::SeqCst);
            Ok(ints(0..5))
        };
        // An early stop does not fill the cache.
        let mut it = cache.iterate(0, &mut make).unwrap();
        it.next().unwrap();
        drop(it);
        assert!(!cache.is_filled());
        let mut first = cache.iterate(0, &mut make).unwrap();
        let mut kept = Vec::new();
        while let Some(e) = first.next().unwrap() {
            kept.push(e);
        }
        assert!(cache.is_filled());
        let mut second = cache.iterate(0, &mut make).unwrap();
        let e = second.next().unwrap().unwrap();
        assert_eq!(value(&e), 0);
        let p = |e: &Element| e.tensors[0].storage().unwrap().0.as_bytes().as_ptr();
        assert_eq!(p(&e), p(&kept[0]));
        assert!(!e.tensors[0].is_exclusive());
        assert_eq!(drain(second), vec![1, 2, 3, 4]);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }
}
