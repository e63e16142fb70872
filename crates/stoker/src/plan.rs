//! The dataset graph: an immutable tree of steps, each with the schema it produces.
//!
//! Every constructor checks its step against its input's schema, so an ill-formed pipeline
//! fails when it is built, with an error naming the step.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::memory_cache::MemoryCache;
use stoker_core::exec::padded_batch::Padding;
use stoker_core::op::{Op, Predicate};
use stoker_core::{DType, Error, PipelineOptions, Result, Tensor};
use stoker_formats::Compression;

use crate::sources::Opener;

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

/// One step of a pipeline.
#[derive(Clone)]
pub enum Step {
    Range {
        start: i64,
        stop: i64,
        step: i64,
    },
    /// Elements are the rows of in-memory columns (`from_tensor_slices`).
    Slices {
        names: Vec<String>,
        columns: Vec<Tensor>,
    },
    /// Rows of the arrays of an `.npz` file (or of one `.npy` file, as field `name`).
    Npz {
        path: String,
        name: Option<String>,
        names: Vec<String>,
        columns: Vec<Tensor>,
    },
    ListFiles {
        patterns: Vec<String>,
        files: Vec<String>,
        shuffle: bool,
        seed: u64,
        epoch: Arc<AtomicU64>,
    },
    TfRecord {
        patterns: Vec<String>,
        files: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    },
    Shuffle {
        input: Plan,
        buffer_size: usize,
        /// The seed given, or one drawn when the dataset was made.
        seed: u64,
        seed_given: bool,
        reshuffle_each_iteration: bool,
        epoch: Arc<AtomicU64>,
    },
    Map {
        input: Plan,
        ops: Vec<Arc<dyn Op>>,
        num_parallel_calls: Option<i64>,
        deterministic: bool,
        /// Passes started over this stage: random ops draw from (seed, epoch, element).
        epoch: Arc<AtomicU64>,
    },
    Batch {
        input: Plan,
        batch_size: usize,
        drop_remainder: bool,
        /// `padded_batch`: how elements of different shapes are padded.
        padding: Option<Arc<Padding>>,
    },
    Interleave {
        input: Plan,
        opener: Arc<dyn Opener>,
        cycle_length: Option<usize>,
        block_length: usize,
        num_parallel_calls: Option<i64>,
    },
    Filter {
        input: Plan,
        predicate: Arc<dyn Predicate>,
    },
    Take {
        input: Plan,
        count: u64,
    },
    Skip {
        input: Plan,
        count: u64,
    },
    Repeat {
        input: Plan,
        count: Option<u64>,
    },
    Cache {
        input: Plan,
        /// `None`: in memory.
        filename: Option<String>,
        memory: Arc<MemoryCache>,
    },
    Prefetch {
        input: Plan,
        buffer_size: i64,
    },
    Shard {
        input: Plan,
        num_shards: u64,
        index: u64,
    },
    Zip {
        inputs: Vec<Plan>,
        prefixes: Vec<String>,
    },
    Enumerate {
        input: Plan,
        start: i64,
        index_name: String,
        prefix: String,
    },
    WithOptions {
        input: Plan,
        options: PipelineOptions,
    },
}

fn same(input: &Plan) -> Schema {
    input.schema().clone()
}

fn rows_schema(names: &[String], columns: &[Tensor], step: &str) -> Result<Schema> {
    let mut fields = Vec::with_capacity(names.len());
    let mut rows = None;
    for (n, c) in names.iter().zip(columns) {
        let Some((&first, rest)) = c.shape().split_first() else {
            return Err(Error::schema(
                step,
                format!("'{n}' is a scalar; every component needs a first dimension to slice"),
            ));
        };
        match rows {
            Some(r) if r != first => {
                return Err(Error::schema(
                    step,
                    format!("components have different first dimensions: {r} and {first} ('{n}')"),
                ))
            }
            _ => rows = Some(first),
        }
        fields.push(FieldSpec::fixed(n.clone(), c.dtype(), rest));
    }
    Ok(Schema::new(fields))
}

