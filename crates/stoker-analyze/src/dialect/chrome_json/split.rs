//! Finds the events of a trace in a byte stream without building a JSON tree: a scanner that
//! follows the top level hands each event to [`super::event::parse_event`] where it lies in
//! the buffer; an event that runs past the buffer is gathered by following its strings and
//! nesting, then parsed. Each byte is looked at about once, and one event is held at a time.
//!
//! The top level is an object with `"traceEvents": [...]` (other keys are skipped, a few are
//! read: see [`Header`]) or a bare array of events.

use std::io::Read;

use super::event::{parse_event, EventError};
use super::raw::{Header, Num, RawEvent};

/// Nesting deeper than this is refused (a hostile file; real events nest a few levels).
const MAX_DEPTH: usize = 128;
/// One event larger than this is refused, so that memory stays bounded.
const MAX_EVENT_BYTES: usize = 64 << 20;
/// Bytes read at a time. Under the fuzzer, small: events and strings then span reads, a path
/// that megabyte reads take only in large files, and no input pays for zeroing megabytes.
const READ_CHUNK: usize = if cfg!(fuzzing) { 4 << 10 } else { 4 << 20 };

/// Where a problem is: 1-based line and column of the file.
#[derive(Debug)]
pub struct SplitError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(PartialEq)]
enum Top {
    /// Nothing yet.
    Start,
    /// Inside the top-level object, outside `traceEvents`.
    Object,
    /// Inside the array of events.
    Events,
    Done,
}

struct Scan {
    /// Line (1-based) at offset `counted`: lines are counted lazily, with a vectorised search,
    /// up to where a position is needed (an event's start, an error) and at each buffer's end.
    line: usize,
    /// Absolute offset where that line starts.
    line_start: u64,
    /// Absolute offset up to which newlines are counted.
    counted: u64,
    depth: usize,
    in_str: bool,
    esc: bool,
    top: Top,
    /// Depth of the events array's elements (1 for a bare array, 2 in an object).
    events_depth: usize,
    /// Bytes of the event being read, when it spans buffers.
    event: Vec<u8>,
    in_event: bool,
    /// Where the current event starts (line, column) for errors.
    event_at: (usize, usize),
    /// Depth-1 object key being read and the last one read.
    key: Vec<u8>,
    reading_key: bool,
    last_key: Vec<u8>,
    /// The raw value of a header key being captured.
    value: Option<Vec<u8>>,
    saw_events: bool,
}

impl Scan {
    /// Counts the newlines of `chunk` (which starts at `base`) before `abs`.
    fn count_lines(&mut self, chunk: &[u8], base: u64, abs: u64) {
        if abs <= self.counted {
            return;
        }
        let from = (self.counted.max(base) - base) as usize;
        let to = ((abs - base) as usize).min(chunk.len());
        for nl in memchr::memchr_iter(b'\n', &chunk[from..to]) {
            self.line += 1;
            self.line_start = base + (from + nl) as u64 + 1;
        }
        self.counted = abs;
    }

    /// An error at `abs`, within `chunk` (which starts at `base`) or at its end.
    fn err(&mut self, chunk: &[u8], base: u64, abs: u64, message: impl Into<String>) -> SplitError {
        self.count_lines(chunk, base, abs);
        SplitError {
            line: self.line,
            column: (abs.saturating_sub(self.line_start) + 1) as usize,
            message: message.into(),
        }
    }
}

fn header_value(header: &mut Header, key: &[u8], raw: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(raw) else {
        return;
    };
    match key {
        b"displayTimeUnit" => header.display_time_unit = v.as_str().map(str::to_string),
        b"baseTimeNanoseconds" => {
            header.base_time_ns = serde_json::from_value::<Num>(v).ok().map(|n| n.0);
        }
        b"schemaVersion" => header.schema_version = Some(v.to_string()),
        b"distributedInfo" => header.rank = v.get("rank").and_then(serde_json::Value::as_i64),
        _ => {}
    }
}

