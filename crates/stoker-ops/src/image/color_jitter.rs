//! `color_jitter(field, brightness, contrast, saturation, hue, seed)`: random photometric
//! jitter of a float32 image `[H, W, C]`, each adjustment with TensorFlow's semantics
//! (`tf.image.adjust_brightness`, `adjust_contrast`, `adjust_saturation`, `adjust_hue`) and a
//! factor drawn uniformly from its range, in that fixed order:
//!
//! - brightness: `x + delta`;
//! - contrast: `mean_c + factor * (x - mean_c)`, `mean_c` the channel's mean over the image;
//! - saturation: in HSV, `s = clip(s * factor, 0, 1)` (RGB only);
//! - hue: `h = (h + delta) mod 1`, through the pixel's hue and value range (RGB only), which
//!   also holds for values outside [0, 1].
//!
//! Each step computes as TensorFlow's CPU kernel does (the order of the sums of the mean,
//! the constants' precision), so that a draw gives TensorFlow's values. Like TensorFlow,
//! nothing is clipped to [0, 1] afterwards. Factors come from (seed, epoch, element
//! position), as for every random op, so the result does not depend on threads.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Seed};

use crate::image::random_flip::unit;
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
            out.iter_mut().zip(src).for_each(|(d, s)| *d = s + delta);
            if let Some(factor) = draw.contrast {
                let means = tf_channel_means(out, c);
                for px in out.chunks_exact_mut(c) {
                    for (v, m) in px.iter_mut().zip(&means) {
                        *v = m + factor * (*v - m);
                    }
                }
            }
            if let Some(factor) = draw.saturation {
                out.chunks_exact_mut(3)
                    .for_each(|px| adjust_saturation(px, factor));
            }
            if let Some(delta) = draw.hue {
                out.chunks_exact_mut(3).for_each(|px| adjust_hue(px, delta));
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

/// Per channel, the mean over an image of `channels`-wide pixels, summed as TensorFlow's
/// `AdjustContrastv2` CPU kernel sums: the plane folded in halves (the second half's pixels
/// added to the first's) until one pixel is left, then scaled by `1 / pixels`.
fn tf_channel_means(plane: &[f32], channels: usize) -> Vec<f32> {
    let c = channels.max(1);
    let pixels = plane.len() / c;
    if pixels == 0 {
        return vec![0.0; c];
    }
    let right = pixels / 2;
    let left = pixels - right;
    let mut sums: Vec<f32> = plane[left * c..(left + right) * c]
        .iter()
        .zip(&plane[..right * c])
        .map(|(b, a)| b + a)
        .collect();
    sums.extend_from_slice(&plane[right * c..left * c]); // the middle pixel of an odd count
    let mut remaining = left;
    while remaining > 1 {
        let right = remaining / 2;
        let left = remaining - right;
        let (head, tail) = sums.split_at_mut(left * c);
        head[..right * c]
            .iter_mut()
            .zip(&tail[..right * c])
            .for_each(|(a, b)| *a += b);
        remaining = left;
    }
    let scale = 1.0f32 / pixels as f32;
    sums[..c].iter().map(|s| s * scale).collect()
}

/// C++'s `std::max` and `std::min` (the first argument where the comparison is false, as
/// with a NaN), which TensorFlow's colour kernels use.
fn cmax(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

fn cmin(a: f32, b: f32) -> f32 {
    if b < a {
        b
    } else {
        a
    }
}

/// `AdjustSaturation` on one RGB pixel: through HSV, `s` scaled and clipped to [0, 1].
fn adjust_saturation(px: &mut [f32], factor: f32) {
    let (r, g, b) = (px[0], px[1], px[2]);
    let v = cmax(r, cmax(g, b));
    let range = v - cmin(r, cmin(g, b));
    let s = if v > 0.0 { range / v } else { 0.0 };
    let norm = 1.0f32 / (6.0 * range);
    // TensorFlow adds these thirds as doubles.
    let mut h = if r == v {
        norm * (g - b)
    } else if g == v {
        (f64::from(norm * (b - r)) + 2.0 / 6.0) as f32
    } else {
        (f64::from(norm * (r - g)) + 4.0 / 6.0) as f32
    };
    if range <= 0.0 {
        h = 0.0;
    }
    if h < 0.0 {
        h += 1.0;
    }
    let s = cmin(1.0, cmax(0.0, s * factor));
    let c = s * v;
    let m = v - c;
    let dh = h * 6.0;
    let mut fmodu = dh;
    if fmodu.is_finite() {
        while fmodu <= 0.0 {
            fmodu += 2.0;
        }
        while fmodu >= 2.0 {
            fmodu -= 2.0;
        }
    }
    let x = c * (1.0 - (fmodu - 1.0).abs());
    let (rr, gg, bb) = match dh as i32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        5 => (c, 0.0, x),
        _ => (0.0, 0.0, 0.0),
    };
    px.copy_from_slice(&[rr + m, gg + m, bb + m]);
}

/// `AdjustHue` on one RGB pixel: its hue (in [0, 6)) and value range, the hue turned by
/// `delta` of a full turn, the pixel rebuilt from them.
fn adjust_hue(px: &mut [f32], delta: f32) {
    let (r, g, b) = (px[0], px[1], px[2]);
    let (max, mid, min, category) = if r < g {
        if b < r {
            (g, r, b, 1)
        } else if b > g {
            (b, g, r, 3)
        } else {
            (g, b, r, 2)
        }
    } else if b < g {
        (r, g, b, 0)
    } else if b > r {
        (b, r, g, 4)
    } else {
        (r, b, g, 5)
    };
    let mut h = 0.0f32;
    if max != min {
        let ratio = (mid - min) / (max - min);
        h = category as f32
            + if category % 2 == 0 {
                ratio
            } else {
                1.0 - ratio
            };
    }
    h += delta * 6.0;
    if h.is_finite() {
        while h < 0.0 {
            h += 6.0;
        }
        while h >= 6.0 {
            h -= 6.0;
        }
    }
    let category = h as i32;
    let mut ratio = h - category as f32;
    if category % 2 != 0 {
        ratio = 1.0 - ratio;
    }
    let mid = min + ratio * (max - min);
    let rgb = match category {
        0 => [max, mid, min],
        1 => [mid, max, min],
        2 => [min, max, mid],
        3 => [min, mid, max],
        4 => [mid, min, max],
        _ => [max, min, mid],
    };
    px.copy_from_slice(&rgb);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_turn_of_hue_and_a_unit_saturation_keep_the_pixel() {
        for rgb in [
            [0.2f32, 0.5, 0.9],
            [1.0, 0.0, 0.0],
            [0.3, 0.3, 0.3],
            [0.9, 0.8, 0.1],
            [-0.2, 0.4, 1.3],
        ] {
            let mut px = rgb;
            adjust_hue(&mut px, 0.0);
            for (a, b) in px.iter().zip(rgb) {
                assert!((a - b).abs() < 1e-6, "{rgb:?} -> {px:?}");
            }
            let mut px = rgb;
            adjust_saturation(&mut px, 1.0);
            if rgb.iter().all(|v| *v >= 0.0) {
                for (a, b) in px.iter().zip(rgb) {
                    assert!((a - b).abs() < 1e-6, "{rgb:?} -> {px:?}");
                }
            }
        }
    }

    #[test]
    fn channel_means_fold_any_pixel_count() {
        for pixels in [1usize, 2, 3, 5, 8, 17] {
            let plane: Vec<f32> = (0..pixels * 3).map(|i| i as f32).collect();
            let means = tf_channel_means(&plane, 3);
            for (k, m) in means.iter().enumerate() {
                let want = (0..pixels).map(|p| (p * 3 + k) as f32).sum::<f32>() / pixels as f32;
                assert!(
                    (m - want).abs() < 1e-4,
                    "{pixels} pixels, channel {k}: {m} vs {want}"
                );
            }
        }
    }
}
