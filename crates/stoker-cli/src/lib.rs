//! `stoker`: run a pipeline spec alone and measure it (`bench`), look into TFRecord files
//! (`inspect`), index them for random access (`index`), print the plan stoker runs
//! (`explain`).
//!
//! A library, so that the command is one function ([`run`]) for two front doors: the `stoker`
//! binary of this crate, and the `stoker` console script of the Python wheel, which calls it
//! through the extension module (one build of the engine in the wheel, not two).

mod analyze;
mod bench;
mod convert;
mod inspect;

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

/// Runs the command line `args` (the program's name first, as `std::env::args_os` gives it)
/// and returns the exit status: 0 on success, 1 where a check found a problem, 2 on an error
/// (printed to stderr), clap's own status for `--help`, `--version` and wrong arguments.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let code = match Cli::try_parse_from(args) {
        Ok(cli) => command(cli.command),
        Err(e) => {
            // `--help` and `--version` are "errors" that print to stdout and exit 0.
            let _ = e.print();
            u8::try_from(e.exit_code()).unwrap_or(2)
        }
    };
    // The Python console script returns into the interpreter, which does not flush Rust's
    // buffered stdout at exit.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

fn command(command: Command) -> u8 {
    let result = match command {
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
            2
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

fn index(files: &[String]) -> anyhow::Result<u8> {
    use stoker::formats::tfrecord_index::RecordIndex;
    for file in &stoker::sources::expand_files("index", files)? {
        let index = RecordIndex::scan(file).map_err(|e| {
            anyhow::anyhow!("{e} (only uncompressed TFRecord files can be indexed)")
        })?;
        let idx = RecordIndex::path_for(file);
        index.write(&idx)?;
        println!("{file}: {} records -> {idx}", index.len());
    }
    Ok(0)
}

fn explain(spec: &str) -> anyhow::Result<u8> {
    let plan = stoker::spec::load(spec)?;
    print!("{}", stoker::Pipeline::new(&plan)?.explain());
    Ok(0)
}
