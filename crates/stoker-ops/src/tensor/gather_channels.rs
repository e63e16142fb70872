//! `gather_channels(field, indices, signs)`: `out[..., j] = signs[j] * in[..., indices[j]]`
//! on the last axis, cast to `dtype` (float32 by default) — e.g. reordering board planes and
//! negating the opponent's.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::numeric::{from_f64, is_numeric, to_f64};
use crate::kernels::spec_json::spec_json;

const OP: &str = "gather_channels";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatherChannels {
    pub field: String,
    pub indices: Vec<usize>,
    /// +1 / -1 per output channel; all +1 when empty.
    #[serde(default)]
    pub signs: Vec<i8>,
    #[serde(default = "f32_dtype")]
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn f32_dtype() -> DType {
    DType::F32
}

/// `signs` checked for an op gathering `indices` channels: none (all +1), or +1 / -1 for each.
pub(crate) fn check_signs(op: &str, signs: &[i8], indices: usize) -> Result<()> {
    if !signs.is_empty() && signs.len() != indices {
        return Err(Error::schema(
            op,
            format!("{} signs for {indices} indices", signs.len()),
        ));
    }
    if signs.iter().any(|&s| s != 1 && s != -1) {
        return Err(Error::schema(op, "signs must be +1 or -1"));
    }
    Ok(())
}

impl GatherChannels {
    fn check(&self) -> Result<()> {
        check_signs(OP, &self.signs, self.indices.len())?;
        if !is_numeric(self.dtype) {
            return Err(Error::schema(OP, "the output dtype must be numeric"));
        }
        Ok(())
    }

    fn sign(&self, j: usize) -> i8 {
        self.signs.get(j).copied().unwrap_or(1)
    }
}

impl Op for GatherChannels {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric type")? else {
            return Ok(input.clone());
        };
        let mut shape = f.shape.clone();
        match shape.last_mut() {
            Some(last) => {
                if let (Some(c), Some(&max)) = (*last, self.indices.iter().max()) {
                    if max >= c {
                        return Err(Error::schema(
                            OP,
                            format!("index {max} is out of range for {c} channels"),
                        ));
                    }
                }
                *last = Some(self.indices.len());
            }
            None => {
                return Err(Error::schema(
                    OP,
                    format!("field '{}' is a scalar", self.field),
                ))
            }
        }
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), self.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let channels = *t
            .shape()
            .last()
            .ok_or_else(|| Error::invalid(OP, "input is a scalar"))?;
        if let Some(&max) = self.indices.iter().max() {
            if max >= channels {
                return Err(Error::invalid(
                    OP,
                    format!("index {max} is out of range for {channels} channels"),
                ));
            }
        }
        let m = self.indices.len();
        let mut shape = t.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = m;
        }
        let out = match (t.dtype(), self.dtype) {
            // The common case (bit planes to float) without going through f64: one table
            // load per value. The tables hold +0.0 for 0, as TensorFlow's integer negation
            // gives, not -0.0.
            (DType::U8, DType::F32) => {
                let src = t.typed::<u8>().ok_or_else(|| Error::internal("u8 view"))?;
                let pos: [f32; 256] = std::array::from_fn(|v| v as f32);
                let neg: [f32; 256] =
                    std::array::from_fn(|v| if v == 0 { 0.0 } else { -(v as f32) });
                let plan: Vec<(usize, &[f32; 256])> = (0..m)
                    .map(|j| (self.indices[j], if self.sign(j) < 0 { &neg } else { &pos }))
                    .collect();
                build::<f32>(DType::F32, shape, |out| {
                    for (dst, row) in out
                        .chunks_exact_mut(m.max(1))
                        .zip(src.chunks_exact(channels.max(1)))
                    {
                        for (d, &(c, table)) in dst.iter_mut().zip(&plan) {
                            *d = table[usize::from(row[c])];
                        }
                    }
                    Ok(())
                })?
            }
            _ => {
                let src = to_f64(OP, t)?;
                let integer_input = !t.dtype().is_float();
                let mut v = Vec::with_capacity(src.len() / channels.max(1) * m);
                for row in src.chunks_exact(channels.max(1)) {
                    for (j, &c) in self.indices.iter().enumerate() {
                        let x = f64::from(self.sign(j)) * row[c];
                        // Integers have no -0: keep TensorFlow's +0.0 for a negated 0.
                        v.push(if integer_input && x == 0.0 { 0.0 } else { x });
                    }
                }
                from_f64(self.dtype, shape, &v)?
            }
        };
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
