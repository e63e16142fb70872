//! Finding features in a serialized `tf.train.Example` without decoding all of it.
//!
//! Parsing a batch of Examples only needs the few features asked for; building each whole
//! message (a map, a String per key, a Vec per list) costs more than the reading. This walks
//! the protobuf wire format once and keeps, for each wanted feature, a zero-copy slice of its
//! list; the values are decoded straight into the output tensors.
//!
//! Semantics follow protobuf's: repeated `features` messages merge, a repeated map key keeps
//! its last value, the last member of the `Feature.kind` oneof wins, lists may be packed or
//! not, unknown fields are skipped.

use bytes::{Buf, Bytes};
use prost::encoding::{decode_key, decode_varint, WireType};

/// An integer an int64 list's values are written as.
pub trait FromInt64: Copy {
    fn from_int64(v: i64) -> Self;
}

impl FromInt64 for i64 {
    fn from_int64(v: i64) -> Self {
        v
    }
}

impl FromInt64 for i32 {
    /// The low 32 bits, as `static_cast<int32>` in TensorFlow's `Cast`.
    fn from_int64(v: i64) -> Self {
        v as i32
    }
}

/// One feature's list, as found in the record (not decoded yet).
#[derive(Clone, Debug, PartialEq)]
pub enum ListRef {
    Bytes(Bytes),
    Float(Bytes),
    Int64(Bytes),
    /// A `Feature` with no kind set (TensorFlow treats it as missing).
    NoKind,
}

type R<T> = Result<T, String>;

fn err(e: prost::DecodeError) -> String {
    e.to_string()
}

// The walk reads plain slices of the record (no reference count per field); only the lists
// found become `Bytes`, slices of the record.
fn take_len<'a>(buf: &mut &'a [u8]) -> R<&'a [u8]> {
    let len = decode_varint(buf).map_err(err)?;
    let len = usize::try_from(len).map_err(|_| "length overflows".to_string())?;
    if len > buf.len() {
        return Err(format!(
            "a field of {len} bytes runs past the end of its message ({} left)",
            buf.len()
        ));
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Ok(field)
}

fn skip(wire: WireType, buf: &mut &[u8]) -> R<()> {
    let n = match wire {
        WireType::Varint => {
            decode_varint(buf).map_err(err)?;
            0
        }
        WireType::SixtyFourBit => 8,
        WireType::ThirtyTwoBit => 4,
        WireType::LengthDelimited => {
            take_len(buf)?;
            0
        }
        WireType::StartGroup | WireType::EndGroup => {
            return Err("groups are not valid in an Example".into())
        }
    };
    if n > buf.len() {
        return Err("a fixed-size field runs past the end of its message".into());
    }
    buf.advance(n);
    Ok(())
}

/// For each of `names`, the last list found for it in `record` (`None` if absent).
pub fn find_features(record: &Bytes, names: &[&str]) -> R<Vec<Option<ListRef>>> {
    let mut found = vec![None; names.len()];
    let mut buf: &[u8] = record;
    while !buf.is_empty() {
        let (tag, wire) = decode_key(&mut buf).map_err(err)?;
        if tag == 1 && wire == WireType::LengthDelimited {
            let mut features = take_len(&mut buf)?;
            while !features.is_empty() {
                let (tag, wire) = decode_key(&mut features).map_err(err)?;
                if tag == 1 && wire == WireType::LengthDelimited {
                    let entry = take_len(&mut features)?;
                    map_entry(entry, record, names, &mut found)?;
                } else {
                    skip(wire, &mut features)?;
                }
            }
        } else {
            skip(wire, &mut buf)?;
        }
    }
    Ok(found)
}

fn map_entry(
    mut entry: &[u8],
    record: &Bytes,
    names: &[&str],
    found: &mut [Option<ListRef>],
) -> R<()> {
    let mut key: &[u8] = &[];
    let mut value: &[u8] = &[];
    while !entry.is_empty() {
        let (tag, wire) = decode_key(&mut entry).map_err(err)?;
        match (tag, wire) {
            (1, WireType::LengthDelimited) => key = take_len(&mut entry)?,
            (2, WireType::LengthDelimited) => value = take_len(&mut entry)?,
            _ => skip(wire, &mut entry)?,
        }
    }
    if std::str::from_utf8(key).is_err() {
        return Err("a feature name is not valid UTF-8".into());
    }
    let Some(i) = names.iter().position(|n| n.as_bytes() == key) else {
        return Ok(());
    };
    let mut feature = value;
    let mut kind = ListRef::NoKind;
    while !feature.is_empty() {
        let (tag, wire) = decode_key(&mut feature).map_err(err)?;
        let list = |feature: &mut &[u8]| take_len(feature).map(|l| record.slice_ref(l));
        match (tag, wire) {
            (1, WireType::LengthDelimited) => kind = ListRef::Bytes(list(&mut feature)?),
            (2, WireType::LengthDelimited) => kind = ListRef::Float(list(&mut feature)?),
            (3, WireType::LengthDelimited) => kind = ListRef::Int64(list(&mut feature)?),
            _ => skip(wire, &mut feature)?,
        }
    }
    found[i] = Some(kind);
    Ok(())
}

