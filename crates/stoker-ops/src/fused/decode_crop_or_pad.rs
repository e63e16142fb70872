//! `decode_image` followed by `resize_with_crop_or_pad` of its output, fused. The planner puts
//! it in place of that pair (see `fuse`), so users write the two ops.
//!
//! A PNG is decoded only as far as the crop needs. Non-interlaced 8-bit PNGs that need no
//! channel conversion (W2's photos and label maps) go through `png_window`: rows down to the
//! crop's last only, each unfiltered only up to the crop's right edge, the crop's pixels
//! written straight into the output (W2's 960x720 files cropped to 512x512 skip their last
//! 104 rows and the right 224 columns of the rest). Other non-interlaced PNGs are decoded
//! down to the crop's last row. A PNG's rows depend on the rows above them and on the pixels
//! to their left, so those are still decoded. Every chunk's CRC is still checked through
//! IEND, so a truncated or damaged file fails as it would whole. JPEGs and interlaced PNGs go
//! through the two ops unchanged; the result is bit-identical to the pair either way.
//!
//! A `rescale` to float32 or a `one_hot_colors` of the crop joins the fused op as its row op
//! (see `crop_row_op`): in the window decoder's path it converts each crop row as the rows
//! come, elsewhere (and where the crop pads) it runs on the crop as it would alone.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::codecs::decoded::Decoded;
use crate::codecs::png_file::png_size;
use crate::codecs::png_window::Png8;
use crate::fused::crop_row_op::CropRowOp;
use crate::image::decode_image::{decode_field, DecodeImage};
use crate::image::resize_with_crop_or_pad::{crop_or_pad, span, ResizeWithCropOrPad};
use crate::kernels::fields::{build_into, out_name, put};
use crate::kernels::spec_json::spec_json;

/// The planner reaches the fusion beside the op it makes.
pub use crate::fused::fuse_crop_or_pad::fuse;

const OP: &str = "decode_crop_or_pad";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeCropOrPad {
    pub decode: DecodeImage,
    pub crop: ResizeWithCropOrPad,
    /// An op on the crop run on each of its rows as they are decoded (see `crop_row_op`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_op: Option<CropRowOp>,
}

impl DecodeCropOrPad {
    /// The decoded image, and how many of its top rows the crop skips.
    fn decode_top(&self, data: &[u8]) -> Result<(Decoded, usize), String> {
        if let Some((_, height)) = png_size(data) {
            let (skip, _, keep) = span(height, self.crop.height);
            if skip + keep < height {
                let img = self.decode.decode_png_top(data, skip + keep)?;
                // An interlaced PNG comes back whole: the crop then starts where it would.
                let skip = if img.height == skip + keep { skip } else { 0 };
                return Ok((img, skip));
            }
        }
        Ok((self.decode.decode(data)?, 0))
    }

    /// The crop (or padded image) of the encoded image `data`, as field `output`, and whether
    /// the row op already ran on it (its own failure, if any, left in `failed`).
    fn decode_crop(
        &self,
        data: &[u8],
        ctx: &OpCtx<'_>,
        output: &str,
        failed: &mut Option<Error>,
    ) -> Result<(Tensor, bool), String> {
        let size = (self.crop.height, self.crop.width);
        if png_size(data).is_some() {
            let (channels, max) = (self.decode.channels, self.decode.max_pixels);
            if let Some(png) = Png8::open(data, channels, max)? {
                return self.crop_png(&png, ctx, output, failed);
            }
        }
        let (img, skip) = self.decode_top(data)?;
        // The rows from `skip` on: the crop of the whole image starts at their top.
        let (h, w, c) = (img.height - skip, img.width, img.channels);
        let rows = Tensor::view(DType::U8, vec![h, w, c], Arc::new(img.pixels), skip * w * c)
            .map_err(|e| e.to_string())?;
        let crop = crop_or_pad(OP, &rows, size, span, ctx, output).map_err(|e| e.to_string())?;
        Ok((crop, false))
    }

