//! Pipeline spec files (JSON or TOML): the same plan the Python builder makes, as a list of
//! steps from the source to the sink.
//!
//! ```toml
//! stoker_spec = 1
//! [options]
//! on_bad_record = "raise"
//!
//! [[pipeline]]
//! step = "tfrecord"
//! files = ["data/*.tfrecord"]
//! num_parallel_reads = -1          # AUTOTUNE
//!
//! [[pipeline]]
//! step = "batch"
//! batch_size = 512
//! drop_remainder = true
//!
//! [[pipeline]]
//! step = "map"
//! num_parallel_calls = -1
//! ops = [{ op = "parse_example", features = [{ name = "s", kind = "fixed", dtype = "int64" }] }]
//! ```

use std::sync::Arc;

use serde_json::{json, Map, Value};
use stoker_core::exec::memory_cache::MemoryCache;
use stoker_core::exec::padded_batch::Padding;
use stoker_core::{Error, PipelineOptions, Result};
use stoker_formats::Compression;
use stoker_ops::OpSpec;

use crate::plan::{Plan, Step};
use crate::sources::{Opener, TfRecordOpener};

pub const SPEC_VERSION: u64 = 1;

fn err(i: usize, step: &str, msg: impl std::fmt::Display) -> Error {
    Error::Spec(format!("step {i} ({step}): {msg}"))
}

/// The plan as a spec document.
pub fn to_spec(plan: &Plan) -> Result<Value> {
    let options = serde_json::to_value(plan.options()).map_err(|e| Error::Spec(e.to_string()))?;
    Ok(json!({
        "stoker_spec": SPEC_VERSION,
        "options": options,
        "pipeline": steps_of(plan)?,
    }))
}

fn steps_of(plan: &Plan) -> Result<Vec<Value>> {
    // Walk from the sink down to the source, then reverse.
    let mut steps = Vec::new();
    let mut cur = Some(plan.clone());
    while let Some(p) = cur.take() {
        let (value, next) = step_spec(&p)?;
        if let Some(v) = value {
            steps.push(v);
        }
        cur = next;
    }
    steps.reverse();
    Ok(steps)
}

