//! `resize_bilinear(field, height, width, align_corners, half_pixel_centers)`: TensorFlow's
//! `ResizeBilinear`, the op under `tf.image.resize(images, size)` (bilinear, no antialias):
//! uint8 or float32 `[H, W, C]` images (or a batch `[B, H, W, C]`, any channel count) to
//! float32, not rounded, computed as TensorFlow's CPU kernel computes it, so that the values
//! are TensorFlow's bit for bit:
//!
//! - each output coordinate maps to `(x + 0.5) * scale - 0.5` with half-pixel centres (else
//!   `x * scale`), `scale = in / out` (or `(in - 1) / (out - 1)` with `align_corners`), in
//!   float32; its two source pixels are the floor and the ceiling, clamped to the image, and
//!   its weight the fraction;
//! - a pixel is `top + (bottom - top) * y_lerp`, with `top = tl + (tr - tl) * x_lerp` and
//!   `bottom` alike, each operation in float32.
//!
//! stoker's `resize` is the uint8 resize (rounded, antialiased by default, as PIL).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "resize_bilinear";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResizeBilinear {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default)]
    pub align_corners: bool,
    #[serde(default = "yes")]
    pub half_pixel_centers: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn yes() -> bool {
    true
}

/// One output coordinate's two source positions and the weight of the second.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Tap {
    lower: usize,
    upper: usize,
    lerp: f32,
}

/// TensorFlow's `CalculateResizeScale` and `compute_interpolation_weights`, in float32.
fn taps(out: usize, input: usize, align_corners: bool, half_pixel: bool) -> Vec<Tap> {
    let scale = if align_corners && out > 1 {
        (input - 1) as f32 / (out - 1) as f32
    } else {
        input as f32 / out as f32
    };
    (0..out)
        .map(|i| {
            let at = if half_pixel {
                (i as f32 + 0.5) * scale - 0.5
            } else {
                i as f32 * scale
            };
            let floor = at.floor();
            Tap {
                lower: floor.max(0.0) as usize,
                upper: (at.ceil().max(0.0) as usize).min(input - 1),
                lerp: at - floor,
            }
        })
        .collect()
}

impl ResizeBilinear {
    fn check(&self) -> Result<()> {
        if self.height == 0 || self.width == 0 {
            return Err(Error::schema(OP, "height and width must be at least 1"));
        }
        if self.align_corners && self.half_pixel_centers {
            return Err(Error::schema(
                OP,
                "align_corners and half_pixel_centers cannot both be true (as in TensorFlow)",
            ));
        }
        Ok(())
    }

    /// One image, `h x w x c` values, into `out` (`height x width x c`): per output row, the
    /// two source rows interpolated along x, then the row between them.
    fn image<T: Copy + Into<f32>>(&self, [h, w, c]: [usize; 3], src: &[T], out: &mut [f32]) {
        if (h, w) == (self.height, self.width) {
            // TensorFlow's kernel casts an image of the output's size (an infinity stays one)
            for (o, &v) in out.iter_mut().zip(src) {
                *o = v.into();
            }
            return;
        }
        let xs = taps(self.width, w, self.align_corners, self.half_pixel_centers);
        let ys = taps(self.height, h, self.align_corners, self.half_pixel_centers);
        let (row_len, out_len) = (w * c, self.width * c);
        let mut top = vec![0f32; out_len];
        let mut bottom = vec![0f32; out_len];
        let along_x = |row: &[T], dst: &mut [f32]| {
            for (x, d) in xs.iter().zip(dst.chunks_exact_mut(c)) {
                let (l, r) = (&row[x.lower * c..][..c], &row[x.upper * c..][..c]);
                for ((d, &a), &b) in d.iter_mut().zip(l).zip(r) {
                    let (a, b): (f32, f32) = (a.into(), b.into());
                    *d = a + (b - a) * x.lerp;
                }
            }
        };
        for (y, dst) in ys.iter().zip(out.chunks_exact_mut(out_len)) {
            along_x(&src[y.lower * row_len..][..row_len], &mut top);
            along_x(&src[y.upper * row_len..][..row_len], &mut bottom);
            for ((d, &t), &b) in dst.iter_mut().zip(&top).zip(&bottom) {
                *d = t + (b - t) * y.lerp;
            }
        }
    }
}

