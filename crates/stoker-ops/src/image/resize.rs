//! `resize(field, height, width, method, antialias)`: resizes uint8 `[H, W, C]` images (or a
//! batch `[B, H, W, C]`), C = 1, 3 or 4, with `fast_image_resize`. Which reference each method
//! matches (golden-tested):
//!
//! - `bilinear` with `antialias` (the default): PIL's `BILINEAR` (the filter widens when
//!   shrinking), as torchvision's `Resize` on PIL images;
//! - `bilinear` without antialias: a fixed 2x2 kernel on half-pixel centres, like OpenCV's
//!   `INTER_LINEAR` and TensorFlow's `tf.image.resize(antialias=False)`;
//! - `bicubic`: PIL's `BICUBIC` (Catmull-Rom, a = -0.5), antialiased;
//! - `area`: PIL's `BOX`, each output pixel the mean of the source area it covers (TensorFlow's
//!   `area` for whole-number factors). Enlarging, it takes the source pixel under the output
//!   pixel's centre; at exact ties it may take the other neighbour than PIL (about 4 % of the
//!   pixels in the golden test);
//! - `nearest`: the source pixel under the output pixel's centre.

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::storage::Storage;
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "resize";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeMethod {
    #[default]
    Bilinear,
    Bicubic,
    Area,
    Nearest,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resize {
    pub field: String,
    pub height: usize,
    pub width: usize,
    #[serde(default)]
    pub method: ResizeMethod,
    #[serde(default = "yes")]
    pub antialias: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn yes() -> bool {
    true
}

impl ResizeMethod {
    fn algorithm(self, antialias: bool) -> ResizeAlg {
        match (self, antialias) {
            (ResizeMethod::Bilinear, true) => ResizeAlg::Convolution(FilterType::Bilinear),
            (ResizeMethod::Bilinear, false) => ResizeAlg::Interpolation(FilterType::Bilinear),
            (ResizeMethod::Bicubic, true) => ResizeAlg::Convolution(FilterType::CatmullRom),
            (ResizeMethod::Bicubic, false) => ResizeAlg::Interpolation(FilterType::CatmullRom),
            (ResizeMethod::Area, _) => ResizeAlg::Convolution(FilterType::Box),
            (ResizeMethod::Nearest, _) => ResizeAlg::Nearest,
        }
    }
}

/// A uint8 `h x w x c` image (C = 1, 3 or 4) resized to `out_h x out_w` with `method`,
/// antialiased.
pub fn resized_u8(
    op: &str,
    raw: &[u8],
    hwc: [usize; 3],
    out: [usize; 2],
    method: ResizeMethod,
) -> Result<Vec<u8>> {
    let mut dst = vec![0u8; out[0] * out[1] * hwc[2]];
    resize_u8(op, raw, hwc, None, &mut dst, out, method.algorithm(true))?;
    Ok(dst)
}

/// Resizes the box `[top, left, height, width]` (fractional allowed; `None` = the whole
/// image) of a uint8 `h x w x c` image into `dst` (`out_h x out_w x c` bytes).
#[allow(clippy::too_many_arguments)]
pub fn resize_u8(
    op: &str,
    raw: &[u8],
    [h, w, c]: [usize; 3],
    crop: Option<[f64; 4]>,
    dst: &mut [u8],
    [out_h, out_w]: [usize; 2],
    algorithm: ResizeAlg,
) -> Result<()> {
    let pixel = match c {
        1 => PixelType::U8,
        3 => PixelType::U8x3,
        4 => PixelType::U8x4,
        _ => {
            return Err(Error::invalid(
                op,
                format!("{c} channels; expected 1, 3 or 4"),
            ))
        }
    };
    let as_u32 = |v: usize| u32::try_from(v).map_err(|_| Error::invalid(op, "image too large"));
    let src = ImageRef::new(as_u32(w)?, as_u32(h)?, raw, pixel)
        .map_err(|e| Error::invalid(op, e.to_string()))?;
    let mut dst = Image::from_slice_u8(as_u32(out_w)?, as_u32(out_h)?, dst, pixel)
        .map_err(|e| Error::invalid(op, e.to_string()))?;
    let mut options = ResizeOptions::new().resize_alg(algorithm);
    if let Some([top, left, bh, bw]) = crop {
        options = options.crop(left, top, bw, bh);
    }
    RESIZER
        .with_borrow_mut(|resizer| resizer.resize(&src, &mut dst, &options))
        .map_err(|e| Error::invalid(op, e.to_string()))
}

thread_local! {
    /// One resizer per thread: it keeps its scratch buffers from one image to the next
    /// instead of allocating (and page-faulting) them again for each.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

impl Resize {
    fn check(&self) -> Result<()> {
        if self.height == 0 || self.width == 0 {
            return Err(Error::schema(OP, "height and width must be at least 1"));
        }
        Ok(())
    }
}

impl Op for Resize {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let what = "uint8 images (resize before convert_image_dtype)";
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, what)? else {
            return Ok(input.clone());
        };
        let r = f.shape.len();
        if !(r == 3 || r == 4) || !matches!(f.shape[r - 1], None | Some(1 | 3 | 4)) {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected [H, W, C] or [B, H, W, C] with C = 1, 3 or 4",
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
            FieldSpec::new(out_name(&self.field, &self.output), DType::U8, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let (raw, r) = (t.raw().filter(|_| t.dtype() == DType::U8), t.shape().len());
        let Some(raw) = raw.filter(|_| r == 3 || r == 4) else {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected uint8 [H, W, C] or [B, H, W, C], got {} {:?}",
                    t.dtype(),
                    t.shape()
                ),
            ));
        };
        let (h, w, c) = (t.shape()[r - 3], t.shape()[r - 2], t.shape()[r - 1]);
        let images: usize = t.shape()[..r - 3].iter().product();
        let (src_len, dst_len) = (h * w * c, self.height * self.width * c);
        let algorithm = self.method.algorithm(self.antialias);
        let mut storage: Storage = stoker_core::storage::shared_pool().take(images * dst_len);
        let out = storage.as_bytes_mut();
        for (k, dst) in out.chunks_exact_mut(dst_len.max(1)).enumerate() {
            let src = &raw[k * src_len..(k + 1) * src_len];
            let size = [self.height, self.width];
            resize_u8(OP, src, [h, w, c], None, dst, size, algorithm)?;
        }
        let mut shape = t.shape().to_vec();
        shape[r - 3] = self.height;
        shape[r - 2] = self.width;
        let out = Tensor::from_storage(DType::U8, shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
