//! One-hot rows (zeros and a one) written into a large float32 output, the inner loop of
//! `one_hot_colors`.
//!
//! The output (a 3x512x512x32 float32 batch is 100 MB) is far larger than the cache and is not
//! read again before the consumer takes it. On x86-64, where the rows are whole vectors, they
//! are written with non-temporal stores, which do not first read each cache line they
//! overwrite, and with AVX2's 32-byte vectors where the CPU has them: the stores are the whole
//! cost. Measured on W2's label maps (3x512x512 pixels, 32 classes, one core, median of 15
//! alternating runs, a standalone loop): 16-byte stores 1.5–1.7 ms per label map, 32-byte
//! 0.9–1.05, plain stores 2.7. (AVX-512's 64-byte stores gave 0.8–0.9, but its intrinsics
//! need Rust 1.89, above the workspace's MSRV.)

/// How the rows get written: the widest non-temporal stores that the CPU, the row length and
/// the buffer's alignment allow, else plain stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stores {
    Plain,
    /// SSE2 (x86-64's baseline), 4 floats: rows of a multiple of 4, 16-byte aligned.
    Stream4,
    /// AVX2, 8 floats: rows of a multiple of 8, 32-byte aligned.
    Stream8,
}

impl Stores {
    fn lanes(self) -> usize {
        match self {
            Stores::Plain => 1,
            Stores::Stream4 => 4,
            Stores::Stream8 => 8,
        }
    }

    fn cpu_has(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return match self {
            Stores::Plain | Stores::Stream4 => true,
            Stores::Stream8 => std::arch::is_x86_feature_detected!("avx2"),
        };
        #[cfg(not(target_arch = "x86_64"))]
        return self == Stores::Plain;
    }

    /// Whether rows of `k` floats from `out` can be written with these stores.
    fn fit(self, out: &[f32], k: usize) -> bool {
        let bytes = self.lanes() * 4;
        self == Stores::Plain
            || (self.cpu_has() && k % self.lanes() == 0 && (out.as_ptr() as usize) % bytes == 0)
    }
}

/// Writes the one-hot rows of an output buffer.
pub(crate) struct OneHotRows<'a> {
    out: &'a mut [f32],
    k: usize,
    stores: Stores,
}

impl<'a> OneHotRows<'a> {
    /// Rows of `k` floats over `out`.
    pub(crate) fn new(out: &'a mut [f32], k: usize) -> Self {
        let stores = [Stores::Stream8, Stores::Stream4]
            .into_iter()
            .find(|s| s.fit(out, k))
            .unwrap_or(Stores::Plain);
        OneHotRows { out, k, stores }
    }

    /// Rows `first..first + classes.len()` become zeros and a one at their class (all zeros
    /// where the class is `k` or more).
    pub(crate) fn write(&mut self, first: usize, classes: &[u32]) {
        let k = self.k;
        let rows = &mut self.out[first * k..(first + classes.len()) * k];
        // The row vectors compare lane indices with the class, as i32.
        let classes_fit_i32 = i32::try_from(k).is_ok();
        match self.stores {
            // SAFETY: `new` chose these stores only where the CPU has AVX2, the rows are whole
            // 8-float vectors and the buffer is 32-byte aligned, as the function needs.
            #[cfg(target_arch = "x86_64")]
            Stores::Stream8 if classes_fit_i32 => unsafe { stream8(rows, k, classes) },
            // SAFETY: as above, with SSE2 (always there), 4-float vectors and 16-byte alignment.
            #[cfg(target_arch = "x86_64")]
            Stores::Stream4 if classes_fit_i32 => unsafe { stream4(rows, k, classes) },
            _ => plain(rows, k, classes),
        }
    }

