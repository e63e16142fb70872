//! `rescale(field, divisor, scale, offset)`: `y = (x / divisor) * scale + offset` in float32
//! (or float64). The division is a true division, so `rescale(x, divisor=255)` equals
//! TensorFlow's `tf.cast(x, tf.float32) / 255.0` bit for bit.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::fields::{build_chunks_into, input_spec, out_name, put, with_field};
use crate::kernels::numeric::{is_numeric, to_f64};
use crate::kernels::spec_json::spec_json;
use crate::kernels::u8_quotients::U8Quotients;

const OP: &str = "rescale";
/// Values written per chunk (see `build_chunks_into`): 16 KiB of float32, well inside L1.
const CHUNK: usize = 4096;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rescale {
    pub field: String,
    #[serde(default = "one")]
    pub divisor: f64,
    #[serde(default = "one")]
    pub scale: f64,
    #[serde(default)]
    pub offset: f64,
    #[serde(default = "f32_dtype")]
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn one() -> f64 {
    1.0
}
fn f32_dtype() -> DType {
    DType::F32
}

impl Rescale {
    /// This rescale of uint8 values to float32.
    pub(crate) fn of_u8(&self) -> RescaleU8 {
        RescaleU8 {
            quotients: U8Quotients::new(self.divisor as f32),
            scale: self.scale as f32,
            offset: self.offset as f32,
        }
    }
}

/// [`Rescale`] of uint8 values to float32 (the division exact, without dividing).
pub(crate) struct RescaleU8 {
    quotients: U8Quotients,
    scale: f32,
    offset: f32,
}

impl RescaleU8 {
    /// `out[i]` = `src[i]` rescaled (as many values as `out` has).
    pub(crate) fn write(&self, src: &[u8], out: &mut [f32]) {
        self.quotients.write(src, out);
        if self.scale != 1.0 || self.offset != 0.0 {
            for d in out.iter_mut() {
                *d = *d * self.scale + self.offset;
            }
        }
    }
}

impl Op for Rescale {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !matches!(self.dtype, DType::F32 | DType::F64) {
            return Err(Error::schema(
                OP,
                "the output dtype must be float32 or float64",
            ));
        }
        if self.divisor == 0.0 {
            return Err(Error::schema(OP, "divisor is 0"));
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

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let shape = t.shape().to_vec();
        let output = out_name(&self.field, &self.output);
        let out = match (t.dtype(), self.dtype) {
            (DType::U8, DType::F32) => {
                let src = t.typed::<u8>().ok_or_else(|| Error::internal("u8 view"))?;
                let rescale = self.of_u8();
                build_chunks_into(ctx, output, DType::F32, shape, CHUNK, |c, out| {
                    rescale.write(&src[c * CHUNK..], out);
                })?
            }
            (_, DType::F32) => {
                let src = to_f64(OP, t)?;
                let (div, scale, offset) =
                    (self.divisor as f32, self.scale as f32, self.offset as f32);
                build_chunks_into(ctx, output, DType::F32, shape, CHUNK, |c, out| {
                    for (d, &s) in out.iter_mut().zip(&src[c * CHUNK..]) {
                        *d = (s as f32 / div) * scale + offset;
                    }
                })?
            }
            _ => {
                let src = to_f64(OP, t)?;
                build_chunks_into(ctx, output, DType::F64, shape, CHUNK, |c, out| {
                    for (d, &s) in out.iter_mut().zip(&src[c * CHUNK..]) {
                        *d = (s / self.divisor) * self.scale + self.offset;
                    }
                })?
            }
        };
        Ok(Some(put(input, output, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(out_name(&self.field, &self.output))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
