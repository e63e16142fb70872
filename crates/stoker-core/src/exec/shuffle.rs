//! `shuffle(buffer_size, seed)`: a seeded buffer shuffle with tf.data's semantics — fill a
//! buffer, hand out a uniformly chosen element, refill its place from the input.

use std::sync::Arc;

// The generator behind `StdRng` (the same draws), named so that a copy can be made.
use rand::rngs::ChaCha12Rng;
use rand::{RngExt, SeedableRng};

use crate::element::Element;
use crate::error::Result;
use crate::exec::{BoxIter, ElementIter, VecIter};
use crate::stats::StageStats;

pub struct ShuffleIter {
    input: BoxIter,
    buffer: Vec<Element>,
    capacity: usize,
    rng: ChaCha12Rng,
    input_done: bool,
    stats: Arc<StageStats>,
    /// Elements taken from the input, and handed out, this pass.
    pulled: u64,
    handed_out: u64,
    /// The seed of this pass (saved with the state, so that a restore in a process that
    /// drew another seed for the dataset still replays this pass's order).
    seed: u64,
    /// After a restore, the buffer's elements still being read.
    loading: Option<Loading>,
    /// Its skip count from its input's (whose state is not saved).
    recount: crate::exec::state::Recount,
    /// Whether its input may skip bad records: only then is its state read for the count
    /// (a consumer running ahead asks for the state after every element).
    counting: bool,
}

impl ShuffleIter {
    /// `seed` fully determines the order for a given input order.
    pub fn new(input: BoxIter, capacity: usize, seed: u64, stats: Arc<StageStats>) -> Self {
        ShuffleIter {
            input,
            buffer: Vec::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
            rng: ChaCha12Rng::seed_from_u64(seed),
            input_done: false,
            stats,
            pulled: 0,
            handed_out: 0,
            seed,
            loading: None,
            recount: Default::default(),
            counting: true,
        }
    }

    /// Counts its input's skipped bad records in its state (the default), or, where the input
    /// skips none (not the skip policy), does not read the input's state for them.
    pub fn counting(mut self, counting: bool) -> Self {
        self.counting = counting;
        self
    }

    /// Restored from a state: `input` is a fresh iterator over the pass's input (at its
    /// start). The pass's seed comes from the state. The seeded decisions are replayed over input positions to find which elements
    /// the buffer held, in which order; the input is run through the elements taken so far,
    /// keeping those, so that it ends positioned where the saved one was.
    pub fn restore(
        input: BoxIter,
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
    ) -> Result<Self> {
        ShuffleIter::restore_with(capacity, stats, state, |positions, pulled| {
            let mut input = input;
            let buffer = crate::exec::replay::replay(&mut input, pulled, positions)?;
            Ok((buffer, input))
        })
    }

    /// The number of input elements taken by the iterator whose state is `state`.
    pub fn taken(state: &crate::exec::State) -> Result<u64> {
        state.int(OP, 0)
    }

    /// Like [`restore`](ShuffleIter::restore), getting the buffer's elements from `load`:
    /// given their input positions (in buffer order) and the number of input elements taken,
    /// it returns those elements and the input positioned after the ones taken (e.g. by
    /// random access, without running the input through them).
    pub fn restore_with(
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
        load: impl FnOnce(&[u64], u64) -> Result<(Vec<Element>, BoxIter)>,
    ) -> Result<Self> {
        let (mut it, positions) = ShuffleIter::replayed(capacity, stats, state)?;
        let (buffer, input) = load(&positions, it.pulled)?;
        if buffer.len() != positions.len() {
            return Err(crate::exec::state::mismatch(OP));
        }
        it.buffer = buffer;
        it.input = input;
        it.recount_from(state);
        Ok(it)
    }