/// The bytes that change the scanner's state inside an event.
const STRUCTURAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b'"' as usize] = true;
    t[b'{' as usize] = true;
    t[b'}' as usize] = true;
    t[b'[' as usize] = true;
    t[b']' as usize] = true;
    t
};

const HEADER_KEYS: [&[u8]; 4] = [
    b"displayTimeUnit",
    b"baseTimeNanoseconds",
    b"schemaVersion",
    b"distributedInfo",
];

/// Reads `src` to its end, calling `on_event` for each event.
pub fn split(
    mut src: impl Read,
    header: &mut Header,
    on_event: &mut dyn FnMut(RawEvent<'_>),
) -> Result<(), SplitError> {
    let mut s = Scan {
        line: 1,
        line_start: 0,
        counted: 0,
        depth: 0,
        in_str: false,
        esc: false,
        top: Top::Start,
        events_depth: 0,
        event: Vec::new(),
        in_event: false,
        event_at: (0, 0),
        key: Vec::new(),
        reading_key: false,
        last_key: Vec::new(),
        value: None,
        saw_events: false,
    };
    let mut buf = vec![0u8; READ_CHUNK];
    let mut base: u64 = 0;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(s.err(&[], base, base, format!("reading: {e}"))),
        };
        let chunk = &buf[..n];
        // Start of the current event within this chunk, when it started here.
        let mut ev_start: Option<usize> = s.in_event.then_some(0);
        let mut i = 0;
        while i < n {
            let mut b = chunk[i];
            if s.in_str && !s.esc && !s.reading_key && s.value.is_none() {
                // Most of a trace is the text of strings: jump to the next quote or backslash.
                match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                    Some(k) => {
                        i += k;
                        b = chunk[i];
                    }
                    None => break,
                }
            }
            if s.in_event && !s.in_str {
                // Inside an event only quotes and brackets matter: skip numbers, separators
                // and white space.
                match chunk[i..].iter().position(|&c| STRUCTURAL[usize::from(c)]) {
                    Some(k) => {
                        i += k;
                        b = chunk[i];
                    }
                    None => break,
                }
            }
            let abs = base + i as u64;
            if s.in_str {
                if s.esc {
                    s.esc = false;
                } else if b == b'\\' {
                    s.esc = true;
                } else if b == b'"' {
                    s.in_str = false;
                    if s.reading_key {
                        s.reading_key = false;
                        s.last_key = std::mem::take(&mut s.key);
                    }
                } else if s.reading_key {
                    s.key.push(b);
                }
                if let Some(v) = s.value.as_mut() {
                    v.push(b);
                }
                i += 1;
                continue;
            }
            match b {
                b'"' => {
                    let misplaced = match s.top {
                        Top::Start | Top::Done => true,
                        Top::Events => s.depth == s.events_depth && !s.in_event,
                        Top::Object => false,
                    };
                    if misplaced {
                        return Err(s.err(
                            chunk,
                            base,
                            abs,
                            "a string where an event or the trace belongs",
                        ));
                    }
                    s.in_str = true;
                    if s.top == Top::Object && s.depth == 1 && s.value.is_none() {
                        // A key, or a string value of a key we skip.
                        s.reading_key = s.key.is_empty() && s.last_key.is_empty();
                        s.key.clear();
                    }
                }
                b'{' | b'[' => {
                    s.depth += 1;
                    if s.depth > MAX_DEPTH {
                        return Err(s.err(
                            chunk,
                            base,
                            abs,
                            format!("nested deeper than {MAX_DEPTH} levels"),
                        ));
                    }
                    match s.top {
                        Top::Start => {
                            s.top = if b == b'[' {
                                s.events_depth = 1;
                                s.saw_events = true;
                                header.bare_array = true;
                                Top::Events
                            } else {
                                Top::Object
                            };
                        }
                        Top::Object if s.depth == 2 && s.last_key == b"traceEvents" => {
                            if b != b'[' {
                                return Err(s.err(
                                    chunk,
                                    base,
                                    abs,
                                    "\"traceEvents\" is not an array",
                                ));
                            }
                            s.top = Top::Events;
                            s.events_depth = 2;
                            s.saw_events = true;
                            s.last_key.clear();
                        }
                        Top::Events if s.depth == s.events_depth + 1 => {
                            if b != b'{' {
                                return Err(s.err(
                                    chunk,
                                    base,
                                    abs,
                                    "an event that is not an object",
                                ));
                            }
                            // Most events lie whole in the buffer: parsed where they are.
                            match parse_event(&chunk[i..]) {
                                Ok((e, len)) => {
                                    header.events += 1;
                                    on_event(e);
                                    s.depth -= 1;
                                    i += len;
                                    continue;
                                }
                                Err(EventError::Bad { at, message }) => {
                                    return Err(s.err(chunk, base, abs + at as u64, message));
                                }
                                // It runs past the buffer: gathered, then parsed.
                                Err(EventError::Incomplete) => {}
                            }
                            s.in_event = true;
                            s.count_lines(chunk, base, abs);
                            s.event_at = (s.line, (abs - s.line_start + 1) as usize);
                            ev_start = Some(i);
                        }
                        _ => {}
                    }
                }
                b'}' | b']' => {
                    if s.depth == 0 {
                        return Err(s.err(
                            chunk,
                            base,
                            abs,
                            "a closing bracket without an opening one",
                        ));
                    }
                    if s.top == Top::Object && s.depth == 1 {
                        // The end of the top-level object: the last key's value is complete.
                        if let Some(v) = s.value.take() {
                            header_value(header, &s.last_key, &v);
                        }
                    }
                    s.depth -= 1;
                    if s.top == Top::Events && s.in_event && s.depth == s.events_depth {
                        // The event is complete.
                        let start = ev_start.unwrap_or(0);
                        let bytes: &[u8] = if s.event.is_empty() {
                            &chunk[start..=i]
                        } else {
                            s.event.extend_from_slice(&chunk[start..=i]);
                            &s.event
                        };
                        match parse_event(bytes) {
                            Ok((e, _)) => {
                                header.events += 1;
                                on_event(e);
                            }
                            Err(e) => {
                                let (at, message) = match e {
                                    EventError::Bad { at, message } => (at, message),
                                    // (The scanner saw it close: cannot happen.)
                                    EventError::Incomplete => {
                                        (bytes.len(), "an incomplete event".to_string())
                                    }
                                };
                                let (l, c) = s.event_at;
                                let before = &bytes[..at.min(bytes.len())];
                                let (line, column) = match memchr::memrchr(b'\n', before) {
                                    None => (l, c + at),
                                    Some(nl) => {
                                        (l + memchr::memchr_iter(b'\n', before).count(), at - nl)
                                    }
                                };
                                return Err(SplitError {
                                    line,
                                    column,
                                    message,
                                });
                            }
                        }
                        s.event.clear();
                        s.in_event = false;
                        ev_start = None;
                    } else if s.top == Top::Events && s.depth == s.events_depth - 1 {
                        // The end of the events array.
                        s.top = if s.events_depth == 1 {
                            Top::Done
                        } else {
                            Top::Object
                        };
                    } else if s.depth == 0 {
                        s.top = Top::Done;
                    }
                }
                b':' if s.top == Top::Object
                    && s.depth == 1
                    && HEADER_KEYS.contains(&s.last_key.as_slice()) =>
                {
                    s.value = Some(Vec::new());
                    i += 1;
                    continue;
                }
                b',' if s.top == Top::Object && s.depth == 1 => {
                    if let Some(v) = s.value.take() {
                        header_value(header, &s.last_key, &v);
                    }
                    s.last_key.clear();
                }
                b' ' | b'\n' | b'\r' | b'\t' => {}
                b',' if s.top == Top::Events => {}
                _ if s.top == Top::Events && s.depth == s.events_depth && !s.in_event => {
                    return Err(s.err(
                        chunk,
                        base,
                        abs,
                        format!("unexpected {:?} between events", b as char),
                    ));
                }
                _ if s.top == Top::Start || s.top == Top::Done => {
                    return Err(s.err(
                        chunk,
                        base,
                        abs,
                        format!("unexpected {:?} outside the trace", b as char),
                    ));
                }
                _ => {}
            }
            if let Some(v) = s.value.as_mut() {
                v.push(b);
            }
            i += 1;
        }
        s.count_lines(chunk, base, base + n as u64);
        if s.in_event {
            let start = ev_start.unwrap_or(0);
            s.event.extend_from_slice(&chunk[start..]);
            if s.event.len() > MAX_EVENT_BYTES {
                return Err(s.err(chunk, base, base + n as u64, "an event larger than 64 MB"));
            }
        }
        base += n as u64;
    }
    if s.top != Top::Done || s.in_str {
        return Err(s.err(
            &[],
            base,
            base,
            "the file ends inside the trace (truncated?)",
        ));
    }
    if !s.saw_events {
        return Err(s.err(
            &[],
            base,
            base,
            "no \"traceEvents\" in the object: not a Chrome/Kineto trace",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `bytes` `step` bytes at a time, so events cross buffer boundaries.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    fn run(text: &str, step: usize) -> Result<(Header, Vec<String>), SplitError> {
        let mut header = Header::default();
        let mut names = Vec::new();
        split(
            Trickle {
                bytes: text.as_bytes(),
                step,
            },
            &mut header,
            &mut |e| names.push(e.name.as_deref().unwrap_or("").to_string()),
        )?;
        Ok((header, names))
    }

    #[test]
    fn events_keys_and_tricky_strings_in_any_chunking() {
        let text = r#"{"schemaVersion": 1, "deviceProperties": [{"name": "x]}"}],
          "traceEvents": [
            {"name": "a{b}[c]\"d\\", "ph": "X", "args": {"nested": [1, {"k": "}"}]}},
            {"name": "second"}
          ],
          "distributedInfo": {"backend": "nccl", "rank": 3, "pg_config": [{"ranks": [0, 3]}]},
          "baseTimeNanoseconds": 1700000000000000000, "displayTimeUnit": "ns"}"#;
        for step in [1, 2, 7, 4096] {
            let (h, names) = run(text, step).unwrap();
            assert_eq!(
                names,
                vec!["a{b}[c]\"d\\".to_string(), "second".into()],
                "{step}"
            );
            assert_eq!(h.events, 2);
            assert_eq!(h.display_time_unit.as_deref(), Some("ns"));
            assert_eq!(h.base_time_ns, Some(1.7e18));
            assert_eq!(h.schema_version.as_deref(), Some("1"));
            assert_eq!(h.rank, Some(3), "an object-valued header key, read whole");
        }
        let (h, names) = run(r#" [ {"name": "x"} , {"name": "y"} ] "#, 3).unwrap();
        assert!(h.bare_array);
        assert_eq!(names, vec!["x", "y"]);
    }

    #[test]
    fn bad_structure_is_located() {
        let e = run("{\"traceEvents\": [\n  {\"name\": \"x\"} x]}", 5).unwrap_err();
        assert_eq!((e.line, e.column), (2, 17), "{}", e.message);
        let e = run("{\"traceEvents\": [1]}", 5).unwrap_err();
        assert!(e.message.contains("between events"), "{}", e.message);
        let e = run("{\"traceEvents\": [{\"name\": 5}]}", 4).unwrap_err();
        assert_eq!((e.line, e.column), (1, 27), "{}", e.message); // the 5
        let e = run("{\"traceEvents\": [{}]} extra", 4).unwrap_err();
        assert!(e.message.contains("outside the trace"), "{}", e.message);
        assert!(run("{\"traceEvents\": [{}]", 4).is_err());
        assert!(run("{\"other\": [{}]}", 4).is_err());
    }
}
