//! The advice, as rules: each a small function of the run's [`Facts`] that says when it
//! applies, what the change would gain (the model's what-if), and why. [`RULES`] lists them
//! in the order their advice is given when gains tie.

use stoker_core::op::Work;

use super::model::{
    deterministic_prefix, element_bytes, gain, headroom, last_deterministic, parallelism_knob,
    Facts,
};
use super::types::Recommendation;
use crate::datasets::{cache::Cache, map::Map, options::WithOptions, prefetch::Prefetch};
use crate::plan::Plan;

/// A rule: the advice it gives on a run, if any.
pub(super) type Rule = fn(&Facts<'_>) -> Option<Recommendation>;

pub(super) const RULES: &[Rule] = &[
    more_threads,
    wait_on_more_threads,
    native_ops,
    batch_first,
    cache_prefix,
    decode_offline,
    pack_small_files,
    prefetch_at_end,
];

/// The bottleneck stage, with what the rules about it read.
struct Limit<'f> {
    index: usize,
    plan: &'f Plan,
    name: String,
    /// Milliseconds of its own work per element.
    per: f64,
    workers_now: usize,
    /// The share of its time Python computed (holding the GIL), and the share it waited with
    /// the GIL released: more threads help the latter, not the former.
    python_share: f64,
    wait_share: f64,
    python_s: f64,
    python_cpu_s: f64,
    python_calls: u64,
    evidence: String,
}

fn limit<'f>(f: &'f Facts<'_>) -> Option<Limit<'f>> {
    let index = f.bottleneck?;
    let node = &f.model.nodes[index];
    let g = &f.groups[node.group];
    let name = node.snap.name.clone();
    let per = f.stages[index].ms_per_element;
    let (python_share, wait_share) = if node.snap.busy_s > 0.0 {
        (
            node.snap.python_cpu_s / node.snap.busy_s,
            (node.snap.python_s - node.snap.python_cpu_s).max(0.0) / node.snap.busy_s,
        )
    } else {
        (0.0, 0.0)
    };
    let evidence = format!(
        "'{name}' takes {per:.3} ms per element ({:.2} s busy of a {:.2} s run); its {} \
         thread(s) are {:.0} % busy, the most of any stage",
        node.snap.busy_s,
        f.wall,
        g.threads,
        g.utilisation * 100.0
    );
    Some(Limit {
        index,
        plan: node.plan,
        name,
        per,
        workers_now: g.threads,
        python_share,
        wait_share,
        python_s: node.snap.python_s,
        python_cpu_s: node.snap.python_cpu_s,
        python_calls: node.snap.python_calls,
        evidence,
    })
}

/// Whether the tuner sets stage `index`'s parallelism while it runs (advice on it is moot).
fn tuned(f: &Facts<'_>, index: usize) -> bool {
    f.model.nodes[index]
        .snap
        .knobs
        .iter()
        .any(|k| k.tuned && k.kind == stoker_core::knob::KnobKind::Parallelism)
}

/// More threads for the bottleneck: a stage on a shared thread moves to a group of its own; a
/// parallel stage's group gets the whole budget. Not for a stage mostly in Python: threads
/// would take turns holding the GIL (and lose time handing it over), so native ops are the
/// advice there.
fn more_threads(f: &Facts<'_>) -> Option<Recommendation> {
    let l = limit(f)?;
    let (knob, _) = parallelism_knob(l.plan)?;
    let k = f.budget;
    if k <= l.workers_now || l.python_share > 0.5 || tuned(f, l.index) {
        return None;
    }
    let node = &f.model.nodes[l.index];
    let mut t2 = f.threads.clone();
    let mut group_of = f.identity.clone();
    if node.snap.workers > 1 {
        t2[node.group] = k;
    } else {
        t2.push(k);
        group_of[l.index] = t2.len() - 1;
    }
    let mut after = headroom(&f.busy, &group_of, &t2, f.wall, f.budget);
    let mut evidence = l.evidence.clone();
    if l.wait_share > 0.2 {
        evidence.push_str(&format!(
            "; {:.0} % of its time its Python function waited with the GIL released (I/O, a \
             sleep), which other threads can use",
            l.wait_share * 100.0
        ));
    }
    if l.python_share > 0.2 {
        // Python code runs one thread at a time.
        after = after.min((f.wall / f.python_total).max(f.before));
        evidence.push_str(&format!(
            "; {:.0} % of its time is in Python, which holds the GIL, so more threads help \
             only up to the GIL's limit",
            l.python_share * 100.0
        ));
    }
    let (name, budget) = (&l.name, f.budget);
    Some(Recommendation {
        action: format!(
            "raise the parallelism of '{name}' to {k} ({knob}=stoker.AUTOTUNE lets the tuner \
             choose, within the budget of {budget} threads)"
        ),
        stage: Some(l.name.clone()),
        predicted_gain_percent: gain(after, f.before),
        evidence,
    })
}

