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
//!
//! Each step's keys are its module's `Spec` struct in [`crate::datasets`]; a key a step does
//! not have is an error naming the key and the step. Relative paths in a spec file are
//! relative to the file's folder.

use serde_json::{json, Value};
use stoker_core::{Error, PipelineOptions, Result};

use crate::datasets::options::WithOptions;
use crate::plan::{Plan, SpecCtx};
use crate::registry::parse_step;

pub const SPEC_VERSION: u64 = 1;

/// The plan as a spec document.
pub fn to_spec(plan: &Plan) -> Result<Value> {
    to_spec_in(plan, &SpecCtx::default())
}

fn to_spec_in(plan: &Plan, ctx: &SpecCtx) -> Result<Value> {
    let options = serde_json::to_value(plan.options()).map_err(|e| Error::Spec(e.to_string()))?;
    Ok(json!({
        "stoker_spec": SPEC_VERSION,
        "options": options,
        "pipeline": ctx.steps_of(plan)?,
    }))
}

/// Builds the plan of a spec document.
pub fn from_spec(doc: &Value) -> Result<Plan> {
    from_spec_in(doc, &SpecCtx::new(None, Some(parse_step)))
}

fn from_spec_in(doc: &Value, ctx: &SpecCtx) -> Result<Plan> {
    let Some(top) = doc.as_object() else {
        return Err(Error::Spec("a spec is a table/object".into()));
    };
    if let Some(k) = top
        .keys()
        .find(|k| !["stoker_spec", "options", "pipeline"].contains(&k.as_str()))
    {
        return Err(Error::Spec(format!(
            "unknown key '{k}' (a spec has stoker_spec, options and pipeline)"
        )));
    }
    let version = top
        .get("stoker_spec")
        .and_then(Value::as_u64)
        .unwrap_or(SPEC_VERSION);
    if version != SPEC_VERSION {
        return Err(Error::Spec(format!(
            "spec version {version} is not supported (this stoker reads {SPEC_VERSION})"
        )));
    }
    let steps = top
        .get("pipeline")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Spec("a spec needs a 'pipeline' list of steps".into()))?;
    let mut plan = ctx.plan_of(steps)?;
    if let Some(o) = top.get("options") {
        let options: PipelineOptions =
            serde_json::from_value(o.clone()).map_err(|e| Error::Spec(format!("options: {e}")))?;
        if options != PipelineOptions::default() {
            plan = Plan::new(WithOptions {
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
    from_spec_in(&doc, &SpecCtx::new(Some(path), Some(parse_step))).map_err(|e| match e {
        Error::Spec(m) => Error::Spec(format!("{path}: {m}")),
        other => other,
    })
}

/// Writes a spec file (`.toml`, else JSON); its paths are written relative to its folder
/// where they lie under it.
pub fn save(plan: &Plan, path: &str) -> Result<()> {
    let doc = to_spec_in(plan, &SpecCtx::new(Some(path), None))?;
    let text = if path.ends_with(".toml") {
        toml::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    } else {
        serde_json::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    };
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}