fn step_spec(p: &Plan) -> Result<(Option<Value>, Option<Plan>)> {
    let unsaveable =
        |what: &str| Error::Spec(format!("{} cannot be saved in a spec: {what}", p.label()));
    let v = match p.step() {
        Step::Range { start, stop, step } => (
            json!({"step": "range", "start": start, "stop": stop, "step_size": step}),
            None,
        ),
        Step::Slices { .. } => return Err(unsaveable(
            "its arrays live in memory; save them with np.savez and use stoker.Dataset.from_npz",
        )),
        Step::Npz { path, name, .. } => {
            let mut m = json!({"step": "from_npz", "path": path});
            if let Some(n) = name {
                m["name"] = json!(n);
            }
            (m, None)
        }
        Step::ListFiles {
            patterns,
            shuffle,
            seed,
            ..
        } => (
            json!({"step": "list_files", "files": patterns, "shuffle": shuffle, "seed": seed}),
            None,
        ),
        Step::TfRecord {
            patterns,
            compression,
            verify_crc,
            num_parallel_reads,
            ..
        } => (
            json!({"step": "tfrecord", "files": patterns, "compression_type": compression.name(),
                   "verify_crc": verify_crc, "num_parallel_reads": num_parallel_reads}),
            None,
        ),
        Step::Shuffle {
            input,
            buffer_size,
            seed,
            seed_given,
            reshuffle_each_iteration,
            ..
        } => {
            let mut m = json!({"step": "shuffle", "buffer_size": buffer_size,
                               "reshuffle_each_iteration": reshuffle_each_iteration});
            if *seed_given {
                m["seed"] = json!(seed);
            }
            (m, Some(input.clone()))
        }
        Step::Map {
            input,
            ops,
            num_parallel_calls,
            deterministic,
            ..
        } => {
            let ops = ops.iter().map(|o| o.spec()).collect::<Result<Vec<_>>>()?;
            let mut m = json!({"step": "map", "ops": ops, "deterministic": deterministic});
            if let Some(n) = num_parallel_calls {
                m["num_parallel_calls"] = json!(n);
            }
            (m, Some(input.clone()))
        }
        Step::Batch {
            input,
            batch_size,
            drop_remainder,
            padding,
        } => {
            let mut m = json!({"step": "batch", "batch_size": batch_size, "drop_remainder": drop_remainder});
            if let Some(p) = padding {
                m["step"] = json!("padded_batch");
                m["padded_shapes"] = json!(p.shapes);
                m["padding_values"] = json!(p.values);
            }
            (m, Some(input.clone()))
        }
        Step::Interleave {
            input,
            opener,
            cycle_length,
            block_length,
            num_parallel_calls,
        } => {
            let mut m = json!({"step": "interleave", "dataset": opener.spec()?, "block_length": block_length});
            if let Some(c) = cycle_length {
                m["cycle_length"] = json!(c);
            }
            if let Some(n) = num_parallel_calls {
                m["num_parallel_calls"] = json!(n);
            }
            (m, Some(input.clone()))
        }
        Step::Filter { input, predicate } => (
            json!({"step": "filter", "predicate": predicate.spec()?}),
            Some(input.clone()),
        ),
        Step::Take { input, count } => {
            (json!({"step": "take", "count": count}), Some(input.clone()))
        }
        Step::Skip { input, count } => {
            (json!({"step": "skip", "count": count}), Some(input.clone()))
        }
        Step::Repeat { input, count } => {
            let mut m = json!({"step": "repeat"});
            if let Some(c) = count {
                m["count"] = json!(c);
            }
            (m, Some(input.clone()))
        }
        Step::Cache {
            input, filename, ..
        } => {
            let mut m = json!({"step": "cache"});
            if let Some(f) = filename {
                m["filename"] = json!(f);
            }
            (m, Some(input.clone()))
        }
        Step::Prefetch { input, buffer_size } => (
            json!({"step": "prefetch", "buffer_size": buffer_size}),
            Some(input.clone()),
        ),
        Step::Shard {
            input,
            num_shards,
            index,
        } => (
            json!({"step": "shard", "num_shards": num_shards, "index": index}),
            Some(input.clone()),
        ),
        Step::Zip { inputs, prefixes } => {
            let datasets = inputs.iter().map(steps_of).collect::<Result<Vec<_>>>()?;
            (
                json!({"step": "zip", "prefixes": prefixes, "datasets": datasets}),
                None,
            )
        }
        Step::Enumerate {
            input,
            start,
            index_name,
            prefix,
        } => (
            json!({"step": "enumerate", "start": start, "index_name": index_name, "prefix": prefix}),
            Some(input.clone()),
        ),
        // Options are saved once, at the top of the document.
        Step::WithOptions { input, .. } => return Ok((None, Some(input.clone()))),
    };
    Ok((Some(v.0), v.1))
}

/// Builds the plan of a spec document.
pub fn from_spec(doc: &Value) -> Result<Plan> {
    let version = doc
        .get("stoker_spec")
        .and_then(Value::as_u64)
        .unwrap_or(SPEC_VERSION);
    if version != SPEC_VERSION {
        return Err(Error::Spec(format!(
            "spec version {version} is not supported (this stoker reads {SPEC_VERSION})"
        )));
    }
    let steps = doc
        .get("pipeline")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Spec("a spec needs a 'pipeline' list of steps".into()))?;
    let mut plan = plan_of(steps)?;
    if let Some(o) = doc.get("options") {
        let options: PipelineOptions =
            serde_json::from_value(o.clone()).map_err(|e| Error::Spec(format!("options: {e}")))?;
        if options != PipelineOptions::default() {
            plan = Plan::new(Step::WithOptions {
                input: plan,
                options,
            })?;
        }
    }
    Ok(plan)
}

/// Reads a spec file (`.toml`, else JSON).
pub fn load(path: &str) -> Result<Plan> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let doc: Value = if path.ends_with(".toml") {
        toml::from_str(&text).map_err(|e| Error::Spec(format!("{path}: {e}")))?
    } else {
        serde_json::from_str(&text).map_err(|e| Error::Spec(format!("{path}: {e}")))?
    };
    from_spec(&doc).map_err(|e| match e {
        Error::Spec(m) => Error::Spec(format!("{path}: {m}")),
        other => other,
    })
}

