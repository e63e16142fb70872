//! `resize_with_crop_or_pad(field, height, width)`: centre-crops or zero-pads `[..., H, W, C]`
//! to `[..., height, width, C]`, with TensorFlow's offsets (`tf.image.resize_with_crop_or_pad`:
//! crop offset `(H - height) // 2`, pad offset `(height - H) // 2`, likewise for the width).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result, Tensor};

use crate::kernels::fields::{build_into, input_spec, out_name, put, with_field};
use crate::kernels::numeric::is_numeric;
use crate::kernels::spec_json::spec_json;

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
/// Along one axis of `from` pixels made `to`: the first source pixel kept, the first target
/// pixel written, and how many (TensorFlow's centred offsets).
pub(crate) fn span(from: usize, to: usize) -> (usize, usize, usize) {
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

/// The schema of a crop or pad of `field` (`[..., H, W, C]`) to `height x width`.
pub(crate) fn crop_or_pad_schema(
    op: &str,
    input: &Schema,
    field: &str,
    output: &str,
    height: usize,
    width: usize,
) -> Result<Schema> {
    if height == 0 || width == 0 {
        return Err(Error::schema(op, "height and width must be at least 1"));
    }
    let Some(f) = input_spec(input, op, field, is_numeric, "a numeric image")? else {
        return Ok(input.clone());
    };
    let r = f.shape.len();
    if r < 3 {
        return Err(Error::schema(
            op,
            format!(
                "field '{field}' has shape {}; expected [..., H, W, C]",
                f.shape_str()
            ),
        ));
    }
    let mut shape = f.shape.clone();
    shape[r - 3] = Some(height);
    shape[r - 2] = Some(width);
    Ok(with_field(input, FieldSpec::new(output, f.dtype, shape)))
}

/// Crops or zero-pads `[..., H, W, C]` to `height x width`, as output field `output` (into
/// its batch row where `ctx` offers one); `span(from, to)` gives (source offset, destination
/// offset, length) along one axis.
pub(crate) fn crop_or_pad(
    op: &str,
    t: &Tensor,
    (height, width): (usize, usize),
    span: fn(usize, usize) -> (usize, usize, usize),
    ctx: &OpCtx<'_>,
    output: &str,
) -> Result<Tensor> {
    let raw = t
        .raw()
        .ok_or_else(|| Error::invalid(op, "expected a numeric image"))?;
    let r = t.shape().len();
    if r < 3 {
        return Err(Error::invalid(
            op,
            format!("expected [..., H, W, C], got {:?}", t.shape()),
        ));
    }
    let (h, w, c) = (t.shape()[r - 3], t.shape()[r - 2], t.shape()[r - 1]);
    let outer: usize = t.shape()[..r - 3].iter().product();
    let px = c * t.dtype().size().unwrap_or(1);
    let (sy, dy, ny) = span(h, height);
    let (sx, dx, nx) = span(w, width);
    let (src_img, dst_img) = (h * w * px, height * width * px);
    let mut shape = t.shape().to_vec();
    shape[r - 3] = height;
    shape[r - 2] = width;
    build_into(ctx, output, t.dtype(), shape, |out: &mut [u8]| {
        // Only the padding needs zeros: the crop's rows overwrite the rest.
        if ny < height || nx < width {
            out.fill(0);
        }
        for o in 0..outer {
            for y in 0..ny {
                let src = o * src_img + ((sy + y) * w + sx) * px;
                let dst = o * dst_img + ((dy + y) * width + dx) * px;
                out[dst..dst + nx * px].copy_from_slice(&raw[src..src + nx * px]);
            }
        }
        Ok(())
    })
}
