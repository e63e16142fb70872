//! `from_generator(generator, output_signature)`: the elements a generator yields (tf.data's
//! `Dataset.from_generator`). The generator is the caller's code (a Python generator, through
//! [`Generator`]); stoker checks each element against the declared signature.
//!
//! Its resume state is the number of elements handed out: a restore starts the generator
//! again and skips that many, so the generator must yield the same sequence each time it is
//! started (tf.data cannot save a `from_generator` pipeline at all).

use std::fmt::Debug;
use std::sync::Arc;

use stoker_core::element::{Element, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats};

use super::common::{not_loadable, pass_over, NoSpec};
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};

/// A generator of elements, started once per iteration.
pub trait Generator: Send + Sync + Debug {
    /// A new run of the generator, handing out elements of the declared schema.
    fn start(&self, stats: &Arc<StageStats>) -> Result<BoxIter>;
    /// What to call it in stats and `explain()`.
    fn name(&self) -> String;
}

#[derive(Clone, Debug)]
pub struct FromGenerator {
    pub generator: Arc<dyn Generator>,
    /// The declared output signature.
    pub schema: Schema,
}

impl DatasetOp for FromGenerator {
    const KIND: &'static str = "from_generator";
    const SOURCE: bool = true;
    type Spec = NoSpec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(self.schema.clone())
    }

    fn label(&self) -> String {
        format!("from_generator({})", self.generator.name())
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn iterate(
        &self,
        _: &Plan,
        _: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let skip = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let mut inner = self.generator.start(&stats)?;
        pass_over(
            inner.as_mut(),
            skip,
            Self::KIND,
            "the generator",
            ": a generator must yield the same elements each time it is started",
        )?;
        let it = Counted {
            inner,
            handed_out: skip,
        };
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<NoSpec>> {
        Err(Error::Spec(
            "from_generator cannot be saved in a spec: its generator is Python code".into(),
        ))
    }

    fn from_spec(_: NoSpec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable("its generator is Python code"))
    }
}

/// The generator's elements, counted for the state.
struct Counted {
    inner: BoxIter,
    handed_out: u64,
}

impl ElementIter for Counted {
    fn next(&mut self) -> Result<Option<Element>> {
        let e = self.inner.next()?;
        if e.is_some() {
            self.handed_out += 1;
        }
        Ok(e)
    }

    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![self.handed_out]))
    }
}