impl Step {
    fn infer_schema(&self) -> Result<Schema> {
        Ok(match self {
            Step::Range { step, .. } => {
                if *step == 0 {
                    return Err(Error::schema("range", "step must not be 0"));
                }
                Schema::new(vec![FieldSpec::fixed("value", DType::I64, &[])])
            }
            Step::Slices { names, columns } => rows_schema(names, columns, "from_tensor_slices")?,
            Step::Npz { names, columns, .. } => rows_schema(names, columns, "from_npz")?,
            Step::ListFiles { .. } => {
                Schema::new(vec![FieldSpec::fixed("filename", DType::Bytes, &[])])
            }
            Step::TfRecord { .. } => Schema::new(vec![FieldSpec::fixed(
                stoker_formats::TfRecordIter::FIELD,
                DType::Bytes,
                &[],
            )]),
            Step::Shuffle {
                input, buffer_size, ..
            } => {
                if *buffer_size == 0 {
                    return Err(Error::schema("shuffle", "buffer_size must be at least 1"));
                }
                same(input)
            }
            Step::Map {
                input,
                ops,
                num_parallel_calls,
                ..
            } => {
                check_parallelism("map", *num_parallel_calls)?;
                let mut schema = same(input);
                for op in ops {
                    schema = op.output_schema(&schema)?;
                }
                schema
            }
            Step::Batch {
                input,
                batch_size,
                drop_remainder,
                padding,
            } => {
                if *batch_size == 0 {
                    return Err(Error::schema("batch", "batch_size must be at least 1"));
                }
                let mut s = same(input);
                if let Some(p) = padding {
                    pad_schema(&mut s, p)?;
                }
                for f in &mut s.fields {
                    let dim = drop_remainder.then_some(*batch_size);
                    f.shape.insert(0, dim);
                }
                s
            }
            Step::Interleave {
                input,
                opener,
                cycle_length,
                block_length,
                num_parallel_calls,
            } => {
                check_parallelism("interleave", *num_parallel_calls)?;
                if *block_length == 0 || *cycle_length == Some(0) {
                    return Err(Error::schema(
                        "interleave",
                        "cycle_length and block_length must be at least 1",
                    ));
                }
                opener.output_schema(input.schema())?
            }
            Step::Filter { input, .. }
            | Step::Take { input, .. }
            | Step::Skip { input, .. }
            | Step::Repeat { input, .. }
            | Step::Cache { input, .. }
            | Step::WithOptions { input, .. } => same(input),
            Step::Prefetch { input, buffer_size } => {
                if *buffer_size < AUTOTUNE {
                    return Err(Error::schema(
                        "prefetch",
                        "buffer_size must be >= 0 or AUTOTUNE",
                    ));
                }
                same(input)
            }
            Step::Shard {
                input,
                num_shards,
                index,
            } => {
                if *num_shards == 0 || index >= num_shards {
                    return Err(Error::schema(
                        "shard",
                        format!("index {index} must be in 0..num_shards ({num_shards})"),
                    ));
                }
                same(input)
            }
            Step::Zip { inputs, prefixes } => {
                if inputs.is_empty() || inputs.len() != prefixes.len() {
                    return Err(Error::schema(
                        "zip",
                        "zip needs at least one dataset, each with a prefix",
                    ));
                }
                let mut fields = Vec::new();
                for (p, prefix) in inputs.iter().zip(prefixes) {
                    if p.schema().dynamic {
                        return Ok(Schema::dynamic());
                    }
                    for f in &p.schema().fields {
                        let mut f = f.clone();
                        f.name = format!("{prefix}{}", f.name);
                        fields.push(f);
                    }
                }
                unique("zip", Schema::new(fields))?
            }
            Step::Enumerate {
                input,
                index_name,
                prefix,
                ..
            } => {
                if input.schema().dynamic {
                    return Ok(Schema::dynamic());
                }
                let mut fields = vec![FieldSpec::fixed(index_name.clone(), DType::I64, &[])];
                for f in &input.schema().fields {
                    let mut f = f.clone();
                    f.name = format!("{prefix}{}", f.name);
                    fields.push(f);
                }
                unique("enumerate", Schema::new(fields))?
            }
        })
    }

