//! `convert`: runs the offline part of a pipeline once and stores its elements as
//! `tf.train.Example` records in TFRecord shards, each with its record index, and a manifest
//! (`manifest.json`) that says what they hold; [`from_converted`] reads them back.
//!
//! The offline part is the chain that starts at the pipeline's source while each step gives
//! the same output every pass and makes each element from one input element alone (a native
//! deterministic map, `with_options`, `prefetch`, `unbatch`:
//! [`DatasetOp::per_element`](crate::datasets::DatasetOp::per_element)); the
//! first shuffle, random op, Python function, batch or positional step (take, skip, shard,
//! window, ...) stays online. That is what lets the shards be made apart: shard `k` is the
//! offline chain run over the `k`-th of `N` consecutive ranges of the source's elements, so
//! one shard's job reads only its own range (random access where the source has it), and the
//! shards in order hold exactly the offline part's output in order. The bytes depend only on
//! the elements: the same for any number of threads, workers or machines.
//!
//! Each shard is written under a temporary name and renamed once complete, then listed in the
//! manifest with its element count and sha256; a run over an output folder that already holds
//! the same conversion skips the shards listed complete whose bytes still match.
//!
//! With `epochs = K` the augmented part is stored instead: the chain goes on through random
//! native maps and shuffles up to the first batch, positional step or Python function, and is
//! run once per epoch as that iteration of the pipeline (its reshuffles and random ops draw
//! from the epoch's seeds), its elements dealt round-robin to the epoch's `num_shards` shards:
//! one job per epoch, which writes them all.

pub mod encode;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use stoker_core::exec::BoxIter;
use stoker_core::op::Op;
use stoker_core::{Error, PipelineOptions, Result};
use stoker_formats::tfrecord_index::RecordIndex;
use stoker_formats::{Compression, RecordWriter};
use stoker_ops::record::parse_converted::{ParseConverted, Stored, StoredField};
use stoker_ops::spec::OpSpec;

use crate::datasets::concatenate::Concatenate;
use crate::datasets::options::WithOptions;
use crate::datasets::skip::Skip;
use crate::datasets::take::Take;
use crate::datasets::{global_shuffle::GlobalShuffle, map::Map, shuffle::Shuffle};
use crate::pipeline::Pipeline;
use crate::plan::Plan;
use crate::properties::{Cardinality, Randomness};
pub use encode::Images;

const OP: &str = "convert";
/// The manifest's name in the output folder.
pub const MANIFEST: &str = "manifest.json";
/// What a manifest says it is, and the version of its layout.
pub const FORMAT: &str = "stoker-converted";
pub const FORMAT_VERSION: u64 = 1;

/// How to convert.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvertOptions {
    pub num_shards: usize,
    /// `""`, `"GZIP"` or `"ZLIB"`.
    pub compression: String,
    pub images: Images,
    pub jpeg_quality: u8,
    /// Image fields whose shorter side is longer than this are resized (antialiased
    /// bilinear, the aspect kept) so that it is this long, before they are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<usize>,
    /// Materialise this many epochs of the augmented part instead (see the module's docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epochs: Option<u64>,
}

impl ConvertOptions {
    fn check(&self) -> Result<Compression> {
        if self.num_shards == 0 {
            return Err(Error::invalid(OP, "num_shards must be at least 1"));
        }
        if self.epochs == Some(0) {
            return Err(Error::invalid(OP, "epochs must be at least 1"));
        }
        if self.resize == Some(0) {
            return Err(Error::invalid(OP, "resize must be at least 1"));
        }
        if !(1..=100).contains(&self.jpeg_quality) {
            return Err(Error::invalid(
                OP,
                format!("jpeg_quality must be in 1..=100, got {}", self.jpeg_quality),
            ));
        }
        Compression::parse(&self.compression).map_err(|_| {
            Error::invalid(
                OP,
                format!(
                    "compression: '{}' is not one of None, GZIP, ZLIB",
                    self.compression
                ),
            )
        })
    }
}

/// One shard in the manifest: the source range it was made from and, once complete, what it
/// holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub file: String,
    /// The epoch it holds part of (a conversion of several epochs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The first source element of its range, and how many.
    pub source_start: u64,
    pub source_count: u64,
    pub complete: bool,
    #[serde(default)]
    pub elements: u64,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub sha256: String,
    /// Bad input skipped (under the skip policy) and the last reason.
    #[serde(default)]
    pub skipped: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_skip: Option<String>,
}

