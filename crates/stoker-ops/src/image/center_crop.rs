//! `center_crop(field, height, width)`: torchvision's `CenterCrop` on `[..., H, W, C]`: the
//! centred `height x width` window, zero-padded (centred) where the image is smaller. It
//! differs from `resize_with_crop_or_pad` (TensorFlow) only in the crop offset when the size
//! difference is odd: torchvision rounds `(H - height) / 2` half to even, TensorFlow floors it.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::Result;

use crate::image::resize_with_crop_or_pad::{crop_or_pad, crop_or_pad_schema};
use crate::kernels::fields::{out_name, put};
use crate::kernels::spec_json::spec_json;

const OP: &str = "center_crop";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CenterCrop {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// (source offset, destination offset, length copied) along one axis, as torchvision: pad
/// `(to - from) // 2` before; crop from `round((from - to) / 2)`, ties to even (Python's round).
fn span(from: usize, to: usize) -> (usize, usize, usize) {
    let crop = (from.saturating_sub(to) as f64 / 2.0).round_ties_even() as usize;
    (crop, to.saturating_sub(from) / 2, from.min(to))
}

impl Op for CenterCrop {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let out = out_name(&self.field, &self.output);
        crop_or_pad_schema(OP, input, &self.field, out, self.height, self.width)
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let (size, output) = (
            (self.height, self.width),
            out_name(&self.field, &self.output),
        );
        let out = crop_or_pad(OP, &input.tensors[i], size, span, ctx, output)?;
        Ok(Some(put(input, output, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(out_name(&self.field, &self.output))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::span;

    #[test]
    fn offsets_round_half_to_even_like_python() {
        assert_eq!(span(5, 4), (0, 0, 4)); // 0.5 -> 0
        assert_eq!(span(7, 4), (2, 0, 4)); // 1.5 -> 2 (TensorFlow: 1)
        assert_eq!(span(9, 4), (2, 0, 4)); // 2.5 -> 2
        assert_eq!(span(4, 7), (0, 1, 4)); // padding: 3 // 2 before
    }
}
