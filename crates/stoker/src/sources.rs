//! Sources: file lists and globs, TFRecord files, ranges, and the openers that `interleave`
//! uses to turn one input element (e.g. a file name) into a dataset.

use std::fmt::Debug;
use std::sync::Arc;

use stoker_core::element::{names, Element, FieldSpec, Names, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::{DType, Error, ErrorPolicy, Result, StageStats, Tensor};
use stoker_formats::tfrecord_reader::DEFAULT_MAX_RECORD_BYTES;
use stoker_formats::{Compression, TfRecordIter};

use crate::build::BuildCtx;
use crate::plan::SpecCtx;

/// Turns one element into a dataset, for `interleave`.
pub trait Opener: Send + Sync + Debug {
    fn output_schema(&self, input: &Schema) -> Result<Schema>;
    /// The dataset of `element`, input element `index` of the pass (from 0), at a saved
    /// state if one is given.
    fn open(
        &self,
        index: u64,
        element: &Element,
        ctx: &BuildCtx,
        stats: &Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter>;
    /// A serialisable description, or an error for openers that cannot be saved.
    fn spec(&self) -> Result<serde_json::Value>;
}

/// Expands glob patterns (sorted) and checks that literal paths exist.
pub fn expand_files(step: &str, patterns: &[String]) -> Result<Vec<String>> {
    let mut files = Vec::new();
    for p in patterns {
        if p.contains(['*', '?', '[']) {
            let paths =
                glob::glob(p).map_err(|e| Error::schema(step, format!("bad glob '{p}': {e}")))?;
            let mut matched: Vec<String> = paths
                .filter_map(|r| r.ok())
                .filter(|p| p.is_file())
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matched.is_empty() {
                return Err(Error::io(
                    p.clone(),
                    std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no files match this pattern",
                    ),
                ));
            }
            matched.sort();
            files.extend(matched);
        } else {
            match std::fs::metadata(p) {
                Ok(m) if m.is_file() => files.push(p.clone()),
                Ok(_) => {
                    return Err(Error::io(
                        p.clone(),
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, "is not a file"),
                    ))
                }
                Err(e) => return Err(Error::io(p.clone(), e)),
            }
        }
    }
    Ok(files)
}

/// The file name held by an element with one scalar string field.
pub fn file_name_of(step: &str, element: &Element) -> Result<String> {
    let [t] = element.tensors.as_slice() else {
        return Err(Error::invalid(
            step,
            "expected elements with exactly one field (a file name)",
        ));
    };
    let value = t
        .bytes_data()
        .filter(|_| t.shape().is_empty())
        .and_then(|b| b.values.first())
        .ok_or_else(|| Error::invalid(step, "expected a scalar string file name"))?;
    String::from_utf8(value.to_vec()).map_err(|_| Error::invalid(step, "file name is not UTF-8"))
}

/// Opens each input file name as a TFRecord file.
#[derive(Debug, Clone)]
pub struct TfRecordOpener {
    pub compression: Compression,
    pub verify_crc: bool,
    /// The largest record read (see `RecordReader::set_max_record_bytes`).
    pub max_record_bytes: u64,
}

impl TfRecordOpener {
    pub fn open_path(
        &self,
        path: &str,
        policy: ErrorPolicy,
        stats: &Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let (c, crc, st) = (self.compression, self.verify_crc, Arc::clone(stats));
        let max = self.max_record_bytes;
        Ok(Box::new(match at {
            None => TfRecordIter::open(path, c, crc, max, policy, st)?,
            Some(state) => TfRecordIter::open_at(path, c, crc, max, policy, st, state)?,
        }))
    }
}

