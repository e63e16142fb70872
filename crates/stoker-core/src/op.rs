//! Native and user-supplied transformations of elements.

use std::any::Any;
use std::fmt::Debug;

use crate::dtype::DType;
use crate::element::{Element, Schema};
use crate::error::Result;
use crate::options::ErrorPolicy;
use crate::row_slots::{RowSlot, RowSlots};
use crate::seed::{Seed, Seeds};
use crate::stats::StageStats;

/// What an op may use while it runs.
pub struct OpCtx<'a> {
    pub policy: ErrorPolicy,
    pub stats: &'a StageStats,
    /// The element's position in this pass over the stage's input (0, 1, 2, ...), whichever
    /// worker thread runs it.
    pub element: u64,
    /// Which pass over the stage this is (0 for the first iteration, then 1, ...).
    pub epoch: u64,
    /// The element's row of the batch it goes into, when a batch offers it: an op making a
    /// field of the row's dtype and shape may write it there (see [`OpCtx::row_slot`]).
    pub row: Option<&'a RowSlots>,
    /// What the drawn seeds stand for in this run.
    pub seeds: &'a Seeds,
    /// Bad records the ops dropped under the skip policy while applied to this element (see
    /// [`OpCtx::skip`]).
    pub skipped: std::cell::Cell<u64>,
}

impl<'a> OpCtx<'a> {
    /// A seed for random decisions about this element: fixed by the op's `seed` (a drawn one
    /// as this run resolves it), the epoch and the element's position, so results do not
    /// depend on the number of threads or on which thread ran the element, and change from
    /// epoch to epoch.
    pub fn element_seed(&self, seed: Seed) -> u64 {
        use crate::exec::shuffle::epoch_seed;
        epoch_seed(
            epoch_seed(self.seeds.resolve(seed), self.epoch),
            self.element,
        )
    }

    /// Counts one bad record dropped under the skip policy, with its reason: in the stage's
    /// counters, and for the state of the stage that hands the element out.
    pub fn skip(&self, reason: impl Into<String>) {
        self.stats.add_skip(reason);
        self.skipped.set(self.skipped.get() + 1);
    }

    /// The batch row of field `name`, to write `dtype` values of `shape` into, when a batch
    /// offers one of exactly that dtype and shape and no earlier op took it.
    pub fn row_slot(&self, name: &str, dtype: DType, shape: &[usize]) -> Option<RowSlot<'a>> {
        self.row?.take(name, dtype, shape)
    }
}

/// The fields an op reads and writes, as it declares them: a fusion looks past an op, and
/// the planner moves one past another, only when their fields are apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fields {
    /// Reads `reads` and writes (makes or replaces) `writes`; every other field passes
    /// through unchanged.
    Named {
        reads: Vec<String>,
        writes: Vec<String>,
    },
    /// May read, write or drop any field: user code stoker cannot see into, or an op that
    /// builds a new element.
    All,
}

impl Fields {
    /// Reads `field` and writes `output` (`field` itself when `None`).
    pub fn one(field: &str, output: Option<&str>) -> Fields {
        Fields::Named {
            reads: vec![field.to_string()],
            writes: vec![output.unwrap_or(field).to_string()],
        }
    }

    /// Both ops' fields.
    pub fn and(self, other: Fields) -> Fields {
        match (self, other) {
            (
                Fields::Named { reads, writes },
                Fields::Named {
                    reads: r2,
                    writes: w2,
                },
            ) => Fields::Named {
                reads: reads.into_iter().chain(r2).collect(),
                writes: writes.into_iter().chain(w2).collect(),
            },
            _ => Fields::All,
        }
    }

    /// Whether the op may read or write `field`.
    pub fn touches(&self, field: &str) -> bool {
        match self {
            Fields::Named { reads, writes } => reads.iter().chain(writes).any(|f| f == field),
            Fields::All => true,
        }
    }
}

/// A transformation of one element (or of one batch, for element-wise ops). An op is `Any`,
/// so that a fusion recognises the ops it takes by their type.
pub trait Op: Any + Send + Sync + Debug {
    /// Short name used in errors and stats, e.g. `parse_example`.
    fn name(&self) -> &str;

    /// The schema this op produces from `input`; fails when the op cannot work on it, so
    /// that a wrong pipeline fails when it is built.
    fn output_schema(&self, input: &Schema) -> Result<Schema>;

    /// Transforms one element. `Ok(None)` drops it (a bad record under the `skip` policy,
    /// counted in `ctx.stats`).
    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>>;

    /// True when the op works row by row on any number of leading dimensions, so that
    /// `batch` then `op` gives the same result as `op` then `batch`. The planner uses this to
    /// move the op after the batch, where it runs once per batch instead of once per element.
    fn elementwise(&self) -> bool {
        false
    }

    /// The fields the op reads and writes; [`Fields::All`] (the default) when it does not say.
    fn fields(&self) -> Fields {
        Fields::All
    }

    /// True when the op gives the same output for the same input in every pass: false for ops
    /// that draw random numbers (from their seed, the epoch and the element's position), for
    /// fused ops holding such an op, and for user code stoker cannot see into (a Python
    /// function). The verdict caches only stages made of deterministic ops.
    fn deterministic(&self) -> bool {
        true
    }

    /// True when, on a batch, the op drops the rows of bad records under the `skip` policy
    /// (a batched `parse_example`), so that its batches come out short: the map running it
    /// refills them (see [`crate::exec::refill`]).
    fn drops_rows(&self) -> bool {
        false
    }

    /// The field whose batch row this op writes itself when a batch offers one
    /// ([`OpCtx::row_slot`]), so that running it per element costs no copy into the batch;
    /// `None` (the default) when the batch copies what the op makes. The planner keeps such
    /// ops before the batch (see the `stoker` crate's planner).
    fn batch_row_field(&self) -> Option<&str> {
        None
    }

    /// The seeds it draws from, in a fixed order (a fused op: its parts' in turn), so that a
    /// pipeline can give its drawn seeds their values (see [`crate::seed`]).
    fn seeds(&self) -> Vec<Seed> {
        Vec::new()
    }

    /// What kind of work it is, where the advice on a slow pipeline depends on it.
    fn work(&self) -> Work {
        Work::Other
    }

    /// A serialisable description (`{"op": "...", ...}`), or an error for ops that cannot be
    /// saved (Python functions).
    fn spec(&self) -> Result<serde_json::Value>;
}

/// What kind of work an op does (see [`Op::work`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// Decodes compressed images (JPEG, PNG, ...): work that can be moved offline, once.
    DecodeImage,
    /// Opens and reads a whole file per element: many small files cost more than the bytes.
    ReadFile,
    Other,
}

/// A test of one element, for `filter`.
pub trait Predicate: Send + Sync + Debug {
    fn name(&self) -> &str;
    /// Whether the predicate holds; an element it could not be tested on, skipped under the
    /// `skip` policy (counted in `ctx.stats`), is `false`.
    fn test(&self, element: &Element, ctx: &OpCtx<'_>) -> Result<bool> {
        Ok(self.test_or_skip(element, ctx)?.unwrap_or(false))
    }
    /// Whether the predicate holds, or `None` for an element it could not be tested on and
    /// skipped under the `skip` policy (counted): an operator for which `false` means more than
    /// leaving the element out (`take_while` ends there) tells the two apart.
    fn test_or_skip(&self, element: &Element, ctx: &OpCtx<'_>) -> Result<Option<bool>>;
    fn spec(&self) -> Result<serde_json::Value>;
}
