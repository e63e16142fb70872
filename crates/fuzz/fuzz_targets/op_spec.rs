//! Op specs (the ops of a saved pipeline spec): any JSON read, built, and its schema checked
//! against a bytes field; an error or an op, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    // Applied to a few bytes too: an op a spec builds must run (or refuse) on any input.
    stoker_fuzz::apply(&value, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 3);
});