/// A stage that mostly waits, on all the budget's threads already: threads waiting use no
/// CPU, so more of them than cores help, up to where their computing fills the cores.
fn wait_on_more_threads(f: &Facts<'_>) -> Option<Recommendation> {
    let l = limit(f)?;
    let budget = f.budget;
    if l.wait_share <= 0.5
        || l.workers_now < budget
        || parallelism_knob(l.plan).is_none()
        || tuned(f, l.index)
    {
        return None;
    }
    let computing = (1.0 - l.wait_share).max(0.01);
    let k = ((budget as f64 / computing).ceil() as usize).clamp(budget + 1, 8 * budget);
    let name = &l.name;
    Some(Recommendation {
        action: format!(
            "let '{name}' wait on more threads than cores: num_parallel_calls=stoker.AUTOTUNE \
             (the tuner gives a stage that waits threads beyond the cores), or {k} with \
             with_options(threads={k})"
        ),
        stage: Some(l.name.clone()),
        predicted_gain_percent: gain(k as f64, l.workers_now as f64),
        evidence: format!(
            "{}; {:.0} % of its time its Python function waited with the GIL released (I/O, a \
             sleep: {:.2} s of {:.2} s in Python), using no CPU, so {k} threads keep about \
             {budget} cores busy",
            l.evidence,
            l.wait_share * 100.0,
            (l.python_s - l.python_cpu_s).max(0.0),
            l.python_s,
        ),
    })
}

/// Native ops instead of a Python function that computes (holding the GIL).
fn native_ops(f: &Facts<'_>) -> Option<Recommendation> {
    let l = limit(f)?;
    if l.python_share <= 0.3 {
        return None;
    }
    let budget = f.budget;
    let mut t2 = f.threads.clone();
    t2.push(budget);
    let mut group_of = f.identity.clone();
    group_of[l.index] = t2.len() - 1;
    let mut after = headroom(&f.busy, &group_of, &t2, f.wall, budget);
    // Its threads already take turns on the GIL: Python ran about `python_total / wall`
    // threads' worth, where native ops would run all of them.
    let gil = f.python_total / f.wall;
    if l.workers_now > 1 && gil > 0.5 {
        let threads_worth = l.workers_now.min(budget) as f64;
        after = after.max(f.before * (threads_worth / gil).min(budget as f64));
    }
    let name = &l.name;
    Some(Recommendation {
        action: format!(
            "replace the Python function in '{name}' with native ops (stoker.ops), which run \
             on all {budget} threads without the GIL"
        ),
        stage: Some(l.name.clone()),
        predicted_gain_percent: gain(after.max(f.before), f.before),
        evidence: format!(
            "{}; {:.2} s of it ({:.0} %) is Python computing, holding the GIL ({} calls). The \
             gain assumes native ops as fast as the Python code; they are usually faster",
            l.evidence,
            l.python_cpu_s,
            l.python_share * 100.0,
            l.python_calls
        ),
    })
}

/// A per-element Python function cheap enough that the call itself is most of its cost:
/// batch first, then map over whole batches.
fn batch_first(f: &Facts<'_>) -> Option<Recommendation> {
    let l = limit(f)?;
    if l.python_share <= 0.3 || l.per >= 0.1 {
        return None;
    }
    let name = &l.name;
    Some(Recommendation {
        action: format!(
            "move '{name}' after the batch and make it work on whole batches (vectorised): \
             its per-call overhead is then paid once per batch"
        ),
        stage: Some(l.name.clone()),
        predicted_gain_percent: None,
        evidence: format!(
            "{}; at {:.1} µs per element, most of it is the cost of a Python call",
            l.evidence,
            l.per * 1e3
        ),
    })
}

