//! `AUTOTUNE`, resolved in one place: the knobs a stage left to it gets, and the tuner that
//! moves them while the pipeline runs.
//!
//! The tuner measures, period after period, the rate the pipeline hands out elements, the
//! CPU its threads use and each stage's busy time, and tries one move at a time: more workers
//! for the stage whose workers are all busy, where the CPU budget has room for what one more
//! of them uses (a worker that waits, on storage or a sleeping Python function, uses none);
//! fewer where the rate does not need them (the consumer is the limit, or threads fight over
//! the GIL). A move stays when the next period's rate says it helped (or, for a move down,
//! did not hurt), else it is undone and not tried again for a while. Every knob says why it
//! has its value.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stoker_core::exec::prefetch::Bounds;
use stoker_core::exec::CancelFlag;
use stoker_core::knob::{Knob, KnobKind};
use stoker_core::stats::StageSnapshot;
use stoker_core::{StageStats, StatsRegistry};

use crate::build::{threads_within, BuildCtx};
use crate::properties::AUTOTUNE;

/// The most workers a tuned stage may get: well above the cores, for stages that wait (the
/// CPU budget keeps stages that compute near the cores; workers are started as the tuner
/// asks for them).
pub fn most_workers(budget: usize) -> usize {
    (4 * budget).max(64)
}

/// The workers a parallel stage asking for `n` starts with and may get, and its knob where
/// it is tuned (`None`: not parallel, or a number the user set, or autotune off). The knob is
/// the stage's own (named `name`, kept across passes, shown in its stats).
pub fn parallelism(
    ctx: &BuildCtx,
    stats: &StageStats,
    name: &'static str,
    n: Option<i64>,
) -> (usize, Option<Arc<Knob>>) {
    let budget = ctx.options.threads();
    let start = threads_within(budget, ctx.autotuned_stages, n);
    match n {
        Some(AUTOTUNE) if ctx.options.autotune.unwrap_or(true) => {
            let most = most_workers(budget).max(start);
            let knob = stats.knob(name, (1, most), start, true);
            (most, Some(knob))
        }
        Some(_) => {
            let knob = stats.knob(name, (1, start), start, false);
            if n == Some(AUTOTUNE) {
                knob.set_reason("AUTOTUNE with autotune=False: its share of the thread budget");
            } else if n.is_some_and(|n| n as usize > start) {
                knob.set_reason(format!(
                    "set by the user ({}), within the thread budget of {budget}",
                    n.unwrap_or(0)
                ));
            }
            (start, None)
        }
        None => (start, None),
    }
}

/// The most elements a tuned buffer may hold (its bytes are bounded by the RAM budget).
pub const MOST_BUFFERED: usize = 64;

/// The capacity of a stage's output buffer of `size` elements, and what bounds it: where it
/// is left to `AUTOTUNE` (and the tuner is on), a tuned depth knob, starting at the thread
/// budget (at least 2), and the pipeline's RAM budget; else the size, in a fixed knob.
pub fn buffer(ctx: &BuildCtx, stats: &StageStats, size: i64) -> (usize, Bounds) {
    let start = ctx.options.threads().max(2);
    match size {
        AUTOTUNE if ctx.options.autotune.unwrap_or(true) => {
            let most = MOST_BUFFERED.max(start);
            let why = "AUTOTUNE: the thread budget (at least 2) to start with; deeper where its \
                       consumer waits on it while its producer waits for room, within the RAM \
                       budget";
            let knob = stats.buffer_knob((1, most), start, true, why);
            let ram = ctx.resources.ram(&ctx.options);
            let bounds = Bounds {
                depth: Some(knob),
                ram: Some(ram),
            };
            (most, bounds)
        }
        AUTOTUNE => {
            let knob = stats.buffer_knob((start, start), start, false, "");
            knob.set_reason("AUTOTUNE with autotune=False: the thread budget, at least 2");
            (start, Bounds::default())
        }
        n => {
            let n = n.max(0) as usize;
            stats.buffer_knob((n, n), n, false, "");
            (n, Bounds::default())
        }
    }
}

