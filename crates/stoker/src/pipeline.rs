//! A runnable pipeline: the optimised plan, its stats, and how to start it.

use std::sync::{Arc, Mutex};

use stoker_core::exec::prefetch::Prefetch;
use stoker_core::exec::state::{put_varint, take_varint};
use stoker_core::exec::{BoxIter, Fused, State};
use stoker_core::seed::drawn_in_order;
use stoker_core::stats::StageSnapshot;
use stoker_core::{Error, Result, Seed, Seeds, StatsRegistry};

use crate::build::{iteration_epoch, BuildCtx, Resources};
use crate::datasets::options::WithOptions;
use crate::plan::{iterate_at, Plan};
use crate::planner::optimize;

pub struct Pipeline {
    plan: Plan,
    options: stoker_core::PipelineOptions,
    stats: Arc<StatsRegistry>,
    /// What its iterations share (memory caches).
    resources: Arc<Resources>,
    /// The planner's rewrites, for `explain()`.
    passes: Vec<(&'static str, usize)>,
    /// What `explain()` says about the rewrites.
    notes: Vec<String>,
    /// What the user should hear once about the plan (see [`Pipeline::warnings`]).
    warnings: Vec<String>,
    /// The stages that choose their parallelism within the budget (`AUTOTUNE`).
    autotuned_stages: usize,
    /// A hash of each step (pre-order), which a saved state carries (see [`Pipeline::save`]).
    step_hashes: Vec<u32>,
    /// The seeds of its steps, in pre-order.
    seeds: Vec<Seed>,
    /// What its drawn seeds stand for, in the plan's order, where that was taken from
    /// elsewhere (a restored state, rank 0 of a data-parallel job); else each its own number
    /// (see [`stoker_core::seed`]).
    seed_values: Mutex<Option<Vec<u64>>>,
}

/// A running iteration over a pipeline, on a driver thread.
pub struct Run {
    pub driver: Prefetch,
    /// What a state of this run records besides the driver's state.
    pub saved: Saved,
}

/// A saved state: which iteration over the pipeline it is in (it picks the epochs), the
/// thread budget its order was chosen for, what the drawn seeds stood for, and the state of
/// every step, or `None` at the start of the iteration (a state saved before its first
/// element, or after the end of the one before).
#[derive(Clone, Debug)]
pub struct Saved {
    pub iteration: u64,
    pub order_budget: usize,
    pub seed_values: Vec<u64>,
    pub state: Option<State>,
}

/// The first bytes of a saved state, and the version of its layout (`load` reads the older
/// layouts too: a state saved by an earlier stoker still resumes; what it lacks, the drawn
/// seeds' values or the skip counts, is taken as this process's seeds and as none).
const STATE_MAGIC: &[u8; 4] = b"STKS";
const STATE_VERSION: u64 = 3;

impl Pipeline {
    /// Optimises `plan` once; every iteration of the pipeline adds to the same stats.
    pub fn new(plan: &Plan) -> Result<Pipeline> {
        let crate::planner::Optimized {
            plan: optimized,
            applied: passes,
            notes,
            warnings,
            autotuned_stages,
        } = optimize(plan)?;
        Ok(Pipeline {
            options: optimized.options(),
            stats: StatsRegistry::new(),
            resources: Resources::new(),
            step_hashes: step_hashes(&optimized),
            seeds: preorder(&optimized)
                .iter()
                .flat_map(|p| p.step().seeds())
                .collect(),
            seed_values: Mutex::new(None),
            autotuned_stages,
            plan: optimized,
            passes,
            notes,
            warnings,
        })
    }

