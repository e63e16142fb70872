//! `stoker analyze TRACE...`: why the accelerator sat idle, from a profiler's trace.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

#[derive(clap::Args)]
pub struct Args {
    /// Trace files: PyTorch profiler / Kineto JSON (.json or .json.gz), TensorFlow timeline
    /// JSON, the XSpace of the TensorFlow and JAX profilers (.xplane.pb), and the trace viewer
    /// JSON they export.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Print one JSON array (one object per trace) instead of text.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML report here. With several traces, each gets its own
    /// file: the trace's name goes before the extension (`out.TRACE.html`).
    #[arg(long, value_name = "OUT.html")]
    html: Option<PathBuf>,
}

/// Where the report of `trace` goes: `out` itself for a single trace.
fn report_path(out: &Path, trace: &Path, several: bool) -> PathBuf {
    if !several {
        return out.to_path_buf();
    }
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = name
        .trim_end_matches(".gz")
        .trim_end_matches(".json")
        .trim_end_matches(".pb");
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!("{stem}.{name}.html"))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut results = Vec::with_capacity(args.traces.len());
    for path in &args.traces {
        let trace = stoker_analyze::model::load(path)?;
        let analysis = stoker_analyze::analysis::analyze(&trace);
        if let Some(out) = &args.html {
            let out = report_path(out, path, args.traces.len() > 1);
            std::fs::write(&out, stoker_analyze::report::render(&trace, &analysis))
                .with_context(|| format!("writing the report {}", out.display()))?;
            eprintln!("report: {}", out.display());
        }
        results.push(analysis);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for a in &results {
            print!("{}", a.to_text());
        }
        if let Some(ranks) = stoker_analyze::analysis::compare_ranks(&results) {
            print!("{ranks}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
