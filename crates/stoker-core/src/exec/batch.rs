//! `batch(n, drop_remainder)`: stacks n elements into one, writing each element into its row
//! of a pooled batch buffer as soon as it arrives.
//!
//! Copying on arrival (instead of collecting n elements and stacking them at the end) reads
//! each element while it is still in cache and gives its buffer straight back to the pool,
//! where the next element's op takes it warm; with large batches (256 images of 600 KB) the
//! collected elements would not fit in any cache.

use std::sync::Arc;

use crate::dtype::DType;
use crate::element::{Element, Names};
use crate::error::{Error, Result};
use crate::exec::{BoxIter, ElementIter};
use crate::stats::StageStats;
use crate::storage::{BufferPool, Storage};
use crate::stream_copy::{copy_streaming, STREAM_MIN_BYTES};
use crate::tensor::{Origin, Tensor};

pub struct BatchIter {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    pool: Arc<BufferPool>,
    stats: Arc<StageStats>,
}

impl BatchIter {
    pub fn new(input: BoxIter, size: usize, drop_remainder: bool, stats: Arc<StageStats>) -> Self {
        BatchIter {
            input,
            size,
            drop_remainder,
            // Shared, so batch buffers are reused across epochs (a new iterator each time).
            pool: Arc::clone(crate::storage::shared_pool()),
            stats,
        }
    }
}

impl ElementIter for BatchIter {
    fn next(&mut self) -> Result<Option<Element>> {
        let Some(first) = self.stats.pull(&mut self.input)? else {
            return Ok(None);
        };
        let mut batch = BatchBuilder::new(&first, self.size, &self.pool);
        batch.push(0, first)?;
        let mut rows = 1;
        while rows < self.size {
            match self.stats.pull(&mut self.input)? {
                Some(e) => {
                    batch.push(rows, e)?;
                    rows += 1;
                }
                None => break,
            }
        }
        if self.drop_remainder && rows < self.size {
            return Ok(None);
        }
        batch.finish(rows).map(Some)
    }
}

/// Stacks elements of equal shapes along a new first axis.
pub fn stack(elements: &[Element], pool: &Arc<BufferPool>) -> Result<Element> {
    let Some(first) = elements.first() else {
        return Err(Error::internal("stack of no elements"));
    };
    let mut batch = BatchBuilder::new(first, elements.len(), pool);
    for (row, e) in elements.iter().enumerate() {
        batch.push(row, e.clone())?;
    }
    batch.finish(elements.len())
}

/// A batch being filled row by row, in any order. The first element given to [`new`] fixes
/// the fields' dtypes and shapes; every row must match them.
///
/// Rows may be filled from several threads at once: [`BatchBuilder::reserve`] (which needs
/// `&mut`, so it runs under the caller's lock) checks an element and hands back where its
/// dense fields go; [`RowWrite::write`] then copies them without the lock.
///
/// [`new`]: BatchBuilder::new
pub struct BatchBuilder {
    names: Names,
    capacity: usize,
    fields: Vec<FieldRows>,
}

struct FieldRows {
    dtype: DType,
    row_shape: Vec<usize>,
    data: RowsData,
}

enum RowsData {
    Dense {
        row_bytes: usize,
        storage: Storage,
        /// The start of `storage`'s bytes, taken once so that rows are handed out without
        /// making a reference to the whole buffer while other rows are being written.
        base: *mut u8,
    },
    /// String fields: each row's values and origins, kept until the batch is finished.
    Bytes(Vec<Option<Tensor>>),
}

impl BatchBuilder {
    /// An empty batch of `capacity` rows shaped like `first`, its dense fields in one pooled
    /// buffer each.
    pub fn new(first: &Element, capacity: usize, pool: &Arc<BufferPool>) -> BatchBuilder {
        let fields = first
            .tensors
            .iter()
            .map(|t| FieldRows {
                dtype: t.dtype(),
                row_shape: t.shape().to_vec(),
                data: match t.dtype().size() {
                    Some(size) => {
                        let row_bytes = t.numel() * size;
                        let mut storage = pool.take(row_bytes * capacity);
                        let base = storage.as_bytes_mut().as_mut_ptr();
                        RowsData::Dense {
                            row_bytes,
                            storage,
                            base,
                        }
                    }
                    None => RowsData::Bytes(vec![None; capacity]),
                },
            })
            .collect();
        BatchBuilder {
            names: first.names.clone(),
            capacity,
            fields,
        }
    }

    /// Copies `element` into row `row`.
    pub fn push(&mut self, row: usize, element: Element) -> Result<()> {
        let write = self.reserve(row, &element)?;
        // SAFETY: `write` points into this builder's buffers, which `&mut self` keeps alive and
        // unaliased until the copy is done.
        unsafe { write.write(&element) };
        Ok(())
    }

