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
//! Before any pixel buffer is allocated, the header's size is checked against `max_pixels`
//! and against the image data the file holds ([`check_stream`]), so that a tiny file claiming
//! a huge image costs nothing.
//!
//! Damage, the same on every path (whole decodes and the fused crop decodes):
//! - a file without its end-of-image marker after the image data is truncated: an error;
//! - corrupt data that libjpeg recovers from (its warnings, "Corrupt JPEG data: ...") is
//!   accepted, as TensorFlow's `decode_jpeg` and PIL accept it, and counted as a warning in the
//!   stage's stats ([`take_warning`]); a crop decode does not read the rows below its box, so
//!   damage there is neither in its output nor seen.

use std::cell::RefCell;

use crate::codecs::decoded::{check_size, Decoded};

thread_local! {
    /// The warning of this thread's last decode: the decoders run deep inside fused ops, and
    /// every decode is started by `image::decode_image::decode_field`, which counts it for its
    /// stage.
    static WARNING: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The warning libjpeg gave for the last decode on this thread (data it recovered from).
pub(crate) fn take_warning() -> Option<String> {
    WARNING.with(|w| w.borrow_mut().take())
}

#[cfg_attr(not(feature = "turbojpeg"), allow(dead_code))]
fn warn(message: String) {
    WARNING.with(|w| *w.borrow_mut() = Some(message));
}

/// What the markers before the first scan say: the frame, and where the image data starts.
struct Frame {
    width: u64,
    height: u64,
    /// Sampling factors `(h, v)` of each component.
    sampling: Vec<(u64, u64)>,
    arithmetic: bool,
    lossless: bool,
    scan: usize,
    /// An Adobe APP14 segment came before the scan (libjpeg's `saw_Adobe_marker`).
    adobe: bool,
}

/// Walks the image data from `at` (the first scan's data) to the end-of-image marker: inside
/// scans a 0xFF byte is stuffing (0xFF00), a restart or a fill byte; between scans come the
/// segments libjpeg reads there (tables, restart interval, application data, comments, the
/// next scan). Any other marker is damage, as is a file that ends before the end marker.
fn check_markers(data: &[u8], mut at: usize) -> Result<(), String> {
    loop {
        let Some(ff) = data.get(at..).and_then(|rest| memchr::memchr(0xFF, rest)) else {
            return Err(format!(
                "JPEG: truncated: no end-of-image marker after the image data (the file ends \
                 at byte {})",
                data.len()
            ));
        };
        let i = at + ff;
        let Some(&marker) = data.get(i + 1) else {
            at = i + 1;
            continue;
        };
        at = match marker {
            // Stuffing, fill bytes, restarts, TEM: the data goes on.
            0x00 | 0xFF | 0x01 | 0xD0..=0xD7 => i + 1 + usize::from(marker != 0xFF),
            0xD9 => return Ok(()),
            // DHT, DAC, SOS, DQT, DNL, DRI, APPn, COM: a segment, skipped by its length.
            0xC4 | 0xCC | 0xDA | 0xDB | 0xDC | 0xDD | 0xE0..=0xEF | 0xFE => {
                let len = data
                    .get(i + 2..i + 4)
                    .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])));
                i + 2 + len.max(2)
            }
            _ => {
                return Err(format!(
                    "JPEG: damaged image data: marker 0xFF{marker:02X} at byte {i} cannot \
                     appear there"
                ))
            }
        };
    }
}

