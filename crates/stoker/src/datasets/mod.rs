//! The dataset operators, one module each.
//!
//! A module holds everything about its operator: its parameters and inputs, its schema rule,
//! its spec form (a serde struct), how it starts its iterator or restores it from a saved
//! state, and the properties the planner, the verdict and `global_shuffle` read (whether it
//! is deterministic, which threads it runs on and its parallelism knob, whether it keeps
//! batches together, whether it has random access). A new operator is a new module plus one
//! line in `steps!` below.

use serde::de::DeserializeOwned;
use serde::Serialize;
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::shuffle::ReadBuffer;
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::{Error, ErrorPolicy, Result, Seed, StageStats, Tensor};

use std::sync::Arc;

use crate::build::BuildCtx;
use crate::plan::{Plan, AUTOTUNE};
use crate::spec::SpecCtx;

/// `inputs` and `inputs_mut` of a step over one input, its field `input`.
macro_rules! one_input {
    () => {
        fn inputs(&self) -> Vec<&Plan> {
            vec![&self.input]
        }

        fn inputs_mut(&mut self) -> Vec<&mut Plan> {
            vec![&mut self.input]
        }
    };
}

/// `inputs` and `inputs_mut` of a source.
macro_rules! no_inputs {
    () => {
        fn inputs(&self) -> Vec<&Plan> {
            Vec::new()
        }

        fn inputs_mut(&mut self) -> Vec<&mut Plan> {
            Vec::new()
        }
    };
}

pub mod batch;
pub mod cache;
pub mod choose_from_datasets;
pub mod concatenate;
pub mod elements;
pub mod enumerate;
pub mod filter;
pub mod fixed_length_record;
pub mod from_generator;
pub mod from_npz;
pub mod from_tensor_slices;
pub mod global_shuffle;
pub mod group_by_window;
pub mod interleave;
pub mod list_files;
pub mod map;
pub mod options;
pub mod padded_batch;
pub mod prefetch;
pub mod range;
pub mod repeat;
pub mod sample_from_datasets;
pub mod scan;
pub mod shard;
pub mod shuffle;
pub mod skip;
pub mod take;
pub mod text_line;
pub mod tfrecord;
pub mod unbatch;
pub mod window;
pub mod zip;

