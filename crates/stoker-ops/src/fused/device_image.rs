//! `device_image`: the CPU half of an image chain whose pixels are made on a device (a GPU).
//! [`split`] puts it in place of `decode_image` → `random_resized_crop` → flips and affine
//! pixel ops (`pixel_chain`'s stages) → `layout` to CHW, when a loader decodes on the device.
//!
//! Per element it reads only the JPEG's header and draws what the chain would draw, from the
//! same seed streams at the same element position: the crop box (in the original image), the
//! flips and the affine coefficients (see [`Affine`]). The compressed bytes and those draws go
//! into the batch; the device decodes, crops, resizes (antialiased bilinear, rounded to uint8
//! as the CPU path), flips and applies `y = a * x + b0 + bm * mean(x)`. So an element's box and
//! flip do not depend on where it is decoded, and the pipeline's state is the same.
//!
//! Elements the device cannot decode (any format but JPEG), and a share `cpu_share` of the
//! JPEGs (spread evenly over the positions), are decoded, cropped and resized here (the fused
//! CPU path) and handed over as uint8 pixels `[height, width, C]`, marked in `<field>_decoded`;
//! the device then applies only the flips and the affine map. With `auto_share`, the share is
//! the process's live value ([`set_auto_share`]), which the loader moves between batches
//! towards the point where the engine and the device take as long per batch. Fields beside
//! the image:
//!
//! - `<field>`: the compressed file, or the resized pixels (bytes);
//! - `<field>_box`: int64 `[top, left, height, width]` in the original image;
//! - `<field>_flip`: uint8 `[horizontal, vertical]`;
//! - `<field>_affine`: float32 `[3, C]`, the rows `a`, `b0`, `bm`;
//! - `<field>_decoded`: uint8, 1 where `<field>` holds pixels;
//! - `<field>_origin`: the file (and record) the bytes came from, for the device's errors.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Seed, Tensor};

use crate::codecs::jpeg;
use crate::fused::decode_resized_crop::DecodeRandomResizedCrop;
use crate::fused::known::Known;
use crate::fused::pixel_chain::{compose_affine, Affine, Stage};
use crate::image::decode_image::{decode_field, DecodeImage};
use crate::image::random_resized_crop::RandomResizedCrop;
use crate::kernels::fields::{input_spec, put, with_field};
use crate::kernels::spec_json::spec_json;
use crate::tensor::layout::{ChangeLayout, Layout};
use crate::tensor::select::Select;

const OP: &str = "device_image";

