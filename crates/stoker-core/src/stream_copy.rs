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
    #[cfg(target_arch = "x86_64")]
    if (dst as usize) % 16 == 0 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
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
        // SAFETY: the tail's bytes follow the chunks in `dst` (the caller's contract), and
        // `sfence` orders the non-temporal stores before anything this thread does next.
        unsafe {
            std::ptr::copy_nonoverlapping(tail.as_ptr(), out.cast::<u8>(), tail.len());
            _mm_sfence();
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

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