/// Walks the markers up to the first scan; `None` if they are not well formed (the decoder
/// then says what is wrong).
fn frame(data: &[u8]) -> Option<Frame> {
    if !data.starts_with(&[0xFF, 0xD8]) {
        return None;
    }
    let mut at = 2;
    let mut frame = None;
    let mut adobe = false;
    loop {
        while data.get(at) == Some(&0xFF) && data.get(at + 1) == Some(&0xFF) {
            at += 1; // fill bytes
        }
        if data.get(at) != Some(&0xFF) {
            return None;
        }
        let marker = *data.get(at + 1)?;
        let len = usize::from(u16::from_be_bytes([*data.get(at + 2)?, *data.get(at + 3)?]));
        let body = data.get(at + 4..at + 2 + len)?;
        match marker {
            0xDA => {
                let mut f: Frame = frame?;
                f.scan = at + 2 + len;
                f.adobe = adobe;
                return Some(f);
            }
            // As libjpeg reads it: "Adobe" and at least 12 bytes of data.
            0xEE if body.len() >= 12 && body.starts_with(b"Adobe") => adobe = true,
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                let n = usize::from(*body.get(5)?);
                let sampling = (0..n)
                    .map(|i| {
                        let hv = *body.get(6 + 3 * i + 1)?;
                        Some((u64::from(hv >> 4).max(1), u64::from(hv & 15).max(1)))
                    })
                    .collect::<Option<Vec<_>>>()?;
                frame = Some(Frame {
                    height: u64::from(u16::from_be_bytes([body[1], body[2]])),
                    width: u64::from(u16::from_be_bytes([body[3], body[4]])),
                    sampling,
                    arithmetic: marker >= 0xC9,
                    lossless: matches!(marker, 0xC3 | 0xC7 | 0xCB | 0xCF),
                    scan: 0,
                    adobe: false,
                });
            }
            0xD9 => return None,
            _ => {}
        }
        at += 2 + len;
    }
}

/// Checks, before anything is decoded, what decides a JPEG's fate the same way on every path
/// (a crop decode stops reading at the crop's last row): that the image data ends with the
/// end-of-image marker (else the file is truncated); that it holds no marker libjpeg cannot
/// take there (a damaged byte turned into one: libjpeg fails on it, but only once it reads
/// that far); and, for Huffman-coded files, that there is enough image data for the size
/// the header claims (every 8x8 block, every sample of a lossless file, takes at least one
/// bit; arithmetic coding has no such floor, and `max_pixels` still bounds those).
pub fn check_stream(data: &[u8]) -> Result<(), String> {
    let Some(f) = frame(data) else {
        return Ok(());
    };
    check_markers(data, f.scan)?;
    let image = &data[f.scan.min(data.len())..];
    if f.arithmetic {
        return Ok(());
    }
    let (hmax, vmax) = f
        .sampling
        .iter()
        .fold((1, 1), |(h, v), &(ch, cv)| (h.max(ch), v.max(cv)));
    let unit = if f.lossless { 1 } else { 8 };
    let needed = f
        .sampling
        .iter()
        .map(|&(h, v)| {
            let w = (f.width * h).div_ceil(hmax).div_ceil(unit);
            let hh = (f.height * v).div_ceil(vmax).div_ceil(unit);
            w * hh
        })
        .max()
        .unwrap_or(0);
    let bits = image.len() as u64 * 8;
    if bits < needed {
        return Err(format!(
            "JPEG: the header claims {}x{} pixels, but the file holds {} bytes of image data, \
             too few for that (at least {} bits)",
            f.width,
            f.height,
            image.len(),
            needed
        ));
    }
    Ok(())
}

/// The inverse DCT libjpeg runs, as TensorFlow's `decode_jpeg(dct_method=...)` names it.
/// TensorFlow's default is the fast integer IDCT; PIL (and so torchvision) use the accurate
/// one, which differs from it by a few levels. zune-jpeg has one IDCT of its own (accurate);
/// it ignores this choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DctMethod {
    #[default]
    #[serde(rename = "INTEGER_FAST")]
    IntegerFast,
    #[serde(rename = "INTEGER_ACCURATE")]
    IntegerAccurate,
}

impl DctMethod {
    pub fn is_default(&self) -> bool {
        *self == DctMethod::default()
    }
}

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

/// TensorFlow's JPEG decoder gives 0, 1 or 3 channels and fails on 4 (whatever the op's
/// name): a pipeline that asks for RGBA from a JPEG fails here as it does there.
fn refuse_four(wanted: u8) -> Result<(), String> {
    if wanted == 4 {
        return Err("JPEG does not support 4 channels (as in TensorFlow): decode it to 3".into());
    }
    Ok(())
}

/// Decodes to `wanted` channels (0: as stored; grey files decode to grey and are converted by
/// the caller), scaled by `scale_eighths / 8` in the DCT domain when the backend can.
pub(crate) fn decode(
    data: &[u8],
    wanted: u8,
    max_pixels: u64,
    scale_eighths: u8,
    dct: DctMethod,
) -> Result<Decoded, String> {
    refuse_four(wanted)?;
    let (width, height, grey) = header(data)?;
    check_size(width, height, max_pixels)?;
    check_stream(data)?;
    if let Some(adobe) = cmyk(data) {
        return decode_cmyk(
            data,
            wanted,
            [width, height],
            scale_eighths.clamp(1, 8),
            dct,
            adobe,
        );
    }
    let channels = match (wanted, grey) {
        (_, true) | (1, _) => 1,
        _ => 3,
    };
    imp::decode(
        data,
        [width, height, channels],
        scale_eighths.clamp(1, 8),
        dct,
    )
}

