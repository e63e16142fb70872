//! `x / d` in float32 for every byte `x` of an image, bit for bit the true division (as
//! TensorFlow's `tf.cast(x, tf.float32) / d`), without a division per value.
//!
//! A float32 division is the slowest arithmetic there is (W2's `/ 255` on a 512x512x3 crop
//! took 0.3 ms of 2 cores' ~8 ms per pair). Multiplying by `r = 1/d` instead is cheap but not
//! exact (for d = 255, 126 of the 256 bytes come out one ulp off). One fused multiply-add
//! step corrects that: with `q = x * r`, the residual `e = x - q * d` is exact in an FMA, and
//! `q + e * r` is the correctly rounded quotient for the divisors that matter. Since a byte
//! has only 256 values, each divisor is checked on all of them before the fast form is used:
//! the result is exact by construction, and falls back to the division where the check fails
//! or the CPU has no FMA.

/// Writes `x / divisor` for each byte of a source into float32 values.
pub(crate) struct U8Quotients {
    divisor: f32,
    /// The reciprocal, where the multiply-add form was checked exact on this CPU.
    fast: Option<f32>,
}

impl U8Quotients {
    pub(crate) fn new(divisor: f32) -> Self {
        let reciprocal = 1.0 / divisor;
        let bytes: [u8; 256] = std::array::from_fn(|i| i as u8);
        let mut fast = [0f32; 256];
        let exact = write_fast(&bytes, &mut fast, divisor, reciprocal)
            && bytes
                .iter()
                .zip(&fast)
                .all(|(&x, q)| (f32::from(x) / divisor).to_bits() == q.to_bits());
        U8Quotients {
            divisor,
            fast: exact.then_some(reciprocal),
        }
    }

    /// `out[i] = src[i] / divisor`, for as many values as `out` holds.
    pub(crate) fn write(&self, src: &[u8], out: &mut [f32]) {
        let n = out.len().min(src.len());
        if let Some(r) = self.fast {
            if write_fast(&src[..n], &mut out[..n], self.divisor, r) {
                return;
            }
        }
        for (d, &s) in out.iter_mut().zip(src) {
            *d = f32::from(s) / self.divisor;
        }
    }
}

/// The multiply-add form into `out` (as long as `src`); false where the CPU lacks FMA.
fn write_fast(src: &[u8], out: &mut [f32], d: f32, r: f32) -> bool {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA, all the function needs.
        unsafe { write_fma(src, out, d, r) };
        return true;
    }
    let _ = (src, out, d, r);
    false
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn write_fma(src: &[u8], out: &mut [f32], d: f32, r: f32) {
    for (o, &s) in out.iter_mut().zip(src) {
        let x = f32::from(s);
        let q = x * r;
        let e = (-q).mul_add(d, x);
        *o = e.mul_add(r, q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte, at every position in a vector, equals the true division, for the divisors
    /// in use (255: `convert_image_dtype`) and awkward ones; and W2's 255 takes the fast form
    /// where the CPU has FMA.
    #[test]
    fn quotients_equal_the_division_bit_for_bit() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 37 + i / 7) as u8).collect();
        for divisor in [
            255.0f32, 127.5, 1.0, 3.0, 7.0, 100.0, 0.1, 1e-30, 1e30, -2.5,
        ] {
            let q = U8Quotients::new(divisor);
            for start in 0..9 {
                let mut out = vec![f32::NAN; src.len() - start];
                q.write(&src[start..], &mut out);
                for (&x, y) in src[start..].iter().zip(&out) {
                    let want = f32::from(x) / divisor;
                    assert_eq!(y.to_bits(), want.to_bits(), "{x} / {divisor}");
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            assert!(U8Quotients::new(255.0).fast.is_some());
        }
    }
}
