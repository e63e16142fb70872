//! `FixedLengthRecordDataset`: fixed-size records of binary files (plain, GZIP or ZLIB) in
//! field `record`, as tf.data's (see `stoker_formats::fixed_length`). Files are read
//! `num_parallel_reads` at a time, a record from each in turn, in tf.data's order.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::{BoxIter, State};
use stoker_core::{DType, Error, Result, StageStats};
use stoker_formats::fixed_length::{FixedLengthIter, Framing};
use stoker_formats::Compression;

use super::common::Strings;
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::sources::{files_in_turn, read_files};

#[derive(Clone, Debug)]
pub struct FixedLengthRecord {
    pub patterns: Vec<String>,
    /// The files the patterns matched when the dataset was made.
    pub files: Vec<String>,
    pub framing: Framing,
    pub compression: Compression,
    pub num_parallel_reads: i64,
}

impl FixedLengthRecord {
    /// Expands and checks `patterns` now.
    pub fn new(
        patterns: Vec<String>,
        framing: Framing,
        compression: Compression,
        num_parallel_reads: i64,
    ) -> Result<FixedLengthRecord> {
        if framing.record_bytes == 0 {
            return Err(Error::invalid(
                "FixedLengthRecordDataset",
                "record_bytes must be at least 1",
            ));
        }
        let files = crate::sources::expand_files("FixedLengthRecordDataset", &patterns)?;
        Ok(FixedLengthRecord {
            patterns,
            files,
            framing,
            compression,
            num_parallel_reads,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    files: Strings,
    record_bytes: usize,
    #[serde(default)]
    header_bytes: u64,
    #[serde(default)]
    footer_bytes: u64,
    #[serde(default)]
    compression_type: String,
    #[serde(default = "one")]
    num_parallel_reads: i64,
}

fn one() -> i64 {
    1
}

impl DatasetOp for FixedLengthRecord {
    const KIND: &'static str = "fixed_length_record";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::new(vec![FieldSpec::fixed(
            FixedLengthIter::FIELD,
            DType::Bytes,
            &[],
        )]))
    }

    fn label(&self) -> String {
        format!(
            "fixed_length_record({} files, {} bytes, parallel_reads={})",
            self.files.len(),
            self.framing.record_bytes,
            self.num_parallel_reads
        )
    }

    /// Unknown, as in tf.data.
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
        Some(("num_parallel_reads", Some(self.num_parallel_reads)))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let (compression, framing) = (self.compression, self.framing);
        let (policy, st) = (ctx.options.on_bad_record, Arc::clone(&stats));
        let open = move |path: &str, at: Option<&State>| -> Result<BoxIter> {
            let on_damage = (policy, Arc::clone(&st));
            Ok(Box::new(match at {
                None => FixedLengthIter::open(path, compression, framing, on_damage)?,
                Some(s) => FixedLengthIter::open_at(path, compression, framing, on_damage, s)?,
            }))
        };
        let cycle = files_in_turn(self.num_parallel_reads, self.files.len(), ctx);
        read_files(&self.files, cycle, stats, at, open)
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: Strings::Many(self.patterns.iter().map(|p| ctx.save_path(p)).collect()),
            record_bytes: self.framing.record_bytes,
            header_bytes: self.framing.header_bytes,
            footer_bytes: self.framing.footer_bytes,
            compression_type: self.compression.name().to_string(),
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
        let framing = Framing {
            record_bytes: s.record_bytes,
            header_bytes: s.header_bytes,
            footer_bytes: s.footer_bytes,
        };
        FixedLengthRecord::new(
            patterns,
            framing,
            Compression::parse(&s.compression_type)?,
            s.num_parallel_reads,
        )
    }
}
