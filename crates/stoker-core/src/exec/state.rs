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
}

impl State {
    pub fn new(ints: Vec<u64>, inputs: Vec<State>) -> State {
        State { ints, inputs }
    }

    /// A stage without inputs.
    pub fn leaf(ints: Vec<u64>) -> State {
        State {
            ints,
            inputs: Vec::new(),
        }
    }

    /// A stage with no integers of its own over one input.
    pub fn over(input: State) -> State {
        State {
            ints: Vec::new(),
            inputs: vec![input],
        }
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
    }

    /// Reads a state written by [`State::encode`] from the front of `data`.
    pub fn decode(data: &mut &[u8]) -> Result<State> {
        State::decode_at(data, 0)
    }

    fn decode_at(data: &mut &[u8], depth: usize) -> Result<State> {
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
            .map(|_| State::decode_at(data, depth + 1))
            .collect::<Result<_>>()?;
        Ok(State { ints, inputs })
    }
}

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
            vec![State::leaf(vec![5]), State::over(State::default())],
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
