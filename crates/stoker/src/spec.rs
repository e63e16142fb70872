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

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use stoker_core::{Error, PipelineOptions, Result};

use crate::datasets::options::WithOptions;
use crate::datasets::Step;
use crate::plan::Plan;

pub const SPEC_VERSION: u64 = 1;

/// Where a spec lives: relative paths in it are relative to its folder.
#[derive(Clone, Debug, Default)]
pub struct SpecCtx {
    folder: Option<PathBuf>,
}

impl SpecCtx {
    /// For a spec file at `path`.
    pub fn for_file(path: &str) -> SpecCtx {
        let folder = Path::new(path).parent().map(Path::to_path_buf);
        SpecCtx { folder }
    }

    /// A path read from the spec, as a path to open.
    pub fn load_path(&self, p: &str) -> String {
        match &self.folder {
            Some(folder) if Path::new(p).is_relative() => {
                folder.join(p).to_string_lossy().into_owned()
            }
            _ => p.to_string(),
        }
    }

    /// A path of the plan, as written into the spec: relative to the spec's folder when
    /// under it, else absolute (the plan's relative paths are relative to the working
    /// directory).
    pub fn save_path(&self, p: &str) -> String {
        let Some(folder) = &self.folder else {
            return p.to_string();
        };
        let absolute = |q: &Path| match std::env::current_dir() {
            Ok(cwd) if q.is_relative() => cwd.join(q),
            _ => q.to_path_buf(),
        };
        let path = absolute(Path::new(p));
        match path.strip_prefix(absolute(folder)) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

/// The plan as a spec document.
pub fn to_spec(plan: &Plan) -> Result<Value> {
    to_spec_in(plan, &SpecCtx::default())
}

fn to_spec_in(plan: &Plan, ctx: &SpecCtx) -> Result<Value> {
    let options = serde_json::to_value(plan.options()).map_err(|e| Error::Spec(e.to_string()))?;
    Ok(json!({
        "stoker_spec": SPEC_VERSION,
        "options": options,
        "pipeline": steps_of(plan, ctx)?,
    }))
}

/// The steps of a linear pipeline, source first.
pub(crate) fn steps_of(plan: &Plan, ctx: &SpecCtx) -> Result<Vec<Value>> {
    // Walk from the sink down to the source, then reverse.
    let mut steps = Vec::new();
    let mut cur = Some(plan.clone());
    while let Some(p) = cur.take() {
        if let Some(v) = p.step().to_spec(ctx)? {
            steps.push(v);
        }
        // A source with inputs (zip) holds them in its spec.
        if !p.step().is_source() {
            cur = p.step().inputs().first().map(|&input| input.clone());
        }
    }
    steps.reverse();
    Ok(steps)
}

/// Builds the plan of a spec document.
pub fn from_spec(doc: &Value) -> Result<Plan> {
    from_spec_in(doc, &SpecCtx::default())
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
    let mut plan = plan_of(steps, ctx)?;
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
    from_spec_in(&doc, &SpecCtx::for_file(path)).map_err(|e| match e {
        Error::Spec(m) => Error::Spec(format!("{path}: {m}")),
        other => other,
    })
}

/// Writes a spec file (`.toml`, else JSON); its paths are written relative to its folder
/// where they lie under it.
pub fn save(plan: &Plan, path: &str) -> Result<()> {
    let doc = to_spec_in(plan, &SpecCtx::for_file(path))?;
    let text = if path.ends_with(".toml") {
        toml::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    } else {
        serde_json::to_string_pretty(&doc).map_err(|e| Error::Spec(e.to_string()))?
    };
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// The plan of a list of steps, source first.
pub(crate) fn plan_of(steps: &[Value], ctx: &SpecCtx) -> Result<Plan> {
    let mut plan: Option<Plan> = None;
    for (i, v) in steps.iter().enumerate() {
        let mut fields = v
            .as_object()
            .cloned()
            .ok_or_else(|| Error::Spec(format!("step {i}: expected a table/object")))?;
        let kind = match fields.remove("step") {
            Some(Value::String(s)) => s,
            _ => return Err(Error::Spec(format!("step {i}: missing 'step'"))),
        };
        let in_step = |e: Error| match e {
            Error::Spec(m) => Error::Spec(format!("step {i} ({kind}): {m}")),
            other => other,
        };
        let step =
            Step::from_spec(&kind, Value::Object(fields), plan.take(), ctx).map_err(in_step)?;
        plan = Some(Plan::new(step)?);
    }
    plan.ok_or_else(|| Error::Spec("the pipeline has no steps".into()))
}
