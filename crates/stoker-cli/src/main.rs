//! `stoker`: run a pipeline spec alone and measure it (`bench`), look into TFRecord files
//! (`inspect`), index them for random access (`index`), print the plan stoker runs
//! (`explain`).

mod analyze;
mod bench;
mod convert;
mod inspect;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "stoker", version, about = "stoker: keeps accelerators fed")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline spec (TOML or JSON, as written by `Dataset.save_spec`) and report its
    /// throughput and per-stage counters.
    Bench(bench::Args),
    /// Why did the accelerator sit idle? Reads PyTorch (Kineto), TensorFlow and JAX traces.
    Analyze(analyze::Args),
    /// Count and CRC-check the records of TFRecord files and show the first Example's
    /// features; for the output folder of `stoker convert`, summarise its manifest and check
    /// every shard against it.
    Inspect(inspect::Args),
    /// Run the offline part of a pipeline spec once (up to its first random op, shuffle,
    /// batch or Python function) and store its elements as TFRecord shards of
    /// tf.train.Examples, with record indexes and a manifest; `Dataset.from_converted` (or
    /// TensorFlow, see --print-tf-spec) reads them back.
    Convert(convert::Args),
    /// Write a record index beside each TFRecord file (`FILE.idx`: one `<offset> <size>` line
    /// per record, DALI's tfrecord2idx format), for random access: `global_shuffle`, and fast
    /// restores of shuffled pipelines. Uncompressed files only.
    Index {
        /// The TFRecord files.
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Print the plan of a spec as stoker runs it (after its rewrites), with schemas.
    Explain {
        /// The spec file.
        spec: String,
    },
}

/// The same allocator as the Python extension, so `stoker bench` measures what Python runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Analyze(args) => analyze::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Convert(args) => convert::run(&args),
        Command::Index { files } => index(&files),
        Command::Explain { spec } => explain(&spec),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("stoker: error: {}", message(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, each cause only where the message does not already say it
/// (stoker's errors quote their source in their own text).
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

/// Output into a closed pipe (`stoker inspect ... | head -1`) ends the process quietly, as it
/// does a C program, instead of failing the write (a panic in `println!`).
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; it only puts the
    // disposition of SIGPIPE back to the default that Rust's runtime changed to "ignore".
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn default_sigpipe() {}

fn index(files: &[String]) -> anyhow::Result<ExitCode> {
    use stoker::formats::tfrecord_index::RecordIndex;
    for file in &stoker::sources::expand_files("index", files)? {
        let index = RecordIndex::scan(file).map_err(|e| {
            anyhow::anyhow!("{e} (only uncompressed TFRecord files can be indexed)")
        })?;
        let idx = RecordIndex::path_for(file);
        index.write(&idx)?;
        println!("{file}: {} records -> {idx}", index.len());
    }
    Ok(ExitCode::SUCCESS)
}

fn explain(spec: &str) -> anyhow::Result<ExitCode> {
    let plan = stoker::spec::load(spec)?;
    print!("{}", stoker::Pipeline::new(&plan)?.explain());
    Ok(ExitCode::SUCCESS)
}
