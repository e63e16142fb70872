//! One trace event parsed straight from its bytes: the fields the analysis reads are taken
//! (strings borrowed where they hold no escape, `args` values kept as their raw JSON text), every
//! other value is checked for JSON syntax and skipped without being built. Most of a trace's
//! bytes are arguments nobody reads: a generic deserialiser, which builds and matches every
//! key and validates every string, spends most of its time on them.
//!
//! Strings that are skipped are not checked for UTF-8 or control characters (their bytes are
//! never looked at); strings that are read are checked for UTF-8.

use std::borrow::Cow;

use super::raw::{Args, Id, Num, Raw, RawEvent};

/// Nesting deeper than this inside an event is refused.
const MAX_DEPTH: usize = 128;

#[derive(Debug, PartialEq)]
pub(crate) enum EventError {
    /// The bytes end before the event does.
    Incomplete,
    /// Not JSON, or a field of the wrong type: the offset within the event's bytes.
    Bad { at: usize, message: String },
}

type Result<T> = std::result::Result<T, EventError>;

struct P<'a> {
    b: &'a [u8],
    i: usize,
}

/// Parses the event object at the start of `b` (after white space): the event and the length
/// of its bytes.
pub(crate) fn parse_event(b: &[u8]) -> Result<(RawEvent<'_>, usize)> {
    let mut p = P { b, i: 0 };
    p.ws()?;
    p.expect(b'{')?;
    let mut e = RawEvent::default();
    p.ws()?;
    if p.peek()? == b'}' {
        p.i += 1;
        return Ok((e, p.i));
    }
    loop {
        p.ws()?;
        let key = p.key()?;
        p.ws()?;
        p.expect(b':')?;
        p.ws()?;
        let at = p.i;
        match key.as_ref() {
            b"ph" => e.ph = p.opt_str()?,
            b"cat" => e.cat = p.opt_str()?,
            b"name" => e.name = p.opt_str()?,
            b"pid" => e.pid = p.opt_id()?,
            b"tid" => e.tid = p.opt_id()?,
            b"ts" => e.ts = p.opt_num()?,
            b"dur" => e.dur = p.opt_num()?,
            b"args" => e.args = p.args()?,
            _ => p.skip_value(0)?,
        }
        debug_assert!(p.i > at);
        p.ws()?;
        match p.next()? {
            b',' => continue,
            b'}' => return Ok((e, p.i)),
            _ => return Err(p.bad(p.i - 1, "expected ',' or '}' in an event")),
        }
    }
}

impl<'a> P<'a> {
    fn bad(&self, at: usize, message: impl Into<String>) -> EventError {
        EventError::Bad {
            at,
            message: message.into(),
        }
    }

    fn peek(&self) -> Result<u8> {
        self.b.get(self.i).copied().ok_or(EventError::Incomplete)
    }

    fn next(&mut self) -> Result<u8> {
        let c = self.peek()?;
        self.i += 1;
        Ok(c)
    }

    fn expect(&mut self, c: u8) -> Result<()> {
        if self.next()? == c {
            Ok(())
        } else {
            Err(self.bad(self.i - 1, format!("expected '{}'", c as char)))
        }
    }

    fn ws(&mut self) -> Result<()> {
        while matches!(self.peek()?, b' ' | b'\n' | b'\r' | b'\t') {
            self.i += 1;
        }
        Ok(())
    }

    /// A string's raw bytes between its quotes (at a quote), and whether it holds escapes.
    fn raw_str(&mut self) -> Result<(&'a [u8], bool)> {
        self.expect(b'"')?;
        let start = self.i;
        let mut escaped = false;
        loop {
            let k = quote_or_backslash(&self.b[self.i..]).ok_or(EventError::Incomplete)?;
            self.i += k;
            if self.b[self.i] == b'"' {
                self.i += 1;
                return Ok((&self.b[start..self.i - 1], escaped));
            }
            escaped = true;
            self.i += 2;
            if self.i > self.b.len() {
                return Err(EventError::Incomplete);
            }
        }
    }