    /// The crop of a PNG the window decoder takes: only its rows down to the crop's last, and
    /// of those only the bytes up to the crop's right edge, are unfiltered, and the crop's
    /// pixels go straight into the output, or through the row op into its output where the
    /// crop needs no padding (which the op alone would see as black pixels).
    fn crop_png(
        &self,
        png: &Png8<'_>,
        ctx: &OpCtx<'_>,
        output: &str,
        failed: &mut Option<Error>,
    ) -> Result<(Tensor, bool), String> {
        let (height, width, c) = (self.crop.height, self.crop.width, png.channels);
        let ((sy, dy, ny), (sx, dx, nx)) = (span(png.height, height), span(png.width, width));
        if let Some(op) = &self.row_op {
            if ny == height && nx == width && op.takes(c) {
                let rows = |each: &mut dyn FnMut(usize, &[u8])| png.window([sy, sx, ny, nx], each);
                let out = op.write(ctx, output, [height, width, c], rows, failed)?;
                return Ok((out, true));
            }
        }
        let mut failed = None;
        let shape = vec![height, width, c];
        let out = build_into(ctx, output, DType::U8, shape, |out: &mut [u8]| {
            if ny < height || nx < width {
                out.fill(0);
            }
            let put_row = |y: usize, px: &[u8]| {
                let at = ((dy + y) * width + dx) * c;
                out[at..at + px.len()].copy_from_slice(px);
            };
            failed = png.window([sy, sx, ny, nx], put_row).err();
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        failed.map_or(Ok((out, false)), Err)
    }
}

impl Op for DecodeCropOrPad {
    fn work(&self) -> stoker_core::op::Work {
        stoker_core::op::Work::DecodeImage
    }

    fn name(&self) -> &str {
        match &self.row_op {
            None => OP,
            Some(CropRowOp::Rescale(_)) => "decode_crop_or_pad+rescale",
            Some(CropRowOp::OneHotColors(_)) => "decode_crop_or_pad+one_hot_colors",
        }
    }

    fn fields(&self) -> Fields {
        let fields = self.decode.fields().and(self.crop.fields());
        match &self.row_op {
            Some(op) => fields.and(op.fields()),
            None => fields,
        }
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let crop = self
            .crop
            .output_schema(&self.decode.output_schema(input)?)?;
        match &self.row_op {
            Some(op) => op.op().output_schema(&crop),
            None => Ok(crop),
        }
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let output = out_name(&self.crop.field, &self.crop.output);
        let field = &self.decode.field;
        let mut failed = None;
        let decoded = decode_field(OP, field, &input, ctx, |b| {
            self.decode_crop(b, ctx, output, &mut failed)
        })?;
        // A decoder failure comes first (as it would before the op), then the op's own.
        let Some((out, row_op_ran)) = decoded else {
            return Ok(None);
        };
        if let Some(e) = failed {
            return Err(e);
        }
        let element = put(input, output, out);
        match &self.row_op {
            Some(op) if !row_op_ran => op.op().apply(element, ctx),
            _ => Ok(Some(element)),
        }
    }

    fn batch_row_field(&self) -> Option<&str> {
        self.crop.batch_row_field()
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::one_hot_colors::OneHotColors;
    use crate::tensor::rescale::Rescale;
    use stoker_core::stats::StageStats;
    use stoker_core::ErrorPolicy;

    const COLORS: [[u8; 3]; 2] = [[10, 20, 30], [200, 100, 50]];

    /// A 6 x 5 RGB PNG of the two colours in a checkerboard, `odd` at (2, 3).
    fn checkerboard(odd: [u8; 3]) -> Vec<u8> {
        let mut px = Vec::new();
        for y in 0..5 {
            for x in 0..6 {
                px.extend_from_slice(&if (y, x) == (2, 3) {
                    odd
                } else {
                    COLORS[(x + y) % 2]
                });
            }
        }
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, 6, 5);
        enc.set_color(png::ColorType::Rgb);
        enc.write_header().unwrap().write_image_data(&px).unwrap();
        out
    }

    fn fused(row_op: CropRowOp, height: usize, width: usize) -> DecodeCropOrPad {
        DecodeCropOrPad {
            decode: DecodeImage {
                field: "x".into(),
                channels: 3,
                max_pixels: 1 << 20,
                dtype: DType::U8,
                dct_method: Default::default(),
                output: None,
            },
            crop: ResizeWithCropOrPad {
                field: "x".into(),
                height,
                width,
                output: None,
            },
            row_op: Some(row_op),
        }
    }

    /// The row ops convert the rows as the window decoder hands them over (not the crop after
    /// it), except where the crop pads; an unknown colour is the one-hot's own error, naming
    /// the crop's pixel.
    #[test]
    fn row_ops_run_on_the_decoded_rows_unless_the_crop_pads() {
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
        let one_hot = CropRowOp::OneHotColors(OneHotColors {
            field: "x".into(),
            colors: COLORS.to_vec(),
            fallback: None,
            zeros_for_others: false,
            output: None,
        });
        let rescale = CropRowOp::Rescale(Rescale {
            field: "x".into(),
            divisor: 255.0,
            scale: 1.0,
            offset: 0.0,
            dtype: DType::F32,
            output: None,
        });
        let png = checkerboard(COLORS[1]); // (2, 3)'s own colour
        let mut failed = None;

        // The 3 x 4 crop starts at (1, 1): pixel (y, x) of it has colour (x + y) % 2.
        let op = fused(one_hot.clone(), 3, 4);
        let (out, ran) = op.decode_crop(&png, &ctx, "x", &mut failed).unwrap();
        assert!(ran && failed.is_none());
        assert_eq!(out.shape(), [3, 4, 2]);
        let want: Vec<f32> = (0..12)
            .flat_map(|p| {
                let class = (p / 4 + p % 4) % 2;
                [(class == 0) as u8 as f32, (class == 1) as u8 as f32]
            })
            .collect();
        assert_eq!(out.typed::<f32>().unwrap(), want);

        let (out, ran) = fused(rescale.clone(), 3, 4)
            .decode_crop(&png, &ctx, "x", &mut failed)
            .unwrap();
        assert!(ran && out.shape() == [3, 4, 3]);
        assert_eq!(
            out.typed::<f32>().unwrap()[..3],
            [10.0 / 255.0, 20.0 / 255.0, 30.0 / 255.0]
        );

        // Padded (7 rows of 5): the uint8 crop, for the op to run on as it would alone.
        for row_op in [one_hot.clone(), rescale] {
            let (out, ran) = fused(row_op, 7, 4)
                .decode_crop(&png, &ctx, "x", &mut failed)
                .unwrap();
            assert!(!ran && out.shape() == [7, 4, 3] && out.dtype() == DType::U8);
        }

        // (2, 3) is the crop's pixel (1, 2): number 6.
        let (_, ran) = op
            .decode_crop(&checkerboard([1, 2, 3]), &ctx, "x", &mut failed)
            .unwrap();
        let message = failed.map(|e| e.to_string()).unwrap_or_default();
        assert!(
            ran && message.contains("pixel 6 has colour [1, 2, 3]"),
            "{message}"
        );
    }
}