/// The suffixes of the fields beside the image (see the module docs).
pub const AUX: [&str; 5] = ["box", "flip", "affine", "decoded", "origin"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceImage {
    pub decode: DecodeImage,
    pub crop: RandomResizedCrop,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
    /// The device hands out `[C, H, W]` (a `layout` to CHW ended the chain).
    #[serde(default)]
    pub chw: bool,
    /// The share of the JPEGs decoded on the CPU, in [0, 1].
    #[serde(default)]
    pub cpu_share: f64,
    /// The share is the process's live one (see [`set_auto_share`]), not `cpu_share`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_share: bool,
}

/// The live CPU share of `auto_share` ops, as `f64` bits (0.0 at start).
static AUTO_SHARE: AtomicU64 = AtomicU64::new(0);

/// Sets the CPU share of every `auto_share` op in the process, for the elements made from now
/// on (clamped to [0, 1]). One value per process: a loader that tunes it owns it.
pub fn set_auto_share(share: f64) {
    let share = if share.is_nan() {
        0.0
    } else {
        share.clamp(0.0, 1.0)
    };
    AUTO_SHARE.store(share.to_bits(), Ordering::Relaxed);
}

/// What the CPU half made of one element: the box, and the pixels where it decoded them
/// (`None`: the file goes to the device as it is).
struct Planned {
    pixels: Option<Bytes>,
    bx: [usize; 4],
}

impl DeviceImage {
    pub fn field(&self) -> &str {
        &self.decode.field
    }

    /// The name of the field beside the image with this suffix (one of [`AUX`]).
    pub fn aux(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.field())
    }

    fn channels(&self) -> usize {
        usize::from(self.decode.channels)
    }

    /// Whether the device makes float32 (an affine stage ran) or keeps uint8.
    pub fn float_output(&self) -> bool {
        self.stages.iter().any(Stage::is_affine)
    }

    fn on_cpu(&self, ctx: &OpCtx<'_>) -> bool {
        let share = if self.auto_share {
            f64::from_bits(AUTO_SHARE.load(Ordering::Relaxed))
        } else {
            self.cpu_share
        };
        if share <= 0.0 {
            return false;
        }
        // Golden-ratio steps spread the share evenly over consecutive positions.
        (ctx.element as f64 * 0.618_033_988_749_894_9).fract() < share
    }

    /// The device's share: the box from the header. `None`: decoded here.
    fn plan(&self, data: &[u8], ctx: &OpCtx<'_>) -> Result<Option<Planned>, String> {
        let is_jpeg = data.starts_with(&[0xFF, 0xD8, 0xFF]);
        if is_jpeg && !self.on_cpu(ctx) {
            let (width, height, _) = jpeg::header(data)?;
            let pixels = (width as u64).saturating_mul(height as u64);
            if pixels > self.decode.max_pixels {
                return Err(format!(
                    "the image is {width}x{height}, over max_pixels={}",
                    self.decode.max_pixels
                ));
            }
            let bx = self.crop.sample(height, width, ctx);
            return Ok(Some(Planned { pixels: None, bx }));
        }
        Ok(None)
    }

    /// Decodes, crops and resizes here (the fused CPU path): uint8 `[height, width, C]`.
    fn on_host(&self, input: &Element, ctx: &OpCtx<'_>) -> Result<Option<(Bytes, [usize; 4])>> {
        let fused = DecodeRandomResizedCrop {
            decode: self.decode.clone(),
            crop: RandomResizedCrop {
                box_output: Some(self.aux("box")),
                output: None,
                ..self.crop.clone()
            },
        };
        let Some(out) = fused.apply(input.clone(), ctx)? else {
            return Ok(None);
        };
        let pixels = &out.tensors[out.require(OP, self.field())?];
        let raw = pixels
            .raw()
            .ok_or_else(|| Error::internal("device_image: the CPU decode made no pixels"))?;
        let boxed = &out.tensors[out.require(OP, &self.aux("box"))?];
        let b = boxed.typed::<i64>().unwrap_or_default();
        let bx: [usize; 4] = std::array::from_fn(|k| b.get(k).map_or(0, |&v| v as usize));
        Ok(Some((Bytes::copy_from_slice(raw), bx)))
    }
}

impl Op for DeviceImage {
    fn name(&self) -> &str {
        OP
    }

    fn seeds(&self) -> Vec<Seed> {
        let mut seeds = self.crop.seeds();
        seeds.extend(self.stages.iter().flat_map(|s| s.op().seeds()));
        seeds
    }

