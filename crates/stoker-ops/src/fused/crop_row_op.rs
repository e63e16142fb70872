//! Element-wise ops that `decode_crop_or_pad` runs on each row of its crop as the PNG decoder
//! hands the row over, while it is still in the L1 cache: `rescale` to float32 and
//! `one_hot_colors`. The op then writes its (4x or more larger) float32 output once, straight
//! into the batch row, and the uint8 crop is never stored. The planner fuses them (see
//! `decode_crop_or_pad::fuse`), so users write the ops themselves.
//!
//! Measured on W2 (960x720 PNG pairs cropped to 512x512, medians of 8 alternating epochs):
//! 124.5 against 123.1 pairs/s with the ops run after the decode, on one thread; 248 against
//! 244 on two.

use serde::{Deserialize, Serialize};
use stoker_core::op::{Op, OpCtx};
use stoker_core::stream_copy::ChunkWriter;
use stoker_core::{DType, Error, Tensor};

use crate::image::one_hot_colors::OneHotColors;
use crate::kernels::fields::{build_chunks_with, build_into};
use crate::kernels::one_hot_rows::OneHotRows;
use crate::tensor::rescale::Rescale;

/// The op run on each row of the crop.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum CropRowOp {
    Rescale(Rescale),
    OneHotColors(OneHotColors),
}

impl CropRowOp {
    pub(crate) fn fields(&self) -> stoker_core::op::Fields {
        match self {
            CropRowOp::Rescale(o) => o.fields(),
            CropRowOp::OneHotColors(o) => o.fields(),
        }
    }

    /// The op as it runs alone (on crops the rows cannot be handed over for).
    pub(crate) fn op(&self) -> &dyn Op {
        match self {
            CropRowOp::Rescale(o) => o,
            CropRowOp::OneHotColors(o) => o,
        }
    }

    /// Whether the op can fail on some pixels (a colour that is no class's, without fallback).
    pub(crate) fn may_fail(&self) -> bool {
        match self {
            CropRowOp::Rescale(_) => false,
            CropRowOp::OneHotColors(o) => o.fallback.is_none(),
        }
    }

    /// The output's channels for rows of `channels`-channel pixels, if the op takes those.
    fn channels_out(&self, channels: usize) -> Option<usize> {
        match self {
            CropRowOp::Rescale(_) => Some(channels),
            CropRowOp::OneHotColors(o) => (channels == 3).then_some(o.colors.len()),
        }
    }

    /// Whether [`CropRowOp::write`] takes rows of `channels`-channel pixels.
    pub(crate) fn takes(&self, channels: usize) -> bool {
        self.channels_out(channels).is_some()
    }

    /// The op's output (field `output`) for the `height` x `width` crop of `channels`-channel
    /// pixels that `rows(each)` hands over, calling `each(y, pixels)` once for each row `y`. A
    /// decoder failure is the `Err`; one of the op's own is left in `failed` (the element
    /// fails with it, as it would from the op alone).
    pub(crate) fn write(
        &self,
        ctx: &OpCtx<'_>,
        output: &str,
        [height, width, channels]: [usize; 3],
        rows: impl FnOnce(&mut dyn FnMut(usize, &[u8])) -> Result<(), String>,
        failed: &mut Option<Error>,
    ) -> Result<Tensor, String> {
        let out_channels = self.channels_out(channels).unwrap_or(channels);
        let shape = vec![height, width, out_channels];
        let mut decoded = Ok(());
        let out = match self {
            CropRowOp::Rescale(r) => {
                let rescale = r.of_u8();
                build_chunks_with(ctx, output, DType::F32, shape, width * channels, |out| {
                    let out: &mut ChunkWriter<'_, f32> = out;
                    decoded = rows(&mut |y, px| out.write(y, |row| rescale.write(px, row)));
                    Ok(())
                })
            }
            CropRowOp::OneHotColors(o) => {
                build_into(ctx, output, DType::F32, shape, |out: &mut [f32]| {
                    let mut lookup = o.lookup()?;
                    let mut one_hot = OneHotRows::new(out, out_channels);
                    let mut classes = Vec::with_capacity(width);
                    decoded = rows(&mut |y, px| {
                        if failed.is_none() {
                            match lookup.classes(px, y * width, &mut classes) {
                                Ok(()) => one_hot.write(y * width, &classes),
                                Err(e) => *failed = Some(e),
                            }
                        }
                    });
                    one_hot.finish();
                    Ok(())
                })
            }
        }
        .map_err(|e| e.to_string())?;
        decoded.map(|()| out)
    }
}