    /// The inputs of this step.
    pub fn inputs(&self) -> Vec<&Plan> {
        match self {
            Step::Range { .. }
            | Step::Slices { .. }
            | Step::Npz { .. }
            | Step::ListFiles { .. }
            | Step::TfRecord { .. } => Vec::new(),
            Step::Zip { inputs, .. } => inputs.iter().collect(),
            Step::Shuffle { input, .. }
            | Step::Map { input, .. }
            | Step::Batch { input, .. }
            | Step::Interleave { input, .. }
            | Step::Filter { input, .. }
            | Step::Take { input, .. }
            | Step::Skip { input, .. }
            | Step::Repeat { input, .. }
            | Step::Cache { input, .. }
            | Step::Prefetch { input, .. }
            | Step::Shard { input, .. }
            | Step::Enumerate { input, .. }
            | Step::WithOptions { input, .. } => vec![input],
        }
    }

    /// The step's kind, as in tf.data.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Range { .. } => "range",
            Step::Slices { .. } => "from_tensor_slices",
            Step::Npz { .. } => "from_npz",
            Step::ListFiles { .. } => "list_files",
            Step::TfRecord { .. } => "tfrecord",
            Step::Shuffle { .. } => "shuffle",
            Step::Map { .. } => "map",
            Step::Batch { padding: None, .. } => "batch",
            Step::Batch { .. } => "padded_batch",
            Step::Interleave { .. } => "interleave",
            Step::Filter { .. } => "filter",
            Step::Take { .. } => "take",
            Step::Skip { .. } => "skip",
            Step::Repeat { .. } => "repeat",
            Step::Cache { .. } => "cache",
            Step::Prefetch { .. } => "prefetch",
            Step::Shard { .. } => "shard",
            Step::Zip { .. } => "zip",
            Step::Enumerate { .. } => "enumerate",
            Step::WithOptions { .. } => "options",
        }
    }
}

/// The schema after `padded_batch`'s padding (before the batch axis): fixed padded sizes
/// replace the fields' sizes; string fields must already have fixed shapes.
fn pad_schema(schema: &mut Schema, padding: &Padding) -> Result<()> {
    for name in padding.shapes.keys().chain(padding.values.keys()) {
        // (Unknown before a Python function has run: checked per batch then.)
        if !schema.dynamic && !schema.fields.iter().any(|f| &f.name == name) {
            return Err(Error::schema(
                "padded_batch",
                format!("no field '{name}' to pad"),
            ));
        }
    }
    for f in &mut schema.fields {
        let Some(fixed) = padding.shapes.get(&f.name) else {
            continue;
        };
        if f.dtype == DType::Bytes {
            return Err(Error::schema(
                "padded_batch",
                format!("field '{}' holds strings, which are not padded", f.name),
            ));
        }
        if !schema.dynamic && fixed.len() != f.shape.len() {
            return Err(Error::schema(
                "padded_batch",
                format!(
                    "field '{}' has rank {} but its padded shape {fixed:?} has rank {}",
                    f.name,
                    f.shape.len(),
                    fixed.len()
                ),
            ));
        }
        for (dim, want) in f.shape.iter_mut().zip(fixed) {
            match (*dim, want) {
                (Some(have), Some(w)) if have > *w => {
                    return Err(Error::schema(
                        "padded_batch",
                        format!(
                            "field '{}' has size {have} where the padded shape asks for {w}",
                            f.name
                        ),
                    ))
                }
                (_, Some(w)) => *dim = Some(*w),
                _ => {}
            }
        }
    }
    Ok(())
}