/// What every dataset operator is.
pub trait DatasetOp: Clone + Send + Sync + Into<Step> + 'static {
    /// Its name, as in tf.data, in `explain()` and in spec files.
    const KIND: &'static str;
    /// Whether it starts a pipeline (in a spec file, no step comes before it).
    const SOURCE: bool = false;
    /// Its form in a spec file, without the `step` key.
    type Spec: Serialize + DeserializeOwned;

    fn inputs(&self) -> Vec<&Plan>;
    fn inputs_mut(&mut self) -> Vec<&mut Plan>;
    /// The schema of its elements, checked against its inputs'.
    fn schema(&self) -> Result<Schema>;
    /// A short description for stats and `explain()`, e.g. `shuffle(10000)`.
    fn label(&self) -> String {
        Self::KIND.to_string()
    }
    /// Whether the verdict may advise a cache right after it: it hands out the same elements
    /// in the same order on every pass given the same input (no random op, no Python
    /// function, no shuffle), and a cache there makes sense.
    fn deterministic(&self) -> bool;
    /// How many elements it hands out in one pass, where the plan tells (tf.data's
    /// `cardinality()`).
    fn cardinality(&self) -> Cardinality;
    /// Whether what it makes of each input element depends on that element alone, not on its
    /// position or its neighbours (a native map, a filter): run over consecutive parts of its
    /// input apart, it gives its whole output part by part, which `convert` relies on.
    fn per_element(&self) -> bool {
        false
    }
    /// The size and `drop_remainder` of the batches it hands out, when they come from a
    /// `batch` through steps that keep its rows together.
    fn batch_of(&self) -> Option<(usize, bool)> {
        None
    }
    /// Starts its iterator; `node` is the plan node holding it, `stats` its stage's counters.
    /// With `at`, a state its iterator reported, it starts there (see
    /// [`stoker_core::exec::state`]): the elements that follow are those the saved iterator
    /// would have handed out next.
    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter>;
    /// Which threads it runs on (what the verdict models; with the knob, what an autotuner
    /// would turn).
    fn threads(&self) -> Threads {
        Threads::Caller
    }
    /// Its parallelism knob and setting, where it has one (`None` setting: not parallel).
    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        None
    }
    /// Whether [`random_access`](DatasetOp::random_access) can give random access to its
    /// elements (a declared property: `global_shuffle` needs it).
    fn supports_random_access(&self) -> bool {
        false
    }
    /// Random access to the elements of its pass at `ctx`'s epoch, where it has it.
    fn random_access(&self, node: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        let _ = (node, ctx);
        Ok(None)
    }
    /// The seeds it draws from (its own and its ops'), in a fixed order: a pipeline gives
    /// the drawn ones their values from these (see [`stoker_core::seed`]).
    fn seeds(&self) -> Vec<Seed> {
        Vec::new()
    }
    /// Whether a pass hands out as many elements as its input's (a shuffle, a map, a
    /// prefetch): a count of its input, where the plan does not know it, is its count.
    fn keeps_count(&self) -> bool {
        false
    }
    /// How a `shard` right above it can move below it (the planner's `shard_down`), where
    /// the elements the other shards keep are then not made at all.
    fn shard_move(&self) -> ShardMove {
        ShardMove::Stops(format!(
            "{} is not known to hand out the same elements with its input sharded",
            Self::KIND
        ))
    }
    /// Its spec form; `None` for a step that a spec file holds elsewhere (options).
    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Self::Spec>>;
    /// The step a spec describes, over `input` (the step before it; `None` for a source).
    fn from_spec(spec: Self::Spec, input: Option<Plan>, ctx: &SpecCtx) -> Result<Self>;
}

/// How many elements a step hands out in one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    Finite(u64),
    Infinite,
    /// Not known before running it (a filter, a source of unknown length, ...).
    Unknown,
}

impl Cardinality {
    /// tf.data's number: the count, `-1` (`INFINITE_CARDINALITY`) or `-2`
    /// (`UNKNOWN_CARDINALITY`).
    pub fn as_i64(self) -> i64 {
        match self {
            Cardinality::Finite(n) => i64::try_from(n).unwrap_or(i64::MAX),
            Cardinality::Infinite => -1,
            Cardinality::Unknown => -2,
        }
    }

    /// The batches of `size` made of these elements (the last one dropped when short, with
    /// `drop_remainder`).
    pub fn batched(self, size: usize, drop_remainder: bool) -> Cardinality {
        let size = size.max(1) as u64;
        self.map(|n| {
            if drop_remainder {
                n / size
            } else {
                n.div_ceil(size)
            }
        })
    }

    /// `f` of the count of a finite pass; an infinite or unknown one stays so.
    pub fn map(self, f: impl FnOnce(u64) -> u64) -> Cardinality {
        match self {
            Cardinality::Finite(n) => Cardinality::Finite(f(n)),
            other => other,
        }
    }
}

/// How a `shard` right above a step can move below it (see [`DatasetOp::shard_move`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardMove {
    /// Its output element `k` is made from its input element `k` alone (a prefetch, a map
    /// under the raise policy): the shard moves below it as it is. A map's ops then see the
    /// positions the elements had in the whole stream, so random ops give the same results.
    Through,
    /// It groups consecutive elements (a batch): below it each shard groups its own share,
    /// the same elements in other groups. Only a rank's share moves so.
    Regroups,
    /// It hands out its input's first `n` elements (a take): the shard moves below it and
    /// shares out those.
    Prefix(u64),
    /// It takes the shard in and makes only the share's elements (a global shuffle reads
    /// only the share's positions of its permutation).
    TakesIn,
    /// The shard stays above it, for this reason.
    Stops(String),
}

