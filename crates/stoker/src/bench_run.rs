//! Runs a pipeline alone, as fast as it goes, for a time or a number of elements, and reports
//! its throughput, its stages' counters and the bottleneck verdict (`stoker bench`,
//! `Dataset.diagnose`).

use std::time::{Duration, Instant};

use serde::Serialize;
use stoker_core::exec::ElementIter;
use stoker_core::stats::StageSnapshot;
use stoker_core::Result;

use crate::datasets::{batch::Batch, padded_batch::PaddedBatch};
use crate::pipeline::Pipeline;
use crate::plan::Plan;
use crate::verdict::{diagnose, Verdict};

/// When to stop.
#[derive(Clone, Copy, Debug)]
pub struct BenchLimits {
    /// Elements pulled before timing starts (fills buffers and caches); counted in the stats.
    pub warmup: u64,
    pub seconds: Option<f64>,
    pub elements: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// Timed seconds (after warm-up).
    pub seconds: f64,
    pub elements: u64,
    /// Examples: a batched element counts its first dimension.
    pub examples: u64,
    pub elements_per_s: f64,
    pub examples_per_s: f64,
    /// The dataset ended before the limit.
    pub ended: bool,
    pub threads: usize,
    pub stages: Vec<StageSnapshot>,
    pub verdict: Verdict,
    /// How the run went over time (for the report).
    pub series: Series,
}

/// Samples of a run over time, bounded in size.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Series {
    /// Per timed element: milliseconds the consumer waited for it (the first
    /// [`MAX_WAITS`] elements).
    pub wait_ms: Vec<f32>,
    /// Every [`SAMPLE_EVERY`]: seconds since timing started, elements so far, and the fill of
    /// each buffered stage.
    pub samples: Vec<Sample>,
    /// Names of the buffered stages, in the order of `Sample::fill`.
    pub buffers: Vec<String>,
    /// The tuned knobs (`stage: knob`), in the order of `Sample::knobs`.
    pub knobs: Vec<String>,
    /// The tuner's moves: seconds since timing started (negative: in the warm-up), the knob,
    /// its new value, and why.
    pub tuning: Vec<TunerMove>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TunerMove {
    pub t: f64,
    pub knob: String,
    pub value: usize,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub t: f64,
    pub elements: u64,
    /// Elements in each buffer over its capacity, 0..1.
    pub fill: Vec<f32>,
    /// Each tuned knob's value.
    pub knobs: Vec<u32>,
}

/// Per-element waits kept for the report.
pub const MAX_WAITS: usize = 100_000;
/// How often buffer fill and progress are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Samples kept (a long run keeps its first this many).
const MAX_SAMPLES: usize = 20_000;

fn sample(pipeline: &Pipeline, t: f64, elements: u64, series: &mut Series) {
    if series.samples.len() >= MAX_SAMPLES {
        return;
    }
    let stages = pipeline.stats();
    if series.buffers.is_empty() {
        series.buffers = stages
            .iter()
            .filter(|s| s.buffer_capacity > 0)
            .map(|s| s.name.clone())
            .collect();
    }
    let fill = series
        .buffers
        .iter()
        .map(|name| {
            stages.iter().find(|s| &s.name == name).map_or(0.0, |s| {
                s.buffer_len as f32 / s.buffer_capacity.max(1) as f32
            })
        })
        .collect();
    let tuned: Vec<(String, u32)> = stages
        .iter()
        .flat_map(|s| {
            s.knobs
                .iter()
                .filter(|k| k.tuned)
                .map(move |k| (format!("{}: {}", s.name, k.name), k.value as u32))
        })
        .collect();
    if series.knobs.len() < tuned.len() {
        // Stages make their knobs as they start.
        series.knobs = tuned.iter().map(|(n, _)| n.clone()).collect();
    }
    let knobs = series
        .knobs
        .iter()
        .map(|n| tuned.iter().find(|(m, _)| m == n).map_or(0, |(_, v)| *v))
        .collect();
    series.samples.push(Sample {
        t,
        elements,
        fill,
        knobs,
    });
}

