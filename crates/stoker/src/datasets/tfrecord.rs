//! `TFRecordDataset`: the records of TFRecord files, in field `record`.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::shuffle::ReadBuffer;
use stoker_core::exec::{BoxIter, State};
use stoker_core::Origin;
use stoker_core::{DType, ErrorPolicy, Result, StageStats};
use stoker_formats::tfrecord_index::RecordFile;
use stoker_formats::tfrecord_reader::DEFAULT_MAX_RECORD_BYTES;
use stoker_formats::Compression;

use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;
use crate::sources::{Files, Strings, TfRecordOpener};

#[derive(Clone, Debug)]
pub struct TfRecord {
    pub files: Files,
    pub verify_crc: bool,
    /// The largest record read (see `RecordReader::set_max_record_bytes`).
    pub max_record_bytes: u64,
}

/// The source's name in errors, as in tf.data.
const OP: &str = "TFRecordDataset";

impl TfRecord {
    /// Expands and checks `patterns` now.
    pub fn new(
        patterns: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    ) -> Result<TfRecord> {
        let files = Files::new(OP, patterns, compression, num_parallel_reads)?;
        Ok(TfRecord {
            files,
            verify_crc,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        })
    }

    /// Reads records up to `max` bytes (a larger one is an error naming it).
    pub fn with_max_record_bytes(mut self, max: u64) -> TfRecord {
        self.max_record_bytes = max;
        self
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    files: Strings,
    #[serde(default)]
    compression_type: String,
    #[serde(default = "yes")]
    verify_crc: bool,
    #[serde(default = "one")]
    num_parallel_reads: i64,
    #[serde(
        default = "default_max_record_bytes",
        skip_serializing_if = "is_default_max_record_bytes"
    )]
    max_record_bytes: u64,
}

pub(crate) fn default_max_record_bytes() -> u64 {
    DEFAULT_MAX_RECORD_BYTES
}

fn is_default_max_record_bytes(max: &u64) -> bool {
    *max == DEFAULT_MAX_RECORD_BYTES
}

fn yes() -> bool {
    true
}

fn one() -> i64 {
    1
}

impl Plan {
    /// TFRecord files (paths or glob patterns, expanded and checked now).
    pub fn tfrecord(
        patterns: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    ) -> Result<Plan> {
        Plan::new(TfRecord::new(
            patterns,
            compression,
            verify_crc,
            num_parallel_reads,
        )?)
    }
}

impl DatasetOp for TfRecord {
    const KIND: &'static str = "tfrecord";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::new(vec![FieldSpec::fixed(
            stoker_formats::TfRecordIter::FIELD,
            DType::Bytes,
            &[],
        )]))
    }

    fn label(&self) -> String {
        self.files.label(Self::KIND, "")
    }

    /// Unknown, as in tf.data: counting the records reads every file.
    fn cardinality(&self) -> Cardinality {
        Cardinality::Unknown
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn threads(&self) -> crate::properties::Threads {
        crate::properties::Threads::Workers
    }

    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        self.files.knob()
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let policy = ctx.options.on_bad_record;
        let opener = TfRecordOpener {
            compression: self.files.compression,
            verify_crc: self.verify_crc,
            max_record_bytes: self.max_record_bytes,
        };
        let st = Arc::clone(&stats);
        let open = move |path: &str, at: Option<&State>| opener.open_path(path, policy, &st, at);
        self.files.read(ctx, stats, at, open)
    }

    /// Uncompressed files only: a compressed stream cannot be entered in the middle.
    fn supports_random_access(&self) -> bool {
        self.files.compression == Compression::None
    }

    fn random_access(&self, node: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        if !self.supports_random_access() {
            return Ok(None);
        }
        let cycle = self.files.in_turn(ctx);
        let skip_into = (ctx.options.on_bad_record == ErrorPolicy::Skip)
            .then(|| crate::plan::stage_stats(node, ctx));
        Ok(Some(Box::new(RecordAccess::open(
            &self.files.files,
            cycle,
            self.verify_crc,
            ctx.options.threads(),
            skip_into,
        ))))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: self.files.spec_files(ctx),
            compression_type: self.files.compression_type(),
            verify_crc: self.verify_crc,
            num_parallel_reads: self.files.num_parallel_reads,
            max_record_bytes: self.max_record_bytes,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let files = Files::from_spec(OP, s.files, &s.compression_type, s.num_parallel_reads, ctx)?;
        Ok(TfRecord {
            files,
            verify_crc: s.verify_crc,
            max_record_bytes: s.max_record_bytes,
        })
    }
}

