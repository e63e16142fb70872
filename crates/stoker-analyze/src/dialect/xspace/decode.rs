//! Reader of the TensorFlow / JAX profilers' XSpace protobuf (`*.xplane.pb`), the file their
//! profilers write and TensorBoard reads.
//!
//! The outer messages (XSpace, XPlane, XLine) are walked field by field over the file's bytes
//! (memory-mapped), and each event is decoded on its own, so what is held besides the file's
//! bytes is one event and the plane's name tables. Large payloads the analysis does not need (HLO
//! protos in event metadata, bytes-valued stats) are skipped unread. Times: every line has a
//! `timestamp_ns`, each event an `offset_ps` from it.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use crate::error::{AnalyzeError, Result};

#[derive(Clone, PartialEq, Message)]
struct XEvent {
    #[prost(int64, tag = "1")]
    metadata_id: i64,
    /// (One of `offset_ps` and `num_occurrences`: aggregated events have no time.)
    #[prost(int64, optional, tag = "2")]
    offset_ps: Option<i64>,
    #[prost(int64, tag = "3")]
    duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    stats: Vec<XStat>,
}

/// A stat; its bytes value (field 6) is left out and skipped.
#[derive(Clone, PartialEq, Message)]
struct XStat {
    #[prost(int64, tag = "1")]
    metadata_id: i64,
    #[prost(double, optional, tag = "2")]
    double_value: Option<f64>,
    #[prost(uint64, optional, tag = "3")]
    uint64_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    int64_value: Option<i64>,
    #[prost(bytes = "vec", optional, tag = "5")]
    str_value: Option<Vec<u8>>,
    /// The id of a stat metadata whose name is the value (interned strings).
    #[prost(uint64, optional, tag = "7")]
    ref_value: Option<u64>,
}

/// Event metadata: its stats and payload (HLO protos) are left out and skipped.
#[derive(Clone, PartialEq, Message)]
struct XEventMetadata {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(bytes = "vec", tag = "2")]
    name: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    display_name: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct XStatMetadata {
    #[prost(int64, tag = "1")]
    id: i64,
    #[prost(bytes = "vec", tag = "2")]
    name: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct EventMetadataEntry {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(message, optional, tag = "2")]
    value: Option<XEventMetadata>,
}

#[derive(Clone, PartialEq, Message)]
struct StatMetadataEntry {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(message, optional, tag = "2")]
    value: Option<XStatMetadata>,
}

/// A stat's value, as the analysis reads it; strings borrow from the file or the plane's names.
#[derive(Clone, Debug, PartialEq)]
pub enum StatValue<'a> {
    Int(i64),
    Uint(u64),
    Double(f64),
    Str(Cow<'a, str>),
}

impl StatValue<'_> {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            StatValue::Int(v) => Some(*v as f64),
            StatValue::Uint(v) => Some(*v as f64),
            StatValue::Double(v) => Some(*v),
            StatValue::Str(s) => s.trim().parse().ok(),
        }
    }
}

/// One event of a line, resolved against its plane's metadata.
pub struct Event<'a> {
    /// The id of its metadata in its plane (events of one name share it).
    pub metadata_id: i64,
    pub name: &'a str,
    /// Microseconds from the profile's start.
    pub start_us: f64,
    pub dur_us: f64,
    /// The stats by name (values that are references resolved to their strings).
    pub stats: Vec<(&'a str, StatValue<'a>)>,
}

