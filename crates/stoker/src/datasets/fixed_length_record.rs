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

use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::sources::{Files, Strings};

#[derive(Clone, Debug)]
pub struct FixedLengthRecord {
    pub files: Files,
    pub framing: Framing,
}

/// The source's name in errors, as in tf.data.
const OP: &str = "FixedLengthRecordDataset";

fn check(framing: &Framing) -> Result<()> {
    if framing.record_bytes == 0 {
        return Err(Error::invalid(OP, "record_bytes must be at least 1"));
    }
    Ok(())
}

impl FixedLengthRecord {
    /// Expands and checks `patterns` now.
    pub fn new(
        patterns: Vec<String>,
        framing: Framing,
        compression: Compression,
        num_parallel_reads: i64,
    ) -> Result<FixedLengthRecord> {
        check(&framing)?;
        let files = Files::new(OP, patterns, compression, num_parallel_reads)?;
        Ok(FixedLengthRecord { files, framing })
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
        let bytes = format!(", {} bytes", self.framing.record_bytes);
        self.files.label(Self::KIND, &bytes)
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
        self.files.knob()
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let (compression, framing) = (self.files.compression, self.framing);
        let (policy, st) = (ctx.options.on_bad_record, Arc::clone(&stats));
        let open = move |path: &str, at: Option<&State>| -> Result<BoxIter> {
            let on_damage = (policy, Arc::clone(&st));
            Ok(Box::new(match at {
                None => FixedLengthIter::open(path, compression, framing, on_damage)?,
                Some(s) => FixedLengthIter::open_at(path, compression, framing, on_damage, s)?,
            }))
        };
        self.files.read(ctx, stats, at, open)
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: self.files.spec_files(ctx),
            record_bytes: self.framing.record_bytes,
            header_bytes: self.framing.header_bytes,
            footer_bytes: self.framing.footer_bytes,
            compression_type: self.files.compression_type(),
            num_parallel_reads: self.files.num_parallel_reads,
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let framing = Framing {
            record_bytes: s.record_bytes,
            header_bytes: s.header_bytes,
            footer_bytes: s.footer_bytes,
        };
        check(&framing)?;
        let files = Files::from_spec(OP, s.files, &s.compression_type, s.num_parallel_reads, ctx)?;
        Ok(FixedLengthRecord { files, framing })
    }
}
