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

use std::collections::HashMap;

use serde::Serialize;
use stoker_core::stats::StageSnapshot;

use crate::datasets::{
    batch::Batch, cache::Cache, map::Map, options::WithOptions, padded_batch::PaddedBatch,
    prefetch::Prefetch,
};
use crate::plan::Plan;
use crate::properties::Threads;

/// One stage's share of the run.
#[derive(Clone, Debug, Serialize)]
pub struct StageCost {
    pub name: String,
    pub kind: String,
    pub elements: u64,
    pub busy_s: f64,
    /// Milliseconds of own work per element (summed over threads).
    pub ms_per_element: f64,
    /// Threads working on it: 0 for a stage that runs on the thread pulling it.
    pub workers: u64,
    pub python_s: f64,
    /// Which thread group it runs on (see [`Verdict::groups`]).
    pub group: usize,
    /// Elements per second it could make on its threads if nothing else ran there (its
    /// threads over its time per element); infinite for a stage that did no measurable work.
    pub capacity_per_s: f64,
}

/// Threads that run a set of stages.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadGroup {
    pub label: String,
    pub threads: usize,
    /// Busy time of its stages over wall time × threads (1.0 = always busy).
    pub utilisation: f64,
}

/// One op's time inside the map stages, from the timeline.
#[derive(Clone, Debug, Serialize)]
pub struct OpCost {
    pub name: String,
    pub calls: u64,
    pub busy_s: f64,
    /// Share of the busy time of all stages, 0..1.
    pub share: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Recommendation {
    pub action: String,
    /// The stage it is about, when there is one.
    pub stage: Option<String>,
    /// Predicted change in pipeline throughput, in percent; `None` when it cannot be predicted
    /// from the pipeline alone.
    pub predicted_gain_percent: Option<f64>,
    pub evidence: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    pub wall_s: f64,
    /// The CPU budget (threads).
    pub threads: usize,
    pub stages: Vec<StageCost>,
    /// Ops by time, when the run was timed per op (most first).
    pub ops: Vec<OpCost>,
    pub groups: Vec<ThreadGroup>,
    /// The stage that limits throughput (the busiest stage of the most utilised group).
    pub bottleneck: Option<String>,
    /// Share of the CPU budget the pipeline used, 0..1.
    pub cpu_utilisation: f64,
    /// Share of the run Python computed in a function (holding the GIL; not the time a
    /// function waited with it released), 0..1.
    pub gil_utilisation: f64,
    pub summary: String,
    pub recommendations: Vec<Recommendation>,
}

/// Stages of `plan` as run, with what the verdict needs to know about each.
struct Node<'a> {
    plan: &'a Plan,
    snap: StageSnapshot,
    group: usize,
}

struct Model<'a> {
    nodes: Vec<Node<'a>>,
    /// Threads of each group and its label.
    groups: Vec<(usize, String)>,
}

impl<'a> Model<'a> {
    fn new_group(&mut self, threads: usize, label: String) -> usize {
        self.groups.push((threads.max(1), label));
        self.groups.len() - 1
    }

