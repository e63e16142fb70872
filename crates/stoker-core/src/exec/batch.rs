//! `batch(n, drop_remainder)`: stacks n elements into one, writing each element into its row
//! of a pooled batch buffer as soon as it arrives.
//!
//! Copying on arrival (instead of collecting n elements and stacking them at the end) reads
//! each element while it is still in cache and gives its buffer straight back to the pool,
//! where the next element's op takes it warm; with large batches (256 images of 600 KB) the
//! collected elements would not fit in any cache.
//!
//! Better still, where the schema fixes the rows' shapes the buffers are made before the
//! first element, and each row is offered to the map making its element ([`RowSlots`]): an op
//! that writes its output there leaves nothing to copy.

use std::sync::Arc;

use crate::dtype::DType;
use crate::element::{Element, Names, Schema};
use crate::error::{Error, Result};
use crate::exec::{BoxIter, ElementIter};
use crate::origin::Origin;
use crate::row_slots::{BatchSlots, RowSlots, SlotField};
use crate::stats::StageStats;
use crate::storage::{BufferPool, Storage};
use crate::stream_copy::{copy_streaming, STREAM_MIN_BYTES};
use crate::tensor::Tensor;

pub struct BatchIter {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    /// What the input's elements look like, to make each batch's buffers before its rows.
    rows: Schema,
    pool: Arc<BufferPool>,
    stats: Arc<StageStats>,
}

impl BatchIter {
    /// `rows`: the input's schema (a dynamic one is fine: the first element then lays out the
    /// batch, and nothing is written in place).
    pub fn new(
        input: BoxIter,
        size: usize,
        drop_remainder: bool,
        rows: Schema,
        stats: Arc<StageStats>,
    ) -> Self {
        BatchIter {
            input,
            size,
            drop_remainder,
            rows,
            // Shared, so batch buffers are reused across epochs (a new iterator each time).
            pool: crate::storage::batch_pool(),
            stats,
        }
    }
}

