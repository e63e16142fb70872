//! `shuffle(buffer_size, seed, reshuffle_each_iteration)`: a seeded shuffle buffer.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::shuffle::{epoch_seed, ShuffleIter};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, ErrorPolicy, Result, Seed, StageStats, StatsRegistry};

use super::common::same;
use crate::build::BuildCtx;
use crate::plan::{iterate, iterate_at, DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;

#[derive(Clone, Debug)]
pub struct Shuffle {
    pub input: Plan,
    pub buffer_size: usize,
    /// The seed given, or a drawn one (see [`stoker_core::seed`]).
    pub seed: Seed,
    pub reshuffle_each_iteration: bool,
}

impl Shuffle {
    /// `seed: None` draws one.
    pub fn new(
        input: Plan,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> Shuffle {
        Shuffle {
            input,
            buffer_size,
            seed: Seed::from_option(seed),
            reshuffle_each_iteration,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    buffer_size: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(default = "yes")]
    reshuffle_each_iteration: bool,
}

fn yes() -> bool {
    true
}

impl Plan {
    /// A seeded shuffle; `seed: None` draws one.
    pub fn shuffle(
        &self,
        buffer_size: usize,
        seed: Option<u64>,
        reshuffle_each_iteration: bool,
    ) -> Result<Plan> {
        Plan::new(Shuffle::new(
            self.clone(),
            buffer_size,
            seed,
            reshuffle_each_iteration,
        ))
    }
}

impl DatasetOp for Shuffle {
    const KIND: &'static str = "shuffle";
    type Spec = Spec;

    one_input!();

    fn keeps_count(&self) -> bool {
        true
    }

    fn shard_move(&self) -> crate::properties::ShardMove {
        crate::properties::ShardMove::Stops(
            "below it each shard would shuffle its own share in its own buffer, and the order \
             would change (global_shuffle over an indexed source reads only a rank's records)"
                .into(),
        )
    }

    fn schema(&self) -> Result<Schema> {
        if self.buffer_size == 0 {
            return Err(Error::schema("shuffle", "buffer_size must be at least 1"));
        }
        Ok(same(&self.input))
    }

    fn label(&self) -> String {
        format!("shuffle({})", self.buffer_size)
    }

    fn cardinality(&self) -> Cardinality {
        self.input.step().cardinality()
    }

    fn randomness(&self) -> Randomness {
        Randomness::Seeded
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
        let seed = if self.reshuffle_each_iteration {
            epoch_seed(ctx.seed(self.seed), ctx.epoch)
        } else {
            epoch_seed(ctx.seed(self.seed), 0)
        };
        let st = Arc::clone(&stats);
        let cap = self.buffer_size;
        // Only the skip policy drops bad records: otherwise nothing is counted.
        let counts = ctx.options.on_bad_record == ErrorPolicy::Skip;
        let Some(s) = at else {
            let it = ShuffleIter::new(iterate(&self.input, ctx)?, cap, seed, st).counting(counts);
            return Ok(Metered::wrap(Box::new(it), stats));
        };
        // Random access is set up only for a restore: it may scan files for their index.
        // Where the input may skip bad elements, positions are not element counts: the
        // buffer is found by running the input again instead.
        let access = self.input.step().random_access(&self.input, ctx)?;
        let it = match access.filter(|a| !a.may_skip()) {
            // The buffer's elements are read where they are (on a thread of their own, when
            // the budget has a second thread), and the input starts after the elements taken.
            // Where they are is found (indexes read) while the buffer's decisions are
            // replayed, again when the budget has a second thread.
            Some(access) => {
                let access: Arc<dyn RandomAccess> = Arc::from(access);
                let parallel = ctx.options.threads() > 1;
                std::thread::scope(|scope| {
                    let taken = ShuffleIter::taken(s)?;
                    let ready = parallel.then(|| {
                        let access = Arc::clone(&access);
                        scope.spawn(move || access.prepare(taken))
                    });
                    ShuffleIter::restore_reading(cap, st, s, parallel, |positions, taken| {
                        if let Some(ready) = ready {
                            ready.join().map_err(|_| {
                                Error::internal("the thread reading the input's index panicked")
                            })??;
                        }
                        let (read, at) = access.reader_and_state_at(positions.to_vec(), taken)?;
                        Ok((read, iterate_at(&self.input, ctx, Some(&at))?))
                    })
                })?
            }
            // The input runs again from the start of the pass to find the buffer's elements
            // and goes on from there.
            None if ctx.options.on_bad_record != ErrorPolicy::Skip => {
                ShuffleIter::restore(iterate(&self.input, ctx)?, cap, st, s)?
            }
            // Bad elements skipped on the way were counted by the saved run: the replay runs
            // with counters of no stage, then the input is opened again where it stopped,
            // with the pipeline's own.
            None => ShuffleIter::restore_with(cap, st, s, |positions, taken| {
                let uncounted = BuildCtx {
                    stats: StatsRegistry::new(),
                    ..ctx.clone()
                };
                let mut replay = iterate(&self.input, &uncounted)?;
                let buffer = stoker_core::exec::state::replay(&mut replay, taken, positions)?;
                let at = replay.state()?;
                drop(replay);
                Ok((buffer, iterate_at(&self.input, ctx, Some(&at))?))
            })?,
        };
        Ok(Metered::wrap(Box::new(it.counting(counts)), stats))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            buffer_size: self.buffer_size,
            seed: self.seed.given_value(),
            reshuffle_each_iteration: self.reshuffle_each_iteration,
        }))
    }

    fn from_spec(s: Spec, input: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Ok(Shuffle::new(
            super::common::input_of(input)?,
            s.buffer_size,
            s.seed,
            s.reshuffle_each_iteration,
        ))
    }
}