    /// Like [`restore_with`](ShuffleIter::restore_with), with `load` returning a reader of
    /// the buffer's elements instead of the elements. With `background`, they are read on a
    /// thread of their own, a few at a time, in the order the shuffle is going to hand them
    /// out, so that the first elements come out after a few reads, not after the whole
    /// buffer's; the shuffle waits only for an element not read yet.
    pub fn restore_reading(
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
        background: bool,
        load: impl FnOnce(&[u64], u64) -> Result<(ReadBuffer, BoxIter)>,
    ) -> Result<Self> {
        let (mut it, positions) = ShuffleIter::replayed(capacity, stats, state)?;
        let (mut read, input) = load(&positions, it.pulled)?;
        it.input = input;
        it.recount_from(state);
        let n = positions.len();
        if !background || n == 0 {
            it.buffer = read(&(0..n).collect::<Vec<_>>())?;
            if it.buffer.len() != n {
                return Err(crate::exec::state::mismatch(OP));
            }
            return Ok(it);
        }
        let order = draw_order(&it.rng, n, it.capacity, it.input_done);
        // The first few are read now, the rest on the thread. The channel holds every chunk:
        // the reader never waits for the shuffle.
        let (tx, rx) = crossbeam_channel::unbounded();
        let first = order.len().min(FIRST_READ);
        let which = order[..first].to_vec();
        let elements = crate::exec::catch_panic(OP, || read(&which))?;
        tx.send(Ok((which, elements)))
            .map_err(|_| crate::Error::internal("a shuffle buffer's channel closed"))?;
        std::thread::Builder::new()
            .name("stoker-shuffle-restore".into())
            .spawn(move || {
                let (mut from, mut size) = (first, 2 * FIRST_READ);
                while from < order.len() {
                    let to = (from + size).min(order.len());
                    let which = order[from..to].to_vec();
                    let chunk = crate::exec::catch_panic(OP, || read(&which))
                        .map(|elements| (which, elements));
                    let failed = chunk.is_err();
                    if tx.send(chunk).is_err() || failed {
                        return; // the shuffle is gone, or has the error
                    }
                    (from, size) = (to, size * 2);
                }
            })
            .map_err(|e| crate::Error::spawn("spawning a thread to read a shuffle buffer", e))?;
        let placeholder = Element::new(crate::element::names::<&str>(&[]), Vec::new());
        it.buffer = vec![placeholder; n];
        it.loading = Some(Loading {
            rx,
            waits: (0..n as u32).collect(),
            slot_of: (0..n as u32).collect(),
            left: n,
        });
        Ok(it)
    }

    /// Goes on from the skip count of `state`, the one it was restored to.
    fn recount_from(&mut self, state: &crate::exec::State) {
        let input = crate::exec::skipped_by_unsaved(&*self.input);
        self.recount = crate::exec::state::Recount::after_restore(state.skipped, input);
    }

    /// An iterator at `state` with its input and buffer still empty, and the input positions
    /// of the elements its buffer held (in buffer order), found by replaying its decisions.
    fn replayed(
        capacity: usize,
        stats: Arc<StageStats>,
        state: &crate::exec::State,
    ) -> Result<(Self, Vec<u64>)> {
        let pulled = state.int(OP, 0)?;
        let handed_out = state.int(OP, 1)?;
        let input_done = state.int(OP, 2)? != 0;
        let seed = state.int(OP, 3)?;
        let mut it = ShuffleIter::new(VecIter::boxed(Vec::new()), capacity, seed, stats);
        let mut positions: Vec<u64> = Vec::new();
        let mut next = 0u64;
        for _ in 0..handed_out {
            while next < pulled && positions.len() < it.capacity {
                positions.push(next);
                next += 1;
            }
            if positions.is_empty() {
                return Err(crate::exec::state::mismatch(OP));
            }
            let i = it.rng.random_range(0..positions.len());
            positions.swap_remove(i);
        }
        if next != pulled && handed_out > 0 {
            return Err(crate::exec::state::mismatch(OP));
        }
        it.input_done = input_done;
        it.pulled = pulled;
        it.handed_out = handed_out;
        Ok((it, positions))
    }
}

/// Reads elements of a restored shuffle buffer: given indexes into the buffer's input
/// positions, it returns their elements, in that order.
pub type ReadBuffer = Box<dyn FnMut(&[usize]) -> Result<Vec<Element>> + Send>;

/// The elements read before the others are left to the background; each later read hands
/// over twice as many as the one before.
const FIRST_READ: usize = 256;

/// A buffer slot whose element is there.
const READY: u32 = u32::MAX;

/// A restored buffer whose elements are still being read.
struct Loading {
    /// Chunks of elements read: (indexes of their positions, elements).
    rx: crossbeam_channel::Receiver<Result<(Vec<usize>, Vec<Element>)>>,
    /// Per buffer slot, the index of the position whose element it waits for, or `READY`.
    waits: Vec<u32>,
    /// Per position index, the slot waiting for its element.
    slot_of: Vec<u32>,
    /// Elements not read yet.
    left: usize,
}

