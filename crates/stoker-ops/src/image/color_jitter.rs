//! `color_jitter(field, brightness, contrast, saturation, hue, seed)`: random photometric
//! jitter of a float32 image `[H, W, C]`, each adjustment with TensorFlow's semantics
//! (`tf.image.adjust_brightness`, `adjust_contrast`, `adjust_saturation`, `adjust_hue`) and a
//! factor drawn uniformly from its range, in that fixed order:
//!
//! - brightness: `x + delta`;
//! - contrast: `(x - mean_c) * factor + mean_c`, `mean_c` the channel's mean over the image;
//! - saturation: in HSV, `s = clip(s * factor, 0, 1)` (RGB only);
//! - hue: in HSV, `h = (h + delta) mod 1` (RGB only).
//!
//! Like TensorFlow, nothing is clipped to [0, 1] afterwards. Factors come from (seed, epoch,
//! element position), as for every random op, so the result does not depend on threads.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Seed};

use crate::image::random_flip::unit;
use crate::kernels::channels;
use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "color_jitter";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColorJitter {
    pub field: String,
    /// Range of the added delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brightness: Option<[f32; 2]>,
    /// Range of the contrast factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contrast: Option<[f32; 2]>,
    /// Range of the saturation factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saturation: Option<[f32; 2]>,
    /// Range of the hue delta, within [-0.5, 0.5].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hue: Option<[f32; 2]>,
    #[serde(default, skip_serializing_if = "Seed::is_drawn")]
    pub seed: Seed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// The factors drawn for one element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Draw {
    pub brightness: Option<f32>,
    pub contrast: Option<f32>,
    pub saturation: Option<f32>,
    pub hue: Option<f32>,
}

impl ColorJitter {
    pub(crate) fn check(&self, channels: Option<usize>) -> Result<()> {
        let ranges = [
            ("brightness", self.brightness, f32::NEG_INFINITY),
            ("contrast", self.contrast, 0.0),
            ("saturation", self.saturation, 0.0),
            ("hue", self.hue, -0.5),
        ];
        for (name, range, floor) in ranges {
            if let Some([lo, hi]) = range {
                if !(lo.is_finite() && hi.is_finite() && floor <= lo && lo <= hi) {
                    return Err(Error::schema(
                        OP,
                        format!("{name} range [{lo}, {hi}] is invalid (need {floor} <= lo <= hi)"),
                    ));
                }
            }
        }
        if matches!(self.hue, Some([_, hi]) if hi > 0.5) {
            return Err(Error::schema(OP, "hue delta must lie within [-0.5, 0.5]"));
        }
        let needs_rgb = self.saturation.is_some() || self.hue.is_some();
        if needs_rgb && matches!(channels, Some(c) if c != 3) {
            return Err(Error::schema(
                OP,
                "saturation and hue need RGB images (3 channels)",
            ));
        }
        Ok(())
    }

    pub(crate) fn draw(&self, ctx: &OpCtx<'_>) -> Draw {
        let mut state = ctx.element_seed(self.seed);
        let mut pick = |range: Option<[f32; 2]>| {
            // Always advance the stream, so enabling one adjustment leaves the others' draws alone.
            state = epoch_seed(state, 1);
            range.map(|[lo, hi]| lo + (hi - lo) * unit(state) as f32)
        };
        Draw {
            brightness: pick(self.brightness),
            contrast: pick(self.contrast),
            saturation: pick(self.saturation),
            hue: pick(self.hue),
        }
    }
}

impl Op for ColorJitter {
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
        let accepts = |d| d == DType::F32;
        let what = "float32 images (convert_image_dtype first)";
        let Some(f) = input_spec(input, OP, &self.field, accepts, what)? else {
            self.check(None)?;
            return Ok(input.clone());
        };
        if f.shape.len() != 3 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; jitter single images [H, W, C], before batching",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        self.check(f.shape[2])?;
        let mut out = f.clone();
        out.name = out_name(&self.field, &self.output).to_string();
        Ok(with_field(input, out))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let (Some(src), [_, _, c]) = (t.typed::<f32>(), t.shape()) else {
            return Err(Error::invalid(
                OP,
                format!("expected a float32 [H, W, C] image, got {:?}", t.shape()),
            ));
        };
        let c = *c;
        self.check(Some(c))?;
        let draw = self.draw(ctx);
        let out = build::<f32>(DType::F32, t.shape().to_vec(), |out| {
            let delta = draw.brightness.unwrap_or(0.0);
            match draw.contrast {
                // TF's adjust_contrast of the brightened image, fused into one pass: the mean
                // of `x + delta` is `mean(x) + delta`.
                Some(factor) => {
                    let means: Vec<f32> =
                        channels::means(src, c).iter().map(|m| m + delta).collect();
                    let factors = vec![factor; c];
                    channels::map2(src, out, &means, &factors, |x, m, f| {
                        ((x + delta) - m) * f + m
                    });
                }
                None => out.iter_mut().zip(src).for_each(|(d, s)| *d = s + delta),
            }
            if draw.saturation.is_some() || draw.hue.is_some() {
                adjust_hsv(out, draw.saturation.unwrap_or(1.0), draw.hue.unwrap_or(0.0));
            }
            Ok(())
        })?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn seeds(&self) -> Vec<Seed> {
        vec![self.seed]
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// Saturation scale and hue shift through HSV, as TensorFlow's kernels compute it.
fn adjust_hsv(pixels: &mut [f32], saturation: f32, hue: f32) {
    for px in pixels.chunks_exact_mut(3) {
        let (h, s, v) = rgb_to_hsv(px[0], px[1], px[2]);
        let s = (s * saturation).clamp(0.0, 1.0);
        let mut h = (h + hue) % 1.0;
        if h < 0.0 {
            h += 1.0;
        }
        let (r, g, b) = hsv_to_rgb(h, s, v);
        px.copy_from_slice(&[r, g, b]);
    }
}

/// RGB → (hue in [0, 1), saturation, value).
fn rgb_to_hsv(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
    let v = r.max(g).max(b);
    let range = v - r.min(g).min(b);
    let s = if v > 0.0 { range / v } else { 0.0 };
    if range <= 0.0 {
        return (0.0, s, v);
    }
    let norm = 1.0 / (6.0 * range);
    let mut h = if r == v {
        norm * (g - b)
    } else if g == v {
        norm * (b - r) + 2.0 / 6.0
    } else {
        norm * (r - g) + 4.0 / 6.0
    };
    if h < 0.0 {
        h += 1.0;
    }
    (h, s, v)
}

fn hsv_to_rgb(h: f32, s: f32, v: f32) -> (f32, f32, f32) {
    let c = s * v;
    let m = v - c;
    let dh = h * 6.0;
    let x = c * (1.0 - ((dh % 2.0) - 1.0).abs());
    let (r, g, b) = match dh as i32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        5 => (c, 0.0, x),
        _ => (0.0, 0.0, 0.0),
    };
    (r + m, g + m, b + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hsv_round_trip() {
        for rgb in [
            [0.2f32, 0.5, 0.9],
            [1.0, 0.0, 0.0],
            [0.3, 0.3, 0.3],
            [0.9, 0.8, 0.1],
        ] {
            let (h, s, v) = rgb_to_hsv(rgb[0], rgb[1], rgb[2]);
            let (r, g, b) = hsv_to_rgb(h, s, v);
            for (a, b) in [r, g, b].iter().zip(rgb) {
                assert!((a - b).abs() < 1e-6, "{rgb:?} -> {:?}", (r, g, b));
            }
        }
    }
}
