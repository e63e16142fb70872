//! `stoker analyze TRACE...`: why the accelerator sat idle, from a profiler's trace.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Trace files: PyTorch profiler / Kineto JSON (.json or .json.gz), TensorFlow timeline
    /// JSON, Chrome/Perfetto JSON exported by the TensorFlow or JAX profilers.
    #[arg(required = true)]
    traces: Vec<PathBuf>,
    /// Print one JSON array (one object per trace) instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut results = Vec::with_capacity(args.traces.len());
    for path in &args.traces {
        results.push(stoker_analyze::analyze_path(path)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        for a in &results {
            print!("{}", a.to_text());
        }
    }
    Ok(ExitCode::SUCCESS)
}