impl Loading {
    /// Waits until slot `i` has its element, then removes the slot as `buffer.swap_remove`
    /// removes the element.
    fn take(&mut self, i: usize, buffer: &mut [Element]) -> Result<()> {
        while self.waits[i] != READY {
            let (which, elements) = self.rx.recv().map_err(|_| {
                crate::Error::internal("the thread reading the shuffle buffer stopped")
            })??;
            if which.len() != elements.len() {
                return Err(crate::exec::state::mismatch(OP));
            }
            for (k, e) in which.into_iter().zip(elements) {
                let slot = self.slot_of[k] as usize;
                buffer[slot] = e;
                self.waits[slot] = READY;
                self.left -= 1;
            }
        }
        let last = self.waits.len() - 1;
        let moved = self.waits[last];
        self.waits.swap_remove(i);
        if i != last && moved != READY {
            self.slot_of[moved as usize] = i as u32;
        }
        Ok(())
    }
}

/// The buffer's `n` slots in the order the shuffle will first draw them, if its input goes
/// on: those drawn in the next `n` draws, then the others.
fn draw_order(rng: &ChaCha12Rng, n: usize, capacity: usize, input_done: bool) -> Vec<usize> {
    let mut copy = ChaCha12Rng::from_seed(rng.get_seed());
    copy.set_stream(rng.get_stream());
    copy.set_word_pos(rng.get_word_pos());
    let rng = &mut copy;
    let mut slots: Vec<u32> = (0..n as u32).collect();
    let mut drawn = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for _ in 0..n {
        if !input_done {
            slots.resize(capacity.max(slots.len()), READY);
        }
        if slots.is_empty() {
            break;
        }
        let slot = slots.swap_remove(rng.random_range(0..slots.len()));
        if slot != READY {
            order.push(slot as usize);
            drawn[slot as usize] = true;
        }
    }
    order.extend((0..n).filter(|&k| !drawn[k]));
    order
}

const OP: &str = "shuffle";

impl ElementIter for ShuffleIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while !self.input_done && self.buffer.len() < self.capacity {
            match self.stats.pull(&mut self.input)? {
                Some(e) => {
                    self.buffer.push(e);
                    self.pulled += 1;
                    if let Some(loading) = &mut self.loading {
                        loading.waits.push(READY);
                    }
                }
                None => self.input_done = true,
            }
        }
        self.stats.sample_buffer(self.buffer.len(), self.capacity);
        if self.buffer.is_empty() {
            return Ok(None);
        }
        let i = self.rng.random_range(0..self.buffer.len());
        if let Some(loading) = &mut self.loading {
            loading.take(i, &mut self.buffer)?;
            if loading.left == 0 {
                self.loading = None;
            }
        }
        self.handed_out += 1;
        Ok(Some(self.buffer.swap_remove(i)))
    }

    fn state(&self) -> Result<crate::exec::State> {
        let done = u64::from(self.input_done);
        let skipped = match self.counting {
            true => self
                .recount
                .of(crate::exec::skipped_by_unsaved(&*self.input)),
            false => 0,
        };
        let ints = vec![self.pulled, self.handed_out, done, self.seed];
        Ok(crate::exec::State::leaf(ints).with_skipped(skipped))
    }
}