/// Where a step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// On the thread that pulls from it.
    Caller,
    /// On the caller's thread, while a thread of its own runs its input ahead (prefetch).
    FeedsInputOnOwnThread,
    /// On a pool of workers when it runs in parallel, fed by a thread running its input.
    Workers,
    /// Its rows are written by the workers of the parallel map before it, when there is one
    /// (a batch fused with that map).
    RowsByInputWorkers,
}

/// Random access to the elements of one pass of a step, by their position in the pass.
pub trait RandomAccess: Send + Sync + 'static {
    /// The number of elements in the pass (may read whole indexes to count them).
    fn count(&self) -> Result<u64>;
    /// Gets ready to hand out the elements before position `upto` (e.g. reads the indexes
    /// saying where they are), so that a caller can have that done alongside other work.
    fn prepare(&self, _upto: u64) -> Result<()> {
        Ok(())
    }
    /// The elements at `positions`, in that order.
    fn get(&self, positions: &[u64]) -> Result<Vec<Element>>;
    /// Like [`get`](RandomAccess::get), where bad elements are skipped (the pipeline's
    /// `on_bad_record=skip`): `None` at a position whose element is bad (a damaged record, an
    /// op that failed on it), so that the positions stay those of the pass. With `count`, what
    /// reading them finds (skips, warnings) is counted in the stages' stats; without, it was
    /// counted already (by the run a restore goes on from).
    fn get_or_skip(&self, positions: &[u64], count: bool) -> Result<Vec<Option<Element>>> {
        let _ = count;
        Ok(self.get(positions)?.into_iter().map(Some).collect())
    }
    /// Counts, in the stages' stats, the losses that lie at no position (damage that took
    /// records' headers, found when the access was opened under the skip policy): once, by a
    /// pass that reads every position from the first.
    fn count_unplaced_losses(&self) {}
    /// Whether [`get_or_skip`](RandomAccess::get_or_skip) may skip positions. A pass run in
    /// order skips them too, and then hands out fewer elements before a position than there
    /// are positions: what a restored shuffle buffer holds cannot be found by position.
    fn may_skip(&self) -> bool {
        false
    }
    /// The state of the step's iterator after the first `upto` elements of the pass.
    fn state_at(&self, upto: u64) -> Result<State>;
    /// A reader of the elements at `positions` (any of them, any time after, on any thread)
    /// and the state after `upto`: what a restored shuffle buffer needs, which some sources
    /// find in one pass over their order.
    fn reader_and_state_at(
        self: Arc<Self>,
        positions: Vec<u64>,
        upto: u64,
    ) -> Result<(ReadBuffer, State)> {
        let state = self.state_at(upto)?;
        Ok((reader_by_get(self, positions), state))
    }
}

/// The number of elements of a pass of `plan`: as the plan knows it, else counted through
/// random access (TFRecord files: their indexes), down through steps that keep their input's
/// count; `Unknown` where neither tells.
pub fn counted(plan: &Plan) -> Cardinality {
    let mut p = plan.clone();
    loop {
        let known = p.step().cardinality();
        if known != Cardinality::Unknown {
            return known;
        }
        // Under the skip policy bad records are dropped: a count of the positions would
        // claim more elements than come.
        if p.step().supports_random_access() && p.options().on_bad_record == ErrorPolicy::Raise {
            let ctx = BuildCtx {
                order_budget: 1,
                ..BuildCtx::new(
                    p.options(),
                    stoker_core::StatsRegistry::new(),
                    crate::build::Resources::new(),
                    0,
                )
            };
            return match p.step().random_access(&p, &ctx) {
                Ok(Some(access)) => access
                    .count()
                    .map_or(Cardinality::Unknown, Cardinality::Finite),
                _ => Cardinality::Unknown,
            };
        }
        if !p.step().keeps_count() {
            return Cardinality::Unknown;
        }
        let Some(input) = p.step().inputs().first().map(|i| (*i).clone()) else {
            return Cardinality::Unknown;
        };
        p = input;
    }
}

