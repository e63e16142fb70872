//! JPEG decoding behind one interface, with two backends:
//!
//! - **libjpeg-turbo** (cargo feature `turbojpeg`, on by default; built from source, which
//!   needs cmake and nasm): libjpeg's own output (accurate integer IDCT, smooth chroma
//!   upsampling), region decoding, and DCT-domain downscaling by 1/8 … 8/8, which decodes a
//!   large image at a fraction of the cost. Faster than zune-jpeg on W3's files (see README).
//! - **zune-jpeg** (`--no-default-features`; pure Rust, SIMD): luma equals libjpeg's accurate
//!   IDCT to ±1; colour differs from libjpeg's by a few levels where chroma is subsampled
//!   (different chroma upsampling). No DCT-domain scaling: `scale_eighths` below 8 is ignored.
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

/// Decodes only what the box `[top, left, height, width]` (in the full image) needs, scaled
/// by `scale_eighths / 8` where the backend can: with libjpeg-turbo, the iMCU columns and the
/// rows around the box (rows above and below are entropy-decoded but not reconstructed), as
/// TensorFlow's `decode_and_crop_jpeg` does. Returns the decoded part and the box within it
/// (fractional: the scaled box's exact position).
pub(crate) fn decode_region(
    data: &[u8],
    wanted: u8,
    max_pixels: u64,
    scale_eighths: u8,
    bx: [usize; 4],
) -> Result<(Decoded, [f64; 4]), String> {
    let (width, height, grey) = header(data)?;
    check_size(width, height, max_pixels)?;
    let channels = match (wanted, grey) {
        (_, true) | (1, _) => 1,
        (4, _) => 4,
        _ => 3,
    };
    imp::decode_region(
        data,
        [width, height, channels],
        scale_eighths.clamp(1, 8),
        bx,
    )
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

    /// zune-jpeg decodes whole images: the box stays where it is.
    pub fn decode_region(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        scale_eighths: u8,
        bx: [usize; 4],
    ) -> Result<(Decoded, [f64; 4]), String> {
        let img = decode(data, width, height, channels, scale_eighths)?;
        Ok((img, bx.map(|v| v as f64)))
    }
}

#[cfg(feature = "turbojpeg")]
mod imp {
    use std::cell::RefCell;

    use stoker_core::storage::shared_pool;
    use turbojpeg::{libc, raw, Colorspace, Decompressor, Image, PixelFormat, ScalingFactor};

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

    /// A TurboJPEG 3 decompressor used through the raw API, for what the `turbojpeg` crate
    /// does not expose: cropping regions (`tj3SetCroppingRegion`).
    struct RawDecompressor(raw::tjhandle);

    impl RawDecompressor {
        fn new() -> Result<RawDecompressor, String> {
            // SAFETY: tj3Init has no preconditions; a null result is checked below.
            let handle = unsafe { raw::tj3Init(raw::TJINIT_TJINIT_DECOMPRESS as libc::c_int) };
            if handle.is_null() {
                return Err("JPEG: cannot create a libjpeg-turbo decompressor".into());
            }
            Ok(RawDecompressor(handle))
        }

        /// The last error's message, or `what` if there is none.
        fn error(&self, what: &str) -> String {
            // SAFETY: the handle is valid (created by tj3Init, destroyed only in Drop);
            // tj3GetErrorStr returns a NUL-terminated string owned by the handle, copied here
            // before any other call on it.
            let message = unsafe {
                let p = raw::tj3GetErrorStr(self.0);
                (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            };
            format!("JPEG: {}", message.unwrap_or_else(|| what.to_string()))
        }

        fn get(&self, param: raw::TJPARAM) -> libc::c_int {
            // SAFETY: valid handle; tj3Get only reads the instance's parameters.
            unsafe { raw::tj3Get(self.0, param as libc::c_int) }
        }
    }

    impl Drop for RawDecompressor {
        fn drop(&mut self) {
            // SAFETY: the handle came from tj3Init and is destroyed exactly once, here.
            unsafe { raw::tj3Destroy(self.0) }
        }
    }

    thread_local! {
        static RAW: RefCell<Option<RawDecompressor>> = const { RefCell::new(None) };
    }

    /// The whole image at scale k/8, and the box mapped into it.
    fn whole(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        k: usize,
        bx: [usize; 4],
    ) -> Result<(Decoded, [f64; 4]), String> {
        let img = decode(data, width, height, channels, k as u8)?;
        let (sy, sx) = (
            img.height as f64 / height as f64,
            img.width as f64 / width as f64,
        );
        let inner = [
            bx[0] as f64 * sy,
            bx[1] as f64 * sx,
            (bx[2] as f64 * sy).min(img.height as f64 - bx[0] as f64 * sy),
            (bx[3] as f64 * sx).min(img.width as f64 - bx[1] as f64 * sx),
        ];
        Ok((img, inner))
    }

