//! The closed set of operators: every module of [`crate::datasets`] with its line here, so that
//! a spec file can name it and the conformance test finds it.

use std::sync::Arc;

use serde_json::Value;
use stoker_core::{Error, Result};

use crate::datasets::*;
use crate::plan::{step_from_spec, DatasetOp, Plan, SpecCtx, Step};

macro_rules! registry {
    ($($module:ident::$ty:ident),* $(,)?) => {
        /// Every operator's name, in declaration order.
        pub const KINDS: &[&str] = &[$(<$module::$ty as DatasetOp>::KIND,)*];

        /// The step of kind `kind` described by `fields` (its spec form without `step`), over
        /// `input` (`None` for a source).
        pub fn parse_step(
            kind: &str,
            fields: Value,
            input: Option<Plan>,
            ctx: &SpecCtx,
        ) -> Result<Arc<dyn Step>> {
            $(if kind == <$module::$ty as DatasetOp>::KIND {
                return step_from_spec::<$module::$ty>(fields, input, ctx);
            })*
            Err(Error::Spec(format!(
                "unknown step; the steps are: {}",
                KINDS.join(", ")
            )))
        }
    };
}

registry! {
    range::Range,
    from_tensor_slices::FromTensorSlices,
    from_npz::FromNpz,
    from_generator::FromGenerator,
    list_files::ListFiles,
    tfrecord::TfRecord,
    text_line::TextLine,
    fixed_length_record::FixedLengthRecord,
    shuffle::Shuffle,
    global_shuffle::GlobalShuffle,
    map::Map,
    batch::Batch,
    padded_batch::PaddedBatch,
    unbatch::Unbatch,
    scan::Scan,
    group_by_window::GroupByWindow,
    elements::Elements,
    window::Window,
    interleave::Interleave,
    filter::Filter,
    take::Take,
    assert_cardinality::AssertCardinality,
    take_while::TakeWhile,
    skip::Skip,
    repeat::Repeat,
    cache::Cache,
    prefetch::Prefetch,
    shard::Shard,
    zip::Zip,
    concatenate::Concatenate,
    sample_from_datasets::SampleFromDatasets,
    choose_from_datasets::ChooseFromDatasets,
    enumerate::Enumerate,
    options::WithOptions,
}