impl Opener for TfRecordOpener {
    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !input.dynamic {
            let ok = matches!(input.fields.as_slice(), [f] if f.dtype == DType::Bytes && f.shape.is_empty());
            if !ok {
                return Err(Error::schema(
                    "interleave(TFRecordDataset)",
                    format!("expected a dataset of file names (one scalar string), got {input}"),
                ));
            }
        }
        Ok(Schema::new(vec![FieldSpec::fixed(
            TfRecordIter::FIELD,
            DType::Bytes,
            &[],
        )]))
    }

    fn open(
        &self,
        _: u64,
        element: &Element,
        ctx: &BuildCtx,
        stats: &Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let path = file_name_of("TFRecordDataset", element)?;
        self.open_path(&path, ctx.options.on_bad_record, stats, at)
    }

    fn spec(&self) -> Result<serde_json::Value> {
        let mut spec = serde_json::json!({
            "source": "tfrecord",
            "compression_type": self.compression.name(),
            "verify_crc": self.verify_crc,
        });
        if self.max_record_bytes != DEFAULT_MAX_RECORD_BYTES {
            spec["max_record_bytes"] = self.max_record_bytes.into();
        }
        Ok(spec)
    }
}

/// `range(start, stop, step)` as int64 scalars.
pub struct RangeIter {
    next: i64,
    stop: i64,
    step: i64,
    names: Names,
    handed_out: u64,
}

impl RangeIter {
    pub fn new(start: i64, stop: i64, step: i64) -> Self {
        RangeIter {
            next: start,
            stop,
            step,
            names: names(&["value"]),
            handed_out: 0,
        }
    }

    /// Restored after the number of elements the state holds.
    pub fn restore(start: i64, stop: i64, step: i64, state: &State) -> Result<Self> {
        let n = state.int("range", 0)?;
        let mut it = RangeIter::new(start, stop, step);
        let at = i64::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(step))
            .and_then(|d| start.checked_add(d))
            .ok_or_else(|| stoker_core::exec::state::mismatch("range"))?;
        it.next = at;
        it.handed_out = n;
        Ok(it)
    }
}

impl ElementIter for RangeIter {
    fn state(&self) -> Result<State> {
        Ok(State::leaf(vec![self.handed_out]))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let more = if self.step > 0 {
            self.next < self.stop
        } else {
            self.next > self.stop
        };
        if !more {
            return Ok(None);
        }
        let v = self.next;
        self.next = self.next.saturating_add(self.step);
        self.handed_out += 1;
        Ok(Some(Element::new(
            self.names.clone(),
            vec![Tensor::from_slice(DType::I64, vec![], &[v])?],
        )))
    }
}

/// The elements of `files`, `cycle` files read in turn (one element from each, tf.data's
/// `num_parallel_reads` order), each file opened with `open(path, state)`; restored at `at`,
/// a state it reported (a restore keeps the number of files read in turn it was saved with,
/// since that fixes the order). With more than one file in turn, each has a thread reading
/// ahead.
pub(crate) fn read_files(
    files: &[String],
    (cycle, reads): (usize, Option<Arc<stoker_core::knob::Knob>>),
    stats: Arc<StageStats>,
    at: Option<&State>,
    open: impl Fn(&str, Option<&State>) -> Result<BoxIter> + Send + Sync + 'static,
) -> Result<BoxIter> {
    use stoker_core::exec::interleave::{InterleaveConfig, InterleaveIter, OpenFn};
    use stoker_core::stats::Metered;
    let parallel = match at {
        Some(s) => InterleaveIter::saved_cycle_length(s)?,
        None => cycle.max(1),
    };
    let open: OpenFn = Arc::new(move |_, e: &Element, at: Option<&State>| {
        let path = file_name_of("files", e)?;
        open(&path, at)
    });
    let config = InterleaveConfig {
        cycle_length: parallel,
        block_length: 1,
        prefetch_per_slot: if parallel > 1 { 256 } else { 0 },
        reads,
    };
    let names = Box::new(crate::build::file_names(files, "filename")?);
    let st = Arc::clone(&stats);
    let it = match at {
        None => InterleaveIter::new(names, open, config, st),
        Some(s) => InterleaveIter::restore(names, open, config, st, s)?,
    };
    Ok(if parallel > 1 {
        Box::new(it)
    } else {
        Metered::wrap(Box::new(it), stats)
    })
}

