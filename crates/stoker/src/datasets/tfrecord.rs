//! `TFRecordDataset`: the records of TFRecord files, in field `record`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::interleave::{InterleaveConfig, InterleaveIter, OpenFn};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::Origin;
use stoker_core::{DType, Result, StageStats};
use stoker_formats::tfrecord_index::{RecordFile, RecordIndex};
use stoker_formats::Compression;

use super::{DatasetOp, RandomAccess, Strings};
use crate::build::{file_names, BuildCtx};
use crate::plan::{Plan, AUTOTUNE};
use crate::sources::TfRecordOpener;
use crate::spec::SpecCtx;

#[derive(Clone, Debug)]
pub struct TfRecord {
    pub patterns: Vec<String>,
    /// The files the patterns matched when the dataset was made.
    pub files: Vec<String>,
    pub compression: Compression,
    pub verify_crc: bool,
    pub num_parallel_reads: i64,
}

impl TfRecord {
    /// Expands and checks `patterns` now.
    pub fn new(
        patterns: Vec<String>,
        compression: Compression,
        verify_crc: bool,
        num_parallel_reads: i64,
    ) -> Result<TfRecord> {
        let files = crate::sources::expand_files("TFRecordDataset", &patterns)?;
        Ok(TfRecord {
            patterns,
            files,
            compression,
            verify_crc,
            num_parallel_reads,
        })
    }
}