/// A reader of the elements at `positions` through [`RandomAccess::get`].
pub fn reader_by_get<A: RandomAccess + ?Sized>(access: Arc<A>, positions: Vec<u64>) -> ReadBuffer {
    Box::new(move |which: &[usize]| {
        let wanted: Vec<u64> = which.iter().map(|&k| positions[k]).collect();
        access.get(&wanted)
    })
}

/// Declares the closed set of operators: the [`Step`] enum and its dispatch, so that the
/// compiler checks that every operator answers every question.
macro_rules! steps {
    ($($variant:ident($module:ident::$ty:ident)),* $(,)?) => {
        /// One step of a pipeline.
        #[derive(Clone)]
        pub enum Step {
            $($variant($module::$ty),)*
        }

        $(impl From<$module::$ty> for Step {
            fn from(op: $module::$ty) -> Step {
                Step::$variant(op)
            }
        })*

        /// Every operator's name, in declaration order.
        pub const KINDS: &[&str] = &[$(<$module::$ty as DatasetOp>::KIND,)*];

        impl Step {
            /// The step's kind, as in tf.data.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Step::$variant(_) => <$module::$ty as DatasetOp>::KIND,)*
                }
            }

            /// Whether the step starts a pipeline (its inputs, if any, are in its spec).
            pub fn is_source(&self) -> bool {
                match self {
                    $(Step::$variant(_) => <$module::$ty as DatasetOp>::SOURCE,)*
                }
            }

            /// The inputs of this step.
            pub fn inputs(&self) -> Vec<&Plan> {
                match self {
                    $(Step::$variant(op) => op.inputs(),)*
                }
            }

            pub(crate) fn inputs_mut(&mut self) -> Vec<&mut Plan> {
                match self {
                    $(Step::$variant(op) => op.inputs_mut(),)*
                }
            }

            pub(crate) fn schema(&self) -> Result<Schema> {
                match self {
                    $(Step::$variant(op) => op.schema(),)*
                }
            }

            pub fn label(&self) -> String {
                match self {
                    $(Step::$variant(op) => op.label(),)*
                }
            }

            pub fn deterministic(&self) -> bool {
                match self {
                    $(Step::$variant(op) => op.deterministic(),)*
                }
            }

            pub fn per_element(&self) -> bool {
                match self {
                    $(Step::$variant(op) => op.per_element(),)*
                }
            }

            pub fn threads(&self) -> Threads {
                match self {
                    $(Step::$variant(op) => op.threads(),)*
                }
            }

            pub fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
                match self {
                    $(Step::$variant(op) => op.parallelism_knob(),)*
                }
            }

            pub fn supports_random_access(&self) -> bool {
                match self {
                    $(Step::$variant(op) => op.supports_random_access(),)*
                }
            }

            pub fn random_access(
                &self,
                node: &Plan,
                ctx: &BuildCtx,
            ) -> Result<Option<Box<dyn RandomAccess>>> {
                match self {
                    $(Step::$variant(op) => op.random_access(node, ctx),)*
                }
            }

            pub fn seeds(&self) -> Vec<Seed> {
                match self {
                    $(Step::$variant(op) => op.seeds(),)*
                }
            }

            pub fn keeps_count(&self) -> bool {
                match self {
                    $(Step::$variant(op) => op.keeps_count(),)*
                }
            }

            pub fn shard_move(&self) -> ShardMove {
                match self {
                    $(Step::$variant(op) => op.shard_move(),)*
                }
            }

            pub fn batch_of(&self) -> Option<(usize, bool)> {
                match self {
                    $(Step::$variant(op) => op.batch_of(),)*
                }
            }

            pub fn cardinality(&self) -> Cardinality {
                match self {
                    $(Step::$variant(op) => op.cardinality(),)*
                }
            }

            pub(crate) fn iterate(
                &self,
                node: &Plan,
                ctx: &BuildCtx,
                stats: Arc<StageStats>,
                at: Option<&State>,
            ) -> Result<BoxIter> {
                match self {
                    $(Step::$variant(op) => op.iterate(node, ctx, stats, at),)*
                }
            }

            /// The step's spec form, with its `step` key.
            pub(crate) fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<serde_json::Value>> {
                match self {
                    $(Step::$variant(op) => spec_value(Self::kind(self), op.to_spec(ctx)?),)*
                }
            }

            /// The step of kind `kind` described by `fields` (the spec form without `step`).
            pub(crate) fn from_spec(
                kind: &str,
                fields: serde_json::Value,
                input: Option<Plan>,
                ctx: &SpecCtx,
            ) -> Result<Step> {
                $(if kind == <$module::$ty as DatasetOp>::KIND {
                    return from_spec_as::<$module::$ty>(fields, input, ctx);
                })*
                Err(Error::Spec(format!(
                    "unknown step; the steps are: {}",
                    KINDS.join(", ")
                )))
            }
        }
    };
}

