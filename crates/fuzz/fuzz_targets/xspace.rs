//! The XSpace reader (`*.xplane.pb`): planes, lines and events walked from the bytes; the
//! events or an error with its byte offset, never a panic; and each line decoded again from
//! the index to as many events.
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
    use stoker_analyze::xspace::{read_xspace, LineEvents};
    match read_xspace(path, data, |_, _| events += 1, done) {
        Err(e) => {
            let message = e.to_string();
            assert!(message.contains("fuzz.xplane.pb"), "not located: {message}");
        }
        // The analysis decodes the lines again: the same number of events.
        Ok((counts, index)) => {
            assert_eq!(counts.events, events);
            let mut again = 0u64;
            for line in &index.lines {
                let mut line_events = LineEvents::new(data, &index, line);
                let mut times = LineEvents::new(data, &index, line);
                while let Some(whole) =
                    line_events.next_with(|e| (e.metadata_id, e.start_us, e.dur_us))
                {
                    again += 1;
                    // The times alone, the stats not decoded: the same.
                    let fast = times
                        .next_timing()
                        .map(|(id, s, d)| (id, s.to_bits(), d.to_bits()));
                    assert_eq!(fast, Some((whole.0, whole.1.to_bits(), whole.2.to_bits())));
                }
                assert_eq!(times.next_timing(), None);
            }
            assert_eq!(again, events);
        }
    }
});