/// The seed of epoch `epoch` for a shuffle seeded with `seed` (SplitMix64 finaliser, so that
/// neighbouring epochs get unrelated orders).
pub fn epoch_seed(seed: u64, epoch: u64) -> u64 {
    let mut z = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    fn run(seed: u64, cap: usize) -> Vec<i64> {
        let st = Arc::new(StageStats::new("s", "shuffle"));
        drain(Box::new(ShuffleIter::new(ints(0..100), cap, seed, st)))
    }

    #[test]
    fn same_seed_same_order_and_a_permutation() {
        let a = run(7, 10);
        assert_eq!(a, run(7, 10));
        assert_ne!(a, run(8, 10));
        assert_ne!(a, (0..100).collect::<Vec<_>>());
        let mut sorted = a.clone();
        sorted.sort();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn buffer_bounds_displacement() {
        // With a buffer of 10, element i cannot come out before position i - 9.
        let a = run(3, 10);
        for (pos, v) in a.iter().enumerate() {
            assert!(*v as usize <= pos + 9, "{v} at {pos}");
        }
        // Buffer 1 is the identity.
        assert_eq!(run(3, 1), (0..100).collect::<Vec<_>>());
    }

    /// The elements of `ints(0..n)` at some positions, as a reader of a restored buffer
    /// (slowly, so that the shuffle has to wait for some).
    fn reader(n: i64, positions: &[u64], slow: bool, fail_after: Option<usize>) -> ReadBuffer {
        let positions = positions.to_vec();
        let mut reads = 0;
        Box::new(move |which: &[usize]| {
            reads += 1;
            if fail_after.is_some_and(|n| reads > n) {
                return Err(crate::Error::invalid("test", "the read failed"));
            }
            if slow {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let mut it = ints(0..n);
            let all: Vec<Element> = std::iter::from_fn(|| it.next().unwrap()).collect();
            Ok(which
                .iter()
                .map(|&k| all[positions[k] as usize].clone())
                .collect())
        })
    }

    #[test]
    fn a_buffer_read_in_the_background_resumes_exactly() {
        let n = 300;
        for (cap, seed) in [(1, 1), (7, 2), (64, 3), (256, 4), (500, 5)] {
            let st = || Arc::new(StageStats::new("s", "shuffle"));
            let mut whole = ShuffleIter::new(ints(0..n), cap, seed, st());
            let mut out = Vec::new();
            let mut states = Vec::new();
            while let Some(e) = whole.next().unwrap() {
                states.push(whole.state().unwrap());
                out.push(e.tensors[0].typed::<i64>().unwrap()[0]);
            }
            for at in [0, 1, 5, 60, 150, 250, n as usize - 1] {
                for (background, slow) in [(false, false), (true, false), (true, true)] {
                    let it = ShuffleIter::restore_reading(
                        cap,
                        st(),
                        &states[at],
                        background,
                        |positions, pulled| {
                            Ok((reader(n, positions, slow, None), ints(pulled as i64..n)))
                        },
                    )
                    .unwrap();
                    let rest = drain(Box::new(it));
                    assert_eq!(rest, out[at + 1..], "cap {cap} at {at} {background} {slow}");
                }
            }
        }
    }

    #[test]
    fn a_failed_background_read_is_the_error_of_a_next() {
        let st = Arc::new(StageStats::new("s", "shuffle"));
        let mut whole = ShuffleIter::new(ints(0..2000), 1000, 9, Arc::clone(&st));
        for _ in 0..10 {
            whole.next().unwrap();
        }
        let state = whole.state().unwrap();
        let mut it = ShuffleIter::restore_reading(1000, st, &state, true, |positions, pulled| {
            Ok((
                reader(2000, positions, false, Some(1)),
                ints(pulled as i64..2000),
            ))
        })
        .unwrap();
        let err = std::iter::from_fn(|| Some(it.next()))
            .take(2000)
            .find_map(|r| r.err())
            .expect("a read failed: some next must fail");
        assert!(err.to_string().contains("the read failed"), "{err}");
    }

    #[test]
    fn a_panic_in_a_read_is_an_error() {
        let st = Arc::new(StageStats::new("s", "shuffle"));
        let mut whole = ShuffleIter::new(ints(0..2000), 1000, 9, Arc::clone(&st));
        whole.next().unwrap();
        let state = whole.state().unwrap();
        // In the first read (on the restoring thread), or in a later one (in the background).
        for panic_at in [1, 2] {
            let restored =
                ShuffleIter::restore_reading(1000, Arc::clone(&st), &state, true, |p, pulled| {
                    let mut inner = reader(2000, p, false, None);
                    let mut reads = 0;
                    let read: ReadBuffer = Box::new(move |which: &[usize]| {
                        reads += 1;
                        if reads == panic_at {
                            panic!("a reader's bug");
                        }
                        inner(which)
                    });
                    Ok((read, ints(pulled as i64..2000)))
                });
            let err = match restored {
                Err(e) => e,
                Ok(mut it) => std::iter::from_fn(|| Some(it.next()))
                    .take(2000)
                    .find_map(|r| r.err())
                    .expect("a read panicked: some next must fail"),
            };
            assert!(err.to_string().contains("a reader's bug"), "{err}");
        }
    }

    #[test]
    fn the_generator_draws_as_std_rng_does() {
        use rand::rngs::StdRng;
        let mut a = StdRng::seed_from_u64(42);
        let mut b = ChaCha12Rng::seed_from_u64(42);
        for n in 1..1000usize {
            assert_eq!(a.random_range(0..n), b.random_range(0..n));
        }
    }
}