    /// Orders the non-temporal stores before the buffer is handed on to another thread.
    pub(crate) fn finish(self) {
        #[cfg(target_arch = "x86_64")]
        if self.stores != Stores::Plain {
            // SAFETY: `sfence` only orders stores; SSE is part of x86-64's baseline.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

/// Plain stores, for rows that are not whole vectors or CPUs without them. Each float is a
/// compare, not `fill(0.0)` then a store: that is a `memset` call per pixel, which costs more
/// than the stores themselves.
fn plain(rows: &mut [f32], k: usize, classes: &[u32]) {
    for (row, &class) in rows.chunks_exact_mut(k).zip(classes) {
        for (j, v) in row.iter_mut().enumerate() {
            *v = if j as u64 == u64::from(class) {
                1.0
            } else {
                0.0
            };
        }
    }
}

// Each vector of a row is 1.0 in the lane equal to the class minus the vector's first index,
// zeros elsewhere: a lane compare, no branch. A class of `k` or more matches no lane.

/// # Safety
/// `rows` must be 16-byte aligned, `k` a multiple of 4 that fits in an i32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
unsafe fn stream4(rows: &mut [f32], k: usize, classes: &[u32]) {
    use std::arch::x86_64::*;
    let lanes = _mm_setr_epi32(0, 1, 2, 3);
    let one = _mm_set1_ps(1.0);
    for (row, &class) in rows.chunks_exact_mut(k).zip(classes) {
        let class = i32::try_from(class).unwrap_or(i32::MAX);
        for (first, v) in (0..).step_by(4).zip(row.chunks_exact_mut(4)) {
            let hit = _mm_castsi128_ps(_mm_cmpeq_epi32(lanes, _mm_set1_epi32(class - first)));
            // SAFETY: `v` is 4 floats, 16-byte aligned: the rows are (the caller's contract)
            // and so is each 4-float step within them.
            unsafe { _mm_stream_ps(v.as_mut_ptr(), _mm_and_ps(hit, one)) };
        }
    }
}

/// # Safety
/// The CPU must have AVX2; `rows` must be 32-byte aligned, `k` a multiple of 8 that fits in an
/// i32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stream8(rows: &mut [f32], k: usize, classes: &[u32]) {
    use std::arch::x86_64::*;
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let one = _mm256_set1_ps(1.0);
    for (row, &class) in rows.chunks_exact_mut(k).zip(classes) {
        let class = i32::try_from(class).unwrap_or(i32::MAX);
        for (first, v) in (0..).step_by(8).zip(row.chunks_exact_mut(8)) {
            let hit =
                _mm256_castsi256_ps(_mm256_cmpeq_epi32(lanes, _mm256_set1_epi32(class - first)));
            // SAFETY: `v` is 8 floats, 32-byte aligned (as above).
            unsafe { _mm256_stream_ps(v.as_mut_ptr(), _mm256_and_ps(hit, one)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::storage::Storage;

    /// Every kind of stores this CPU has gives exactly one 1.0 at the class (none for a class
    /// of `k` or more), over rows that held other data before, written in two calls.
    #[test]
    fn rows_hold_a_single_one_at_the_class() {
        let all = [Stores::Plain, Stores::Stream4, Stores::Stream8];
        let mut tried = vec![];
        for k in [1usize, 3, 4, 5, 8, 12, 16, 32, 33, 48] {
            let pixels = 2 * k + 3;
            let mut storage = Storage::zeroed(pixels * k * 4);
            let out = bytemuck::cast_slice_mut::<u8, f32>(storage.as_bytes_mut());
            let classes: Vec<u32> = (0..pixels as u32).map(|p| p % (k as u32 + 1)).collect();
            let fitting: Vec<Stores> = all.into_iter().filter(|s| s.fit(out, k)).collect();
            for stores in fitting {
                out.fill(7.0);
                let mut rows = OneHotRows::new(out, k);
                rows.stores = stores;
                let split = pixels / 2;
                rows.write(0, &classes[..split]);
                rows.write(split, &classes[split..]);
                rows.finish();
                for (p, row) in out.chunks_exact(k).enumerate() {
                    let want: Vec<f32> = (0..k)
                        .map(|c| if c as u32 == classes[p] { 1.0 } else { 0.0 })
                        .collect();
                    assert_eq!(row, &want[..], "{stores:?} k={k} pixel {p}");
                }
                tried.push((stores, k));
            }
        }
        assert!(tried.contains(&(Stores::Plain, 33)));
        if cfg!(target_arch = "x86_64") {
            assert!(tried.contains(&(Stores::Stream4, 12)));
        }
        // The widest stores the CPU has are the ones chosen.
        let mut storage = Storage::zeroed(256);
        let out = bytemuck::cast_slice_mut::<u8, f32>(storage.as_bytes_mut());
        let best = OneHotRows::new(out, 32).stores;
        assert!(best.cpu_has() && (best == Stores::Stream8 || !Stores::Stream8.cpu_has()));
        eprintln!("one-hot stores on this CPU: {best:?}");
    }
}
