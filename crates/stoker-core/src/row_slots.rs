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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::stream_copy::fill_chunks;
use crate::tensor::Tensor;

/// The dense fields of one batch row, for the ops making its element.
pub struct RowSlots {
    slots: Vec<Slot>,
}

struct Slot {
    name: Arc<str>,
    dtype: DType,
    shape: Arc<[usize]>,
    storage: Arc<Storage>,
    offset: usize,
    /// `storage`'s bytes from `offset`, `len` of them: this row of the field.
    ptr: *mut u8,
    len: usize,
    /// The batch buffer is large: write with non-temporal stores (see `stream_copy`).
    streaming: bool,
    taken: AtomicBool,
}

// SAFETY: the raw pointers address rows of the batch buffers the slots keep alive (`storage`);
// a slot is written only through `RowSlot`, which one caller at most gets (`taken`), under the
// contract of `RowSlots::new`.
unsafe impl Send for RowSlots {}
// SAFETY: as above; `take` hands each slot out once, atomically.
unsafe impl Sync for RowSlots {}

/// One field's place in a batch row, as [`RowSlots::new`] takes it.
pub struct SlotPlace {
    pub name: Arc<str>,
    pub dtype: DType,
    pub shape: Arc<[usize]>,
    pub storage: Arc<Storage>,
    /// Start of `storage`'s bytes, from [`Storage::as_mut_ptr`].
    pub base: *mut u8,
    pub offset: usize,
    pub streaming: bool,
}

impl RowSlots {
    /// The slots of one row.
    ///
    /// # Safety
    /// For each place, `base` must be the start of `storage`'s bytes, and the row (the
    /// `shape`'s bytes from `offset`) must lie inside it and be neither read nor written by
    /// anyone else from now until the element made with these slots has been put into its
    /// row (the batch makes one `RowSlots` per row, and writes the row only after).
    pub unsafe fn new(places: Vec<SlotPlace>) -> RowSlots {
        let slots = places
            .into_iter()
            .map(|p| {
                let len = p.shape.iter().product::<usize>() * p.dtype.size().unwrap_or(0);
                Slot {
                    // SAFETY: the row lies inside the buffer `base` starts (the contract).
                    ptr: unsafe { p.base.add(p.offset) },
                    len,
                    name: p.name,
                    dtype: p.dtype,
                    shape: p.shape,
                    storage: p.storage,
                    offset: p.offset,
                    streaming: p.streaming,
                    taken: AtomicBool::new(false),
                }
            })
            .collect();
        RowSlots { slots }
    }

    /// The slot of field `name` if it holds `dtype` values of `shape` and no op took it yet.
    pub fn take(&self, name: &str, dtype: DType, shape: &[usize]) -> Option<RowSlot<'_>> {
        let slot = self.slots.iter().find(|s| s.name.as_ref() == name)?;
        let fits = slot.dtype == dtype && slot.shape.as_ref() == shape;
        (fits && !slot.taken.swap(true, Ordering::Relaxed)).then_some(RowSlot { slot })
    }
}

/// One field's row, taken by the op that fills it.
pub struct RowSlot<'a> {
    slot: &'a Slot,
}

impl RowSlot<'_> {
    /// Fills the row with `fill`, which must write every value, and returns the tensor that
    /// views it.
    pub fn fill<T: bytemuck::Pod>(
        self,
        fill: impl FnOnce(&mut [T]) -> Result<()>,
    ) -> Result<Tensor> {
        let s = self.slot;
        // SAFETY: the row is `len` bytes inside `storage` that no one else touches until the
        // element is in its row (`RowSlots::new`), and this `RowSlot` is the only one made for
        // it (`take`); the slice lives only during `fill`.
        let row = unsafe { std::slice::from_raw_parts_mut(s.ptr, s.len) };
        let values = bytemuck::try_cast_slice_mut(row)
            .map_err(|e| Error::internal(format!("batch row of {} as values: {e}", s.dtype)))?;
        fill(values)?;
        self.into_tensor()
    }

    /// Fills the row in chunks of `chunk` values (an image row, say; the last may be
    /// shorter): `make(i, out)` writes chunk `i` whole. In a large batch the chunks go to
    /// memory with non-temporal stores (see [`fill_chunks`]).
    pub fn fill_chunks<T: bytemuck::Pod>(
        self,
        chunk: usize,
        make: impl FnMut(usize, &mut [T]),
    ) -> Result<Tensor> {
        let streaming = self.slot.streaming;
        self.fill(|out: &mut [T]| {
            fill_chunks(out, chunk, streaming, make);
            Ok(())
        })
    }

    fn into_tensor(self) -> Result<Tensor> {
        let s = self.slot;
        Tensor::view(s.dtype, s.shape.to_vec(), Arc::clone(&s.storage), s.offset)
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
