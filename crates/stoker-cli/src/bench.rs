//! `stoker bench SPEC`: runs the pipeline alone, as fast as it goes, and reports.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use stoker::bench_run::{bench_with_progress, BenchLimits, BenchResult};

#[derive(clap::Args)]
pub struct Args {
    /// The spec file (TOML or JSON).
    spec: String,
    /// Stop after this many seconds (default 10, unless --batches is given).
    #[arg(long)]
    seconds: Option<f64>,
    /// Stop after this many elements (batches, for a batched pipeline).
    #[arg(long)]
    batches: Option<u64>,
    /// Elements to pull before timing starts (fills buffers and caches).
    #[arg(long, default_value_t = 1)]
    warmup: u64,
    /// Worker threads (the CPU budget); default: the spec's option, else all cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the HTML report (self-contained: plots, stage table, verdict) here.
    #[arg(long)]
    report: Option<std::path::PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<u8> {
    let mut plan = stoker::spec::load(&args.spec)?;
    if let Some(t) = args.threads {
        let mut options = plan.options();
        options.threads = Some(t);
        plan = stoker::Plan::new(stoker::datasets::options::WithOptions {
            input: plan,
            options,
        })?;
    }
    let seconds = match (args.seconds, args.batches) {
        (None, None) => Some(10.0),
        (s, _) => s,
    };
    let limits = BenchLimits {
        warmup: args.warmup,
        seconds,
        elements: args.batches,
    };
    // A progress bar on a terminal (indicatif draws nothing when stderr is not one).
    let bar = match (args.json, seconds, args.batches) {
        (true, _, _) => ProgressBar::hidden(),
        (false, _, Some(n)) => ProgressBar::new(n),
        (false, Some(s), None) => {
            ProgressBar::new((s * 10.0) as u64).with_message(format!("{s:.0} s"))
        }
        (false, None, None) => ProgressBar::new_spinner(),
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} {per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let by_time = args.batches.is_none();
    let result = bench_with_progress(&plan, limits, |elapsed, elements| {
        if by_time {
            bar.set_position((elapsed * 10.0) as u64);
            bar.set_message(format!("{elements} elements"));
        } else {
            bar.set_position(elements);
        }
    })
    .context("running the pipeline")?;
    bar.finish_and_clear();
    if let Some(path) = &args.report {
        let html = stoker::report::render(&args.spec, &result, None);
        std::fs::write(path, html)
            .with_context(|| format!("writing the report {}", path.display()))?;
    }
    if args.json {
        let mut report = serde_json::to_value(&result)?;
        report["spec"] = json!(args.spec);
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&args.spec, &result);
    }
    Ok(0)
}

fn print_text(spec: &str, r: &BenchResult) {
    let (secs, elements, examples, ended) = (r.seconds, r.elements, r.examples, r.ended);
    println!(
        "{spec}: {elements} elements, {examples} examples in {secs:.2} s{}",
        if ended { " (dataset ended)" } else { "" }
    );
    println!(
        "  {:.1} elements/s, {:.0} examples/s",
        elements as f64 / secs,
        examples as f64 / secs
    );
    println!();
    println!(
        "  {:<60} {:>10} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "stage (sink first)", "elements", "busy s", "wait s", "blocked s", "python s", "skipped"
    );
    for s in &r.stages {
        let mut name = s.name.clone();
        if name.len() > 60 {
            name.truncate(57);
            name.push_str("...");
        }
        println!(
            "  {:<60} {:>10} {:>9.3} {:>9.3} {:>9.3} {:>8.3} {:>8}",
            name, s.elements, s.busy_s, s.wait_input_s, s.blocked_output_s, s.python_s, s.skipped
        );
    }
    println!();
    print!("{}", r.verdict.to_text());
}
