//! `random_resized_crop(field, height, width, scale, ratio, seed)`: torchvision's
//! `RandomResizedCrop` on uint8 `[H, W, C]`: a box of random area (fraction `scale` of the
//! image) and aspect ratio (`ratio`, sampled log-uniformly) — ten tries, then the central crop
//! torchvision falls back to — resized to `height x width` with antialiased bilinear filtering
//! (PIL's BILINEAR, as torchvision uses on PIL images) by `fast_image_resize`, cropping and
//! resizing in one pass. Decisions come from (seed, epoch, element position), as for every
//! random op. `box_output` names a field that receives the box `[top, left, height, width]`.

use fast_image_resize::{FilterType, ResizeAlg};
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Seed, Tensor};

use crate::image::random_flip::unit;
use crate::image::resize::resize_u8;
use crate::kernels::fields::{build_into, input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "random_resized_crop";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomResizedCrop {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default = "default_scale")]
    pub scale: [f64; 2],
    #[serde(default = "default_ratio")]
    pub ratio: [f64; 2],
    #[serde(default, skip_serializing_if = "Seed::is_drawn")]
    pub seed: Seed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub box_output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn default_scale() -> [f64; 2] {
    [0.08, 1.0]
}
fn default_ratio() -> [f64; 2] {
    [3.0 / 4.0, 4.0 / 3.0]
}

/// torchvision's `RandomResizedCrop.get_params`: `(top, left, h, w)`.
pub fn sample_box(
    height: usize,
    width: usize,
    scale: [f64; 2],
    ratio: [f64; 2],
    mut draw: impl FnMut() -> f64,
) -> [usize; 4] {
    let area = (height * width) as f64;
    let (lo, hi) = (ratio[0].ln(), ratio[1].ln());
    for _ in 0..10 {
        let target = area * (scale[0] + (scale[1] - scale[0]) * draw());
        let aspect = (lo + (hi - lo) * draw()).exp();
        let w = (target * aspect).sqrt().round() as usize;
        let h = (target / aspect).sqrt().round() as usize;
        if 0 < w && w <= width && 0 < h && h <= height {
            let top = ((height - h + 1) as f64 * draw()) as usize;
            let left = ((width - w + 1) as f64 * draw()) as usize;
            return [top.min(height - h), left.min(width - w), h, w];
        }
    }
    let in_ratio = width as f64 / height as f64;
    let (w, h) = if in_ratio < ratio[0] {
        (
            width,
            ((width as f64 / ratio[0]).round() as usize).clamp(1, height),
        )
    } else if in_ratio > ratio[1] {
        (
            ((height as f64 * ratio[1]).round() as usize).clamp(1, width),
            height,
        )
    } else {
        (width, height)
    };
    [(height - h) / 2, (width - w) / 2, h, w]
}

impl RandomResizedCrop {
    fn check(&self) -> Result<()> {
        let ok = self.height > 0
            && self.width > 0
            && 0.0 < self.scale[0]
            && self.scale[0] <= self.scale[1]
            && 0.0 < self.ratio[0]
            && self.ratio[0] <= self.ratio[1];
        if ok {
            Ok(())
        } else {
            Err(Error::schema(
                OP,
                "need height, width > 0, 0 < scale[0] <= scale[1], 0 < ratio[0] <= ratio[1]",
            ))
        }
    }
}

impl RandomResizedCrop {
    /// The box `[top, left, height, width]` for an `height x width` image and this element.
    pub fn sample(&self, height: usize, width: usize, ctx: &OpCtx<'_>) -> [usize; 4] {
        let mut state = ctx.element_seed(self.seed);
        sample_box(height, width, self.scale, self.ratio, || {
            state = epoch_seed(state, 1);
            unit(state)
        })
    }

    /// Resizes the (possibly fractional) box `[top, left, height, width]` of a uint8 HWC
    /// image to the output size with antialiased bilinear filtering (into the element's batch
    /// row where `ctx` offers one).
    pub fn resize_box(
        &self,
        raw: &[u8],
        [h, w, c]: [usize; 3],
        bx: [f64; 4],
        ctx: &OpCtx<'_>,
    ) -> Result<Tensor> {
        let algorithm = ResizeAlg::Convolution(FilterType::Bilinear);
        let size = [self.height, self.width];
        let shape = vec![self.height, self.width, c];
        let output = out_name(&self.field, &self.output);
        build_into(ctx, output, DType::U8, shape, |out: &mut [u8]| {
            resize_u8(OP, raw, [h, w, c], Some(bx), out, size, algorithm)
        })
    }

    /// The element with the resized image (and the box, if asked for) in place.
    pub fn put_outputs(&self, input: Element, image: Tensor, bx: [usize; 4]) -> Result<Element> {
        let mut e = put(input, out_name(&self.field, &self.output), image);
        if let Some(b) = &self.box_output {
            let boxed: Vec<i64> = bx.iter().map(|&v| v as i64).collect();
            e = put(e, b, Tensor::from_slice(DType::I64, vec![4], &boxed)?);
        }
        Ok(e)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.check()
    }
}

impl Op for RandomResizedCrop {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        let boxes = self.box_output.iter().map(|b| Fields::Named {
            reads: Vec::new(),
            writes: vec![b.clone()],
        });
        boxes.fold(
            Fields::one(&self.field, self.output.as_deref()),
            Fields::and,
        )
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, "uint8 images")?
        else {
            return Ok(input.clone());
        };
        if f.shape.len() != 3 || !matches!(f.shape[2], None | Some(1 | 3 | 4)) {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected one [H, W, 1|3|4] image",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        let shape = vec![Some(self.height), Some(self.width), f.shape[2]];
        let mut out = with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), DType::U8, shape),
        );
        if let Some(b) = &self.box_output {
            out = with_field(&out, FieldSpec::fixed(b.clone(), DType::I64, &[4]));
        }
        Ok(out)
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let [h, w, c] = t.shape()[..] else {
            return Err(Error::invalid(
                OP,
                format!("expected [H, W, C], got {:?}", t.shape()),
            ));
        };
        let raw = t
            .raw()
            .ok_or_else(|| Error::invalid(OP, "expected uint8 pixels"))?;
        let bx = self.sample(h, w, ctx);
        let as_f64 = bx.map(|v| v as f64);
        let out = self.resize_box(raw, [h, w, c], as_f64, ctx)?;
        Ok(Some(self.put_outputs(input, out, bx)?))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(out_name(&self.field, &self.output))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_is_torchvisions_central_crop() {
        // A draw that always gives the largest area with the widest ratio never fits a tall
        // image: the central crop with the narrowest allowed ratio is used.
        let b = sample_box(100, 20, [1.0, 1.0], [3.0 / 4.0, 4.0 / 3.0], || 0.999);
        assert_eq!(b, [(100 - 27) / 2, 0, 27, 20]);
    }
}