    /// Assigns `plan` and its inputs to thread groups; `group` runs `plan`.
    fn walk(&mut self, plan: &'a Plan, group: usize, snaps: &HashMap<u64, StageSnapshot>) {
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
fn parallelism_knob(plan: &Plan) -> Option<(&'static str, Option<i64>)> {
    plan.step().parallelism_knob()
}

/// True when the stage gives the same elements in the same order every epoch, so that its
/// output can be cached: no random op, no Python function, no shuffle in it or below it (each
/// step declares what it draws on).
fn deterministic(plan: &Plan) -> bool {
    plan.safe_to_cache_after()
}

/// Bytes of one element of `plan`'s output, when its schema fixes them.
fn element_bytes(plan: &Plan) -> Option<usize> {
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
fn batch_rows(plan: &Plan) -> Option<usize> {
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
fn gain(after: f64, before: f64) -> Option<f64> {
    let g = (after / before - 1.0) * 100.0;
    g.is_finite().then_some(g)
}

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
    let wall = wall_s.max(1e-9);
    let mut model = Model {
        nodes: Vec::new(),
        groups: Vec::new(),
    };
    let driver = model.new_group(1, "driver thread".into());
    model.walk(plan, driver, snaps);

    let busy: Vec<f64> = model.nodes.iter().map(|n| n.snap.busy_s).collect();
    let threads: Vec<usize> = model.groups.iter().map(|g| g.0).collect();
    let mut group_busy = vec![0.0; threads.len()];
    for n in &model.nodes {
        group_busy[n.group] += n.snap.busy_s;
    }
    let groups: Vec<ThreadGroup> = model
        .groups
        .iter()
        .zip(&group_busy)
        .map(|((t, label), b)| ThreadGroup {
            label: label.clone(),
            threads: *t,
            utilisation: b / (wall * *t as f64),
        })
        .collect();
    let total_busy: f64 = busy.iter().sum();
    // Python's time on a CPU: the GIL is held while Python computes; a function waiting (I/O,
    // a sleep) has released it.
    let python_total: f64 = model.nodes.iter().map(|n| n.snap.python_cpu_s).sum();
    let stages: Vec<StageCost> = model
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
        .collect();

    // The bottleneck: the busiest stage of the most utilised group.
    let top_group = groups
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.utilisation.total_cmp(&b.1.utilisation))
        .map(|(i, _)| i);
    let bottleneck_idx = top_group.and_then(|g| {
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
    let mut recs = Vec::new();

    if let Some(bi) = bottleneck_idx {
        let node = &model.nodes[bi];
        let g = &groups[node.group];
        let name = node.snap.name.clone();
        let per = stages[bi].ms_per_element;
        let workers_now = g.threads;
        // The share of the stage's time Python computed (holding the GIL), and the share it
        // waited with the GIL released: more threads help the latter, not the former.
        let (python_share, wait_share) = if node.snap.busy_s > 0.0 {
            (
                node.snap.python_cpu_s / node.snap.busy_s,
                (node.snap.python_s - node.snap.python_cpu_s).max(0.0) / node.snap.busy_s,
            )
        } else {
            (0.0, 0.0)
        };
        let base_evidence = format!(
            "'{name}' takes {per:.3} ms per element ({:.2} s busy of a {wall:.2} s run); its \
             {} thread(s) are {:.0} % busy, the most of any stage",
            node.snap.busy_s,
            workers_now,
            g.utilisation * 100.0
        );

        // More threads for the bottleneck stage: a stage on a shared thread moves to a group
        // of its own; a parallel stage's group gets more threads.
        // Not for a stage mostly in Python: threads would take turns holding the GIL (and
        // lose time handing it over), so native ops are the advice there.
        if let Some((knob, _)) = parallelism_knob(node.plan) {
            let k = budget;
            if k > workers_now && python_share <= 0.5 {
                let mut t2 = threads.clone();
                let mut group_of = identity.clone();
                if node.snap.workers > 1 {
                    t2[node.group] = k;
                } else {
                    t2.push(k);
                    group_of[bi] = t2.len() - 1;
                }
                let mut after = headroom(&busy, &group_of, &t2, wall, budget);
                let mut evidence = base_evidence.clone();
                if wait_share > 0.2 {
                    evidence.push_str(&format!(
                        "; {:.0} % of its time its Python function waited with the GIL \
                         released (I/O, a sleep), which other threads can use",
                        wait_share * 100.0
                    ));
                }
                if python_share > 0.2 {
                    // Python code runs one thread at a time.
                    after = after.min((wall / python_total).max(before));
                    evidence.push_str(&format!(
                        "; {:.0} % of its time is in Python, which holds the GIL, so more \
                         threads help only up to the GIL's limit",
                        python_share * 100.0
                    ));
                }
                recs.push(Recommendation {
                    action: format!(
                        "raise the parallelism of '{name}' to {k} ({knob}=stoker.AUTOTUNE \
                         uses the whole budget of {budget} threads)"
                    ),
                    stage: Some(name.clone()),
                    predicted_gain_percent: gain(after, before),
                    evidence,
                });
            }
        }

        // A stage that mostly waits, on all the budget's threads already: threads waiting use
        // no CPU, so more of them than cores help, up to where their computing fills the
        // cores.
        if wait_share > 0.5 && workers_now >= budget && parallelism_knob(node.plan).is_some() {
            let computing = (1.0 - wait_share).max(0.01);
            let k = ((budget as f64 / computing).ceil() as usize).clamp(budget + 1, 8 * budget);
            recs.push(Recommendation {
                action: format!(
                    "let '{name}' wait on more threads than cores: with_options(threads={k}) \
                     and num_parallel_calls=stoker.AUTOTUNE (or {k})"
                ),
                stage: Some(name.clone()),
                predicted_gain_percent: gain(k as f64, workers_now as f64),
                evidence: format!(
                    "{base_evidence}; {:.0} % of its time its Python function waited with the \
                     GIL released (I/O, a sleep: {:.2} s of {:.2} s in Python), using no CPU, \
                     so {k} threads keep about {budget} cores busy",
                    wait_share * 100.0,
                    (node.snap.python_s - node.snap.python_cpu_s).max(0.0),
                    node.snap.python_s,
                ),
            });
        }

        // Native ops instead of a Python function that computes (holding the GIL).
        if python_share > 0.3 {
            let mut t2 = threads.clone();
            t2.push(budget);
            let mut group_of = identity.clone();
            group_of[bi] = t2.len() - 1;
            let mut after = headroom(&busy, &group_of, &t2, wall, budget);
            // Its threads already take turns on the GIL: Python ran about
            // `python_total / wall` threads' worth, where native ops would run all of them.
            let gil = python_total / wall;
            if workers_now > 1 && gil > 0.5 {
                let threads_worth = workers_now.min(budget) as f64;
                after = after.max(before * (threads_worth / gil).min(budget as f64));
            }
            recs.push(Recommendation {
                action: format!(
                    "replace the Python function in '{name}' with native ops (stoker.ops), \
                     which run on all {budget} threads without the GIL"
                ),
                stage: Some(name.clone()),
                predicted_gain_percent: gain(after.max(before), before),
                evidence: format!(
                    "{base_evidence}; {:.2} s of it ({:.0} %) is Python computing, holding the \
                     GIL ({} calls). The gain assumes native ops as fast as the Python code; \
                     they are usually faster",
                    node.snap.python_cpu_s,
                    python_share * 100.0,
                    node.snap.python_calls
                ),
            });
        }

        // A per-element Python function right before a batch: batch first, then map.
        if python_share > 0.3 && per < 0.1 {
            recs.push(Recommendation {
                action: format!(
                    "move '{name}' after the batch and make it work on whole batches \
                     (vectorised): its per-call overhead is then paid once per batch"
                ),
                stage: Some(name.clone()),
                predicted_gain_percent: None,
                evidence: format!(
                    "{base_evidence}; at {:.1} µs per element, most of it is the cost of a \
                     Python call",
                    per * 1e3
                ),
            });
        }
    }

    // Cache the deterministic prefix.
    let has_cache = model.nodes.iter().any(|n| n.plan.op::<Cache>().is_some());
    if !has_cache {
        if let Some((top, top_plan, share, removed)) =
            deterministic_prefix(plan, &model, total_busy)
        {
            if share >= 0.2 {
                let busy_after: Vec<f64> = busy
                    .iter()
                    .enumerate()
                    .map(|(i, b)| if removed.contains(&i) { 0.0 } else { *b })
                    .collect();
                let after = headroom(&busy_after, &identity, &threads, wall, budget);
                // Where the planner moved ops after a batch, the last deterministic stage that
                // ran is a map the user did not write: name theirs (the batch, say) instead.
                let (place, moved) = match last_deterministic(written) {
                    Some(w) if w != top => (
                        w.clone(),
                        format!(" (in the plan that ran, '{top}'; see explain())"),
                    ),
                    _ => (top.clone(), String::new()),
                };
                recs.push(Recommendation {
                    action: format!(
                        "add .cache() after '{place}': everything up to it gives the same \
                         elements every epoch, so from the second epoch on it is read from the \
                         cache (in memory, or .cache(filename) on disk)",
                    ),
                    stage: Some(top.clone()),
                    predicted_gain_percent: gain(after, before),
                    evidence: format!(
                        "the stages up to '{place}'{moved} are deterministic (no random op, \
                         Python function or shuffle) and take {:.0} % of the pipeline's busy \
                         time{}",
                        share * 100.0,
                        match element_bytes(top_plan) {
                            Some(b) => format!(
                                "; the cache holds {:.2} MB per element of its output",
                                b as f64 / 1e6
                            ),
                            None => String::new(),
                        }
                    ),
                });
            }
        }
    }

    let mut op_costs: Vec<OpCost> = ops
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
    op_costs.sort_by(|a, b| b.busy_s.total_cmp(&a.busy_s));
    recs.extend(op_advice(&op_costs, &ConvertHint::of(written)));

    // A prefetch at the end (options are not a stage).
    let mut sink = plan;
    while let Some(o) = sink.op::<WithOptions>() {
        sink = &o.input;
    }
    if sink.op::<Prefetch>().is_none() {
        recs.push(Recommendation {
            action: "end the pipeline with .prefetch(stoker.AUTOTUNE)".into(),
            stage: None,
            predicted_gain_percent: None,
            evidence: format!(
                "the last stage is '{}': only a one-element buffer lets the pipeline work while \
                 the training step runs, so any slow element stalls the step",
                sink.label()
            ),
        });
    }
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

    let bottleneck = bottleneck_idx.map(|i| model.nodes[i].snap.name.clone());
    // Time a Python function waited with the GIL released kept its thread, not a CPU.
    let python_waits: f64 = (model.nodes.iter())
        .map(|n| (n.snap.python_s - n.snap.python_cpu_s).max(0.0))
        .sum();
    let cpu_utilisation = (total_busy - python_waits).max(0.0) / (wall * budget.max(1) as f64);
    let summary = match (&bottleneck, top_group) {
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
    };
    Verdict {
        wall_s,
        threads: budget,
        stages,
        ops: op_costs,
        groups,
        bottleneck,
        cpu_utilisation,
        gil_utilisation: python_total / wall,
        summary,
        recommendations: recs,
    }
}

/// What `convert` would run offline of the pipeline as written: whether that includes an image
/// decode, and the first step it leaves online.
struct ConvertHint {
    decodes_offline: bool,
    first_online: Option<String>,
}

impl ConvertHint {
    fn of(written: &Plan) -> ConvertHint {
        match crate::convert::offline_part(written) {
            Ok((chain, online)) => ConvertHint {
                decodes_offline: chain.iter().any(|p| {
                    p.op::<Map>()
                        .is_some_and(|m| m.ops.iter().any(|o| is_image_decode(o.name())))
                }),
                first_online: online.into_iter().next(),
            },
            Err(_) => ConvertHint {
                decodes_offline: false,
                first_online: None,
            },
        }
    }

    /// The advice: the command that converts this pipeline, or what to move first.
    fn advice(&self) -> String {
        let command = "ds.convert(\"converted/\", images=\"jpeg\", resize=256) (or on the \
                       command line: stoker convert SPEC converted/ --images jpeg --resize 256; \
                       add --ray to run it on a Ray cluster), then read \
                       Dataset.from_converted(\"converted/\", decode_images=False)";
        let rest = match &self.first_online {
            Some(step) => format!(" followed by the steps from '{step}' on"),
            None => String::new(),
        };
        if self.decodes_offline {
            format!(
                "decoding images dominates: preprocess them offline, once, stored already \
                 resized to about the training size so that each decode has fewer pixels: \
                 {command}{rest}"
            )
        } else {
            let before = match &self.first_online {
                Some(step) => format!("ahead of '{step}'"),
                None => "to the start of the pipeline".into(),
            };
            format!(
                "decoding images dominates: preprocess them offline, once: move the read and \
                 decode {before} (convert runs offline everything up to the first shuffle, \
                 random op, batch or Python function), then {command} and the random steps \
                 after it"
            )
        }
    }
}

fn is_image_decode(op: &str) -> bool {
    op.starts_with("decode_") && op != "decode_raw" && op != "decode_csv"
}

/// Advice from where the time goes inside maps: image decoding, or reading many small files.
fn op_advice(ops: &[OpCost], convert: &ConvertHint) -> Vec<Recommendation> {
    let mut recs = Vec::new();
    let share_of = |pred: &dyn Fn(&str) -> bool| -> (f64, f64, u64) {
        ops.iter()
            .filter(|o| pred(&o.name))
            .fold((0.0, 0.0, 0), |(sh, s, c), o| {
                (sh + o.share, s + o.busy_s, c + o.calls)
            })
    };
    let (decode, decode_s, decodes) = share_of(&|n| is_image_decode(n));
    if decode >= 0.5 {
        recs.push(Recommendation {
            action: format!(
                "{}; for JPEGs, a random_resized_crop right after the decode (in the same map) \
                 decodes only the crop, and at 1/2 to 1/8 scale where the crop is resized down \
                 that much (libjpeg-turbo build, the default); for PNGs, a \
                 resize_with_crop_or_pad right after the decode decodes only the rows down to \
                 the crop's last, and of them only the bytes up to the crop's right edge",
                convert.advice()
            ),
            stage: None,
            predicted_gain_percent: None,
            evidence: format!(
                "image decoding takes {:.0} % of the pipeline's busy time ({decode_s:.2} s for \
                 {decodes} images, {:.2} ms each)",
                decode * 100.0,
                decode_s * 1e3 / decodes.max(1) as f64
            ),
        });
    }
    let (read, read_s, reads) = share_of(&|n| n == "read_file");
    if read >= 0.2 {
        recs.push(Recommendation {
            action: "reading many small files costs much: pack them into a few TFRecord files \
                     (stoker.io.TFRecordWriter) and read those with \
                     TFRecordDataset(num_parallel_reads=stoker.AUTOTUNE)"
                .into(),
            stage: None,
            predicted_gain_percent: None,
            evidence: format!(
                "read_file takes {:.0} % of the pipeline's busy time ({read_s:.2} s for {reads} \
                 files, {:.3} ms each: opening and reading a file at a time)",
                read * 100.0,
                read_s * 1e3 / reads.max(1) as f64
            ),
        });
    }
    recs
}

/// How many times faster the pipeline could go before some thread group or the CPU budget is
/// saturated, given each stage's busy time, the group it runs on and each group's threads.
fn headroom(busy: &[f64], group_of: &[usize], threads: &[usize], wall: f64, budget: usize) -> f64 {
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
fn linear_chain(plan: &Plan) -> Option<Vec<&Plan>> {
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
fn last_deterministic(plan: &Plan) -> Option<String> {
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
fn deterministic_prefix<'a>(
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

/// A timed run shorter than this is too short to judge: start-up (threads, first reads,
/// buffers filling) weighs too much in it.
pub const MIN_JUDGED_S: f64 = 0.3;

impl Verdict {
    /// For a run too short to judge (`elements` in `seconds` of timed run; `ended`: the
    /// dataset ran out): says so, with no bottleneck and no advice.
    pub fn too_short(&mut self, elements: u64, seconds: f64, ended: bool) {
        let why = if ended {
            "the dataset ended"
        } else {
            "the run was cut short"
        };
        self.summary = format!(
            "too short to judge: {elements} elements in {seconds:.2} s ({why}); a verdict needs \
             at least {MIN_JUDGED_S} s of elements: run it longer (seconds=, batches=) or over \
             more data (.repeat())"
        );
        self.bottleneck = None;
        self.recommendations.clear();
    }

    /// The verdict as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!("verdict: {}\n", self.summary);
        for (i, r) in self.recommendations.iter().enumerate() {
            let g = r
                .predicted_gain_percent
                .map(|g| format!("predicted {g:+.0} %"))
                .unwrap_or_else(|| "gain not predictable from the pipeline alone".into());
            out.push_str(&format!(
                "  {}. {} [{g}]\n     because {}\n",
                i + 1,
                r.action,
                r.evidence
            ));
        }
        out
    }
}
