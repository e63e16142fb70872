//! The ops the fusions look for, recognised by their type. The variants carry `OpSpec`'s names
//! and serde tags, so that tests can write them as specs.

use std::any::Any;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::op::Op;

use crate::fused::decode_crop_or_pad::DecodeCropOrPad;
use crate::image::color_jitter::ColorJitter;
use crate::image::decode_image::DecodeImage;
use crate::image::one_hot_colors::OneHotColors;
use crate::image::random_flip::RandomFlip;
use crate::image::random_resized_crop::RandomResizedCrop;
use crate::image::resize_with_crop_or_pad::ResizeWithCropOrPad;
use crate::record::read_file::ReadFile;
use crate::tensor::normalize::Normalize;
use crate::tensor::rescale::Rescale;

/// An op that a fusion takes; every other op is `None` from [`Known::of`].
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Known {
    ReadFile(ReadFile),
    DecodeImage(DecodeImage),
    ResizeWithCropOrPad(ResizeWithCropOrPad),
    RandomResizedCrop(RandomResizedCrop),
    DecodeCropOrPad(DecodeCropOrPad),
    RandomFlip(RandomFlip),
    Rescale(Rescale),
    ColorJitter(ColorJitter),
    Normalize(Normalize),
    OneHotColors(OneHotColors),
}

impl Known {
    /// The op as a fusion sees it, if it is one of these.
    pub(crate) fn of(op: &Arc<dyn Op>) -> Option<Known> {
        let any: &dyn Any = &**op;
        macro_rules! known {
            ($($variant:ident),*) => {
                $(if let Some(o) = any.downcast_ref::<$variant>() {
                    return Some(Known::$variant(o.clone()));
                })*
            };
        }
        known!(
            ReadFile,
            DecodeImage,
            ResizeWithCropOrPad,
            RandomResizedCrop,
            DecodeCropOrPad,
            RandomFlip,
            Rescale,
            ColorJitter,
            Normalize,
            OneHotColors
        );
        None
    }
}
