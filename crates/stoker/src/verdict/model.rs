//! The model the verdict reasons on: the stages of a run on their thread groups, with what
//! each cost, and what a change would make of the throughput ([`headroom`]).

use std::collections::HashMap;

use stoker_core::op::Work;
use stoker_core::stats::StageSnapshot;

use super::types::{OpCost, StageCost, ThreadGroup};
use crate::datasets::{batch::Batch, map::Map, options::WithOptions, padded_batch::PaddedBatch};
use crate::plan::Plan;
use crate::properties::Threads;

/// Stages of `plan` as run, with what the verdict needs to know about each.
pub(super) struct Node<'a> {
    pub plan: &'a Plan,
    pub snap: StageSnapshot,
    pub group: usize,
}

pub(super) struct Model<'a> {
    pub nodes: Vec<Node<'a>>,
    /// Threads of each group and its label.
    pub groups: Vec<(usize, String)>,
}

impl<'a> Model<'a> {
    pub(super) fn new_group(&mut self, threads: usize, label: String) -> usize {
        self.groups.push((threads.max(1), label));
        self.groups.len() - 1
    }

    /// Assigns `plan` and its inputs to thread groups; `group` runs `plan`.
    pub(super) fn walk(
        &mut self,
        plan: &'a Plan,
        group: usize,
        snaps: &HashMap<u64, StageSnapshot>,
    ) {
        let snap = snaps.get(&plan.id()).cloned();
        let workers = snap.as_ref().map_or(0, |s| s.workers as usize);
        let mut own_group = group;
        let mut input_group = group;
        match (plan.step().threads(), workers > 1) {
            (Threads::FeedsInputOnOwnThread, _) => {
                input_group = self.new_group(1, format!("thread feeding {}", plan.label()));
            }
            // A batch written by the workers of the parallel map before it.
            (Threads::RowsByInputWorkers, true) => {
                if let Some(input) = plan.step().inputs().into_iter().next() {
                    self.walk_fused(plan, input, workers, snap, snaps);
                }
                return;
            }
            (Threads::Workers, true) => {
                own_group = self.new_group(workers, format!("{} workers", plan.label()));
                input_group = self.new_group(1, format!("thread feeding {}", plan.label()));
            }
            (Threads::Caller, _)
            | (Threads::Workers, false)
            | (Threads::RowsByInputWorkers, false) => {}
        }
        if let Some(s) = snap {
            self.nodes.push(Node {
                plan,
                snap: s,
                group: own_group,
            });
        }
        for i in plan.step().inputs() {
            self.walk(i, input_group, snaps);
        }
    }

    /// A batch (`plan`) whose rows the workers of the parallel map `input` write.
    fn walk_fused(
        &mut self,
        plan: &'a Plan,
        input: &'a Plan,
        workers: usize,
        snap: Option<StageSnapshot>,
        snaps: &HashMap<u64, StageSnapshot>,
    ) {
        let own_group = self.new_group(workers, format!("{} workers", input.label()));
        if let Some(s) = snap {
            self.nodes.push(Node {
                plan,
                snap: s,
                group: own_group,
            });
        }
        if let Some(s) = snaps.get(&input.id()).cloned() {
            self.nodes.push(Node {
                plan: input,
                snap: s,
                group: own_group,
            });
        }
        let feeder = self.new_group(1, format!("thread feeding {}", input.label()));
        for i in input.step().inputs() {
            self.walk(i, feeder, snaps);
        }
    }
}

/// A thread-count-independent view of a stage's parallelism knob (each step declares it).
pub(super) fn parallelism_knob(plan: &Plan) -> Option<(&'static str, Option<i64>)> {
    plan.step().parallelism_knob()
}

/// True when the stage gives the same elements in the same order every epoch, so that its
/// output can be cached: no random op, no Python function, no shuffle in it or below it (each
/// step declares what it draws on).
pub(super) fn deterministic(plan: &Plan) -> bool {
    plan.safe_to_cache_after()
}

/// Bytes of one element of `plan`'s output, when its schema fixes them.
pub(super) fn element_bytes(plan: &Plan) -> Option<usize> {
    let schema = plan.schema();
    if schema.dynamic {
        return None;
    }
    // A batch's first dimension is unknown when the last batch may be short: count full ones.
    let rows = batch_rows(plan);
    let mut total = 0;
    for f in &schema.fields {
        let mut n = 1;
        for (i, d) in f.shape.iter().enumerate() {
            n *= match (d, rows) {
                (Some(d), _) => *d,
                (None, Some(rows)) if i == 0 => rows,
                (None, _) => return None,
            };
        }
        total += n * f.dtype.size()?;
    }
    Some(total)
}

