//! A compact binary form of elements, for the disk cache.
//!
//! Per tensor: dtype code (u8), rank (u8), dims (u64 LE each), then the raw data (dense) or,
//! for bytes, each value as u64 LE length + bytes.

use bytes::Bytes;
use stoker_core::element::{Element, Names};
use stoker_core::storage::Storage;
use stoker_core::{DType, Error, Result, Tensor};

// Appended only: a dtype's index is its code in cache files.
const DTYPES: [DType; 12] = [
    DType::Bool,
    DType::U8,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
    DType::Bytes,
    DType::U16,
];

pub fn encode(element: &Element, out: &mut Vec<u8>) {
    out.clear();
    for t in &element.tensors {
        let code = DTYPES.iter().position(|&d| d == t.dtype()).unwrap_or(0) as u8;
        out.push(code);
        out.push(t.shape().len() as u8);
        for &d in t.shape() {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        match (t.raw(), t.bytes_data()) {
            (Some(raw), _) => out.extend_from_slice(raw),
            (None, Some(b)) => {
                for v in &b.values {
                    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                    out.extend_from_slice(v);
                }
            }
            (None, None) => {}
        }
    }
}

struct Cursor {
    data: Bytes,
    pos: usize,
}

impl Cursor {
    fn take(&mut self, n: usize) -> Result<Bytes> {
        if n > self.data.len() - self.pos {
            return Err(Error::invalid(
                "cache",
                "a cached element is shorter than its header says",
            ));
        }
        let b = self.data.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<usize> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b);
        usize::try_from(u64::from_le_bytes(a))
            .map_err(|_| Error::invalid("cache", "size overflows"))
    }
}

pub fn decode(data: Bytes, names: &Names) -> Result<Element> {
    let mut c = Cursor { data, pos: 0 };
    let mut tensors = Vec::with_capacity(names.len());
    for _ in 0..names.len() {
        let dtype = *DTYPES
            .get(c.u8()? as usize)
            .ok_or_else(|| Error::invalid("cache", "unknown dtype code in a cached element"))?;
        let rank = c.u8()? as usize;
        let shape = (0..rank).map(|_| c.u64()).collect::<Result<Vec<_>>>()?;
        let overflow = || Error::invalid("cache", format!("a cached shape {shape:?} overflows"));
        let numel = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(overflow)?;
        let t = match dtype.size() {
            Some(size) => {
                let raw = c.take(numel.checked_mul(size).ok_or_else(overflow)?)?;
                Tensor::from_storage(dtype, shape, Storage::copy_from(&raw))?
            }
            None => {
                let mut values = Vec::with_capacity(numel);
                for _ in 0..numel {
                    let n = c.u64()?;
                    values.push(c.take(n)?);
                }
                Tensor::from_bytes(shape, values, Vec::new())?
            }
        };
        tensors.push(t);
    }
    if c.pos != c.data.len() {
        return Err(Error::invalid(
            "cache",
            "a cached element has trailing bytes",
        ));
    }
    Ok(Element::new(names.clone(), tensors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::element::names;

    #[test]
    fn round_trip() {
        let n = names(&["a", "b"]);
        let e = Element::new(
            n.clone(),
            vec![
                Tensor::from_slice(DType::F32, vec![2, 2], &[1f32, 2., 3., 4.]).unwrap(),
                Tensor::from_bytes(
                    vec![2],
                    vec![Bytes::from_static(b"xy"), Bytes::new()],
                    vec![],
                )
                .unwrap(),
            ],
        );
        let mut buf = Vec::new();
        encode(&e, &mut buf);
        let back = decode(Bytes::from(buf.clone()), &n).unwrap();
        assert_eq!(back.tensors[0].typed::<f32>().unwrap(), &[1., 2., 3., 4.]);
        assert_eq!(back.tensors[0].shape(), &[2, 2]);
        assert_eq!(
            back.tensors[1].bytes_data().unwrap().values[0].as_ref(),
            b"xy"
        );
        assert!(decode(Bytes::from(buf[..buf.len() - 1].to_vec()), &n).is_err());
    }

    #[test]
    fn a_shape_whose_size_overflows_is_refused() {
        let n = names(&["a"]);
        // float32 [2^62, 4]: 2^64 elements, whose byte size wraps to 0.
        let mut buf = vec![8u8, 2];
        buf.extend_from_slice(&(1u64 << 62).to_le_bytes());
        buf.extend_from_slice(&4u64.to_le_bytes());
        let err = decode(Bytes::from(buf), &n).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
    }
}
