//! A Chrome trace JSON event as the readers hand it over: the fields the analysis reads, and
//! what the file says about itself ([`Header`]).

use std::fmt;

use std::borrow::Cow;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// An id that traces write as a number or a string (Kineto's `pid`/`tid`, both forms seen).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Id {
    Num(i64),
    Str(String),
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Id, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Id, E> {
                Ok(Id::Num(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Id, E> {
                Ok(i64::try_from(v).map_or_else(|_| Id::Str(v.to_string()), Id::Num))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Id, E> {
                Ok(Id::Str(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Id, E> {
                Ok(Id::Str(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A time or size that traces write as a number or a numeric string.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Num(pub f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Num, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Num, E> {
                v.trim()
                    .parse::<f64>()
                    .map(Num)
                    .map_err(|_| E::custom(format!("not a number: {v:?}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// A value's raw JSON text, read only when needed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Raw<'a>(pub &'a str);

/// The arguments of an event that the analysis uses; the rest are skipped. Kept as raw JSON,
/// borrowed from the event's bytes and read only when needed: dialects disagree on their
/// types (numbers, numeric strings, names), and an odd argument must not make a whole trace
/// unreadable. (`null` is no value.)
#[derive(Clone, Debug, Default)]
pub struct Args<'a> {
    pub name: Option<Raw<'a>>,
    /// Kineto's `correlation`; the trace viewer JSON of TensorFlow / JAX: `correlation_id`.
    pub correlation: Option<Raw<'a>>,
    pub stream: Option<Raw<'a>>,
    pub device: Option<Raw<'a>>,
    /// `bytes` or `Bytes`.
    pub bytes: Option<Raw<'a>>,
    /// Kineto memory events (`[memory]`, with `profile_memory=True`): the allocator's totals
    /// after the event (`Total Allocated`, `Total Reserved`), and the device it is about
    /// (`Device Type` 0 CPU, 1 CUDA; `Device Id`).
    pub total_allocated: Option<Raw<'a>>,
    pub total_reserved: Option<Raw<'a>>,
    pub device_type: Option<Raw<'a>>,
    pub device_id: Option<Raw<'a>>,
    /// ROCm memcpy: the direction.
    pub kind: Option<Raw<'a>>,
    /// The step of a TensorFlow / JAX step marker (`Trace(..., step_num=)`,
    /// `StepTraceAnnotation`).
    pub step_num: Option<Raw<'a>>,
    /// TensorFlow / JAX device traces: a copy's kind and size (`kind_src:pageable ... size:N`).
    pub memcpy_details: Option<Raw<'a>>,
}

/// A number, or a string holding one.
pub fn as_f64(v: Option<Raw<'_>>) -> Option<f64> {
    let text = v?.0;
    match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(inner) if !inner.contains('\\') => inner.trim().parse().ok(),
        Some(_) => serde_json::from_str::<Num>(text).ok().map(|n| n.0),
        None => text.parse().ok(),
    }
}

/// A string, or a number written as one.
pub fn as_string(v: Option<Raw<'_>>) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(v?.0).ok()? {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// One trace event, with the fields the analysis reads; strings borrow from the event's bytes
/// where they hold no escapes.
#[derive(Clone, Debug, Default)]
pub struct RawEvent<'a> {
    pub ph: Option<Cow<'a, str>>,
    pub cat: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub pid: Option<Id>,
    pub tid: Option<Id>,
    pub ts: Option<Num>,
    pub dur: Option<Num>,
    pub args: Option<Args<'a>>,
}

/// What the file says about itself, besides its events.
#[derive(Clone, Debug, Default)]
pub struct Header {
    pub display_time_unit: Option<String>,
    pub base_time_ns: Option<f64>,
    pub schema_version: Option<String>,
    /// The process's rank in a distributed job (Kineto's `distributedInfo.rank`).
    pub rank: Option<i64>,
    /// The file was a bare array of events.
    pub bare_array: bool,
    pub events: u64,
}
