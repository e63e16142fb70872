//! Per-channel kernels over interleaved (HWC) float32 pixels, written so the compiler
//! vectorises them: a channel's parameters are repeated into a pattern a multiple of the
//! channel count long, and the pixels are walked in chunks of that pattern, so every
//! iteration is a straight, equal-length loop over three slices (no `% c`, no stride).

/// Pixels per pattern chunk: 16 pixels of 3 channels is 48 lanes (six AVX2 registers).
const PIXELS_PER_CHUNK: usize = 16;

fn pattern(values: &[f32]) -> Vec<f32> {
    values
        .iter()
        .copied()
        .cycle()
        .take(values.len() * PIXELS_PER_CHUNK)
        .collect()
}

/// Two per-channel parameters repeated into chunk patterns, built once and used for many
/// rows (see [`PerChannel::map`]).
pub struct PerChannel {
    a: Vec<f32>,
    b: Vec<f32>,
}

impl PerChannel {
    /// `a` and `b` hold one value per channel.
    pub fn new(a: &[f32], b: &[f32]) -> PerChannel {
        debug_assert_eq!(a.len(), b.len());
        PerChannel {
            a: pattern(a),
            b: pattern(b),
        }
    }

    /// `dst[i] = f(src[i], a[c], b[c])` with `c` the channel of lane `i`; `src.len()` is a
    /// multiple of the channel count.
    #[inline]
    pub fn map<S: Copy>(&self, src: &[S], dst: &mut [f32], f: impl Fn(S, f32, f32) -> f32) {
        let (pa, pb) = (&self.a, &self.b);
        let n = pa.len().max(1);
        let mut d_chunks = dst.chunks_exact_mut(n);
        let mut s_chunks = src.chunks_exact(n);
        for (d, s) in (&mut d_chunks).zip(&mut s_chunks) {
            let (d, s, pa, pb) = (&mut d[..n], &s[..n], &pa[..n], &pb[..n]);
            for i in 0..n {
                d[i] = f(s[i], pa[i], pb[i]);
            }
        }
        // The tail holds whole pixels, so it starts at channel 0 of the pattern.
        for (i, (d, s)) in d_chunks
            .into_remainder()
            .iter_mut()
            .zip(s_chunks.remainder())
            .enumerate()
        {
            *d = f(*s, pa[i], pb[i]);
        }
    }
}

/// `dst[i] = f(src[i], a[c], b[c])` with `c` the channel of lane `i`; `a` and `b` have one
/// value per channel and `src.len()` is a multiple of the channel count.
#[inline]
pub fn map2(src: &[f32], dst: &mut [f32], a: &[f32], b: &[f32], f: impl Fn(f32, f32, f32) -> f32) {
    PerChannel::new(a, b).map(src, dst, f);
}

/// Per-channel means of interleaved uint8 pixels with `channels` channels (exact sums).
pub fn means_u8(src: &[u8], channels: usize) -> Vec<f32> {
    let c = channels.max(1);
    let n = c * PIXELS_PER_CHUNK;
    // u32 lanes overflow only past 2^32 / 255 values per lane: flush to u64 well before.
    let mut totals = vec![0u64; n];
    for block in src.chunks(n * 65_536) {
        let mut lanes = vec![0u32; n];
        let mut chunks = block.chunks_exact(n);
        for s in &mut chunks {
            for (acc, v) in lanes.iter_mut().zip(s) {
                *acc += u32::from(*v);
            }
        }
        for (acc, v) in lanes.iter_mut().zip(chunks.remainder()) {
            *acc += u32::from(*v);
        }
        for (t, l) in totals.iter_mut().zip(lanes) {
            *t += u64::from(l);
        }
    }
    let pixels = (src.len() / c).max(1) as f64;
    (0..c)
        .map(|k| (totals.iter().skip(k).step_by(c).sum::<u64>() as f64 / pixels) as f32)
        .collect()
}

/// Per-channel means (accumulated in f64) of interleaved pixels with `channels` channels.
pub fn means(src: &[f32], channels: usize) -> Vec<f32> {
    let c = channels.max(1);
    let n = c * PIXELS_PER_CHUNK;
    let mut lanes = vec![0f64; n];
    let mut chunks = src.chunks_exact(n);
    for s in &mut chunks {
        for (acc, v) in lanes.iter_mut().zip(s) {
            *acc += f64::from(*v);
        }
    }
    for (acc, v) in lanes.iter_mut().zip(chunks.remainder()) {
        *acc += f64::from(*v);
    }
    let pixels = (src.len() / c).max(1) as f64;
    (0..c)
        .map(|k| (lanes.iter().skip(k).step_by(c).sum::<f64>() / pixels) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map2_matches_the_plain_loop_including_the_tail() {
        let c = 3;
        let src: Vec<f32> = (0..(c * 37)).map(|i| i as f32 * 0.5).collect();
        let (a, b) = ([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]);
        let mut dst = vec![0.0; src.len()];
        map2(&src, &mut dst, &a, &b, |x, a, b| x * a + b);
        for (i, (d, s)) in dst.iter().zip(&src).enumerate() {
            assert_eq!(*d, s * a[i % c] + b[i % c]);
        }
    }

    #[test]
    fn means_u8_are_exact() {
        let src: Vec<u8> = (0..(3 * 1001)).map(|i| (i * 7 % 256) as u8).collect();
        let m = means_u8(&src, 3);
        for (k, got) in m.iter().enumerate() {
            let sum: f64 = src.iter().skip(k).step_by(3).map(|&v| f64::from(v)).sum();
            assert_eq!(*got, (sum / 1001.0) as f32);
        }
    }

    #[test]
    fn means_per_channel() {
        let src: Vec<f32> = (0..(3 * 50))
            .map(|i| (i % 3) as f32 + (i / 3) as f32)
            .collect();
        let m = means(&src, 3);
        assert_eq!(m, vec![24.5, 25.5, 26.5]);
    }
}
