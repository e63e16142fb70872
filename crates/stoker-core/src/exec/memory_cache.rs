//! `cache()` in memory: the first complete pass records the elements; later passes hand out
//! the same buffers (no copy). A pass stopped early records nothing, as in tf.data.

use std::sync::{Arc, Mutex};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, MakeIter};

/// The cached elements of one `cache()` step, shared by all iterations of the pipeline.
#[derive(Debug, Default)]
pub struct MemoryCache {
    filled: Mutex<Option<Arc<Vec<Element>>>>,
}

impl MemoryCache {
    pub fn new() -> Arc<MemoryCache> {
        Arc::new(MemoryCache::default())
    }

    pub fn is_filled(&self) -> bool {
        self.filled.lock().map(|f| f.is_some()).unwrap_or(false)
    }

    /// An iterator that replays the cache, or fills it from a fresh input iterator.
    pub fn iterate(self: &Arc<Self>, make_input: &mut MakeIter) -> Result<BoxIter> {
        let filled = self.filled.lock().ok().and_then(|f| f.clone());
        Ok(match filled {
            Some(elements) => Box::new(Replay { elements, next: 0 }),
            None => Box::new(Fill {
                input: Some(make_input()?),
                collected: Vec::new(),
                cache: Arc::clone(self),
            }),
        })
    }
}

struct Replay {
    elements: Arc<Vec<Element>>,
    next: usize,
}

impl ElementIter for Replay {
    fn next(&mut self) -> Result<Option<Element>> {
        let e = self.elements.get(self.next).cloned();
        self.next += 1;
        Ok(e)
    }
}

struct Fill {
    input: Option<BoxIter>,
    collected: Vec<Element>,
    cache: Arc<MemoryCache>,
}

impl ElementIter for Fill {
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
                    f.get_or_insert(all);
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
        let mut make: MakeIter = Box::new(move || {
            o.fetch_add(1, Ordering::SeqCst);
            Ok(ints(0..5))
        });
        // An early stop does not fill the cache.
        let mut it = cache.iterate(&mut make).unwrap();
        it.next().unwrap();
        drop(it);
        assert!(!cache.is_filled());
        let mut first = cache.iterate(&mut make).unwrap();
        let mut kept = Vec::new();
        while let Some(e) = first.next().unwrap() {
            kept.push(e);
        }
        assert!(cache.is_filled());
        let mut second = cache.iterate(&mut make).unwrap();
        let e = second.next().unwrap().unwrap();
        assert_eq!(value(&e), 0);
        let p = |e: &Element| e.tensors[0].storage().unwrap().0.as_bytes().as_ptr();
        assert_eq!(p(&e), p(&kept[0]));
        assert!(!e.tensors[0].is_exclusive());
        assert_eq!(drain(second), vec![1, 2, 3, 4]);
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }
}