/// Writes a spec file (`.toml`, else JSON).
pub fn save(plan: &Plan, path: &str) -> Result<()> {
    let doc = to_spec(plan)?;
    let text = if path.ends_with(".toml") {
        toml::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    } else {
        serde_json::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    };
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

struct Fields<'a> {
    i: usize,
    name: &'a str,
    m: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn opt_i64(&self, k: &str) -> Result<Option<i64>> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| err(self.i, self.name, format!("'{k}' must be an integer"))),
        }
    }
    fn i64(&self, k: &str) -> Result<i64> {
        self.opt_i64(k)?
            .ok_or_else(|| err(self.i, self.name, format!("'{k}' is required")))
    }
    fn u64(&self, k: &str) -> Result<u64> {
        u64::try_from(self.i64(k)?)
            .map_err(|_| err(self.i, self.name, format!("'{k}' must be >= 0")))
    }
    fn opt_u64(&self, k: &str) -> Result<Option<u64>> {
        self.opt_i64(k)?
            .map(|v| {
                u64::try_from(v).map_err(|_| err(self.i, self.name, format!("'{k}' must be >= 0")))
            })
            .transpose()
    }
    fn bool_or(&self, k: &str, default: bool) -> Result<bool> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| err(self.i, self.name, format!("'{k}' must be true or false"))),
        }
    }
    fn str_or(&self, k: &str, default: &str) -> Result<String> {
        match self.m.get(k) {
            None | Some(Value::Null) => Ok(default.to_string()),
            Some(v) => v
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| err(self.i, self.name, format!("'{k}' must be a string"))),
        }
    }
    fn strings(&self, k: &str) -> Result<Vec<String>> {
        match self.m.get(k) {
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| err(self.i, self.name, format!("'{k}' must hold strings")))
                })
                .collect(),
            _ => Err(err(
                self.i,
                self.name,
                format!("'{k}' must be a string or a list of strings"),
            )),
        }
    }
}