/// How many files a source reads in turn for `num_parallel_reads` (AUTOTUNE: one per core of
/// the budget, at most one per file; on one core, reading on the consuming thread beats
/// handing every element to another thread).
pub(crate) fn files_in_turn(num_parallel_reads: i64, files: usize, ctx: &BuildCtx) -> usize {
    match num_parallel_reads {
        crate::properties::AUTOTUNE => ctx.order_budget.min(files.max(1)),
        n => n.max(1) as usize,
    }
}

/// A spec value that is one string or a list of strings.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Strings {
    One(String),
    Many(Vec<String>),
}

impl Strings {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Strings::One(s) => vec![s],
            Strings::Many(v) => v,
        }
    }
}

/// What the file sources (`tfrecord`, `text_line`, `fixed_length_record`) share: the patterns
/// as given, the files they matched when the dataset was made, their compression, and how
/// many files are read in turn.
#[derive(Clone, Debug)]
pub struct Files {
    pub patterns: Vec<String>,
    pub files: Vec<String>,
    pub compression: Compression,
    pub num_parallel_reads: i64,
}

impl Files {
    /// Expands and checks `patterns` now (`op` names the source in errors).
    pub fn new(
        op: &str,
        patterns: Vec<String>,
        compression: Compression,
        num_parallel_reads: i64,
    ) -> Result<Files> {
        let files = expand_files(op, &patterns)?;
        Ok(Files {
            patterns,
            files,
            compression,
            num_parallel_reads,
        })
    }

    /// From a spec's `files`, `compression_type` and `num_parallel_reads`, its paths relative
    /// to the spec's folder.
    pub fn from_spec(
        op: &str,
        files: Strings,
        compression_type: &str,
        num_parallel_reads: i64,
        ctx: &SpecCtx,
    ) -> Result<Files> {
        let patterns = files.into_vec().iter().map(|p| ctx.load_path(p)).collect();
        let compression = Compression::parse(compression_type)?;
        Files::new(op, patterns, compression, num_parallel_reads)
    }

    /// The spec's `files`.
    pub fn spec_files(&self, ctx: &SpecCtx) -> Strings {
        Strings::Many(self.patterns.iter().map(|p| ctx.save_path(p)).collect())
    }

    /// The spec's `compression_type`.
    pub fn compression_type(&self) -> String {
        self.compression.name().to_string()
    }

    /// `kind(N files<detail>, parallel_reads=n)`, for stats and `explain()`.
    pub fn label(&self, kind: &str, detail: &str) -> String {
        format!(
            "{kind}({} files{detail}, parallel_reads={})",
            self.files.len(),
            self.num_parallel_reads
        )
    }

    /// The sources' parallelism knob.
    pub fn knob(&self) -> Option<(&'static str, Option<i64>)> {
        Some(("num_parallel_reads", Some(self.num_parallel_reads)))
    }

    /// How many files are read in turn in a run with `ctx`.
    pub fn in_turn(&self, ctx: &BuildCtx) -> usize {
        files_in_turn(self.num_parallel_reads, self.files.len(), ctx)
    }

    /// The files' elements, `open` reading one file (at a state of its reader, on restore).
    pub fn read<F>(
        &self,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
        open: F,
    ) -> Result<BoxIter>
    where
        F: Fn(&str, Option<&State>) -> Result<BoxIter> + Send + Sync + 'static,
    {
        let cycle = match at {
            Some(s) => stoker_core::exec::interleave::InterleaveIter::saved_cycle_length(s)?,
            None => self.in_turn(ctx),
        };
        let n = Some(self.num_parallel_reads);
        let reads = crate::tuner::reads(ctx, &stats, "num_parallel_reads", n, cycle);
        read_files(&self.files, (self.in_turn(ctx), reads), stats, at, open)
    }
}
