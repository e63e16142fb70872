//! `interleave(open, cycle_length, block_length, num_parallel_calls)`: opens each input
//! element as a dataset and hands out their elements in turn.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::interleave::{InterleaveConfig, InterleaveIter, OpenFn};
use stoker_core::exec::{BoxIter, State};
use stoker_core::{Error, Result, StageStats};
use stoker_formats::Compression;

use super::common::check_parallelism;
use crate::build::BuildCtx;
use crate::plan::{iterate, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::sources::{Opener, TfRecordOpener};

#[derive(Clone, Debug)]
pub struct Interleave {
    pub input: Plan,
    pub opener: Arc<dyn Opener>,
    pub cycle_length: Option<usize>,
    pub block_length: usize,
    pub num_parallel_calls: Option<i64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    dataset: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cycle_length: Option<usize>,
    #[serde(default = "one")]
    block_length: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num_parallel_calls: Option<i64>,
}

fn one() -> usize {
    1
}

/// The datasets a spec can interleave: TFRecord files.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DatasetSpec {
    source: String,
    #[serde(default)]
    compression_type: String,
    #[serde(default = "yes")]
    verify_crc: bool,
    #[serde(default = "super::tfrecord::default_max_record_bytes")]
    max_record_bytes: u64,
}

fn yes() -> bool {
    true
}

impl DatasetOp for Interleave {
    const KIND: &'static str = "interleave";
    type Spec = Spec;

    one_input!();

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Stops(
            "it makes several elements of each input element, in an order that mixes them".into(),
        )
    }

    fn schema(&self) -> Result<Schema> {
        check_parallelism(Self::KIND, self.num_parallel_calls)?;
        if self.block_length == 0 || self.cycle_length == Some(0) {
            return Err(Error::schema(
                Self::KIND,
                "cycle_length and block_length must be at least 1",
            ));
        }
        self.opener.output_schema(self.input.schema())
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn randomness(&self) -> Randomness {
        Randomness::External
    }

    fn transforms(&self) -> bool {
        true
    }

    fn threads(&self) -> crate::properties::Threads {
        crate::properties::Threads::Workers
    }

    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        Some(("num_parallel_calls", self.num_parallel_calls))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        // On restore the input runs again from the start of the pass (see `InterleaveIter`).
        let inner = iterate(&self.input, ctx)?;
        let opener = Arc::clone(&self.opener);
        let child_ctx = ctx.clone();
        let st = Arc::clone(&stats);
        let open: OpenFn = Arc::new(move |i, e: &Element, at: Option<&State>| {
            opener.open(i, e, &child_ctx, &st, at)
        });
        // The cycle length fixes the order: a restore keeps the one it was saved with.
        let cycle = match at {
            Some(s) => InterleaveIter::saved_cycle_length(s)?,
            None => self.cycle_length.unwrap_or(ctx.order_budget),
        };
        let prefetch = if self.num_parallel_calls.is_some() {
            self.block_length.max(64)
        } else {
            0
        };
        let name = "num_parallel_calls";
        let reads = crate::tuner::reads(ctx, &stats, name, self.num_parallel_calls, cycle);
        let config = InterleaveConfig {
            cycle_length: cycle,
            block_length: self.block_length,
            prefetch_per_slot: prefetch,
            reads,
        };
        Ok(Box::new(match at {
            None => InterleaveIter::new(inner, open, config, stats),
            Some(s) => InterleaveIter::restore(inner, open, config, stats, s)?,
        }))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            dataset: self.opener.spec()?,
            cycle_length: self.cycle_length,
            block_length: self.block_length,
            num_parallel_calls: self.num_parallel_calls,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        let d: DatasetSpec =
            serde_json::from_value(s.dataset).map_err(|e| Error::Spec(format!("dataset: {e}")))?;
        if d.source != "tfrecord" {
            return Err(Error::Spec(
                "only TFRecord datasets can be interleaved from a spec".into(),
            ));
        }
        Ok(Interleave {
            input: super::common::input_of(input)?,
            opener: Arc::new(TfRecordOpener {
                compression: Compression::parse(&d.compression_type)?,
                verify_crc: d.verify_crc,
                max_record_bytes: d.max_record_bytes,
            }),
            cycle_length: s.cycle_length,
            block_length: s.block_length,
            num_parallel_calls: s.num_parallel_calls,
        })
    }
}
