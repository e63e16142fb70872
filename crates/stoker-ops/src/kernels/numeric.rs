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

/// A tensor of `dtype` from f64 values (float→int truncates toward zero and saturates, as
/// Rust's `as`; bool is `x != 0`).
pub fn from_f64(dtype: DType, shape: Vec<usize>, values: &[f64]) -> Result<Tensor> {
    macro_rules! mk {
        ($ty:ty, $f:expr) => {{
            let v: Vec<$ty> = values.iter().map($f).collect();
            Tensor::from_slice(dtype, shape, &v)
        }};
    }
    match dtype {
        DType::Bool => mk!(u8, |&x| u8::from(x != 0.0)),
        DType::U8 => mk!(u8, |&x| x as u8),
        DType::I8 => mk!(i8, |&x| x as i8),
        DType::I16 => mk!(i16, |&x| x as i16),
        DType::U16 => mk!(u16, |&x| x as u16),
        DType::I32 => mk!(i32, |&x| x as i32),
        DType::I64 => mk!(i64, |&x| x as i64),
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
