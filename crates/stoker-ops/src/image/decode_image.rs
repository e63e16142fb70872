//! `decode_image(field, channels)`: PNG, JPEG, GIF or BMP bytes → uint8 `[H, W, C]`, the
//! format sniffed from the first bytes (like `tf.io.decode_image`).
//!
//! - As TensorFlow decodes them: a CMYK (or YCCK) JPEG to RGB by TensorFlow's formula (see
//!   `codecs::jpeg`; not to one channel); a GIF's first frame, as `[H, W, 3]` (TensorFlow's
//!   `expand_animations=False`; channels 0 or 3); a BMP by TensorFlow's reader (`codecs::bmp`;
//!   channels 0, 3 or 4).
//! - `channels=0` keeps what the file stores (grey 1, grey+alpha 2, RGB 3, RGBA 4; palette PNGs
//!   are expanded); 1, 3 or 4 converts (grey is replicated, alpha dropped or made up, colour
//!   to grey as TensorFlow's decoders do). A JPEG refuses 4, as in TensorFlow.
//! - `dtype="uint8"` (default): 16-bit PNG samples are reduced to their high byte.
//!   `dtype="uint16"`, as `tf.io.decode_image(dtype=tf.uint16)`: 16-bit PNGs keep their
//!   samples; 8-bit PNGs are widened by 257 (libpng's expansion, 255 → 65535) and JPEGs by 256
//!   (`convert_image_dtype`'s scale). Channel conversion of 8-bit sources is done at 8 bits,
//!   then widened, as TF does.
//! - The header's size is checked against `max_pixels` before anything is allocated, so a
//!   damaged or hostile header cannot make the pipeline allocate gigabytes.
//! - The output is written into a pooled buffer (JPEG decodes straight into it).
//! - JPEG goes through `crate::codecs::jpeg`: zune-jpeg, or libjpeg-turbo with the `turbojpeg`
//!   feature.

use std::io::Cursor;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::storage::{shared_pool, Storage};
use stoker_core::{DType, Error, ErrorPolicy, Result, Tensor};

use crate::codecs::decoded::{check_size, Decoded};
use crate::codecs::jpeg::DctMethod;
use crate::codecs::png_file::{check_png_data, is_png, png_chunks, png_size, PNG_MAGIC};
use crate::codecs::png_window::{check_zlib_stream, Png8};
use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "decode_image";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeImage {
    pub field: String,
    /// 0: as stored; 1, 3 or 4: converted to that many channels.
    #[serde(default)]
    pub channels: u8,
    /// Images whose header claims more pixels are refused (default 2^28, e.g. 16384 x 16384).
    #[serde(default = "default_max_pixels")]
    pub max_pixels: u64,
    /// uint8 (default) or uint16.
    #[serde(default = "u8_dtype", skip_serializing_if = "is_u8")]
    pub dtype: DType,
    /// The JPEG inverse DCT: TensorFlow's default (the fast one) unless asked.
    #[serde(default, skip_serializing_if = "DctMethod::is_default")]
    pub dct_method: DctMethod,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn default_max_pixels() -> u64 {
    1 << 28
}

fn u8_dtype() -> DType {
    DType::U8
}

fn is_u8(d: &DType) -> bool {
    *d == DType::U8
}

/// Whether a PNG's IHDR declares 16-bit samples.
fn is_png16(data: &[u8]) -> bool {
    data.starts_with(PNG_MAGIC) && data.get(24) == Some(&16)
}

/// Whether a PNG's IHDR marks it interlaced (Adam7): its rows cannot be decoded top first.
fn png_interlaced(data: &[u8]) -> bool {
    data.get(28) == Some(&1)
}

fn format_name(data: &[u8]) -> &'static str {
    match data {
        [] => "an empty file (0 bytes)",
        [b'G', b'I', b'F', b'8', ..] => "a GIF that is neither GIF87a nor GIF89a",
        [b'R', b'I', b'F', b'F', _, _, _, _, b'W', b'E', b'B', b'P', ..] => "WebP",
        _ => "none of PNG, JPEG, GIF and BMP",
    }
}

