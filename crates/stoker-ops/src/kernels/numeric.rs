//! Reading and writing numeric tensors of any dtype through `f64`, with fast paths for the
//! common types.

use half::{bf16, f16};
use stoker_core::{DType, Error, Result, Tensor};

/// The values of a numeric tensor as f64.
pub fn to_f64(op: &str, t: &Tensor) -> Result<Vec<f64>> {
    macro_rules! conv {
        ($ty:ty, $f:expr) => {
            t.typed::<$ty>()
                .map(|v| v.iter().map($f).collect())
                .ok_or_else(|| Error::internal("dtype/size mismatch"))
        };
    }
    match t.dtype() {
        DType::Bool | DType::U8 => conv!(u8, |&x| f64::from(x)),
        DType::I8 => conv!(i8, |&x| f64::from(x)),
        DType::I16 => conv!(i16, |&x| f64::from(x)),
        DType::U16 => conv!(u16, |&x| f64::from(x)),
        DType::I32 => conv!(i32, |&x| f64::from(x)),
        DType::I64 => conv!(i64, |&x| x as f64),
        DType::F16 => conv!(f16, |&x| f64::from(x)),
        DType::BF16 => conv!(bf16, |&x| f64::from(x)),
        DType::F32 => conv!(f32, |&x| f64::from(x)),
        DType::F64 => conv!(f64, |&x| x),
        DType::Bytes => Err(Error::invalid(op, "expected a numeric tensor, got bytes")),
    }
}

/// A float as an integer of 32 bits, as TensorFlow's `Cast` converts it on x86: toward zero,
/// with NaN and the values out of range becoming `i32::MIN` (what the processor's conversion
/// gives); narrower integers are this saturated to their range (its vector kernels' packing).
pub fn float_to_i32(x: f64) -> i32 {
    if x.is_nan() || x >= 2_147_483_648.0 || x <= -2_147_483_649.0 {
        i32::MIN
    } else {
        x as i32
    }
}

/// A float as an int64, as TensorFlow's `Cast` converts it on x86 (see `float_to_i32`).
pub fn float_to_i64(x: f64) -> i64 {
    // (NaN is in no range)
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        i64::MIN
    } else {
        x as i64
    }
}

/// A float as a narrower integer `T`, as TensorFlow's `Cast` converts it (see `float_to_i32`).
pub fn float_to_narrow<T: TryFrom<i32> + Copy>(x: f64, lo: T, hi: T) -> T
where
    i32: From<T>,
{
    let v = float_to_i32(x).clamp(i32::from(lo), i32::from(hi));
    T::try_from(v).unwrap_or(lo)
}

/// A tensor of `dtype` from f64 values (float→int as TensorFlow's `Cast`, see
/// `float_to_i32`; bool is `x != 0`).
pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<Tensor> {
    macro_rules! mk {
        ($ty:ty, $f:expr) => {{
            let v: Vec<$ty> = values.iter().map($f).collect();
            Tensor::from_slice(dtype, shape, &v)
        }};
    }
    match dtype {
        DType::Bool => mk!(u8, |&x| u8::from(x != 0.0)),
        DType::U8 => mk!(u8, |&x| float_to_narrow(x, u8::MIN, u8::MAX)),
        DType::I8 => mk!(i8, |&x| float_to_narrow(x, i8::MIN, i8::MAX)),
        DType::I16 => mk!(i16, |&x| float_to_narrow(x, i16::MIN, i16::MAX)),
        DType::U16 => mk!(u16, |&x| float_to_narrow(x, u16::MIN, u16::MAX)),
        DType::I32 => mk!(i32, |&x| float_to_i32(x)),
        DType::I64 => mk!(i64, |&x| float_to_i64(x)),
        DType::F16 => mk!(f16, |&x| f16::from_f64(x)),
        DType::BF16 => mk!(bf16, |&x| bf16::from_f64(x)),
        DType::F32 => mk!(f32, |&x| x as f32),
        DType::F64 => mk!(f64, |&x| x),
        DType::Bytes => Err(Error::internal("cannot build bytes from numbers")),
    }
}

pub fn is_numeric(d: DType) -> bool {
    d != DType::Bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorFlow 2.21's `tf.cast` of these float32 values on x86 (its vector kernels: the
    /// first values of a tensor of 100), per target dtype.
    #[test]
    fn floats_cast_to_integers_as_tensorflow() {
        let x = [
            -1.0,
            256.0,
            300.7,
            f64::NAN,
            f64::INFINITY,
            1e10,
            -3e9,
            65537.0,
            -129.0,
            70000.5,
        ];
        let cast = |dtype| {
            let t = from_f64(dtype, vec![x.len()], &x).unwrap();
            to_f64("test", &t).unwrap()
        };
        assert_eq!(
            cast(DType::U8),
            [0., 255., 255., 0., 0., 0., 0., 255., 0., 255.]
        );
        assert_eq!(
            cast(DType::I8),
            [-1., 127., 127., -128., -128., -128., -128., 127., -128., 127.]
        );
        assert_eq!(
            cast(DType::U16),
            [0., 256., 300., 0., 0., 0., 0., 65535., 0., 65535.]
        );
        let min32 = f64::from(i32::MIN);
        assert_eq!(
            cast(DType::I32),
            [-1., 256., 300., min32, min32, min32, min32, 65537., -129., 70000.]
        );
        let min64 = i64::MIN as f64;
        assert_eq!(
            cast(DType::I64),
            [-1., 256., 300., min64, min64, 1e10, -3e9, 65537., -129., 70000.]
        );
        assert_eq!(float_to_i64(-f64::INFINITY), i64::MIN);
        assert_eq!(float_to_i32(-2_147_483_648.9), i32::MIN);
        assert_eq!(float_to_i32(2_147_483_647.9), i32::MAX);
    }
}