/// The knob of an interleave (or a source reading files in turn) asking for `n` parallel
/// reads over a cycle of `cycle`: where it is left to `AUTOTUNE` (and the tuner is on), how
/// many of the cycle's slots read ahead on threads of their own, every one to start with;
/// `None`: every slot reads ahead, as the number set says.
pub fn reads(
    ctx: &BuildCtx,
    stats: &StageStats,
    name: &'static str,
    n: Option<i64>,
    cycle: usize,
) -> Option<Arc<Knob>> {
    if n != Some(AUTOTUNE) || !ctx.options.autotune.unwrap_or(true) || cycle < 2 {
        return None;
    }
    let why = "AUTOTUNE: every slot of the cycle reads ahead to start with; fewer where the \
               consumer does not wait on them";
    Some(stats.kind_knob(KnobKind::Reads, name, (1, cycle), cycle, (true, why)))
}

/// Whether a step of `plan` leaves its parallelism, its reads or its buffer to `AUTOTUNE` (its
/// stage gets a tuned knob when it starts, which may be after the run starts: below a
/// `repeat`, an `interleave`).
pub fn tunes(plan: &crate::plan::Plan) -> bool {
    let step = plan.step();
    matches!(step.parallelism_knob(), Some((_, Some(AUTOTUNE))))
        || matches!(step.buffer_knob(), Some((_, AUTOTUNE)))
        || step.inputs().into_iter().any(tunes)
}

/// The CPU seconds the pipeline's threads (named `stoker-*`) have used, where the platform
/// tells (Linux: `/proc/self/task`).
fn pipeline_cpu_s() -> Option<f64> {
    // SAFETY: sysconf only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return None;
    }
    let mut total = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: the name may hold spaces, so split after its last ')'.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("stoker-") {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
        let time = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        total += time(11).unwrap_or(0) + time(12).unwrap_or(0);
    }
    Some(total as f64 / ticks as f64)
}

/// A tuned knob and the stage it belongs to.
struct Tunable {
    stage: Arc<StageStats>,
    knob: Arc<Knob>,
    trace_name: Arc<str>,
}

/// A move being tried: the knob, its value before, and the rate before.
struct Trial {
    knob: usize,
    from: usize,
    rate: f64,
    up: bool,
}

/// One period's measurements.
struct Period {
    rate: f64,
    cpu: Option<f64>,
    /// Per stage (by knob index): the share of its workers' time they were busy, the CPU one
    /// of its workers uses (in cores), and the cores its Python functions computed on (all
    /// its workers together: the GIL lets them have one).
    load: Vec<(f64, f64, f64)>,
    /// Per stage: the share of the period its consumer waited on its empty output buffer, and
    /// the share its producer waited for room there.
    waits: Vec<(f64, f64)>,
    /// The output was blocked on its consumer for most of the period.
    consumer_bound: bool,
}

/// How much a tuned stage asks for more (its workers' busy share, or the share of the time
/// its consumer waited on its reads), where that is enough to try more.
fn wants_more(t: &Tunable, (busy, ..): (f64, f64, f64), (starved, _): (f64, f64)) -> Option<f64> {
    match t.knob.kind {
        KnobKind::Parallelism => (busy > 0.6).then_some(busy),
        KnobKind::Reads => (starved > 0.2).then_some(starved),
        KnobKind::Buffer => None,
    }
}

/// Whether one fewer may keep the rate. Workers all busy computing natively each make their
/// share of it, so one fewer only loses it. Fewer may do where about one worker's time sits
/// idle (spread over all of them), where they are busy without computing (waiting on a lock,
/// I/O), where Python takes much of the one core the GIL gives, or, for reads, where the
/// consumer hardly waits on them.
fn may_do_with_fewer(
    t: &Tunable,
    (busy, cpu, python): (f64, f64, f64),
    (starved, _): (f64, f64),
) -> bool {
    match t.knob.kind {
        KnobKind::Parallelism => {
            let idle_workers = (1.0 - busy) * t.knob.get() as f64;
            idle_workers >= 0.9 || cpu < 0.7 * busy || python > 0.5
        }
        KnobKind::Reads => starved < 0.02,
        KnobKind::Buffer => false,
    }
}

