//! Saved iterator state (what `it.state()` returns and a restore reads back): decoded from any
//! bytes into the tree of per-step integers, or refused, never a panic or a deep recursion.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_core::exec::state::State;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    let _ = State::decode(&mut rest);
});
