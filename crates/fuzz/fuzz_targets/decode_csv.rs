//! `decode_csv` (a CSV source's lines into typed columns): quoting, escaped quotes, missing
//! and extra fields, numbers that do not parse; the first byte picks the delimiter and
//! whether quotes delimit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, line)) = data.split_first() else {
        return;
    };
    let delim = [",", ";", "\t", "|"][usize::from(mode & 3)];
    let spec = json!({"op": "decode_csv", "field": "x", "columns": [
        {"name": "a", "dtype": "int32", "default": 0},
        {"name": "b", "dtype": "float64"},
        {"name": "c", "dtype": "string", "default": ""},
        {"name": "d", "dtype": "int64", "default": -1}],
        "field_delim": delim, "use_quote_delim": mode & 4 != 0, "na_value": "NA"});
    stoker_fuzz::apply(&spec, line, 0);
});
