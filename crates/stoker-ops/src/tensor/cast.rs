//! `cast(field, dtype)`: converts a numeric tensor to another numeric dtype as `tf.cast` does:
//! an integer to a narrower integer keeps its low bits, an integer to a float rounds once to
//! nearest, float → int as TensorFlow on x86 (see `numeric::float_to_i32`); bool is `x != 0`.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::numeric::{from_f64, is_numeric, to_f64};
use crate::kernels::spec_json::spec_json;

const OP: &str = "cast";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cast {
    pub field: String,
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl Op for Cast {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !is_numeric(self.dtype) {
            return Err(Error::schema(OP, "cast to a numeric dtype"));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric type")? else {
            return Ok(input.clone());
        };
        Ok(with_field(
            input,
            FieldSpec::new(
                out_name(&self.field, &self.output),
                self.dtype,
                f.shape.clone(),
            ),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let out: Tensor = if t.dtype() == self.dtype {
            t.clone()
        } else if let (DType::U8 | DType::Bool, DType::F32) = (t.dtype(), self.dtype) {
            let src = t.typed::<u8>().ok_or_else(|| Error::internal("u8 view"))?;
            build::<f32>(DType::F32, t.shape().to_vec(), |out| {
                for (d, &s) in out.iter_mut().zip(src) {
                    *d = f32::from(s);
                }
                Ok(())
            })?
        } else if let Some(ints) = to_i64(t) {
            from_i64(self.dtype, t.shape().to_vec(), &ints)?
        } else {
            from_f64(self.dtype, t.shape().to_vec(), &to_f64(OP, t)?)?
        };
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// The values of an integer tensor, exactly; `None` for a float or bool one.
fn to_i64(t: &Tensor) -> Option<Vec<i64>> {
    macro_rules! conv {
        ($ty:ty) => {
            t.typed::<$ty>()
                .map(|v| v.iter().map(|&x| i64::from(x)).collect())
        };
    }
    match t.dtype() {
        DType::U8 => conv!(u8),
        DType::I8 => conv!(i8),
        DType::I16 => conv!(i16),
        DType::U16 => conv!(u16),
        DType::I32 => conv!(i32),
        DType::I64 => t.typed::<i64>().map(<[i64]>::to_vec),
        _ => None,
    }
}

/// A tensor of `dtype` from integers as C++'s `static_cast` (which TensorFlow's `Cast` runs)
/// converts them: to an integer type the low bits, to a float the nearest value.
fn from_i64(dtype: DType, shape: Vec<usize>, values: &[i64]) -> Result<Tensor> {
    macro_rules! mk {
        ($ty:ty, $f:expr) => {{
            let v: Vec<$ty> = values.iter().map($f).collect();
            Tensor::from_slice(dtype, shape, &v)
        }};
    }
    match dtype {
        DType::Bool => mk!(u8, |&x| u8::from(x != 0)),
        DType::U8 => mk!(u8, |&x| x as u8),
        DType::I8 => mk!(i8, |&x| x as i8),
        DType::I16 => mk!(i16, |&x| x as i16),
        DType::U16 => mk!(u16, |&x| x as u16),
        DType::I32 => mk!(i32, |&x| x as i32),
        DType::I64 => mk!(i64, |&x| x),
        DType::F32 => mk!(f32, |&x| x as f32),
        _ => from_f64(
            dtype,
            shape,
            &values.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        ),
    }
}