/// The moves the tuner made on `pipeline`'s knobs, in seconds since `start`.
fn tuner_moves(pipeline: &Pipeline, start: Instant) -> Vec<TunerMove> {
    let mut out = Vec::new();
    for stage in pipeline.registry().stages() {
        for k in stage.knobs().iter().filter(|k| k.tuned) {
            for (at, value, reason) in k.history() {
                let t = if at >= start {
                    (at - start).as_secs_f64()
                } else {
                    -(start - at).as_secs_f64()
                };
                let knob = format!("{}: {}", stage.name, k.name);
                out.push(TunerMove {
                    t,
                    knob,
                    value,
                    reason,
                });
            }
        }
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

/// Runs `plan` on a fresh pipeline (fresh counters) until `limits`.
pub fn bench(plan: &Plan, limits: BenchLimits) -> Result<BenchResult> {
    bench_with_progress(plan, limits, |_, _| {})
}

/// [`bench`], calling `progress(elapsed_s, elements)` after each element.
pub fn bench_with_progress(
    plan: &Plan,
    limits: BenchLimits,
    mut progress: impl FnMut(f64, u64),
) -> Result<BenchResult> {
    let pipeline = Pipeline::new(plan)?;
    let batched = has_batch(pipeline.plan());
    // The timeline's per-op totals say which op of a map takes the time; tracing costs
    // about nothing here (see BENCHMARKS.md). A trace the caller runs is left running.
    let own_trace = !stoker_core::trace::enabled();
    let before = if own_trace {
        stoker_core::trace::start();
        Vec::new()
    } else {
        stoker_core::trace::op_totals()
    };
    let result = run(&pipeline, batched, limits, &mut progress);
    let mut ops = stoker_core::trace::op_totals();
    if own_trace {
        stoker_core::trace::stop();
    }
    // Only this run's share of a caller's running trace.
    for (name, calls, secs) in &mut ops {
        if let Some((_, c0, s0)) = before.iter().find(|(n, ..)| n == name) {
            *calls -= c0;
            *secs -= s0;
        }
    }
    ops.retain(|(_, calls, _)| *calls > 0);
    let (seconds, wall, elements, examples, ended, series) = result?;
    let threads = pipeline.plan().options().threads();
    let mut verdict = diagnose(
        pipeline.plan(),
        plan,
        &pipeline.registry().snapshot_by_key(),
        wall,
        threads,
        &ops,
    );
    if elements == 0 || seconds < crate::verdict::MIN_JUDGED_S {
        verdict.too_short(elements, seconds, ended);
    }
    let rate = |n: u64| {
        if seconds > 0.0 {
            n as f64 / seconds
        } else {
            0.0
        }
    };
    Ok(BenchResult {
        seconds,
        elements,
        examples,
        elements_per_s: rate(elements),
        examples_per_s: rate(examples),
        ended,
        threads,
        stages: pipeline.stats(),
        verdict,
        series,
    })
}

type RunOutcome = (f64, f64, u64, u64, bool, Series);

/// The timed loop: (timed seconds, wall seconds with warm-up, elements, examples, ended,
/// series).
fn run(
    pipeline: &Pipeline,
    batched: bool,
    limits: BenchLimits,
    progress: &mut impl FnMut(f64, u64),
) -> Result<RunOutcome> {
    let run_start = Instant::now();
    let mut it = pipeline.start()?;
    let mut ended = false;
    for _ in 0..limits.warmup {
        if it.next()?.is_none() {
            ended = true;
            break;
        }
    }
    let limit = limits.seconds.map(Duration::from_secs_f64);
    let start = Instant::now();
    let (mut elements, mut examples) = (0u64, 0u64);
    let mut series = Series::default();
    let mut next_sample = start;
    while !ended {
        let now = Instant::now();
        if now >= next_sample {
            sample(pipeline, (now - start).as_secs_f64(), elements, &mut series);
            next_sample = now + SAMPLE_EVERY;
        }
        if limits.elements.is_some_and(|n| elements >= n)
            || limit.is_some_and(|l| start.elapsed() >= l)
        {
            break;
        }
        let asked = Instant::now();
        let next = it.next()?;
        if series.wait_ms.len() < MAX_WAITS {
            series.wait_ms.push(asked.elapsed().as_secs_f32() * 1e3);
        }
        match next {
            Some(e) => {
                elements += 1;
                let rows = e.tensors.first().and_then(|t| t.shape().first().copied());
                examples += match rows {
                    Some(n) if batched => n as u64,
                    _ => 1,
                };
                progress(start.elapsed().as_secs_f64(), elements);
            }
            None => ended = true,
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    sample(pipeline, seconds, elements, &mut series);
    drop(it);
    series.tuning = tuner_moves(pipeline, start);
    // The counters cover the warm-up too, so the verdict uses the whole run's wall time.
    let wall = run_start.elapsed().as_secs_f64();
    Ok((seconds, wall, elements, examples, ended, series))
}

/// True when the pipeline's elements are batches (of which the first dimension counts
/// examples): some step on the way from the sink to a source batches.
fn has_batch(plan: &Plan) -> bool {
    plan.op::<Batch>().is_some()
        || plan.op::<PaddedBatch>().is_some()
        || plan.step().inputs().into_iter().any(has_batch)
}
