//! Tensors: a dtype, a shape and a shared buffer.
//!
//! Dense tensors view a byte range of a shared [`Storage`]; slicing and cloning never copy.
//! Bytes tensors hold one [`Bytes`] per element (themselves slices of the file buffers they
//! were read from) and, when they came from a file, where each value came from, so that a
//! later op that fails on a value can name the file, record and byte offset.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

use crate::dtype::DType;
use crate::error::{Error, Result};
pub use crate::origin::Origin;
use crate::storage::Storage;

/// The values of a bytes tensor, in row-major order, and their origins (empty when unknown).
#[derive(Clone, Debug, Default)]
pub struct BytesData {
    pub values: Vec<Bytes>,
    pub origins: Vec<Origin>,
}

impl BytesData {
    /// The origin of value `i`, when known.
    pub fn origin(&self, i: usize) -> Option<&Origin> {
        self.origins.get(i)
    }
}

#[derive(Clone)]
enum Data {
    Dense {
        storage: Arc<Storage>,
        offset: usize,
    },
    Bytes(Arc<BytesData>),
}

/// An n-dimensional array of one [`DType`].
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Data,
}

impl Tensor {
    /// A dense tensor over a whole storage, which must hold exactly the shape's bytes.
    pub fn from_storage(dtype: DType, shape: Vec<usize>, storage: Storage) -> Result<Tensor> {
        Tensor::view(dtype, shape, Arc::new(storage), 0)
    }

    /// A dense tensor viewing `storage` from byte `offset`.
    pub fn view(
        dtype: DType,
        shape: Vec<usize>,
        storage: Arc<Storage>,
        offset: usize,
    ) -> Result<Tensor> {
        let Some(size) = dtype.size() else {
            return Err(Error::internal(
                "a bytes tensor cannot view a dense storage",
            ));
        };
        let need = shape.iter().product::<usize>() * size;
        if offset + need > storage.len() {
            return Err(Error::internal(format!(
                "tensor of shape {shape:?} {dtype} needs {need} bytes at offset {offset}, storage has {}",
                storage.len()
            )));
        }
        Ok(Tensor {
            dtype,
            shape,
            data: Data::Dense { storage, offset },
        })
    }

    /// A dense tensor holding a copy of `values`.
    pub fn from_slice<T: bytemuck::Pod>(
        dtype: DType,
        shape: Vec<usize>,
        values: &[T],
    ) -> Result<Tensor> {
        if dtype.size() != Some(std::mem::size_of::<T>()) {
            return Err(Error::internal(format!(
                "element size mismatch for {dtype}"
            )));
        }
        if shape.iter().product::<usize>() != values.len() {
            return Err(Error::internal(format!(
                "shape {shape:?} does not hold {} values",
                values.len()
            )));
        }
        let storage = Storage::copy_from(bytemuck::cast_slice(values));
        Tensor::from_storage(dtype, shape, storage)
    }

    /// A bytes tensor; `origins` is empty or has one entry per value.
    pub fn from_bytes(
        shape: Vec<usize>,
        values: Vec<Bytes>,
        origins: Vec<Origin>,
    ) -> Result<Tensor> {
        if shape.iter().product::<usize>() != values.len() {
            return Err(Error::internal(format!(
                "shape {shape:?} does not hold {} byte strings",
                values.len()
            )));
        }
        let origins = if origins.len() == values.len() {
            origins
        } else {
            Vec::new()
        };
        Ok(Tensor {
            dtype: DType::Bytes,
            shape,
            data: Data::Bytes(Arc::new(BytesData { values, origins })),
        })
    }

