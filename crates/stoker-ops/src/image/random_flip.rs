//! `random_flip(field, axis, probability, seed)`: flips an image `[H, W, C]` left-right
//! (`axis="horizontal"`, like `tf.image.random_flip_left_right`) or up-down, with the given
//! probability. The decision for an element depends only on the seed, the epoch and the
//! element's position, so it is the same on 1 or N threads and changes every epoch.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result, Seed, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::numeric::is_numeric;
use crate::kernels::spec_json::spec_json;

const OP: &str = "random_flip";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlipAxis {
    Horizontal,
    Vertical,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomFlip {
    pub field: String,
    pub axis: FlipAxis,
    #[serde(default = "half")]
    pub probability: f64,
    #[serde(default, skip_serializing_if = "Seed::is_drawn")]
    pub seed: Seed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn half() -> f64 {
    0.5
}

/// A uniform draw in [0, 1) from a 64-bit seed.
pub fn unit(seed: u64) -> f64 {
    (seed >> 11) as f64 / (1u64 << 53) as f64
}

impl RandomFlip {
    /// Whether this element is flipped.
    pub fn flips(&self, ctx: &OpCtx<'_>) -> bool {
        unit(ctx.element_seed(self.seed)) < self.probability
    }
}

impl Op for RandomFlip {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !(0.0..=1.0).contains(&self.probability) {
            return Err(Error::schema(
                OP,
                format!("probability {} is not in [0, 1]", self.probability),
            ));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric image")? else {
            return Ok(input.clone());
        };
        if f.shape.len() != 3 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; flip single images [H, W, C], before batching",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        let mut out = f.clone();
        out.name = out_name(&self.field, &self.output).to_string();
        Ok(with_field(input, out))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        if !self.flips(ctx) {
            let t = input.tensors[i].clone();
            return Ok(Some(put(input, out_name(&self.field, &self.output), t)));
        }
        let t = &input.tensors[i];
        let raw = t
            .raw()
            .ok_or_else(|| Error::invalid(OP, "expected a numeric image"))?;
        let [h, w, c] = t.shape()[..] else {
            return Err(Error::invalid(
                OP,
                format!("expected [H, W, C], got {:?}", t.shape()),
            ));
        };
        let px = c * t.dtype().size().unwrap_or(1);
        let row = w * px;
        let mut storage = stoker_core::storage::shared_pool().take(raw.len());
        let out = storage.as_bytes_mut();
        for y in 0..h {
            let src = &raw[y * row..(y + 1) * row];
            let dst_row = match self.axis {
                FlipAxis::Horizontal => y,
                FlipAxis::Vertical => h - 1 - y,
            };
            let dst = &mut out[dst_row * row..(dst_row + 1) * row];
            match self.axis {
                FlipAxis::Vertical => dst.copy_from_slice(src),
                FlipAxis::Horizontal => {
                    for (d, s) in dst
                        .chunks_exact_mut(px.max(1))
                        .zip(src.chunks_exact(px.max(1)).rev())
                    {
                        d.copy_from_slice(s);
                    }
                }
            }
        }
        let flipped = Tensor::from_storage(t.dtype(), t.shape().to_vec(), storage)?;
        Ok(Some(put(
            input,
            out_name(&self.field, &self.output),
            flipped,
        )))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