/// What a PNG stores, before the decoder expands it: what TensorFlow's `decode_png` decides
/// its channels by (see [`tf_png_channels`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PngSource {
    indexed: bool,
    color: bool,
    alpha: bool,
    trns: bool,
    depth: u8,
}

impl PngSource {
    /// An 8-bit grey, grey + alpha, RGB or RGBA PNG without tRNS (what `Png8` takes).
    fn plain(channels: usize) -> PngSource {
        PngSource {
            indexed: false,
            color: channels >= 3,
            alpha: channels % 2 == 0,
            trns: false,
            depth: 8,
        }
    }

    fn of(info: &png::Info<'_>) -> PngSource {
        use png::ColorType as C;
        PngSource {
            indexed: info.color_type == C::Indexed,
            color: matches!(info.color_type, C::Rgb | C::Rgba | C::Indexed),
            alpha: matches!(info.color_type, C::GrayscaleAlpha | C::Rgba),
            trns: info.trns.is_some(),
            depth: info.bit_depth as u8,
        }
    }
}

fn decode_png(data: &[u8], max_pixels: u64) -> Result<(Decoded, PngSource), String> {
    decode_png_depth(data, max_pixels, false, None)
}

/// A PNG decoded to `u8` samples, or with `keep_16` its 16-bit samples as native `u16`. With
/// `rows`, only the top `rows` rows of a non-interlaced image are decoded (the result is that
/// high), and the rows below are not decoded; so that a damaged or truncated file still fails
/// as the whole decode would, every chunk's CRC is then checked up front (once: the decoder
/// skips its own checks), through IEND, and either way the zlib stream's checksum.
fn decode_png_depth(
    data: &[u8],
    max_pixels: u64,
    keep_16: bool,
    rows: Option<usize>,
) -> Result<(Decoded, PngSource), String> {
    // Check the claimed size before the decoder sees the file.
    let size = png_size(data);
    if let Some((w, h)) = size {
        check_size(w, h, max_pixels)?;
        check_png_data(data)?;
    }
    let top = rows
        .filter(|&r| size.is_some_and(|(_, h)| r < h) && !png_interlaced(data))
        .map(|r| r.max(1));
    if top.is_some() {
        png_chunks_intact(data)?;
    }
    let limits = png::Limits {
        bytes: usize::try_from(max_pixels.saturating_mul(8)).unwrap_or(usize::MAX),
    };
    let mut decoder = png::Decoder::new_with_limits(Cursor::new(data), limits);
    decoder.ignore_checksums(top.is_some());
    decoder.set_transformations(if keep_16 {
        png::Transformations::EXPAND
    } else {
        png::Transformations::EXPAND | png::Transformations::STRIP_16
    });
    let mut reader = decoder.read_info().map_err(|e| format!("PNG: {e}"))?;
    let source = PngSource::of(reader.info());
    let (width, height) = (reader.info().width as usize, reader.info().height as usize);
    check_size(width, height, max_pixels)?;
    let (color, depth) = reader.output_color_type();
    let channels = color.samples();
    let sample = if depth == png::BitDepth::Sixteen {
        2
    } else {
        1
    };
    let (height, mut pixels) = match top {
        Some(rows) => (rows, png_top_rows(&mut reader, rows)?),
        None => {
            let size = reader
                .output_buffer_size()
                .ok_or_else(|| "PNG: the image is too large".to_string())?;
            let mut pixels = shared_pool().take(size);
            let frame = reader
                .next_frame(pixels.as_bytes_mut())
                .map_err(|e| format!("PNG: {e}"))?;
            if frame.buffer_size() != height * width * channels * sample {
                return Err(format!(
                    "PNG: decoded {} bytes for {width}x{height}x{channels}",
                    frame.buffer_size()
                ));
            }
            (height, pixels)
        }
    };
    // The png crate checks the zlib stream's Adler-32 only while it still inflates rows, so
    // not always (and a top decode stops early): the stream is checked whole here, as zlib
    // checks it for libpng. Data damaged before its chunk's CRC was made shows only there.
    // An interlaced image's passes give each of their rows a filter byte: a little more.
    let row = reader.info().raw_row_length();
    let rows_hold = (row + 8).saturating_mul(reader.info().height as usize);
    let inflated = check_zlib_stream(data, rows_hold)?;
    if top.is_some() {
        // Decoded only down to the rows asked for: the data must still hold every row the
        // header claims, as a whole decode requires.
        let rows = row * reader.info().height as usize;
        if inflated < rows {
            return Err(format!(
                "PNG: image data ends at row {}",
                inflated / row.max(1)
            ));
        }
    }
    if sample == 2 {
        // PNG stores big-endian samples.
        for s in pixels.as_bytes_mut().chunks_exact_mut(2) {
            let v = u16::from_be_bytes([s[0], s[1]]);
            s.copy_from_slice(&v.to_ne_bytes());
        }
    }
    Ok((
        Decoded {
            height,
            width,
            channels,
            pixels,
        },
        source,
    ))
}

