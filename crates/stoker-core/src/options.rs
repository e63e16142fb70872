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
    /// Worker threads the pipeline may keep busy (its CPU budget); default: all cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Whether parallel maps keep their input's order where they do not say (tf.data's
    /// `Options.deterministic`); default yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<bool>,
    /// The planner's rewrites switched on or off by name (all are on by default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub optimizations: BTreeMap<String, bool>,
}

impl PipelineOptions {
    /// The CPU budget in threads.
    pub fn threads(&self) -> usize {
        self.threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }
}