/// `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u64,
    pub stoker_version: String,
    /// True once every shard is complete.
    pub complete: bool,
    /// What the conversion is (the offline part and the options): a re-run resumes only the
    /// same conversion.
    pub fingerprint: String,
    pub options: ConvertOptions,
    pub fields: Vec<StoredField>,
    /// Elements in all complete shards.
    pub elements: u64,
    pub source_elements: u64,
    /// The steps run offline (source first) and those the pipeline had after them.
    pub offline: Vec<String>,
    pub online: Vec<String>,
    /// The offline part as a spec, where it has one (what each worker of a cluster builds).
    pub source_spec: Option<Value>,
    pub shards: Vec<ShardEntry>,
}

impl Manifest {
    /// Reads `dir`'s manifest.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(show(&path), e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            Error::invalid(
                OP,
                format!("{}: not a stoker convert manifest: {e}", show(&path)),
            )
        })?;
        if m.format != FORMAT || m.format_version != FORMAT_VERSION {
            return Err(Error::invalid(
                OP,
                format!(
                    "{}: format {} version {} (this stoker reads {FORMAT} version {FORMAT_VERSION})",
                    show(&path),
                    m.format,
                    m.format_version
                ),
            ));
        }
        Ok(m)
    }

    /// Writes it to `dir`, under a temporary name renamed over the old one.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::internal(format!("manifest: {e}")))?;
        let tmp = dir.join(format!(".{MANIFEST}.tmp"));
        std::fs::write(&tmp, text + "\n").map_err(|e| Error::io(show(&tmp), e))?;
        let path = dir.join(MANIFEST);
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(show(&path), e))
    }

    pub fn compression(&self) -> Compression {
        Compression::parse(&self.options.compression).unwrap_or(Compression::None)
    }

    /// The shard files, in order.
    pub fn files(&self, dir: &Path) -> Vec<String> {
        (self.shards.iter())
            .map(|s| show(&dir.join(&s.file)))
            .collect()
    }

    /// Every shard is complete and matches its size and (with `hash`) its sha256.
    pub fn verify(&self, dir: &Path, hash: bool) -> Result<()> {
        if !self.complete {
            let done = self.shards.iter().filter(|s| s.complete).count();
            return Err(Error::invalid(
                OP,
                format!(
                    "{}: the conversion is not complete ({done} of {} shards); run the same \
                     convert again to finish it",
                    show(dir),
                    self.shards.len()
                ),
            ));
        }
        for s in &self.shards {
            check_shard(dir, s, hash)?;
        }
        Ok(())
    }
}

impl Manifest {
    /// Python code that reads the shards with TensorFlow: a `parse_example` feature spec and
    /// a `parse(record)` giving the stored fields with their dtypes and shapes.
    pub fn tf_parse_code(&self, dir: &Path) -> String {
        let mut features = String::new();
        let mut fields = String::new();
        for f in &self.fields {
            let tf_dtype = format!("tf.{}", f.dtype);
            let fixed: Option<Vec<usize>> = f.shape.iter().copied().collect();
            let dims = |d: &[usize]| {
                let d: Vec<String> = d.iter().map(usize::to_string).collect();
                format!("[{}]", d.join(", "))
            };
            let shape = match (&fixed, f.shape_feature()) {
                (_, Some(name)) => {
                    features.push_str(&format!(
                        "    {name:?}: tf.io.FixedLenFeature([{}], tf.int64),\n",
                        f.shape.len()
                    ));
                    format!("f[{name:?}]")
                }
                (Some(d), None) => dims(d),
                (None, None) => String::new(),
            };
            let n = &f.name;
            let (feature, value) = match f.stored {
                Stored::Int64 | Stored::Float | Stored::Bytes => {
                    let list = match f.stored {
                        Stored::Int64 => "tf.int64",
                        Stored::Float => "tf.float32",
                        _ => "tf.string",
                    };
                    match &fixed {
                        Some(d) => (
                            format!("tf.io.FixedLenFeature({}, {list})", dims(d)),
                            format!("f[{n:?}]"),
                        ),
                        None => (
                            format!("tf.io.VarLenFeature({list})"),
                            format!("tf.reshape(tf.sparse.to_dense(f[{n:?}]), {shape})"),
                        ),
                    }
                }
                Stored::Raw => (
                    "tf.io.FixedLenFeature([], tf.string)".to_string(),
                    format!("tf.reshape(tf.io.decode_raw(f[{n:?}], {tf_dtype}), {shape})"),
                ),
                Stored::Png | Stored::Jpeg => {
                    let decode = if f.stored == Stored::Png {
                        "decode_png"
                    } else {
                        "decode_jpeg"
                    };
                    let channels = match f.shape.get(2) {
                        Some(Some(c)) => format!(", channels={c}"),
                        _ => String::new(),
                    };
                    (
                        "tf.io.FixedLenFeature([], tf.string)".to_string(),
                        format!("tf.io.{decode}(f[{n:?}]{channels})"),
                    )
                }
            };
            features.push_str(&format!("    {n:?}: {feature},\n"));
            fields.push_str(&format!("        {n:?}: {value},\n"));
        }
        let files: Vec<String> = self
            .files(dir)
            .iter()
            .map(|f| format!("    {f:?},\n"))
            .collect();
        format!(
            "# Reads the shards of {:?} (written by stoker convert) with TensorFlow.\n\
             import tensorflow as tf\n\n\
             FILES = [\n{files}]\n\n\
             FEATURES = {{\n{features}}}\n\n\n\
             def parse(record):\n    \
             f = tf.io.parse_single_example(record, FEATURES)\n    \
             return {{\n{fields}    }}\n\n\n\
             dataset = tf.data.TFRecordDataset(FILES, compression_type={:?}).map(parse)\n",
            show(dir),
            // TensorFlow names no compression "" ("NONE" makes it log an error).
            match self.options.compression.as_str() {
                "NONE" => "",
                other => other,
            },
            files = files.concat(),
        )
    }
}