fn plan_of(steps: &[Value]) -> Result<Plan> {
    let mut plan: Option<Plan> = None;
    for (i, v) in steps.iter().enumerate() {
        let m = v
            .as_object()
            .ok_or_else(|| Error::Spec(format!("step {i}: expected a table/object")))?;
        let name = m
            .get("step")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Spec(format!("step {i}: missing 'step'")))?;
        let f = Fields { i, name, m };
        let need_input = || {
            plan.clone()
                .ok_or_else(|| err(i, name, "needs an input step before it"))
        };
        let is_source = matches!(
            name,
            "range" | "from_npz" | "list_files" | "tfrecord" | "zip"
        );
        if is_source && plan.is_some() {
            return Err(err(i, name, "a source can only be the first step"));
        }
        let next = match name {
            "range" => Plan::new(Step::Range {
                start: f.opt_i64("start")?.unwrap_or(0),
                stop: f.i64("stop")?,
                step: f.opt_i64("step_size")?.unwrap_or(1),
            })?,
            "from_npz" => Plan::from_npz(
                &f.str_or("path", "")?,
                f.m.get("name").and_then(Value::as_str).map(str::to_string),
            )?,
            "list_files" => Plan::list_files(
                f.strings("files")?,
                f.bool_or("shuffle", true)?,
                f.opt_u64("seed")?,
            )?,
            "tfrecord" => Plan::tfrecord(
                f.strings("files")?,
                Compression::parse(&f.str_or("compression_type", "")?)?,
                f.bool_or("verify_crc", true)?,
                f.opt_i64("num_parallel_reads")?.unwrap_or(1),
            )?,
            "shuffle" => need_input()?.shuffle(
                f.u64("buffer_size")? as usize,
                f.opt_u64("seed")?,
                f.bool_or("reshuffle_each_iteration", true)?,
            )?,
            "map" => {
                let ops = m
                    .get("ops")
                    .and_then(Value::as_array)
                    .ok_or_else(|| err(i, name, "'ops' must be a list of ops"))?
                    .iter()
                    .map(|o| OpSpec::from_json(o).and_then(OpSpec::build))
                    .collect::<Result<Vec<_>>>()
                    .map_err(|e| err(i, name, e))?;
                need_input()?.map(
                    ops,
                    f.opt_i64("num_parallel_calls")?,
                    f.bool_or("deterministic", true)?,
                )?
            }
            "batch" => need_input()?.batch(
                f.u64("batch_size")? as usize,
                f.bool_or("drop_remainder", false)?,
            )?,
            "padded_batch" => {
                let field = |key: &str| m.get(key).cloned().unwrap_or_else(|| json!({}));
                let padding = Padding {
                    shapes: serde_json::from_value(field("padded_shapes"))
                        .map_err(|e| err(i, name, format!("padded_shapes: {e}")))?,
                    values: serde_json::from_value(field("padding_values"))
                        .map_err(|e| err(i, name, format!("padding_values: {e}")))?,
                };
                need_input()?.padded_batch(
                    f.u64("batch_size")? as usize,
                    f.bool_or("drop_remainder", false)?,
                    padding,
                )?
            }
            "interleave" => {
                let dataset = m
                    .get("dataset")
                    .and_then(Value::as_object)
                    .ok_or_else(|| err(i, name, "'dataset' is required"))?;
                if dataset.get("source").and_then(Value::as_str) != Some("tfrecord") {
                    return Err(err(
                        i,
                        name,
                        "only TFRecord datasets can be interleaved from a spec",
                    ));
                }
                let d = Fields {
                    i,
                    name,
                    m: dataset,
                };
                let opener: Arc<dyn Opener> = Arc::new(TfRecordOpener {
                    compression: Compression::parse(&d.str_or("compression_type", "")?)?,
                    verify_crc: d.bool_or("verify_crc", true)?,
                });
                Plan::new(Step::Interleave {
                    input: need_input()?,
                    opener,
                    cycle_length: f.opt_u64("cycle_length")?.map(|c| c as usize),
                    block_length: f.opt_u64("block_length")?.unwrap_or(1) as usize,
                    num_parallel_calls: f.opt_i64("num_parallel_calls")?,
                })?
            }
            "filter" => {
                return Err(err(
                    i,
                    name,
                    "filter predicates are Python functions and cannot be loaded from a spec",
                ))
            }
            "take" => Plan::new(Step::Take {
                input: need_input()?,
                count: f.u64("count")?,
            })?,
            "skip" => Plan::new(Step::Skip {
                input: need_input()?,
                count: f.u64("count")?,
            })?,
            "repeat" => Plan::new(Step::Repeat {
                input: need_input()?,
                count: f.opt_u64("count")?,
            })?,
            "cache" => Plan::new(Step::Cache {
                input: need_input()?,
                filename: m
                    .get("filename")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                memory: MemoryCache::new(),
            })?,
            "prefetch" => need_input()?
                .prefetch(f.opt_i64("buffer_size")?.unwrap_or(crate::plan::AUTOTUNE))?,
            "shard" => Plan::new(Step::Shard {
                input: need_input()?,
                num_shards: f.u64("num_shards")?,
                index: f.u64("index")?,
            })?,
            "zip" => {
                let datasets = m
                    .get("datasets")
                    .and_then(Value::as_array)
                    .ok_or_else(|| err(i, name, "'datasets' is required"))?;
                let inputs = datasets
                    .iter()
                    .map(|d| {
                        d.as_array()
                            .ok_or_else(|| err(i, name, "each dataset is a list of steps"))
                            .and_then(|s| plan_of(s))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let prefixes = match m.get("prefixes") {
                    Some(_) => f.strings("prefixes")?,
                    None => (0..inputs.len()).map(|k| format!("{k}/")).collect(),
                };
                Plan::new(Step::Zip { inputs, prefixes })?
            }
            "enumerate" => Plan::new(Step::Enumerate {
                input: need_input()?,
                start: f.opt_i64("start")?.unwrap_or(0),
                index_name: f.str_or("index_name", "index")?,
                prefix: f.str_or("prefix", "")?,
            })?,
            other => return Err(err(i, other, "unknown step")),
        };
        plan = Some(next);
    }
    plan.ok_or_else(|| Error::Spec("the pipeline has no steps".into()))
}