/// An 8-bit PNG's pixels, as the png crate expands them (a palette to RGB, a tRNS chunk to an
/// alpha channel), with the `wanted` channels TensorFlow's `decode_png` gives (libpng as its
/// `png_io.cc` sets it up):
/// - `wanted` 0: a palette's 3 channels (4 with tRNS), else the channels the PNG stores (a
///   tRNS chunk of a grey or RGB PNG is not an alpha channel);
/// - alpha from the PNG's alpha or tRNS, else `2^bit_depth - 1` (libpng's filler: 15 for a
///   4-bit palette);
/// - grey from colour by libpng's integer weights for TensorFlow's 0.299 and 0.587, truncated
///   (`(9797 r + 19234 g + 3737 b) >> 15`; a grey pixel stays as it is).
pub(crate) fn tf_png_channels(img: Decoded, source: &PngSource, wanted: usize) -> Decoded {
    let target = match wanted {
        0 if source.indexed => 3 + usize::from(source.trns),
        0 => (if source.color { 3 } else { 1 }) + usize::from(source.alpha),
        w => w,
    };
    let has = img.channels;
    let keeps_alpha = source.alpha || source.trns;
    if target == has && (keeps_alpha || has % 2 == 1) {
        return img;
    }
    let filler = ((1u32 << source.depth) - 1) as u8;
    let n = img.height * img.width;
    let mut out = shared_pool().take(n * target);
    for (d, s) in out
        .as_bytes_mut()
        .chunks_exact_mut(target)
        .zip(img.pixels.as_bytes().chunks_exact(has))
    {
        let (rgb, alpha) = match *s {
            [g] => ([g, g, g], None),
            [g, a] => ([g, g, g], Some(a)),
            [r, g, b] => ([r, g, b], None),
            [r, g, b, a] => ([r, g, b], Some(a)),
            _ => ([0, 0, 0], None),
        };
        let alpha = alpha.filter(|_| keeps_alpha).unwrap_or(filler);
        let grey = || {
            let [r, g, b] = rgb;
            if r == g && r == b {
                r
            } else {
                ((9797 * u32::from(r) + 19234 * u32::from(g) + 3737 * u32::from(b)) >> 15) as u8
            }
        };
        match target {
            1 => d[0] = grey(),
            2 => d.copy_from_slice(&[grey(), alpha]),
            3 => d.copy_from_slice(&rgb),
            _ => d.copy_from_slice(&[rgb[0], rgb[1], rgb[2], alpha]),
        }
    }
    Decoded {
        channels: target,
        pixels: out,
        ..img
    }
}