/// The number of varints in `packed` (its bytes that end one: high bit clear), and whether
/// it holds 9 continuation bytes in a row (a varint of 10 bytes or more, which only then needs
/// a closer look), read 8 bytes at a time: a run that long spans words.
fn varint_ends(packed: &[u8]) -> (usize, bool) {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let (mut n, mut run, mut long) = (0usize, 0u32, false);
    let mut word = |w: u64, pad: u32| {
        // the high bit of each byte that ends a varint (padding bytes end none)
        let ends = !w & HIGH & (u64::MAX >> (8 * pad));
        n += ends.count_ones() as usize;
        if ends == 0 {
            run += 8 - pad;
        } else {
            long |= run + ends.trailing_zeros() / 8 >= 9;
            run = (ends.leading_zeros() / 8).saturating_sub(pad);
        }
        long |= run >= 9;
    };
    let mut chunks = packed.chunks_exact(8);
    for c in &mut chunks {
        word(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])), 0);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        word(u64::from_le_bytes(last), 8 - rest.len() as u32);
    }
    (n, long)
}

/// Decodes packed varints, as prost's `decode_varint` each (at most 10 bytes, the tenth at
/// most 1), with short paths for the values of one to three bytes that lists are made of
/// (token ids, masks, labels).
fn packed_varints(mut s: &[u8], mut put: impl FnMut(u64)) -> R<()> {
    loop {
        match *s {
            [] => return Ok(()),
            [b0, ref rest @ ..] if b0 < 0x80 => {
                put(u64::from(b0));
                s = rest;
            }
            [b0, b1, ref rest @ ..] if b1 < 0x80 => {
                put(u64::from(b0 & 0x7f) | u64::from(b1) << 7);
                s = rest;
            }
            [b0, b1, b2, ref rest @ ..] if b2 < 0x80 => {
                put(u64::from(b0 & 0x7f) | u64::from(b1 & 0x7f) << 7 | u64::from(b2) << 14);
                s = rest;
            }
            _ => {
                let mut v = 0u64;
                let mut i = 0;
                loop {
                    let Some(&b) = s.get(i) else {
                        return Err("a packed int64_list ends inside a varint".into());
                    };
                    if i == 9 && b > 1 {
                        return Err("invalid varint".into());
                    }
                    v |= u64::from(b & 0x7f) << (7 * i);
                    i += 1;
                    if b & 0x80 == 0 {
                        break;
                    }
                }
                put(v);
                s = &s[i..];
            }
        }
    }
}

