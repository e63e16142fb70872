//! Iterator state: where an iterator stands after the last element it handed out, as a few
//! integers per stage. A restored pipeline hands out exactly the elements the saved one would
//! have handed out next.
//!
//! Buffers are not saved. A stage that holds input elements (a shuffle buffer, the datasets
//! an interleave has open) rebuilds them on restore by running its input again from the start
//! of the pass (every stage is a function of its epoch and position), or by random access
//! where its input has it.
//!
//! Stages behind a thread (prefetch, parallel map, parallel interleave) run ahead of their
//! consumer: they keep, with each element, the state their input had right after it, and
//! report the state of the last element handed out.
//!
//! A stage that drops bad records (the skip policy) keeps, in its state, how many it dropped
//! before where it stands; so does one that closed inputs, for theirs, and one whose input's
//! state is not saved, for its input's. Summed over a state, that is the count of bad records
//! behind where the state stands (for a stage holding a partial batch or window, before the
//! elements it holds, which a restore reads again): the same however far the threads ran
//! ahead, and carried on by a pipeline restored from it.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::error::{Error, Result};
/// Here too: a stage restoring its state uses it with the rest of this module.
pub use crate::exec::replay::replay;

/// The state of one stage: its own integers, and the states of the stages it reads from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub ints: Vec<u64>,
    pub inputs: Vec<State>,
    /// Bad records this stage dropped under the skip policy before where it stands, those its
    /// closed inputs had dropped, and, where its input's state is not saved, its input's (see
    /// [`State::skipped_total`]).
    pub skipped: u64,
    /// The stage hands out a share of its input's elements (a shard): every share's stages
    /// below it run over the same stream (see [`State::skipped_split`]).
    pub shares: bool,
}

impl State {
    pub fn new(ints: Vec<u64>, inputs: Vec<State>) -> State {
        State {
            ints,
            inputs,
            ..State::default()
        }
    }

    /// A stage without inputs.
    pub fn leaf(ints: Vec<u64>) -> State {
        State::new(ints, Vec::new())
    }

    /// A stage with no integers of its own over one input.
    pub fn over(input: State) -> State {
        State::new(Vec::new(), vec![input])
    }

    /// With `skipped` bad records dropped by the stage itself (see [`State::skipped`]).
    pub fn with_skipped(mut self, skipped: u64) -> State {
        self.skipped = skipped;
        self
    }

    /// Marked as a stage handing out a share of its input (see [`State::shares`]).
    pub fn sharing(mut self) -> State {
        self.shares = true;
        self
    }

    /// Bad records dropped before where this state stands, by this stage and those below it.
    pub fn skipped_total(&self) -> u64 {
        self.inputs
            .iter()
            .fold(self.skipped, |n, s| n.saturating_add(s.skipped_total()))
    }

    /// [`State::skipped_total`] split in two: those dropped below a share (which every share
    /// passes over) and the others. A stage above a share that folds its input's count into
    /// its own (a repeat's ended passes, a shuffle's input) counts them as its own.
    pub fn skipped_split(&self) -> (u64, u64) {
        if self.shares {
            let below = (self.inputs.iter()).fold(0u64, |n, s| n.saturating_add(s.skipped_total()));
            return (below, self.skipped);
        }
        self.inputs.iter().fold((0, self.skipped), |(b, o), s| {
            let (sb, so) = s.skipped_split();
            (b.saturating_add(sb), o.saturating_add(so))
        })
    }

    /// Integer `i`, or an error naming `step` when the state has fewer.
    pub fn int(&self, step: &str, i: usize) -> Result<u64> {
        self.ints.get(i).copied().ok_or_else(|| mismatch(step))
    }

    /// Input state `i`, or an error naming `step` when the state has fewer.
    pub fn input(&self, step: &str, i: usize) -> Result<&State> {
        self.inputs.get(i).ok_or_else(|| mismatch(step))
    }

    /// Appends the state to `out` (LEB128 integers, depth first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.ints.len() as u64);
        for &v in &self.ints {
            put_varint(out, v);
        }
        put_varint(out, self.inputs.len() as u64);
        for s in &self.inputs {
            s.encode(out);
        }
        put_varint(out, self.skipped);
        out.push(u8::from(self.shares));
    }

    /// Reads a state written by [`State::encode`] from the front of `data`.
    pub fn decode(data: &mut &[u8]) -> Result<State> {
        State::decode_at(data, 0, true)
    }

    /// Reads a state written before states held their skip counts (they read as none).
    pub fn decode_uncounted(data: &mut &[u8]) -> Result<State> {
        State::decode_at(data, 0, false)
    }

    fn decode_at(data: &mut &[u8], depth: usize, counted: bool) -> Result<State> {
        // Pipelines are not this deep; damaged bytes must not recurse without end.
        if depth > 256 {
            return Err(damaged("nested too deep"));
        }
        let n = take_varint(data)? as usize;
        if n > data.len() {
            return Err(damaged("more integers than bytes"));
        }
        let ints = (0..n).map(|_| take_varint(data)).collect::<Result<_>>()?;
        let m = take_varint(data)? as usize;
        if m > data.len() {
            return Err(damaged("more inputs than bytes"));
        }
        let inputs = (0..m)
            .map(|_| State::decode_at(data, depth + 1, counted))
            .collect::<Result<_>>()?;
        let mut state = State::new(ints, inputs);
        if counted {
            state.skipped = take_varint(data)?;
            // More than any run could skip: damage (and no count may overflow on restore).
            if state.skipped > MAX_SKIPPED {
                return Err(damaged("a skip count is out of range"));
            }
            let (&flag, rest) = data
                .split_first()
                .ok_or_else(|| damaged("ends in the middle"))?;
            if flag > 1 {
                return Err(damaged("a share flag is neither 0 nor 1"));
            }
            state.shares = flag == 1;
            *data = rest;
        }
        Ok(state)
    }
}

