//! Image encoding: uint8 `[H, W, C]` pixels as PNG or JPEG (for `stoker.io` and for
//! `convert`'s re-encoded image fields). Both encoders are deterministic: the same pixels and
//! settings give the same bytes.

/// PNG of `pixels` (`h * w * c` bytes, C = 1 to 4), 8 bits per channel; `fast` trades size
/// for speed.
pub fn encode_png(
    pixels: &[u8],
    (h, w, c): (usize, usize, usize),
    fast: bool,
) -> Result<Vec<u8>, String> {
    let color = match c {
        1 => png::ColorType::Grayscale,
        2 => png::ColorType::GrayscaleAlpha,
        3 => png::ColorType::Rgb,
        4 => png::ColorType::Rgba,
        _ => return Err(format!("{c} channels: PNG holds 1, 2, 3 or 4")),
    };
    let (Ok(w32), Ok(h32)) = (u32::try_from(w), u32::try_from(h)) else {
        return Err("image too large for PNG".into());
    };
    check_len(pixels, h, w, c)?;
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w32, h32);
    enc.set_color(color);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(if fast {
        png::Compression::Fast
    } else {
        png::Compression::Balanced
    });
    (enc.write_header()
        .and_then(|mut wr| wr.write_image_data(pixels)))
    .map_err(|e| e.to_string())?;
    Ok(out)
}

/// Baseline JPEG of `pixels` (C = 1 or 3) at `quality` (1 to 100), with 4:2:0 chroma
/// subsampling for colour, as libjpeg and PIL do by default.
pub fn encode_jpeg(
    pixels: &[u8],
    (h, w, c): (usize, usize, usize),
    quality: u8,
) -> Result<Vec<u8>, String> {
    let color = match c {
        1 => jpeg_encoder::ColorType::Luma,
        3 => jpeg_encoder::ColorType::Rgb,
        _ => return Err(format!("{c} channels: JPEG holds 1 or 3")),
    };
    if !(1..=100).contains(&quality) {
        return Err(format!("quality {quality} is not in 1..=100"));
    }
    let (Ok(w16), Ok(h16)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err("image too large for JPEG (65535 max)".into());
    };
    check_len(pixels, h, w, c)?;
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
    enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_2_0);
    enc.encode(pixels, w16, h16, color)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn check_len(pixels: &[u8], h: usize, w: usize, c: usize) -> Result<(), String> {
    if h.checked_mul(w).and_then(|n| n.checked_mul(c)) != Some(pixels.len()) {
        return Err(format!(
            "{} bytes of pixels for a {h}x{w}x{c} image",
            pixels.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_round_trips_and_jpeg_decodes_to_the_size() {
        let (h, w) = (5, 7);
        let pixels: Vec<u8> = (0..h * w * 3).map(|i| (i * 11 % 256) as u8).collect();
        let png = encode_png(&pixels, (h, w, 3), false).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(&png))
            .read_info()
            .unwrap();
        let mut back = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut back).unwrap();
        assert_eq!(back, pixels);
        let jpeg = encode_jpeg(&pixels, (h, w, 3), 90).unwrap();
        assert_eq!(crate::codecs::jpeg::header(&jpeg).unwrap().0, 7);
        assert!(encode_jpeg(&pixels, (h, w, 3), 0).is_err());
        assert!(encode_png(&pixels[1..], (h, w, 3), true).is_err());
    }
}