steps! {
    Range(range::Range),
    Slices(from_tensor_slices::FromTensorSlices),
    Npz(from_npz::FromNpz),
    FromGenerator(from_generator::FromGenerator),
    ListFiles(list_files::ListFiles),
    TfRecord(tfrecord::TfRecord),
    TextLine(text_line::TextLine),
    FixedLengthRecord(fixed_length_record::FixedLengthRecord),
    Shuffle(shuffle::Shuffle),
    GlobalShuffle(global_shuffle::GlobalShuffle),
    Map(map::Map),
    Batch(batch::Batch),
    PaddedBatch(padded_batch::PaddedBatch),
    Unbatch(unbatch::Unbatch),
    Scan(scan::Scan),
    GroupByWindow(group_by_window::GroupByWindow),
    Elements(elements::Elements),
    Window(window::Window),
    Interleave(interleave::Interleave),
    Filter(filter::Filter),
    Take(take::Take),
    Skip(skip::Skip),
    Repeat(repeat::Repeat),
    Cache(cache::Cache),
    Prefetch(prefetch::Prefetch),
    Shard(shard::Shard),
    Zip(zip::Zip),
    Concatenate(concatenate::Concatenate),
    SampleFromDatasets(sample_from_datasets::SampleFromDatasets),
    ChooseFromDatasets(choose_from_datasets::ChooseFromDatasets),
    Enumerate(enumerate::Enumerate),
    WithOptions(options::WithOptions),
}

impl Step {
    /// The same step over other inputs (in the order of [`Step::inputs`]).
    pub fn with_inputs(&self, new_inputs: Vec<Plan>) -> Step {
        let mut step = self.clone();
        for (slot, p) in step.inputs_mut().into_iter().zip(new_inputs) {
            *slot = p;
        }
        step
    }
}

fn spec_value<S: Serialize>(kind: &str, spec: Option<S>) -> Result<Option<serde_json::Value>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let mut v = serde_json::to_value(spec).map_err(|e| Error::Spec(e.to_string()))?;
    match v.as_object_mut() {
        Some(m) => {
            m.insert("step".into(), kind.into());
        }
        None => return Err(Error::Spec(format!("{kind}: a spec must be a table"))),
    }
    Ok(Some(v))
}

fn from_spec_as<T: DatasetOp>(
    fields: serde_json::Value,
    input: Option<Plan>,
    ctx: &SpecCtx,
) -> Result<Step> {
    let input = match (T::SOURCE, input) {
        (true, Some(_)) => return Err(Error::Spec("a source can only be the first step".into())),
        (false, None) => return Err(Error::Spec("needs an input step before it".into())),
        (_, input) => input,
    };
    let spec: T::Spec = serde_json::from_value(fields).map_err(|e| Error::Spec(e.to_string()))?;
    Ok(T::from_spec(spec, input, ctx)?.into())
}

/// The error for a spec of a step that cannot be loaded from one.
pub(crate) fn not_loadable(why: &str) -> Error {
    Error::Spec(format!("cannot be loaded from a spec: {why}"))
}

/// The spec form of an operator that has none: reads anything, which `from_spec` refuses.
#[derive(Clone, Debug)]
pub struct NoSpec;

impl Serialize for NoSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> serde::Deserialize<'de> for NoSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| NoSpec)
    }
}