    /// `TJSCALED`: a dimension scaled by k/8, rounded up.
    fn scaled(dim: usize, k: usize) -> usize {
        (dim * k).div_ceil(8)
    }

    pub fn decode_region(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        scale_eighths: u8,
        [top, left, bh, bw]: [usize; 4],
    ) -> Result<(Decoded, [f64; 4]), String> {
        let k = usize::from(scale_eighths);
        let format = match channels {
            1 => raw::TJPF_TJPF_GRAY,
            4 => raw::TJPF_TJPF_RGBA,
            _ => raw::TJPF_TJPF_RGB,
        };
        let to_int = |v: usize| libc::c_int::try_from(v).map_err(|_| "JPEG: too large".to_string());
        RAW.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(RawDecompressor::new()?);
            }
            let Some(d) = slot.as_ref() else {
                return Err("JPEG: no decompressor".to_string());
            };
            // SAFETY: valid handle; `data` outlives the call (libjpeg-turbo only reads it).
            if unsafe { raw::tj3DecompressHeader(d.0, data.as_ptr(), data.len() as raw::size_t) }
                != 0
            {
                return Err(d.error("cannot read the header"));
            }
            // libjpeg-turbo lists its factors in lowest terms (2/8 is 1/4).
            let common = [8, 4, 2, 1].into_iter().find(|g| k % g == 0).unwrap_or(1);
            let factor = raw::tjscalingfactor {
                num: to_int(k / common)?,
                denom: to_int(8 / common)?,
            };
            // SAFETY: valid handle; k/8 with k in 1..=8 is one of libjpeg-turbo's factors.
            if unsafe { raw::tj3SetScalingFactor(d.0, factor) } != 0 {
                return Err(d.error("cannot set the scaling factor"));
            }
            let (sw, sh) = (scaled(width, k), scaled(height, k));
            // The region: the scaled box, widened to whole pixels and, on the left, to the
            // scaled iMCU width (libjpeg-turbo can only start a row on an iMCU boundary).
            let mcu = match d.get(raw::TJPARAM_TJPARAM_SUBSAMP) {
                1 | 2 => 16, // 4:2:2, 4:2:0
                5 => 32,     // 4:1:1
                0 | 3 | 4 | 6 => 8,
                // Subsampling libjpeg-turbo cannot name: no partial decoding, decode it all.
                _ => return whole(data, [width, height, channels], k, [top, left, bh, bw]),
            };
            let mcu = scaled(mcu, k).max(1);
            let (sy, sx) = (sh as f64 / height as f64, sw as f64 / width as f64);
            let x0 = ((left as f64 * sx).floor() as usize / mcu) * mcu;
            let y0 = (top as f64 * sy).floor() as usize;
            let x1 = (((left + bw) as f64 * sx).ceil() as usize).clamp(x0 + 1, sw);
            let y1 = (((top + bh) as f64 * sy).ceil() as usize).clamp(y0 + 1, sh);
            let (rw, rh) = (x1 - x0, y1 - y0);
            let region = raw::tjregion {
                x: to_int(x0)?,
                y: to_int(y0)?,
                w: to_int(rw)?,
                h: to_int(rh)?,
            };
            // SAFETY: valid handle, header read; the region lies within the scaled image.
            if unsafe { raw::tj3SetCroppingRegion(d.0, region) } != 0 {
                return Err(d.error("cannot set the cropping region"));
            }
            let mut pixels = shared_pool().take(rh * rw * channels);
            let out = pixels.as_bytes_mut();
            // SAFETY: valid handle; `out` holds exactly rh rows of rw * channels bytes (the
            // pitch), which is what libjpeg-turbo writes for this region and pixel format.
            let res = unsafe {
                raw::tj3Decompress8(
                    d.0,
                    data.as_ptr(),
                    data.len() as raw::size_t,
                    out.as_mut_ptr(),
                    to_int(rw * channels)?,
                    format,
                )
            };
            // Later calls on this thread start without a region.
            let none = raw::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            };
            // SAFETY: valid handle; the all-zero region means "no cropping".
            unsafe { raw::tj3SetCroppingRegion(d.0, none) };
            if res != 0 {
                return Err(d.error("cannot decode"));
            }
            let inner = [
                top as f64 * sy - y0 as f64,
                left as f64 * sx - x0 as f64,
                (bh as f64 * sy).min(rh as f64 - (top as f64 * sy - y0 as f64)),
                (bw as f64 * sx).min(rw as f64 - (left as f64 * sx - x0 as f64)),
            ];
            let img = Decoded {
                height: rh,
                width: rw,
                channels,
                pixels,
            };
            Ok((img, inner))
        })
    }
}
