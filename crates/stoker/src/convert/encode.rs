//! Elements as `tf.train.Example` records: how each field is stored (see
//! [`Stored`]) and the record of one element.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::{DType, Error, Result, Tensor};

use stoker_formats::example::{Example, Feature};
use stoker_ops::codecs::encode::{encode_jpeg, encode_png};
use stoker_ops::image::resize::{resized_u8, ResizeMethod};
use stoker_ops::record::parse_converted::{Stored, StoredField};

const OP: &str = "convert";

/// How image fields (uint8 `[H, W, C]`) are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Images {
    /// Their pixels, as they are.
    Raw,
    /// Re-encoded as PNG (lossless).
    Png,
    /// Re-encoded as JPEG at the conversion's quality.
    Jpeg,
}

impl Images {
    pub fn parse(name: &str) -> Result<Images> {
        match name.to_ascii_lowercase().as_str() {
            "raw" => Ok(Images::Raw),
            "png" => Ok(Images::Png),
            "jpeg" | "jpg" => Ok(Images::Jpeg),
            other => Err(Error::invalid(
                OP,
                format!("images: '{other}' is not one of raw, png, jpeg"),
            )),
        }
    }
}

/// How each field of `schema` is stored: int64 and float32 in their lists, strings as
/// strings, uint8 images (`[H, W, C]`) as `images` says, every other dtype as its raw bytes.
/// With `resize`, images get sizes that vary.
pub fn stored_fields(
    schema: &Schema,
    images: Images,
    resize: Option<usize>,
) -> Result<Vec<StoredField>> {
    if schema.dynamic {
        return Err(Error::invalid(
            OP,
            "the fields of the offline part are not known before it runs",
        ));
    }
    let fields: Vec<StoredField> = (schema.fields.iter())
        .map(|f| {
            let channels = match f.shape.as_slice() {
                [_, _, c] => *c,
                _ => None,
            };
            let image = is_image(f.dtype, &f.shape);
            let stored = match (f.dtype, images) {
                (DType::I64, _) => Stored::Int64,
                (DType::F32, _) => Stored::Float,
                (DType::Bytes, _) => Stored::Bytes,
                (_, Images::Png) if image && matches!(channels, Some(1..=4)) => Stored::Png,
                (_, Images::Jpeg) if image && matches!(channels, Some(1 | 3)) => Stored::Jpeg,
                _ => Stored::Raw,
            };
            let mut shape = f.shape.clone();
            if resize.is_some() && is_image(f.dtype, &f.shape) {
                shape = vec![None, None, channels];
            }
            StoredField {
                name: f.name.clone(),
                dtype: f.dtype,
                shape,
                stored,
            }
        })
        .collect();
    let any_image = schema.fields.iter().any(|f| is_image(f.dtype, &f.shape));
    if resize.is_some() && !any_image {
        return Err(Error::invalid(
            OP,
            format!(
                "resize: no field is a uint8 [H, W, C] image with 1, 3 or 4 channels (fields: {})",
                describe(schema)
            ),
        ));
    }
    if images != Images::Raw && !fields.iter().any(|f| f.stored.is_image()) {
        let kind = if images == Images::Png { "PNG" } else { "JPEG" };
        return Err(Error::invalid(
            OP,
            format!(
                "images: no field is a uint8 [H, W, C] image with a channel count {kind} holds \
                 (fields: {})",
                describe(schema)
            ),
        ));
    }
    // The names must not collide with the shape features.
    stoker_ops::record::parse_converted::ParseConverted {
        fields: fields.clone(),
        field: "record".into(),
    }
    .check_fields()?;
    Ok(fields)
}

/// A uint8 `[H, W, C]` image with 1, 3 or 4 channels (what the resize takes).
pub(crate) fn is_image(dtype: DType, shape: &[Option<usize>]) -> bool {
    dtype == DType::U8 && matches!(shape, [_, _, Some(1 | 3 | 4)])
}