impl ElementIter for BatchIter {
    fn state(&self) -> Result<crate::exec::State> {
        Ok(crate::exec::State::over(self.input.state()?))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        let mut batch = BatchBuilder::from_schema(&self.rows, self.size, &self.pool);
        let mut rows = 0;
        while rows < self.size {
            let pulled = match &batch {
                Some(b) => {
                    // SAFETY: row `rows` gets these slots only; the input makes its element
                    // with them, and the row is written (`push`) only after that.
                    let slots = unsafe { b.row_slots(rows) };
                    self.stats.pull_into(&mut self.input, &slots)?
                }
                None => self.stats.pull(&mut self.input)?,
            };
            let Some(e) = pulled else { break };
            let written = batch
                .get_or_insert_with(|| BatchBuilder::new(&e, self.size, &self.pool))
                .push(rows, e)?;
            self.stats.add_row_bytes(written.copied, written.in_place);
            rows += 1;
        }
        match batch {
            Some(b) if rows > 0 && (rows == self.size || !self.drop_remainder) => {
                b.finish(rows).map(Some)
            }
            _ => Ok(None),
        }
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

/// A batch being filled row by row, in any order. Its fields' dtypes and shapes come from the
/// first element given to [`new`], or from the schema given to [`from_schema`]; every row must
/// match them.
///
/// Rows may be filled from several threads at once: [`BatchBuilder::reserve`] (which needs
/// `&mut`, so it runs under the caller's lock) checks an element and hands back where its
/// dense fields go; [`RowWrite::write`] then copies them without the lock.
///
/// [`new`]: BatchBuilder::new
/// [`from_schema`]: BatchBuilder::from_schema
pub struct BatchBuilder {
    names: Names,
    capacity: usize,
    fields: Vec<FieldRows>,
    /// Laid out from a schema and not yet confirmed by an element: the first element reserved
    /// lays the batch out again if it differs (a schema may be less exact than its elements).
    from_schema: bool,
    pool: Arc<BufferPool>,
    /// The dense fields' rows, as offered to the ops making the elements.
    slots: Arc<BatchSlots>,
    /// Rows are written with non-temporal stores (see [`streams`]).
    streaming: bool,
}

struct FieldRows {
    dtype: DType,
    row_shape: Arc<[usize]>,
    data: RowsData,
}

enum RowsData {
    Dense {
        row_bytes: usize,
        storage: Arc<Storage>,
        /// The start of `storage`'s bytes, taken once without a reference to them, so that
        /// rows are written from several threads through it (see `Storage::write_ptr`).
        base: *mut u8,
    },
    /// String fields: each row's values and origins, kept until the batch is finished.
    Bytes(Vec<Option<Tensor>>),
}

/// Whether a batch's rows are written with non-temporal stores (see `stream_copy`): decided
/// by the whole batch, since what the consumer may still find in the cache depends on all of
/// it (W2's 9.4 MB of float32 images come with 100 MB of one-hot labels).
fn streams(fields: &[FieldRows], capacity: usize) -> bool {
    let row_bytes: usize = fields
        .iter()
        .map(|f| match f.data {
            RowsData::Dense { row_bytes, .. } => row_bytes,
            RowsData::Bytes(_) => 0,
        })
        .sum();
    row_bytes * capacity >= STREAM_MIN_BYTES
}

impl FieldRows {
    fn new(dtype: DType, row_shape: &[usize], capacity: usize, pool: &Arc<BufferPool>) -> Self {
        let data = match dtype.size() {
            Some(size) => {
                let row_bytes = row_shape.iter().product::<usize>() * size;
                let storage = Arc::new(pool.take(row_bytes * capacity));
                let base = storage.write_ptr();
                RowsData::Dense {
                    row_bytes,
                    storage,
                    base,
                }
            }
            None => RowsData::Bytes(vec![None; capacity]),
        };
        FieldRows {
            dtype,
            row_shape: Arc::from(row_shape),
            data,
        }
    }
}

impl BatchBuilder {
    /// An empty batch of `capacity` rows shaped like `first`, its dense fields in one pooled
    /// buffer each.
    pub fn new(first: &Element, capacity: usize, pool: &Arc<BufferPool>) -> BatchBuilder {
        let fields = first
            .tensors
            .iter()
            .map(|t| FieldRows::new(t.dtype(), t.shape(), capacity, pool))
            .collect();
        BatchBuilder::laid_out(first.names.clone(), fields, capacity, false, pool)
    }

    fn laid_out(
        names: Names,
        fields: Vec<FieldRows>,
        capacity: usize,
        from_schema: bool,
        pool: &Arc<BufferPool>,
    ) -> BatchBuilder {
        let streaming = streams(&fields, capacity);
        let dense = names
            .iter()
            .zip(&fields)
            .filter_map(|(name, f)| match &f.data {
                RowsData::Dense {
                    row_bytes,
                    storage,
                    base,
                } => Some(SlotField {
                    name: Arc::clone(name),
                    dtype: f.dtype,
                    shape: Arc::clone(&f.row_shape),
                    storage: Arc::clone(storage),
                    base: *base,
                    row_bytes: *row_bytes,
                    streaming,
                }),
                RowsData::Bytes(_) => None,
            })
            .collect();
        // SAFETY: each `base` starts its `storage`'s bytes, `capacity` rows of `row_bytes`
        // of the field's shape and dtype (`FieldRows::new`).
        let slots = unsafe { BatchSlots::new(dense, capacity) };
        BatchBuilder {
            names,
            capacity,
            fields,
            from_schema,
            pool: Arc::clone(pool),
            slots,
            streaming,
        }
    }

    /// An empty batch of `capacity` rows laid out by `schema`, or `None` when the schema does
    /// not fix every field's shape (the first element must then lay it out).
    pub fn from_schema(
        schema: &Schema,
        capacity: usize,
        pool: &Arc<BufferPool>,
    ) -> Option<BatchBuilder> {
        if schema.dynamic {
            return None;
        }
        let fields = schema
            .fields
            .iter()
            .map(|f| Some(FieldRows::new(f.dtype, &f.static_shape()?, capacity, pool)))
            .collect::<Option<Vec<_>>>()?;
        Some(BatchBuilder::laid_out(
            schema.names(),
            fields,
            capacity,
            true,
            pool,
        ))
    }

    /// Where the ops making row `row`'s element may write its dense fields.
    ///
    /// # Safety
    /// At most one `RowSlots` may be made per row, and the row must be written ([`push`] or
    /// [`reserve`]) only after the element made with it is complete; the builder's buffers
    /// are kept alive by the slots.
    ///
    /// [`push`]: BatchBuilder::push
    /// [`reserve`]: BatchBuilder::reserve
    pub unsafe fn row_slots(&self, row: usize) -> RowSlots {
        // SAFETY: the caller makes these the row's only slots and writes the row only after.
        unsafe { RowSlots::new(Arc::clone(&self.slots), row) }
    }

    /// Copies `element` into row `row`.
    pub fn push(&mut self, row: usize, element: Element) -> Result<RowWritten> {
        let write = self.reserve(row, &element)?;
        // SAFETY: `write` points into this builder's buffers, which `&mut self` keeps alive and
        // unaliased until the copy is done.
        Ok(unsafe { write.write(&element) })
    }

    /// Why `element` cannot be row `row`, if it cannot.
    fn mismatch(&self, row: usize, element: &Element) -> Option<Error> {
        let same_names = Arc::ptr_eq(&element.names, &self.names)
            || element.names.len() == self.names.len()
                && element
                    .names
                    .iter()
                    .zip(self.names.iter())
                    .all(|(a, b)| a == b);
        if !same_names {
            return Some(Error::invalid(
                "batch",
                format!(
                    "element {row} of the batch has fields [{}] but the batch has [{}]",
                    element.names.join(", "),
                    self.names.join(", ")
                ),
            ));
        }
        let (f, (field, t)) =
            self.fields
                .iter()
                .zip(&element.tensors)
                .enumerate()
                .find(|(_, (field, t))| {
                    t.shape() != field.row_shape.as_ref() || t.dtype() != field.dtype
                })?;
        Some(Error::invalid(
            "batch",
            format!(
                "field '{}': element {row} of the batch is {} {:?} but the first is {} {:?}; \
                 elements of a batch must have equal shapes (pad or resize them first)",
                self.names[f],
                t.dtype(),
                t.shape(),
                field.dtype,
                field.row_shape
            ),
        ))
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
        if let Some(err) = self.mismatch(row, element) {
            if !self.from_schema {
                return Err(err);
            }
            // The schema's layout was wrong; no row was reserved in it yet. Rows an op wrote
            // into its buffers keep them alive through their tensors, and get copied.
            *self = BatchBuilder::new(element, self.capacity, &self.pool);
        }
        self.from_schema = false;
        let streaming = self.streaming;
        let mut targets = Vec::new();
        for (f, (field, t)) in self.fields.iter_mut().zip(&element.tensors).enumerate() {
            match &mut field.data {
                RowsData::Dense {
                    row_bytes, base, ..
                } => targets.push((
                    f,
                    RowTarget {
                        // SAFETY: `row < capacity`, so the row lies inside the buffer of
                        // `row_bytes * capacity` bytes that `base` starts.
                        ptr: unsafe { base.add(row * *row_bytes) },
                        len: *row_bytes,
                        streaming,
                        dense: targets.len(),
                    },
                )),
                RowsData::Bytes(rows) => rows[row] = Some(t.clone()),
            }
        }
        Ok(RowWrite {
            targets,
            slots: Arc::clone(&self.slots),
            row,
        })
    }

    /// The batch of the first `rows` rows, which must all have been written.
    pub fn finish(self, rows: usize) -> Result<Element> {
        // The batch's buffers are then its own (NumPy gets them writable), once the rows'
        // slots are gone too.
        drop(self.slots);
        let mut tensors = Vec::with_capacity(self.fields.len());
        for field in self.fields {
            let mut shape = Vec::with_capacity(field.row_shape.len() + 1);
            shape.push(rows);
            shape.extend_from_slice(&field.row_shape);
            tensors.push(match field.data {
                RowsData::Dense { storage, .. } => Tensor::view(field.dtype, shape, storage, 0)?,
                RowsData::Bytes(row_tensors) => {
                    let mut values = Vec::new();
                    let mut origins: Vec<Origin> = Vec::new();
                    values.reserve(rows);
                    origins.reserve(rows);
                    for t in row_tensors.into_iter().take(rows) {
                        let t = t.ok_or_else(|| Error::internal("batch row not written"))?;
                        let (v, o) = t
                            .into_bytes()
                            .ok_or_else(|| Error::internal("bytes tensor without bytes data"))?;
                        values.extend(v);
                        origins.extend(o);
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

/// What writing one row took: the bytes copied from the element, and the bytes its ops had
/// already written into the row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowWritten {
    pub copied: usize,
    pub in_place: usize,
}

/// Where one element's dense fields go in a batch (see [`BatchBuilder::reserve`]).
pub struct RowWrite {
    /// The dense fields' destinations, by field index (none for a row of strings alone, so
    /// that reserving it allocates nothing).
    targets: Vec<(usize, RowTarget)>,
    /// The batch's slots, which note each row written (see [`BatchSlots::note_written`]).
    slots: Arc<BatchSlots>,
    row: usize,
}

struct RowTarget {
    ptr: *mut u8,
    len: usize,
    /// The batch buffer is large: write with non-temporal stores (see `stream_copy`).
    streaming: bool,
    /// The field's index among the dense fields.
    dense: usize,
}

// SAFETY: a `RowWrite` is only a set of destinations in a batch buffer; the thread that uses it
// is bound by the contract of `RowWrite::write`.
unsafe impl Send for RowWrite {}

impl RowWrite {
    /// Copies the dense fields of `element` (the one given to `reserve`) into the batch,
    /// except those an op already wrote there (see [`RowSlots`]).
    ///
    /// # Safety
    /// The [`BatchBuilder`] this came from must be alive and not finished, and no one else may
    /// access this row's bytes, until the call returns.
    pub unsafe fn write(self, element: &Element) -> RowWritten {
        let mut written = RowWritten::default();
        for (f, target) in &self.targets {
            let Some(t) = element.tensors.get(*f) else {
                continue;
            };
            if t.data_ptr() == Some(target.ptr.cast_const()) {
                written.in_place += target.len;
                continue;
            }
            if let Some(src) = t.raw() {
                self.slots.note_written(target.dense, self.row);
                written.copied += src.len().min(target.len);
                let src = &src[..target.len.min(src.len())];
                // SAFETY: `target` is this row's range of a live batch buffer that nothing
                // else touches (the caller's contract); `src` does not overlap it: a tensor of
                // the row's size that is not the row itself lies outside it.
                unsafe {
                    if target.streaming {
                        copy_streaming(src, target.ptr);
                    } else {
                        std::ptr::copy_nonoverlapping(src.as_ptr(), target.ptr, src.len());
                    }
                }
            }
        }
        written
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
        let b = BatchIter::new(ints(0..7), 3, false, Schema::dynamic(), st.clone());
        assert_eq!(
            sizes(Box::new(b)),
            vec![vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
        let b = BatchIter::new(ints(0..7), 3, true, Schema::dynamic(), st);
        assert_eq!(sizes(Box::new(b)), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    }

    #[test]
    fn a_row_written_in_place_is_not_copied() {
        use crate::element::{names, FieldSpec};
        let schema = Schema::new(vec![FieldSpec::fixed("v", DType::F32, &[4])]);
        let pool = BufferPool::new(1 << 20);
        let mut batch = BatchBuilder::from_schema(&schema, 2, &pool).unwrap();
        // SAFETY: one `RowSlots` per row, and each row is written after its element is made.
        let (slots0, slots1) = unsafe { (batch.row_slots(0), batch.row_slots(1)) };
        // Only the field's exact name, dtype and shape get a slot, and only once.
        assert!(slots1.take("w", DType::F32, &[4]).is_none());
        assert!(slots1.take("v", DType::F64, &[4]).is_none());
        assert!(slots1.take("v", DType::F32, &[5]).is_none());
        let slot = slots0.take("v", DType::F32, &[4]).unwrap();
        assert!(slots0.take("v", DType::F32, &[4]).is_none());
        let row0 = slot
            .fill(|out: &mut [f32]| {
                out.copy_from_slice(&[1.0, 2.0, 3.0, 4.0]);
                Ok(())
            })
            .unwrap();
        let e0 = Element::new(names(&["v"]), vec![row0]);
        let e1 = Element::new(
            names(&["v"]),
            vec![Tensor::from_slice(DType::F32, vec![4], &[5f32, 6.0, 7.0, 8.0]).unwrap()],
        );
        let write = batch.reserve(0, &e0).unwrap();
        // SAFETY: the builder is alive and this row is written by this call only.
        let written = unsafe { write.write(&e0) };
        let in_place = RowWritten {
            copied: 0,
            in_place: 16,
        };
        assert_eq!(written, in_place, "the row is already there");
        let write = batch.reserve(1, &e1).unwrap();
        // SAFETY: as above.
        let written = unsafe { write.write(&e1) };
        assert_eq!(written.copied, 16);
        drop((e0, e1, slots0, slots1));
        let b = batch.finish(2).unwrap();
        assert_eq!(b.tensors[0].shape(), &[2, 4]);
        assert_eq!(
            b.tensors[0].typed::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        );
        assert!(b.tensors[0].is_exclusive());
        // A schema with an unknown dimension lays out nothing.
        let open = Schema::new(vec![FieldSpec::new("v", DType::F32, vec![None])]);
        assert!(BatchBuilder::from_schema(&open, 2, &pool).is_none());
        assert!(BatchBuilder::from_schema(&Schema::dynamic(), 2, &pool).is_none());
    }

    /// Rows written in place and rows copied are noted; a row written twice (an op's slot
    /// and then a copy of another element, or two copies) is caught in debug builds, where
    /// writes through the shared buffer could otherwise overlap unseen.
    #[test]
    #[cfg(debug_assertions)]
    fn a_row_written_twice_is_caught() {
        use crate::element::{names, FieldSpec};
        let schema = Schema::new(vec![FieldSpec::fixed("v", DType::F32, &[2])]);
        let pool = BufferPool::new(1 << 20);
        let element = |x: f32| {
            Element::new(
                names(&["v"]),
                vec![Tensor::from_slice(DType::F32, vec![2], &[x, x]).unwrap()],
            )
        };
        let twice = |in_place_first: bool| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut batch = BatchBuilder::from_schema(&schema, 2, &pool).unwrap();
                if in_place_first {
                    // SAFETY: the row's only slots; the row is written after.
                    let slots = unsafe { batch.row_slots(1) };
                    let slot = slots.take("v", DType::F32, &[2]).unwrap();
                    slot.fill(|out: &mut [f32]| {
                        out.fill(1.0);
                        Ok(())
                    })
                    .unwrap();
                } else {
                    batch.push(1, element(1.0)).unwrap();
                }
                batch.push(0, element(0.0)).unwrap(); // another row: fine
                batch.push(1, element(2.0)).unwrap();
            }))
        };
        for in_place_first in [true, false] {
            let err = twice(in_place_first).expect_err("a second write of row 1 was let through");
            let message = crate::exec::panic_message(err.as_ref());
            assert!(
                message.contains("row 1 of batch field 0 written twice"),
                "{message}"
            );
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "writes batches of 16 MiB and more: hours under Miri")]
    fn the_whole_batch_decides_whether_its_rows_are_streamed() {
        use crate::element::{names, FieldSpec};
        // A small field beside a large one: the batch is large, so both stream.
        let rows = STREAM_MIN_BYTES.div_ceil(4096);
        let schema = Schema::new(vec![
            FieldSpec::fixed("small", DType::I64, &[1]),
            FieldSpec::fixed("large", DType::F32, &[1024]),
        ]);
        let pool = BufferPool::new(0);
        let mut batch = BatchBuilder::from_schema(&schema, rows, &pool).unwrap();
        assert!(batch.streaming);
        assert!(batch.slots.fields().iter().all(|f| f.streaming));
        let element = |r: usize| {
            Element::new(
                names(&["small", "large"]),
                vec![
                    Tensor::from_slice(DType::I64, vec![1], &[r as i64]).unwrap(),
                    Tensor::from_slice(DType::F32, vec![1024], &[r as f32; 1024]).unwrap(),
                ],
            )
        };
        for r in 0..rows {
            batch.push(r, element(r)).unwrap();
        }
        let b = batch.finish(rows).unwrap();
        let small = b.tensors[0].typed::<i64>().unwrap();
        assert!(small.iter().enumerate().all(|(r, &v)| v == r as i64));
        let large = b.tensors[1].typed::<f32>().unwrap();
        assert!(large
            .chunks(1024)
            .enumerate()
            .all(|(r, row)| row.iter().all(|&v| v == r as f32)));
        // Only the small field: plain stores.
        let schema = Schema::new(vec![FieldSpec::fixed("small", DType::I64, &[1])]);
        assert!(
            !BatchBuilder::from_schema(&schema, rows, &pool)
                .unwrap()
                .streaming
        );
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
        let mut b = BatchIter::new(
            VecIter::boxed(vec![e(2), e(3)]),
            2,
            false,
            Schema::dynamic(),
            st,
        );
        let err = b.next().unwrap_err().to_string();
        assert!(
            err.contains("field 'v'") && err.contains("element 1") && err.contains("the first"),
            "{err}"
        );
    }
}
