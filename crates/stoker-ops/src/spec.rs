//! Serialisable descriptions of the native ops (for spec files and `save_spec`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::op::Op;
use stoker_core::{Error, Result};

use crate::cast::Cast;
use crate::center_crop::CenterCrop;
use crate::color_jitter::ColorJitter;
use crate::decode_crop_or_pad::DecodeCropOrPad;
use crate::decode_image::DecodeImage;
use crate::decode_raw::DecodeRaw;
use crate::decode_resized_crop::DecodeRandomResizedCrop;
use crate::gather_channels::GatherChannels;
use crate::layout::ChangeLayout;
use crate::normalize::Normalize;
use crate::one_hot_colors::OneHotColors;
use crate::parse_example::ParseExample;
use crate::pixel_chain::PixelChain;
use crate::random_flip::RandomFlip;
use crate::random_resized_crop::RandomResizedCrop;
use crate::read_file::ReadFile;
use crate::rescale::Rescale;
use crate::resize::Resize;
use crate::resize_with_crop_or_pad::ResizeWithCropOrPad;
use crate::select::Select;
use crate::slice::Slice;
use crate::unflatten::Unflatten;
use crate::unpack_bits::UnpackBits;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpSpec {
    ParseExample(ParseExample),
    ReadFile(ReadFile),
    RandomFlip(RandomFlip),
    RandomResizedCrop(RandomResizedCrop),
    ColorJitter(ColorJitter),
    DecodeRandomResizedCrop(DecodeRandomResizedCrop),
    DecodeCropOrPad(DecodeCropOrPad),
    PixelChain(PixelChain),
    Resize(Resize),
    CenterCrop(CenterCrop),
    Normalize(Normalize),
    Layout(ChangeLayout),
    DecodeRaw(DecodeRaw),
    DecodeImage(DecodeImage),
    UnpackBits(UnpackBits),
    GatherChannels(GatherChannels),
    Cast(Cast),
    Rescale(Rescale),
    ResizeWithCropOrPad(ResizeWithCropOrPad),
    OneHotColors(OneHotColors),
    Select(Select),
    Slice(Slice),
    Unflatten(Unflatten),
}

impl OpSpec {
    pub fn to_json(&self) -> Result<serde_json::Value> {
        serde_json::to_value(self).map_err(|e| Error::Spec(e.to_string()))
    }

    pub fn from_json(value: &serde_json::Value) -> Result<OpSpec> {
        serde_json::from_value(value.clone())
            .map_err(|e| Error::Spec(format!("bad op {value}: {e}")))
    }

    /// The spec of a built op, if it has one (Python functions have none): what the
    /// planner's fusions match on.
    pub fn of(op: &Arc<dyn Op>) -> Option<OpSpec> {
        op.spec().ok().and_then(|v| OpSpec::from_json(&v).ok())
    }

    pub fn build(self) -> Result<Arc<dyn Op>> {
        Ok(match self {
            OpSpec::ParseExample(p) => Arc::new(ParseExample::new(p.key, p.features)?),
            OpSpec::DecodeRaw(o) => Arc::new(o),
            OpSpec::ReadFile(o) => Arc::new(o),
            OpSpec::RandomFlip(o) => Arc::new(o),
            OpSpec::RandomResizedCrop(o) => Arc::new(o),
            OpSpec::ColorJitter(o) => Arc::new(o),
            OpSpec::DecodeRandomResizedCrop(o) => Arc::new(o),
            OpSpec::DecodeCropOrPad(o) => Arc::new(o),
            OpSpec::PixelChain(o) => Arc::new(o),
            OpSpec::Resize(o) => Arc::new(o),
            OpSpec::CenterCrop(o) => Arc::new(o),
            OpSpec::Normalize(o) => Arc::new(o),
            OpSpec::Layout(o) => Arc::new(o),
            OpSpec::DecodeImage(o) => Arc::new(o),
            OpSpec::UnpackBits(o) => Arc::new(o),
            OpSpec::GatherChannels(o) => Arc::new(o),
            OpSpec::Cast(o) => Arc::new(o),
            OpSpec::Rescale(o) => Arc::new(o),
            OpSpec::ResizeWithCropOrPad(o) => Arc::new(o),
            OpSpec::OneHotColors(o) => Arc::new(o),
            OpSpec::Select(o) => Arc::new(o),
            OpSpec::Slice(o) => Arc::new(o),
            OpSpec::Unflatten(o) => Arc::new(o),
        })
    }
}