/// The skip count of a stage whose input's state is not saved (a restore runs the input again,
/// or places it by random access, where its count may be more or less than the saved one):
/// the input's count now, moved so that a restored stage goes on from its saved count.
#[derive(Clone, Copy, Debug, Default)]
pub struct Recount {
    add: u64,
    sub: u64,
}

impl Recount {
    /// After a restore to a state whose count was `saved`, with the input's count `input`.
    pub fn after_restore(saved: u64, input: u64) -> Recount {
        Recount {
            add: saved.saturating_sub(input),
            sub: input.saturating_sub(saved),
        }
    }

    /// The stage's count where its input's is `input`.
    pub fn of(self, input: u64) -> u64 {
        input.saturating_add(self.add).saturating_sub(self.sub)
    }
}

/// The largest skip count a state may hold.
const MAX_SKIPPED: u64 = 1 << 56;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn take_varint(data: &mut &[u8]) -> Result<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = data
            .split_first()
            .ok_or_else(|| damaged("ends in the middle"))?;
        *data = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(damaged("an integer is too long"))
}

pub(crate) fn damaged(what: &str) -> Error {
    Error::invalid("state", format!("the state is damaged: {what}"))
}

/// The error for a state that does not fit the stage it is restored into.
pub fn mismatch(step: &str) -> Error {
    Error::invalid(
        "state",
        format!("the state does not fit step '{step}' (saved from another pipeline?)"),
    )
}

/// The error of a stage that cannot report its state.
pub fn unsupported(step: &str, why: &str) -> Error {
    Error::invalid("state", format!("{step} cannot save its position: {why}"))
}

/// The state after each element a stage running ahead has made, kept until the consumer has
/// taken that element: for stages whose elements come out of another thread.
#[derive(Debug, Default)]
pub struct StateLog {
    entries: Mutex<VecDeque<(u64, std::result::Result<State, String>)>>,
}

impl StateLog {
    /// Records `state`, the input's state right after element `index` was taken from it.
    pub fn push(&self, index: u64, state: Result<State>) {
        let entry = (index, state.map_err(|e| e.to_string()));
        self.lock().push_back(entry);
    }

    /// The state recorded for element `index`, dropping it and every earlier entry.
    pub fn take_through(&self, index: u64) -> Option<Result<State>> {
        let mut q = self.lock();
        let mut found = None;
        while q.front().is_some_and(|(i, _)| *i <= index) {
            found = q.pop_front().map(|(_, s)| s);
        }
        found.map(|s| s.map_err(|m| Error::invalid("state", m)))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, VecDeque<(u64, std::result::Result<State, String>)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_and_refuses_damage() {
        let s = State::new(
            vec![0, 1, 127, 128, u64::MAX],
            vec![
                State::leaf(vec![5]).with_skipped(300),
                State::over(State::default()).sharing(),
            ],
        );
        let mut bytes = Vec::new();
        s.encode(&mut bytes);
        let mut data = bytes.as_slice();
        assert_eq!(State::decode(&mut data).unwrap(), s);
        assert!(data.is_empty());
        for cut in 0..bytes.len() {
            let mut short = &bytes[..cut];
            assert!(State::decode(&mut short).is_err(), "cut at {cut}");
        }
        let mut huge: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(State::decode(&mut huge).is_err());
    }

    #[test]
    fn skip_counts_sum_over_the_stages_and_split_at_a_share() {
        let below = State::leaf(vec![9]).with_skipped(4);
        let share = State::new(vec![1], vec![State::over(below)])
            .with_skipped(1)
            .sharing();
        let top = State::new(vec![], vec![share]).with_skipped(2);
        assert_eq!(top.skipped_total(), 7);
        assert_eq!(top.skipped_split(), (4, 3));
        // Written before the counts: read as none.
        let mut old = Vec::new();
        put_varint(&mut old, 1);
        put_varint(&mut old, 5);
        put_varint(&mut old, 0);
        let read = State::decode_uncounted(&mut old.as_slice()).unwrap();
        assert_eq!(read, State::leaf(vec![5]));
    }

    #[test]
    fn the_log_hands_out_the_state_of_the_element_taken() {
        let log = StateLog::default();
        for i in 0..4 {
            log.push(i, Ok(State::leaf(vec![i + 1])));
        }
        assert_eq!(log.take_through(1).unwrap().unwrap(), State::leaf(vec![2]));
        assert_eq!(log.take_through(3).unwrap().unwrap(), State::leaf(vec![4]));
        assert!(log.take_through(3).is_none());
    }
}