/// That shard `s` in `dir` has its listed size and (with `hash`) sha256.
fn check_shard(dir: &Path, s: &ShardEntry, hash: bool) -> Result<()> {
    let path = dir.join(&s.file);
    let meta = std::fs::metadata(&path).map_err(|e| Error::io(show(&path), e))?;
    if meta.len() != s.bytes {
        return Err(Error::invalid(
            OP,
            format!(
                "{}: {} bytes, the manifest says {}",
                show(&path),
                meta.len(),
                s.bytes
            ),
        ));
    }
    if hash {
        let got = sha256_of(&path)?;
        if got != s.sha256 {
            return Err(Error::invalid(
                OP,
                format!(
                    "{}: sha256 {got}, the manifest says {}",
                    show(&path),
                    s.sha256
                ),
            ));
        }
    }
    Ok(())
}

fn sha256_of(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| Error::io(show(path), e))?;
    let mut h = Hashing::new(std::io::sink());
    std::io::copy(&mut f, &mut h).map_err(|e| Error::io(show(path), e))?;
    Ok(h.hex())
}

fn show(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A writer that hashes and counts what goes through it.
struct Hashing<W: Write> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing {
            inner,
            hash: Sha256::new(),
            bytes: 0,
        }
    }

    fn hex(&self) -> String {
        to_hex(&self.hash.clone().finalize())
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Progress of a conversion, updated by its jobs as they write.
#[derive(Debug, Default)]
pub struct Progress {
    pub elements: AtomicU64,
    pub bytes: AtomicU64,
    pub shards_done: AtomicUsize,
    /// Set to stop: jobs stop at their next element, leaving their shard unfinished.
    pub cancel: AtomicBool,
}

/// A conversion: the offline part of a pipeline, how it is stored and split into shards.
pub struct Conversion {
    /// The offline chain, source first.
    chain: Vec<Plan>,
    /// The pipeline's options (the error policy; the thread budget is the jobs').
    options: PipelineOptions,
    online: Vec<String>,
    pub convert: ConvertOptions,
    compression: Compression,
    pub fields: Vec<StoredField>,
    pub source_elements: u64,
    source_spec: Option<Value>,
    fingerprint: String,
}

impl Conversion {
    /// The conversion of `plan`'s offline part.
    pub fn new(plan: &Plan, convert: ConvertOptions) -> Result<Conversion> {
        Conversion::build(plan, convert, None)
    }

    /// [`new`](Conversion::new), with the source's element count when it is known (a worker
    /// is told it).
    fn build(plan: &Plan, convert: ConvertOptions, counted: Option<u64>) -> Result<Conversion> {
        let compression = convert.check()?;
        let (chain, online) = if convert.epochs.is_some() {
            augmented_part(plan)?
        } else {
            offline_part(plan)?
        };
        let top = chain
            .last()
            .cloned()
            .ok_or_else(|| Error::internal("empty chain"))?;
        let fields = encode::stored_fields(top.schema(), convert.images, convert.resize)?;
        let options = plan.options();
        // With the whole pipeline's options (`ignore_errors()` may come after the offline
        // part), so that a worker building it runs it as this pipeline does.
        let source_spec = Plan::new(WithOptions {
            input: top.clone(),
            options: options.clone(),
        })
        .and_then(|p| crate::spec::to_spec(&p))
        .ok();
        let source_elements = match counted {
            Some(n) => n,
            None => count_source(&chain[0], &options)?,
        };
        let described = match &source_spec {
            Some(spec) => spec.to_string(),
            // Without a spec (in-memory arrays too large for one) nothing tells this run's
            // data from another's: such a conversion cannot be resumed.
            None => format!("{}|{}", top.describe(), stoker_core::seed::random_u64()),
        };
        let fingerprint = hex_sha256(&format!(
            "{described}|{}|{source_elements}|{}",
            serde_json::to_string(&convert).unwrap_or_default(),
            serde_json::to_string(&options.on_bad_record).unwrap_or_default(),
        ));
        Ok(Conversion {
            chain,
            options,
            online,
            convert,
            compression,
            fields,
            source_elements,
            source_spec,
            fingerprint,
        })
    }

    /// The conversion a job description ([`Conversion::job`]) describes, on a worker.
    pub fn from_job(job: &Value) -> Result<Conversion> {
        let bad = |why: &str| Error::invalid(OP, format!("job description: {why}"));
        let spec = job.get("spec").ok_or_else(|| bad("no spec"))?;
        let convert: ConvertOptions = serde_json::from_value(
            job.get("convert")
                .cloned()
                .ok_or_else(|| bad("no options"))?,
        )
        .map_err(|e| bad(&e.to_string()))?;
        let plan = crate::spec::from_spec(spec)?;
        let counted = job.get("source_elements").and_then(Value::as_u64);
        let conv = Conversion::build(&plan, convert, counted)?;
        let want = job.get("fingerprint").and_then(Value::as_str);
        if want != Some(conv.fingerprint.as_str()) {
            return Err(bad(
                "the worker's pipeline is not the driver's (its source changed, or another \
                 stoker version)",
            ));
        }
        Ok(conv)
    }

    /// What a worker needs to write any shard (the offline part as a spec): for clusters.
    pub fn job(&self) -> Result<Value> {
        let Some(spec) = &self.source_spec else {
            let top = self
                .chain
                .last()
                .ok_or_else(|| Error::internal("empty chain"))?;
            // Why it has none.
            return Err(match crate::spec::to_spec(top) {
                Err(e) => e,
                Ok(_) => Error::internal("the offline part has no spec"),
            });
        };
        Ok(serde_json::json!({
            "spec": spec,
            "convert": self.convert,
            "source_elements": self.source_elements,
            "fingerprint": self.fingerprint,
        }))
    }

    pub fn offline_labels(&self) -> Vec<String> {
        self.chain.iter().map(Plan::label).collect()
    }

    /// What storing images raw costs, where the conversion does: decoded images are many
    /// times larger than the JPEG or PNG files they came from, which the user should hear of
    /// before the disk fills. `None` where no image field is stored raw.
    pub fn raw_images_note(&self) -> Option<String> {
        let raw: Vec<&StoredField> = (self.fields.iter())
            .filter(|f| f.stored == Stored::Raw && encode::is_image(f.dtype, &f.shape))
            .collect();
        if raw.is_empty() {
            return None;
        }
        let names: Vec<&str> = raw.iter().map(|f| f.name.as_str()).collect();
        let each: Option<u64> = raw
            .iter()
            .map(|f| {
                (f.shape.iter()).try_fold(1u64, |n, d| d.and_then(|d| n.checked_mul(d as u64)))
            })
            .try_fold(0u64, |sum, b| b.and_then(|b| sum.checked_add(b)));
        let elements = self
            .source_elements
            .saturating_mul(self.convert.epochs.unwrap_or(1));
        let size = match each {
            Some(b) => format!(
                "{b} bytes an element, about {:.0} MB for {elements} elements",
                b as f64 * elements as f64 / 1e6
            ),
            None => "their pixels' bytes each".to_string(),
        };
        Some(format!(
            "the image fields {} are stored raw (uncompressed: {size}), often many times the \
             size of the image files they were decoded from; --images png (lossless) or \
             --images jpeg stores them encoded (images=\"png\" or \"jpeg\" in Python)",
            names.join(", ")
        ))
    }

    /// How many jobs make the conversion: one per shard, or one per epoch (which writes that
    /// epoch's shards).
    pub fn jobs(&self) -> usize {
        match self.convert.epochs {
            Some(k) => k as usize,
            None => self.convert.num_shards,
        }
    }

    /// The shards (their indexes in the manifest) job `j` writes.
    fn job_shards(&self, j: usize) -> std::ops::Range<usize> {
        match self.convert.epochs {
            Some(_) => j * self.convert.num_shards..(j + 1) * self.convert.num_shards,
            None => j..j + 1,
        }
    }

    /// The file name of shard `s` (in manifest order).
    fn file_name(&self, s: usize) -> String {
        let ext = match self.compression {
            Compression::None => "",
            Compression::Gzip => ".gz",
            Compression::Zlib => ".zz",
        };
        let n = self.convert.num_shards;
        match self.convert.epochs {
            Some(_) => format!("part-e{:04}-{:05}-of-{n:05}.tfrecord{ext}", s / n, s % n),
            None => format!("part-{s:05}-of-{n:05}.tfrecord{ext}"),
        }
    }

    /// The source range of shard `s` (a conversion of epochs: the whole source).
    fn range(&self, s: usize) -> (u64, u64) {
        if self.convert.epochs.is_some() {
            return (0, self.source_elements);
        }
        let n = self.convert.num_shards as u128;
        let total = u128::from(self.source_elements);
        let at = |k: usize| (total * k as u128 / n) as u64;
        (at(s), at(s + 1) - at(s))
    }

    fn entry(&self, s: usize) -> ShardEntry {
        let (source_start, source_count) = self.range(s);
        ShardEntry {
            file: self.file_name(s),
            epoch: self
                .convert
                .epochs
                .map(|_| (s / self.convert.num_shards) as u64),
            source_start,
            source_count,
            complete: false,
            elements: 0,
            bytes: 0,
            sha256: String::new(),
            skipped: 0,
            last_skip: None,
        }
    }

    fn fresh_manifest(&self) -> Manifest {
        Manifest {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            stoker_version: env!("CARGO_PKG_VERSION").into(),
            complete: false,
            fingerprint: self.fingerprint.clone(),
            options: self.convert.clone(),
            fields: self.fields.clone(),
            elements: 0,
            source_elements: self.source_elements,
            offline: self.offline_labels(),
            online: self.online.clone(),
            source_spec: self.source_spec.clone(),
            shards: (0..self.jobs() * self.job_shards(0).len())
                .map(|s| self.entry(s))
                .collect(),
        }
    }

    /// Gets `dir` ready and says which jobs are left (see [`jobs`](Conversion::jobs)): all of
    /// them for a new output, those whose shards are not all complete (or no longer match
    /// their sha256) for an output of the same conversion. An output of another conversion is
    /// an error.
    pub fn begin(&self, dir: &Path) -> Result<Vec<usize>> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(show(dir), e))?;
        let mut manifest = match Manifest::read(dir) {
            Ok(m) if m.fingerprint == self.fingerprint => m,
            Ok(_) => {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "{} holds another conversion (another pipeline or other options); \
                         remove it or convert into another folder",
                        show(dir)
                    ),
                ))
            }
            Err(_) if dir.join(MANIFEST).exists() => {
                return Err(Error::invalid(
                    OP,
                    format!("{}: its manifest cannot be read; remove it", show(dir)),
                ))
            }
            Err(_) => self.fresh_manifest(),
        };
        let mut todo = Vec::new();
        for j in 0..self.jobs() {
            let shards = &mut manifest.shards[self.job_shards(j)];
            if shards
                .iter()
                .all(|s| s.complete && check_shard(dir, s, true).is_ok())
            {
                continue;
            }
            for s in shards {
                s.complete = false;
            }
            todo.push(j);
        }
        manifest.complete = todo.is_empty();
        manifest.elements = manifest
            .shards
            .iter()
            .filter(|s| s.complete)
            .map(|s| s.elements)
            .sum();
        manifest.write(dir)?;
        Ok(todo)
    }

    /// Lists the shards a job wrote (here or on a worker; see
    /// [`write_job`](Conversion::write_job)) as complete in `dir`'s manifest.
    pub fn record(&self, dir: &Path, entries: Vec<ShardEntry>) -> Result<Manifest> {
        let mut m = Manifest::read(dir)?;
        if m.fingerprint != self.fingerprint {
            return Err(Error::invalid(
                OP,
                format!("{}: the manifest changed", show(dir)),
            ));
        }
        for entry in entries {
            let Some(slot) = m.shards.iter_mut().find(|s| s.file == entry.file) else {
                return Err(Error::internal(format!("no shard {}", entry.file)));
            };
            *slot = entry;
        }
        m.elements = m
            .shards
            .iter()
            .filter(|s| s.complete)
            .map(|s| s.elements)
            .sum();
        m.complete = m.shards.iter().all(|s| s.complete);
        m.write(dir)?;
        Ok(m)
    }

    /// The offline part over shard `k`'s source range (a conversion of epochs: over the whole
    /// source), with the options its job runs with.
    fn shard_plan(&self, k: usize, threads: usize) -> Result<Plan> {
        let (start, count) = self.range(k);
        let source = self.chain[0].clone();
        let mut plan = if self.convert.epochs.is_some() {
            source
        } else {
            Plan::new(Take {
                input: Plan::new(Skip {
                    input: source,
                    count: start,
                })?,
                count,
            })?
        };
        for node in &self.chain[1..] {
            plan = Plan::of_step(node.step().with_inputs(vec![plan]))?;
        }
        let mut options = self.options.clone();
        options.threads = Some(threads.max(1));
        // Every shard holds its elements in their order, whatever the thread count.
        options.deterministic = Some(true);
        Plan::new(WithOptions {
            input: plan,
            options,
        })
    }

    /// Writes job `j`'s shards into `dir` (each under a temporary name, renamed when complete,
    /// with its index beside it) on `threads` threads, and says what they hold; the caller
    /// lists them in the manifest ([`record`](Conversion::record)). A job of a conversion of
    /// epochs runs that epoch's pass (its reshuffles and random ops drawing from the epoch's
    /// seeds) and deals its elements round-robin to the epoch's shards.
    pub fn write_job(
        &self,
        dir: &Path,
        j: usize,
        threads: usize,
        progress: &Progress,
    ) -> Result<Vec<ShardEntry>> {
        if j >= self.jobs() {
            return Err(Error::invalid(OP, format!("no job {j}")));
        }
        let shards: Vec<usize> = self.job_shards(j).collect();
        let pipeline = Pipeline::new(&self.shard_plan(shards[0], threads)?)?;
        // Steps given no seed draw from the conversion's fingerprint: every job, local or on
        // another machine, and a conversion resumed later, make the same bytes.
        let root = self.fingerprint.get(..16).unwrap_or_default();
        let root = u64::from_str_radix(root, 16).unwrap_or(0);
        let n = pipeline.seed_values().len() as u64;
        let values = (0..n)
            .map(|k| stoker_core::exec::shuffle::epoch_seed(root, k))
            .collect();
        pipeline.set_seed_values(values)?;
        let it: BoxIter = match self.convert.epochs {
            Some(_) => Box::new(pipeline.start_iteration(j as u64)?.driver),
            None => pipeline.iter()?,
        };
        let tmps: Vec<PathBuf> = (shards.iter())
            .map(|&s| dir.join(format!(".{}.tmp", self.file_name(s))))
            .collect();
        let written = match self.write_elements(it, &tmps, progress) {
            Ok(w) => w,
            Err(e) => {
                for tmp in &tmps {
                    let _ = std::fs::remove_file(tmp);
                }
                return Err(e);
            }
        };
        let (skipped, last_skip) = pipeline.stats().iter().fold((0, None), |(n, last), s| {
            (n + s.skipped, s.last_skip_reason.clone().or(last))
        });
        let mut entries = Vec::with_capacity(shards.len());
        for ((s, tmp), (elements, offsets, out)) in shards.iter().zip(&tmps).zip(written) {
            let file = self.file_name(*s);
            let path = dir.join(&file);
            let index_path = PathBuf::from(RecordIndex::path_for(&show(&path)));
            if self.compression == Compression::None {
                let tmp_index = dir.join(format!(".{file}.idx.tmp"));
                offsets.write(&show(&tmp_index))?;
                std::fs::rename(&tmp_index, &index_path)
                    .map_err(|e| Error::io(show(&index_path), e))?;
            }
            std::fs::rename(tmp, &path).map_err(|e| Error::io(show(&path), e))?;
            // The index must not be older than its data file.
            if self.compression == Compression::None {
                if let Ok(f) = File::options().append(true).open(&index_path) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
            }
            progress.shards_done.fetch_add(1, Relaxed);
            entries.push(ShardEntry {
                complete: true,
                elements,
                bytes: out.bytes,
                sha256: out.hex(),
                // A job of one shard says its shard's skips; an epoch's, the epoch's (on its
                // first shard).
                skipped: if entries.is_empty() { skipped } else { 0 },
                last_skip: if entries.is_empty() {
                    last_skip.clone()
                } else {
                    None
                },
                ..self.entry(*s)
            });
        }
        Ok(entries)
    }

    /// Writes the elements of `it` as records into `tmps`, dealt round-robin (one file: all
    /// of them); per file its count, index, and the hashing writer (flushed and synced).
    #[allow(clippy::type_complexity)]
    fn write_elements(
        &self,
        mut it: BoxIter,
        tmps: &[PathBuf],
        progress: &Progress,
    ) -> Result<Vec<(u64, RecordIndex, Hashing<BufWriter<File>>)>> {
        let mut outs = Vec::with_capacity(tmps.len());
        for tmp in tmps {
            let file = File::create(tmp).map_err(|e| Error::io(show(tmp), e))?;
            let out = Hashing::new(BufWriter::with_capacity(1 << 20, file));
            outs.push((
                0u64,
                RecordIndex::default(),
                RecordWriter::new(out, self.compression),
            ));
        }
        let mut at = vec![0u64; tmps.len()];
        let mut i = 0usize;
        while let Some(e) = it.next()? {
            if progress.cancel.load(Relaxed) {
                return Err(Error::invalid(OP, "cancelled"));
            }
            let record = encode::encode(
                &e,
                &self.fields,
                self.convert.resize,
                self.convert.jpeg_quality,
            )?;
            let k = i % outs.len();
            let (elements, index, writer) = &mut outs[k];
            writer
                .write(&record)
                .map_err(|e| Error::io(show(&tmps[k]), e))?;
            let framed = record.len() as u64 + 16;
            index.offsets.push(at[k]);
            index.sizes.push(framed);
            at[k] += framed;
            *elements += 1;
            i += 1;
            progress.elements.fetch_add(1, Relaxed);
            progress.bytes.fetch_add(framed, Relaxed);
        }
        let mut done = Vec::with_capacity(outs.len());
        for ((elements, index, writer), tmp) in outs.into_iter().zip(tmps) {
            let io = |e: std::io::Error| Error::io(show(tmp), e);
            let mut out = writer.finish().map_err(io)?;
            out.flush().map_err(io)?;
            out.inner.get_ref().sync_all().map_err(io)?;
            done.push((elements, index, out));
        }
        Ok(done)
    }

    /// Converts into `dir` on this machine: the jobs left ([`begin`](Conversion::begin)),
    /// `workers` at a time (each on its share of the threads), their shards listed in the
    /// manifest as each job completes. On an error the shards finished stay listed; the first
    /// error is returned once the jobs running have stopped.
    pub fn run_local(&self, dir: &Path, workers: usize, progress: &Progress) -> Result<Manifest> {
        let todo = self.begin(dir)?;
        let workers = workers.max(1);
        let jobs = workers.min(todo.len()).max(1);
        let threads = (workers / jobs).max(1);
        let next = AtomicUsize::new(0);
        let first_error: Mutex<Option<Error>> = Mutex::new(None);
        let record = Mutex::new(());
        std::thread::scope(|scope| {
            for w in 0..jobs {
                let (todo, next, first_error, record) = (&todo, &next, &first_error, &record);
                let spawned = std::thread::Builder::new()
                    .name(format!("stoker-convert-{w}"))
                    .spawn_scoped(scope, move || loop {
                        if progress.cancel.load(Relaxed) {
                            return;
                        }
                        let Some(&k) = todo.get(next.fetch_add(1, Relaxed)) else {
                            return;
                        };
                        let done = self
                            .write_job(dir, k, threads, progress)
                            .and_then(|entries| {
                                let _guard = record.lock().unwrap_or_else(|e| e.into_inner());
                                self.record(dir, entries)
                            });
                        if let Err(e) = done {
                            progress.cancel.store(true, Relaxed);
                            let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                            first.get_or_insert(e);
                            return;
                        }
                    });
                if let Err(e) = spawned {
                    progress.cancel.store(true, Relaxed);
                    let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert(Error::internal(format!("cannot start a thread: {e}")));
                }
            }
        });
        if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
            return Err(e);
        }
        let m = Manifest::read(dir)?;
        if !m.complete && progress.cancel.load(Relaxed) {
            return Err(Error::invalid(OP, "cancelled"));
        }
        Ok(m)
    }
}

