//! What the fuzz targets share: running a native op, built from its spec, on one element
//! holding the fuzzer's bytes, as a pipeline's map would.

use bytes::Bytes;
use stoker_core::dtype::DType;
use stoker_core::element::{names, Element, FieldSpec, Schema};
use stoker_core::op::OpCtx;
use stoker_core::options::ErrorPolicy;
use stoker_core::seed::Seeds;
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
        seeds: Seeds::none(),
        skipped: Default::default(),
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

/// libfuzzer-sys's panic hook aborts on every panic, even one that stoker catches. stoker's
/// zune-jpeg path catches the decoder's panics on damaged data and reports the file's error,
/// which is what a pipeline sees; the JPEG targets put a hook back that only prints, so that
/// such a panic counts as that error. A panic that nothing catches still fails the run:
/// libfuzzer-sys aborts when the target unwinds.
pub fn allow_caught_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        drop(std::panic::take_hook());
        std::panic::set_hook(Box::new(|info| {
            eprintln!("panic (the file's error if stoker caught it): {info}")
        }));
    });
}