fn unique(step: &str, schema: Schema) -> Result<Schema> {
    let mut seen = std::collections::HashSet::new();
    for f in &schema.fields {
        if !seen.insert(f.name.as_str()) {
            return Err(Error::schema(
                step,
                format!("two fields would be named '{}'", f.name),
            ));
        }
    }
    Ok(schema)
}

fn check_parallelism(step: &str, n: Option<i64>) -> Result<()> {
    match n {
        Some(n) if n == 0 || n < AUTOTUNE => Err(Error::schema(
            step,
            format!("num_parallel_calls must be >= 1 or AUTOTUNE, got {n}"),
        )),
        _ => Ok(()),
    }
}

impl Step {
    /// The same step over other inputs (in the order of [`Step::inputs`]).
    pub fn with_inputs(&self, mut new_inputs: Vec<Plan>) -> Step {
        let mut step = self.clone();
        match &mut step {
            Step::Zip { inputs, .. } => *inputs = new_inputs,
            Step::Shuffle { input, .. }
            | Step::Map { input, .. }
            | Step::Batch { input, .. }
            | Step::Interleave { input, .. }
            | Step::Filter { input, .. }
            | Step::Take { input, .. }
            | Step::Skip { input, .. }
            | Step::Repeat { input, .. }
            | Step::Cache { input, .. }
            | Step::Prefetch { input, .. }
            | Step::Shard { input, .. }
            | Step::Enumerate { input, .. }
            | Step::WithOptions { input, .. } => {
                if let Some(p) = new_inputs.pop() {
                    *input = p;
                }
            }
            _ => {}
        }
        step
    }
}

/// A seed for a shuffle given none: different for every dataset made.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's hasher keys are drawn from the OS's randomness, fresh for every `RandomState`.
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

impl Plan {
    /// TFRecord files (paths or glob patterns, expanded and checked now).
    pub fn tfrecord(
        patterns: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    ) -> Result<Plan> {
        let files = crate::sources::expand_files("TFRecordDataset", &patterns)?;
        Plan::new(Step::TfRecord {
            patterns,
            files,
            compression,
            verify_crc,
            num_parallel_reads,
        })
    }

