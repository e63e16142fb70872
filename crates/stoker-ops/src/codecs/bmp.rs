//! BMP, as TensorFlow's `decode_bmp` (and `decode_image`) reads it: uncompressed 8, 24 or
//! 32 bits a pixel, rows bottom-up (or top-down when the height is negative), each padded to
//! 4 bytes, from the pixel data offset the file header gives; blue-green-red(-alpha) samples
//! come out as RGB(A). An 8-bit file gives one channel of its 8-bit values, the palette not
//! applied (TensorFlow's behaviour: right for grey BMPs, whose palette is the identity). The
//! file must hold exactly its header and its rows, as TensorFlow requires.
//!
//! TensorFlow's reader is these few lines of arithmetic on the header; a general BMP decoder
//! (RLE, bit fields, palettes) would decode other files and other pixels than TensorFlow, so
//! this follows TensorFlow's instead.

use stoker_core::storage::shared_pool;

use crate::codecs::decoded::{check_size, Decoded};

/// Whether `data` starts like a BMP file.
pub(crate) fn is_bmp(data: &[u8]) -> bool {
    data.starts_with(b"BM")
}

fn le32(data: &[u8], at: usize) -> i32 {
    i32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

/// Decodes `data` to its own channels (1, 3 or 4); `wanted` (0, 3 or 4; 1 is refused, as in
/// TensorFlow) is left to the caller's conversion, which matches TensorFlow's (grey
/// replicated, alpha dropped or set to 255).
pub(crate) fn decode(data: &[u8], wanted: u8, max_pixels: u64) -> Result<Decoded, String> {
    if wanted == 1 {
        return Err("BMP: channels must be 0, 3 or 4 for BMP (as in TensorFlow), not 1".into());
    }
    if data.len() < 32 {
        return Err(format!(
            "BMP: {} bytes, too few for the header (at least 32)",
            data.len()
        ));
    }
    let (offset, width, height) = (le32(data, 10), le32(data, 18), le32(data, 22));
    let bpp = u16::from_le_bytes([data[28], data[29]]);
    let channels = usize::from(bpp / 8);
    if !matches!(channels, 1 | 3 | 4) || bpp % 8 != 0 {
        return Err(format!(
            "BMP: {bpp} bits a pixel; only 8, 24 and 32 are read (as in TensorFlow)"
        ));
    }
    if width <= 0 || height == 0 || offset < 0 {
        return Err(format!(
            "BMP: bad header: width {width}, height {height}, pixel data at {offset}"
        ));
    }
    let (w, h) = (
        width.unsigned_abs() as usize,
        height.unsigned_abs() as usize,
    );
    check_size(w, h, max_pixels)?;
    let row = (channels * w).div_ceil(4) * 4;
    let expected = (offset as usize).checked_add(row.checked_mul(h).ok_or("BMP: too large")?);
    if expected != Some(data.len()) {
        return Err(format!(
            "BMP: the file is {} bytes, its header says {} (pixel data at {offset}, {h} rows of \
             {row} bytes)",
            data.len(),
            expected.map_or_else(|| "more".to_string(), |e| e.to_string()),
        ));
    }
    let pixels_at = &data[offset as usize..];
    let mut out = shared_pool().take(w * h * channels);
    for (y, dst) in out
        .as_bytes_mut()
        .chunks_exact_mut(w * channels)
        .enumerate()
    {
        let src_row = if height < 0 { y } else { h - 1 - y };
        let src = &pixels_at[src_row * row..src_row * row + w * channels];
        if channels == 1 {
            dst.copy_from_slice(src);
            continue;
        }
        for (d, s) in dst
            .chunks_exact_mut(channels)
            .zip(src.chunks_exact(channels))
        {
            d[0] = s[2];
            d[1] = s[1];
            d[2] = s[0];
            if channels == 4 {
                d[3] = s[3];
            }
        }
    }
    Ok(Decoded {
        height: h,
        width: w,
        channels,
        pixels: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BMP of `h` rows (top-down when `top_down`) of `w` pixels of `bpp` bits, pixel (x, y)
    /// holding bytes `f(x, y, i)` in file order.
    fn bmp(
        w: usize,
        h: usize,
        bpp: u16,
        top_down: bool,
        f: impl Fn(usize, usize, usize) -> u8,
    ) -> Vec<u8> {
        let c = usize::from(bpp / 8);
        let row = (w * c).div_ceil(4) * 4;
        let offset = 54;
        let mut out = vec![0u8; offset + row * h];
        out[..2].copy_from_slice(b"BM");
        let size = out.len() as u32;
        out[2..6].copy_from_slice(&size.to_le_bytes());
        out[10..14].copy_from_slice(&(offset as u32).to_le_bytes());
        out[14..18].copy_from_slice(&40u32.to_le_bytes());
        out[18..22].copy_from_slice(&(w as i32).to_le_bytes());
        let hh = if top_down { -(h as i32) } else { h as i32 };
        out[22..26].copy_from_slice(&hh.to_le_bytes());
        out[26..28].copy_from_slice(&1u16.to_le_bytes());
        out[28..30].copy_from_slice(&bpp.to_le_bytes());
        for y in 0..h {
            let file_row = if top_down { y } else { h - 1 - y };
            for x in 0..w {
                for i in 0..c {
                    out[offset + file_row * row + x * c + i] = f(x, y, i);
                }
            }
        }
        out
    }

    #[test]
    fn rows_and_samples_come_out_as_tensorflow_orders_them() {
        for top_down in [false, true] {
            for bpp in [8u16, 24, 32] {
                let data = bmp(3, 2, bpp, top_down, |x, y, i| {
                    (10 * y + x) as u8 * 4 + i as u8
                });
                let img = decode(&data, 0, 1 << 20).unwrap();
                let c = usize::from(bpp / 8);
                assert_eq!((img.height, img.width, img.channels), (2, 3, c));
                let px = img.pixels.as_bytes();
                for y in 0..2 {
                    for x in 0..3 {
                        let base = (10 * y + x) as u8 * 4;
                        let got = &px[(y * 3 + x) * c..(y * 3 + x + 1) * c];
                        let want: Vec<u8> = match c {
                            1 => vec![base],
                            3 => vec![base + 2, base + 1, base],
                            _ => vec![base + 2, base + 1, base, base + 3],
                        };
                        assert_eq!(got, &want[..], "bpp {bpp}, top_down {top_down}, ({x}, {y})");
                    }
                }
            }
        }
    }

    #[test]
    fn bad_files_are_errors_as_in_tensorflow() {
        let good = bmp(3, 2, 24, false, |_, _, _| 7);
        assert!(decode(&good, 1, 1 << 20)
            .unwrap_err()
            .contains("channels must be 0, 3 or 4"));
        let mut extra = good.clone();
        extra.push(0);
        assert!(decode(&extra, 0, 1 << 20)
            .unwrap_err()
            .contains("the file is 79 bytes"));
        assert!(decode(&good[..good.len() - 1], 0, 1 << 20).is_err());
        assert!(decode(&good[..20], 0, 1 << 20)
            .unwrap_err()
            .contains("too few"));
        let mut bits16 = good.clone();
        bits16[28] = 16;
        assert!(decode(&bits16, 0, 1 << 20).unwrap_err().contains("16 bits"));
        let mut huge = good.clone();
        huge[18..22].copy_from_slice(&100_000i32.to_le_bytes());
        huge[22..26].copy_from_slice(&100_000i32.to_le_bytes());
        assert!(decode(&huge, 0, 1 << 28)
            .unwrap_err()
            .contains("max_pixels"));
        let mut zero = good;
        zero[18..22].copy_from_slice(&0i32.to_le_bytes());
        assert!(decode(&zero, 0, 1 << 20)
            .unwrap_err()
            .contains("bad header"));
    }
}
