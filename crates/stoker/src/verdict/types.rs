//! What the verdict says: the stages' and thread groups' costs, and the advice.

use serde::Serialize;

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