/// For a JPEG of four components (CMYK, or YCCK, which libjpeg turns into CMYK): whether an
/// Adobe marker says its inks are stored inverted. `None` for any other JPEG.
fn cmyk(data: &[u8]) -> Option<bool> {
    frame(data)
        .filter(|f| f.sampling.len() == 4)
        .map(|f| f.adobe)
}

/// A CMYK or YCCK JPEG decoded as TensorFlow's `decode_jpeg` does: libjpeg's CMYK samples
/// turned into RGB by `r = k c / 255` (Adobe's inverted inks) or `r = (255 - k)(255 - c) /
/// 255`, in integers; to one channel it cannot be (libjpeg converts CMYK to nothing but CMYK,
/// and TensorFlow fails the same way).
fn decode_cmyk(
    data: &[u8],
    wanted: u8,
    [width, height]: [usize; 2],
    k: u8,
    dct: DctMethod,
    adobe: bool,
) -> Result<Decoded, String> {
    if wanted == 1 {
        return Err(
            "JPEG: a CMYK JPEG cannot be decoded to 1 channel (as in TensorFlow): decode it to 3 \
             and convert to grey"
                .into(),
        );
    }
    let ink = imp::decode_cmyk(data, [width, height], k, dct)?;
    let channels = 3;
    let mut pixels = stoker_core::storage::shared_pool().take(ink.height * ink.width * channels);
    let src = ink.pixels.as_bytes().chunks_exact(4);
    for (d, s) in pixels.as_bytes_mut().chunks_exact_mut(channels).zip(src) {
        let [c, m, y, k] = [s[0], s[1], s[2], s[3]].map(u32::from);
        let rgb = if adobe {
            [k * c / 255, k * m / 255, k * y / 255]
        } else {
            [c, m, y].map(|v| (255 - k) * (255 - v) / 255)
        };
        for (o, v) in d.iter_mut().zip(rgb) {
            *o = v as u8;
        }
    }
    Ok(Decoded {
        channels,
        pixels,
        ..ink
    })
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
    dct: DctMethod,
) -> Result<(Decoded, [f64; 4]), String> {
    refuse_four(wanted)?;
    let (width, height, grey) = header(data)?;
    check_size(width, height, max_pixels)?;
    check_stream(data)?;
    if let Some(adobe) = cmyk(data) {
        // Decoded whole (libjpeg-turbo crops CMYK as it crops any JPEG, but the conversion is
        // TensorFlow's, on whole rows): the box scaled into it.
        let k = scale_eighths.clamp(1, 8);
        let img = decode_cmyk(data, wanted, [width, height], k, dct, adobe)?;
        let (sy, sx) = (
            img.height as f64 / height as f64,
            img.width as f64 / width as f64,
        );
        let [top, left, bh, bw] = bx.map(|v| v as f64);
        let inner = [
            top * sy,
            left * sx,
            (bh * sy).min(img.height as f64 - top * sy),
            (bw * sx).min(img.width as f64 - left * sx),
        ];
        return Ok((img, inner));
    }
    let channels = match (wanted, grey) {
        (_, true) | (1, _) => 1,
        _ => 3,
    };
    imp::decode_region(
        data,
        [width, height, channels],
        scale_eighths.clamp(1, 8),
        bx,
        dct,
    )
}

#[cfg(not(feature = "turbojpeg"))]
mod imp {
    use stoker_core::storage::shared_pool;
    use zune_core::colorspace::ColorSpace;
    use zune_core::options::DecoderOptions;
    use zune_jpeg::JpegDecoder;