impl ListRef {
    pub fn type_name(&self) -> &'static str {
        match self {
            ListRef::Bytes(_) => "bytes_list",
            ListRef::Float(_) => "float_list",
            ListRef::Int64(_) => "int64_list",
            ListRef::NoKind => "feature without a list",
        }
    }

    /// Walks the list's values: `f` gets each value's field (wire type and bytes after the key).
    fn for_each(&self, mut f: impl FnMut(WireType, &mut &[u8]) -> R<()>) -> R<()> {
        let (ListRef::Bytes(b) | ListRef::Float(b) | ListRef::Int64(b)) = self else {
            return Ok(());
        };
        let mut buf: &[u8] = b;
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf).map_err(err)?;
            if tag == 1 {
                f(wire, &mut buf)?;
            } else {
                skip(wire, &mut buf)?;
            }
        }
        Ok(())
    }

    /// Number of values in the list.
    pub fn count(&self) -> R<usize> {
        let mut n = 0usize;
        match self {
            ListRef::NoKind => {}
            ListRef::Bytes(_) => self.for_each(|wire, buf| {
                if wire != WireType::LengthDelimited {
                    return Err("a bytes_list value is not length-delimited".into());
                }
                take_len(buf)?;
                n += 1;
                Ok(())
            })?,
            ListRef::Float(_) => self.for_each(|wire, buf| {
                match wire {
                    WireType::LengthDelimited => {
                        let packed = take_len(buf)?;
                        if packed.len() % 4 != 0 {
                            return Err(
                                "a packed float_list is not a whole number of floats".into()
                            );
                        }
                        n += packed.len() / 4;
                    }
                    WireType::ThirtyTwoBit => {
                        skip(wire, buf)?;
                        n += 1;
                    }
                    _ => return Err("a float_list value has the wrong wire type".into()),
                }
                Ok(())
            })?,
            ListRef::Int64(_) => self.for_each(|wire, buf| {
                match wire {
                    WireType::LengthDelimited => {
                        // One value per byte that ends a varint (its high bit clear). A
                        // varint of 10 bytes or more (prost allows 10, the tenth at most 1) is
                        // checked here, so that a bad record is found where the rows are read.
                        let packed = take_len(buf)?;
                        if packed.last().is_some_and(|b| b & 0x80 != 0) {
                            return Err("a packed int64_list ends inside a varint".into());
                        }
                        let (count, long) = varint_ends(packed);
                        if long {
                            packed_varints(packed, |_| {})?;
                        }
                        n += count;
                    }
                    WireType::Varint => {
                        decode_varint(buf).map_err(err)?;
                        n += 1;
                    }
                    _ => return Err("an int64_list value has the wrong wire type".into()),
                }
                Ok(())
            })?,
        }
        Ok(n)
    }

    /// Writes the values of an int64 list (already counted) into `out`, as `i64`, or as `i32`
    /// truncated the way `tf.cast` (and C++) converts them.
    pub fn int64s_into<T: FromInt64>(&self, out: &mut [T]) -> R<()> {
        let mut i = 0;
        self.for_each(|wire, buf| {
            let mut put = |v: u64| {
                if let Some(slot) = out.get_mut(i) {
                    *slot = T::from_int64(v as i64);
                }
                i += 1;
            };
            if wire == WireType::LengthDelimited {
                packed_varints(take_len(buf)?, put)?;
            } else {
                put(decode_varint(buf).map_err(err)?);
            }
            Ok(())
        })
    }

    /// Writes the values of a float list (already counted) into `out`.
    pub fn floats_into(&self, out: &mut [f32]) -> R<()> {
        let mut i = 0;
        self.for_each(|wire, buf| {
            let mut put = |v: f32| {
                if let Some(slot) = out.get_mut(i) {
                    *slot = v;
                }
                i += 1;
            };
            if wire == WireType::LengthDelimited {
                let mut packed = take_len(buf)?;
                while packed.len() >= 4 {
                    put(packed.get_f32_le());
                }
            } else {
                put(buf.try_get_f32_le().map_err(|e| e.to_string())?);
            }
            Ok(())
        })
    }

    /// Appends the values of a bytes list (slices of the record, not copies).
    pub fn bytes_into(&self, out: &mut Vec<Bytes>) -> R<()> {
        let ListRef::Bytes(list) = self else {
            return self.for_each(|_, buf| take_len(buf).map(drop));
        };
        self.for_each(|_, buf| {
            out.push(list.slice_ref(take_len(buf)?));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{Example, Feature, Kind};
    use prost::Message;

    fn sample() -> Example {
        Example::with_features([
            (
                "d".to_string(),
                Feature::bytes(vec![Bytes::from_static(b"xyz"), Bytes::new()]),
            ),
            (
                "s".to_string(),
                Feature::int64s(vec![-5, 7, i64::MIN, i64::MAX]),
            ),
            ("f".to_string(), Feature::floats(vec![0.5, -0.0, f32::MAX])),
            ("none".to_string(), Feature { kind: None }),
        ])
    }

    fn decode_like_prost(record: &Bytes, name: &str) -> Option<Kind> {
        let found = find_features(record, &[name]).unwrap();
        found[0].as_ref().map(|l| match l {
            ListRef::Int64(_) => {
                let mut v = vec![0; l.count().unwrap()];
                l.int64s_into(&mut v).unwrap();
                Kind::Int64List(crate::example::Int64List { value: v })
            }
            ListRef::Float(_) => {
                let mut v = vec![0.0; l.count().unwrap()];
                l.floats_into(&mut v).unwrap();
                Kind::FloatList(crate::example::FloatList { value: v })
            }
            ListRef::Bytes(_) => {
                let mut v = Vec::new();
                l.bytes_into(&mut v).unwrap();
                assert_eq!(v.len(), l.count().unwrap());
                Kind::BytesList(crate::example::BytesList { value: v })
            }
            ListRef::NoKind => Kind::BytesList(crate::example::BytesList {
                value: vec![Bytes::from_static(b"<none>")],
            }),
        })
    }

    /// The packed-varint decoder against prost's, value by value, and on truncated and
    /// over-long varints; the count of a packed list is its number of values.
    #[test]
    fn packed_varints_agree_with_prost() {
        let mut values: Vec<u64> = vec![0, 1, 127, 128, 300, 16_383, 16_384, u64::MAX];
        values.extend([i64::MIN as u64, (-1i64) as u64, 1 << 35, (1 << 49) + 5]);
        // every length of varint, on both sides of each length's bounds
        values.extend((1..64).flat_map(|k| [(1u64 << k) - 1, 1u64 << k, (1u64 << k) + 1]));
        values.extend((0..1u64 << 22).step_by(997));
        let mut packed = Vec::new();
        for &v in &values {
            prost::encoding::encode_varint(v, &mut packed);
        }
        let mut got = Vec::new();
        packed_varints(&packed, |v| got.push(v)).unwrap();
        assert_eq!(got, values);
        let mut list = Vec::new();
        prost::encoding::encode_key(1, WireType::LengthDelimited, &mut list);
        prost::encoding::encode_varint(packed.len() as u64, &mut list);
        list.extend_from_slice(&packed);
        assert_eq!(
            ListRef::Int64(Bytes::from(list)).count().unwrap(),
            values.len()
        );
        // runs of continuation bytes across and inside words
        for (at, len, want) in [
            (0, 9, true),
            (3, 9, true),
            (7, 9, true),
            (5, 8, false),
            (0, 20, true),
        ] {
            let mut b = vec![1u8; 32];
            b[at..at + len].iter_mut().for_each(|v| *v = 0x81);
            assert_eq!(varint_ends(&b[..at + len + 1]).1, want, "{at} {len}");
            assert_eq!(varint_ends(&b).0, 32 - len);
        }
        // count() refuses what decoding refuses: a bad record is found when its rows are read
        for b in [
            &[0xffu8; 11][..],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2],
        ] {
            let mut list = Vec::new();
            prost::encoding::encode_key(1, WireType::LengthDelimited, &mut list);
            prost::encoding::encode_varint(b.len() as u64, &mut list);
            list.extend_from_slice(b);
            assert!(ListRef::Int64(Bytes::from(list)).count().is_err(), "{b:?}");
        }
        let bad: [&[u8]; 3] = [&[0x80], &[1, 0xff, 0xff], &[0xff; 11]];
        for b in bad {
            let mut buf = Bytes::copy_from_slice(b);
            let mut prost_ok = true;
            while buf.has_remaining() {
                if decode_varint(&mut buf).is_err() {
                    prost_ok = false;
                    break;
                }
            }
            assert!(!prost_ok);
            assert!(packed_varints(b, |_| {}).is_err(), "{b:?}");
        }
        // a tenth byte above 1 overflows 64 bits
        let mut over = vec![0xff; 9];
        over.push(2);
        assert!(packed_varints(&over, |_| {}).is_err());
    }

    #[test]
    fn agrees_with_prost() {
        let ex = sample();
        let rec = Bytes::from(ex.serialize());
        for name in ["d", "s", "f"] {
            assert_eq!(
                decode_like_prost(&rec, name).as_ref(),
                ex.feature(name),
                "{name}"
            );
        }
        assert_eq!(find_features(&rec, &["nope"]).unwrap(), vec![None]);
        assert_eq!(
            find_features(&rec, &["none"]).unwrap(),
            vec![Some(ListRef::NoKind)]
        );
    }

    #[test]
    fn unpacked_lists_merged_messages_and_last_key_wins() {
        // features { feature { key: "s" value { int64_list { value: 1 value: 2 } } } } written
        // unpacked by hand, then a second `features` message with s = [9]: merging gives 9.
        let mut ints = Vec::new();
        for v in [1u8, 2] {
            ints.extend_from_slice(&[0x08, v]); // field 1 varint
        }
        let list = [&[0x1a, ints.len() as u8][..], &ints].concat(); // Feature.int64_list (3)
        let entry = [&[0x0a, 1, b's', 0x12, list.len() as u8][..], &list].concat();
        let features = [&[0x0a, entry.len() as u8][..], &entry].concat();
        let first = [&[0x0a, features.len() as u8][..], &features].concat();
        let second =
            Example::with_features([("s".to_string(), Feature::int64s(vec![9]))]).encode_to_vec();
        let rec = Bytes::from([first.clone(), second].concat());
        let got = decode_like_prost(&rec, "s");
        assert_eq!(
            got,
            Some(Kind::Int64List(crate::example::Int64List {
                value: vec![9]
            }))
        );
        let only_first = decode_like_prost(&Bytes::from(first), "s");
        assert_eq!(
            only_first,
            Some(Kind::Int64List(crate::example::Int64List {
                value: vec![1, 2]
            }))
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let rec = sample().serialize();
        for cut in 1..rec.len() {
            let r = find_features(&Bytes::from(rec[..cut].to_vec()), &["d", "s", "f"]);
            if let Ok(found) = r {
                for l in found.into_iter().flatten() {
                    let _ = l.count();
                }
            }
        }
        assert!(find_features(&Bytes::from_static(b"\x0a\xff\xff\xff\xff\x0f"), &["s"]).is_err());
    }
}