/// The top `rows` rows of a non-interlaced PNG, read row by row.
fn png_top_rows(reader: &mut png::Reader<Cursor<&[u8]>>, rows: usize) -> Result<Storage, String> {
    let line = reader
        .output_line_size(reader.info().width)
        .ok_or_else(|| "PNG: the image is too large".to_string())?;
    let mut pixels = shared_pool().take(line * rows);
    for (y, row) in pixels.as_bytes_mut().chunks_exact_mut(line).enumerate() {
        if reader
            .read_row(row)
            .map_err(|e| format!("PNG: {e}"))?
            .is_none()
        {
            return Err(format!("PNG: image data ends at row {y}"));
        }
    }
    Ok(pixels)
}

/// Checks that `data` is a sequence of whole PNG chunks with correct CRCs, ending with IEND:
/// what a full decode would have noticed in the part of the file it was not asked to decode.
pub(crate) fn png_chunks_intact(data: &[u8]) -> Result<(), String> {
    png_chunks(data).map(|_| ())
}

/// 16-bit pixels converted to `wanted` channels (0: as they are), like [`convert`].
fn convert16(img: Decoded, wanted: usize) -> Decoded {
    if wanted == 0 || wanted == img.channels {
        return img;
    }
    let n = img.height * img.width;
    let mut out = shared_pool().take(n * wanted * 2);
    let src: &[u16] = bytemuck::cast_slice(img.pixels.as_bytes());
    let dst: &mut [u16] = bytemuck::cast_slice_mut(out.as_bytes_mut());
    for (d, s) in dst
        .chunks_exact_mut(wanted)
        .zip(src.chunks_exact(img.channels))
    {
        let (rgb, alpha) = match *s {
            [g] => ([g, g, g], u16::MAX),
            [g, a] => ([g, g, g], a),
            [r, g, b] => ([r, g, b], u16::MAX),
            [r, g, b, a] => ([r, g, b], a),
            _ => ([0, 0, 0], u16::MAX),
        };
        match wanted {
            1 if img.channels > 2 => d[0] = grey16(rgb),
            1 => d[0] = rgb[0],
            3 => d.copy_from_slice(&rgb),
            _ => {
                d[..3].copy_from_slice(&rgb);
                d[3] = alpha;
            }
        }
    }
    Decoded {
        channels: wanted,
        pixels: out,
        ..img
    }
}

/// libpng's grey of a 16-bit RGB pixel, for TensorFlow's weights 0.299 and 0.587: integer
/// weights in 1/32768 (9797, 19234 and the rest, 3737), the sum rounded (its 8-bit form
/// truncates); a grey pixel as it is.
fn grey16([r, g, b]: [u16; 3]) -> u16 {
    if r == g && r == b {
        r
    } else {
        ((9797 * u32::from(r) + 19234 * u32::from(g) + 3737 * u32::from(b) + 16384) >> 15) as u16
    }
}

/// A 16-bit colour PNG asked for one 8-bit channel: libpng makes the grey of the 16-bit
/// samples, then keeps its high byte (TensorFlow's order); `rows` as [`decode_png_depth`]'s.
fn png16_grey(data: &[u8], max_pixels: u64, rows: Option<usize>) -> Result<Decoded, String> {
    let (img, _) = decode_png_depth(data, max_pixels, true, rows)?;
    let grey = convert16(img, 1);
    let mut out = shared_pool().take(grey.height * grey.width);
    let src: &[u16] = bytemuck::cast_slice(grey.pixels.as_bytes());
    for (d, s) in out.as_bytes_mut().iter_mut().zip(src) {
        *d = (s >> 8) as u8;
    }
    Ok(Decoded {
        pixels: out,
        ..grey
    })
}