/// A cache after the chain from the source that hands out the same elements every pass,
/// where that chain takes a fair share of the work and no cache is there yet.
fn cache_prefix(f: &Facts<'_>) -> Option<Recommendation> {
    if f.model.nodes.iter().any(|n| n.plan.op::<Cache>().is_some()) {
        return None;
    }
    let (top, top_plan, share, removed) = deterministic_prefix(f.plan, &f.model, f.total_busy)?;
    if share < 0.2 {
        return None;
    }
    let busy_after: Vec<f64> = (f.busy.iter().enumerate())
        .map(|(i, b)| if removed.contains(&i) { 0.0 } else { *b })
        .collect();
    let after = headroom(&busy_after, &f.identity, &f.threads, f.wall, f.budget);
    // Where the planner moved ops after a batch, the last deterministic stage that ran is a
    // map the user did not write: name theirs (the batch, say) instead.
    let (place, moved) = match last_deterministic(f.written) {
        Some(w) if w != top => (
            w.clone(),
            format!(" (in the plan that ran, '{top}'; see explain())"),
        ),
        _ => (top.clone(), String::new()),
    };
    let holds = match element_bytes(top_plan) {
        Some(b) => format!(
            "; the cache holds {:.2} MB per element of its output",
            b as f64 / 1e6
        ),
        None => String::new(),
    };
    Some(Recommendation {
        action: format!(
            "add .cache() after '{place}': everything up to it gives the same elements every \
             epoch, so from the second epoch on it is read from the cache (in memory, or \
             .cache(filename) on disk)",
        ),
        stage: Some(top.clone()),
        predicted_gain_percent: gain(after, f.before),
        evidence: format!(
            "the stages up to '{place}'{moved} are deterministic (no random op, Python \
             function or shuffle) and take {:.0} % of the pipeline's busy time{holds}",
            share * 100.0,
        ),
    })
}

/// Image decoding most of the work: preprocess offline, once (`convert`), and decode only the
/// crop online.
fn decode_offline(f: &Facts<'_>) -> Option<Recommendation> {
    let (decode, decode_s, decodes) = f.work_share(Work::DecodeImage);
    if decode < 0.5 {
        return None;
    }
    Some(Recommendation {
        action: format!(
            "{}; for JPEGs, a random_resized_crop right after the decode (in the same map) \
             decodes only the crop, and at 1/2 to 1/8 scale where the crop is resized down \
             that much (libjpeg-turbo build, the default); for PNGs, a \
             resize_with_crop_or_pad right after the decode decodes only the rows down to the \
             crop's last, and of them only the bytes up to the crop's right edge",
            ConvertHint::of(f.written).advice()
        ),
        stage: None,
        predicted_gain_percent: None,
        evidence: format!(
            "image decoding takes {:.0} % of the pipeline's busy time ({decode_s:.2} s for \
             {decodes} images, {:.2} ms each)",
            decode * 100.0,
            decode_s * 1e3 / decodes.max(1) as f64
        ),
    })
}

/// Reading many small files a fair share of the work: pack them into a few TFRecord files.
fn pack_small_files(f: &Facts<'_>) -> Option<Recommendation> {
    let (read, read_s, reads) = f.work_share(Work::ReadFile);
    if read < 0.2 {
        return None;
    }
    Some(Recommendation {
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
    })
}