impl<'a> Event<'a> {
    pub fn stat(&self, name: &str) -> Option<&StatValue<'a>> {
        self.stats.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

/// A field of a protobuf message, as the wire has it.
enum Field<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

/// Where in the file a decoding error happened.
struct WireError {
    offset: usize,
    message: String,
}

/// Calls `f` for each field of the message in `buf` (which starts at `base` in the file).
fn fields<'a>(
    buf: &'a [u8],
    base: usize,
    mut f: impl FnMut(u32, Field<'a>, usize) -> std::result::Result<(), WireError>,
) -> std::result::Result<(), WireError> {
    let mut rest = buf;
    while !rest.is_empty() {
        let (tag, field, at) = read_field(buf, &mut rest, base)?;
        f(tag, field, at)?;
    }
    Ok(())
}

/// The field at the start of `rest` (a tail of `buf`, which starts at `base` in the file),
/// `rest` moved past it; with where it is: its key's offset, or its body's for a
/// length-delimited field.
fn read_field<'a>(
    buf: &'a [u8],
    rest: &mut &'a [u8],
    base: usize,
) -> std::result::Result<(u32, Field<'a>, usize), WireError> {
    let at = base + (buf.len() - rest.len());
    let err = |message: String| WireError {
        offset: at,
        message,
    };
    let key = prost::encoding::decode_varint(rest).map_err(|e| err(e.to_string()))?;
    let (tag, wire) = ((key >> 3) as u32, key & 7);
    if tag == 0 {
        return Err(err("field number 0".into()));
    }
    match wire {
        0 => {
            let v = prost::encoding::decode_varint(rest).map_err(|e| err(e.to_string()))?;
            Ok((tag, Field::Varint(v), at))
        }
        1 | 5 => {
            let n = if wire == 1 { 8 } else { 4 };
            if rest.len() < n {
                return Err(err("truncated fixed-width field".into()));
            }
            *rest = &rest[n..];
            Ok((tag, Field::Fixed, at))
        }
        2 => {
            let n = prost::encoding::decode_varint(rest).map_err(|e| err(e.to_string()))?;
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n <= rest.len())
                .ok_or_else(|| {
                    err(format!(
                        "a field of {n} bytes runs past the end ({} left)",
                        rest.len()
                    ))
                })?;
            let (body, tail) = rest.split_at(n);
            *rest = tail;
            let body_at = base + (buf.len() - rest.len()) - n;
            Ok((tag, Field::Len(body), body_at))
        }
        w => Err(err(format!(
            "wire type {w} (groups are not used by XSpace)"
        ))),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn decode<M: Message + Default>(
    body: &[u8],
    at: usize,
    what: &str,
) -> std::result::Result<M, WireError> {
    M::decode(body).map_err(|e| WireError {
        offset: at,
        message: format!("{what}: {e}"),
    })
}

/// Values by metadata id (a plane's names, say): ids are small and dense in practice, so a
/// table indexed by id (looked up for every event and stat), with a map for ids beyond it.
pub struct IdMap<T> {
    dense: Vec<Option<T>>,
    sparse: HashMap<i64, T>,
}

impl<T> Default for IdMap<T> {
    fn default() -> Self {
        IdMap {
            dense: Vec::new(),
            sparse: HashMap::new(),
        }
    }
}

impl<T: Clone> IdMap<T> {
    const DENSE_IDS: i64 = 1 << 20;

    pub fn insert(&mut self, id: i64, value: T) {
        match usize::try_from(id) {
            Ok(i) if id < Self::DENSE_IDS => {
                if self.dense.len() <= i {
                    self.dense.resize(i + 1, None);
                }
                self.dense[i] = Some(value);
            }
            _ => {
                self.sparse.insert(id, value);
            }
        }
    }

    pub fn get(&self, id: i64) -> Option<&T> {
        match usize::try_from(id) {
            Ok(i) if id < Self::DENSE_IDS => self.dense.get(i)?.as_ref(),
            _ => self.sparse.get(&id),
        }
    }
}

/// A plane's names of events and stats by metadata id.
#[derive(Default)]
pub struct PlaneNames {
    events: IdMap<String>,
    stats: IdMap<String>,
}

impl PlaneNames {
    fn event(&self, id: i64) -> Option<&str> {
        self.events.get(id).map(String::as_str)
    }
    fn stat(&self, id: i64) -> Option<&str> {
        self.stats.get(id).map(String::as_str)
    }
}

/// A line of a plane, where the file has it, so that its events can be decoded again
/// ([`LineEvents`]).
#[derive(Clone, Copy, Debug)]
pub struct LineRef {
    /// Index into [`Index::planes`].
    pub plane: usize,
    /// The line message's bytes.
    pub at: usize,
    pub len: usize,
    start_ps: i128,
}

/// The planes' names and the lines of an XSpace, as [`read_xspace`] found them.
#[derive(Default)]
pub struct Index {
    pub planes: Vec<PlaneNames>,
    pub lines: Vec<LineRef>,
}

/// The line an event is on.
pub struct Line<'a> {
    pub plane: &'a str,
    pub name: &'a str,
    /// Index into [`Index::lines`].
    pub index: usize,
    /// Index into [`Index::planes`].
    pub plane_index: usize,
}

