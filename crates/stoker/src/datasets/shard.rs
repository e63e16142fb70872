//! `shard(num_shards, index)`: every `num_shards`-th element, from the `index`-th.
//!
//! A rank's share of a data-parallel job (`by_rank`, what the framework adapters make) is
//! the same, except that every rank gets as many elements: the input's last
//! `count % num_shards` are dropped. The planner moves a shard towards the source, where the
//! elements the other ranks keep are not made at all (see [`place`] below).
//!
//! ## Where a shard goes (the planner's `shard_down` pass)
//!
//! `shard_down`: a `shard` moves towards the source, so that each shard makes only its own
//! elements instead of making every element and keeping every n-th.
//!
//! Each step says how a shard right above it can move ([`ShardMove`]): through a step that
//! makes output element `k` of input element `k` (a prefetch, a map), below a `take`
//! (sharing out its prefix), into a `global_shuffle` (which then reads only the share's
//! positions of its permutation). A map the shard moved below sees, as its elements'
//! positions, those they had in the whole stream, so its random ops give each element the
//! same result whatever the number of shards.
//!
//! A user's `shard(n, i)` moves only where its elements stay exactly the same. A rank's
//! share (`by_rank`, what the framework adapters make for a data-parallel job) also moves
//! below a `batch`, where each rank then batches its own share: the same elements, grouped
//! otherwise, as with `DistributedSampler`. It keeps to the elements' own positions: it does
//! not move below a batch with random ops after it. Every rank gets as many elements: the
//! last `count % n` of the step it stops above are left out.
//!
//! A share that may be short (`uneven`, what `stoker.ray` gives each actor) moves as a rank's
//! share does, below a `batch` too, but leaves no element out: the shares of `count` elements
//! differ by at most one, and each share's last batch may be short. It needs no count.
//!
//! Where a shard stops, `explain()` says why; [`Placed::warning`] says so when the steps it
//! stops above do work each rank repeats.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::shard::ShardIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::{Metered, WaitMeter};
use stoker_core::{Error, ErrorPolicy, Result, StageStats};

use super::common::{input_at, same};
use crate::build::BuildCtx;
use crate::plan::{iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness, ShardMove, Share};

#[derive(Clone, Debug)]
pub struct Shard {
    pub input: Plan,
    pub num_shards: u64,
    pub index: u64,
    /// A rank's share: every rank as many elements, and the planner may regroup batches
    /// (each rank batches its own share, as with `DistributedSampler`).
    pub by_rank: bool,
    /// With `by_rank`: no element left out, the shares differing by at most one (and each
    /// share's last batch may be short).
    pub uneven: bool,
    /// Only the input's first `limit` elements are shared out (set by the planner where it
    /// moved the shard below a `take`).
    pub limit: Option<u64>,
    /// The number of its input's elements, counted once where the plan does not know it.
    counted: Arc<std::sync::OnceLock<Cardinality>>,
    /// Whether the planner put it where it is: its count is then where it is.
    placed: bool,
}

impl Shard {
    /// Its share, for a step that takes it.
    pub fn share(&self) -> Share {
        Share {
            num_shards: self.num_shards,
            index: self.index,
            equal: self.equal(),
            limit: self.limit,
        }
    }

    /// Whether every shard gets as many elements (the remainder left out).
    fn equal(&self) -> bool {
        self.by_rank && !self.uneven
    }

    /// `self` as a share that may be short (see [`Shard::uneven`]).
    pub fn uneven(self) -> Shard {
        Shard {
            uneven: true,
            ..self
        }
    }

    pub fn new(input: Plan, num_shards: u64, index: u64, by_rank: bool) -> Shard {
        Shard {
            input,
            num_shards,
            index,
            by_rank,
            uneven: false,
            limit: None,
            counted: Arc::default(),
            placed: false,
        }
    }

    /// The same shard of the first `limit` elements of another input.
    pub fn over(&self, input: Plan, limit: Option<u64>) -> Shard {
        Shard {
            limit,
            placed: true,
            uneven: self.uneven,
            ..Shard::new(input, self.num_shards, self.index, self.by_rank)
        }
    }