pub struct Tuner {
    registry: Arc<StatsRegistry>,
    output: Arc<StageStats>,
    budget: f64,
    cancel: CancelFlag,
}

/// How long a period lasts at least, and how many elements it should see.
const PERIOD: Duration = Duration::from_millis(250);
const MIN_ELEMENTS: u64 = 8;
/// Periods a move that did not help is not tried again; doubled each time it fails again,
/// up to `MAX_COOLDOWN`.
const COOLDOWN: u32 = 8;
const MAX_COOLDOWN: u32 = 128;

/// Per knob: periods left before a move is tried again, and how long the next wait is.
type Cooldowns = HashMap<usize, (u32, u32)>;

fn cool(m: &mut Cooldowns, knob: usize) {
    let e = m.entry(knob).or_insert((0, COOLDOWN));
    *e = (e.1, (2 * e.1).min(MAX_COOLDOWN));
}

impl Tuner {
    /// Starts the tuner of a run on a thread of its own, where the run has tuned knobs; it
    /// ends with the run (`cancel`).
    pub fn start(
        registry: Arc<StatsRegistry>,
        output: Arc<StageStats>,
        budget: usize,
        cancel: CancelFlag,
    ) {
        let tuner = Tuner {
            registry,
            output,
            budget: budget as f64,
            cancel,
        };
        let _ = stoker_core::exec::threads::spawn("stoker-tuner", move || tuner.run());
    }

    fn tunables(&self) -> Vec<Tunable> {
        let mut out = Vec::new();
        for stage in self.registry.stages() {
            for knob in stage.knobs() {
                if knob.tuned {
                    let trace_name = Arc::from(format!("{}: {}", stage.name, knob.name));
                    out.push(Tunable {
                        stage: Arc::clone(&stage),
                        knob,
                        trace_name,
                    });
                }
            }
        }
        out
    }