fn hex_sha256(text: &str) -> String {
    to_hex(&Sha256::digest(text.as_bytes()))
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The steps of `plan` from its source up, which must each have one input.
fn chain_of(plan: &Plan) -> Result<Vec<Plan>> {
    let mut down = vec![plan.clone()];
    while let Some(last) = down.last().filter(|p| !p.step().is_source()) {
        let inputs = last.step().inputs();
        let [one] = inputs.as_slice() else {
            return Err(Error::invalid(
                OP,
                format!(
                    "'{}' has {} inputs: convert runs a pipeline from one source",
                    last.label(),
                    inputs.len()
                ),
            ));
        };
        let one = (*one).clone();
        down.push(one);
    }
    down.reverse();
    Ok(down)
}

/// The offline chain of `plan` (source first) and the labels of the steps left online.
pub(crate) fn offline_part(plan: &Plan) -> Result<(Vec<Plan>, Vec<String>)> {
    let mut chain = chain_of(plan)?;
    let source = &chain[0];
    if source.randomness() != Randomness::Fixed {
        return Err(Error::invalid(
            OP,
            format!(
                "nothing to run offline: the source '{}' does not give the same elements every \
                 pass (convert with epochs to store augmented epochs)",
                source.label()
            ),
        ));
    }
    let offline = 1 + chain[1..]
        .iter()
        .take_while(|p| p.step().per_element())
        .count();
    let online = chain[offline..].iter().map(Plan::label).collect();
    chain.truncate(offline);
    Ok((chain, online))
}

/// The augmented chain of `plan` for a conversion of epochs (source first): its element-wise
/// steps, random or not (native maps), and its shuffles, up to the first batch, positional
/// step or Python function; and the labels of the steps left online.
fn augmented_part(plan: &Plan) -> Result<(Vec<Plan>, Vec<String>)> {
    let mut chain = chain_of(plan)?;
    let kept = 1 + chain[1..]
        .iter()
        .take_while(|p| match p.op::<Map>() {
            // Random or not, as long as every op has a spec: no Python, and what a worker
            // of a cluster can build.
            Some(m) => m.ops.iter().all(|o| o.spec().is_ok()),
            None => {
                p.op::<Shuffle>().is_some()
                    || p.op::<GlobalShuffle>().is_some()
                    || p.step().per_element()
            }
        })
        .count();
    let online = chain[kept..].iter().map(Plan::label).collect();
    chain.truncate(kept);
    Ok((chain, online))
}

/// How many elements the source gives in a pass: by random access or the plan where they
/// tell, else by reading it.
fn count_source(source: &Plan, options: &PipelineOptions) -> Result<u64> {
    if let Cardinality::Finite(n) = source.step().cardinality() {
        return Ok(n);
    }
    let plan = Plan::new(WithOptions {
        input: source.clone(),
        options: options.clone(),
    })?;
    if source.step().supports_random_access() {
        let ctx = crate::build::BuildCtx::new(
            options.clone(),
            stoker_core::StatsRegistry::new(),
            crate::build::Resources::new(),
            0,
        );
        if let Some(access) = source.step().random_access(source, &ctx)? {
            return access.count();
        }
    }
    let mut it = Pipeline::new(&plan)?.iter()?;
    let mut n = 0;
    while it.next()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// The elements of the complete conversion in `dir`, in their order: its shards read in turn
/// (with their record indexes: random access, so `global_shuffle` and fast restores), each
/// record parsed into the stored fields, and encoded images decoded unless `decode_images` is
/// false (then they stay strings, for a fused decode-and-crop op after).
pub fn from_converted(dir: &Path, decode_images: bool, num_parallel_reads: i64) -> Result<Plan> {
    let m = Manifest::read(dir)?;
    m.verify(dir, false)?;
    let source = match m.options.epochs {
        None => Plan::tfrecord(m.files(dir), m.compression(), true, num_parallel_reads)?,
        // Epoch after epoch; each read round-robin from its shards, in the order it was dealt.
        Some(epochs) => {
            let n = m.options.num_shards;
            let files = m.files(dir);
            let mut plan: Option<Plan> = None;
            for e in 0..epochs as usize {
                let epoch = files[e * n..(e + 1) * n].to_vec();
                let reads = Plan::tfrecord(epoch, m.compression(), true, n as i64)?;
                plan = Some(match plan {
                    None => reads,
                    Some(before) => Plan::new(Concatenate {
                        input: before,
                        other: reads,
                    })?,
                });
            }
            plan.ok_or_else(|| Error::internal("no epochs"))?
        }
    };
    let mut ops: Vec<Arc<dyn Op>> = vec![Arc::new(ParseConverted {
        fields: m.fields.clone(),
        field: "record".into(),
    })];
    if decode_images {
        for f in m.fields.iter().filter(|f| f.stored.is_image()) {
            let mut spec = serde_json::json!({"op": "decode_image", "field": f.name});
            if let Some(Some(c)) = f.shape.get(2) {
                spec["channels"] = (*c).into();
            }
            ops.push(OpSpec::from_json(&spec)?.build()?);
        }
    }
    source.map(ops, None, None)
}
