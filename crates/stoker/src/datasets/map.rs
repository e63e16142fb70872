//! `map(ops, num_parallel_calls, deterministic)`: native ops or Python functions on each
//! element, in order on the calling thread or on parallel workers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::map::{apply_chain, MapIter, OpChain, Positions};
use stoker_core::exec::parallel_map::{ParallelMap, ParallelMapConfig};
use stoker_core::exec::parallel_map_batch::{BatchConfig, ParallelMapBatch};
use stoker_core::exec::refill::Refill;
use stoker_core::exec::shuffle::ReadBuffer;
use stoker_core::exec::{BoxIter, State};
use stoker_core::op::Op;
use stoker_core::stats::Metered;
use stoker_core::{ErrorPolicy, Result, StageStats};
use stoker_ops::OpSpec;

use super::common::{check_parallelism, input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, AUTOTUNE};
use crate::random_access::RandomAccess;
use crate::tuner;

#[derive(Clone)]
pub struct Map {
    pub input: Plan,
    pub ops: Vec<Arc<dyn Op>>,
    pub num_parallel_calls: Option<i64>,
    /// Whether a parallel map keeps the input's order; `None`: the pipeline's option
    /// (`with_options(deterministic=...)`), else yes.
    pub deterministic: Option<bool>,
    /// The positions its ops see: other than the input's own where a shard was moved below
    /// it (see [`Positions`]).
    pub positions: Positions,
}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.ops.iter().map(|o| o.name()).collect();
        f.debug_struct("Map").field("ops", &names).finish()
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    ops: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num_parallel_calls: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deterministic: Option<bool>,
    /// `[stride, offset]` of the positions the ops see, when not `[1, 0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    positions: Option<[u64; 2]>,
}

impl Map {
    /// Whether a parallel run keeps the input's order: its own setting, else the pipeline's.
    pub fn keeps_order(&self, ctx: &BuildCtx) -> bool {
        self.deterministic
            .or(ctx.options.deterministic)
            .unwrap_or(true)
    }
}

impl Plan {
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
}