/// Whether a PNG is 16-bit colour (RGB or RGBA) and one channel is asked for.
fn is_png16_colour_to_grey(data: &[u8], channels: u8) -> bool {
    channels == 1 && is_png16(data) && matches!(data.get(25), Some(2 | 6))
}

/// 8-bit pixels as 16-bit ones, each multiplied by `factor`.
fn widen(img: Decoded, factor: u16) -> Decoded {
    let src = img.pixels.as_bytes();
    let mut out = shared_pool().take(src.len() * 2);
    let dst: &mut [u16] = bytemuck::cast_slice_mut(out.as_bytes_mut());
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = u16::from(s) * factor;
    }
    Decoded { pixels: out, ..img }
}

/// ITU-R 601 luma, rounded: what TensorFlow's `rgb_to_grayscale` computes on uint8.
fn luma(r: u8, g: u8, b: u8) -> u8 {
    let y = 0.2989 * f32::from(r) + 0.587 * f32::from(g) + 0.114 * f32::from(b);
    y.round().clamp(0.0, 255.0) as u8
}

pub(crate) fn convert(img: Decoded, wanted: usize) -> Decoded {
    if wanted == 0 || wanted == img.channels {
        return img;
    }
    let n = img.height * img.width;
    let mut out = shared_pool().take(n * wanted);
    let src = img.pixels.as_bytes();
    for (d, s) in out
        .as_bytes_mut()
        .chunks_exact_mut(wanted)
        .zip(src.chunks_exact(img.channels))
    {
        let (rgb, alpha) = match *s {
            [g] => ([g, g, g], 255),
            [g, a] => ([g, g, g], a),
            [r, g, b] => ([r, g, b], 255),
            [r, g, b, a] => ([r, g, b], a),
            _ => ([0, 0, 0], 255),
        };
        match wanted {
            1 => {
                d[0] = if img.channels <= 2 {
                    rgb[0]
                } else {
                    luma(rgb[0], rgb[1], rgb[2])
                }
            }
            3 => d.copy_from_slice(&rgb),
            _ => {
                d[..3].copy_from_slice(&rgb);
                d[3] = alpha;
            }
        }
    }
    Decoded {
        channels: wanted,
        pixels: out,
        ..img
    }
}

impl DecodeImage {
    /// A PNG decoded only down to row `rows` (whole where it is interlaced or not that high),
    /// with the output channels; for the ops fused with this one.
    pub(crate) fn decode_png_top(&self, data: &[u8], rows: usize) -> Result<Decoded, String> {
        // The PNGs the whole decode takes through `Png8` go through it here too: both then
        // check the same things (the zlib stream's checksum), whatever the path.
        if let Some(png) = Png8::open(data, 0, self.max_pixels)? {
            let rows = rows.clamp(1, png.height);
            let line = png.width * png.channels;
            let mut pixels = shared_pool().take(rows * line);
            let out = pixels.as_bytes_mut();
            png.window([0, 0, rows, png.width], |y, px| {
                out[y * line..(y + 1) * line].copy_from_slice(px);
            })?;
            let img = Decoded {
                height: rows,
                width: png.width,
                channels: png.channels,
                pixels,
            };
            let source = PngSource::plain(png.channels);
            return Ok(tf_png_channels(img, &source, usize::from(self.channels)));
        }
        if is_png16_colour_to_grey(data, self.channels) {
            return png16_grey(data, self.max_pixels, Some(rows));
        }
        let (img, source) = decode_png_depth(data, self.max_pixels, false, Some(rows))?;
        Ok(tf_png_channels(img, &source, usize::from(self.channels)))
    }

