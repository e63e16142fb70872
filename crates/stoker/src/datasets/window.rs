//! `window(size, shift, stride, drop_remainder)`: tf.data's windows: window `k` holds the
//! input's elements `k * shift + i * stride` for `i < size` (fewer at the end, unless
//! `drop_remainder`); a window starts at every `k * shift` the input reaches. Each window is
//! handed out as one element, its elements stacked along a new first axis (the Python side
//! presents it as tf.data does, a dataset per component).
//!
//! Its state is the input's state where the next window starts, and how many input elements
//! are still to be passed over before it (when `shift` jumps past the elements read): a
//! restore starts the input there and reads the window again.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::batch::stack;
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::storage::batch_pool;
use stoker_core::{Error, Result, StageStats};

use super::common::input_at;
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

#[derive(Clone, Debug)]
pub struct Window {
    pub input: Plan,
    pub size: usize,
    pub shift: usize,
    pub stride: usize,
    pub drop_remainder: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    size: usize,
    #[serde(default)]
    shift: Option<usize>,
    #[serde(default = "one")]
    stride: usize,
    #[serde(default)]
    drop_remainder: bool,
}

fn one() -> usize {
    1
}

impl Window {
    /// Input positions a whole window spans.
    fn span(&self) -> usize {
        (self.size - 1) * self.stride + 1
    }
}

impl DatasetOp for Window {
    const KIND: &'static str = "window";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        if self.size == 0 || self.shift == 0 || self.stride == 0 {
            return Err(Error::schema(
                Self::KIND,
                "size, shift and stride must be at least 1",
            ));
        }
        let mut schema = self.input.schema().clone();
        let first = self.drop_remainder.then_some(self.size);
        for f in &mut schema.fields {
            f.shape.insert(0, first);
        }
        Ok(schema)
    }

    fn label(&self) -> String {
        format!(
            "window({}, shift={}, stride={})",
            self.size, self.shift, self.stride
        )
    }

    /// tf.data's: a window at every `shift` the input reaches (only whole ones with
    /// `drop_remainder`).
    fn cardinality(&self) -> Cardinality {
        let (span, shift) = (self.span() as u64, self.shift as u64);
        let drop = self.drop_remainder;
        self.input.step().cardinality().map(|n| {
            if drop {
                if n < span {
                    0
                } else {
                    (n - span) / shift + 1
                }
            } else {
                n.div_ceil(shift)
            }
        })
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let mut it = WindowIter {
            input: WaitMeter::wrap(inner, Arc::clone(&stats)),
            buffer: VecDeque::new(),
            skip: 0,
            ended: false,
            size: self.size,
            shift: self.shift,
            stride: self.stride,
            drop_remainder: self.drop_remainder,
        };
        if let Some(s) = at {
            it.skip = s.int(Self::KIND, 0)?;
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            size: self.size,
            shift: Some(self.shift),
            stride: self.stride,
            drop_remainder: self.drop_remainder,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Window {
            input: super::common::input_of(input)?,
            size: s.size,
            shift: s.shift.unwrap_or(s.size),
            stride: s.stride,
            drop_remainder: s.drop_remainder,
        })
    }
}

struct WindowIter {
    input: BoxIter,
    /// The elements from the next window's start on, each with the input's state before it.
    buffer: VecDeque<(State, Element)>,
    /// Input elements to pass over before the next window starts.
    skip: u64,
    ended: bool,
    size: usize,
    shift: usize,
    stride: usize,
    drop_remainder: bool,
}

impl WindowIter {
    fn read(&mut self) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        let before = self.input.state()?;
        match self.input.next()? {
            Some(e) => {
                self.buffer.push_back((before, e));
                Ok(true)
            }
            None => {
                self.ended = true;
                Ok(false)
            }
        }
    }
}

impl ElementIter for WindowIter {
    fn next(&mut self) -> Result<Option<Element>> {
        while self.skip > 0 {
            if self.input.next()?.is_none() {
                self.ended = true;
                self.skip = 0;
                return Ok(None);
            }
            self.skip -= 1;
        }
        let span = (self.size - 1) * self.stride + 1;
        while self.buffer.len() < span && self.read()? {}
        if self.buffer.is_empty() || (self.drop_remainder && self.buffer.len() < span) {
            return Ok(None);
        }
        let rows: Vec<Element> = (self.buffer.iter())
            .step_by(self.stride)
            .take(self.size)
            .map(|(_, e)| e.clone())
            .collect();
        same_shapes(&rows)?;
        let window = stack(&rows, &batch_pool())?;
        let popped = self.shift.min(self.buffer.len());
        self.buffer.drain(..popped);
        self.skip = (self.shift - popped) as u64;
        Ok(Some(window))
    }

    fn state(&self) -> Result<State> {
        // Where the next window starts: before its first buffered element, else where the
        // input is (after `skip` more).
        let at = match self.buffer.front() {
            Some((before, _)) => before.clone(),
            None => self.input.state()?,
        };
        let skip = if self.buffer.is_empty() { self.skip } else { 0 };
        Ok(State::new(vec![skip], vec![at]))
    }
}

/// The engine makes a window as one element of its elements stacked: they must have one
/// shape per field (tf.data's windows may differ; said here rather than as a batch's error).
fn same_shapes(rows: &[Element]) -> Result<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    for (i, row) in rows.iter().enumerate().skip(1) {
        for ((name, a), b) in first.names.iter().zip(&first.tensors).zip(&row.tensors) {
            if a.shape() != b.shape() {
                return Err(Error::invalid(
                    "window",
                    format!(
                        "field '{name}': element {i} of a window has shape {:?} but the first has {:?}; \
                         stoker makes a window as its elements stacked, so they must have one shape \
                         (pad or resize them first, or batch with padded_batch instead)",
                        b.shape(),
                        a.shape()
                    ),
                ));
            }
        }
    }
    Ok(())
}