impl DatasetOp for Map {
    const KIND: &'static str = "map";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        check_parallelism("map", self.num_parallel_calls)?;
        let mut schema = same(&self.input);
        for op in &self.ops {
            schema = op.output_schema(&schema)?;
        }
        Ok(schema)
    }

    fn label(&self) -> String {
        let names: Vec<&str> = self.ops.iter().map(|o| o.name()).collect();
        let par = match self.num_parallel_calls {
            Some(AUTOTUNE) => " parallel=AUTOTUNE".to_string(),
            Some(n) if n > 1 => format!(" parallel={n}"),
            _ => String::new(),
        };
        let at = if self.positions.is_identity() {
            String::new()
        } else {
            let Positions { stride, offset } = self.positions;
            format!(" positions={offset}+{stride}k")
        };
        format!("map[{}]{par}{at}", names.join(", "))
    }

    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    /// Fixed when every op is; seeded when the ops that are not draw from their seeds; else
    /// an op runs code stoker cannot see into (a Python function).
    fn randomness(&self) -> Randomness {
        let drawing = self.ops.iter().filter(|op| !op.deterministic());
        let mut any = false;
        for op in drawing {
            if op.seeds().is_empty() {
                return Randomness::External;
            }
            any = true;
        }
        if any {
            Randomness::Seeded
        } else {
            Randomness::Fixed
        }
    }

    fn transforms(&self) -> bool {
        true
    }

    /// Below a shard its ops see the positions their elements had in the whole stream.
    fn below_shard(&self, n: u64, i: u64) -> Option<Self> {
        Some(Map {
            positions: self.positions.below_shard(n, i),
            ..self.clone()
        })
    }

    fn seeds(&self) -> Vec<stoker_core::Seed> {
        self.ops.iter().flat_map(|op| op.seeds()).collect()
    }

    fn keeps_count(&self) -> bool {
        true
    }

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Through
    }

    fn per_element(&self) -> bool {
        self.randomness() == Randomness::Fixed
    }

    fn threads(&self) -> crate::properties::Threads {
        crate::properties::Threads::Workers
    }

    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        Some(("num_parallel_calls", self.num_parallel_calls))
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        if self.ops.iter().any(|o| o.drops_rows()) {
            return None;
        }
        let fixed = !self.input.schema().dynamic && !self.schema().is_ok_and(|s| s.dynamic);
        fixed.then(|| self.input.step().batch_of()).flatten()
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let policy = ctx.options.on_bad_record;
        let epoch = ctx.epoch;
        // Under the skip policy a batched op that drops bad rows leaves short batches:
        // they are refilled to the batch's size, as if the rows had been skipped before it.
        let refill = match self.input.step().batch_of() {
            Some(batch)
                if policy == ErrorPolicy::Skip && self.ops.iter().any(|o| o.drops_rows()) =>
            {
                Some(batch)
            }
            _ => None,
        };
        // With a refill, the state is the refill's over the map's.
        let (refill_at, at) = match refill {
            Some(_) => (at, input_at(at, "refill", 0)?),
            None => (None, at),
        };
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let first_index = at.map(|s| s.int(Self::KIND, 0)).transpose()?.unwrap_or(0);
        let chain: OpChain = Arc::from(self.ops.clone());
        let (workers, knob) =
            tuner::parallelism(ctx, &stats, "num_parallel_calls", self.num_parallel_calls);
        let map: BoxIter = if self.num_parallel_calls.is_some() && (workers > 1 || knob.is_some()) {
            let mut config = parallel_config(ctx, workers, self.keeps_order(ctx), policy);
            config.first_index = first_index;
            config.first_skipped = at.map_or(0, |s| s.skipped);
            config.positions = self.positions;
            config.knob = knob;
            Box::new(ParallelMap::spawn(inner, chain, config, stats)?)
        } else {
            let mut it = MapIter::new(
                inner,
                chain,
                policy,
                Arc::clone(&stats),
                epoch,
                Arc::clone(&ctx.seeds),
            )
            .with_positions(self.positions);
            if let Some(s) = at {
                it = it.restore(s)?;
            }
            Metered::wrap(Box::new(it), stats)
        };
        Ok(match (refill, refill_at) {
            (Some((size, drop)), None) => Box::new(Refill::new(map, size, drop)),
            (Some((size, drop)), Some(s)) => Box::new(Refill::restore(map, size, drop, s)?),
            (None, _) => map,
        })
    }

    /// Over an input with random access, as each element is mapped on its own.
    fn supports_random_access(&self) -> bool {
        self.input.step().supports_random_access()
    }

    fn random_access(&self, node: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        let Some(input) = self.input.step().random_access(&self.input, ctx)? else {
            return Ok(None);
        };
        Ok(Some(Box::new(MapAccess {
            input: Arc::from(input),
            ops: Arc::from(self.ops.clone()),
            epoch: ctx.epoch,
            stats: crate::plan::stage_stats(node, ctx),
            seeds: Arc::clone(&ctx.seeds),
            policy: ctx.options.on_bad_record,
            positions: self.positions,
        })))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            ops: self.ops.iter().map(|o| o.spec()).collect::<Result<_>>()?,
            num_parallel_calls: self.num_parallel_calls,
            deterministic: self.deterministic,
            positions: (!self.positions.is_identity())
                .then_some([self.positions.stride, self.positions.offset]),
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        let ops = s
            .ops
            .iter()
            .map(|o| OpSpec::from_json(o).and_then(OpSpec::build))
            .collect::<Result<Vec<_>>>()?;
        Ok(Map {
            input: super::common::input_of(input)?,
            ops,
            num_parallel_calls: s.num_parallel_calls,
            deterministic: s.deterministic,
            positions: s
                .positions
                .map_or_else(Positions::default, |[stride, offset]| Positions {
                    stride,
                    offset,
                }),
        })
    }
}

/// How a parallel map runs: `workers` threads, two elements in flight per worker.
fn parallel_config(
    ctx: &BuildCtx,
    workers: usize,
    deterministic: bool,
    policy: ErrorPolicy,
) -> ParallelMapConfig {
    ParallelMapConfig {
        epoch: ctx.epoch,
        workers,
        buffer: 2 * workers,
        deterministic,
        policy,
        first_index: 0,
        first_skipped: 0,
        seeds: Arc::clone(&ctx.seeds),
        positions: Positions::default(),
        knob: None,
        // With the tuner on, what it runs ahead is in the RAM budget.
        ram: ctx
            .options
            .autotune
            .unwrap_or(true)
            .then(|| ctx.resources.ram(&ctx.options)),
    }
}