    use super::DctMethod;
    use crate::codecs::decoded::Decoded;

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
        [width, height, channels]: [usize; 3],
        _scale_eighths: u8,
        _dct: DctMethod,
    ) -> Result<Decoded, String> {
        // zune-jpeg is safe Rust, but damaged scans can make it panic (an index out of range,
        // an unwrap, a debug assertion): a panic there is this file's error, not the pipeline's.
        std::panic::catch_unwind(|| decode_unguarded(data, width, height, channels))
            .unwrap_or_else(|_| Err("JPEG: the decoder (zune-jpeg) failed on damaged data".into()))
    }

    fn decode_unguarded(
        data: &[u8],
        width: usize,
        height: usize,
        channels: usize,
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

    /// The CMYK samples of a CMYK or YCCK JPEG, as libjpeg gives them: a CMYK file's as
    /// stored; a YCCK file's turned into CMYK with libjpeg's fixed-point YCC to RGB tables
    /// (the inks are 255 minus red, green and blue; K as stored).
    pub fn decode_cmyk(
        data: &[u8],
        [width, height]: [usize; 2],
        _scale_eighths: u8,
        _dct: DctMethod,
    ) -> Result<Decoded, String> {
        std::panic::catch_unwind(|| decode_cmyk_unguarded(data, width, height))
            .unwrap_or_else(|_| Err("JPEG: the decoder (zune-jpeg) failed on damaged data".into()))
    }

    fn decode_cmyk_unguarded(data: &[u8], width: usize, height: usize) -> Result<Decoded, String> {
        let mut probe = JpegDecoder::new_with_options(data, options());
        probe.decode_headers().map_err(|e| format!("JPEG: {e:?}"))?;
        // The stored components, untouched: zune-jpeg copies them when asked for the input's
        // own colour space.
        let space = match probe.get_input_colorspace() {
            Some(ColorSpace::YCCK) => ColorSpace::YCCK,
            _ => ColorSpace::CMYK,
        };
        let mut decoder =
            JpegDecoder::new_with_options(data, options().jpeg_set_out_colorspace(space));
        decoder
            .decode_headers()
            .map_err(|e| format!("JPEG: {e:?}"))?;
        if decoder.get_output_colorspace() != Some(space)
            || decoder.output_buffer_size() != Some(height * width * 4)
        {
            return Err(format!(
                "JPEG: cannot decode this file's colour space ({:?}) to CMYK",
                decoder.get_input_colorspace()
            ));
        }
        let mut pixels = shared_pool().take(height * width * 4);
        decoder
            .decode_into(pixels.as_bytes_mut())
            .map_err(|e| format!("JPEG: {e:?}"))?;
        if space == ColorSpace::YCCK {
            for p in pixels.as_bytes_mut().chunks_exact_mut(4) {
                let rgb = ycc_to_rgb(p[0], p[1], p[2]);
                for (o, v) in p.iter_mut().zip(rgb) {
                    *o = 255 - v;
                }
            }
        }
        Ok(Decoded {
            height,
            width,
            channels: 4,
            pixels,
        })
    }

    /// libjpeg's YCbCr to RGB (`jdcolor.c`): 16-bit fixed point, rounded, clamped.
    fn ycc_to_rgb(y: u8, cb: u8, cr: u8) -> [u8; 3] {
        const ONE_HALF: i32 = 1 << 15;
        let fix = |v: f64| (v * 65536.0 + 0.5) as i32;
        let (y, cb, cr) = (i32::from(y), i32::from(cb) - 128, i32::from(cr) - 128);
        let r = y + ((fix(1.40200) * cr + ONE_HALF) >> 16);
        let g = y + ((-fix(0.34414) * cb - fix(0.71414) * cr + ONE_HALF) >> 16);
        let b = y + ((fix(1.77200) * cb + ONE_HALF) >> 16);
        [r, g, b].map(|v| v.clamp(0, 255) as u8)
    }

    /// zune-jpeg decodes whole images: the box stays where it is.
    pub fn decode_region(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        scale_eighths: u8,
        bx: [usize; 4],
        dct: DctMethod,
    ) -> Result<(Decoded, [f64; 4]), String> {
        let img = decode(data, [width, height, channels], scale_eighths, dct)?;
        Ok((img, bx.map(|v| v as f64)))
    }
}

#[cfg(feature = "turbojpeg")]
mod imp {
    use std::cell::RefCell;

    use stoker_core::storage::shared_pool;
    use turbojpeg::{libc, raw};

    use super::DctMethod;
    use crate::codecs::decoded::Decoded;

    /// A TurboJPEG 3 decompressor, used through the raw API: for cropping regions
    /// (`tj3SetCroppingRegion`), which the `turbojpeg` crate does not expose, and to tell
    /// libjpeg's warnings from its errors.
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

