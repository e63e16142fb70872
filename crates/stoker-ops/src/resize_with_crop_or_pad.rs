//! `resize_with_crop_or_pad(field, height, width)`: centre-crops or zero-pads `[..., H, W, C]`
//! to `[..., height, width, C]`, with TensorFlow's offsets (`tf.image.resize_with_crop_or_pad`:
//! crop offset `(H - height) // 2`, pad offset `(height - H) // 2`, likewise for the width).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{Error, Result, Tensor};

use crate::fields::{input_spec, out_name, put, with_field};
use crate::numeric::is_numeric;
use crate::spec::OpSpec;

const OP: &str = "resize_with_crop_or_pad";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResizeWithCropOrPad {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// (source offset, destination offset, length copied) along one axis.
fn span(from: usize, to: usize) -> (usize, usize, usize) {
    (
        from.saturating_sub(to) / 2,
        to.saturating_sub(from) / 2,
        from.min(to),
    )
}

impl Op for ResizeWithCropOrPad {
    fn name(&self) -> &str {
        OP
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if self.height == 0 || self.width == 0 {
            return Err(Error::schema(OP, "height and width must be at least 1"));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric image")? else {
            return Ok(input.clone());
        };
        let r = f.shape.len();
        if r < 3 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected [..., H, W, C]",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        let mut shape = f.shape.clone();
        shape[r - 3] = Some(self.height);
        shape[r - 2] = Some(self.width);
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), f.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let raw = t
            .raw()
            .ok_or_else(|| Error::invalid(OP, "expected a numeric image"))?;
        let r = t.shape().len();
        if r < 3 {
            return Err(Error::invalid(
                OP,
                format!("expected [..., H, W, C], got {:?}", t.shape()),
            ));
        }
        let (h, w, c) = (t.shape()[r - 3], t.shape()[r - 2], t.shape()[r - 1]);
        let outer: usize = t.shape()[..r - 3].iter().product();
        let px = c * t.dtype().size().unwrap_or(1);
        let (sy, dy, ny) = span(h, self.height);
        let (sx, dx, nx) = span(w, self.width);
        let (src_img, dst_img) = (h * w * px, self.height * self.width * px);
        let mut storage = stoker_core::storage::shared_pool().take(outer * dst_img);
        let out = storage.as_bytes_mut();
        out.fill(0);
        for o in 0..outer {
            for y in 0..ny {
                let src = o * src_img + ((sy + y) * w + sx) * px;
                let dst = o * dst_img + ((dy + y) * self.width + dx) * px;
                out[dst..dst + nx * px].copy_from_slice(&raw[src..src + nx * px]);
            }
        }
        let mut shape = t.shape().to_vec();
        shape[r - 3] = self.height;
        shape[r - 2] = self.width;
        let out = Tensor::from_storage(t.dtype(), shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        OpSpec::ResizeWithCropOrPad(self.clone()).to_json()
    }
}
