//! JPEG decoding behind one interface, with two backends:
//!
//! - **zune-jpeg** (default, pure Rust, SIMD): luma equals libjpeg's accurate IDCT to ±1;
//!   colour differs from libjpeg's by a few levels where chroma is subsampled (different
//!   chroma upsampling). No DCT-domain scaling: `scale_eighths` below 8 is ignored.
//! - **libjpeg-turbo** (cargo feature `turbojpeg`, built from source: needs cmake and nasm):
//!   libjpeg's own output (accurate integer IDCT, smooth chroma upsampling), and DCT-domain
//!   downscaling by 1/8 … 8/8, which decodes a large image at a fraction of the cost.
//!
//! The header is read and its size checked against `max_pixels` before any pixel buffer is
//! allocated.

use crate::decode_image::{check_size, Decoded};

/// The backend this build uses.
#[cfg(not(feature = "turbojpeg"))]
pub const BACKEND: &str = "zune-jpeg";
#[cfg(feature = "turbojpeg")]
pub const BACKEND: &str = "libjpeg-turbo";

/// Whether `decode` honours `scale_eighths < 8`.
pub const DCT_SCALING: bool = cfg!(feature = "turbojpeg");

/// Width, height and whether the file stores grey only.
pub fn header(data: &[u8]) -> Result<(usize, usize, bool), String> {
    imp::header(data)
}

/// Decodes to `wanted` channels (0: as stored; grey files decode to grey and are converted by
/// the caller), scaled by `scale_eighths / 8` in the DCT domain when the backend can.
pub(crate) fn decode(
    data: &[u8],
    wanted: u8,
    max_pixels: u64,
    scale_eighths: u8,
) -> Result<Decoded, String> {
    let (width, height, grey) = header(data)?;
    check_size(width, height, max_pixels)?;
    let channels = match (wanted, grey) {
        (_, true) | (1, _) => 1,
        (4, _) => 4,
        _ => 3,
    };
    imp::decode(data, width, height, channels, scale_eighths.clamp(1, 8))
}

#[cfg(not(feature = "turbojpeg"))]
mod imp {
    use stoker_core::storage::shared_pool;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    use zune_jpeg::JpegDecoder;

    use crate::decode_image::Decoded;

    fn options() -> DecoderOptions {
        DecoderOptions::default()
            .set_max_width(65535)
            .set_max_height(65535)
    }

    pub fn header(data: &[u8]) -> Result<(usize, usize, bool), String> {
        let mut probe = JpegDecoder::new_with_options(data, options());
        probe.decode_headers().map_err(|e| format!("JPEG: {e:?}"))?;
        let info = probe.info().ok_or_else(|| "JPEG: no header".to_string())?;
        let grey = matches!(probe.get_input_colorspace(), Some(ColorSpace::Luma));
        Ok((usize::from(info.width), usize::from(info.height), grey))
    }

    pub fn decode(
        data: &[u8],
        width: usize,
        height: usize,
        channels: usize,
        _scale_eighths: u8,
    ) -> Result<Decoded, String> {
        let space = match channels {
            1 => ColorSpace::Luma,
            4 => ColorSpace::RGBA,
            _ => ColorSpace::RGB,
        };
        let mut decoder =
            JpegDecoder::new_with_options(data, options().jpeg_set_out_colorspace(space));
        decoder
            .decode_headers()
            .map_err(|e| format!("JPEG: {e:?}"))?;
        if decoder.get_output_colorspace() != Some(space)
            || decoder.output_buffer_size() != Some(height * width * channels)
        {
            return Err(format!(
                "JPEG: cannot decode this file's colour space ({:?}) to {space:?}",
                decoder.get_input_colorspace()
            ));
        }
        let mut pixels = shared_pool().take(height * width * channels);
        decoder
            .decode_into(pixels.as_bytes_mut())
            .map_err(|e| format!("JPEG: {e:?}"))?;
        Ok(Decoded {
            height,
            width,
            channels,
            pixels,
        })
    }
}

#[cfg(feature = "turbojpeg")]
mod imp {
    use std::cell::RefCell;

    use stoker_core::storage::shared_pool;
    use turbojpeg::{Colorspace, Decompressor, Image, PixelFormat, ScalingFactor};

    use crate::decode_image::Decoded;

    thread_local! {
        // One libjpeg-turbo handle per worker thread: creating one costs more than a small decode.
        static DECOMPRESSOR: RefCell<Option<Decompressor>> = const { RefCell::new(None) };
    }

    fn with_decompressor<T>(
        f: impl FnOnce(&mut Decompressor) -> Result<T, String>,
    ) -> Result<T, String> {
        DECOMPRESSOR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(Decompressor::new().map_err(|e| format!("JPEG: {e}"))?);
            }
            match slot.as_mut() {
                Some(d) => f(d),
                None => Err("JPEG: no decompressor".to_string()),
            }
        })
    }

    pub fn header(data: &[u8]) -> Result<(usize, usize, bool), String> {
        with_decompressor(|d| {
            let h = d.read_header(data).map_err(|e| format!("JPEG: {e}"))?;
            Ok((h.width, h.height, h.colorspace == Colorspace::Gray))
        })
    }

    pub fn decode(
        data: &[u8],
        width: usize,
        height: usize,
        channels: usize,
        scale_eighths: u8,
    ) -> Result<Decoded, String> {
        let format = match channels {
            1 => PixelFormat::GRAY,
            4 => PixelFormat::RGBA,
            _ => PixelFormat::RGB,
        };
        with_decompressor(|d| {
            let factor = ScalingFactor::new(usize::from(scale_eighths), 8);
            d.set_scaling_factor(factor)
                .map_err(|e| format!("JPEG: {e}"))?;
            let (w, h) = (factor.scale(width), factor.scale(height));
            let mut pixels = shared_pool().take(h * w * channels);
            let image = Image {
                pixels: pixels.as_bytes_mut(),
                width: w,
                pitch: w * channels,
                height: h,
                format,
            };
            d.decompress(data, image)
                .map_err(|e| format!("JPEG: {e}"))?;
            Ok(Decoded {
                height: h,
                width: w,
                channels,
                pixels,
            })
        })
    }
}