    fn fields(&self) -> Fields {
        let aux = AUX.iter().map(|s| Fields::Named {
            reads: Vec::new(),
            writes: vec![self.aux(s)],
        });
        aux.fold(Fields::one(self.field(), None), Fields::and)
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.crop.validate()?;
        if !matches!(self.decode.channels, 1 | 3) || self.decode.dtype != DType::U8 {
            return Err(Error::schema(
                OP,
                "the device decodes to uint8 with 1 or 3 channels",
            ));
        }
        if !(0.0..=1.0).contains(&self.cpu_share) {
            return Err(Error::schema(
                OP,
                format!("cpu_share {} is not in [0, 1]", self.cpu_share),
            ));
        }
        input_spec(
            input,
            OP,
            self.field(),
            |d| d == DType::Bytes,
            "encoded images",
        )?;
        let c = self.channels();
        let specs = [
            FieldSpec::new(self.field(), DType::Bytes, vec![]),
            FieldSpec::fixed(self.aux("box"), DType::I64, &[4]),
            FieldSpec::fixed(self.aux("flip"), DType::U8, &[2]),
            FieldSpec::fixed(self.aux("affine"), DType::F32, &[3, c]),
            FieldSpec::fixed(self.aux("decoded"), DType::U8, &[]),
            FieldSpec::fixed(self.aux("origin"), DType::Bytes, &[]),
        ];
        Ok(specs
            .into_iter()
            .fold(input.clone(), |s, f| with_field(&s, f)))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let field = self.field();
        let origin = {
            let t = &input.tensors[input.require(OP, field)?];
            let o = t.bytes_data().and_then(|d| d.origin(0));
            o.map_or_else(|| format!("element {}", ctx.element), |o| o.to_string())
        };
        // The header alone for the device's JPEGs; the whole CPU path for the rest.
        let planned = decode_field(OP, field, &input, ctx, |b| self.plan(b, ctx))?;
        let Some(planned) = planned else {
            return Ok(None);
        };
        let planned = match planned {
            Some(p) => p,
            None => match self.on_host(&input, ctx)? {
                Some((pixels, bx)) => Planned {
                    pixels: Some(pixels),
                    bx,
                },
                None => return Ok(None),
            },
        };
        let c = self.channels();
        let Affine {
            a,
            b0,
            bm,
            flip_horizontal,
            flip_vertical,
        } = compose_affine(&self.stages, c, ctx)?;
        let affine: Vec<f32> = a.iter().chain(&b0).chain(&bm).map(|&v| v as f32).collect();
        let bx: Vec<i64> = planned.bx.iter().map(|&v| v as i64).collect();
        let flips = [u8::from(flip_horizontal), u8::from(flip_vertical)];
        let decoded = [u8::from(planned.pixels.is_some())];
        let mut e = match planned.pixels {
            Some(pixels) => put(input, field, Tensor::scalar_bytes(pixels, None)),
            None => input,
        };
        e = put(
            e,
            &self.aux("box"),
            Tensor::from_slice(DType::I64, vec![4], &bx)?,
        );
        e = put(
            e,
            &self.aux("flip"),
            Tensor::from_slice(DType::U8, vec![2], &flips)?,
        );
        e = put(
            e,
            &self.aux("affine"),
            Tensor::from_slice(DType::F32, vec![3, c], &affine)?,
        );
        e = put(
            e,
            &self.aux("decoded"),
            Tensor::from_slice(DType::U8, vec![], &decoded)?,
        );
        let origin = Tensor::scalar_bytes(Bytes::from(origin.into_bytes()), None);
        Ok(Some(put(e, &self.aux("origin"), origin)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// The op list with its image chain (see the module docs) replaced by one [`DeviceImage`], and
/// that op; or why the list has no chain the device can take.
pub fn split(
    ops: &[Arc<dyn Op>],
    cpu_share: f64,
    auto_share: bool,
) -> std::result::Result<(Vec<Arc<dyn Op>>, DeviceImage), String> {
    let known: Vec<Option<Known>> = ops.iter().map(Known::of).collect();
    let start = known
        .iter()
        .position(|k| matches!(k, Some(Known::DecodeImage(_))))
        .ok_or("no decode_image in the map")?;
    let Some(Known::DecodeImage(decode)) = &known[start] else {
        return Err("no decode_image in the map".into());
    };
    let field = decode.field.clone();
    if !decode.feeds(&field, None) {
        return Err(format!(
            "decode_image writes '{}' beside '{field}'; the device decodes in place",
            decode.output.as_deref().unwrap_or_default()
        ));
    }
    if decode.dtype != DType::U8 || !matches!(decode.channels, 1 | 3) {
        return Err("decode_image must make uint8 with channels=1 or 3".into());
    }
    let crop = match known.get(start + 1) {
        Some(Some(Known::RandomResizedCrop(c)))
            if c.field == field
                && c.output.as_ref().is_none_or(|o| *o == field)
                && c.box_output.is_none() =>
        {
            c.clone()
        }
        _ => {
            return Err("decode_image is not followed by a random_resized_crop of its image".into())
        }
    };
    let mut stages = Vec::new();
    let mut end = start + 2;
    while let Some(stage) = ops
        .get(end)
        .and_then(Known::of)
        .and_then(|k| Stage::of(k, Some(&field)))
    {
        stages.push(stage.1);
        end += 1;
    }
    let mut chw = false;
    if let Some(op) = ops.get(end) {
        let any: &dyn std::any::Any = &**op;
        if let Some(l) = any.downcast_ref::<ChangeLayout>() {
            if l.field == field && l.output.as_ref().is_none_or(|o| *o == field) {
                chw = l.to == Layout::Chw;
                end += 1;
            }
        }
    }
    let device = DeviceImage {
        decode: decode.clone(),
        crop: crop.clone(),
        stages,
        chw,
        cpu_share,
        auto_share,
    };
    let mut out: Vec<Arc<dyn Op>> = ops[..start].to_vec();
    out.push(Arc::new(device.clone()));
    for op in &ops[end..] {
        let any: &dyn std::any::Any = &**op;
        if let Some(select) = any.downcast_ref::<Select>() {
            if select.fields.contains(&field) {
                // The fields beside the image travel with it to the device.
                let mut fields = select.fields.clone();
                fields.extend(AUX.iter().map(|s| device.aux(s)));
                out.push(Arc::new(Select { fields }));
                continue;
            }
        } else if op.fields().touches(&field) {
            return Err(format!(
                "{} after the chain uses '{field}', which is made on the device",
                op.name()
            ));
        }
        out.push(op.clone());
    }
    Ok((out, device))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::OpSpec;

    fn ops(specs: &[serde_json::Value]) -> Vec<Arc<dyn Op>> {
        specs
            .iter()
            .map(|s| OpSpec::from_json(s).and_then(OpSpec::build).unwrap())
            .collect()
    }

    fn w3(extra: serde_json::Value) -> Vec<serde_json::Value> {
        vec![
            json!({"op": "read_file", "field": "filename", "output": "image"}),
            json!({"op": "decode_image", "field": "image", "channels": 3}),
            json!({"op": "random_resized_crop", "field": "image", "height": 8, "width": 8,
                   "seed": 1}),
            json!({"op": "random_flip", "field": "image", "axis": "horizontal", "seed": 2}),
            json!({"op": "rescale", "field": "image", "divisor": 255.0}),
            json!({"op": "layout", "field": "image", "to": "chw"}),
            extra,
        ]
    }

    #[test]
    fn the_chain_becomes_one_op_and_its_fields_travel_through_select() {
        let (out, device) = split(
            &ops(&w3(json!({"op": "select", "fields": ["image"]}))),
            0.0,
            false,
        )
        .unwrap();
        let names: Vec<&str> = out.iter().map(|o| o.name()).collect();
        assert_eq!(names, ["read_file", "device_image", "select"]);
        assert!(device.chw && device.float_output() && device.stages.len() == 2);
        let select = OpSpec::of(&out[2]).unwrap();
        let OpSpec::Select(select) = select else {
            panic!("{select:?}")
        };
        assert_eq!(select.fields[1..], AUX.map(|s| format!("image_{s}")));
    }

    #[test]
    fn a_use_of_the_image_after_the_chain_is_refused() {
        let used = json!({"op": "cast", "field": "image", "dtype": "float16"});
        let err = split(&ops(&w3(used)), 0.0, false).map(|_| ()).unwrap_err();
        assert!(err.contains("cast after the chain uses 'image'"), "{err}");
        let no_crop = &w3(json!({"op": "select", "fields": ["image"]}))[..2];
        let err = split(&ops(no_crop), 0.0, false).map(|_| ()).unwrap_err();
        assert!(err.contains("random_resized_crop"), "{err}");
    }
}