    pub(crate) fn decode(&self, data: &[u8]) -> Result<Decoded, String> {
        let img = if is_png(data) {
            if is_png16_colour_to_grey(data, self.channels) {
                return png16_grey(data, self.max_pixels, None);
            }
            // Decoded as stored, then given TensorFlow's channels
            let (img, source) = match Png8::open(data, 0, self.max_pixels)? {
                Some(png) => (png.decode()?, PngSource::plain(png.channels)),
                None => decode_png(data, self.max_pixels)?,
            };
            return Ok(tf_png_channels(img, &source, usize::from(self.channels)));
        } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            crate::codecs::jpeg::decode(data, self.channels, self.max_pixels, 8, self.dct_method)?
        } else if crate::codecs::gif::is_gif(data) {
            crate::codecs::gif::decode_first_frame(data, self.channels, self.max_pixels)?
        } else if crate::codecs::bmp::is_bmp(data) {
            crate::codecs::bmp::decode(data, self.channels, self.max_pixels)?
        } else {
            return Err(format!(
                "unsupported image format: {}; stoker decodes PNG, JPEG, GIF and BMP",
                format_name(data)
            ));
        };
        Ok(convert(img, usize::from(self.channels)))
    }

    /// The image with the output dtype's samples (1 or 2 bytes each).
    fn decode_as_dtype(&self, data: &[u8]) -> Result<Decoded, String> {
        if self.dtype != DType::U16 {
            return self.decode(data);
        }
        if is_png16(data) {
            let (img, _) = decode_png_depth(data, self.max_pixels, true, None)?;
            return Ok(convert16(img, usize::from(self.channels)));
        }
        let factor = if data.starts_with(PNG_MAGIC) {
            257
        } else {
            256
        };
        Ok(widen(self.decode(data)?, factor))
    }
}

impl Op for DecodeImage {
    fn work(&self) -> stoker_core::op::Work {
        stoker_core::op::Work::DecodeImage
    }

    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if !matches!(self.dtype, DType::U8 | DType::U16) {
            return Err(Error::schema(
                OP,
                format!("dtype must be uint8 or uint16, not {}", self.dtype),
            ));
        }
        if !matches!(self.channels, 0 | 1 | 3 | 4) {
            return Err(Error::schema(
                OP,
                format!("channels must be 0, 1, 3 or 4, not {}", self.channels),
            ));
        }
        let Some(f) = input_spec(
            input,
            OP,
            &self.field,
            |d| d == DType::Bytes,
            "encoded images (string)",
        )?
        else {
            return Ok(input.clone());
        };
        if !f.shape.is_empty() {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; decode single images, before batching",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        let c = (self.channels != 0).then_some(usize::from(self.channels));
        Ok(with_field(
            input,
            FieldSpec::new(
                out_name(&self.field, &self.output),
                self.dtype,
                vec![None, None, c],
            ),
        ))
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let Some(img) = decode_field(OP, &self.field, &input, ctx, |b| self.decode_as_dtype(b))?
        else {
            return Ok(None);
        };
        let shape = vec![img.height, img.width, img.channels];
        let out = Tensor::from_storage(self.dtype, shape, img.pixels)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// Runs `decode` on the one encoded image in `field` of `input` (for `op` and the ops fused
/// with `decode_image`). A failure is an error naming the file and record, or under the skip
/// policy a counted skip (`None`); damage the decoder recovered from is counted as a warning.
pub(crate) fn decode_field<T>(
    op: &str,
    field: &str,
    input: &Element,
    ctx: &OpCtx<'_>,
    decode: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<Option<T>> {
    let t = &input.tensors[input.require(op, field)?];
    let data = t
        .bytes_data()
        .filter(|_| t.shape().is_empty())
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!("field '{field}' must be one encoded image (a scalar string)"),
            )
        })?;
    let bytes = data.values.first().map(|b| b.as_ref()).unwrap_or_default();
    let decoded = decode(bytes);
    if let Some(warning) = crate::codecs::jpeg::take_warning() {
        let at = data
            .origin(0)
            .map_or_else(|| format!("element {}", ctx.element), |o| o.to_string());
        ctx.stats
            .add_warning(format!("{op}: {at}: {warning} (the image was used)"));
    }
    match decoded {
        Ok(v) => Ok(Some(v)),
        Err(reason) => {
            let err = Error::invalid_record(OP, data.origin(0), 0, reason);
            if ctx.policy == ErrorPolicy::Skip {
                ctx.skip(err.to_string());
                Ok(None)
            } else {
                Err(err)
            }
        }
    }
}