    fn run(self) {
        let mut tunables = self.tunables();
        let mut trial: Option<Trial> = None;
        let mut cooldown_up = Cooldowns::new();
        let mut cooldown_down = Cooldowns::new();
        let mut last = self.sample(&tunables);
        let mut since = Instant::now();
        while !self.cancel.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            if tunables.is_empty() {
                // Stages start their knobs as the pipeline starts.
                tunables = self.tunables();
                last = self.sample(&tunables);
                since = Instant::now();
                continue;
            }
            let now_s = self.sample(&tunables);
            let dt = since.elapsed();
            let elements = now_s.0.elements.saturating_sub(last.0.elements);
            if dt < PERIOD || (elements < MIN_ELEMENTS && dt < 10 * PERIOD) {
                continue;
            }
            let period = Self::period(&last, &now_s, dt.as_secs_f64(), &tunables);
            last = now_s;
            since = Instant::now();
            if elements == 0 {
                // Nothing flowed (the consumer paused, or the pass ended): nothing to learn.
                continue;
            }
            for c in cooldown_up.values_mut().chain(cooldown_down.values_mut()) {
                c.0 = c.0.saturating_sub(1);
            }
            self.deepen_buffers(&tunables, &period);
            if let Some(t) = trial.take() {
                let (up, kept) = (
                    t.up,
                    self.judge(&tunables, t, &period, &mut cooldown_up, &mut cooldown_down),
                );
                if !(up && kept) {
                    // The next move waits a period, measured without this one's change.
                    continue;
                }
            }
            trial = self.next_move(&tunables, &period, &cooldown_up, &cooldown_down);
        }
    }

    /// The output's counters, each stage's, and the pipeline's CPU seconds.
    fn sample(&self, tunables: &[Tunable]) -> (StageSnapshot, Vec<StageSnapshot>, Option<f64>) {
        let stages = tunables.iter().map(|t| t.stage.snapshot()).collect();
        (self.output.snapshot(), stages, pipeline_cpu_s())
    }

    #[allow(clippy::type_complexity)]
    fn period(
        a: &(StageSnapshot, Vec<StageSnapshot>, Option<f64>),
        b: &(StageSnapshot, Vec<StageSnapshot>, Option<f64>),
        dt: f64,
        tunables: &[Tunable],
    ) -> Period {
        let rate = b.0.elements.saturating_sub(a.0.elements) as f64 / dt;
        let cpu = match (a.2, b.2) {
            (Some(x), Some(y)) => Some((y - x).max(0.0) / dt),
            _ => None,
        };
        let load = tunables
            .iter()
            .zip(a.1.iter().zip(&b.1))
            .map(|(t, (x, y))| {
                let workers = t.knob.get().max(1) as f64;
                let busy = (y.busy_s - x.busy_s).max(0.0);
                // A Python function's time off the CPU (I/O, a sleep) costs no CPU.
                let off_cpu = ((y.python_s - x.python_s) - (y.python_cpu_s - x.python_cpu_s))
                    .max(0.0)
                    .min(busy);
                let python_cpu = (y.python_cpu_s - x.python_cpu_s).max(0.0) / dt;
                (
                    (busy / (workers * dt)).min(1.0),
                    (busy - off_cpu) / (workers * dt),
                    python_cpu,
                )
            })
            .collect();
        let waits =
            a.1.iter()
                .zip(&b.1)
                .map(|(x, y)| {
                    let starved = (y.starved_s - x.starved_s).max(0.0) / dt;
                    let blocked = (y.blocked_output_s - x.blocked_output_s).max(0.0) / dt;
                    (starved, blocked)
                })
                .collect();
        let blocked = b.0.blocked_output_s - a.0.blocked_output_s;
        Period {
            rate,
            cpu,
            load,
            waits,
            consumer_bound: blocked > 0.5 * dt,
        }
    }

    fn set(&self, t: &Tunable, value: usize, reason: String) {
        let v = t.knob.set(value, reason);
        if t.knob.kind == KnobKind::Parallelism {
            t.stage.set_workers(v);
        }
        stoker_core::trace::counter(&t.trace_name, v as u64);
    }

    /// Deepens the buffers whose consumer waited on them while their producer waited for
    /// room: the two take turns being slow, and a deeper buffer lets each run on through the
    /// other's slow spells (it cannot lower the rate; its bytes are in the RAM budget).
    fn deepen_buffers(&self, tunables: &[Tunable], p: &Period) {
        for (t, &(starved, blocked)) in tunables.iter().zip(&p.waits) {
            let v = t.knob.get();
            if t.knob.kind != KnobKind::Buffer || v >= t.knob.max {
                continue;
            }
            if starved > 0.05 && blocked > 0.05 {
                let to = (2 * v).min(t.knob.max);
                let reason = format!(
                    "tuned: {v} -> {to}, as its consumer waited on it {:.0} % of the time while \
                     its producer waited for room {:.0} %",
                    100.0 * starved,
                    100.0 * blocked
                );
                self.set(t, to, reason);
            }
        }
    }

    /// Keeps a move that helped (or a move down that did not hurt), else undoes it.
    fn judge(
        &self,
        tunables: &[Tunable],
        t: Trial,
        p: &Period,
        cooldown_up: &mut Cooldowns,
        cooldown_down: &mut Cooldowns,
    ) -> bool {
        let Some(tun) = tunables.get(t.knob) else {
            return false;
        };
        let to = tun.knob.get();
        let (before, after) = (t.rate, p.rate);
        let kept = if t.up {
            after > before * 1.04
        } else {
            after >= before * 0.97
        };
        let name = tun.knob.name;
        if kept {
            let reason = if t.up {
                format!(
                    "tuned: {name} {} -> {to} raised the rate from {before:.0}/s to {after:.0}/s",
                    t.from
                )
            } else {
                format!(
                    "tuned: {name} {} -> {to} kept the rate ({before:.0}/s, now {after:.0}/s) with fewer threads",
                    t.from
                )
            };
            let _ = tun.knob.set(to, reason);
            // A move that helped may help again.
            if t.up {
                cooldown_up.remove(&t.knob);
            } else {
                cooldown_down.remove(&t.knob);
            }
        } else {
            let reason = if t.up {
                format!(
                    "tuned: {to} gave {after:.0}/s, no gain over {before:.0}/s at {}",
                    t.from
                )
            } else {
                format!(
                    "tuned: {to} lowered the rate to {after:.0}/s from {before:.0}/s at {}",
                    t.from
                )
            };
            self.set(tun, t.from, reason);
            cool(if t.up { cooldown_up } else { cooldown_down }, t.knob);
        }
        kept
    }

    /// The move to try next: up for the busiest stage where the CPU budget allows, else
    /// down to give threads back.
    fn next_move(
        &self,
        tunables: &[Tunable],
        p: &Period,
        cooldown_up: &Cooldowns,
        cooldown_down: &Cooldowns,
    ) -> Option<Trial> {
        let cooling = |m: &Cooldowns, i: usize| m.get(&i).is_some_and(|c| c.0 > 0);
        let cpu = p.cpu.unwrap_or(0.0);
        if cpu > self.budget * 1.15 {
            // Over the budget: take a thread from the least busy stage that has several.
            let (_, t) = tunables
                .iter()
                .enumerate()
                .filter(|(_, t)| t.knob.kind == KnobKind::Parallelism && t.knob.get() > 1)
                .min_by(|a, b| p.load[a.0].0.total_cmp(&p.load[b.0].0))?;
            let v = t.knob.get();
            let reason = format!(
                "tuned: the pipeline used {cpu:.2} cores, over its CPU budget of {}",
                self.budget
            );
            self.set(t, v - 1, reason);
            return None;
        }
        if !p.consumer_bound {
            let busiest = tunables
                .iter()
                .enumerate()
                .filter(|(i, t)| t.knob.get() < t.knob.max && !cooling(cooldown_up, *i))
                .filter_map(|(i, t)| Some((i, t, wants_more(t, p.load[i], p.waits[i])?)))
                .max_by(|a, b| a.2.total_cmp(&b.2));
            if let Some((i, t, pressure)) = busiest {
                let v = t.knob.get();
                let to = v + (v / 2).max(1);
                let per_worker = p.load[i].1.max(0.0);
                if cpu + per_worker * (to - v) as f64 <= self.budget * 1.05 || p.cpu.is_none() {
                    let what = match t.knob.kind {
                        KnobKind::Reads => "its consumer waited on reads",
                        _ => "its workers were busy",
                    };
                    let reason = format!(
                        "tuning: trying {to} ({what} {:.0} % of the time, the pipeline used \
                         {cpu:.2} of {} cores)",
                        100.0 * pressure,
                        self.budget
                    );
                    self.set(t, to, reason);
                    return Some(Trial {
                        knob: i,
                        from: v,
                        rate: p.rate,
                        up: true,
                    });
                }
                // The budget has no room for a worker that computes: try one fewer.
            }
        }
        let (i, t) = tunables
            .iter()
            .enumerate()
            .filter(|(i, t)| t.knob.get() > 1 && !cooling(cooldown_down, *i))
            .filter(|(i, t)| p.consumer_bound || may_do_with_fewer(t, p.load[*i], p.waits[*i]))
            .min_by(|a, b| p.load[a.0].0.total_cmp(&p.load[b.0].0))?;
        let v = t.knob.get();
        let why = if p.consumer_bound {
            "the consumer is the limit"
        } else {
            "fewer may do"
        };
        self.set(t, v - 1, format!("tuning: trying {} ({why})", v - 1));
        Some(Trial {
            knob: i,
            from: v,
            rate: p.rate,
            up: false,
        })
    }
}