/// `h x w` with its shorter side `n` (the longer scaled alike, rounded down, as
/// torchvision's `Resize(n)`), where the shorter side is longer than `n`.
fn resized(h: usize, w: usize, n: usize) -> Option<(usize, usize)> {
    if h.min(w) <= n {
        return None;
    }
    Some(if h <= w {
        (n, (n * w / h).max(1))
    } else {
        ((n * h / w).max(1), n)
    })
}

fn describe(schema: &Schema) -> String {
    (schema.fields.iter())
        .map(|f| {
            let dims: Vec<String> = (f.shape.iter())
                .map(|d| d.map_or("?".into(), |d| d.to_string()))
                .collect();
            format!("{} {} [{}]", f.name, f.dtype, dims.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Example record of `element` (whose fields are `fields`, in order), its images resized
/// to `resize` on their shorter side where they are longer, and JPEG-encoded at `jpeg_quality`.
pub fn encode(
    element: &Element,
    fields: &[StoredField],
    resize: Option<usize>,
    jpeg_quality: u8,
) -> Result<Vec<u8>> {
    let mut features = BTreeMap::new();
    for (f, t) in fields.iter().zip(&element.tensors) {
        let smaller;
        let t = match (resize, t.shape()) {
            (Some(n), &[h, w, c]) if is_image(t.dtype(), &f.shape) => match resized(h, w, n) {
                Some((rh, rw)) => {
                    let pixels = raw(t).map_err(|why| Error::invalid(OP, why))?;
                    let out = resized_u8(OP, pixels, [h, w, c], [rh, rw], ResizeMethod::Bilinear)?;
                    smaller = Tensor::from_slice(DType::U8, vec![rh, rw, c], &out)?;
                    &smaller
                }
                None => t,
            },
            _ => t,
        };
        let bad = |why: String| Error::invalid(OP, format!("field '{}': {why}", f.name));
        let fits = t.shape().len() == f.shape.len()
            && t.shape()
                .iter()
                .zip(&f.shape)
                .all(|(d, s)| s.is_none_or(|s| s == *d));
        if t.dtype() != f.dtype || !fits {
            return Err(bad(format!(
                "{} {:?} where the schema says {} {:?}",
                t.dtype(),
                t.shape(),
                f.dtype,
                f.shape
            )));
        }
        let feature = match f.stored {
            Stored::Int64 => Feature::int64s(typed::<i64>(t).map_err(bad)?.to_vec()),
            Stored::Float => Feature::floats(typed::<f32>(t).map_err(bad)?.to_vec()),
            Stored::Bytes => {
                let data = t.bytes_data().ok_or_else(|| bad("not strings".into()))?;
                Feature::bytes(data.values.clone())
            }
            Stored::Raw => Feature::bytes(vec![Bytes::copy_from_slice(raw(t).map_err(bad)?)]),
            Stored::Png | Stored::Jpeg => {
                let &[h, w, c] = t.shape() else {
                    return Err(bad(format!("shape {:?} is not [H, W, C]", t.shape())));
                };
                let pixels = raw(t).map_err(bad)?;
                let encoded = if f.stored == Stored::Png {
                    encode_png(pixels, (h, w, c), false)
                } else {
                    encode_jpeg(pixels, (h, w, c), jpeg_quality)
                };
                Feature::bytes(vec![Bytes::from(encoded.map_err(bad)?)])
            }
        };
        if let Some(name) = f.shape_feature() {
            let dims = t.shape().iter().map(|&d| d as i64).collect();
            features.insert(name, Feature::int64s(dims));
        }
        features.insert(f.name.clone(), feature);
    }
    Ok(Example::with_features(features).serialize())
}

fn typed<T: bytemuck::Pod>(t: &Tensor) -> Result<&[T], String> {
    t.typed::<T>()
        .ok_or_else(|| format!("{} values not readable", t.dtype()))
}

fn raw(t: &Tensor) -> Result<&[u8], String> {
    t.raw().ok_or_else(|| "no raw bytes".to_string())
}
