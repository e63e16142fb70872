//! `stoker convert SPEC OUT_DIR`: runs the offline part of a pipeline spec once and stores its
//! elements as TFRecord shards of `tf.train.Example`s with a manifest (see `stoker::convert`);
//! `--ray` hands the shards to a Ray cluster through stoker's Python package.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use stoker::convert::{Conversion, ConvertOptions, Images, Manifest, Progress};

#[derive(clap::Args)]
pub struct Args {
    /// The pipeline spec (TOML or JSON, as `Dataset.save_spec` writes it); its offline part
    /// is converted.
    spec: Option<String>,
    /// The output folder (shards, their indexes, manifest.json). Re-running the same
    /// conversion into it finishes what an interrupted run left.
    out_dir: Option<PathBuf>,
    /// Number of output shards.
    #[arg(long, default_value_t = 8)]
    shards: usize,
    /// none, gzip or zlib (compressed shards have no record index: no random access).
    #[arg(long, default_value = "none")]
    compression: String,
    /// How uint8 [H, W, C] image fields are stored: raw (the default: uncompressed, said up
    /// front with what it costs), png or jpeg.
    #[arg(long)]
    images: Option<String>,
    /// Resize image fields whose shorter side is longer than this so that it is this long
    /// (antialiased bilinear, aspect kept), before storing them.
    #[arg(long)]
    resize: Option<usize>,
    /// Materialise this many augmented epochs instead (random maps and shuffles run offline
    /// too, up to the first batch; each epoch with its own seeds, one job per epoch).
    #[arg(long)]
    epochs: Option<u64>,
    /// JPEG quality for --images jpeg.
    #[arg(long, default_value_t = 90)]
    jpeg_quality: u8,
    /// Threads (default: all cores); shards are written this many at a time.
    #[arg(long)]
    threads: Option<usize>,
    /// Run one task per shard on a Ray cluster (ADDRESS, or a local one when none is given),
    /// through `python3 -m stoker.convert` (set STOKER_PYTHON for another interpreter).
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    ray: Option<String>,
    /// No progress bar (for logs).
    #[arg(long)]
    quiet: bool,
    /// Print the TensorFlow code that reads the converted shards in this folder, and exit.
    #[arg(long, value_name = "OUT_DIR", conflicts_with_all = ["spec", "out_dir"])]
    print_tf_spec: Option<PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<u8> {
    if let Some(dir) = &args.print_tf_spec {
        let m = Manifest::read(dir)?;
        print!("{}", m.tf_parse_code(dir));
        return Ok(0);
    }
    let (Some(spec), Some(out_dir)) = (&args.spec, &args.out_dir) else {
        anyhow::bail!("give the pipeline spec and the output folder (or --print-tf-spec OUT_DIR)");
    };
    if let Some(address) = &args.ray {
        return ray(args, spec, out_dir, address);
    }
    let plan = stoker::spec::load(spec)?;
    let options = ConvertOptions {
        num_shards: args.shards,
        compression: args.compression.to_ascii_uppercase(),
        images: Images::parse(args.images.as_deref().unwrap_or("raw"))?,
        jpeg_quality: args.jpeg_quality,
        resize: args.resize,
        epochs: args.epochs,
    };
    let conv = Arc::new(Conversion::new(&plan, options)?);
    if args.images.is_none() {
        if let Some(note) = conv.raw_images_note() {
            eprintln!("stoker convert: {note}");
        }
    }
    let workers = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let progress = Arc::new(Progress::default());
    let (c, p, dir) = (Arc::clone(&conv), Arc::clone(&progress), out_dir.clone());
    let run = std::thread::spawn(move || c.run_local(&dir, workers, &p));
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(conv.source_elements * args.epochs.unwrap_or(1))
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} elements · {msg} · ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let shards = conv.convert.num_shards * args.epochs.unwrap_or(1) as usize;
    while !run.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        draw(&bar, &progress, t0, shards);
    }
    let manifest = run
        .join()
        .map_err(|_| anyhow::anyhow!("the conversion's thread panicked"))??;
    draw(&bar, &progress, t0, shards);
    bar.finish_and_clear();
    summary(&manifest, out_dir, t0.elapsed());
    Ok(0)
}

fn draw(bar: &ProgressBar, p: &Progress, t0: Instant, shards: usize) {
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    bar.set_position(p.elements.load(Relaxed));
    bar.set_message(format!(
        "{:.1} MB/s · {}/{shards} shards",
        p.bytes.load(Relaxed) as f64 / 1e6 / secs,
        p.shards_done.load(Relaxed)
    ));
}

fn summary(m: &Manifest, dir: &Path, took: Duration) {
    let bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
    let skipped: u64 = m.shards.iter().map(|s| s.skipped).sum();
    eprintln!(
        "stoker convert: {} elements in {} shards ({:.1} MB) into {} in {:.1} s; offline: {}; \
         online (not converted): {}{}",
        m.elements,
        m.shards.len(),
        bytes as f64 / 1e6,
        dir.display(),
        took.as_secs_f64(),
        m.offline.join(" → "),
        if m.online.is_empty() {
            "nothing".to_string()
        } else {
            m.online.join(" → ")
        },
        if skipped > 0 {
            format!("; {skipped} bad input skipped (see the manifest)")
        } else {
            String::new()
        }
    );
}

/// `--ray`: the Python package drives the cluster.
fn ray(args: &Args, spec: &str, out_dir: &Path, address: &str) -> anyhow::Result<u8> {
    let python = std::env::var("STOKER_PYTHON").unwrap_or_else(|_| "python3".into());
    check_python(&python)?;
    let mut cmd = std::process::Command::new(&python);
    cmd.args(["-m", "stoker.convert", spec])
        .arg(out_dir)
        .args(["--shards", &args.shards.to_string()])
        .args(["--compression", &args.compression]);
    if let Some(images) = &args.images {
        cmd.args(["--images", images]);
    }
    cmd.args(["--jpeg-quality", &args.jpeg_quality.to_string()])
        .args(["--ray", address]);
    if let Some(n) = args.resize {
        cmd.args(["--resize", &n.to_string()]);
    }
    if let Some(n) = args.epochs {
        cmd.args(["--epochs", &n.to_string()]);
    }
    if let Some(n) = args.threads {
        cmd.args(["--threads", &n.to_string()]);
    }
    if args.quiet {
        cmd.arg("--quiet");
    }
    let status = cmd
        .status()
        .map_err(|e| anyhow::anyhow!("--ray runs `{python} -m stoker.convert`: {e}"))?;
    Ok(match status.code() {
        Some(0) => 0,
        Some(c) => u8::try_from(c).unwrap_or(1),
        None => 1,
    })
}

/// That `python` can run `stoker.convert` (with Ray): else an error that says which Python
/// it tried and how to pick another.
fn check_python(python: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new(python)
        .args(["-c", "import stoker.convert, ray"])
        .output()
        .map_err(|e| {
            anyhow::anyhow!(
                "--ray runs `{python} -m stoker.convert`, and `{python}` cannot be run ({e}); \
                 set STOKER_PYTHON to a Python with stoker and Ray installed"
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    anyhow::bail!(
        "--ray runs `{python} -m stoker.convert`, but that Python cannot import stoker and Ray \
         ({why}); install them into it (pip install ./crates/stoker-python \"ray>=2.9\") or set \
         STOKER_PYTHON to a Python that has them"
    )
}
