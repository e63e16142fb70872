//! The XSpace reader (`*.xplane.pb`): planes, lines and events walked from the bytes; the
//! events or an error with its byte offset, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.xplane.pb");
    let mut events = 0u64;
    let done = |start: usize, end: usize| {
        assert!(
            start <= end && end <= data.len(),
            "done with {start}..{end} of {}",
            data.len()
        );
    };
    if let Err(e) = stoker_analyze::xspace::read_xspace(path, data, |_, _, _| events += 1, done) {
        let message = e.to_string();
        assert!(message.contains("fuzz.xplane.pb"), "not located: {message}");
    }
});
