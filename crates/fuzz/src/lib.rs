//! What the fuzz targets share: running a native op, built from its spec, on one element
//! holding the fuzzer's bytes, as a pipeline's map would.

use bytes::Bytes;
use stoker_core::dtype::DType;
use stoker_core::element::{names, Element, FieldSpec, Schema};
use stoker_core::op::OpCtx;
use stoker_core::options::ErrorPolicy;
use stoker_core::stats::StageStats;
use stoker_core::tensor::Tensor;

/// Builds the op of `spec` (whose input field is `x`) and applies it to `data`: an `Ok` or an
/// `Err`, whatever the bytes. A spec the op refuses, or a schema it refuses, ends quietly, as
/// a pipeline would refuse it when built.
pub fn apply(spec: &serde_json::Value, data: &[u8], element: u64) {
    let Ok(spec) = stoker_ops::OpSpec::from_json(spec) else {
        return;
    };
    let Ok(op) = spec.build() else {
        return;
    };
    let schema = Schema::new(vec![FieldSpec::fixed("x", DType::Bytes, &[])]);
    if op.output_schema(&schema).is_err() {
        return;
    }
    let stats = StageStats::new("fuzz", "map");
    let ctx = OpCtx {
        policy: ErrorPolicy::Raise,
        stats: &stats,
        element,
        epoch: 0,
        row: None,
    };
    let input = Element::new(
        names(&["x"]),
        vec![Tensor::scalar_bytes(Bytes::copy_from_slice(data), None)],
    );
    if let Err(e) = op.apply(input, &ctx) {
        // A located error: it names the op.
        let message = e.to_string();
        assert!(!message.is_empty());
    }
}