    /// A scalar bytes tensor.
    pub fn scalar_bytes(value: Bytes, origin: Option<Origin>) -> Tensor {
        Tensor {
            dtype: DType::Bytes,
            shape: Vec::new(),
            data: Data::Bytes(Arc::new(BytesData {
                values: vec![value],
                origins: origin.into_iter().collect(),
            })),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Bytes held: the dense size, or the sum of the byte strings' lengths.
    pub fn nbytes(&self) -> usize {
        match &self.data {
            Data::Dense { .. } => self.numel() * self.dtype.size().unwrap_or(0),
            Data::Bytes(b) => b.values.iter().map(Bytes::len).sum(),
        }
    }

    /// The raw bytes of a dense tensor, `None` for bytes tensors.
    pub fn raw(&self) -> Option<&[u8]> {
        match &self.data {
            Data::Dense { storage, offset } => {
                let len = self.numel() * self.dtype.size().unwrap_or(0);
                Some(storage.bytes(*offset, len))
            }
            Data::Bytes(_) => None,
        }
    }

    /// Where a dense tensor's bytes start, without borrowing them (to tell whether it already
    /// is a given batch row).
    pub fn data_ptr(&self) -> Option<*const u8> {
        match &self.data {
            Data::Dense { storage, offset } => Some(storage.as_ptr().wrapping_add(*offset)),
            Data::Bytes(_) => None,
        }
    }

    /// The values of a dense tensor as `T` (whose size must match the dtype's).
    pub fn typed<T: bytemuck::Pod>(&self) -> Option<&[T]> {
        if self.dtype.size() != Some(std::mem::size_of::<T>()) {
            return None;
        }
        // Offsets are multiples of the element size within a 64-byte aligned storage.
        self.raw().and_then(|r| bytemuck::try_cast_slice(r).ok())
    }

    /// The values of a bytes tensor.
    pub fn bytes_data(&self) -> Option<&BytesData> {
        match &self.data {
            Data::Bytes(b) => Some(b),
            Data::Dense { .. } => None,
        }
    }

    /// The values and origins of a bytes tensor, moved out when nothing else shares them.
    pub fn into_bytes(self) -> Option<(Vec<Bytes>, Vec<Origin>)> {
        match self.data {
            Data::Bytes(b) => Some(match Arc::try_unwrap(b) {
                Ok(b) => (b.values, b.origins),
                Err(b) => (b.values.clone(), b.origins.clone()),
            }),
            Data::Dense { .. } => None,
        }
    }

    /// The shared storage and byte offset of a dense tensor (for zero-copy hand-over).
    pub fn storage(&self) -> Option<(&Arc<Storage>, usize)> {
        match &self.data {
            Data::Dense { storage, offset } => Some((storage, *offset)),
            Data::Bytes(_) => None,
        }
    }

    /// True when no other tensor shares this tensor's buffer (so handing it out writable is safe).
    /// A tensor alone on a buffer larger than itself (a batch's last, partial, batch in a
    /// whole batch's buffer) is exclusive too: nothing else can reach the rest.
    pub fn is_exclusive(&self) -> bool {
        match &self.data {
            Data::Dense { storage, .. } => Arc::strong_count(storage) == 1,
            Data::Bytes(b) => Arc::strong_count(b) == 1,
        }
    }

    /// Row `i` along the first axis, without copying.
    pub fn row(&self, i: usize) -> Result<Tensor> {
        self.rows(i, 1).map(|mut t| {
            t.shape.remove(0);
            t
        })
    }

    /// Rows `start..start+n` along the first axis, without copying dense data.
    pub fn rows(&self, start: usize, n: usize) -> Result<Tensor> {
        let Some(&dim0) = self.shape.first() else {
            return Err(Error::internal("cannot take rows of a scalar"));
        };
        if start + n > dim0 {
            return Err(Error::internal(format!(
                "rows {start}..{} out of range for first dimension {dim0}",
                start + n
            )));
        }
        let per_row: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = n;
        match &self.data {
            Data::Dense { storage, offset } => {
                let size = self.dtype.size().unwrap_or(0);
                Tensor::view(
                    self.dtype,
                    shape,
                    Arc::clone(storage),
                    offset + start * per_row * size,
                )
            }
            Data::Bytes(b) => {
                let range = start * per_row..(start + n) * per_row;
                let origins = if b.origins.is_empty() {
                    Vec::new()
                } else {
                    b.origins[range.clone()].to_vec()
                };
                Tensor::from_bytes(shape, b.values[range].to_vec(), origins)
            }
        }
    }

    /// The same data under another shape with the same number of elements.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor> {
        if shape.iter().product::<usize>() != self.numel() {
            return Err(Error::internal(format!(
                "cannot reshape {:?} to {shape:?}",
                self.shape
            )));
        }
        Ok(Tensor {
            dtype: self.dtype,
            shape,
            data: self.data.clone(),
        })
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({} {:?})", self.dtype, self.shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_views() {
        let t = Tensor::from_slice(DType::I32, vec![3, 2], &[1i32, 2, 3, 4, 5, 6]).unwrap();
        let r = t.row(1).unwrap();
        assert_eq!(r.shape(), &[2]);
        assert_eq!(r.typed::<i32>().unwrap(), &[3, 4]);
        assert_eq!(
            r.storage().unwrap().0.as_bytes().as_ptr(),
            t.storage().unwrap().0.as_bytes().as_ptr()
        );
        assert!(!r.is_exclusive());
        assert!(t.rows(2, 2).is_err());
        // Alone on its buffer, a view of part of it is exclusive.
        drop(t);
        assert!(r.is_exclusive());
    }

    #[test]
    fn bytes_rows_keep_origins() {
        let o = |r| Origin {
            file: "f".into(),
            record: r,
            offset: r * 10,
        };
        let t = Tensor::from_bytes(
            vec![3],
            vec![
                Bytes::from_static(b"a"),
                Bytes::from_static(b"bb"),
                Bytes::new(),
            ],
            vec![o(0), o(1), o(2)],
        )
        .unwrap();
        let r = t.row(1).unwrap();
        assert_eq!(r.shape(), &[] as &[usize]);
        assert_eq!(r.bytes_data().unwrap().values[0].as_ref(), b"bb");
        assert_eq!(r.bytes_data().unwrap().origin(0), Some(&o(1)));
        assert_eq!(t.nbytes(), 3);
    }
}
