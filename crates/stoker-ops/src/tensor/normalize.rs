//! `normalize(field, mean, std)`: `(x - mean[c]) / std[c]` per channel (last axis), float32 —
//! torchvision's `Normalize` on HWC images.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::channels;
use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::numeric::{is_numeric, to_f64};
use crate::kernels::spec_json::spec_json;

const OP: &str = "normalize";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Normalize {
    pub field: String,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl Normalize {
    pub(crate) fn check(&self, channels: Option<usize>) -> Result<()> {
        if self.mean.len() != self.std.len() || self.mean.is_empty() {
            return Err(Error::schema(
                OP,
                format!("{} means for {} stds", self.mean.len(), self.std.len()),
            ));
        }
        if self.std.contains(&0.0) {
            return Err(Error::schema(OP, "a std is 0"));
        }
        if let Some(c) = channels {
            if c != self.mean.len() {
                return Err(Error::schema(
                    OP,
                    format!("{} channels but {} means", c, self.mean.len()),
                ));
            }
        }
        Ok(())
    }
}

impl Op for Normalize {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric image")? else {
            self.check(None)?;
            return Ok(input.clone());
        };
        self.check(f.shape.last().copied().flatten())?;
        Ok(with_field(
            input,
            FieldSpec::new(
                out_name(&self.field, &self.output),
                DType::F32,
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
        self.check(t.shape().last().copied())?;
        let c = self.mean.len();
        let out = match t.typed::<f32>().filter(|_| t.dtype() == DType::F32) {
            Some(src) => build::<f32>(DType::F32, t.shape().to_vec(), |out| {
                channels::map2(src, out, &self.mean, &self.std, |x, m, s| (x - m) / s);
                Ok(())
            })?,
            None => {
                let src = to_f64(OP, t)?;
                build::<f32>(DType::F32, t.shape().to_vec(), |out| {
                    for (d, s) in out.chunks_exact_mut(c).zip(src.chunks_exact(c)) {
                        for k in 0..c {
                            d[k] = (s[k] as f32 - self.mean[k]) / self.std[k];
                        }
                    }
                    Ok(())
                })?
            }
        };
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
