//! A batch row offered to the ops that make its element, so that an op writes its output
//! straight into the batch instead of into a buffer of its own that the batch then copies.
//!
//! `batch` (and a parallel `map` fused with it) makes its buffers before the rows arrive, from
//! the pipeline's schema, and gives the map making row `r` the [`RowSlots`] of that row: one
//! slot per dense field. An op making a field of exactly a slot's name, dtype and shape may
//! take the slot (once: the first op to ask gets it) and fill it ([`RowSlot::fill`]); the
//! tensor it gets back views the row, and the batch, finding the element's field already in
//! its row, skips the copy. Every other case (no op took the slot, a later op replaced the
//! field, the element turned out shaped unlike the schema) falls back to the copy, so writing
//! in place only ever saves work.
//!
//! For a W3 batch (256 224x224x3 float32 images, 154 MB) this saves reading and writing the
//! 602 KB element once more per image; the op's stores then go to memory without a round trip
//! through the cache (see [`RowSlot::fill_chunks`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::stream_copy::{fill_chunks, ChunkWriter};
use crate::tensor::Tensor;

/// One dense field of a batch, as its rows' slots see it.
pub(crate) struct SlotField {
    pub name: Arc<str>,
    pub dtype: DType,
    /// A row's shape.
    pub shape: Arc<[usize]>,
    pub storage: Arc<Storage>,
    /// The start of `storage`'s bytes, from [`Storage::write_ptr`].
    pub base: *mut u8,
    pub row_bytes: usize,
    /// The batch buffer is large: write with non-temporal stores (see `stream_copy`).
    pub streaming: bool,
}

/// The dense fields of one batch, shared by its rows' [`RowSlots`] (so that offering a row
/// costs a reference count, not a copy of the layout).
pub struct BatchSlots {
    fields: Vec<SlotField>,
    rows: usize,
    written: WriteLedger,
}

/// Which rows of which dense fields have been written, in debug builds: each (field, row)
/// once, by an op in place or by the batch's copy, never by both or twice, which is what makes
/// the writes through the shared buffers disjoint.
struct WriteLedger {
    bits: Vec<AtomicU64>,
    rows: usize,
}

impl WriteLedger {
    fn new(fields: usize, rows: usize) -> WriteLedger {
        let words = if cfg!(debug_assertions) {
            (fields * rows).div_ceil(64)
        } else {
            0
        };
        WriteLedger {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            rows,
        }
    }

    /// Marks row `row` of dense field `field` written: false if it already was.
    fn claim(&self, field: usize, row: usize) -> bool {
        let i = field * self.rows + row;
        let Some(word) = self.bits.get(i / 64) else {
            return true;
        };
        let bit = 1u64 << (i % 64);
        word.fetch_or(bit, Ordering::Relaxed) & bit == 0
    }
}

// SAFETY: the raw `base` pointers address the buffers the fields keep alive (`storage`); they
// are written only through `RowSlot`, under the contracts of `BatchSlots::new` and
// `RowSlots::new`.
unsafe impl Send for BatchSlots {}
// SAFETY: as above; nothing is written through a shared `BatchSlots` itself.
unsafe impl Sync for BatchSlots {}

impl BatchSlots {
    /// The slots of a batch of `rows` rows.
    ///
    /// # Safety
    /// Each field's `base` must be the start of its `storage`'s bytes, which must hold `rows`
    /// rows of `row_bytes`, each the bytes of a `shape` of `dtype` values.
    pub(crate) unsafe fn new(fields: Vec<SlotField>, rows: usize) -> Arc<BatchSlots> {
        for f in &fields {
            debug_assert!(
                f.base.cast_const() == f.storage.as_ptr()
                    && f.row_bytes
                        .checked_mul(rows)
                        .is_some_and(|n| n <= f.storage.len()),
                "field '{}': {rows} rows of {} bytes from its buffer's start",
                f.name,
                f.row_bytes
            );
        }
        let written = WriteLedger::new(fields.len(), rows);
        Arc::new(BatchSlots {
            fields,
            rows,
            written,
        })
    }

    /// Notes that row `row` of dense field `field` (its index among the dense fields) is
    /// being written; in debug builds, panics if it was written before.
    pub(crate) fn note_written(&self, field: usize, row: usize) {
        debug_assert!(
            self.written.claim(field, row),
            "row {row} of batch field {field} written twice"
        );
    }

    /// The dense fields, in the batch's order.
    #[cfg(test)]
    pub(crate) fn fields(&self) -> &[SlotField] {
        &self.fields
    }
}

/// The dense fields of one batch row, for the ops making its element.
pub struct RowSlots {
    batch: Arc<BatchSlots>,
    row: usize,
    /// Bit `i`: field `i`'s slot was taken (fields past the 64th get no slot).
    taken: AtomicU64,
}

impl RowSlots {
    /// The slots of row `row` (none if the batch has no such row).
    ///
    /// # Safety
    /// The row must be neither read nor written by anyone else from now until the element
    /// made with these slots has been put into its row (the batch makes one `RowSlots` per row,
    /// and writes the row only after).
    pub unsafe fn new(batch: Arc<BatchSlots>, row: usize) -> RowSlots {
        let taken = AtomicU64::new(if row < batch.rows { 0 } else { u64::MAX });
        RowSlots { batch, row, taken }
    }

