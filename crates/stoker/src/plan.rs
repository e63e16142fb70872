//! The dataset graph: an immutable tree of steps, each with the schema it produces.
//!
//! Every constructor checks its step against its input's schema, so an ill-formed pipeline
//! fails when it is built, with an error naming the step. The steps themselves are in
//! [`crate::datasets`], one module each; run state (shuffle epochs, memory caches) belongs to
//! the pipeline and its iterators, not to the plan.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::exec::padded_batch::Padding;
use stoker_core::op::Op;
use stoker_core::{PipelineOptions, Result};
use stoker_formats::Compression;

pub use crate::datasets::Step;
use crate::datasets::{
    batch::Batch, cache::Cache, from_npz::FromNpz, list_files::ListFiles, map::Map,
    padded_batch::PaddedBatch, prefetch::Prefetch, shuffle::Shuffle, tfrecord::TfRecord,
};

/// `num_parallel_calls` / `buffer_size` value meaning "let stoker choose".
pub const AUTOTUNE: i64 = -1;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A node of the dataset graph. Cheap to clone (shared).
#[derive(Clone)]
pub struct Plan(Arc<PlanNode>);

pub struct PlanNode {
    id: u64,
    step: Step,
    schema: Schema,
}

impl Plan {
    /// TFRecord files (paths or glob patterns, expanded and checked now).
    pub fn tfrecord(
        patterns: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    ) -> Result<Plan> {
        Plan::new(TfRecord::new(
            patterns,
            compression,
            verify_crc,
            num_parallel_reads,
        )?)
    }

    /// File names matching `patterns`, sorted, or shuffled with `seed` (a new order each epoch).
    pub fn list_files(patterns: Vec<String>, shuffle: bool, seed: Option<u64>) -> Result<Plan> {
        Plan::new(ListFiles::new(patterns, shuffle, seed)?)
    }

    /// The rows of every array of an `.npz` file, or of one `.npy` file (as field `name`).
    pub fn from_npz(path: &str, name: Option<String>) -> Result<Plan> {
        Plan::new(FromNpz::load(path, name)?)
    }

    /// A seeded shuffle; `seed: None` draws one.
    pub fn shuffle(
        &self,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> Result<Plan> {
        Plan::new(Shuffle::new(
            self.clone(),
            buffer_size,
            seed,
            reshuffle_each_iteration,
        ))
    }

    pub fn map(
        &self,
        ops: Vec<Arc<dyn Op>>,
        num_parallel_calls: Option<i64>,
        deterministic: Option<bool>,
    ) -> Result<Plan> {
        Plan::new(Map {
            input: self.clone(),
            ops,
            num_parallel_calls,
            deterministic,
            positions: Default::default(),
        })
    }

    pub fn batch(&self, batch_size: usize, drop_remainder: bool) -> Result<Plan> {
        Plan::new(Batch {
            input: self.clone(),
            batch_size,
            drop_remainder,
        })
    }

    pub fn padded_batch(
        &self,
        batch_size: usize,
        drop_remainder: bool,
        padding: Padding,
    ) -> Result<Plan> {
        Plan::new(PaddedBatch {
            input: self.clone(),
            batch_size,
            drop_remainder,
            padding: Arc::new(padding),
        })
    }

    pub fn cache(&self, filename: Option<String>) -> Result<Plan> {
        Plan::new(Cache {
            input: self.clone(),
            filename,
        })
    }

    pub fn prefetch(&self, buffer_size: i64) -> Result<Plan> {
        Plan::new(Prefetch {
            input: self.clone(),
            buffer_size,
        })
    }

    /// A plan node for `step`, checked against its input.
    pub fn new(step: impl Into<Step>) -> Result<Plan> {
        let step = step.into();
        let schema = step.schema()?;
        Ok(Plan(Arc::new(PlanNode {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            step,
            schema,
        })))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    pub fn step(&self) -> &Step {
        &self.0.step
    }

    pub fn schema(&self) -> &Schema {
        &self.0.schema
    }

    /// A short description for stats and `explain`, e.g. `map[parse_example, cast] x2`.
    pub fn label(&self) -> String {
        self.step().label()
    }

    /// Pipeline options: those of every `with_options` step, the outermost winning.
    pub fn options(&self) -> PipelineOptions {
        let mut chain = Vec::new();
        let mut stack = vec![self.clone()];
        while let Some(p) = stack.pop() {
            if let Step::WithOptions(o) = p.step() {
                chain.push(o.options.clone());
            }
            stack.extend(p.step().inputs().into_iter().cloned());
        }
        let mut out = PipelineOptions::default();
        for o in chain.into_iter().rev() {
            if o.on_bad_record != Default::default() {
                out.on_bad_record = o.on_bad_record;
            }
            if o.threads.is_some() {
                out.threads = o.threads;
            }
            if o.deterministic.is_some() {
                out.deterministic = o.deterministic;
            }
            out.optimizations.extend(o.optimizations);
        }
        out
    }

    /// The plan as indented text, sink first (what `explain` prints).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        fn walk(p: &Plan, depth: usize, out: &mut String) {
            out.push_str(&format!(
                "{}{}  -> {}\n",
                "  ".repeat(depth),
                p.label(),
                p.schema()
            ));
            for i in p.step().inputs() {
                walk(i, depth + 1, out);
            }
        }
        walk(self, 0, &mut out);
        out
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