        fn read_header(&self, data: &[u8]) -> Result<(), String> {
            // SAFETY: valid handle; `data` outlives the call (libjpeg-turbo only reads it).
            let res = unsafe {
                raw::tj3DecompressHeader(self.0, data.as_ptr(), data.len() as raw::size_t)
            };
            if res != 0 {
                return Err(self.error("cannot read the header"));
            }
            Ok(())
        }

        /// Decompresses `data` into `out` (`pitch` bytes a row; the scaling factor and any
        /// cropping region already set). libjpeg's warnings (data it recovered from; the
        /// image is complete) are kept for the caller to count; its errors are errors.
        fn decompress(
            &self,
            data: &[u8],
            out: &mut [u8],
            pitch: libc::c_int,
            format: libc::c_int,
        ) -> Result<(), String> {
            let res = self.run(data, out, pitch, format);
            // SAFETY: valid handle; tj3GetErrorCode only reads the instance's state.
            let code = unsafe { raw::tj3GetErrorCode(self.0) };
            if res == 0 {
                return Ok(());
            }
            let message = self.error("cannot decode");
            if code != raw::TJERR_TJERR_WARNING as libc::c_int {
                return Err(message);
            }
            // TurboJPEG calls a decode "a warning" when any warning came before an error too;
            // its message is then the error's, while after warnings only it is the first
            // warning's. Stopping at the first warning tells which.
            let mut scratch = shared_pool().take(out.len());
            self.set(raw::TJPARAM_TJPARAM_STOPONWARNING, 1);
            self.run(data, scratch.as_bytes_mut(), pitch, format);
            let first = self.error("warning");
            self.set(raw::TJPARAM_TJPARAM_STOPONWARNING, 0);
            if first != message {
                return Err(message);
            }
            super::warn(message);
            Ok(())
        }

        fn run(
            &self,
            data: &[u8],
            out: &mut [u8],
            pitch: libc::c_int,
            format: libc::c_int,
        ) -> libc::c_int {
            // SAFETY: valid handle, header read; the callers size `out` for the rows
            // libjpeg-turbo writes with this pitch, scaling factor, region and pixel format.
            unsafe {
                raw::tj3Decompress8(
                    self.0,
                    data.as_ptr(),
                    data.len() as raw::size_t,
                    out.as_mut_ptr(),
                    pitch,
                    format,
                )
            }
        }

