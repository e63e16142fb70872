//! `TFRecordDataset`: the records of TFRecord files, in field `record`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::interleave::{InterleaveConfig, InterleaveIter, OpenFn};
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{DType, Result, StageStats};
use stoker_formats::Compression;

use super::{DatasetOp, Strings};
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

    fn inputs(&self) -> Vec<&Plan> {
        Vec::new()
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        Vec::new()
    }

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
        let parallel = match (at, self.num_parallel_reads) {
            (Some(s), _) => InterleaveIter::saved_cycle_length(s)?,
            // One reader per core of the budget: on one core, reading on the consuming
            // thread beats handing every record to another thread.
            (None, AUTOTUNE) => ctx.order_budget.min(self.files.len().max(1)),
            (None, n) => n.max(1) as usize,
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