/// The schema of the step's input, unchanged.
pub(crate) fn same(input: &Plan) -> Schema {
    input.schema().clone()
}

/// The schema of the rows of `columns` (for `from_tensor_slices` and `from_npz`).
/// The elements of a source of `columns`: their rows.
pub(crate) fn rows_cardinality(columns: &[Tensor]) -> Cardinality {
    let rows = columns.first().and_then(|c| c.shape().first().copied());
    Cardinality::Finite(rows.unwrap_or(0) as u64)
}

pub(crate) fn rows_schema(names: &[String], columns: &[Tensor], step: &str) -> Result<Schema> {
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

/// `schema`, refused when two fields have the same name.
pub(crate) fn unique(step: &str, schema: Schema) -> Result<Schema> {
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

pub(crate) fn check_parallelism(step: &str, n: Option<i64>) -> Result<()> {
    match n {
        Some(n) if n == 0 || n < AUTOTUNE => Err(Error::schema(
            step,
            format!("num_parallel_calls must be >= 1 or AUTOTUNE, got {n}"),
        )),
        _ => Ok(()),
    }
}

/// A spec value that is one string or a list of strings.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Strings {
    One(String),
    Many(Vec<String>),
}

impl Strings {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Strings::One(s) => vec![s],
            Strings::Many(v) => v,
        }
    }
}

/// The input of a step that has one (checked by the spec reader before `from_spec`).
pub(crate) fn input_of(input: Option<Plan>) -> Result<Plan> {
    input.ok_or_else(|| Error::Spec("needs an input step before it".into()))
}

/// Passes over the `count` elements `it` hands out first: how the operators whose state lives
/// in the caller's code (a Python generator, a scan's state, groups being filled) restore, by
/// running the pass again up to the saved position. `source` names what ended early, `hint`
/// says why that may be.
pub(crate) fn pass_over(
    it: &mut dyn ElementIter,
    count: u64,
    step: &str,
    source: &str,
    hint: &str,
) -> Result<()> {
    for i in 0..count {
        if it.next()?.is_none() {
            return Err(Error::invalid(
                step,
                format!("restoring a state {count} elements in, {source} ended after {i}{hint}"),
            ));
        }
    }
    Ok(())
}

/// The state of input `i` in `at`, the state of a stage restored (`None` when not restored).
pub(crate) fn input_at<'a>(
    at: Option<&'a State>,
    step: &str,
    i: usize,
) -> Result<Option<&'a State>> {
    at.map(|s| s.input(step, i)).transpose()
}

/// Random access to the rows of in-memory columns (`from_tensor_slices`, `from_npz`).
pub(crate) struct RowAccess {
    pub names: stoker_core::element::Names,
    pub columns: Vec<Tensor>,
    pub rows: u64,
}

impl RowAccess {
    pub fn new(field_names: &[String], columns: &[Tensor]) -> RowAccess {
        let rows = columns.first().and_then(|c| c.shape().first()).copied();
        RowAccess {
            names: stoker_core::element::names(field_names),
            columns: columns.to_vec(),
            rows: rows.unwrap_or(0) as u64,
        }
    }
}

/// The iterator over the rows of in-memory columns, at a state if one is given.
pub(crate) fn rows_iterate(
    field_names: &[String],
    columns: &[Tensor],
    stats: Arc<StageStats>,
    at: Option<&State>,
) -> Result<BoxIter> {
    let mut it = stoker_core::exec::slices::SlicesIter::new(
        stoker_core::element::names(field_names),
        columns.to_vec(),
    )?;
    if let Some(s) = at {
        it = it.restore(s)?;
    }
    Ok(stoker_core::stats::Metered::wrap(Box::new(it), stats))
}

impl RandomAccess for RowAccess {
    fn count(&self) -> Result<u64> {
        Ok(self.rows)
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        positions
            .iter()
            .map(|&p| {
                let tensors = self
                    .columns
                    .iter()
                    .map(|c| c.row(p as usize))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Element::new(self.names.clone(), tensors))
            })
            .collect()
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        Ok(State::leaf(vec![upto.min(self.rows)]))
    }
}