impl DecodeImage {
    /// Whether an op on `field` writing `output` (None: in place) takes this decode's image
    /// and replaces it, so that the two can be one op.
    pub(crate) fn feeds(&self, field: &str, output: Option<&str>) -> bool {
        let decoded = out_name(&self.field, &self.output);
        field == decoded && output.is_none_or(|o| o == decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_bytes(
        w: u32,
        h: u32,
        color: png::ColorType,
        depth: png::BitDepth,
        data: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(color);
        enc.set_depth(depth);
        enc.write_header().unwrap().write_image_data(data).unwrap();
        out
    }

    #[test]
    fn a_png_whose_data_cannot_hold_its_size_is_refused_before_decoding() {
        let small = png_bytes(
            4,
            4,
            png::ColorType::Rgba,
            png::BitDepth::Sixteen,
            &[7; 128],
        );
        assert_eq!(check_png_data(&small), Ok(()));
        // The same file claiming 16384 x 16384: 2 GiB of samples from a few bytes.
        let mut big = small.clone();
        big[16..24].copy_from_slice(&[0, 0, 0x40, 0, 0, 0, 0x40, 0]);
        let crc = crc32fast::hash(&big[12..29]).to_be_bytes();
        big[29..33].copy_from_slice(&crc);
        for err in [
            check_png_data(&big).unwrap_err(),
            op(0).decode(&big).unwrap_err(),
            op(0).decode_png_top(&big, 512).unwrap_err(),
        ] {
            assert!(
                err.contains("16384x16384") && err.contains("too few"),
                "{err}"
            );
        }
    }

    fn op(channels: u8) -> DecodeImage {
        DecodeImage {
            field: "x".into(),
            channels,
            max_pixels: default_max_pixels(),
            dtype: DType::U8,
            dct_method: Default::default(),
            output: None,
        }
    }

    #[test]
    fn png_kinds_and_channel_conversion() {
        let rgb: Vec<u8> = (0..2 * 3 * 3).map(|v| v as u8 * 10).collect();
        let img = op(0)
            .decode(&png_bytes(
                2,
                3,
                png::ColorType::Rgb,
                png::BitDepth::Eight,
                &rgb,
            ))
            .unwrap();
        assert_eq!((img.height, img.width, img.channels), (3, 2, 3));
        assert_eq!(img.pixels.as_bytes(), &rgb[..]);
        let grey = [0u8, 100, 200, 255];
        let g = op(3)
            .decode(&png_bytes(
                2,
                2,
                png::ColorType::Grayscale,
                png::BitDepth::Eight,
                &grey,
            ))
            .unwrap();
        assert_eq!(g.channels, 3);
        assert_eq!(&g.pixels.as_bytes()[3..6], &[100, 100, 100]);
        let wide: Vec<u8> = [0x12u8, 0x34, 0xAB, 0xCD].to_vec();
        let w16 = op(0)
            .decode(&png_bytes(
                2,
                1,
                png::ColorType::Grayscale,
                png::BitDepth::Sixteen,
                &wide,
            ))
            .unwrap();
        assert_eq!(
            w16.pixels.as_bytes(),
            &[0x12, 0xAB],
            "16-bit samples keep their high byte"
        );
        let rgba = op(4)
            .decode(&png_bytes(
                1,
                1,
                png::ColorType::Rgb,
                png::BitDepth::Eight,
                &[1, 2, 3],
            ))
            .unwrap();
        assert_eq!(rgba.pixels.as_bytes(), &[1, 2, 3, 255]);
    }

    #[test]
    fn bad_input_is_a_message_not_a_panic() {
        let good = png_bytes(4, 4, png::ColorType::Rgb, png::BitDepth::Eight, &[7u8; 48]);
        for cut in [0, 4, 8, 20, good.len() - 10] {
            assert!(op(0).decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert!(op(0).decode(b"GIF89a....").unwrap_err().contains("GIF"));
        assert!(op(0).decode(b"").unwrap_err().contains("empty file"));
        assert!(op(0).decode(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0]).is_err());
    }

    #[test]
    fn top_rows_equal_the_whole_decode_and_the_rest_is_still_checked() {
        let (w, h) = (5u32, 9u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|v| (v * 7 % 251) as u8).collect();
        let file = png_bytes(w, h, png::ColorType::Rgb, png::BitDepth::Eight, &rgb);
        let max = default_max_pixels();
        let (top, _) = decode_png_depth(&file, max, false, Some(4)).unwrap();
        assert_eq!((top.height, top.width, top.channels), (4, 5, 3));
        assert_eq!(top.pixels.as_bytes(), &rgb[..4 * 5 * 3]);
        // Asking for every row (or more) is the whole decode.
        let (whole, _) = decode_png_depth(&file, max, false, Some(20)).unwrap();
        assert_eq!(whole.pixels.as_bytes(), &rgb[..]);

        assert!(png_chunks_intact(&file).is_ok());
        let mut flipped = file.clone();
        let at = flipped.len() - 17; // the last byte of IDAT's data
        flipped[at] ^= 1;
        let err = png_chunks_intact(&flipped).unwrap_err();
        assert!(err.contains("CRC error in the IDAT chunk"), "{err}");
        let err = png_chunks_intact(&file[..file.len() - 12]).unwrap_err();
        assert!(err.contains("no IEND chunk"), "{err}");
        let err = png_chunks_intact(&file[..file.len() - 14]).unwrap_err();
        assert!(err.contains("runs past the end"), "{err}");
    }

    #[test]
    fn huge_headers_are_refused_before_allocating() {
        // A valid IHDR claiming 100000 x 100000 pixels, and nothing else.
        let mut data = PNG_MAGIC.to_vec();
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend_from_slice(&100_000u32.to_be_bytes());
        ihdr.extend_from_slice(&100_000u32.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        data.extend_from_slice(&13u32.to_be_bytes());
        data.extend_from_slice(&ihdr);
        data.extend_from_slice(&crc32(&ihdr).to_be_bytes());
        let err = op(0).decode(&data).unwrap_err();
        assert!(
            err.contains("over the limit") || err.contains("limit"),
            "{err}"
        );
    }

    #[test]
    fn pngs_the_window_decoder_takes_are_decoded_there() {
        use crate::codecs::png_window::tests::{png, raw_rows, reference};
        let op = |channels| DecodeImage {
            field: "x".into(),
            channels,
            max_pixels: 1 << 20,
            dtype: stoker_core::DType::U8,
            dct_method: Default::default(),
            output: None,
        };
        let raw = raw_rows(8, 4, 3, &[1, 4]);
        let data = png(8, 4, 2, &raw, 1000);
        let img = op(3).decode(&data).unwrap();
        assert_eq!(img.pixels.as_bytes(), &reference(&data)[..]);
        // Row 2's filter type is unknown (CRCs intact): this decoder names the row, also where
        // channels are converted (it decodes them as stored, then converts).
        let mut bad = raw.clone();
        bad[2 * (1 + 8 * 3)] = 9;
        let data = png(8, 4, 2, &bad, 1000);
        for channels in [3, 4, 1] {
            let err = op(channels).decode(&data).err().unwrap();
            assert_eq!(err, "PNG: unknown filter type 9 in row 2");
        }
        assert_eq!(op(4).decode(&png(8, 4, 2, &raw, 1000)).unwrap().channels, 4);
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xFFFF_FFFFu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
}
