//! Options that apply to a whole pipeline.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What to do with a bad record (corrupt framing, unparsable content).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorPolicy {
    /// Stop with an error naming the file, record and offset (the default).
    #[default]
    Raise,
    /// Skip the record, count it in the stage's stats and go on.
    Skip,
}

/// Pipeline-wide options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineOptions {
    #[serde(default)]
    pub on_bad_record: ErrorPolicy,
    /// Worker threads the pipeline may keep busy (its CPU budget); default: its share of the
    /// cores it may run on (see [`PipelineOptions::budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Whether parallel maps keep their input's order where they do not say (tf.data's
    /// `Options.deterministic`); default yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<bool>,
    /// Whether the stages left to `AUTOTUNE` are tuned while they run (default yes); off, each
    /// keeps its share of the thread budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autotune: Option<bool>,
    /// Bytes the buffers left to `AUTOTUNE` may hold together (tf.data's
    /// `autotune.ram_budget`); default half of the memory available to the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ram_budget: Option<u64>,
    /// The planner's rewrites switched on or off by name (all are on by default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub optimizations: BTreeMap<String, bool>,
}

impl PipelineOptions {
    /// The CPU budget in threads.
    pub fn threads(&self) -> usize {
        self.budget().threads
    }

    /// The CPU budget in threads, and where it comes from: the `threads` option, else this
    /// process's share of the cores it may run on (its affinity mask and CPU quota), shared
    /// with the other ranks of a data-parallel job on this machine (see [`local_ranks`]).
    pub fn budget(&self) -> Budget {
        if let Some(n) = self.threads {
            return Budget {
                threads: n.max(1),
                source: format!("threads={n}, as set"),
            };
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ranks, from) = local_ranks();
        let threads = (cores / ranks.max(1)).max(1);
        let what = if cores == 1 { "core" } else { "cores" };
        let source = if ranks > 1 {
            format!(
                "the {cores} {what} this process may run on, shared by {ranks} ranks on this \
                 machine ({from})"
            )
        } else {
            format!("the {cores} {what} this process may run on")
        };
        Budget { threads, source }
    }
}

/// A pipeline's CPU budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub threads: usize,
    /// Where the number comes from, for `explain()` and `stats()`.
    pub source: String,
}

static LOCAL_RANKS_SET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static LOCAL_RANKS_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Where a number of ranks on this machine comes from (see [`set_local_ranks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RanksFrom {
    /// The user said it (`stoker.set_local_ranks`): it wins.
    User,
    /// A framework adapter counted the ranks of the job's process group on this host: it
    /// counts where no `LOCAL_WORLD_SIZE` says otherwise.
    ProcessGroup,
}

/// Sets the number of ranks of a data-parallel job that run on this machine: each rank's
/// default budget is its share of the cores. 0 forgets it.
pub fn set_local_ranks(n: usize, from: RanksFrom) {
    let slot = match from {
        RanksFrom::User => &LOCAL_RANKS_SET,
        RanksFrom::ProcessGroup => &LOCAL_RANKS_SEEN,
    };
    slot.store(n, std::sync::atomic::Ordering::Relaxed);
}

/// The ranks of a data-parallel job on this machine, and where the number comes from: what
/// the user set, else `LOCAL_WORLD_SIZE` (set by `torchrun` and other launchers), else what
/// the adapters counted in the job's process group, else 1.
pub fn local_ranks() -> (usize, &'static str) {
    let set = LOCAL_RANKS_SET.load(std::sync::atomic::Ordering::Relaxed);
    if set > 0 {
        return (set, "set_local_ranks");
    }
    if let Some(n) = std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return (n, "LOCAL_WORLD_SIZE");
    }
    match LOCAL_RANKS_SEEN.load(std::sync::atomic::Ordering::Relaxed) {
        0 => (1, "one process"),
        n => (n, "the job's process group"),
    }
}
