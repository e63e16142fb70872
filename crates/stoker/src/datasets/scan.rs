//! `scan(initial_state, scan_func)`: a map that carries a state from element to element
//! (tf.data's `Dataset.scan`): `scan_func(state, element)` gives the next state and the
//! output. The function is the caller's code (Python, through [`Scanner`]).
//!
//! Its resume state is the number of elements handed out: a restore runs the input again from
//! the start of the pass through the function up to there (the function's state lives in
//! Python and cannot be saved as integers), then goes on.

use std::fmt::Debug;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, Result, StageStats};

use super::common::{not_loadable, pass_over};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

/// A scan function and its initial state.
pub trait Scanner: Send + Sync + Debug {
    /// A new run from the initial state.
    fn start(&self, stats: &Arc<StageStats>) -> Result<Box<dyn ScanRun>>;
    /// What to call it in stats and `explain()`.
    fn name(&self) -> String;
}

/// One run of a scan: its state.
pub trait ScanRun: Send {
    /// The output for `element`; the state moves on.
    fn step(&mut self, element: Element) -> Result<Element>;
}

#[derive(Clone, Debug)]
pub struct Scan {
    pub input: Plan,
    pub scanner: Arc<dyn Scanner>,
}

/// Never read: a scan's function cannot be saved in a spec.
#[derive(Serialize, Deserialize)]
pub struct Spec {}

impl DatasetOp for Scan {
    const KIND: &'static str = "scan";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::dynamic())
    }

    fn label(&self) -> String {
        format!("scan({})", self.scanner.name())
    }

    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn transforms(&self) -> bool {
        true
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let done = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        // A restore replays the pass from its start: the input is started fresh.
        let input = WaitMeter::wrap(iterate_at(&self.input, ctx, None)?, Arc::clone(&stats));
        let mut it = ScanIter {
            input,
            run: self.scanner.start(&stats)?,
            handed_out: 0,
        };
        pass_over(&mut it, done, Self::KIND, "the input", "")?;
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Err(Error::Spec(format!(
            "scan with the Python function '{}' cannot be saved in a spec",
            self.scanner.name()
        )))
    }

    fn from_spec(_: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable("its function is Python code"))
    }
}

struct ScanIter {
    input: BoxIter,
    run: Box<dyn ScanRun>,
    handed_out: u64,
}

impl ElementIter for ScanIter {
    fn next(&mut self) -> Result<Option<Element>> {
        let Some(e) = self.input.next()? else {
            return Ok(None);
        };
        let out = self.run.step(e)?;
        self.handed_out += 1;
        Ok(Some(out))
    }

    /// The count, with the input's state beside it for the pipeline check (a restore starts
    /// the input afresh).
    fn state(&self) -> Result<State> {
        Ok(State::new(vec![self.handed_out], vec![self.input.state()?]))
    }
}