/// What [`read_xspace`] counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    /// Timed events handed to the callback.
    pub events: u64,
    /// Aggregated events (`num_occurrences`, no time of their own): left out.
    pub untimed: u64,
}

/// Reads the XSpace in `bytes`, calling `on_event(line, event)` for every timed event, plane
/// by plane and line by line in file order, and `done(start, end)` for byte ranges it will not
/// read again (a mapped file's pages can then be let go). Returns what it counted and where
/// each line is.
pub fn read_xspace(
    path: &Path,
    bytes: &[u8],
    mut on_event: impl FnMut(&Line<'_>, &Event<'_>),
    mut done: impl FnMut(usize, usize),
) -> Result<(Counts, Index)> {
    let mut counts = Counts::default();
    let mut index = Index::default();
    let located = |e: WireError| AnalyzeError::Decode {
        path: path.to_path_buf(),
        offset: e.offset,
        message: e.message,
    };
    fields(bytes, 0, |tag, field, at| {
        if let (1, Field::Len(plane)) = (tag, field) {
            read_plane(plane, at, &mut counts, &mut index, &mut on_event, &mut done)?;
            done(at, at + plane.len());
        }
        Ok(())
    })
    .map_err(located)?;
    Ok((counts, index))
}

fn read_plane(
    plane: &[u8],
    base: usize,
    counts: &mut Counts,
    index: &mut Index,
    on_event: &mut impl FnMut(&Line<'_>, &Event<'_>),
    done: &mut impl FnMut(usize, usize),
) -> std::result::Result<(), WireError> {
    // Lines come before the metadata they refer to: collect both, then decode the lines.
    let mut name = String::new();
    let mut lines: Vec<(&[u8], usize)> = Vec::new();
    let mut names = PlaneNames::default();
    fields(plane, base, |tag, field, at| {
        match (tag, field) {
            (2, Field::Len(b)) => name = lossy(b),
            (3, Field::Len(b)) => lines.push((b, at)),
            (4, Field::Len(b)) => {
                let e: EventMetadataEntry = decode(b, at, "event metadata")?;
                if let Some(m) = e.value {
                    // XLA ops keep the op in `name` and its kind in `display_name`; TensorFlow
                    // ops `scope/op:Type` and `Type`. The full name tells more.
                    let n = if m.name.is_empty() {
                        m.display_name
                    } else {
                        m.name
                    };
                    names.events.insert(e.key, lossy(&n));
                }
            }
            (5, Field::Len(b)) => {
                let e: StatMetadataEntry = decode(b, at, "stat metadata")?;
                if let Some(m) = e.value {
                    names.stats.insert(e.key, lossy(&m.name));
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    let plane_index = index.planes.len();
    for (body, at) in lines {
        // The line's own fields first (its display name may follow its events), then its
        // events one at a time: a line may hold millions.
        // (Walking to the display name touches every page of the events: let them go too.)
        let (mut line_name, mut display_name, mut timestamp_ns) = (&[][..], &[][..], 0i64);
        let mut walked_to = at;
        fields(body, at, |tag, field, at| {
            if at - walked_to >= DONE_CHUNK {
                done(walked_to, at);
                walked_to = at;
            }
            match (tag, field) {
                (2, Field::Len(b)) => line_name = b,
                (11, Field::Len(b)) => display_name = b,
                // (int64 on the wire: two's complement in a varint.)
                (3, Field::Varint(v)) => timestamp_ns = v as i64,
                _ => {}
            }
            Ok(())
        })?;
        let line_name = lossy(if display_name.is_empty() {
            line_name
        } else {
            display_name
        });
        let line = LineRef {
            plane: plane_index,
            at,
            len: body.len(),
            start_ps: i128::from(timestamp_ns) * 1000,
        };
        let here = Line {
            plane: &name,
            name: &line_name,
            index: index.lines.len(),
            plane_index,
        };
        index.lines.push(line);
        let mut read_to = at;
        fields(body, at, |tag, field, at| {
            let (4, Field::Len(b)) = (tag, field) else {
                return Ok(());
            };
            if at - read_to >= DONE_CHUNK {
                done(read_to, at);
                read_to = at;
            }
            match with_event(b, at, &names, line.start_ps, |event| on_event(&here, event))? {
                Some(()) => counts.events += 1,
                None => counts.untimed += 1, // aggregated (num_occurrences): no time
            }
            Ok(())
        })?;
    }
    index.planes.push(names);
    Ok(())
}

/// Decodes the event in `b` (at `at` in the file), of a line that starts at `line_start_ps`,
/// and hands it to `f`; `None` for an aggregated event, which has no time.
fn with_event<R>(
    b: &[u8],
    at: usize,
    names: &PlaneNames,
    line_start_ps: i128,
    f: impl FnOnce(&Event<'_>) -> R,
) -> std::result::Result<Option<R>, WireError> {
    let e: XEvent = decode(b, at, "event")?;
    let Some(offset) = e.offset_ps else {
        return Ok(None);
    };
    let stats = e
        .stats
        .iter()
        .filter_map(|s| {
            let key = names.stat(s.metadata_id)?;
            let value = if let Some(r) = s.ref_value {
                StatValue::Str(Cow::Borrowed(names.stat(r as i64)?))
            } else if let Some(v) = s.int64_value {
                StatValue::Int(v)
            } else if let Some(v) = s.uint64_value {
                StatValue::Uint(v)
            } else if let Some(v) = s.double_value {
                StatValue::Double(v)
            } else {
                StatValue::Str(String::from_utf8_lossy(s.str_value.as_deref()?))
            };
            Some((key, value))
        })
        .collect();
    let event = Event {
        metadata_id: e.metadata_id,
        name: names.event(e.metadata_id).unwrap_or(""),
        start_us: ((line_start_ps + i128::from(offset)) as f64) * 1e-6,
        dur_us: (e.duration_ps.max(0) as f64) * 1e-6,
        stats,
    };
    Ok(Some(f(&event)))
}

/// An XEvent's metadata id, offset (ps) and duration (ps), its other fields skipped; `None` if
/// a field is not one this walk takes.
fn event_timing(b: &[u8], at: usize) -> Option<(i64, Option<i64>, i64)> {
    // The last of a repeated field counts, as in protobuf.
    let (mut id, mut offset, mut duration) = (0i64, None, 0i64);
    let mut rest = b;
    while !rest.is_empty() {
        // (int64 on the wire: two's complement in a varint.)
        match read_field(b, &mut rest, at).ok()? {
            (1, Field::Varint(v), _) => id = v as i64,
            (2, Field::Varint(v), _) => offset = Some(v as i64),
            (3, Field::Varint(v), _) => duration = v as i64,
            _ => {}
        }
    }
    Some((id, offset, duration))
}

/// The timed events of one line, decoded again one at a time from the bytes [`read_xspace`]
/// read them from.
pub struct LineEvents<'a> {
    body: &'a [u8],
    rest: &'a [u8],
    at: usize,
    names: &'a PlaneNames,
    start_ps: i128,
}

impl<'a> LineEvents<'a> {
    /// `bytes` and `index` as [`read_xspace`] had and returned them.
    pub fn new(bytes: &'a [u8], index: &'a Index, line: &LineRef) -> LineEvents<'a> {
        let body = bytes.get(line.at..line.at + line.len).unwrap_or_default();
        static NO_NAMES: std::sync::OnceLock<PlaneNames> = std::sync::OnceLock::new();
        LineEvents {
            body,
            rest: body,
            at: line.at,
            names: (index.planes.get(line.plane))
                .unwrap_or_else(|| NO_NAMES.get_or_init(PlaneNames::default)),
            start_ps: line.start_ps,
        }
    }

    /// Hands the next timed event to `f`; `None` at the line's end. The bytes decoded
    /// without error the first time; should they have changed since (another program
    /// rewriting the file in place), the line ends at the first field that no longer does.
    pub fn next_with<R>(&mut self, mut f: impl FnMut(&Event<'_>) -> R) -> Option<R> {
        while !self.rest.is_empty() {
            let (tag, field, at) = read_field(self.body, &mut self.rest, self.at).ok()?;
            if let (4, Field::Len(b)) = (tag, field) {
                if let Some(r) = with_event(b, at, self.names, self.start_ps, &mut f).ok()? {
                    return Some(r);
                }
            }
        }
        None
    }

    /// The next timed event's metadata id, start and duration (µs) as [`Self::next_with`]
    /// gives them, its stats not decoded; `None` at the line's end.
    pub fn next_timing(&mut self) -> Option<(i64, f64, f64)> {
        while !self.rest.is_empty() {
            let (tag, field, at) = read_field(self.body, &mut self.rest, self.at).ok()?;
            let (4, Field::Len(b)) = (tag, field) else {
                continue;
            };
            let timing = match event_timing(b, at) {
                Some((id, offset, duration)) => offset.map(|offset| {
                    let start = ((self.start_ps + i128::from(offset)) as f64) * 1e-6;
                    (id, start, (duration.max(0) as f64) * 1e-6)
                }),
                // A field this walk does not take (a group, which protobuf skips): the event
                // decoded whole.
                None => with_event(b, at, self.names, self.start_ps, |e| {
                    (e.metadata_id, e.start_us, e.dur_us)
                })
                .ok()?,
            };
            // (`None`: an aggregated event, with no time.)
            if timing.is_some() {
                return timing;
            }
        }
        None
    }

    /// Where in the file the next event starts.
    pub fn position(&self) -> usize {
        self.at + (self.body.len() - self.rest.len())
    }
}

/// How many bytes of a line's events are decoded before they are given up (`done`).
const DONE_CHUNK: usize = 8 << 20;

/// Whether `bytes` look like an XSpace rather than JSON: JSON starts with `{` or `[` (after
/// white space); an XSpace with its first field, a plane (field 1, length-delimited: 0x0a).
pub fn looks_like_xspace(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0x0a)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each line's events, decoded again from where the index says the line is, are the
    /// events the first read handed over, in the same order.
    #[test]
    fn lines_decode_again_to_the_same_events() {
        for name in [
            "jax/jax_gpu_train.xplane.pb",
            "tensorflow/xspace/tf_keras_fit.xplane.pb",
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/traces")
                .join(name);
            let bytes = std::fs::read(&path).unwrap_or_default();
            assert!(!bytes.is_empty(), "{}", path.display());
            type Seen = (usize, i64, String, u64, u64, usize);
            let key = |line: usize, e: &Event<'_>| -> Seen {
                (
                    line,
                    e.metadata_id,
                    e.name.to_string(),
                    e.start_us.to_bits(),
                    e.dur_us.to_bits(),
                    e.stats.len(),
                )
            };
            let mut first: Vec<Seen> = Vec::new();
            let (counts, index) =
                read_xspace(&path, &bytes, |l, e| first.push(key(l.index, e)), |_, _| {})
                    .unwrap_or_else(|e| panic!("{e}"));
            let mut again: Vec<Seen> = Vec::new();
            for (i, line) in index.lines.iter().enumerate() {
                let mut events = LineEvents::new(&bytes, &index, line);
                while let Some(k) = events.next_with(|e| key(i, e)) {
                    again.push(k);
                }
                assert_eq!(events.position(), line.at + line.len);
                // Their times alone, the stats not decoded: the same.
                let mut times = LineEvents::new(&bytes, &index, line);
                let this_line = again.iter().filter(|k| k.0 == i);
                for k in this_line {
                    let (id, start, dur) = times.next_timing().unwrap_or_default();
                    assert_eq!((id, start.to_bits(), dur.to_bits()), (k.1, k.3, k.4));
                }
                assert!(times.next_timing().is_none());
            }
            assert_eq!(first.len() as u64, counts.events);
            assert!(
                first == again,
                "{name}: {} then {}",
                first.len(),
                again.len()
            );
        }
    }

    /// Every byte of every plane is given up once read (`done`), in ranges inside the file,
    /// so that a mapped file's pages can all be let go.
    #[test]
    fn each_plane_is_given_up_once_read() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/traces/jax/jax_gpu_train.xplane.pb");
        let bytes = std::fs::read(&path).unwrap_or_default();
        assert!(!bytes.is_empty(), "{}", path.display());
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        let (counts, _) = read_xspace(&path, &bytes, |_, _| {}, |a, b| ranges.push((a, b)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(counts.events > 0);
        assert!(
            ranges.iter().all(|&(a, b)| a <= b && b <= bytes.len()),
            "{ranges:?}"
        );
        let given_up: usize = ranges.iter().map(|(a, b)| b - a).sum();
        // The planes are the file but for their tags and lengths.
        assert!(
            given_up + 64 >= bytes.len(),
            "{given_up} of {}",
            bytes.len()
        );
    }
}
