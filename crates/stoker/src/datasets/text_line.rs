//! `TextLineDataset`: the lines of text files (plain, GZIP or ZLIB) in field `line`, as
//! tf.data's (see `stoker_formats::text_line` for what a line is). Files are read
//! `num_parallel_reads` at a time, a line from each in turn, in tf.data's order. With `csv`,
//! the elements are CSV records as `CsvDataset` splits them (a quoted field may hold line
//! breaks).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::{BoxIter, State};
use stoker_core::{DType, Result, StageStats};
use stoker_formats::text_line::{Split, TextLineIter};
use stoker_formats::Compression;

use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::sources::{Files, Strings};

#[derive(Clone, Debug)]
pub struct TextLine {
    pub files: Files,
    pub split: Split,
}

/// The source's name in errors, as in tf.data.
const OP: &str = "TextLineDataset";

impl TextLine {
    /// Expands and checks `patterns` now.
    pub fn new(
        patterns: Vec<String>,
        compression: Compression,
        num_parallel_reads: i64,
    ) -> Result<TextLine> {
        let files = Files::new(OP, patterns, compression, num_parallel_reads)?;
        Ok(TextLine {
            files,
            split: Split::Lines,
        })
    }

    /// Splits the files into CSV records (fields separated by `delim`; quoted fields when
    /// `quote`), as tf.data's `CsvDataset` reads them.
    pub fn csv_records(mut self, delim: u8, quote: bool) -> TextLine {
        self.split = Split::Csv { delim, quote };
        self
    }
}

/// `CsvDataset`'s record splitting, in a spec.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvSpec {
    field_delim: String,
    use_quote_delim: bool,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    files: Strings,
    #[serde(default)]
    compression_type: String,
    #[serde(default = "one")]
    num_parallel_reads: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    csv: Option<CsvSpec>,
}

fn one() -> i64 {
    1
}

impl DatasetOp for TextLine {
    const KIND: &'static str = "text_line";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::new(vec![FieldSpec::fixed(
            TextLineIter::FIELD,
            DType::Bytes,
            &[],
        )]))
    }

    fn label(&self) -> String {
        self.files.label(Self::KIND, "")
    }

    /// Unknown, as in tf.data: counting the lines reads every file.
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
        let (compression, split) = (self.files.compression, self.split);
        let (policy, st) = (ctx.options.on_bad_record, Arc::clone(&stats));
        let open = move |path: &str, at: Option<&State>| -> Result<BoxIter> {
            let st = Arc::clone(&st);
            Ok(Box::new(match at {
                None => TextLineIter::open(path, compression, split, policy, st)?,
                Some(s) => TextLineIter::open_at(path, compression, split, policy, st, s)?,
            }))
        };
        self.files.read(ctx, stats, at, open)
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: self.files.spec_files(ctx),
            compression_type: self.files.compression_type(),
            num_parallel_reads: self.files.num_parallel_reads,
            csv: match self.split {
                Split::Lines => None,
                Split::Csv { delim, quote } => Some(CsvSpec {
                    field_delim: char::from(delim).to_string(),
                    use_quote_delim: quote,
                }),
            },
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let files = Files::from_spec(OP, s.files, &s.compression_type, s.num_parallel_reads, ctx)?;
        let lines = TextLine {
            files,
            split: Split::Lines,
        };
        Ok(match s.csv {
            None => lines,
            Some(c) => lines.csv_records(csv_delim(&c.field_delim)?, c.use_quote_delim),
        })
    }
}

/// A CSV field delimiter: one byte, as in tf.data.
pub fn csv_delim(delim: &str) -> Result<u8> {
    match delim.as_bytes() {
        [b] => Ok(*b),
        _ => Err(stoker_core::Error::invalid(
            "CsvDataset",
            format!("field_delim must be one byte, got {delim:?}"),
        )),
    }
}
