//! The dataset graph: an immutable tree of steps, each with the schema it produces, and what
//! every step is ([`DatasetOp`], and [`Step`], the same as a trait object).
//!
//! Every plan node checks its step against its input's schema, so an ill-formed pipeline
//! fails when it is built, with an error naming the step. The operators are in
//! [`crate::datasets`], one module each, and this module knows none of them: the registry
//! ([`crate::registry`]) lists them. Run state (shuffle epochs, memory caches) belongs to the
//! pipeline and its iterators, not to the plan.

use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{Error, ErrorPolicy, PipelineOptions, Result, Seed, StageStats};

use crate::build::{BuildCtx, Resources};
pub use crate::properties::AUTOTUNE;
use crate::properties::{Cardinality, Randomness, ShardMove, Share, Threads};
use crate::random_access::RandomAccess;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A node of the dataset graph. Cheap to clone (shared).
#[derive(Clone)]
pub struct Plan(Arc<PlanNode>);

pub struct PlanNode {
    id: u64,
    step: Arc<dyn Step>,
    schema: Schema,
}

impl Plan {
    /// A plan node for `op`, checked against its input.
    pub fn new<T: DatasetOp>(op: T) -> Result<Plan> {
        Plan::of_step(Arc::new(op))
    }

    /// A plan node for a step, checked against its input.
    pub fn of_step(step: Arc<dyn Step>) -> Result<Plan> {
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

    pub fn step(&self) -> &dyn Step {
        self.0.step.as_ref()
    }

    /// The step, shared (to rebuild it over other inputs).
    pub fn step_arc(&self) -> Arc<dyn Step> {
        Arc::clone(&self.0.step)
    }

    /// The step as operator `T`, where it is one.
    pub fn op<T: DatasetOp>(&self) -> Option<&T> {
        self.step().as_any().downcast_ref::<T>()
    }

    pub fn schema(&self) -> &Schema {
        &self.0.schema
    }

    /// A short description for stats and `explain`, e.g. `map[parse_example, cast] x2`.
    pub fn label(&self) -> String {
        self.step().label()
    }

    /// What the plan draws on besides its source data: its steps' own, the most random of
    /// them.
    pub fn randomness(&self) -> Randomness {
        self.step()
            .inputs()
            .into_iter()
            .map(Plan::randomness)
            .fold(self.step().randomness(), Randomness::max)
    }

    /// Whether a cache right after this node keeps the pipeline's results (every pass hands
    /// out the same elements in the same order) and saves work.
    pub fn safe_to_cache_after(&self) -> bool {
        self.step().cache_after_useful() && self.randomness() == Randomness::Fixed
    }

    /// Pipeline options: those of every `with_options` step, the outermost winning.
    pub fn options(&self) -> PipelineOptions {
        let mut chain = Vec::new();
        let mut stack = vec![self.clone()];
        while let Some(p) = stack.pop() {
            if let Some(o) = p.step().options() {
                chain.push(o.clone());
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
            if o.autotune.is_some() {
                out.autotune = o.autotune;
            }
            if o.ram_budget.is_some() {
                out.ram_budget = o.ram_budget;
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

/// The counters of `plan`'s stage.
pub fn stage_stats(plan: &Plan, ctx: &BuildCtx) -> Arc<StageStats> {
    ctx.stats
        .stage(plan.id(), &plan.label(), plan.step().kind())
}

/// Starts iterating over `plan`, from the start of the pass.
pub fn iterate(plan: &Plan, ctx: &BuildCtx) -> Result<BoxIter> {
    iterate_at(plan, ctx, None)
}

/// Starts iterating over `plan` at a state its iterator reported, or from the start.
pub fn iterate_at(plan: &Plan, ctx: &BuildCtx, at: Option<&State>) -> Result<BoxIter> {
    plan.step().iterate(plan, ctx, stage_stats(plan, ctx), at)
}

/// What every dataset operator is.
pub trait DatasetOp: Clone + Send + Sync + 'static {
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
    /// What it draws on besides its input (its own part: [`Plan::randomness`] combines it
    /// over the inputs).
    fn randomness(&self) -> Randomness;
    /// Whether a cache right after it would save work, where its output repeats (not after a
    /// buffer, a cache, a repeat or a rank's share: the cache belongs below them).
    fn cache_after_useful(&self) -> bool {
        true
    }
    /// The options it sets for the whole pipeline, where it is a `with_options`.
    fn options(&self) -> Option<&PipelineOptions> {
        None
    }
    /// The same step seeing the positions its elements have below a `shard(n, i)` moved below
    /// it (a map's random ops draw from an element's position), where that changes it.
    fn below_shard(&self, n: u64, i: u64) -> Option<Self> {
        let _ = (n, i);
        None
    }
    /// The same step making only `share` of its elements, where it can take a shard in (its
    /// [`shard_move`](DatasetOp::shard_move) is [`ShardMove::TakesIn`]).
    fn take_in(&self, share: Share) -> Option<Self> {
        let _ = share;
        None
    }
    /// Whether it transforms elements (a map, a filter, an interleave, a scan): work that
    /// every rank repeats when a shard stays above it.
    fn transforms(&self) -> bool {
        false
    }
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
    /// Its output buffer's size knob and setting, where it has one (a `prefetch`).
    fn buffer_knob(&self) -> Option<(&'static str, i64)> {
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

/// A dataset operator as a plan node holds it: every [`DatasetOp`] is one.
pub trait Step: Send + Sync + 'static {
    /// Its name, as in tf.data ([`DatasetOp::KIND`]).
    fn kind(&self) -> &'static str;
    /// Whether it starts a pipeline ([`DatasetOp::SOURCE`]).
    fn is_source(&self) -> bool;
    fn inputs(&self) -> Vec<&Plan>;
    fn schema(&self) -> Result<Schema>;
    fn label(&self) -> String;
    fn randomness(&self) -> Randomness;
    fn cache_after_useful(&self) -> bool;
    fn options(&self) -> Option<&PipelineOptions>;
    fn transforms(&self) -> bool;
    fn cardinality(&self) -> Cardinality;
    fn per_element(&self) -> bool;
    fn batch_of(&self) -> Option<(usize, bool)>;
    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter>;
    fn threads(&self) -> Threads;
    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)>;
    fn buffer_knob(&self) -> Option<(&'static str, i64)>;
    fn supports_random_access(&self) -> bool;
    fn random_access(&self, node: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>>;
    fn seeds(&self) -> Vec<Seed>;
    fn keeps_count(&self) -> bool;
    fn shard_move(&self) -> ShardMove;
    /// Its spec form, with its `step` key; `None` for a step a spec holds elsewhere.
    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Value>>;
    /// The same step over other inputs (in the order of [`Step::inputs`]).
    fn with_inputs(&self, inputs: Vec<Plan>) -> Arc<dyn Step>;
    /// [`DatasetOp::below_shard`] over `input`.
    fn below_shard(&self, n: u64, i: u64, input: Plan) -> Option<Arc<dyn Step>>;
    /// [`DatasetOp::take_in`].
    fn take_in(&self, share: Share) -> Option<Arc<dyn Step>>;
    fn as_any(&self) -> &dyn Any;
}

impl<T: DatasetOp> Step for T {
    fn kind(&self) -> &'static str {
        T::KIND
    }
    fn is_source(&self) -> bool {
        T::SOURCE
    }
    fn inputs(&self) -> Vec<&Plan> {
        DatasetOp::inputs(self)
    }
    fn schema(&self) -> Result<Schema> {
        DatasetOp::schema(self)
    }
    fn label(&self) -> String {
        DatasetOp::label(self)
    }
    fn randomness(&self) -> Randomness {
        DatasetOp::randomness(self)
    }
    fn cache_after_useful(&self) -> bool {
        DatasetOp::cache_after_useful(self)
    }
    fn options(&self) -> Option<&PipelineOptions> {
        DatasetOp::options(self)
    }
    fn transforms(&self) -> bool {
        DatasetOp::transforms(self)
    }
    fn cardinality(&self) -> Cardinality {
        DatasetOp::cardinality(self)
    }
    fn per_element(&self) -> bool {
        DatasetOp::per_element(self)
    }
    fn batch_of(&self) -> Option<(usize, bool)> {
        DatasetOp::batch_of(self)
    }
    fn iterate(
        &self,
        node: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        DatasetOp::iterate(self, node, ctx, stats, at)
    }
    fn threads(&self) -> Threads {
        DatasetOp::threads(self)
    }
    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        DatasetOp::parallelism_knob(self)
    }
    fn buffer_knob(&self) -> Option<(&'static str, i64)> {
        DatasetOp::buffer_knob(self)
    }
    fn supports_random_access(&self) -> bool {
        DatasetOp::supports_random_access(self)
    }
    fn random_access(&self, node: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        DatasetOp::random_access(self, node, ctx)
    }
    fn seeds(&self) -> Vec<Seed> {
        DatasetOp::seeds(self)
    }
    fn keeps_count(&self) -> bool {
        DatasetOp::keeps_count(self)
    }
    fn shard_move(&self) -> ShardMove {
        DatasetOp::shard_move(self)
    }
    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Value>> {
        let Some(spec) = DatasetOp::to_spec(self, ctx)? else {
            return Ok(None);
        };
        let mut v = serde_json::to_value(spec).map_err(|e| Error::Spec(e.to_string()))?;
        match v.as_object_mut() {
            Some(m) => {
                m.insert("step".into(), T::KIND.into());
            }
            None => return Err(Error::Spec(format!("{}: a spec must be a table", T::KIND))),
        }
        Ok(Some(v))
    }
    fn with_inputs(&self, inputs: Vec<Plan>) -> Arc<dyn Step> {
        let mut op = self.clone();
        for (slot, p) in op.inputs_mut().into_iter().zip(inputs) {
            *slot = p;
        }
        Arc::new(op)
    }
    fn below_shard(&self, n: u64, i: u64, input: Plan) -> Option<Arc<dyn Step>> {
        let mut op = DatasetOp::below_shard(self, n, i)?;
        for slot in op.inputs_mut() {
            *slot = input.clone();
        }
        Some(Arc::new(op))
    }
    fn take_in(&self, share: Share) -> Option<Arc<dyn Step>> {
        DatasetOp::take_in(self, share).map(|op| Arc::new(op) as Arc<dyn Step>)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The step of kind `kind` described by `fields` (its spec form without `step`), over
/// `input`: what the registry of operators answers.
pub type StepParser =
    fn(kind: &str, fields: Value, input: Option<Plan>, ctx: &SpecCtx) -> Result<Arc<dyn Step>>;

/// Where a spec lives (relative paths in it are relative to its folder), and how to read its
/// steps (the registry's parser, for steps that hold whole pipelines: zip, concatenate, ...).
#[derive(Clone, Debug, Default)]
pub struct SpecCtx {
    folder: Option<PathBuf>,
    parse: Option<StepParser>,
}

impl SpecCtx {
    /// For a spec read with `parse` from the file at `path`, if any.
    pub fn new(path: Option<&str>, parse: Option<StepParser>) -> SpecCtx {
        let folder = path.and_then(|p| Path::new(p).parent().map(Path::to_path_buf));
        SpecCtx { folder, parse }
    }

    /// A path read from the spec, as a path to open.
    pub fn load_path(&self, p: &str) -> String {
        match &self.folder {
            Some(folder) if Path::new(p).is_relative() => {
                folder.join(p).to_string_lossy().into_owned()
            }
            _ => p.to_string(),
        }
    }

    /// A path of the plan, as written into the spec: relative to the spec's folder when
    /// under it, else absolute (the plan's relative paths are relative to the working
    /// directory).
    pub fn save_path(&self, p: &str) -> String {
        let Some(folder) = &self.folder else {
            return p.to_string();
        };
        let absolute = |q: &Path| match std::env::current_dir() {
            Ok(cwd) if q.is_relative() => cwd.join(q),
            _ => q.to_path_buf(),
        };
        let path = absolute(Path::new(p));
        match path.strip_prefix(absolute(folder)) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    /// The steps of a linear pipeline, source first.
    pub fn steps_of(&self, plan: &Plan) -> Result<Vec<Value>> {
        // Walk from the sink down to the source, then reverse.
        let mut steps = Vec::new();
        let mut cur = Some(plan.clone());
        while let Some(p) = cur.take() {
            if let Some(v) = p.step().to_spec(self)? {
                steps.push(v);
            }
            // A source with inputs (zip) holds them in its spec.
            if !p.step().is_source() {
                cur = p.step().inputs().first().map(|&input| input.clone());
            }
        }
        steps.reverse();
        Ok(steps)
    }

    /// The plan of a list of steps, source first.
    pub fn plan_of(&self, steps: &[Value]) -> Result<Plan> {
        let Some(parse) = self.parse else {
            return Err(Error::Spec(
                "no registry of operators to read steps with".into(),
            ));
        };
        let mut plan: Option<Plan> = None;
        for (i, v) in steps.iter().enumerate() {
            let mut fields = v
                .as_object()
                .cloned()
                .ok_or_else(|| Error::Spec(format!("step {i}: expected a table/object")))?;
            let kind = match fields.remove("step") {
                Some(Value::String(s)) => s,
                _ => return Err(Error::Spec(format!("step {i}: missing 'step'"))),
            };
            let in_step = |e: Error| match e {
                Error::Spec(m) => Error::Spec(format!("step {i} ({kind}): {m}")),
                other => other,
            };
            let step = parse(&kind, Value::Object(fields), plan.take(), self).map_err(in_step)?;
            plan = Some(Plan::of_step(step)?);
        }
        plan.ok_or_else(|| Error::Spec("the pipeline has no steps".into()))
    }
}

/// The step of operator `T` described by `fields` (its spec form without `step`), over
/// `input`: what the registry calls for each operator.
pub fn step_from_spec<T: DatasetOp>(
    fields: Value,
    input: Option<Plan>,
    ctx: &SpecCtx,
) -> Result<Arc<dyn Step>> {
    let input = match (T::SOURCE, input) {
        (true, Some(_)) => return Err(Error::Spec("a source can only be the first step".into())),
        (false, None) => return Err(Error::Spec("needs an input step before it".into())),
        (_, input) => input,
    };
    let spec: T::Spec = serde_json::from_value(fields).map_err(|e| Error::Spec(e.to_string()))?;
    Ok(Arc::new(T::from_spec(spec, input, ctx)?))
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
                    Resources::new(),
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