    /// The input elements shared out: the first `limit`, and for a rank's share, a multiple
    /// of `num_shards` of them (`Unknown` when that needs a count the plan does not know).
    pub fn shared(&self) -> Cardinality {
        let n = self.num_shards.max(1);
        // An equal share needs the count: where the plan does not know it, it is counted.
        let count = if self.equal() {
            *self
                .counted
                .get_or_init(|| crate::plan::counted(&self.input))
        } else {
            self.input.step().cardinality()
        };
        let input = match (count, self.limit) {
            (Cardinality::Finite(m), Some(l)) => Cardinality::Finite(m.min(l)),
            (Cardinality::Infinite, Some(l)) => Cardinality::Finite(l),
            (c, _) => c,
        };
        if self.equal() {
            input.map(|m| m - m % n)
        } else {
            input
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    num_shards: u64,
    index: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    by_rank: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    uneven: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    limit: Option<u64>,
}

impl DatasetOp for Shard {
    const KIND: &'static str = "shard";
    type Spec = Spec;

    one_input!();

    fn schema(&self) -> Result<Schema> {
        let (n, i) = (self.num_shards, self.index);
        if n == 0 || i >= n {
            return Err(Error::schema(
                Self::KIND,
                format!("index {i} must be in 0..num_shards ({n})"),
            ));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        if self.uneven {
            format!("{} by worker", self.share().label())
        } else {
            self.share().label()
        }
    }

    fn cardinality(&self) -> Cardinality {
        if self.by_rank && !self.placed {
            // Where the planner places a rank's share decides how its batches are made.
            if let Ok(placed) = place_rank_share(self) {
                if placed
                    .op::<Shard>()
                    .is_none_or(|s| s.input.id() != self.input.id())
                {
                    return placed.step().cardinality();
                }
            }
        }
        let (n, i) = (self.num_shards.max(1), self.index);
        self.shared().map(|m| m / n + u64::from(i < m % n))
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    /// A cache belongs below a share, where it holds the elements every share reads.
    fn cache_after_useful(&self) -> bool {
        false
    }

    fn batch_of(&self) -> Option<(usize, bool)> {
        self.input.step().batch_of()
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let inner = iterate_at(&self.input, ctx, input_at(at, Self::KIND, 0)?)?;
        let inner = WaitMeter::wrap(inner, Arc::clone(&stats));
        let limit = match (self.equal(), self.shared()) {
            (false, _) => self.limit,
            (true, Cardinality::Finite(m)) => Some(m),
            (true, Cardinality::Infinite) => None,
            (true, Cardinality::Unknown) => return Err(unknown_count(self)),
        };
        let mut it = ShardIter::new(inner, self.num_shards, self.index).with_limit(limit);
        if let Some(s) = at {
            it = it.restore(s)?;
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            num_shards: self.num_shards,
            index: self.index,
            by_rank: self.by_rank,
            uneven: self.uneven,
            limit: self.limit,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Shard {
            limit: s.limit,
            uneven: s.uneven,
            ..Shard::new(
                super::common::input_of(input)?,
                s.num_shards,
                s.index,
                s.by_rank,
            )
        })
    }
}

/// Where a shard went.
pub struct Placed {
    /// The plan with the shard moved.
    pub plan: Plan,
    /// The steps it moved below, top first.
    pub passed: Vec<String>,
    /// The step it stopped above, and why (`None`: a step took it in).
    pub stopped: Option<(String, String)>,
    /// What it stopped above: every shard runs it whole.
    below: Option<Plan>,
}

impl Placed {
    /// What `explain()` says about it.
    pub fn note(&self, shard: &Shard) -> String {
        let mut out = shard.label();
        if self.passed.is_empty() {
            out.push_str(" stays where it is");
        } else {
            out.push_str(&format!(" moved below {}", self.passed.join(", ")));
        }
        match &self.stopped {
            Some((step, why)) => out.push_str(&format!("; it stops above {step}: {why}")),
            None => out.push_str("; the step it went into makes only its share"),
        }
        out
    }

    /// A warning for a shard that stops above steps doing work every shard repeats (maps,
    /// filters, interleaves), with what the user can change; `None` otherwise.
    pub fn warning(&self, shard: &Shard) -> Option<String> {
        let (step, why) = self.stopped.as_ref()?;
        let work = repeated_work(self.below.as_ref()?);
        if work.is_empty() {
            return None;
        }
        Some(format!(
            "{}: every shard runs {} for every element and keeps its share after it, as the \
             shard stops above {step}: {why}. To make only its share, put the work after that \
             step, or use global_shuffle over an indexed source instead of a shuffle buffer",
            shard.label(),
            work.join(", ")
        ))
    }
}

/// The steps of `plan` that transform elements (not sources, buffers or batches).
fn repeated_work(plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![plan.clone()];
    while let Some(p) = stack.pop() {
        if p.step().transforms() {
            out.push(p.label());
        }
        stack.extend(p.step().inputs().into_iter().cloned());
    }
    out
}

/// `shard` (over its input, rewritten already) moved as far down as the result allows.
pub fn place(shard: &Shard, policy: ErrorPolicy) -> Result<Placed> {
    let by_rank = shard.by_rank;
    let (n, i) = (shard.num_shards, shard.index);
    let mut passed: Vec<Arc<dyn crate::plan::Step>> = Vec::new();
    let mut limit = shard.limit;
    // Whether a batch was passed: the maps above it see batches, not elements.
    let mut regrouped_at: Option<usize> = None;
    let mut random_above = false;
    let mut at = shard.input.clone();
    let stopped = loop {
        // A share that may be short keeps every element of its level: below a step that
        // drops some, the shares still hold each element once.
        if policy == ErrorPolicy::Skip && !shard.uneven {
            break Some((
                at.label(),
                "under on_bad_record=skip a step may drop elements, and a share below it \
                 would differ from the share of its output"
                    .to_string(),
            ));
        }
        let step = at.step();
        match step.shard_move() {
            ShardMove::Through => {}
            ShardMove::Regroups if !by_rank => {
                break Some((
                    at.label(),
                    "below it the batches would be made of other elements; a rank's share \
                     (shard='auto' of the framework adapters) regroups them"
                        .to_string(),
                ))
            }
            ShardMove::Regroups if limit.is_some() => {
                break Some((
                    at.label(),
                    "a take after it counts batches, which below it would be other batches"
                        .to_string(),
                ))
            }
            ShardMove::Regroups if random_above => {
                break Some((
                    at.label(),
                    "steps after it draw random numbers per batch, and would draw them for \
                     other batches"
                        .to_string(),
                ))
            }
            ShardMove::Regroups => regrouped_at = Some(passed.len()),
            ShardMove::Prefix(_) if policy == ErrorPolicy::Skip => {
                break Some((
                    at.label(),
                    "under on_bad_record=skip it counts the elements left once bad ones are \
                     dropped, and below it a share would count others"
                        .to_string(),
                ))
            }
            ShardMove::Prefix(count) => limit = Some(limit.map_or(count, |l| l.min(count))),
            ShardMove::TakesIn => {
                let moved = shard.over(at.clone(), limit);
                let Some(taking) = step.take_in(moved.share()) else {
                    break Some((at.label(), "it cannot take a shard in".to_string()));
                };
                let taken = Plan::of_step(taking)?;
                return finish(taken, passed, regrouped_at, (n, i), None, None);
            }
            ShardMove::Stops(why) => break Some((at.label(), why)),
        }
        random_above |= !step.seeds().is_empty();
        let below = step.inputs()[0].clone();
        passed.push(at.step_arc());
        at = below;
    };
    let moved = Plan::new(shard.over(at.clone(), limit))?;
    finish(moved, passed, regrouped_at, (n, i), stopped, Some(at))
}

/// The steps passed, rebuilt over `bottom` (the shard or the step that took it in).
fn finish(
    bottom: Plan,
    passed: Vec<Arc<dyn crate::plan::Step>>,
    regrouped_at: Option<usize>,
    (n, i): (u64, u64),
    stopped: Option<(String, String)>,
    below: Option<Plan>,
) -> Result<Placed> {
    let labels = passed.iter().map(|s| s.label()).collect();
    let mut plan = bottom;
    for (k, step) in passed.into_iter().enumerate().rev() {
        // Steps below a regrouping batch see elements: a map sees the positions they had.
        let below = regrouped_at.is_none_or(|r| k > r);
        let step = match below
            .then(|| step.below_shard(n, i, plan.clone()))
            .flatten()
        {
            Some(step) => step,
            None => step.with_inputs(vec![plan]),
        };
        plan = Plan::of_step(step)?;
    }
    Ok(Placed {
        plan,
        passed: labels,
        stopped,
        below,
    })
}

/// Where the planner puts a rank's share (`shard` is one): what it computes, for its
/// cardinality.
pub fn place_rank_share(shard: &Shard) -> Result<Plan> {
    let options = shard.input.options();
    if !crate::passes::enabled(&options, crate::passes::SHARD_DOWN) {
        return Plan::new(shard.clone());
    }
    Ok(place(shard, options.on_bad_record)?.plan)
}

/// That a rank's share can give every rank as many elements where the planner puts it: it
/// needs the number of elements there (or an endless stream).
pub fn check_rank_share(shard: &Shard) -> Result<()> {
    let placed = place_rank_share(shard)?;
    if placed.step().cardinality() != Cardinality::Unknown {
        return Ok(());
    }
    let mut lowest = shard.clone();
    let mut stack = vec![placed];
    while let Some(p) = stack.pop() {
        if let Some(s) = p.op::<Shard>() {
            lowest = s.clone();
        }
        stack.extend(p.step().inputs().into_iter().cloned());
    }
    Err(unknown_count(&lowest))
}

/// The rows one pass of `plan` hands out, where it ends in a batch (the steps after it, a
/// shard of its batches among them, keep the rows: the caller knows that of its own steps)
/// and the number of elements batched is known; `None` otherwise.
pub fn rows_per_pass(plan: &Plan) -> Option<u64> {
    let (batches, full, last) = batches_of(plan)?;
    Some(match last {
        0 => batches * full,
        l => (batches - 1) * full + l,
    })
}

/// A pass's batches: how many, the rows of a whole one, and those of its short last (0: none).
fn batches_of(plan: &Plan) -> Option<(u64, u64, u64)> {
    let step = plan.step();
    if let Some((size, drop_remainder)) = regrouping(plan) {
        let Cardinality::Finite(n) = step.inputs()[0].step().cardinality() else {
            return None;
        };
        let size = size as u64;
        let last = if drop_remainder { 0 } else { n % size };
        return Some((n / size + u64::from(last > 0), size, last));
    }
    let inputs = step.inputs();
    let [input] = inputs.as_slice() else {
        return None;
    };
    let (count, full, last) = batches_of(input)?;
    let Some(shard) = plan.op::<Shard>() else {
        // Where every batch is whole, any number of them; a short one stays last only
        // through steps that keep the order (a prefix of it keeps whole ones).
        return match (step.cardinality(), step.shard_move()) {
            (Cardinality::Finite(c), _) if last == 0 => Some((c, full, 0)),
            (Cardinality::Finite(c), ShardMove::Through) if c == count => Some((count, full, last)),
            (Cardinality::Finite(c), ShardMove::Prefix(_)) if c < count => Some((c, full, 0)),
            (Cardinality::Finite(c), ShardMove::Prefix(_)) if c == count => Some((c, full, last)),
            _ => None,
        };
    };
    let share = shard.share();
    let kept = share.count(count);
    // The input's short last batch is in the share where it is the share's last.
    let shared = share.limit.map_or(count, |l| l.min(count));
    let short_kept =
        last > 0 && shared == count && kept > 0 && share.position(kept - 1) == count - 1;
    Some((kept, full, if short_kept { last } else { 0 }))
}

/// A step that makes batches of its input's elements: its batch size and whether it drops a
/// short last batch.
fn regrouping(plan: &Plan) -> Option<(usize, bool)> {
    if let Some(b) = plan.op::<super::batch::Batch>() {
        return Some((b.batch_size, b.drop_remainder));
    }
    plan.op::<super::padded_batch::PaddedBatch>()
        .map(|b| (b.batch_size, b.drop_remainder))
}

/// The error for a rank's share over an input of unknown length.
pub fn unknown_count(shard: &Shard) -> Error {
    Error::invalid(
        "shard",
        format!(
            "{}: every rank must get as many elements, which needs the cardinality (number of \
             elements) of {}, and the pipeline does not know it (a filter, or a Python \
             function that may drop elements, is before it); fix the number of batches per \
             epoch with .repeat().take(n)",
            shard.label(),
            shard.input.label()
        ),
    )
}