    /// A string's value: borrowed when it holds no escape.
    fn string(&mut self) -> Result<Cow<'a, str>> {
        let at = self.i;
        let (raw, escaped) = self.raw_str()?;
        if escaped {
            // The quotes around `raw` make it a JSON string for serde_json to unescape.
            let quoted = &self.b[at..self.i];
            serde_json::from_slice::<String>(quoted)
                .map(Cow::Owned)
                .map_err(|e| self.bad(at, e.to_string()))
        } else {
            std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .map_err(|_| self.bad(at, "a string that is not UTF-8"))
        }
    }

    fn key(&mut self) -> Result<Cow<'a, [u8]>> {
        if self.peek()? != b'"' {
            return Err(self.bad(self.i, "expected a key"));
        }
        let at = self.i;
        let (raw, escaped) = self.raw_str()?;
        if escaped {
            let s = serde_json::from_slice::<String>(&self.b[at..self.i])
                .map_err(|e| self.bad(at, e.to_string()))?;
            Ok(Cow::Owned(s.into_bytes()))
        } else {
            Ok(Cow::Borrowed(raw))
        }
    }

    fn null(&mut self) -> Result<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Ok(true);
        }
        Ok(false)
    }

    fn literal(&mut self, word: &[u8]) -> Result<()> {
        let end = self.i + word.len();
        let have = &self.b[self.i..end.min(self.b.len())];
        if !word.starts_with(have) {
            return Err(self.bad(self.i, "expected a value"));
        }
        if end > self.b.len() {
            return Err(EventError::Incomplete);
        }
        self.i = end;
        Ok(())
    }

    fn opt_str(&mut self) -> Result<Option<Cow<'a, str>>> {
        if self.null()? {
            return Ok(None);
        }
        if self.peek()? != b'"' {
            return Err(self.bad(self.i, "expected a string"));
        }
        self.string().map(Some)
    }

    /// A JSON number's text, checked against JSON's grammar
    /// (`-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`) in one pass.
    fn number(&mut self) -> Result<&'a str> {
        // States: 0 start, 1 after '-', 2 a leading 0, 3 integer digits, 4 after '.',
        // 5 fraction digits, 6 after 'e', 7 after the exponent's sign, 8 exponent digits.
        let start = self.i;
        // Most numbers are plain: digits, perhaps a fraction, then a separator.
        let digits = |from: usize| {
            self.b[from..]
                .iter()
                .position(|c| !c.is_ascii_digit())
                .ok_or(EventError::Incomplete)
        };
        let int = digits(start)?;
        let mut end = start + int;
        let mut plain = int == 1 || (int > 1 && self.b[start] != b'0');
        if plain && self.b[end] == b'.' {
            let frac = digits(end + 1)?;
            plain = frac > 0;
            end += 1 + frac;
        }
        if plain
            && matches!(
                self.b[end],
                b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'
            )
        {
            self.i = end;
            return std::str::from_utf8(&self.b[start..end])
                .map_err(|_| self.bad(start, "a malformed number"));
        }
        let mut state = 0u8;
        loop {
            let Some(&c) = self.b.get(self.i) else {
                return Err(EventError::Incomplete);
            };
            state = match (state, c) {
                (0, b'-') => 1,
                (0 | 1, b'0') => 2,
                (0 | 1, b'1'..=b'9') | (3, b'0'..=b'9') => 3,
                (2 | 3, b'.') => 4,
                (4 | 5, b'0'..=b'9') => 5,
                (2 | 3 | 5, b'e' | b'E') => 6,
                (6, b'+' | b'-') => 7,
                (6..=8, b'0'..=b'9') => 8,
                (2 | 3 | 5 | 8, _)
                    if !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') =>
                {
                    break;
                }
                _ => return Err(self.bad(start, "a malformed number")),
            };
            self.i += 1;
        }
        // ASCII, as the grammar allows nothing else.
        std::str::from_utf8(&self.b[start..self.i])
            .map_err(|_| self.bad(start, "a malformed number"))
    }

    fn opt_num(&mut self) -> Result<Option<Num>> {
        if self.null()? {
            return Ok(None);
        }
        let at = self.i;
        let text: Cow<'a, str> = if self.peek()? == b'"' {
            self.string()?
        } else {
            let text = self.number()?;
            if !text.parse::<f64>().is_ok_and(f64::is_finite) {
                return Err(self.bad(at, "a number out of range"));
            }
            Cow::Borrowed(text)
        };
        text.trim()
            .parse::<f64>()
            .map(|v| Some(Num(v)))
            .map_err(|_| self.bad(at, format!("not a number: {text:?}")))
    }

    fn opt_id(&mut self) -> Result<Option<Id>> {
        if self.null()? {
            return Ok(None);
        }
        if self.peek()? == b'"' {
            return Ok(Some(Id::Str(self.string()?.into_owned())));
        }
        let at = self.i;
        let text = self.number()?;
        if let Ok(v) = text.parse::<i64>() {
            return Ok(Some(Id::Num(v)));
        }
        if let Ok(v) = text.parse::<u64>() {
            return Ok(Some(Id::Str(v.to_string())));
        }
        text.parse::<f64>()
            .map(|v| Some(Id::Str(v.to_string())))
            .map_err(|_| self.bad(at, "not a number"))
    }

    fn args(&mut self) -> Result<Option<Args<'a>>> {
        if self.null()? {
            return Ok(None);
        }
        if self.peek()? != b'{' {
            return Err(self.bad(self.i, "\"args\" is not an object"));
        }
        self.i += 1;
        let mut a = Args::default();
        self.ws()?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(Some(a));
        }
        loop {
            self.ws()?;
            let key = self.key()?;
            self.ws()?;
            self.expect(b':')?;
            self.ws()?;
            let start = self.i;
            self.skip_value(1)?;
            let slot = match key.as_ref() {
                b"name" => Some(&mut a.name),
                b"correlation" | b"correlation_id" => Some(&mut a.correlation),
                b"stream" => Some(&mut a.stream),
                b"device" => Some(&mut a.device),
                b"bytes" | b"Bytes" => Some(&mut a.bytes),
                b"Total Allocated" => Some(&mut a.total_allocated),
                b"Total Reserved" => Some(&mut a.total_reserved),
                b"Device Type" => Some(&mut a.device_type),
                b"Device Id" => Some(&mut a.device_id),
                b"kind" => Some(&mut a.kind),
                b"step_num" => Some(&mut a.step_num),
                b"memcpy_details" => Some(&mut a.memcpy_details),
                _ => None,
            };
            if let Some(slot) = slot {
                let raw = std::str::from_utf8(&self.b[start..self.i])
                    .map_err(|_| self.bad(start, "a value that is not UTF-8"))?;
                *slot = (raw != "null").then_some(Raw(raw));
            }
            self.ws()?;
            match self.next()? {
                b',' => continue,
                b'}' => return Ok(Some(a)),
                _ => return Err(self.bad(self.i - 1, "expected ',' or '}' in \"args\"")),
            }
        }
    }

    /// Steps over one value, checking its syntax.
    fn skip_value(&mut self, depth: usize) -> Result<()> {
        match self.peek()? {
            b'"' => self.raw_str().map(|_| ()),
            b'{' | b'[' => {
                if depth >= MAX_DEPTH {
                    return Err(self.bad(self.i, format!("nested deeper than {MAX_DEPTH} levels")));
                }
                let close = if self.next()? == b'{' { b'}' } else { b']' };
                self.ws()?;
                if self.peek()? == close {
                    self.i += 1;
                    return Ok(());
                }
                loop {
                    self.ws()?;
                    if close == b'}' {
                        if self.peek()? != b'"' {
                            return Err(self.bad(self.i, "expected a key"));
                        }
                        self.raw_str()?;
                        self.ws()?;
                        self.expect(b':')?;
                        self.ws()?;
                    }
                    self.skip_value(depth + 1)?;
                    self.ws()?;
                    match self.next()? {
                        b',' => continue,
                        c if c == close => return Ok(()),
                        _ => {
                            return Err(self
                                .bad(self.i - 1, format!("expected ',' or '{}'", close as char)))
                        }
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number().map(|_| ()),
            _ => Err(self.bad(self.i, "expected a value")),
        }
    }
}

/// Where the first `"` or `\\` of `b` is: eight bytes at a time (the bit trick that finds a
/// byte in a word), as most strings of a trace are too short for a vectorised search to pay.
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has = |x: u64, c: u8| {
        let y = x ^ (ONES * u64::from(c));
        y.wrapping_sub(ONES) & !y & HIGHS
    };
    let mut i = 0;
    while let Some(chunk) = b.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let found = has(x, b'"') | has(x, b'\\');
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\')
        .map(|k| i + k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_quotes_and_backslashes() {
        for len in 0..40 {
            for at in 0..len {
                for c in [b'"', b'\\'] {
                    let mut b = vec![b'a'; len];
                    b[at] = c;
                    if at + 3 < len {
                        b[at + 3] = b'"';
                    }
                    assert_eq!(quote_or_backslash(&b), Some(at), "{len} {at}");
                }
            }
            assert_eq!(quote_or_backslash(&vec![0xa2; len]), None);
        }
    }

    #[test]
    fn reads_the_fields_and_skips_the_rest() {
        let b = br#" {"ph": "X", "cat": "kernel", "name": "a\"b", "pid": 0, "tid": "stream 7",
            "ts": 1.5e3, "dur": "20", "x": [1, {"y": [true, false, null]}, -0.5e-3],
            "args": {"stream": 7, "Input Dims": [[32, 3], []], "correlation_id": "12",
                     "Total Allocated": null}} , "#;
        let (e, n) = parse_event(b).unwrap();
        assert_eq!(&b[n - 1..n], b"}");
        assert_eq!(e.ph.as_deref(), Some("X"));
        assert_eq!(e.name.as_deref(), Some("a\"b"));
        assert_eq!(e.pid, Some(Id::Num(0)));
        assert_eq!(e.tid, Some(Id::Str("stream 7".into())));
        assert_eq!(e.ts, Some(Num(1500.0)));
        assert_eq!(e.dur, Some(Num(20.0)));
        let a = e.args.unwrap();
        assert_eq!(a.stream.map(|r| r.0), Some("7"));
        assert_eq!(a.correlation.map(|r| r.0), Some("\"12\""));
        assert!(a.total_allocated.is_none());
    }

    #[test]
    fn incomplete_and_malformed() {
        let whole = br#"{"ph": "X", "ts": 10, "args": {"a": [1, 2]}}"#;
        for cut in 0..whole.len() {
            assert_eq!(
                parse_event(&whole[..cut]).err(),
                Some(EventError::Incomplete),
                "{cut}"
            );
        }
        for bad in [
            &br#"{"ph": X}"#[..],
            br#"{"ts": 01}"#,
            br#"{"ts": "soon"}"#,
            br#"{"name": 5}"#,
            br#"{"args": [1]}"#,
            br#"{"a": [1 2]}"#,
            br#"{"a": tru}"#,
            br#"{"ph": "X" "ts": 1}"#,
            br#"{"ts": 1.}"#,
            br#"{"ts": -}"#,
            br#"{"a": 1e+}"#,
            br#"{"a": 1-2}"#,
        ] {
            assert!(
                matches!(parse_event(bad), Err(EventError::Bad { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(matches!(
            parse_event(deep.as_bytes()),
            Err(EventError::Bad { .. })
        ));
    }
}
