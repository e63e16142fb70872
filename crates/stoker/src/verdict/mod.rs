//! The bottleneck verdict: from a run's per-stage counters, which stage limits the pipeline's
//! throughput, and what to change, with the predicted gain and the evidence for each advice.
//!
//! The model: stages run on thread groups. Synchronous stages run on the thread that pulls
//! them (the driver, a prefetch thread or a parallel map's feeder); a parallel map (with the
//! batch fused into it) or a parallel reader is a group of its own workers. A group's
//! utilisation is its stages' busy time over the run's wall time times its threads; the most
//! utilised group limits throughput. A change is scored by recomputing the utilisations with
//! the change applied: the predicted speed-up is how far the most utilised group (or the CPU
//! budget, or the GIL for Python functions) lets throughput rise, after against before.

//!
//! The advice is a table of rules ([`rules`]), each a small function of the run's model.

use std::collections::HashMap;

use stoker_core::stats::StageSnapshot;

use crate::plan::Plan;

mod model;
mod rules;
mod types;

pub use types::{OpCost, Recommendation, StageCost, ThreadGroup, Verdict, MIN_JUDGED_S};

/// A thread group busier than this share of the run is taken as the limit.
const SATURATED: f64 = 0.6;

/// Advice predicted to gain less than this (percent) is left out.
const MIN_GAIN_PERCENT: f64 = 5.0;

/// The verdict on a run of `plan` (the optimised plan the pipeline ran) that took `wall_s`
/// seconds, from its stages' counters (`snaps`, by plan id) and the time of each op inside
/// maps (`ops`: name, calls, seconds; empty when not measured). `written` is the pipeline as
/// the user wrote it, before the planner's rewrites: advice on where to put a stage names a
/// stage of it.
pub fn diagnose(
    plan: &Plan,
    written: &Plan,
    snaps: &HashMap<u64, StageSnapshot>,
    wall_s: f64,
    budget: usize,
    ops: &[(String, u64, f64)],
) -> Verdict {
    let f = model::Facts::new(plan, written, snaps, wall_s, budget, ops);
    let mut recs: Vec<Recommendation> = rules::RULES.iter().filter_map(|rule| rule(&f)).collect();
    // Advice with a prediction too small to matter goes (a prediction of `None` stays).
    recs.retain(|r| {
        r.predicted_gain_percent
            .is_none_or(|g| g >= MIN_GAIN_PERCENT)
    });
    recs.sort_by(|a, b| {
        b.predicted_gain_percent
            .unwrap_or(-1.0)
            .total_cmp(&a.predicted_gain_percent.unwrap_or(-1.0))
    });
    let (wall, python_total) = (f.wall, f.python_total);
    let summary = summary(&f);
    Verdict {
        wall_s,
        threads: budget,
        bottleneck: f.bottleneck.map(|i| f.model.nodes[i].snap.name.clone()),
        cpu_utilisation: cpu_utilisation(&f),
        stages: f.stages,
        ops: f.ops,
        groups: f.groups,
        gil_utilisation: python_total / wall,
        summary,
        recommendations: recs,
    }
}

/// Share of the CPU budget the pipeline used. Time a Python function waited with the GIL
/// released kept its thread, not a CPU.
fn cpu_utilisation(f: &model::Facts<'_>) -> f64 {
    let python_waits: f64 = (f.model.nodes.iter())
        .map(|n| (n.snap.python_s - n.snap.python_cpu_s).max(0.0))
        .sum();
    (f.total_busy - python_waits).max(0.0) / (f.wall * f.budget.max(1) as f64)
}

/// The verdict's first line: what limits throughput, and how much of the budget was used.
fn summary(f: &model::Facts<'_>) -> String {
    let bottleneck = f.bottleneck.map(|i| f.model.nodes[i].snap.name.clone());
    let (groups, budget, wall, python_total) = (&f.groups, f.budget, f.wall, f.python_total);
    let cpu_utilisation = cpu_utilisation(f);
    match (&bottleneck, f.top_group) {
        (Some(b), Some(g)) if groups[g].utilisation < SATURATED => format!(
            "no stage is saturated (the busiest, '{b}', kept its {} thread(s) {:.0} % busy): \
             throughput is limited by hand-overs between stages or by the consumer; the \
             pipeline used {:.0} % of its {budget}-thread CPU budget",
            groups[g].threads,
            groups[g].utilisation * 100.0,
            cpu_utilisation * 100.0,
        ),
        (Some(b), Some(g)) => format!(
            "'{b}' limits throughput: its {} thread(s) were {:.0} % busy; the pipeline used \
             {:.0} % of its {budget}-thread CPU budget{}",
            groups[g].threads,
            groups[g].utilisation * 100.0,
            cpu_utilisation * 100.0,
            if python_total > 0.0 {
                format!(
                    ", and Python held the GIL {:.0} % of the run",
                    python_total / wall * 100.0
                )
            } else {
                String::new()
            }
        ),
        _ => "no stage did measurable work".into(),
    }
}