impl TfRecord {
    /// How many files are read in turn.
    fn cycle_length(&self, ctx: &BuildCtx) -> usize {
        match self.num_parallel_reads {
            // One reader per core of the budget: on one core, reading on the consuming
            // thread beats handing every record to another thread.
            AUTOTUNE => ctx.order_budget.min(self.files.len().max(1)),
            n => n.max(1) as usize,
        }
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
}

fn yes() -> bool {
    true
}

fn one() -> i64 {
    1
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
        format!(
            "tfrecord({} files, parallel_reads={})",
            self.files.len(),
            self.num_parallel_reads
        )
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn threads(&self) -> super::Threads {
        super::Threads::Workers
    }

    fn parallelism_knob(&self) -> Option<(&'static str, Option<i64>)> {
        Some(("num_parallel_reads", Some(self.num_parallel_reads)))
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
            compression: self.compression,
            verify_crc: self.verify_crc,
        };
        // The files are read `parallel` at a time, a record from each in turn; a restore
        // keeps the number it was saved with, since it fixes the order.
        let parallel = match at {
            Some(s) => InterleaveIter::saved_cycle_length(s)?,
            None => self.cycle_length(ctx),
        };
        let st = Arc::clone(&stats);
        let open: OpenFn = Arc::new(move |e: &Element, at: Option<&State>| {
            let path = crate::sources::file_name_of("TFRecordDataset", e)?;
            opener.open_path(&path, policy, &st, at)
        });
        let config = InterleaveConfig {
            cycle_length: parallel,
            block_length: 1,
            prefetch_per_slot: if parallel > 1 { 256 } else { 0 },
        };
        let names = Box::new(file_names(&self.files, "filename")?);
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

    /// Uncompressed files only: a compressed stream cannot be entered in the middle.
    fn supports_random_access(&self) -> bool {
        self.compression == Compression::None
    }

    fn random_access(&self, _: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        if !self.supports_random_access() {
            return Ok(None);
        }
        let cycle = self.cycle_length(ctx);
        Ok(Some(Box::new(RecordAccess::open(
            &self.files,
            cycle,
            self.verify_crc,
        )?)))
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: Strings::Many(self.patterns.iter().map(|p| ctx.save_path(p)).collect()),
            compression_type: self.compression.name().to_string(),
            verify_crc: self.verify_crc,
            num_parallel_reads: self.num_parallel_reads,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let patterns = s
            .files
            .into_vec()
            .iter()
            .map(|p| ctx.load_path(p))
            .collect();
        TfRecord::new(
            patterns,
            Compression::parse(&s.compression_type)?,
            s.verify_crc,
            s.num_parallel_reads,
        )
    }
}

/// Random access to the records of the files, by their position in the order the files are
/// read in (`cycle` files in turn, a record from each), through each file's record index.
struct RecordAccess {
    files: Vec<RecordFile>,
    names: stoker_core::element::Names,
    cycle: usize,
    /// Position in the pass → (file, record).
    order: Vec<(u32, u32)>,
}

impl RecordAccess {
    fn open(paths: &[String], cycle: usize, verify_crc: bool) -> Result<RecordAccess> {
        let files = paths
            .iter()
            .map(|p| RecordFile::open(p, RecordIndex::of_file(p)?, verify_crc))
            .collect::<Result<Vec<_>>>()?;
        let counts: Vec<u64> = files.iter().map(|f| f.index.len() as u64).collect();
        let mut sim = Turns::new(&counts, cycle);
        let mut order = Vec::with_capacity(counts.iter().sum::<u64>() as usize);
        while let Some((f, r)) = sim.next() {
            order.push((f as u32, r as u32));
        }
        Ok(RecordAccess {
            files,
            names: stoker_core::element::names(&[stoker_formats::TfRecordIter::FIELD]),
            cycle,
            order,
        })
    }
}

impl RandomAccess for RecordAccess {
    fn len(&self) -> u64 {
        self.order.len() as u64
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        // Read in file order, hand out in the order asked.
        let mut wanted: Vec<(u32, u32, usize)> = positions
            .iter()
            .enumerate()
            .map(|(k, &p)| {
                let (f, r) = self.order.get(p as usize).copied().ok_or_else(|| {
                    stoker_core::Error::invalid("tfrecord", format!("no record at position {p}"))
                })?;
                Ok((f, r, k))
            })
            .collect::<Result<_>>()?;
        wanted.sort_unstable();
        let mut out: Vec<Option<Element>> = vec![None; positions.len()];
        // Per file, in record order: records close together are read at once.
        for group in wanted.chunk_by(|a, b| a.0 == b.0) {
            let file = &self.files[group[0].0 as usize];
            let records: Vec<usize> = group.iter().map(|&(_, r, _)| r as usize).collect();
            let path: Arc<str> = Arc::from(file.path());
            for (data, &(_, r, k)) in file.read_many(&records)?.into_iter().zip(group) {
                let origin = Origin {
                    file: Arc::clone(&path),
                    record: u64::from(r),
                    offset: file.index.offsets[r as usize],
                };
                let t = stoker_core::Tensor::scalar_bytes(data, Some(origin));
                out[k] = Some(Element::new(self.names.clone(), vec![t]));
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        let counts: Vec<u64> = self.files.iter().map(|f| f.index.len() as u64).collect();
        let mut sim = Turns::new(&counts, self.cycle);
        for _ in 0..upto {
            if sim.next().is_none() {
                break;
            }
        }
        Ok(sim.state(|f, used| {
            let index = &self.files[f].index;
            match (index.offsets.get(used as usize), index.len()) {
                (Some(&o), _) => o,
                (None, 0) => 0,
                (None, n) => index.offsets[n - 1] + index.sizes[n - 1],
            }
        }))
    }
}

/// The order of `interleave`'s turns (block length 1) over files of `counts` records, and the
/// state the interleave iterator reports at each point (see `InterleaveIter::state`).
struct Turns<'a> {
    counts: &'a [u64],
    /// Open files: (file, records taken).
    slots: Vec<Option<(usize, u64)>>,
    cycle_index: usize,
    num_open: usize,
    end_of_input: bool,
    taken: usize,
}

impl<'a> Turns<'a> {
    fn new(counts: &'a [u64], cycle: usize) -> Self {
        Turns {
            counts,
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

    /// The next record: (file, record).
    fn next(&mut self) -> Option<(usize, u64)> {
        while !self.end_of_input || self.num_open > 0 {
            match self.slots[self.cycle_index] {
                Some((f, used)) if used < self.counts[f] => {
                    self.slots[self.cycle_index] = Some((f, used + 1));
                    self.advance();
                    return Some((f, used));
                }
                Some(_) => {
                    self.slots[self.cycle_index] = None;
                    self.num_open -= 1;
                    self.advance();
                }
                None if !self.end_of_input => {
                    if self.taken < self.counts.len() {
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
        None
    }

    /// The interleave's state here; `offset(file, records taken)`: where the next record is.
    fn state(&self, offset: impl Fn(usize, u64) -> u64) -> State {
        let inputs = self
            .slots
            .iter()
            .map(|s| match s {
                Some((f, used)) => State::new(
                    vec![*f as u64],
                    vec![State::leaf(vec![*used, offset(*f, *used)])],
                ),
                None => State::default(),
            })
            .collect();
        let ints = vec![
            self.slots.len() as u64,
            self.cycle_index as u64,
            0,
            u64::from(self.end_of_input),
            self.taken as u64,
        ];
        State::new(ints, inputs)
    }
}
