//! Serialisable descriptions of the native ops (for spec files and `save_spec`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::op::Op;
use stoker_core::{Error, Result};

use crate::fused::decode_crop_or_pad::DecodeCropOrPad;
use crate::fused::decode_resized_crop::DecodeRandomResizedCrop;
use crate::fused::device_image::DeviceImage;
use crate::fused::pixel_chain::PixelChain;
use crate::image::center_crop::CenterCrop;
use crate::image::color_index::ColorIndex;
use crate::image::color_jitter::ColorJitter;
use crate::image::decode_image::DecodeImage;
use crate::image::one_hot_colors::OneHotColors;
use crate::image::random_crop::RandomCrop;
use crate::image::random_flip::RandomFlip;
use crate::image::random_resized_crop::RandomResizedCrop;
use crate::image::resize::Resize;
use crate::image::resize_bilinear::ResizeBilinear;
use crate::image::resize_with_crop_or_pad::ResizeWithCropOrPad;
use crate::record::decode_csv::DecodeCsv;
use crate::record::decode_raw::DecodeRaw;
use crate::record::parse_converted::ParseConverted;
use crate::record::parse_example::ParseExample;
use crate::record::read_file::ReadFile;
use crate::tensor::bit_planes::BitPlanes;
use crate::tensor::cast::Cast;
use crate::tensor::compute::Compute;
use crate::tensor::element_seed::ElementSeed;
use crate::tensor::ensure_shape::EnsureShape;
use crate::tensor::gather_channels::GatherChannels;
use crate::tensor::layout::ChangeLayout;
use crate::tensor::normalize::Normalize;
use crate::tensor::one_hot::OneHot;
use crate::tensor::rescale::Rescale;
use crate::tensor::select::Select;
use crate::tensor::slice::Slice;
use crate::tensor::unflatten::Unflatten;
use crate::tensor::unpack_bits::UnpackBits;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpSpec {
    ParseExample(ParseExample),
    ParseConverted(ParseConverted),
    ReadFile(ReadFile),
    RandomFlip(RandomFlip),
    RandomCrop(RandomCrop),
    RandomResizedCrop(RandomResizedCrop),
    ColorJitter(ColorJitter),
    DecodeRandomResizedCrop(DecodeRandomResizedCrop),
    DecodeCropOrPad(DecodeCropOrPad),
    DeviceImage(DeviceImage),
    PixelChain(PixelChain),
    Resize(Resize),
    ResizeBilinear(ResizeBilinear),
    CenterCrop(CenterCrop),
    Normalize(Normalize),
    Layout(ChangeLayout),
    DecodeRaw(DecodeRaw),
    DecodeCsv(DecodeCsv),
    DecodeImage(DecodeImage),
    UnpackBits(UnpackBits),
    GatherChannels(GatherChannels),
    BitPlanes(BitPlanes),
    Cast(Cast),
    Compute(Compute),
    ElementSeed(ElementSeed),
    Rescale(Rescale),
    ResizeWithCropOrPad(ResizeWithCropOrPad),
    OneHotColors(OneHotColors),
    ColorIndex(ColorIndex),
    OneHot(OneHot),
    Select(Select),
    Slice(Slice),
    Unflatten(Unflatten),
    EnsureShape(EnsureShape),
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
            OpSpec::ColorIndex(o) => Arc::new(o),
            OpSpec::OneHot(o) => Arc::new(o),
            OpSpec::ParseConverted(o) => Arc::new(o),
            OpSpec::DecodeCsv(o) => Arc::new(o),
            OpSpec::ReadFile(o) => Arc::new(o),
            OpSpec::RandomFlip(o) => Arc::new(o),
            OpSpec::RandomCrop(o) => Arc::new(o),
            OpSpec::RandomResizedCrop(o) => Arc::new(o),
            OpSpec::ColorJitter(o) => Arc::new(o),
            OpSpec::DecodeRandomResizedCrop(o) => Arc::new(o),
            OpSpec::DecodeCropOrPad(o) => Arc::new(o),
            OpSpec::DeviceImage(o) => Arc::new(o),
            OpSpec::PixelChain(o) => Arc::new(o),
            OpSpec::Resize(o) => Arc::new(o),
            OpSpec::ResizeBilinear(o) => Arc::new(o),
            OpSpec::CenterCrop(o) => Arc::new(o),
            OpSpec::Normalize(o) => Arc::new(o),
            OpSpec::Layout(o) => Arc::new(o),
            OpSpec::DecodeImage(o) => Arc::new(o),
            OpSpec::UnpackBits(o) => Arc::new(o),
            OpSpec::GatherChannels(o) => Arc::new(o),
            OpSpec::BitPlanes(o) => Arc::new(o),
            OpSpec::Cast(o) => Arc::new(o),
            OpSpec::Compute(o) => Arc::new(o),
            OpSpec::ElementSeed(o) => Arc::new(o),
            OpSpec::Rescale(o) => Arc::new(o),
            OpSpec::ResizeWithCropOrPad(o) => Arc::new(o),
            OpSpec::OneHotColors(o) => Arc::new(o),
            OpSpec::Select(o) => Arc::new(o),
            OpSpec::Slice(o) => Arc::new(o),
            OpSpec::Unflatten(o) => Arc::new(o),
            OpSpec::EnsureShape(o) => Arc::new(o),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::mem::discriminant;

    use serde_json::json;

    use super::*;
    use crate::fused::known::Known;

    /// Specs of every op: each variant at least once, with optional fields left out and set.
    fn examples() -> Vec<serde_json::Value> {
        let decode = json!({"field": "image", "channels": 3});
        let decode16 = json!({"field": "image", "max_pixels": 1000, "dtype": "uint16",
                              "output": "pixels"});
        let rrc = json!({"field": "image", "height": 224, "width": 224, "seed": 7});
        let crop = json!({"field": "image", "height": 512, "width": 512});
        let rescale = json!({"op": "rescale", "field": "image", "divisor": 255.0});
        let one_hot = json!({"op": "one_hot_colors", "field": "image",
                             "colors": [[0, 0, 0], [255, 0, 0]], "fallback": 0});
        vec![
            json!({"op": "parse_example", "features": [
                {"name": "s", "kind": "fixed", "dtype": "int64"},
                {"name": "f", "kind": "fixed", "dtype": "float32", "shape": [2],
                 "default": [0.5, 1.5]},
                {"name": "v", "kind": "var_len", "dtype": "string"}]}),
            json!({"op": "parse_example", "key": "record", "features": [
                {"name": "b", "kind": "fixed", "dtype": "string", "default": ["x"]}]}),
            json!({"op": "read_file", "field": "path"}),
            json!({"op": "read_file", "field": "path", "output": "bytes"}),
            json!({"op": "random_flip", "field": "image", "axis": "horizontal", "seed": 1}),
            json!({"op": "random_flip", "field": "image", "axis": "vertical", "probability": 0.25,
                   "seed": 2, "output": "flipped"}),
            json!({"op": "random_resized_crop", "field": "image", "height": 224, "width": 224,
                   "seed": 3}),
            json!({"op": "random_resized_crop", "field": "image", "height": 32, "width": 48,
                   "scale": [0.5, 1.0], "ratio": [0.5, 2.0], "seed": 4, "box_output": "box",
                   "output": "crop"}),
            json!({"op": "color_jitter", "field": "image", "brightness": [-0.2, 0.2],
                   "contrast": [0.8, 1.2], "seed": 5}),
            json!({"op": "color_jitter", "field": "image", "saturation": [0.5, 1.5],
                   "hue": [-0.1, 0.1], "seed": 6, "output": "jittered"}),
            json!({"op": "decode_random_resized_crop", "decode": decode, "crop": rrc}),
            json!({"op": "decode_crop_or_pad", "decode": decode, "crop": crop}),
            json!({"op": "decode_crop_or_pad", "decode": decode, "crop": crop,
                   "row_op": rescale}),
            json!({"op": "decode_crop_or_pad", "decode": decode16, "crop": crop,
                   "row_op": one_hot}),
            json!({"op": "device_image", "decode": decode, "crop": rrc}),
            json!({"op": "device_image", "decode": decode, "crop": rrc, "chw": true,
                   "cpu_share": 0.25, "auto_share": true, "stages": [
                {"op": "random_flip", "field": "image", "axis": "horizontal", "seed": 1},
                rescale]}),
            json!({"op": "pixel_chain", "field": "image", "stages": [
                {"op": "random_flip", "field": "image", "axis": "horizontal", "seed": 1},
                rescale,
                {"op": "color_jitter", "field": "image", "brightness": [-0.2, 0.2], "seed": 2},
                {"op": "normalize", "field": "image", "mean": [0.5, 0.5, 0.5],
                 "std": [0.25, 0.25, 0.25]}]}),
            json!({"op": "resize", "field": "image", "height": 64, "width": 32}),
            json!({"op": "resize", "field": "image", "height": 64, "width": 32,
                   "method": "area", "antialias": false, "output": "small"}),
            json!({"op": "center_crop", "field": "image", "height": 8, "width": 8}),
            json!({"op": "center_crop", "field": "image", "height": 8, "width": 8,
                   "output": "centre"}),
            json!({"op": "normalize", "field": "image", "mean": [0.5], "std": [0.25]}),
            json!({"op": "normalize", "field": "image", "mean": [0.5, 0.4, 0.3],
                   "std": [0.2, 0.2, 0.2], "output": "normalized"}),
            json!({"op": "layout", "field": "image", "to": "chw"}),
            json!({"op": "layout", "field": "image", "to": "hwc", "output": "hwc"}),
            json!({"op": "decode_raw", "field": "raw", "dtype": "uint16"}),
            json!({"op": "parse_converted", "field": "record", "fields": [
                {"name": "image", "dtype": "uint8", "shape": [null, null, 3], "stored": "jpeg"},
                {"name": "label", "dtype": "int64", "shape": [], "stored": "int64"}]}),
            json!({"op": "decode_raw", "field": "raw", "dtype": "float32", "little_endian": false,
                   "output": "values"}),
            json!({"op": "decode_csv", "field": "line", "columns": [
                {"name": "0", "dtype": "int32", "default": 0}, {"name": "1", "dtype": "string"}],
                "field_delim": ",", "use_quote_delim": true, "na_value": ""}),
            json!({"op": "decode_image", "field": "image"}),
            json!({"op": "decode_image", "field": "image", "channels": 1, "max_pixels": 4096,
                   "dtype": "uint16", "output": "grey"}),
            json!({"op": "unpack_bits", "field": "bits"}),
            json!({"op": "unpack_bits", "field": "bits", "output": "planes"}),
            json!({"op": "gather_channels", "field": "planes", "indices": [2, 0]}),
            json!({"op": "gather_channels", "field": "planes", "indices": [1, 1],
                   "signs": [1, -1], "dtype": "int8", "output": "board"}),
            json!({"op": "bit_planes", "field": "d", "start": 0, "shape": [8, 8, 24],
                   "indices": [0, 4], "signs": [1, -1], "dtype": "float32", "output": "board"}),
            json!({"op": "cast", "field": "x", "dtype": "float16"}),
            json!({"op": "cast", "field": "x", "dtype": "int32", "output": "y"}),
            json!({"op": "compute", "output": "y", "dtype": "float32", "expr":
                {"e": "where", "cond": {"e": "binary", "f": "less", "a": {"e": "field", "name": "x"},
                                        "b": {"e": "const", "value": 0.0}},
                 "a": {"e": "unary", "f": "tanh", "x": {"e": "field", "name": "x", "shape": [-1]}},
                 "b": {"e": "cast", "dtype": "int8", "x": {"e": "field", "name": "x"}}}}),
            rescale,
            json!({"op": "element_seed", "output": "seed", "seed": 2}),
            json!({"op": "element_seed", "output": "seed", "seed": 3}),
            json!({"op": "rescale", "field": "x", "divisor": 2.0, "scale": 3.0, "offset": -1.0,
                   "dtype": "float64", "output": "y"}),
            json!({"op": "resize_with_crop_or_pad", "field": "image", "height": 5, "width": 7}),
            json!({"op": "resize_with_crop_or_pad", "field": "image", "height": 5, "width": 7,
                   "output": "fitted"}),
            one_hot,
            json!({"op": "one_hot_colors", "field": "mask", "colors": [[1, 2, 3]],
                   "output": "classes"}),
            json!({"op": "color_index", "field": "mask", "colors": [[1, 2, 3], [4, 5, 6]]}),
            json!({"op": "color_index", "field": "mask", "colors": [[1, 2, 3]], "fallback": 0,
                   "output": "classes"}),
            json!({"op": "one_hot", "field": "classes", "depth": 32}),
            json!({"op": "one_hot", "field": "classes", "depth": 3, "output": "hot"}),
            json!({"op": "select", "fields": ["a", "b"]}),
            json!({"op": "slice", "field": "x", "start": 1, "stop": 3}),
            json!({"op": "slice", "field": "x", "start": 0, "stop": 2, "axis": 0,
                   "output": "y"}),
            json!({"op": "unflatten", "field": "x", "shape": [2, 3]}),
            json!({"op": "random_crop", "field": "image", "height": 2, "width": 3, "seed": 4}),
            json!({"op": "resize_bilinear", "field": "image", "height": 2, "width": 3}),
            json!({"op": "resize_bilinear", "field": "image", "height": 2, "width": 3,
                   "align_corners": true, "half_pixel_centers": false, "output": "small"}),
            json!({"op": "unflatten", "field": "x", "shape": [4], "axis": 1, "output": "y"}),
            json!({"op": "ensure_shape", "field": "x", "shape": [2, null]}),
        ]
    }

    /// The op inside the spec, as it was read (not built).
    fn op(spec: &OpSpec) -> &dyn Op {
        match spec {
            OpSpec::ParseExample(o) => o,
            OpSpec::ParseConverted(o) => o,
            OpSpec::ReadFile(o) => o,
            OpSpec::RandomFlip(o) => o,
            OpSpec::RandomCrop(o) => o,
            OpSpec::RandomResizedCrop(o) => o,
            OpSpec::ColorJitter(o) => o,
            OpSpec::DecodeRandomResizedCrop(o) => o,
            OpSpec::DecodeCropOrPad(o) => o,
            OpSpec::DeviceImage(o) => o,
            OpSpec::PixelChain(o) => o,
            OpSpec::Resize(o) => o,
            OpSpec::ResizeBilinear(o) => o,
            OpSpec::CenterCrop(o) => o,
            OpSpec::Normalize(o) => o,
            OpSpec::Layout(o) => o,
            OpSpec::DecodeRaw(o) => o,
            OpSpec::DecodeCsv(o) => o,
            OpSpec::DecodeImage(o) => o,
            OpSpec::UnpackBits(o) => o,
            OpSpec::GatherChannels(o) => o,
            OpSpec::BitPlanes(o) => o,
            OpSpec::Cast(o) => o,
            OpSpec::Compute(o) => o,
            OpSpec::ElementSeed(o) => o,
            OpSpec::Rescale(o) => o,
            OpSpec::ResizeWithCropOrPad(o) => o,
            OpSpec::OneHotColors(o) => o,
            OpSpec::ColorIndex(o) => o,
            OpSpec::OneHot(o) => o,
            OpSpec::Select(o) => o,
            OpSpec::Slice(o) => o,
            OpSpec::Unflatten(o) => o,
            OpSpec::EnsureShape(o) => o,
        }
    }

    /// Every op writes its own spec (`Op::spec`, without the registry) exactly as the registry
    /// writes it, built or not.
    #[test]
    fn every_op_writes_the_spec_the_registry_writes() {
        let mut variants = HashSet::new();
        for json in examples() {
            let spec = OpSpec::from_json(&json).unwrap();
            variants.insert(discriminant(&spec));
            let want = spec.to_json().unwrap();
            assert_eq!(op(&spec).spec().unwrap(), want, "{json}");
            let built = spec.clone().build().unwrap();
            assert_eq!(built.spec().unwrap(), want, "{json}");
            assert_eq!(OpSpec::of(&built), Some(spec));
        }
        // One per variant: a new variant fails `op` above until it is listed in `examples`.
        assert_eq!(variants.len(), 34);
    }

    /// The fusions recognise an op (`Known::of`) exactly when the registry reads its spec as
    /// the variant of the same name, and read it the same.
    #[test]
    fn the_fusions_recognise_what_the_registry_reads() {
        let mut variants = HashSet::new();
        for json in examples() {
            let built = OpSpec::from_json(&json).unwrap().build().unwrap();
            let registry = OpSpec::of(&built).unwrap();
            match Known::of(&built) {
                Some(known) => {
                    variants.insert(discriminant(&known));
                    assert_eq!(
                        serde_json::to_value(&known).unwrap(),
                        registry.to_json().unwrap()
                    );
                }
                None => assert!(
                    !matches!(
                        registry,
                        OpSpec::ReadFile(_)
                            | OpSpec::DecodeImage(_)
                            | OpSpec::ResizeWithCropOrPad(_)
                            | OpSpec::RandomResizedCrop(_)
                            | OpSpec::DecodeCropOrPad(_)
                            | OpSpec::RandomFlip(_)
                            | OpSpec::Rescale(_)
                            | OpSpec::ColorJitter(_)
                            | OpSpec::Normalize(_)
                            | OpSpec::OneHotColors(_)
                    ),
                    "{json}"
                ),
            }
        }
        // Every variant of `Known` is met.
        assert_eq!(variants.len(), 10);
    }
}