/// (file, record) of each of some positions.
type Located = Vec<(u32, u32)>;

/// Random access to the records of the files, by their position in the order the files are
/// read in (`cycle` files in turn, a record from each), through each file's record index.
/// The order needs only the files' record counts (their index lines are counted). For a
/// restore, the positions asked for are found by a walk through the order and the indexes
/// are parsed only around the records asked for; reads all over the pass (`count`, a global
/// shuffle) first load the whole indexes and the order. Files are counted and read on up to
/// `threads` threads.
struct RecordAccess {
    paths: Vec<String>,
    verify_crc: bool,
    /// The files, opened at first use: under the skip policy, opening a file whose record
    /// headers are damaged scans it, which a caller that only asks `may_skip` must not pay.
    files: OnceLock<Vec<RecordFile>>,
    names: stoker_core::element::Names,
    cycle: usize,
    threads: usize,
    /// Records per file, once counted.
    counts: OnceLock<Vec<u64>>,
    /// Position in the pass → (file, record), once `count` was asked.
    order: OnceLock<Vec<(u32, u32)>>,
    /// Under the skip policy, the stage's counters: a damaged record is skipped and counted
    /// there (by `get_or_skip`).
    skip_into: Option<Arc<StageStats>>,
    /// What damaged record headers cost (each file's), not counted yet.
    unplaced: std::sync::Mutex<Vec<(String, stoker_formats::tfrecord_reader::Recovery)>>,
}