        fn set(&self, param: raw::TJPARAM, value: libc::c_int) {
            // SAFETY: valid handle; a boolean parameter.
            unsafe { raw::tj3Set(self.0, param as libc::c_int, value) };
        }
    }

    impl Drop for RawDecompressor {
        fn drop(&mut self) {
            // SAFETY: the handle came from tj3Init and is destroyed exactly once, here.
            unsafe { raw::tj3Destroy(self.0) }
        }
    }

    thread_local! {
        // One libjpeg-turbo handle per worker thread: creating one costs more than a small decode.
        static RAW: RefCell<Option<RawDecompressor>> = const { RefCell::new(None) };
    }

    /// Runs `f` with this thread's decompressor. After an error the handle is dropped: libjpeg
    /// leaves a decompressor that failed inside its header or scan in a state where every
    /// later file fails too ("Bogus marker length"), so the next decode gets a new one.
    fn with_decompressor<T>(
        f: impl FnOnce(&RawDecompressor) -> Result<T, String>,
    ) -> Result<T, String> {
        RAW.with(|cell| {
            if cell.borrow().is_none() {
                *cell.borrow_mut() = Some(RawDecompressor::new()?);
            }
            // A shared borrow: a region decode may fall back to a whole decode inside it.
            let outcome = match cell.borrow().as_ref() {
                Some(d) => f(d),
                None => Err("JPEG: no decompressor".to_string()),
            };
            if outcome.is_err() {
                // A nested call (the whole-image fallback) may still hold the borrow: the
                // outermost call then drops the handle.
                if let Ok(mut slot) = cell.try_borrow_mut() {
                    *slot = None;
                }
            }
            outcome
        })
    }

    pub fn header(data: &[u8]) -> Result<(usize, usize, bool), String> {
        with_decompressor(|d| {
            d.read_header(data)?;
            let dim = |p| usize::try_from(d.get(p)).map_err(|_| "JPEG: bad size".to_string());
            Ok((
                dim(raw::TJPARAM_TJPARAM_JPEGWIDTH)?,
                dim(raw::TJPARAM_TJPARAM_JPEGHEIGHT)?,
                d.get(raw::TJPARAM_TJPARAM_COLORSPACE) == raw::TJCS_TJCS_GRAY as libc::c_int,
            ))
        })
    }

    fn pixel_format(channels: usize) -> libc::c_int {
        (match channels {
            1 => raw::TJPF_TJPF_GRAY,
            4 => raw::TJPF_TJPF_RGBA,
            _ => raw::TJPF_TJPF_RGB,
        }) as libc::c_int
    }

    /// Sets the scaling factor k/8 (k in 1..=8) for the next decompression.
    fn set_scale(d: &RawDecompressor, k: usize) -> Result<(), String> {
        let to_int = |v: usize| libc::c_int::try_from(v).map_err(|_| "JPEG: scale".to_string());
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
        Ok(())
    }

    /// Sets the IDCT for the next decompression.
    fn set_dct(d: &RawDecompressor, dct: DctMethod) {
        d.set(
            raw::TJPARAM_TJPARAM_FASTDCT,
            libc::c_int::from(dct == DctMethod::IntegerFast),
        );
    }

    pub fn decode(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        scale_eighths: u8,
        dct: DctMethod,
    ) -> Result<Decoded, String> {
        let k = usize::from(scale_eighths);
        with_decompressor(|d| {
            d.read_header(data)?;
            set_scale(d, k)?;
            set_dct(d, dct);
            let (w, h) = (scaled(width, k), scaled(height, k));
            let pitch = libc::c_int::try_from(w * channels).map_err(|_| "JPEG: too wide")?;
            let mut pixels = shared_pool().take(h * w * channels);
            // No cropping region is set here: decode_region resets it after each use.
            d.decompress(data, pixels.as_bytes_mut(), pitch, pixel_format(channels))?;
            Ok(Decoded {
                height: h,
                width: w,
                channels,
                pixels,
            })
        })
    }

    /// The CMYK samples of a CMYK or YCCK JPEG, as libjpeg gives them (it turns YCCK into
    /// CMYK), at scale k/8.
    pub fn decode_cmyk(
        data: &[u8],
        [width, height]: [usize; 2],
        scale_eighths: u8,
        dct: DctMethod,
    ) -> Result<Decoded, String> {
        let k = usize::from(scale_eighths);
        with_decompressor(|d| {
            d.read_header(data)?;
            set_scale(d, k)?;
            set_dct(d, dct);
            let (w, h) = (scaled(width, k), scaled(height, k));
            let pitch = libc::c_int::try_from(w * 4).map_err(|_| "JPEG: too wide")?;
            let mut pixels = shared_pool().take(h * w * 4);
            let format = raw::TJPF_TJPF_CMYK as libc::c_int;
            d.decompress(data, pixels.as_bytes_mut(), pitch, format)?;
            Ok(Decoded {
                height: h,
                width: w,
                channels: 4,
                pixels,
            })
        })
    }

    /// The whole image at scale k/8, and the box mapped into it.
    fn whole(
        data: &[u8],
        [width, height, channels]: [usize; 3],
        k: usize,
        bx: [usize; 4],
        dct: DctMethod,
    ) -> Result<(Decoded, [f64; 4]), String> {
        let img = decode(data, [width, height, channels], k as u8, dct)?;
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
        dct: DctMethod,
    ) -> Result<(Decoded, [f64; 4]), String> {
        let k = usize::from(scale_eighths);
        let to_int = |v: usize| libc::c_int::try_from(v).map_err(|_| "JPEG: too large".to_string());
        with_decompressor(|d| {
            d.read_header(data)?;
            set_scale(d, k)?;
            set_dct(d, dct);
            let (sw, sh) = (scaled(width, k), scaled(height, k));
            // The region: the scaled box, widened to whole pixels and, on the left, to the
            // scaled iMCU width (libjpeg-turbo can only start a row on an iMCU boundary).
            let mcu = match d.get(raw::TJPARAM_TJPARAM_SUBSAMP) {
                1 | 2 => 16, // 4:2:2, 4:2:0
                5 => 32,     // 4:1:1
                0 | 3 | 4 | 6 => 8,
                // Subsampling libjpeg-turbo cannot name: no partial decoding, decode it all.
                _ => return whole(data, [width, height, channels], k, [top, left, bh, bw], dct),
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
            // `pixels` holds exactly rh rows of rw * channels bytes (the pitch).
            let pitch = to_int(rw * channels)?;
            let outcome = d.decompress(data, pixels.as_bytes_mut(), pitch, pixel_format(channels));
            // Later calls on this thread start without a region.
            let none = raw::tjregion {
                x: 0,
                y: 0,
                w: 0,
                h: 0,
            };
            // SAFETY: valid handle; the all-zero region means "no cropping".
            unsafe { raw::tj3SetCroppingRegion(d.0, none) };
            outcome?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const F: DctMethod = DctMethod::IntegerFast;

    const RGB: &[u8] = include_bytes!("../../../../tests/golden/images/rgb.jpg");
    /// Damaged scans the fuzzer found (crates/fuzz, with zune-jpeg).
    const DAMAGED: [&[u8]; 4] = [
        include_bytes!("../../../../tests/golden/damaged/jpeg-scan-1.jpg"),
        include_bytes!("../../../../tests/golden/damaged/jpeg-scan-2.jpg"),
        include_bytes!("../../../../tests/golden/damaged/jpeg-scan-3.jpg"),
        include_bytes!("../../../../tests/golden/damaged/jpeg-scan-4.jpg"),
    ];

    fn decode_err(data: &[u8]) -> String {
        decode(data, 3, 1 << 28, 8, F).map(|_| ()).unwrap_err()
    }

    fn scan_start(data: &[u8]) -> usize {
        frame(data).unwrap().scan
    }

    #[test]
    fn damaged_scans_decode_or_fail_without_a_panic() {
        // zune-jpeg panics on these: the first two trip its bit reader's debug assertion, the
        // other two panic in release builds too. With either decoder they give pixels or an
        // error, whatever the channels.
        for data in DAMAGED {
            for channels in [0, 1, 3, 4] {
                if let Err(e) = decode(data, channels, 1 << 16, 8, F) {
                    assert!(e.starts_with("JPEG"), "{e}");
                }
            }
        }
    }

    /// `RGB` with the bytes at `offset` after the first `marker` replaced by `bytes`.
    fn with_marker_bytes(marker: u8, offset: usize, bytes: &[u8]) -> Vec<u8> {
        let mut out = RGB.to_vec();
        let at = out.windows(2).position(|w| w == [0xFF, marker]).unwrap() + offset;
        out[at..at + bytes.len()].copy_from_slice(bytes);
        out
    }

    #[test]
    fn a_file_the_decoder_rejects_does_not_break_the_next_ones_on_its_thread() {
        // SOF: length (2 bytes), precision, height (2), width (2), components.
        let rejected = [
            with_marker_bytes(0xC0, 5, &[0, 0]), // height 0
            with_marker_bytes(0xC0, 7, &[0, 0]), // width 0
            with_marker_bytes(0xC0, 9, &[0]),    // no components
            with_marker_bytes(0xDB, 4, &[0x07]), // a quantisation table with id 7
        ];
        let region = [4, 4, 32, 32];
        for bad in &rejected {
            assert!(decode(bad, 3, 1 << 28, 8, F).is_err());
            let img = decode(RGB, 3, 1 << 28, 8, F).expect("a good file after a bad one");
            assert_eq!((img.width, img.height), (64, 48));
            assert!(decode_region(bad, 3, 1 << 28, 4, region, F).is_err());
            decode_region(RGB, 3, 1 << 28, 4, region, F).expect("a good region after a bad one");
            assert!(header(bad).is_err() || decode(bad, 0, 1 << 28, 8, F).is_err());
            header(RGB).expect("a good header after a bad file");
            decode(RGB, 0, 1 << 28, 8, F).expect("a good file after a bad header");
        }
    }

    #[test]
    fn an_intact_file_passes_the_stream_checks() {
        assert_eq!(check_stream(RGB), Ok(()));
        let img = decode(RGB, 3, 1 << 28, 8, F).unwrap();
        assert_eq!((img.width, img.height, img.channels), (64, 48, 3));
    }

    #[test]
    fn a_truncated_file_is_an_error_before_decoding() {
        let cut = &RGB[..RGB.len() - 2];
        assert!(decode_err(cut).contains("truncated: no end-of-image marker"));
        let half = &RGB[..(scan_start(RGB) + RGB.len()) / 2];
        assert!(decode_err(half).contains("truncated"));
    }

    #[test]
    fn a_marker_that_cannot_be_in_image_data_is_an_error() {
        let mut bad = RGB.to_vec();
        let at = scan_start(RGB) + 20;
        bad[at..at + 2].copy_from_slice(&[0xFF, 0x04]);
        let err = decode_err(&bad);
        assert!(
            err.contains(&format!("marker 0xFF04 at byte {at}")),
            "{err}"
        );
        // Stuffed bytes and restart markers are not damage.
        bad[at..at + 2].copy_from_slice(&[0xFF, 0x00]);
        assert_eq!(check_markers(&bad, scan_start(RGB)), Ok(()));
    }

    #[test]
    fn a_header_claiming_more_than_the_data_can_hold_is_refused() {
        let mut big = RGB.to_vec();
        let sof = big.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        big[sof + 5..sof + 9].copy_from_slice(&[0x3E, 0x80, 0x3E, 0x80]); // 16000 x 16000
        let err = decode_err(&big);
        assert!(
            err.contains("16000x16000") && err.contains("too few"),
            "{err}"
        );
        let err = decode_region(&big, 3, 1 << 28, 8, [0, 0, 224, 224], F)
            .map(|_| ())
            .unwrap_err();
        assert!(err.contains("too few"), "{err}");
    }
}

#[cfg(test)]
mod cmyk_tests {
    use super::*;

    const CMYK: &[u8] = include_bytes!("../../../../tests/golden/images/cmyk.jpg");
    const CMYK_NO_ADOBE: &[u8] = include_bytes!("../../../../tests/golden/images/cmyk_noadobe.jpg");
    /// TensorFlow's `decode_image(channels=3)` of each (tests/golden/make_image_formats_golden.py).
    const CMYK_TF: &[u8] = include_bytes!("../../../../tests/golden/images/cmyk.expected.npy");
    const CMYK_NO_ADOBE_TF: &[u8] =
        include_bytes!("../../../../tests/golden/images/cmyk_noadobe.expected.npy");

    /// The data of a version-1 `.npy` file.
    fn npy_data(npy: &[u8]) -> &[u8] {
        let header = usize::from(u16::from_le_bytes([npy[8], npy[9]]));
        &npy[10 + header..]
    }

    #[test]
    fn cmyk_jpegs_decode_to_tensorflows_rgb() {
        for (file, tf, adobe) in [
            (CMYK, CMYK_TF, true),
            (CMYK_NO_ADOBE, CMYK_NO_ADOBE_TF, false),
        ] {
            assert_eq!(cmyk(file), Some(adobe));
            let want = npy_data(tf);
            // TensorFlow's default IDCT, the fast one.
            let img = decode(file, 0, 1 << 20, 8, F).unwrap();
            assert_eq!((img.height, img.width, img.channels), (24, 30, 3));
            let got = img.pixels.as_bytes();
            if cfg!(feature = "turbojpeg") {
                assert_eq!(got, want, "adobe {adobe}");
            } else {
                // zune-jpeg's IDCT and upsampling are its own: close, not equal.
                let diff: u64 = got
                    .iter()
                    .zip(want)
                    .map(|(&a, &b)| u64::from(a.abs_diff(b)))
                    .sum();
                assert!(
                    diff < 3 * got.len() as u64,
                    "adobe {adobe}: mean {}",
                    diff as f64 / got.len() as f64
                );
            }
            let e = decode(file, 4, 1 << 20, 8, F).map(|_| ()).unwrap_err();
            assert!(e.contains("4 channels"), "{e}");
            let e = decode(file, 1, 1 << 20, 8, F).map(|_| ()).unwrap_err();
            assert!(e.contains("CMYK") && e.contains("1 channel"), "{e}");
            // A region decode (the fused crops) gives the whole image's pixels.
            let (img, bx) = decode_region(file, 3, 1 << 20, 8, [4, 5, 10, 12], F).unwrap();
            assert_eq!((img.height, img.width), (24, 30));
            assert_eq!(bx, [4.0, 5.0, 10.0, 12.0]);
        }
        // An RGB JPEG is not taken for CMYK.
        assert_eq!(
            cmyk(include_bytes!("../../../../tests/golden/images/rgb.jpg")),
            None
        );
    }

    const F: DctMethod = DctMethod::IntegerFast;
}
