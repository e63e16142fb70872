//! The trace JSON reader of `stoker analyze` (the splitter and the event parser) on a byte
//! stream, and the whole analysis on a file: events or an error naming the file with its line
//! and column, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_analyze::read::Header;

fuzz_target!(|data: &[u8]| {
    let mut header = Header::default();
    let mut events = 0u64;
    let result = stoker_analyze::split::split(data, &mut header, &mut |_| events += 1);
    if let Err(e) = &result {
        assert!(e.line >= 1 && e.column >= 1, "{e:?}");
    }
    // The whole analysis, as `stoker analyze` runs it, on the bytes as a file.
    let Ok(dir) = std::env::temp_dir().canonicalize() else {
        return;
    };
    let path = dir.join(format!("stoker-fuzz-{}.json", std::process::id()));
    if std::fs::write(&path, data).is_ok() {
        if let Err(e) = stoker_analyze::analyze_path(&path) {
            let message = e.to_string();
            assert!(message.contains("stoker-fuzz-"), "not located: {message}");
        }
    }
});