impl RecordAccess {
    /// With `skip_into` (the skip policy), a file whose record headers are damaged is read
    /// through its intact records, the damage counted there.
    fn open(
        paths: &[String],
        cycle: usize,
        verify_crc: bool,
        threads: usize,
        skip_into: Option<Arc<StageStats>>,
    ) -> RecordAccess {
        RecordAccess {
            paths: paths.to_vec(),
            verify_crc,
            files: OnceLock::new(),
            names: stoker_core::element::names(&[stoker_formats::TfRecordIter::FIELD]),
            cycle,
            threads: threads.max(1),
            counts: OnceLock::new(),
            order: OnceLock::new(),
            skip_into,
            unplaced: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn files(&self) -> Result<&[RecordFile]> {
        if let Some(f) = self.files.get() {
            return Ok(f);
        }
        let mut unplaced = Vec::new();
        let files = self
            .paths
            .iter()
            .map(|p| match &self.skip_into {
                None => RecordFile::open(p, self.verify_crc),
                Some(_) => {
                    let (file, lost) = RecordFile::open_skipping(p, self.verify_crc)?;
                    unplaced.extend(lost.into_iter().map(|l| (p.clone(), l)));
                    Ok(file)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let mut first = false;
        let files = self.files.get_or_init(|| {
            first = true;
            files
        });
        // Two threads may open the files at once: the losses are kept from one of them.
        if first {
            self.unplaced
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(unplaced);
        }
        Ok(files)
    }

    fn counts(&self) -> Result<&[u64]> {
        if let Some(c) = self.counts.get() {
            return Ok(c);
        }
        let counts = in_parallel(self.files()?, self.threads, |f| Ok(f.count()? as u64))?;
        Ok(self.counts.get_or_init(|| counts))
    }

    /// The whole order, the indexes loaded.
    fn order(&self) -> Result<&[(u32, u32)]> {
        if let Some(o) = self.order.get() {
            return Ok(o);
        }
        in_parallel(self.files()?, self.threads, RecordFile::load_index)?;
        let counts = self.counts()?;
        let mut turns = Turns::new(self.paths.len(), self.cycle);
        let mut order = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
        while let Some((f, r)) = turns.next(|f, r| Ok(r < counts[f]))? {
            order.push((f as u32, r as u32));
        }
        Ok(self.order.get_or_init(|| order))
    }

    /// (file, record) of each of `positions`, by a walk through the order up to the last, and
    /// with `upto` (past every position), the turns after the first `upto` records.
    fn walk(&self, positions: &[u64], upto: Option<u64>) -> Result<(Located, Option<Turns>)> {
        let counts = self.counts()?;
        let mut sorted: Vec<(u64, usize)> = positions.iter().copied().zip(0..).collect();
        sorted.sort_unstable();
        let mut out = vec![(0, 0); positions.len()];
        let mut turns = Turns::new(self.paths.len(), self.cycle);
        // Turns taken, and the last one's (file, record).
        let mut at = 0u64;
        let mut found = (0, 0);
        for (p, k) in sorted {
            while at <= p {
                let (f, r) = turns.next(|f, r| Ok(r < counts[f]))?.ok_or_else(|| {
                    stoker_core::Error::invalid("tfrecord", format!("no record at position {p}"))
                })?;
                found = (f as u32, r as u32);
                at += 1;
            }
            out[k] = found;
        }
        let Some(upto) = upto.filter(|&u| u >= at) else {
            return Ok((out, None));
        };
        while at < upto && turns.next(|f, r| Ok(r < counts[f]))?.is_some() {
            at += 1;
        }
        Ok((out, Some(turns)))
    }

    /// The `n` elements at `located`: under the skip policy (`skip`), `None` for a damaged
    /// record, counted when `count`.
    fn read(
        &self,
        n: usize,
        located: Located,
        skip: bool,
        count: bool,
    ) -> Result<Vec<Option<Element>>> {
        let mut wanted: Vec<(u32, u32, usize)> = located
            .into_iter()
            .zip(0..)
            .map(|((f, r), k)| (f, r, k))
            .collect();
        // Per file, in record order (records close together are read at once); handed out
        // in the order asked.
        wanted.sort_unstable();
        let groups: Vec<&[(u32, u32, usize)]> = wanted.chunk_by(|a, b| a.0 == b.0).collect();
        let files = self.files()?;
        let read = in_parallel(&groups, self.threads, |group| {
            let file = &files[group[0].0 as usize];
            let records: Vec<usize> = group.iter().map(|&(_, r, _)| r as usize).collect();
            let path: Arc<str> = Arc::from(file.path());
            let data: Vec<Option<(bytes::Bytes, u64)>> = match file.read_many(&records) {
                Ok(data) => data.into_iter().map(Some).collect(),
                Err(e @ stoker_core::Error::CorruptRecord { .. }) => match &self.skip_into {
                    // One by one: the damaged records skipped and counted, the others read.
                    Some(stats) if skip => records
                        .iter()
                        .map(|&r| match file.read_many(&[r]) {
                            Ok(mut one) => Ok(one.pop()),
                            Err(e @ stoker_core::Error::CorruptRecord { .. }) => {
                                if count {
                                    stats.add_skip(e.to_string());
                                }
                                Ok(None)
                            }
                            Err(e) => Err(e),
                        })
                        .collect::<Result<_>>()?,
                    _ => return Err(e),
                },
                Err(e) => return Err(e),
            };
            Ok(data
                .into_iter()
                .zip(group.iter())
                .filter_map(|(read, &(_, r, k))| {
                    let (data, offset) = read?;
                    let origin = Origin {
                        file: Arc::clone(&path),
                        record: u64::from(r),
                        offset,
                    };
                    let t = stoker_core::Tensor::scalar_bytes(data, Some(origin));
                    Some((k, Element::new(self.names.clone(), vec![t])))
                })
                .collect::<Vec<_>>())
        })?;
        let mut out: Vec<Option<Element>> = vec![None; n];
        for (k, e) in read.into_iter().flatten() {
            out[k] = Some(e);
        }
        Ok(out)
    }

    /// (file, record) of each of `positions`.
    fn locate(&self, positions: &[u64]) -> Result<Located> {
        match self.order.get() {
            Some(order) => positions
                .iter()
                .map(|&p| {
                    order.get(p as usize).copied().ok_or_else(|| {
                        stoker_core::Error::invalid(
                            "tfrecord",
                            format!("no record at position {p}"),
                        )
                    })
                })
                .collect::<Result<Vec<_>>>(),
            None => Ok(self.walk(positions, None)?.0),
        }
    }

    /// The interleave's state at `turns`.
    fn state_of(&self, turns: &Turns) -> Result<State> {
        let files = self.files()?;
        turns.state(|f, used| files[f].offset(used as usize))
    }
}

impl RandomAccess for RecordAccess {
    fn count(&self) -> Result<u64> {
        Ok(self.order()?.len() as u64)
    }

    fn prepare(&self, _upto: u64) -> Result<()> {
        self.counts().map(drop)
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        let read = self.read(positions.len(), self.locate(positions)?, false, true)?;
        Ok(read.into_iter().flatten().collect())
    }

    fn get_or_skip(&self, positions: &[u64], count: bool) -> Result<Vec<Option<Element>>> {
        self.read(positions.len(), self.locate(positions)?, true, count)
    }

    fn may_skip(&self) -> bool {
        self.skip_into.is_some()
    }

    fn count_unplaced_losses(&self) -> u64 {
        let Some(stats) = &self.skip_into else {
            return 0;
        };
        let lost = std::mem::take(&mut *self.unplaced.lock().unwrap_or_else(|e| e.into_inner()));
        let mut records = 0;
        for (path, l) in lost {
            stats.add_loss(l.records, l.rest_lost, format!("{path}: {}", l.note));
            stats.add_skipped_bytes(l.bytes);
            records += l.records;
        }
        records
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        let (_, turns) = self.walk(&[], Some(upto))?;
        let turns = turns.ok_or_else(|| stoker_core::Error::internal("tfrecord: no turns"))?;
        self.state_of(&turns)
    }

    /// One walk through the order finds the positions and the state after `upto`.
    fn reader_and_state_at(
        self: Arc<Self>,
        positions: Vec<u64>,
        upto: u64,
    ) -> Result<(ReadBuffer, State)> {
        if self.order.get().is_some() {
            let state = self.state_at(upto)?;
            return Ok((crate::random_access::reader_by_get(self, positions), state));
        }
        let (located, turns) = self.walk(&positions, Some(upto))?;
        let state = match turns {
            Some(turns) => self.state_of(&turns)?,
            None => self.state_at(upto)?,
        };
        let reader: ReadBuffer = Box::new(move |which: &[usize]| {
            let located = which.iter().map(|&k| located[k]).collect();
            let read = self.read(which.len(), located, false, true)?;
            Ok(read.into_iter().flatten().collect())
        });
        Ok((reader, state))
    }
}

/// `f` of each of `items`, on up to `threads` threads (each taking a run of items).
fn in_parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let per = items.len().div_ceil(threads.max(1)).max(1);
    if per >= items.len() {
        return items.iter().map(&f).collect();
    }
    let f = &f;
    std::thread::scope(|scope| {
        let runs: Vec<_> = items
            .chunks(per)
            .map(|run| scope.spawn(move || run.iter().map(f).collect::<Result<Vec<R>>>()))
            .collect();
        let mut out = Vec::with_capacity(items.len());
        for run in runs {
            let run = run
                .join()
                .map_err(|_| stoker_core::Error::internal("a thread reading records panicked"))?;
            out.extend(run?);
        }
        Ok(out)
    })
}

/// The order of `interleave`'s turns (block length 1) over `files` files, and the state the
/// interleave iterator reports at each point (see `InterleaveIter::state`).
struct Turns {
    files: usize,
    /// Open files: (file, records taken).
    slots: Vec<Option<(usize, u64)>>,
    cycle_index: usize,
    num_open: usize,
    end_of_input: bool,
    taken: usize,
}

impl Turns {
    fn new(files: usize, cycle: usize) -> Self {
        Turns {
            files,
            slots: vec![None; cycle.max(1)],
            cycle_index: 0,
            num_open: 0,
            end_of_input: false,
            taken: 0,
        }
    }

    fn advance(&mut self) {
        self.cycle_index = (self.cycle_index + 1) % self.slots.len();
    }

    /// The next record: (file, record); `has(file, record)` says whether a file has a record.
    fn next(
        &mut self,
        mut has: impl FnMut(usize, u64) -> Result<bool>,
    ) -> Result<Option<(usize, u64)>> {
        while !self.end_of_input || self.num_open > 0 {
            match self.slots[self.cycle_index] {
                Some((f, used)) if has(f, used)? => {
                    self.slots[self.cycle_index] = Some((f, used + 1));
                    self.advance();
                    return Ok(Some((f, used)));
                }
                Some(_) => {
                    self.slots[self.cycle_index] = None;
                    self.num_open -= 1;
                    self.advance();
                }
                None if !self.end_of_input => {
                    if self.taken < self.files {
                        self.slots[self.cycle_index] = Some((self.taken, 0));
                        self.taken += 1;
                        self.num_open += 1;
                    } else {
                        self.end_of_input = true;
                    }
                }
                None => self.advance(),
            }
        }
        Ok(None)
    }

    /// The interleave's state here; `offset(file, records taken)`: where the next record is.
    fn state(&self, offset: impl Fn(usize, u64) -> Result<u64>) -> Result<State> {
        let inputs = self
            .slots
            .iter()
            .map(|s| {
                Ok(match s {
                    Some((f, used)) => State::new(
                        vec![*f as u64],
                        vec![State::leaf(vec![*used, offset(*f, *used)?])],
                    ),
                    None => State::default(),
                })
            })
            .collect::<Result<_>>()?;
        let ints = vec![
            self.slots.len() as u64,
            self.cycle_index as u64,
            0,
            u64::from(self.end_of_input),
            self.taken as u64,
        ];
        Ok(State::new(ints, inputs))
    }
}