    /// File names matching `patterns`, sorted, or shuffled with `seed` (a new order each epoch).
    pub fn list_files(patterns: Vec<String>, shuffle: bool, seed: Option<u64>) -> Result<Plan> {
        let files = crate::sources::expand_files("list_files", &patterns)?;
        Plan::new(Step::ListFiles {
            patterns,
            files,
            shuffle,
            seed: seed.unwrap_or_else(random_seed),
            epoch: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The rows of every array of an `.npz` file, or of one `.npy` file (as field `name`).
    pub fn from_npz(path: &str, name: Option<String>) -> Result<Plan> {
        let (names, columns): (Vec<String>, Vec<Tensor>) = if path.ends_with(".npy") {
            let n = name.clone().unwrap_or_else(|| "value".into());
            (vec![n], vec![stoker_formats::npy::load_npy(path)?])
        } else {
            stoker_formats::npy::load_npz(path)?.into_iter().unzip()
        };
        Plan::new(Step::Npz {
            path: path.to_string(),
            name,
            names,
            columns,
        })
    }

    /// A seeded shuffle; `seed: None` draws one.
    pub fn shuffle(
        &self,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> Result<Plan> {
        Plan::new(Step::Shuffle {
            input: self.clone(),
            buffer_size,
            seed: seed.unwrap_or_else(random_seed),
            seed_given: seed.is_some(),
            reshuffle_each_iteration,
            epoch: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn map(
        &self,
        ops: Vec<Arc<dyn Op>>,
        num_parallel_calls: Option<i64>,
        deterministic: bool,
    ) -> Result<Plan> {
        Plan::new(Step::Map {
            input: self.clone(),
            ops,
            num_parallel_calls,
            deterministic,
            epoch: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn batch(&self, batch_size: usize, drop_remainder: bool) -> Result<Plan> {
        Plan::new(Step::Batch {
            input: self.clone(),
            batch_size,
            drop_remainder,
            padding: None,
        })
    }

    pub fn padded_batch(
        &self,
        batch_size: usize,
        drop_remainder: bool,
        padding: Padding,
    ) -> Result<Plan> {
        Plan::new(Step::Batch {
            input: self.clone(),
            batch_size,
            drop_remainder,
            padding: Some(Arc::new(padding)),
        })
    }

    pub fn cache(&self, filename: Option<String>) -> Result<Plan> {
        Plan::new(Step::Cache {
            input: self.clone(),
            filename,
            memory: MemoryCache::new(),
        })
    }

    pub fn prefetch(&self, buffer_size: i64) -> Result<Plan> {
        Plan::new(Step::Prefetch {
            input: self.clone(),
            buffer_size,
        })
    }

    /// A plan node for `step`, checked against its input.
    pub fn new(step: Step) -> Result<Plan> {
        let schema = step.infer_schema()?;
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
        match self.step() {
            Step::Map {
                ops,
                num_parallel_calls,
                ..
            } => {
                let names: Vec<&str> = ops.iter().map(|o| o.name()).collect();
                let par = match num_parallel_calls {
                    Some(AUTOTUNE) => " parallel=AUTOTUNE".to_string(),
                    Some(n) if *n > 1 => format!(" parallel={n}"),
                    _ => String::new(),
                };
                format!("map[{}]{par}", names.join(", "))
            }
            Step::Batch {
                batch_size,
                drop_remainder,
                padding,
                ..
            } => {
                format!(
                    "{}({batch_size}{})",
                    if padding.is_some() {
                        "padded_batch"
                    } else {
                        "batch"
                    },
                    if *drop_remainder {
                        ", drop_remainder"
                    } else {
                        ""
                    }
                )
            }
            Step::Shuffle { buffer_size, .. } => format!("shuffle({buffer_size})"),
            Step::Prefetch { buffer_size, .. } => match *buffer_size {
                AUTOTUNE => "prefetch(AUTOTUNE)".into(),
                n => format!("prefetch({n})"),
            },
            Step::TfRecord {
                files,
                num_parallel_reads,
                ..
            } => {
                format!(
                    "tfrecord({} files, parallel_reads={num_parallel_reads})",
                    files.len()
                )
            }
            Step::Take { count, .. } => format!("take({count})"),
            Step::Skip { count, .. } => format!("skip({count})"),
            Step::Repeat { count, .. } => match count {
                Some(c) => format!("repeat({c})"),
                None => "repeat".into(),
            },
            Step::Cache { filename, .. } => match filename {
                Some(f) => format!("cache({f})"),
                None => "cache(memory)".into(),
            },
            Step::Shard {
                num_shards, index, ..
            } => format!("shard({num_shards}, {index})"),
            Step::Filter { predicate, .. } => format!("filter[{}]", predicate.name()),
            Step::WithOptions { options, .. } => {
                let mut parts = vec![format!(
                    "on_bad_record={}",
                    match options.on_bad_record {
                        stoker_core::ErrorPolicy::Raise => "raise",
                        stoker_core::ErrorPolicy::Skip => "skip",
                    }
                )];
                if let Some(t) = options.threads {
                    parts.push(format!("threads={t}"));
                }
                format!("options({})", parts.join(", "))
            }
            step => step.kind().to_string(),
        }
    }

    /// Pipeline options: those of every `with_options` step, the outermost winning.
    pub fn options(&self) -> PipelineOptions {
        let mut chain = Vec::new();
        let mut stack = vec![self.clone()];
        while let Some(p) = stack.pop() {
            if let Step::WithOptions { options, .. } = p.step() {
                chain.push(options.clone());
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
