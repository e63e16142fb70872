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
//! Where a shard stops, `explain()` says why; [`Placed::warning`] says so when the steps it
//! stops above do work each rank repeats.

use stoker_core::{Error, ErrorPolicy, Result};

use crate::datasets::map::Map;
use crate::datasets::shard::Shard;
use crate::datasets::{Cardinality, DatasetOp, ShardMove};
use crate::plan::{Plan, Step};

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
        if matches!(
            p.step(),
            Step::Map(_) | Step::Filter(_) | Step::Interleave(_) | Step::Scan(_)
        ) {
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
    let mut passed: Vec<Step> = Vec::new();
    let mut limit = shard.limit;
    // Whether a batch was passed: the maps above it see batches, not elements.
    let mut regrouped_at: Option<usize> = None;
    let mut random_above = false;
    let mut at = shard.input.clone();
    let stopped = loop {
        if policy == ErrorPolicy::Skip {
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
            ShardMove::Prefix(count) => limit = Some(limit.map_or(count, |l| l.min(count))),
            ShardMove::TakesIn => {
                let Step::GlobalShuffle(gs) = step else {
                    break Some((at.label(), "it cannot take a shard in".to_string()));
                };
                let moved = shard.over(at.clone(), limit);
                let taken = Plan::new(gs.taking(moved.share()))?;
                return finish(taken, passed, regrouped_at, (n, i), None, None);
            }
            ShardMove::Stops(why) => break Some((at.label(), why)),
        }
        random_above |= !step.seeds().is_empty();
        let below = step.inputs()[0].clone();
        passed.push(step.clone());
        at = below;
    };
    let moved = Plan::new(shard.over(at.clone(), limit))?;
    finish(moved, passed, regrouped_at, (n, i), stopped, Some(at))
}

/// The steps passed, rebuilt over `bottom` (the shard or the step that took it in).
fn finish(
    bottom: Plan,
    passed: Vec<Step>,
    regrouped_at: Option<usize>,
    (n, i): (u64, u64),
    stopped: Option<(String, String)>,
    below: Option<Plan>,
) -> Result<Placed> {
    let labels = passed.iter().map(|s| s.label()).collect();
    let mut plan = bottom;
    for (k, step) in passed.into_iter().enumerate().rev() {
        let step = match step {
            // Maps below a regrouping batch see elements: the positions they had.
            Step::Map(m) if regrouped_at.is_none_or(|r| k > r) => Step::Map(Map {
                input: plan,
                positions: m.positions.below_shard(n, i),
                ..m
            }),
            other => other.with_inputs(vec![plan]),
        };
        plan = Plan::new(step)?;
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
    if !super::enabled(&options, super::SHARD_DOWN) {
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
        if let Step::Shard(s) = p.step() {
            lowest = s.clone();
        }
        stack.extend(p.step().inputs().into_iter().cloned());
    }
    Err(unknown_count(&lowest))
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