    /// Checks that `element` fits row `row`, takes its string fields, and returns where its
    /// dense fields go. Each row must be reserved once.
    pub fn reserve(&mut self, row: usize, element: &Element) -> Result<RowWrite> {
        if row >= self.capacity {
            return Err(Error::internal(format!(
                "batch row {row} of {}",
                self.capacity
            )));
        }
        if element.tensors.len() != self.fields.len() {
            return Err(Error::invalid(
                "batch",
                format!(
                    "element {row} of the batch has fields [{}] but the batch has [{}]",
                    element.names.join(", "),
                    self.names.join(", ")
                ),
            ));
        }
        let mut targets = Vec::with_capacity(self.fields.len());
        for (f, (field, t)) in self.fields.iter_mut().zip(&element.tensors).enumerate() {
            if t.shape() != field.row_shape.as_slice() || t.dtype() != field.dtype {
                return Err(Error::invalid(
                    "batch",
                    format!(
                        "field '{}': element {row} of the batch is {} {:?} but the first is {} \
                         {:?}; elements of a batch must have equal shapes (pad or resize them \
                         first)",
                        self.names[f],
                        t.dtype(),
                        t.shape(),
                        field.dtype,
                        field.row_shape
                    ),
                ));
            }
            match &mut field.data {
                RowsData::Dense {
                    row_bytes, base, ..
                } => {
                    targets.push(Some(RowTarget {
                        // SAFETY: `row < capacity`, so the row lies inside the buffer of
                        // `row_bytes * capacity` bytes that `base` starts.
                        ptr: unsafe { base.add(row * *row_bytes) },
                        len: *row_bytes,
                        streaming: *row_bytes * self.capacity >= STREAM_MIN_BYTES,
                    }));
                }
                RowsData::Bytes(rows) => {
                    rows[row] = Some(t.clone());
                    targets.push(None);
                }
            }
        }
        Ok(RowWrite { targets })
    }

    /// The batch of the first `rows` rows, which must all have been written.
    pub fn finish(self, rows: usize) -> Result<Element> {
        let mut tensors = Vec::with_capacity(self.fields.len());
        for field in self.fields {
            let mut shape = Vec::with_capacity(field.row_shape.len() + 1);
            shape.push(rows);
            shape.extend_from_slice(&field.row_shape);
            tensors.push(match field.data {
                RowsData::Dense { storage, .. } => {
                    Tensor::view(field.dtype, shape, Arc::new(storage), 0)?
                }
                RowsData::Bytes(row_tensors) => {
                    let mut values = Vec::new();
                    let mut origins: Vec<Origin> = Vec::new();
                    for t in row_tensors.into_iter().take(rows) {
                        let t = t.ok_or_else(|| Error::internal("batch row not written"))?;
                        let b = t
                            .bytes_data()
                            .ok_or_else(|| Error::internal("bytes tensor without bytes data"))?;
                        values.extend(b.values.iter().cloned());
                        origins.extend(b.origins.iter().cloned());
                    }
                    Tensor::from_bytes(shape, values, origins)?
                }
            });
        }
        Ok(Element::new(self.names, tensors))
    }
}

// SAFETY: the raw `base` pointers point into buffers the builder owns (a heap buffer does not
// move with its owner); sending the builder to another thread sends those buffers with it.
unsafe impl Send for BatchBuilder {}

/// Where one element's dense fields go in a batch (see [`BatchBuilder::reserve`]).
pub struct RowWrite {
    targets: Vec<Option<RowTarget>>,
}

struct RowTarget {
    ptr: *mut u8,
    len: usize,
    /// The batch buffer is large: write with non-temporal stores (see `stream_copy`).
    streaming: bool,
}

// SAFETY: a `RowWrite` is only a set of destinations in a batch buffer; the thread that uses it
// is bound by the contract of `RowWrite::write`.
unsafe impl Send for RowWrite {}

impl RowWrite {
    /// Copies the dense fields of `element` (the one given to `reserve`) into the batch.
    ///
    /// # Safety
    /// The [`BatchBuilder`] this came from must be alive and not finished, and no one else may
    /// access this row's bytes, until the call returns.
    pub unsafe fn write(self, element: &Element) {
        for (target, t) in self.targets.iter().zip(&element.tensors) {
            if let (Some(target), Some(src)) = (target, t.raw()) {
                let src = &src[..target.len.min(src.len())];
                // SAFETY: `target` is this row's range of a live batch buffer that nothing
                // else touches (the caller's contract); `src` is a different buffer.
                unsafe {
                    if target.streaming {
                        copy_streaming(src, target.ptr);
                    } else {
                        std::ptr::copy_nonoverlapping(src.as_ptr(), target.ptr, src.len());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::testutil::*;

    fn sizes(it: BoxIter) -> Vec<Vec<i64>> {
        let mut it = it;
        let mut out = Vec::new();
        while let Some(e) = it.next().unwrap() {
            out.push(e.tensors[0].typed::<i64>().unwrap().to_vec());
        }
        out
    }

    #[test]
    fn batches_and_remainder() {
        let st = Arc::new(StageStats::new("batch", "batch"));
        let b = BatchIter::new(ints(0..7), 3, false, st.clone());
        assert_eq!(
            sizes(Box::new(b)),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
        let b = BatchIter::new(ints(0..7), 3, true, st);
        assert_eq!(sizes(Box::new(b)), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    }

    #[test]
    fn unequal_shapes_are_an_error_naming_the_field() {
        use crate::dtype::DType;
        use crate::element::names;
        use crate::exec::VecIter;
        let n = names(&["v"]);
        let e = |len: usize| {
            Ok(Element::new(
                n.clone(),
                vec![Tensor::from_slice(DType::F32, vec![len], &vec![0f32; len]).unwrap()],
            ))
        };
        let st = Arc::new(StageStats::new("batch", "batch"));
        let mut b = BatchIter::new(VecIter::boxed(vec![e(2), e(3)]), 2, false, st);
        let err = b.next().unwrap_err().to_string();
        assert!(
            err.contains("field 'v'") && err.contains("element 1") && err.contains("the first"),
            "{err}"
        );
    }
}