/// The batch size of a batch, or of an element-wise map over one (the planner moves such ops
/// after the batch).
pub(super) fn batch_rows(plan: &Plan) -> Option<usize> {
    if let Some(b) = plan.op::<Batch>() {
        return Some(b.batch_size);
    }
    if let Some(b) = plan.op::<PaddedBatch>() {
        return Some(b.batch_size);
    }
    let m = plan.op::<Map>()?;
    if m.ops.iter().all(|o| o.elementwise()) {
        batch_rows(&m.input)
    } else {
        None
    }
}

/// Predicted gain in percent; `None` when the change removes all the measured work (no
/// finite prediction).
pub(super) fn gain(after: f64, before: f64) -> Option<f64> {
    let g = (after / before - 1.0) * 100.0;
    g.is_finite().then_some(g)
}

/// How many times faster the pipeline could go before some thread group or the CPU budget is
/// saturated, given each stage's busy time, the group it runs on and each group's threads.
pub(super) fn headroom(
    busy: &[f64],
    group_of: &[usize],
    threads: &[usize],
    wall: f64,
    budget: usize,
) -> f64 {
    let mut per_group = vec![0.0; threads.len()];
    let mut total = 0.0;
    for (i, b) in busy.iter().enumerate() {
        per_group[group_of[i]] += b;
        total += b;
    }
    let mut f = f64::INFINITY;
    for (b, t) in per_group.iter().zip(threads) {
        if *b > 0.0 {
            f = f.min(wall * *t as f64 / b);
        }
    }
    if total > 0.0 {
        f = f.min(wall * budget as f64 / total);
    }
    f
}

/// The chain from `plan`'s sink to its source, along first inputs; `None` when some stage on
/// it has more than one input.
pub(super) fn linear_chain(plan: &Plan) -> Option<Vec<&Plan>> {
    let mut chain = vec![plan];
    while let Some(next) = chain
        .last()
        .and_then(|p| p.step().inputs().first().copied())
    {
        chain.push(next);
    }
    chain
        .iter()
        .all(|p| p.step().inputs().len() <= 1)
        .then_some(chain)
}

/// The label of the last stage of the deterministic chain that starts at the source (not
/// counting `with_options`, which is no place to put a stage).
pub(super) fn last_deterministic(plan: &Plan) -> Option<String> {
    let chain = linear_chain(plan)?;
    chain
        .iter()
        .rev()
        .take_while(|p| deterministic(p))
        .filter(|p| p.op::<WithOptions>().is_none())
        .last()
        .map(|p| p.label())
}

/// The topmost stage of the deterministic chain that starts at the source, the share of all
/// busy time its chain takes, and the chain's node indices.
pub(super) fn deterministic_prefix<'a>(
    plan: &'a Plan,
    model: &Model<'a>,
    total_busy: f64,
) -> Option<(String, &'a Plan, f64, Vec<usize>)> {
    let chain = linear_chain(plan)?;
    let mut top = None;
    let mut removed = Vec::new();
    let mut busy = 0.0;
    for p in chain.iter().rev() {
        if !deterministic(p) {
            break;
        }
        if let Some(i) = model.nodes.iter().position(|n| n.plan.id() == p.id()) {
            busy += model.nodes[i].snap.busy_s;
            removed.push(i);
            top = Some((model.nodes[i].snap.name.clone(), model.nodes[i].plan));
        }
    }
    let share = if total_busy > 0.0 {
        busy / total_busy
    } else {
        0.0
    };
    top.map(|(t, p)| (t, p, share, removed))
}

/// What every rule of advice reads: the run's model and costs, computed once.
pub(super) struct Facts<'a> {
    /// The plan that ran (the planner's rewrite of `written`).
    pub plan: &'a Plan,
    /// The pipeline as the user wrote it: advice on where to put a stage names its stages.
    pub written: &'a Plan,
    pub model: Model<'a>,
    pub wall: f64,
    /// The CPU budget (threads).
    pub budget: usize,
    /// Each node's busy seconds, its group and each group's threads, as run.
    pub busy: Vec<f64>,
    pub identity: Vec<usize>,
    pub threads: Vec<usize>,
    pub groups: Vec<ThreadGroup>,
    pub stages: Vec<StageCost>,
    pub total_busy: f64,
    /// Seconds Python computed, holding the GIL.
    pub python_total: f64,
    /// The most utilised group, and its busiest node (the bottleneck).
    pub top_group: Option<usize>,
    pub bottleneck: Option<usize>,
    /// [`headroom`] as run: what every change is scored against.
    pub before: f64,
    /// Ops by time (most first), and what kind of work each name is, as its op declares.
    pub ops: Vec<OpCost>,
    pub work: HashMap<String, Work>,
}