/// A prefetch at the end (options are not a stage).
fn prefetch_at_end(f: &Facts<'_>) -> Option<Recommendation> {
    let mut sink = f.plan;
    while let Some(o) = sink.op::<WithOptions>() {
        sink = &o.input;
    }
    if sink.op::<Prefetch>().is_some() {
        return None;
    }
    Some(Recommendation {
        action: "end the pipeline with .prefetch(stoker.AUTOTUNE)".into(),
        stage: None,
        predicted_gain_percent: None,
        evidence: format!(
            "the last stage is '{}': only a one-element buffer lets the pipeline work while the \
             training step runs, so any slow element stalls the step",
            sink.label()
        ),
    })
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
                        .is_some_and(|m| m.ops.iter().any(|o| o.work() == Work::DecodeImage))
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use stoker_core::op::Work;
    use stoker_core::stats::StageSnapshot;

    use super::super::model::Facts;
    use super::*;
    use crate::datasets::range::Range;

    /// A run where each node of `plan` (sink first, along first inputs) took `busy` seconds
    /// for `elements` elements on `workers` threads, with `python` (seconds in Python, of
    /// them computing) of it in a Python function.
    struct Run {
        plan: Plan,
        snaps: HashMap<u64, StageSnapshot>,
    }

    impl Run {
        fn new(plan: Plan) -> Run {
            Run {
                plan,
                snaps: HashMap::new(),
            }
        }

        fn stage(mut self, depth: usize, busy: f64, elements: u64, workers: u64) -> Run {
            self = self.python(depth, 0.0, 0.0);
            let s = self.snap(depth);
            s.busy_s = busy;
            s.elements = elements;
            s.workers = workers;
            self
        }

        fn python(mut self, depth: usize, seconds: f64, computing: f64) -> Run {
            let s = self.snap(depth);
            s.python_s = seconds;
            s.python_cpu_s = computing;
            s.python_calls = 100;
            self
        }

        fn snap(&mut self, depth: usize) -> &mut StageSnapshot {
            let mut p = self.plan.clone();
            for _ in 0..depth {
                p = p.step().inputs()[0].clone();
            }
            self.snaps.entry(p.id()).or_insert_with(|| StageSnapshot {
                name: p.label(),
                kind: p.step().kind().into(),
                ..Default::default()
            })
        }

        fn facts(&self, budget: usize) -> Facts<'_> {
            Facts::new(&self.plan, &self.plan, &self.snaps, 1.0, budget, &[])
        }
    }

    fn range() -> Plan {
        Plan::new(Range {
            start: 0,
            stop: 1000,
            step: 1,
        })
        .unwrap()
    }

    /// range -> map on the calling thread (no parallelism set).
    fn serial_map() -> Plan {
        range().map(Vec::new(), None, None).unwrap()
    }

    #[test]
    fn more_threads_for_a_busy_serial_stage() {
        let run = Run::new(serial_map()).stage(0, 0.9, 1000, 0);
        let r = more_threads(&run.facts(4)).expect("advice");
        assert!(
            r.action.contains("to 4 (num_parallel_calls"),
            "{}",
            r.action
        );
        // What-if: the map alone on 4 threads, against the driver thread it shared.
        let gain = r.predicted_gain_percent.unwrap();
        assert!(
            (gain - 100.0 / 0.9 * 1.0 - 0.0).abs() > 0.0 && gain > 100.0,
            "{gain}"
        );
        assert!(r.evidence.contains("90 % busy"), "{}", r.evidence);
        // Not for a stage mostly computing in Python (the GIL), nor with no budget left.
        let python = Run::new(serial_map())
            .stage(0, 0.9, 1000, 0)
            .python(0, 0.8, 0.8);
        assert!(more_threads(&python.facts(4)).is_none());
        assert!(more_threads(&run.facts(1)).is_none());
    }

    #[test]
    fn waiting_stages_get_more_threads_than_cores() {
        let run = Run::new(range().map(Vec::new(), Some(4), None).unwrap())
            .stage(0, 3.8, 1000, 4)
            .python(0, 3.6, 0.4);
        let r = wait_on_more_threads(&run.facts(4)).expect("advice");
        // It waits (3.6 - 0.4) / 3.8 of its time: 4 cores' worth of computing takes 26 threads.
        assert!(r.action.contains("threads=26"), "{}", r.action);
        assert_eq!(r.predicted_gain_percent.map(|g| g.round()), Some(550.0));
        assert!(r.evidence.contains("using no CPU"), "{}", r.evidence);
        let computing = Run::new(range().map(Vec::new(), Some(4), None).unwrap())
            .stage(0, 3.8, 1000, 4)
            .python(0, 3.6, 3.0);
        assert!(wait_on_more_threads(&computing.facts(4)).is_none());
    }

    #[test]
    fn native_ops_for_python_that_computes() {
        let run = Run::new(serial_map())
            .stage(0, 0.9, 1000, 0)
            .python(0, 0.8, 0.8);
        let r = native_ops(&run.facts(4)).expect("advice");
        assert!(r.action.contains("native ops (stoker.ops)"), "{}", r.action);
        assert!(r.predicted_gain_percent.unwrap() > 100.0);
        assert!(
            r.evidence.contains("(89 %) is Python computing"),
            "{}",
            r.evidence
        );
        let waits = Run::new(serial_map())
            .stage(0, 0.9, 1000, 0)
            .python(0, 0.8, 0.1);
        assert!(native_ops(&waits.facts(4)).is_none());
    }

    #[test]
    fn batch_first_when_the_call_is_the_cost() {
        let cheap = Run::new(serial_map())
            .stage(0, 0.9, 100_000, 0)
            .python(0, 0.8, 0.8);
        let r = batch_first(&cheap.facts(4)).expect("advice");
        assert!(r.action.contains("after the batch"), "{}", r.action);
        assert_eq!(r.predicted_gain_percent, None);
        assert!(r.evidence.contains("9.0 µs per element"), "{}", r.evidence);
        let costly = Run::new(serial_map())
            .stage(0, 0.9, 1000, 0)
            .python(0, 0.8, 0.8);
        assert!(batch_first(&costly.facts(4)).is_none());
    }

    #[test]
    fn cache_after_the_fixed_prefix() {
        let run = Run::new(serial_map())
            .stage(0, 0.6, 1000, 0)
            .stage(1, 0.1, 1000, 0);
        let r = cache_prefix(&run.facts(4)).expect("advice");
        assert!(
            r.action.starts_with("add .cache() after 'map[]'"),
            "{}",
            r.action
        );
        assert!(
            r.evidence.contains("100 % of the pipeline's busy time"),
            "{}",
            r.evidence
        );
        // Cached, every stage's work is gone: the prediction is unbounded.
        assert_eq!(r.predicted_gain_percent, None);
        // Not over a step drawing random numbers each pass.
        let shuffled = range().shuffle(10, Some(1), true).unwrap();
        let run = Run::new(shuffled.map(Vec::new(), None, None).unwrap())
            .stage(0, 0.6, 1000, 0)
            .stage(1, 0.1, 1000, 0);
        assert!(cache_prefix(&run.facts(4)).is_none());
        // Nor where a cache is already.
        let cached = range().cache(None).unwrap();
        let run = Run::new(cached.map(Vec::new(), None, None).unwrap())
            .stage(0, 0.6, 1000, 0)
            .stage(1, 0.01, 1000, 0);
        assert!(cache_prefix(&run.facts(4)).is_none());
    }

    fn with_op_time(run: &Run, name: &str, work: Work, seconds: f64) -> Option<Recommendation> {
        let ops = [(name.to_string(), 500, seconds)];
        let mut f = Facts::new(&run.plan, &run.plan, &run.snaps, 1.0, 4, &ops);
        f.work.insert(name.into(), work);
        let rule: Rule = if work == Work::DecodeImage {
            decode_offline
        } else {
            pack_small_files
        };
        rule(&f)
    }

    #[test]
    fn image_decoding_offline_by_the_ops_declared_work() {
        let run = Run::new(serial_map()).stage(0, 1.0, 1000, 0);
        // Matched by what the op declares, whatever its name.
        let r = with_op_time(&run, "my_decoder", Work::DecodeImage, 0.6).expect("advice");
        assert!(r.action.contains("preprocess them offline"), "{}", r.action);
        assert!(r.evidence.contains("60 %"), "{}", r.evidence);
        assert!(with_op_time(&run, "my_decoder", Work::DecodeImage, 0.4).is_none());
        assert!(with_op_time(&run, "decode_image", Work::Other, 0.9).is_none());
    }

    #[test]
    fn small_files_packed() {
        let run = Run::new(serial_map()).stage(0, 1.0, 1000, 0);
        let r = with_op_time(&run, "read_file", Work::ReadFile, 0.3).expect("advice");
        assert!(r.action.contains("TFRecord"), "{}", r.action);
        assert!(with_op_time(&run, "read_file", Work::ReadFile, 0.1).is_none());
    }

    #[test]
    fn prefetch_at_the_end() {
        let run = Run::new(serial_map()).stage(0, 1.0, 1000, 0);
        let r = prefetch_at_end(&run.facts(4)).expect("advice");
        assert!(
            r.evidence.contains("the last stage is 'map[]'"),
            "{}",
            r.evidence
        );
        let ends = Run::new(serial_map().prefetch(2).unwrap()).stage(1, 1.0, 1000, 0);
        assert!(prefetch_at_end(&ends.facts(4)).is_none());
    }
}
