//! `tf.train.Example`: the wire scanner (finding features, counting and reading their values),
//! the full decoder, and the `parse_example` op with fixed and variable-length features.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use stoker_formats::example::Example;
use stoker_formats::example_wire::find_features;

fuzz_target!(|data: &[u8]| {
    let record = Bytes::copy_from_slice(data);
    if let Ok(found) = find_features(&record, &["a", "b", "c"]) {
        for list in found.into_iter().flatten() {
            let Ok(n) = list.count() else { continue };
            // (A count is bounded by the record's length: each value takes a byte at least.)
            assert!(n <= data.len(), "{n} values in {} bytes", data.len());
            let _ = list.int64s_into(&mut vec![0i64; n]);
            let _ = list.floats_into(&mut vec![0.0; n]);
            let _ = list.bytes_into(&mut Vec::with_capacity(n));
        }
    }
    let _ = Example::parse(record);
    let spec = json!({"op": "parse_example", "field": "x", "key": "x", "features": [
        {"name": "a", "kind": "fixed", "dtype": "int64", "shape": [2], "default": [0, 0]},
        {"name": "b", "kind": "var_len", "dtype": "float32"},
        {"name": "c", "kind": "fixed", "dtype": "string"}]});
    stoker_fuzz::apply(&spec, data, 0);
});
