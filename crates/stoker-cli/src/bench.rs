//! `stoker bench SPEC`: runs the pipeline alone, as fast as it goes, and reports.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use stoker::Pipeline;
use stoker_core::stats::StageSnapshot;

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
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut plan = stoker::spec::load(&args.spec)?;
    if let Some(t) = args.threads {
        let mut options = plan.options();
        options.threads = Some(t);
        plan = stoker::Plan::new(stoker::Step::WithOptions {
            input: plan,
            options,
        })?;
    }
    let pipeline = Pipeline::new(&plan)?;
    let limit = match (args.seconds, args.batches) {
        (None, None) => Some(Duration::from_secs(10)),
        (s, _) => s.map(Duration::from_secs_f64),
    };

    let mut it = pipeline.start().context("starting the pipeline")?;
    use stoker_core::exec::ElementIter;
    for _ in 0..args.warmup {
        if it.next()?.is_none() {
            break;
        }
    }
    let start = Instant::now();
    let (mut elements, mut examples) = (0u64, 0u64);
    let mut ended = false;
    loop {
        if args.batches.is_some_and(|b| elements >= b)
            || limit.is_some_and(|l| start.elapsed() >= l)
        {
            break;
        }
        match it.next()? {
            Some(e) => {
                elements += 1;
                // Examples: the first dimension of a batched element, else 1.
                let batch_dim = e.tensors.first().and_then(|t| t.shape().first().copied());
                let batched = pipeline
                    .plan()
                    .schema()
                    .fields
                    .first()
                    .is_some_and(|f| !f.shape.is_empty())
                    && batch_dim.is_some();
                examples += if batched {
                    batch_dim.unwrap_or(1) as u64
                } else {
                    1
                };
            }
            None => {
                ended = true;
                break;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    drop(it);
    let stages = pipeline.stats();
    let report = json!({
        "spec": args.spec,
        "seconds": secs,
        "elements": elements,
        "examples": examples,
        "elements_per_s": elements as f64 / secs,
        "examples_per_s": examples as f64 / secs,
        "ended": ended,
        "threads": pipeline.plan().options().threads(),
        "stages": stages,
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&args.spec, secs, elements, examples, ended, &stages);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_text(
    spec: &str,
    secs: f64,
    elements: u64,
    examples: u64,
    ended: bool,
    stages: &[StageSnapshot],
) {
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
    for s in stages {
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
}