/// A parallel `map` right before a `batch`, run as one stage whose workers write each element
/// into its batch row (where the planner fused them: see `planner::map_and_batch`).
pub(crate) fn map_and_batch(
    map_plan: &Plan,
    batch_size: usize,
    drop_remainder: bool,
    batch_stats: &Arc<StageStats>,
    ctx: &BuildCtx,
    at: Option<&State>,
) -> Result<BoxIter> {
    let Some(map) = map_plan.op::<Map>() else {
        return Err(stoker_core::Error::Internal(format!(
            "a batch fused with the map before it is over {}",
            map_plan.label()
        )));
    };
    let policy = ctx.options.on_bad_record;
    let map_stats = ctx.stats.stage(map_plan.id(), &map_plan.label(), Map::KIND);
    let (workers, knob) = tuner::parallelism(
        ctx,
        &map_stats,
        "num_parallel_calls",
        map.num_parallel_calls,
    );
    // The state of a batch over this map, as the fused stage reports it too.
    let map_at = input_at(at, "batch", 0)?;
    let inner = iterate_at(&map.input, ctx, input_at(map_at, Map::KIND, 0)?)?;
    let mut config = parallel_config(ctx, workers, map.keeps_order(ctx), policy);
    config.first_index = map_at
        .map(|s| s.int(Map::KIND, 0))
        .transpose()?
        .unwrap_or(0);
    config.positions = map.positions;
    config.knob = knob;
    let batch = BatchConfig {
        size: batch_size,
        drop_remainder,
        rows: map_plan.schema().clone(),
    };
    Ok(Box::new(ParallelMapBatch::spawn(
        inner,
        Arc::from(map.ops.clone()),
        config,
        batch,
        map_stats,
        Arc::clone(batch_stats),
    )?))
}

/// Random access through a map: the input's element at a position, mapped as the map would
/// map it there (random ops draw from the position and the epoch).
struct MapAccess {
    input: Arc<dyn RandomAccess>,
    ops: OpChain,
    epoch: u64,
    stats: Arc<StageStats>,
    seeds: Arc<stoker_core::Seeds>,
    /// Under the skip policy an op may drop an element (`get_or_skip` says where).
    policy: ErrorPolicy,
    positions: Positions,
}

impl RandomAccess for MapAccess {
    fn count(&self) -> Result<u64> {
        self.input.count()
    }

    fn prepare(&self, upto: u64) -> Result<()> {
        self.input.prepare(upto)
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        let elements = self.input.get(positions)?;
        self.apply(elements, positions.iter().copied())
    }

    fn get_or_skip(&self, positions: &[u64], count: bool) -> Result<Vec<Option<Element>>> {
        let elements = self.input.get_or_skip(positions, count)?;
        // What was counted already is counted into counters of no stage.
        let uncounted = (!count).then(|| StageStats::new("uncounted", "map"));
        let stats = uncounted.as_ref().unwrap_or(&self.stats);
        elements
            .into_iter()
            .zip(positions)
            .map(|(e, &p)| match e {
                Some(e) => self.apply_one(e, p, self.policy, stats),
                None => Ok(None),
            })
            .collect()
    }

    fn may_skip(&self) -> bool {
        self.policy == ErrorPolicy::Skip || self.input.may_skip()
    }

    fn count_unplaced_losses(&self) -> u64 {
        self.input.count_unplaced_losses()
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        Ok(State::new(vec![upto], vec![self.input.state_at(upto)?]))
    }

    fn reader_and_state_at(
        self: Arc<Self>,
        positions: Vec<u64>,
        upto: u64,
    ) -> Result<(ReadBuffer, State)> {
        let (mut read, at) =
            Arc::clone(&self.input).reader_and_state_at(positions.clone(), upto)?;
        let state = State::new(vec![upto], vec![at]);
        let reader: ReadBuffer = Box::new(move |which: &[usize]| {
            let elements = read(which)?;
            self.apply(elements, which.iter().map(|&k| positions[k]))
        });
        Ok((reader, state))
    }
}

impl MapAccess {
    /// `elements`, the input's at `positions`, mapped.
    fn apply(
        &self,
        elements: Vec<Element>,
        positions: impl Iterator<Item = u64>,
    ) -> Result<Vec<Element>> {
        elements
            .into_iter()
            .zip(positions)
            .map(|(e, p)| {
                self.apply_one(e, p, ErrorPolicy::Raise, &self.stats)?
                    .ok_or_else(|| {
                        stoker_core::Error::internal(
                            "an op dropped an element under the raise policy",
                        )
                    })
            })
            .collect()
    }

    /// The element `e`, at position `p`, mapped under `policy` (`None`: an op skipped it),
    /// what it finds counted in `stats`.
    fn apply_one(
        &self,
        e: Element,
        p: u64,
        policy: ErrorPolicy,
        stats: &StageStats,
    ) -> Result<Option<Element>> {
        let (e, _) = apply_chain(
            &self.ops,
            e,
            policy,
            stats,
            (self.positions.at(p), self.epoch),
            None,
            &self.seeds,
        )?;
        Ok(e)
    }
}
