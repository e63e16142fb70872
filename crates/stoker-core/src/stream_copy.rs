//! Copies into large output buffers with non-temporal stores.
//!
//! A batch of 256 224x224x3 float32 images is 154 MB: far larger than the cache, and not read
//! again before the consumer takes it. Plain stores first read every cache line they overwrite;
//! non-temporal ones do not, which saves a third of the memory traffic of the copy. For small
//! buffers, which the consumer may still find in the cache, plain copies are better.

/// Buffers at least this large are written with non-temporal stores.
pub const STREAM_MIN_BYTES: usize = 16 << 20;

/// Copies `src` to `dst` (`src.len()` bytes), with non-temporal stores where `dst` is 16-byte
/// aligned on x86-64, and makes them visible before returning.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes that nothing else accesses during the
/// call, and must not overlap `src`.
pub unsafe fn copy_streaming(src: &[u8], dst: *mut u8) {
    // SAFETY: the caller's contract.
    unsafe { copy_streaming_unfenced(src, dst) };
    store_fence();
}

/// [`copy_streaming`] without its closing fence, for a buffer written in many pieces: call
/// [`store_fence`] once after the last, before the buffer is handed to another thread.
///
/// # Safety
/// As [`copy_streaming`].
pub unsafe fn copy_streaming_unfenced(src: &[u8], dst: *mut u8) {
    // (Miri models no non-temporal stores or fences: under it the plain copy below runs, which
    // leaves the same bytes.)
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if (dst as usize) % 16 == 0 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let chunks = src.chunks_exact(16);
        let tail = chunks.remainder();
        let mut out = dst.cast::<__m128i>();
        for chunk in chunks {
            // SAFETY: `chunk` is 16 readable bytes; `out` is 16-byte aligned (`dst` is, and it
            // moves by 16) and within the `src.len()` writable bytes at `dst` (the caller's
            // contract), as the chunks are.
            unsafe {
                _mm_stream_si128(out, _mm_loadu_si128(chunk.as_ptr().cast()));
                out = out.add(1);
            }
        }
        // SAFETY: the tail's bytes follow the chunks in `dst` (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(tail.as_ptr(), out.cast::<u8>(), tail.len()) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

/// Writes `out` in chunks of `chunk` values (the last may be shorter): `make(i, part)` writes
/// chunk `i` whole. With `streaming`, each chunk is made in a small scratch buffer, which stays
/// in the L1 cache, and stored from there with non-temporal stores, so that the output goes to
/// memory without first being read into the cache, as plain stores would.
pub fn fill_chunks<T: bytemuck::Pod>(
    out: &mut [T],
    chunk: usize,
    streaming: bool,
    mut make: impl FnMut(usize, &mut [T]),
) {
    let chunks = out.len().div_ceil(chunk.max(1));
    let mut writer = ChunkWriter::new(out, chunk, streaming);
    for i in 0..chunks {
        writer.write(i, |part| make(i, part));
    }
}

/// Writes an output buffer a chunk at a time, in any order, as [`fill_chunks`] does: for
/// producers that push their chunks (a decoder handing over rows, say). Dropping it orders
/// its non-temporal stores.
pub struct ChunkWriter<'a, T> {
    out: &'a mut [T],
    chunk: usize,
    /// Where chunks are made before they are streamed out; `None`: made in place.
    scratch: Option<Vec<T>>,
}

impl<'a, T: bytemuck::Pod> ChunkWriter<'a, T> {
    /// Chunks of `chunk` values of `out`, streamed out where `streaming`.
    pub fn new(out: &'a mut [T], chunk: usize, streaming: bool) -> Self {
        let chunk = chunk.max(1);
        let scratch = streaming.then(|| vec![T::zeroed(); chunk.min(out.len())]);
        ChunkWriter {
            out,
            chunk,
            scratch,
        }
    }

    /// `make(part)` writes chunk `i` whole. A chunk past the end is not written.
    pub fn write(&mut self, i: usize, make: impl FnOnce(&mut [T])) {
        let start = i.saturating_mul(self.chunk).min(self.out.len());
        let end = start.saturating_add(self.chunk).min(self.out.len());
        let dst = &mut self.out[start..end];
        let Some(scratch) = &mut self.scratch else {
            make(dst);
            return;
        };
        let part = &mut scratch[..dst.len()];
        make(part);
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        // SAFETY: `dst` is an exclusive borrow of exactly the part's bytes, apart from
        // `scratch`.
        unsafe { copy_streaming_unfenced(bytemuck::cast_slice(part), dst.as_mut_ptr()) };
    }
}

impl<T> Drop for ChunkWriter<'_, T> {
    fn drop(&mut self) {
        if self.scratch.is_some() {
            store_fence();
        }
    }
}

/// Orders this thread's non-temporal stores before anything it does next (handing the
/// buffer on, say).
pub fn store_fence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` only orders stores; SSE is part of x86-64's baseline.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks pushed in any order, streamed or not, land where they belong, the last one
    /// short; one past the end writes nothing.
    #[test]
    fn chunk_writer_puts_each_chunk_in_its_place() {
        for streaming in [false, true] {
            let mut out = vec![0u32; 10];
            {
                let mut w = ChunkWriter::new(&mut out, 4, streaming);
                for i in [2, 0, 1, 3] {
                    w.write(i, |part| {
                        for (j, v) in part.iter_mut().enumerate() {
                            *v = (10 * i + j) as u32;
                        }
                    });
                }
            }
            assert_eq!(
                out,
                [0, 1, 2, 3, 10, 11, 12, 13, 20, 21],
                "streaming {streaming}"
            );
        }
    }

    #[test]
    fn copies_every_byte_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u128; 70];
        let base = bytemuck::cast_slice_mut::<u128, u8>(&mut dst);
        for offset in [0, 1, 16] {
            for len in [0, 5, 16, 17, 100, 1000 - 16] {
                base.fill(0xAA);
                // SAFETY: offset + len <= 1000 < 1120 bytes of `base`, a different buffer.
                unsafe { copy_streaming(&src[..len], base.as_mut_ptr().add(offset)) };
                assert_eq!(
                    &base[offset..offset + len],
                    &src[..len],
                    "offset {offset} len {len}"
                );
                assert!(base[..offset].iter().all(|&b| b == 0xAA));
                assert!(base[offset + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }
}
