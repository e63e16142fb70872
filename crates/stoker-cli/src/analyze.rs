//! `stoker analyze TRACE...`: why the accelerator sat idle, from a profiler's trace.

use std::path::{Path, PathBuf};

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
    /// Compare two runs, before and after a change (exactly two traces): step time and its
    /// breakdown side by side, what changed and by how much (with --html, one comparison
    /// report).
    #[arg(long)]
    compare: bool,
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

pub fn run(args: &Args) -> anyhow::Result<u8> {
    if args.compare {
        return compare(args);
    }
    let mut results = Vec::with_capacity(args.traces.len());
    for path in &args.traces {
        let trace = stoker_analyze::load(path)?;
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
        print_json(&results)?;
    } else {
        for a in &results {
            print!("{}", a.to_text());
        }
        if let Some(ranks) = stoker_analyze::analysis::compare_ranks(&results) {
            print!("{ranks}");
        }
    }
    Ok(0)
}

/// Writes `value` to stdout as indented JSON, as it is serialised (a trace of many steps makes
/// a large document, which is not built in memory first).
fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// `--compare BEFORE AFTER`.
fn compare(args: &Args) -> anyhow::Result<u8> {
    let [before, after] = args.traces.as_slice() else {
        anyhow::bail!(
            "--compare takes two traces, BEFORE and AFTER ({} given)",
            args.traces.len()
        );
    };
    let load = |p: &Path| -> anyhow::Result<_> {
        Ok(stoker_analyze::analysis::analyze(&stoker_analyze::load(p)?))
    };
    let (b, a) = (load(before)?, load(after)?);
    let c = stoker_analyze::compare::Comparison::new(&b, &a);
    if let Some(out) = &args.html {
        std::fs::write(out, c.to_html())
            .with_context(|| format!("writing the report {}", out.display()))?;
        eprintln!("report: {}", out.display());
    }
    if args.json {
        print_json(&c)?;
    } else {
        print!("{}", c.to_text());
    }
    Ok(0)
}
