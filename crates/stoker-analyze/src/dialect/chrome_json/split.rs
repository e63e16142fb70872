//! Finds the events of a trace in a byte stream without building a JSON tree: a scanner that
//! follows the top level hands each event to `event::parse_event` where it lies in the
//! buffer; an event that runs past the buffer is gathered by following its strings and
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
    let mut s = Scan::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut base: u64 = 0;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(s.err(&[], base, base, format!("reading: {e}"))),
        };
        s.chunk(&buf[..n], base, header, on_event)?;
        base += n as u64;
    }
    s.end(base)
}

/// A `{` or `[` the scanner has handled: where it goes on.
enum Opened {
    /// At the next byte.
    Next,
    /// Past an event parsed where it lay, this many bytes long.
    Past(usize),
}

impl Scan {
    fn new() -> Scan {
        Scan {
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
        }
    }

    /// Scans `chunk`, the bytes read from offset `base`: the events that lie whole in it are
    /// handed to `on_event` where they are, one that runs past its end is kept to be completed
    /// by the next.
    fn chunk(
        &mut self,
        chunk: &[u8],
        base: u64,
        header: &mut Header,
        on_event: &mut dyn FnMut(RawEvent<'_>),
    ) -> Result<(), SplitError> {
        let n = chunk.len();
        // Start of the current event within this chunk, when it started here.
        let mut ev_start: Option<usize> = self.in_event.then_some(0);
        let mut i = 0;
        while i < n {
            let Some(at) = self.next_byte(chunk, i) else {
                break;
            };
            i = at;
            let b = chunk[i];
            let abs = base + i as u64;
            if self.in_str {
                self.string_byte(b);
                i += 1;
                continue;
            }
            match b {
                b'"' => self.open_string(chunk, base, abs)?,
                b'{' | b'[' => {
                    if let Opened::Past(len) =
                        self.open(chunk, base, i, header, on_event, &mut ev_start)?
                    {
                        i += len;
                        continue;
                    }
                }
                b'}' | b']' => self.close(chunk, base, i, header, on_event, &mut ev_start)?,
                b':' if self.top == Top::Object
                    && self.depth == 1
                    && HEADER_KEYS.contains(&self.last_key.as_slice()) =>
                {
                    self.value = Some(Vec::new());
                    i += 1;
                    continue;
                }
                b',' if self.top == Top::Object && self.depth == 1 => {
                    if let Some(v) = self.value.take() {
                        header_value(header, &self.last_key, &v);
                    }
                    self.last_key.clear();
                }
                b' ' | b'\n' | b'\r' | b'\t' => {}
                b',' if self.top == Top::Events => {}
                _ if self.top == Top::Events
                    && self.depth == self.events_depth
                    && !self.in_event =>
                {
                    return Err(self.err(
                        chunk,
                        base,
                        abs,
                        format!("unexpected {:?} between events", b as char),
                    ));
                }
                _ if self.top == Top::Start || self.top == Top::Done => {
                    return Err(self.err(
                        chunk,
                        base,
                        abs,
                        format!("unexpected {:?} outside the trace", b as char),
                    ));
                }
                _ => {}
            }
            if let Some(v) = self.value.as_mut() {
                v.push(b);
            }
            i += 1;
        }
        self.count_lines(chunk, base, base + n as u64);
        if self.in_event {
            let start = ev_start.unwrap_or(0);
            self.event.extend_from_slice(&chunk[start..]);
            if self.event.len() > MAX_EVENT_BYTES {
                return Err(self.err(chunk, base, base + n as u64, "an event larger than 64 MB"));
            }
        }
        Ok(())
    }

    /// Where in `chunk`, from `i`, the next byte that matters is (`None`: none in the chunk).
    #[inline]
    fn next_byte(&self, chunk: &[u8], i: usize) -> Option<usize> {
        if self.in_str && !self.esc && !self.reading_key && self.value.is_none() {
            // Most of a trace is the text of strings: jump to the next quote or backslash.
            memchr::memchr2(b'"', b'\\', &chunk[i..]).map(|k| i + k)
        } else if self.in_event && !self.in_str {
            // Inside an event only quotes and brackets matter: skip numbers, separators and
            // white space.
            (chunk[i..].iter())
                .position(|&c| STRUCTURAL[usize::from(c)])
                .map(|k| i + k)
        } else {
            Some(i)
        }
    }

    /// A byte inside a string: an escape, its end, or a byte of a key or header value read.
    #[inline]
    fn string_byte(&mut self, b: u8) {
        if self.esc {
            self.esc = false;
        } else if b == b'\\' {
            self.esc = true;
        } else if b == b'"' {
            self.in_str = false;
            if self.reading_key {
                self.reading_key = false;
                self.last_key = std::mem::take(&mut self.key);
            }
        } else if self.reading_key {
            self.key.push(b);
        }
        if let Some(v) = self.value.as_mut() {
            v.push(b);
        }
    }

    /// A string starting at `abs`: refused where an event or the trace belongs; at the top
    /// level of the object, a key (or a value skipped).
    #[inline]
    fn open_string(&mut self, chunk: &[u8], base: u64, abs: u64) -> Result<(), SplitError> {
        let misplaced = match self.top {
            Top::Start | Top::Done => true,
            Top::Events => self.depth == self.events_depth && !self.in_event,
            Top::Object => false,
        };
        if misplaced {
            return Err(self.err(
                chunk,
                base,
                abs,
                "a string where an event or the trace belongs",
            ));
        }
        self.in_str = true;
        if self.top == Top::Object && self.depth == 1 && self.value.is_none() {
            // A key, or a string value of a key we skip.
            self.reading_key = self.key.is_empty() && self.last_key.is_empty();
            self.key.clear();
        }
        Ok(())
    }

    /// A `{` or `[` at `chunk[i]`: the trace's top level, its events array, or an event,
    /// parsed where it lies when it lies whole in the chunk.
    #[inline]
    fn open(
        &mut self,
        chunk: &[u8],
        base: u64,
        i: usize,
        header: &mut Header,
        on_event: &mut dyn FnMut(RawEvent<'_>),
        ev_start: &mut Option<usize>,
    ) -> Result<Opened, SplitError> {
        let (b, abs) = (chunk[i], base + i as u64);
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(
                chunk,
                base,
                abs,
                format!("nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        match self.top {
            Top::Start => {
                self.top = if b == b'[' {
                    self.events_depth = 1;
                    self.saw_events = true;
                    header.bare_array = true;
                    Top::Events
                } else {
                    Top::Object
                };
            }
            Top::Object if self.depth == 2 && self.last_key == b"traceEvents" => {
                if b != b'[' {
                    return Err(self.err(chunk, base, abs, "\"traceEvents\" is not an array"));
                }
                self.top = Top::Events;
                self.events_depth = 2;
                self.saw_events = true;
                self.last_key.clear();
            }
            Top::Events if self.depth == self.events_depth + 1 => {
                if b != b'{' {
                    return Err(self.err(chunk, base, abs, "an event that is not an object"));
                }
                // Most events lie whole in the buffer: parsed where they are.
                match parse_event(&chunk[i..]) {
                    Ok((e, len)) => {
                        header.events += 1;
                        on_event(e);
                        self.depth -= 1;
                        return Ok(Opened::Past(len));
                    }
                    Err(EventError::Bad { at, message }) => {
                        return Err(self.err(chunk, base, abs + at as u64, message));
                    }
                    // It runs past the buffer: gathered, then parsed.
                    Err(EventError::Incomplete) => {}
                }
                self.in_event = true;
                self.count_lines(chunk, base, abs);
                self.event_at = (self.line, (abs - self.line_start + 1) as usize);
                *ev_start = Some(i);
            }
            _ => {}
        }
        Ok(Opened::Next)
    }

    /// A `}` or `]` at `chunk[i]`: the end of a header value, of an event gathered across
    /// chunks, of the events array, or of the trace.
    #[inline]
    fn close(
        &mut self,
        chunk: &[u8],
        base: u64,
        i: usize,
        header: &mut Header,
        on_event: &mut dyn FnMut(RawEvent<'_>),
        ev_start: &mut Option<usize>,
    ) -> Result<(), SplitError> {
        if self.depth == 0 {
            let abs = base + i as u64;
            return Err(self.err(chunk, base, abs, "a closing bracket without an opening one"));
        }
        if self.top == Top::Object && self.depth == 1 {
            // The end of the top-level object: the last key's value is complete.
            if let Some(v) = self.value.take() {
                header_value(header, &self.last_key, &v);
            }
        }
        self.depth -= 1;
        if self.top == Top::Events && self.in_event && self.depth == self.events_depth {
            self.gathered_event(&chunk[ev_start.unwrap_or(0)..=i], header, on_event)?;
            *ev_start = None;
        } else if self.top == Top::Events && self.depth == self.events_depth - 1 {
            // The end of the events array.
            self.top = if self.events_depth == 1 {
                Top::Done
            } else {
                Top::Object
            };
        } else if self.depth == 0 {
            self.top = Top::Done;
        }
        Ok(())
    }

    /// An event that ran past a chunk, complete with `tail` (its bytes in this chunk): parsed
    /// and handed over, or an error at its line and column.
    fn gathered_event(
        &mut self,
        tail: &[u8],
        header: &mut Header,
        on_event: &mut dyn FnMut(RawEvent<'_>),
    ) -> Result<(), SplitError> {
        let bytes: &[u8] = if self.event.is_empty() {
            tail
        } else {
            self.event.extend_from_slice(tail);
            &self.event
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
                    EventError::Incomplete => (bytes.len(), "an incomplete event".to_string()),
                };
                let (l, c) = self.event_at;
                let before = &bytes[..at.min(bytes.len())];
                let (line, column) = match memchr::memrchr(b'\n', before) {
                    None => (l, c + at),
                    Some(nl) => (l + memchr::memchr_iter(b'\n', before).count(), at - nl),
                };
                return Err(SplitError {
                    line,
                    column,
                    message,
                });
            }
        }
        self.event.clear();
        self.in_event = false;
        Ok(())
    }

    /// The end of the file, at offset `end`: the trace must be complete, with its events.
    fn end(&mut self, end: u64) -> Result<(), SplitError> {
        if self.top != Top::Done || self.in_str {
            return Err(self.err(&[], end, end, "the file ends inside the trace (truncated?)"));
        }
        if !self.saw_events {
            return Err(self.err(
                &[],
                end,
                end,
                "no \"traceEvents\" in the object: not a Chrome/Kineto trace",
            ));
        }
        Ok(())
    }
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