    fn taken_values(&self) -> Option<Vec<u64>> {
        self.seed_values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What the plan's drawn seeds stand for, in the plan's order.
    pub fn seed_values(&self) -> Vec<u64> {
        Seeds::new(&self.seeds, self.taken_values().as_deref()).values(&self.seeds)
    }

    /// Makes the runs started from now on take `values` for the plan's drawn seeds, in the
    /// plan's order (every rank of a data-parallel job takes rank 0's); an error if the plan
    /// does not have that many.
    pub fn set_seed_values(&self, values: Vec<u64>) -> Result<()> {
        let n = drawn_in_order(&self.seeds).len();
        if values.len() != n {
            return Err(Error::invalid(
                "seeds",
                format!(
                    "{} values for the {n} steps of this pipeline given no seed: they come from \
                     another pipeline",
                    values.len()
                ),
            ));
        }
        *self.seed_values.lock().unwrap_or_else(|e| e.into_inner()) = Some(values);
        Ok(())
    }

    /// The steps with a drawn seed (no seed given), as `explain()` names them.
    pub fn unseeded_steps(&self) -> Vec<String> {
        preorder(&self.plan)
            .iter()
            .filter(|p| p.step().seeds().iter().any(Seed::is_drawn))
            .map(|p| p.label())
            .collect()
    }

    /// The context of a run over the pipeline, iteration `iteration`.
    fn run(&self, iteration: u64) -> BuildCtx {
        let mut ctx = BuildCtx::new(
            self.options.clone(),
            Arc::clone(&self.stats),
            Arc::clone(&self.resources),
            iteration_epoch(iteration),
        );
        ctx.seeds = Arc::new(Seeds::new(&self.seeds, self.taken_values().as_deref()));
        ctx.autotuned_stages = self.autotuned_stages;
        ctx
    }

    /// The context of a run restored from `saved`, as iteration `iteration`: its seeds' values
    /// are taken for every later run too, so that the epochs after it draw as they would have.
    fn restored_run(&self, saved: &Saved, iteration: u64) -> Result<BuildCtx> {
        self.set_seed_values(saved.seed_values.clone())?;
        self.resources.resumed_iteration(iteration);
        let mut ctx = self.run(iteration);
        ctx.order_budget = saved.order_budget;
        Ok(ctx)
    }

    /// A state at the start of iteration `iteration` (the next one when `None`): what a
    /// restore starting that iteration afresh needs, before anything ran.
    pub fn start_state(&self, iteration: Option<u64>) -> Vec<u8> {
        let saved = Saved {
            iteration: iteration.unwrap_or_else(|| self.resources.peek_iteration()),
            order_budget: self.options.threads(),
            seed_values: self.seed_values(),
            state: None,
        };
        self.save(&saved, None)
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Iterates on the calling thread (asynchronous stages still use their own threads).
    pub fn iter(&self) -> Result<BoxIter> {
        let ctx = self.run(self.resources.next_iteration());
        Ok(Fused::wrap(iterate_at(&self.plan, &ctx, None)?))
    }

    /// Iterates on the calling thread from a state saved by [`Pipeline::save`].
    pub fn iter_at(&self, saved: &[u8]) -> Result<BoxIter> {
        let saved = self.load(saved)?;
        let ctx = self.restored_run(&saved, saved.iteration)?;
        Ok(Fused::wrap(iterate_at(
            &self.plan,
            &ctx,
            saved.state.as_ref(),
        )?))
    }

    /// Runs the pipeline on a driver thread, so that the consumer can wait with a time limit
    /// (e.g. to notice Ctrl-C). A final `prefetch` (under any options) becomes the driver;
    /// otherwise a one-element buffer is added.
    pub fn start(&self) -> Result<Prefetch> {
        Ok(self.start_at(None)?.driver)
    }

    /// Like [`start`](Pipeline::start), from a state saved by [`Pipeline::save`] when one is
    /// given: the elements are those the saved run would have handed out next (a state saved
    /// at the end of an iteration starts the next one).
    pub fn start_at(&self, saved: Option<&[u8]>) -> Result<Run> {
        self.start_with(saved, None)
    }

    /// Like [`start_at`](Pipeline::start_at) with a state; where the state is at the start of
    /// an iteration (saved before its first element, or after the end of the one before),
    /// `iteration` (when given) picks the iteration to start instead, with the state's seeds.
    pub fn start_from(&self, saved: &[u8], iteration: Option<u64>) -> Result<Run> {
        self.start_with(Some(saved), iteration)
    }

    /// Like [`start`](Pipeline::start), as iteration `iteration` (0 for the first): its
    /// reshuffles and random ops draw from that iteration's epoch whatever iterations came
    /// before, and the iterations after it go on from there.
    pub fn start_iteration(&self, iteration: u64) -> Result<Run> {
        self.start_with(None, Some(iteration))
    }

    fn start_with(&self, saved: Option<&[u8]>, iteration: Option<u64>) -> Result<Run> {
        let saved = saved.map(|bytes| self.load(bytes)).transpose()?;
        // A fresh cancel flag for this run: dropping the driver sets it.
        let ctx = match (&saved, iteration) {
            (Some(s @ Saved { state: None, .. }), Some(i)) => self.restored_run(s, i)?,
            (Some(s), Some(i)) if i != s.iteration => {
                return Err(Error::invalid(
                    "epoch",
                    format!(
                        "the state was saved inside epoch {} (iteration {0}); it cannot go on \
                         as epoch {i}: set that epoch, or leave it out",
                        s.iteration
                    ),
                ))
            }
            (Some(s), _) => self.restored_run(s, s.iteration)?,
            (None, Some(i)) => {
                self.resources.resumed_iteration(i);
                self.run(i)
            }
            (None, None) => self.run(self.resources.next_iteration()),
        };
        let at = saved.as_ref().and_then(|s| s.state.as_ref());
        // The last step that does something: options only pass their input through.
        let mut last = &self.plan;
        while let Some(o) = last.op::<WithOptions>() {
            last = &o.input;
        }
        let prefetch = last.op::<crate::datasets::prefetch::Prefetch>();
        let (inner, (capacity, bounds), stats) = match prefetch {
            // A prefetch reports (and restores at) its input's state.
            Some(p) if p.capacity(&ctx) != 0 => {
                let st = crate::plan::stage_stats(last, &ctx);
                let buffer = crate::tuner::buffer(&ctx, &st, p.buffer_size);
                (iterate_at(&p.input, &ctx, at)?, buffer, st)
            }
            _ => (
                iterate_at(&self.plan, &ctx, at)?,
                (1, Default::default()),
                self.stats.stage(0, "driver", "prefetch"),
            ),
        };
        if ctx.options.autotune.unwrap_or(true) && crate::tuner::tunes(&self.plan) {
            crate::tuner::Tuner::start(
                Arc::clone(&self.stats),
                Arc::clone(&stats),
                ctx.options.threads(),
                ctx.cancel.clone(),
            );
        }
        let stop = ctx.cancel.clone();
        let driver = Prefetch::spawn_bounded(inner, capacity, 1, stats, stop, bounds)?;
        Ok(Run {
            driver,
            saved: Saved {
                iteration: ctx.epoch >> 32,
                order_budget: ctx.order_budget,
                seed_values: ctx.seeds.values(&self.seeds),
                state: None,
            },
        })
    }

    /// The state `state` of the run `run` (what a run's driver reports; `None`: the start of
    /// `run`'s iteration) as bytes: a version, a hash of every step (so that it is never
    /// restored into another pipeline), the iteration, the order budget, the drawn seeds, the
    /// state, and a CRC32C of it all.
    pub fn save(&self, run: &Saved, state: Option<&State>) -> Vec<u8> {
        let mut out = STATE_MAGIC.to_vec();
        put_varint(&mut out, STATE_VERSION);
        put_varint(&mut out, self.step_hashes.len() as u64);
        for h in &self.step_hashes {
            out.extend_from_slice(&h.to_le_bytes());
        }
        put_varint(&mut out, run.iteration);
        put_varint(&mut out, run.order_budget as u64);
        put_varint(&mut out, run.seed_values.len() as u64);
        for v in &run.seed_values {
            out.extend_from_slice(&v.to_le_bytes());
        }
        match state {
            Some(state) => {
                out.push(1);
                state.encode(&mut out);
            }
            None => out.push(0),
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// The state after the end of `run`: the start of the next iteration, with its seeds.
    pub fn save_ended(&self, run: &Saved) -> Vec<u8> {
        let next = Saved {
            iteration: run.iteration + 1,
            state: None,
            ..run.clone()
        };
        self.save(&next, None)
    }

    /// Where `run` stands after the last element it handed out (after its end: at the end),
    /// as bytes for [`start_at`](Pipeline::start_at).
    pub fn state_of(&self, run: &Run) -> Result<Vec<u8>> {
        use stoker_core::exec::ElementIter;
        Ok(self.save(&run.saved, Some(&run.driver.state()?)))
    }

    /// The iteration and state in bytes from [`Pipeline::save`], checked against this
    /// pipeline: damaged bytes, another version or another pipeline are an
    /// [`Error::InvalidArgument`] saying what differs.
    pub fn load(&self, saved: &[u8]) -> Result<Saved> {
        let bad = |why: String| Error::invalid("state", why);
        let Some((body, crc)) = saved.split_last_chunk::<4>() else {
            return Err(bad(format!(
                "{} bytes are too few for a state",
                saved.len()
            )));
        };
        if !body.starts_with(STATE_MAGIC) {
            return Err(bad("these bytes are not a stoker iterator state".into()));
        }
        if crc32c::crc32c(body) != u32::from_le_bytes(*crc) {
            return Err(bad(
                "the state is damaged (its checksum does not match)".into()
            ));
        }
        let mut data = &body[STATE_MAGIC.len()..];
        let version = take_varint(&mut data)?;
        if !(1..=STATE_VERSION).contains(&version) {
            return Err(bad(format!(
                "the state has layout version {version}; this stoker reads 1 to {STATE_VERSION}"
            )));
        }
        let n = take_varint(&mut data)? as usize;
        let mut hashes = Vec::with_capacity(n.min(data.len() / 4));
        for _ in 0..n {
            let Some((h, rest)) = data.split_first_chunk::<4>() else {
                return Err(bad("the state is damaged: it ends in its step list".into()));
            };
            hashes.push(u32::from_le_bytes(*h));
            data = rest;
        }
        self.check_steps(&hashes)?;
        let iteration = take_varint(&mut data)?;
        let order_budget = take_varint(&mut data)?.clamp(1, 1 << 16) as usize;
        let (seed_values, state) = if version == 1 {
            // Before the drawn seeds were recorded: those of this process.
            (
                self.seed_values(),
                Some(State::decode_uncounted(&mut data)?),
            )
        } else {
            let n = take_varint(&mut data)?;
            if n > (data.len() / 8) as u64 {
                return Err(bad("the state is damaged: it ends in its seeds".into()));
            }
            let mut values = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let Some((v, rest)) = data.split_first_chunk::<8>() else {
                    return Err(bad("the state is damaged: it ends in its seeds".into()));
                };
                values.push(u64::from_le_bytes(*v));
                data = rest;
            }
            let state = match data.split_first() {
                Some((0, rest)) => {
                    data = rest;
                    None
                }
                Some((1, rest)) => {
                    data = rest;
                    Some(match version {
                        2 => State::decode_uncounted(&mut data)?,
                        _ => State::decode(&mut data)?,
                    })
                }
                _ => return Err(bad("the state is damaged: no step states".into())),
            };
            (values, state)
        };
        if !data.is_empty() {
            return Err(bad("the state is damaged: bytes follow it".into()));
        }
        Ok(Saved {
            iteration,
            order_budget,
            seed_values,
            state,
        })
    }

    fn check_steps(&self, saved: &[u32]) -> Result<()> {
        let steps = preorder(&self.plan);
        if let Some(i) =
            (0..steps.len().min(saved.len())).find(|&i| saved[i] != self.step_hashes[i])
        {
            return Err(Error::invalid(
                "state",
                format!(
                    "the state was saved from another pipeline: step {i} of this one, {}, \
                     is not the step it was saved at",
                    steps[i].label()
                ),
            ));
        }
        if saved.len() != steps.len() {
            return Err(Error::invalid(
                "state",
                format!(
                    "the state was saved from another pipeline: it has {} steps, this one {}",
                    saved.len(),
                    steps.len()
                ),
            ));
        }
        Ok(())
    }

    pub fn stats(&self) -> Vec<StageSnapshot> {
        self.stats.snapshot()
    }

    /// The bad records skipped before a saved state (from [`Pipeline::save`]) in its iteration:
    /// by the steps below a `shard` (each shard passes over the same records there), and by
    /// the others (see [`State::skipped`]); none at an iteration's start, or in a state saved
    /// before the counts were kept.
    pub fn skipped_in(&self, saved: &[u8]) -> Result<(u64, u64)> {
        Ok(self
            .load(saved)?
            .state
            .map_or((0, 0), |s| s.skipped_split()))
    }

    pub fn registry(&self) -> &Arc<StatsRegistry> {
        &self.stats
    }

    /// The planner's rewrites that changed the plan, with how many times each did.
    pub fn passes(&self) -> &[(&'static str, usize)] {
        &self.passes
    }

    /// The optimised plan, sink first, the thread budget, a line naming the planner's
    /// rewrites that made it (each can be switched off with `with_options(optimizations=...)`)
    /// and, for each shard, where it went and why it stopped there.
    pub fn explain(&self) -> String {
        let passes: Vec<String> = self
            .passes
            .iter()
            .map(|(name, n)| format!("{name} x{n}"))
            .collect();
        let passes = if passes.is_empty() {
            "none".to_string()
        } else {
            passes.join(", ")
        };
        let mut out = format!(
            "{}{}\n{}rewrites: {passes}\n",
            self.plan.describe(),
            self.budget_note(),
            self.ram_note()
        );
        for note in &self.notes {
            out.push_str(&format!("  {note}\n"));
        }
        out.push_str(&self.knobs_note());
        out
    }

    /// The RAM budget and what the buffers held of it, where a buffer is left to `AUTOTUNE`.
    fn ram_note(&self) -> String {
        fn tuned_buffer(p: &Plan) -> bool {
            matches!(
                p.step().buffer_knob(),
                Some((_, crate::properties::AUTOTUNE))
            ) || p.step().inputs().into_iter().any(tuned_buffer)
        }
        if !self.options.autotune.unwrap_or(true) || !tuned_buffer(&self.plan) {
            return String::new();
        }
        use stoker_core::ram::human_bytes as h;
        let ram = self.resources.ram(&self.options);
        format!(
            "ram budget: {} ({}) for the buffers left to AUTOTUNE; they held at most {}\n",
            h(ram.limit()),
            ram.source,
            h(ram.peak())
        )
    }

    /// The stages' knobs as they stand (after a run), the tuned ones marked, with why.
    fn knobs_note(&self) -> String {
        let mut out = String::new();
        for stage in self.stats.stages() {
            for k in stage.knobs() {
                let mark = if k.tuned { " [tuned]" } else { "" };
                out.push_str(&format!(
                    "  {}: {}={}{mark} ({})\n",
                    stage.name,
                    k.name,
                    k.get(),
                    k.reason()
                ));
            }
        }
        if out.is_empty() {
            return out;
        }
        format!("knobs:\n{out}")
    }

    /// The thread budget and where it comes from, as `explain()` says it.
    pub fn budget_note(&self) -> String {
        let budget = self.options.budget();
        let tuned = if self.options.autotune.unwrap_or(true) {
            ", tuned while it runs"
        } else {
            " (autotune=False)"
        };
        let shared = match self.autotuned_stages {
            0 => String::new(),
            1 => format!("; the stage left to AUTOTUNE starts with it{tuned}"),
            n => format!("; the {n} stages left to AUTOTUNE start with a share of it each{tuned}"),
        };
        format!(
            "thread budget: {} ({}){shared}",
            budget.threads, budget.source
        )
    }

    /// What the user should hear once about this plan: a rank's share that leaves work every
    /// rank repeats, with what to change.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// The plan's nodes, sink first, inputs in order (the order of a state's step hashes).
fn preorder(plan: &Plan) -> Vec<Plan> {
    let mut out = Vec::new();
    let mut stack = vec![plan.clone()];
    while let Some(p) = stack.pop() {
        stack.extend(p.step().inputs().into_iter().rev().cloned());
        out.push(p);
    }
    out
}

/// A hash of what each step computes: its kind, its description and its schema, leaving out
/// what does not change the elements (the thread budget).
fn step_hashes(plan: &Plan) -> Vec<u32> {
    preorder(plan)
        .iter()
        .map(|p| {
            let what = match p.op::<WithOptions>() {
                Some(o) => format!("{:?}", o.options.on_bad_record),
                None => p.label(),
            };
            let text = format!("{}\n{what}\n{}", p.step().kind(), p.schema());
            crc32c::crc32c(text.as_bytes())
        })
        .collect()
}