impl Op for ResizeBilinear {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let accepts = |d| matches!(d, DType::U8 | DType::F32);
        let Some(f) = input_spec(input, OP, &self.field, accepts, "uint8 or float32 images")?
        else {
            return Ok(input.clone());
        };
        let r = f.shape.len();
        if !(r == 3 || r == 4) {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected [H, W, C] or [B, H, W, C]",
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
            FieldSpec::new(out_name(&self.field, &self.output), DType::F32, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let r = t.shape().len();
        if !(r == 3 || r == 4) || !matches!(t.dtype(), DType::U8 | DType::F32) {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected uint8 or float32 [H, W, C] or [B, H, W, C], got {} {:?}",
                    t.dtype(),
                    t.shape()
                ),
            ));
        }
        let (h, w, c) = (t.shape()[r - 3], t.shape()[r - 2], t.shape()[r - 1]);
        if h == 0 || w == 0 {
            return Err(Error::invalid(
                OP,
                format!("an image of {h}x{w} pixels has nothing to resize"),
            ));
        }
        let images: usize = t.shape()[..r - 3].iter().product();
        let (src_len, dst_len) = (h * w * c, self.height * self.width * c);
        let mut shape = t.shape().to_vec();
        shape[r - 3] = self.height;
        shape[r - 2] = self.width;
        let out = build::<f32>(DType::F32, shape, |out| {
            for (k, dst) in out.chunks_exact_mut(dst_len.max(1)).enumerate() {
                let range = k * src_len..(k + 1) * src_len;
                if let Some(v) = t.typed::<u8>().filter(|_| t.dtype() == DType::U8) {
                    self.image([h, w, c], &v[range], dst);
                } else if let Some(v) = t.typed::<f32>() {
                    self.image([h, w, c], &v[range], dst);
                }
            }
            debug_assert!(images == 0 || out.len() == images * dst_len);
            Ok(())
        })?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
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
    use stoker_core::{ErrorPolicy, Tensor};

    fn run(op: &ResizeBilinear, t: Tensor) -> Result<Tensor> {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        let out = op.apply(Element::new(names(&["x"]), vec![t]), &ctx)?;
        Ok(out
            .map(|e| e.tensors[0].clone())
            .unwrap_or_else(|| unreachable!()))
    }

    fn op(height: usize, width: usize) -> ResizeBilinear {
        ResizeBilinear {
            field: "x".into(),
            height,
            width,
            align_corners: false,
            half_pixel_centers: true,
            output: None,
        }
    }

    /// A 2x2 image doubled: the corners repeat the pixels (the taps clamp), the middle ones
    /// weigh 3:1 and 1:3, as TensorFlow's `tf.image.resize([[0, 4], [8, 12]], [4, 4])`.
    #[test]
    fn doubling_weighs_half_pixel_centres() {
        let t = Tensor::from_slice(DType::U8, vec![2, 2, 1], &[0u8, 4, 8, 12]).unwrap();
        let out = run(&op(4, 4), t).unwrap();
        assert_eq!(out.shape(), &[4, 4, 1]);
        let v: Vec<f32> = out.typed::<f32>().unwrap().to_vec();
        let want = [
            0.0, 1.0, 3.0, 4.0, 2.0, 3.0, 5.0, 6.0, 6.0, 7.0, 9.0, 10.0, 8.0, 9.0, 11.0, 12.0,
        ];
        assert_eq!(v, want);
    }

    /// The same size gives the pixels back as float32 (infinities too, as TensorFlow's); a
    /// batch is resized image by image.
    #[test]
    fn same_size_and_batches() {
        let mut px: Vec<f32> = (0..2 * 3 * 4 * 2).map(|v| v as f32 * 0.5).collect();
        px[3] = f32::INFINITY;
        let t = Tensor::from_slice(DType::F32, vec![2, 3, 4, 2], &px).unwrap();
        let out = run(&op(3, 4), t).unwrap();
        assert_eq!(out.typed::<f32>().unwrap(), &px[..]);
        let weights = taps(3, 5, false, true);
        assert_eq!(weights[0].lower, 0);
        assert_eq!(weights[2].upper, 4);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mut both = op(2, 2);
        both.align_corners = true;
        let t = Tensor::from_slice(DType::U8, vec![1, 1, 1], &[1u8]).unwrap();
        assert!(run(&both, t.clone()).is_err());
        let flat = Tensor::from_slice(DType::U8, vec![1], &[1u8]).unwrap();
        assert!(run(&op(2, 2), flat).is_err());
        let schema = Schema::new(vec![FieldSpec::fixed("x", DType::I32, &[2, 2, 1])]);
        assert!(op(2, 2).output_schema(&schema).is_err());
    }
}
