//! `random_crop(field, height, width, seed)`: a `height x width` window of an image
//! `[H, W, C]` at a random position, every position equally likely (like
//! `tf.image.random_crop(image, [height, width, C])`). The position depends only on the seed,
//! the epoch and the element's position, so it is the same on 1 or N threads and changes
//! every epoch. An image smaller than the window is an error naming both sizes, as in
//! TensorFlow.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result, Seed};

use crate::image::random_flip::unit;
use crate::kernels::fields::{build_into, input_spec, out_name, put, with_field};
use crate::kernels::numeric::is_numeric;
use crate::kernels::spec_json::spec_json;

const OP: &str = "random_crop";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RandomCrop {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default, skip_serializing_if = "Seed::is_drawn")]
    pub seed: Seed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl RandomCrop {
    /// The window's top-left corner `(top, left)` in an `h x w` image, for this element.
    pub fn corner(&self, h: usize, w: usize, ctx: &OpCtx<'_>) -> (usize, usize) {
        let first = epoch_seed(ctx.element_seed(self.seed), 1);
        let second = epoch_seed(first, 1);
        let pick =
            |seed: u64, n: usize| ((unit(seed) * n as f64) as usize).min(n.saturating_sub(1));
        (
            pick(first, h - self.height + 1),
            pick(second, w - self.width + 1),
        )
    }
}

impl Op for RandomCrop {
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
        if self.height == 0 || self.width == 0 {
            return Err(Error::schema(OP, "height and width must be at least 1"));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric image")? else {
            return Ok(input.clone());
        };
        if f.shape.len() != 3 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; crop single images [H, W, C], before batching",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        for (axis, (dim, want)) in [
            (0, (f.shape[0], self.height)),
            (1, (f.shape[1], self.width)),
        ] {
            if dim.is_some_and(|d| d < want) {
                return Err(Error::schema(
                    OP,
                    format!(
                        "field '{}' has shape {}: axis {axis} is smaller than the crop's {want}",
                        self.field,
                        f.shape_str()
                    ),
                ));
            }
        }
        let shape = vec![Some(self.height), Some(self.width), f.shape[2]];
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), f.dtype, shape),
        ))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
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
        if h < self.height || w < self.width {
            return Err(Error::invalid(
                OP,
                format!(
                    "the image is {h}x{w}, smaller than the {}x{} crop",
                    self.height, self.width
                ),
            ));
        }
        let (top, left) = self.corner(h, w, ctx);
        let px = c * t.dtype().size().unwrap_or(1);
        let (row, out_row) = (w * px, self.width * px);
        let output = out_name(&self.field, &self.output);
        let shape = vec![self.height, self.width, c];
        let cropped = build_into(ctx, output, t.dtype(), shape, |out: &mut [u8]| {
            for (y, dst) in out.chunks_exact_mut(out_row.max(1)).enumerate() {
                let start = (top + y) * row + left * px;
                dst.copy_from_slice(&raw[start..start + out_row]);
            }
            Ok(())
        })?;
        Ok(Some(put(input, output, cropped)))
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
    use stoker_core::element::names;
    use stoker_core::stats::StageStats;
    use stoker_core::{DType, ErrorPolicy, Tensor};

    fn image(h: usize, w: usize) -> Tensor {
        let values: Vec<u8> = (0..h * w * 2).map(|v| (v % 251) as u8).collect();
        Tensor::from_slice(DType::U8, vec![h, w, 2], &values).expect("tensor")
    }

    fn crop(h: usize, w: usize) -> RandomCrop {
        RandomCrop {
            field: "x".into(),
            height: h,
            width: w,
            seed: Seed::given(7),
            output: None,
        }
    }

    fn with_ctx<T>(element: u64, f: impl FnOnce(&OpCtx<'_>) -> T) -> T {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        f(&ctx)
    }

    #[test]
    fn corners_cover_every_position_and_stay_inside() {
        let op = crop(3, 2);
        let mut seen = std::collections::HashSet::new();
        for position in 0..2000 {
            let (top, left) = with_ctx(position, |ctx| op.corner(5, 4, ctx));
            assert!(top <= 2 && left <= 2);
            seen.insert((top, left));
        }
        assert_eq!(seen.len(), 9);
    }

    #[test]
    fn the_window_is_copied_and_too_small_images_fail() {
        let op = crop(3, 2);
        let src = image(5, 4);
        with_ctx(4, |ctx| {
            let (top, left) = op.corner(5, 4, ctx);
            let element = Element::new(names(&["x"]), vec![src.clone()]);
            let out = op.apply(element, ctx).expect("crop").expect("element");
            let got = out.tensors[0].raw().expect("raw").to_vec();
            let raw = src.raw().expect("raw");
            let mut want = Vec::new();
            for y in top..top + 3 {
                want.extend_from_slice(&raw[(y * 4 + left) * 2..(y * 4 + left + 2) * 2]);
            }
            assert_eq!(got, want);
            let small = Element::new(names(&["x"]), vec![image(2, 4)]);
            let err = op.apply(small, ctx).expect_err("too small");
            assert!(
                err.to_string().contains("smaller than the 3x2 crop"),
                "{err}"
            );
        });
    }
}