    /// The slot of field `name` if it holds `dtype` values of `shape` and no op took it yet.
    pub fn take(&self, name: &str, dtype: DType, shape: &[usize]) -> Option<RowSlot<'_>> {
        let (i, field) = self
            .batch
            .fields
            .iter()
            .enumerate()
            .find(|(_, f)| f.name.as_ref() == name)?;
        let bit = 1u64.checked_shl(u32::try_from(i).ok()?)?;
        let fits = field.dtype == dtype && field.shape.as_ref() == shape;
        let free = fits && self.taken.fetch_or(bit, Ordering::Relaxed) & bit == 0;
        free.then_some(RowSlot {
            field,
            offset: self.row * field.row_bytes,
            batch: &self.batch,
            index: i,
            row: self.row,
        })
    }
}

/// One field's row, taken by the op that fills it.
pub struct RowSlot<'a> {
    field: &'a SlotField,
    /// Where the row starts in the field's buffer.
    offset: usize,
    batch: &'a BatchSlots,
    /// The field's index among the batch's dense fields, and the row.
    index: usize,
    row: usize,
}

impl RowSlot<'_> {
    /// Fills the row with `fill`, which must write every value, and returns the tensor that
    /// views it.
    pub fn fill<T: bytemuck::Pod>(
        self,
        fill: impl FnOnce(&mut [T]) -> Result<()>,
    ) -> Result<Tensor> {
        let f = self.field;
        self.batch.note_written(self.index, self.row);
        // SAFETY: the row is `row_bytes` inside `storage` (`BatchSlots::new`), which no one
        // else touches until the element is in its row (`RowSlots::new`), and this `RowSlot`
        // is the only one made for it (`take`); the slice lives only during `fill`.
        let row = unsafe { std::slice::from_raw_parts_mut(f.base.add(self.offset), f.row_bytes) };
        let values = bytemuck::try_cast_slice_mut(row)
            .map_err(|e| Error::internal(format!("batch row of {} as values: {e}", f.dtype)))?;
        fill(values)?;
        Tensor::view(
            f.dtype,
            f.shape.to_vec(),
            Arc::clone(&f.storage),
            self.offset,
        )
    }

    /// Fills the row in chunks of `chunk` values (an image row, say; the last may be
    /// shorter): `make(i, out)` writes chunk `i` whole. In a large batch the chunks go to
    /// memory with non-temporal stores (see [`fill_chunks`]).
    pub fn fill_chunks<T: bytemuck::Pod>(
        self,
        chunk: usize,
        make: impl FnMut(usize, &mut [T]),
    ) -> Result<Tensor> {
        let streaming = self.field.streaming;
        self.fill(|out: &mut [T]| {
            fill_chunks(out, chunk, streaming, make);
            Ok(())
        })
    }

    /// Like [`RowSlot::fill_chunks`], for chunks pushed in any order by `fill` (which must
    /// write every chunk) through a [`ChunkWriter`].
    pub fn write_chunks<T: bytemuck::Pod>(
        self,
        chunk: usize,
        fill: impl FnOnce(&mut ChunkWriter<'_, T>) -> Result<()>,
    ) -> Result<Tensor> {
        let streaming = self.field.streaming;
        self.fill(|out: &mut [T]| fill(&mut ChunkWriter::new(out, chunk, streaming)))
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;
    use crate::element::{FieldSpec, Schema};
    use crate::exec::batch::BatchBuilder;
    use crate::storage::BufferPool;
    use crate::stream_copy::STREAM_MIN_BYTES;

    /// A batch of `rows` rows of 12 float32, and row 1's tensor filled in chunks of `chunk`.
    fn fill_row_1(rows: usize, chunk: usize) -> Vec<f32> {
        let schema = Schema::new(vec![FieldSpec::fixed("v", DType::F32, &[12])]);
        let pool = BufferPool::new(0);
        let batch = BatchBuilder::from_schema(&schema, rows, &pool).unwrap();
        // SAFETY: the only slots of row 1, and the row is not written otherwise.
        let slots = unsafe { batch.row_slots(1) };
        let slot = slots.take("v", DType::F32, &[12]).unwrap();
        let t = slot
            .fill_chunks(chunk, |i, out: &mut [f32]| {
                for (j, v) in out.iter_mut().enumerate() {
                    *v = (i * 100 + j) as f32;
                }
            })
            .unwrap();
        t.typed::<f32>().unwrap().to_vec()
    }

    #[test]
    fn rows_filled_in_chunks_plain_and_streamed() {
        // A small batch is written in place; one of STREAM_MIN_BYTES or more is streamed.
        let large = STREAM_MIN_BYTES.div_ceil(48) + 1;
        for rows in [2, large] {
            for chunk in [4, 5, 12, 50] {
                let want: Vec<f32> = (0..12)
                    .map(|k| (k / chunk * 100 + k % chunk) as f32)
                    .collect();
                assert_eq!(fill_row_1(rows, chunk), want, "{rows} rows, chunk {chunk}");
            }
        }
    }
}
