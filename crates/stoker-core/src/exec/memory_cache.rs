//! `cache()` in memory: the first complete pass records the elements; later passes hand out
//! the same buffers (no copy). A pass stopped early records nothing, as in tf.data.

use std::sync::{Arc, Mutex};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, State};

/// The cached elements of one `cache()` step, shared by all iterations of the pipeline.
#[derive(Debug, Default)]
pub struct MemoryCache {
    /// The elements, and the epoch of the pass that recorded them.
    filled: Mutex<Option<(Arc<Vec<Element>>, u64)>>,
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

    fn contents(&self) -> Option<(Arc<Vec<Element>>, u64)> {
        self.filled.lock().ok().and_then(|f| f.clone())
    }

    /// An iterator that replays the cache, or fills it from a fresh input iterator made for
    /// the pass of epoch `epoch`.
    pub fn iterate(self: &Arc<Self>, epoch: u64, make_input: MakeAt<'_>) -> Result<BoxIter> {
        Ok(match self.contents() {
            Some((elements, epoch)) => Box::new(Replay {
                elements,
                next: 0,
                epoch,
            }),
            None => Box::new(Fill {
                input: Some(make_input(epoch)?),
                collected: Vec::new(),
                cache: Arc::clone(self),
                epoch,
            }),
        })
    }

    /// Restored at a state from [`ElementIter::state`]. A replay goes on from the cache when
    /// this process has filled it; otherwise (a new process) the cache is filled again: the
    /// input is run again at the epoch of the pass that filled it, through the elements
    /// handed out so far, which it keeps, and goes on from there.
    pub fn restore(self: &Arc<Self>, make_input: MakeAt<'_>, state: &State) -> Result<BoxIter> {
        let (position, epoch) = (state.int(OP, 1)?, state.int(OP, 2)?);
        if let Some((elements, filled_at)) = self.contents() {
            if position as usize > elements.len() {
                return Err(crate::exec::state::mismatch(OP));
            }
            return Ok(Box::new(Replay {
                elements,
                next: position as usize,
                epoch: filled_at,
            }));
        }
        let mut input = make_input(epoch)?;
        let mut collected = Vec::with_capacity(position as usize);
        for _ in 0..position {
            match input.next()? {
                Some(e) => collected.push(e),
                None => return Err(crate::exec::state::mismatch(OP)),
            }
        }
        Ok(Box::new(Fill {
            input: Some(input),
            collected,
            cache: Arc::clone(self),
            epoch,
        }))
    }
}

struct Replay {
    elements: Arc<Vec<Element>>,
    next: usize,
    epoch: u64,
}

impl ElementIter for Replay {
    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![1, self.next as u64, self.epoch]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let e = self.elements.get(self.next).cloned();
        if e.is_some() {
            self.next += 1;
        }
        Ok(e)
    }
}

struct Fill {
    input: Option<BoxIter>,
    collected: Vec<Element>,
    cache: Arc<MemoryCache>,
    epoch: u64,
}

impl ElementIter for Fill {
    fn state(&self) -> Result<State> {
        let (mode, handed) = match &self.input {
            Some(_) => (0, self.collected.len() as u64),
            // Filled: as a replay at its end.
            None => (1, self.cache.contents().map_or(0, |(e, _)| e.len() as u64)),
        };
        Ok(State::leaf(vec![mode, handed, self.epoch]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let Some(input) = self.input.as_mut() else {
            return Ok(None);
        };
        match input.next()? {
            Some(e) => {
                self.collected.push(e.clone());
                Ok(Some(e))
            }
            None => {
                self.input = None;
                let all = Arc::new(std::mem::take(&mut self.collected));
                if let Ok(mut f) = self.cache.filled.lock() {
                    f.get_or_insert((all, self.epoch));
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