impl<'a> Facts<'a> {
    pub(super) fn new(
        plan: &'a Plan,
        written: &'a Plan,
        snaps: &HashMap<u64, StageSnapshot>,
        wall_s: f64,
        budget: usize,
        ops: &[(String, u64, f64)],
    ) -> Facts<'a> {
        let wall = wall_s.max(1e-9);
        let mut model = Model {
            nodes: Vec::new(),
            groups: Vec::new(),
        };
        let driver = model.new_group(1, "driver thread".into());
        model.walk(plan, driver, snaps);
        let busy: Vec<f64> = model.nodes.iter().map(|n| n.snap.busy_s).collect();
        let threads: Vec<usize> = model.groups.iter().map(|g| g.0).collect();
        let groups = thread_groups(&model, wall);
        let stages = stage_costs(&model);
        let total_busy: f64 = busy.iter().sum();
        // Python's time on a CPU: the GIL is held while Python computes; a function waiting
        // (I/O, a sleep) has released it.
        let python_total: f64 = model.nodes.iter().map(|n| n.snap.python_cpu_s).sum();
        // The bottleneck: the busiest stage of the most utilised group.
        let top_group = groups
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.utilisation.total_cmp(&b.1.utilisation))
            .map(|(i, _)| i);
        let bottleneck = top_group.and_then(|g| {
            model
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.group == g)
                .max_by(|a, b| a.1.snap.busy_s.total_cmp(&b.1.snap.busy_s))
                .map(|(i, _)| i)
        });
        let identity: Vec<usize> = model.nodes.iter().map(|n| n.group).collect();
        let before = headroom(&busy, &identity, &threads, wall, budget);
        let mut ops: Vec<OpCost> = ops
            .iter()
            .map(|(name, calls, secs)| OpCost {
                name: name.clone(),
                calls: *calls,
                busy_s: *secs,
                share: if total_busy > 0.0 {
                    secs / total_busy
                } else {
                    0.0
                },
            })
            .collect();
        ops.sort_by(|a, b| b.busy_s.total_cmp(&a.busy_s));
        let mut work = HashMap::new();
        op_work(plan, &mut work);
        op_work(written, &mut work);
        Facts {
            plan,
            written,
            model,
            wall,
            budget,
            busy,
            identity,
            threads,
            groups,
            stages,
            total_busy,
            python_total,
            top_group,
            bottleneck,
            before,
            ops,
            work,
        }
    }

    /// The ops' share of the busy time, seconds and calls, for the ops doing `kind` of work.
    pub(super) fn work_share(&self, kind: Work) -> (f64, f64, u64) {
        self.ops
            .iter()
            .filter(|o| self.work.get(&o.name) == Some(&kind))
            .fold((0.0, 0.0, 0), |(sh, s, c), o| {
                (sh + o.share, s + o.busy_s, c + o.calls)
            })
    }
}

/// What kind of work each op of `plan`'s maps declares, by the name its time is kept under.
fn op_work(plan: &Plan, out: &mut HashMap<String, Work>) {
    if let Some(map) = plan.op::<Map>() {
        for op in &map.ops {
            out.insert(op.name().to_string(), op.work());
        }
    }
    for input in plan.step().inputs() {
        op_work(input, out);
    }
}

/// Each thread group's label, threads and utilisation.
fn thread_groups(model: &Model<'_>, wall: f64) -> Vec<ThreadGroup> {
    let mut group_busy = vec![0.0; model.groups.len()];
    for n in &model.nodes {
        group_busy[n.group] += n.snap.busy_s;
    }
    model
        .groups
        .iter()
        .zip(&group_busy)
        .map(|((t, label), b)| ThreadGroup {
            label: label.clone(),
            threads: *t,
            utilisation: b / (wall * *t as f64),
        })
        .collect()
}

/// Each stage's cost.
fn stage_costs(model: &Model<'_>) -> Vec<StageCost> {
    model
        .nodes
        .iter()
        .map(|n| StageCost {
            name: n.snap.name.clone(),
            kind: n.snap.kind.clone(),
            elements: n.snap.elements,
            busy_s: n.snap.busy_s,
            ms_per_element: if n.snap.elements > 0 {
                n.snap.busy_s * 1e3 / n.snap.elements as f64
            } else {
                0.0
            },
            workers: n.snap.workers,
            python_s: n.snap.python_s,
            group: n.group,
            capacity_per_s: if n.snap.busy_s > 0.0 {
                model.groups[n.group].0 as f64 * n.snap.elements as f64 / n.snap.busy_s
            } else {
                f64::INFINITY
            },
        })
        .collect()
}
