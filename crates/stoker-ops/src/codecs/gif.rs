//! GIF, through the `gif` crate (image-rs), composed as TensorFlow's `decode_image` composes a
//! GIF's first frame (`expand_animations=False`, which is what a `[H, W, 3]` decode returns):
//! a canvas as wide and as high as the file's widest and highest frames (not the logical
//! screen), black; the first frame drawn at its offset, clipped to the canvas, each index
//! through the frame's palette (else the global one); the transparent index leaves black. An
//! index past the palette, or no palette, is an error.

use std::num::NonZeroU64;

use stoker_core::storage::shared_pool;

use crate::codecs::decoded::{check_size, Decoded};

/// Whether `data` starts like a GIF file.
pub(crate) fn is_gif(data: &[u8]) -> bool {
    data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a")
}

/// The first frame of `data` as RGB. `wanted` must be 0 or 3, as in TensorFlow.
pub(crate) fn decode_first_frame(
    data: &[u8],
    wanted: u8,
    max_pixels: u64,
) -> Result<Decoded, String> {
    if !matches!(wanted, 0 | 3) {
        return Err(format!(
            "GIF: channels must be 0 or 3 for GIF (as in TensorFlow), not {wanted}"
        ));
    }
    let err = |e: gif::DecodingError| format!("GIF: {e}");
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::Indexed);
    // A frame's indices take a byte a pixel: a frame claiming more pixels than allowed is
    // refused before its buffer is allocated.
    if let Some(limit) = NonZeroU64::new(max_pixels) {
        options.set_memory_limit(gif::MemoryLimit::Bytes(limit));
    }
    let mut decoder = options.read_info(data).map_err(err)?;
    let global = decoder.global_palette().map(<[u8]>::to_vec);
    let frame = decoder
        .read_next_frame()
        .map_err(err)?
        .ok_or_else(|| "GIF: the file holds no image".to_string())?
        .clone();
    // The canvas: the largest frame's width and height (the later frames' data is passed
    // over, not kept).
    let (mut width, mut height) = (usize::from(frame.width), usize::from(frame.height));
    while let Some(later) = decoder.next_frame_info().map_err(err)? {
        width = width.max(usize::from(later.width));
        height = height.max(usize::from(later.height));
    }
    check_size(width, height, max_pixels)?;
    let palette = frame
        .palette
        .as_deref()
        .or(global.as_deref())
        .ok_or_else(|| "GIF: the first frame has no colour map".to_string())?;
    let colours = palette.len() / 3;
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    let (fw, fh) = (usize::from(frame.width), usize::from(frame.height));
    let mut pixels = shared_pool().take(width * height * 3);
    let out = pixels.as_bytes_mut();
    out.fill(0);
    for y in top..(top + fh).min(height) {
        for x in left..(left + fw).min(width) {
            let Some(&index) = frame.buffer.get((y - top) * fw + (x - left)) else {
                return Err("GIF: the first frame's data ends early".into());
            };
            if Some(index) == frame.transparent {
                continue;
            }
            let i = usize::from(index);
            if i >= colours {
                return Err(format!(
                    "GIF: colour index {index} at ({x}, {y}) is past the colour map's {colours} \
                     colours"
                ));
            }
            out[(y * width + x) * 3..][..3].copy_from_slice(&palette[3 * i..3 * i + 3]);
        }
    }
    Ok(Decoded {
        height,
        width,
        channels: 3,
        pixels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STILL: &[u8] = include_bytes!("../../../../tests/golden/images/still.gif");
    const ANIMATED: &[u8] = include_bytes!("../../../../tests/golden/images/anim.gif");
    /// A 12x10 first frame placed at (3, 2) of a larger screen, with a transparent colour.
    const PLACED: &[u8] = include_bytes!("../../../../tests/golden/images/transparent.gif");

    #[test]
    fn the_first_frame_on_tensorflows_canvas() {
        let still = decode_first_frame(STILL, 0, 1 << 20).unwrap();
        assert_eq!((still.height, still.width, still.channels), (24, 30, 3));
        // An animation's first frame is the still image's (the same frame, written twice).
        let first = decode_first_frame(ANIMATED, 3, 1 << 20).unwrap();
        assert_eq!(first.pixels.as_bytes(), still.pixels.as_bytes());
        // The canvas is the largest frame (12x10), not the screen; the frame is drawn at its
        // offset and clipped, the rest (and the transparent pixels) black.
        let placed = decode_first_frame(PLACED, 0, 1 << 20).unwrap();
        assert_eq!((placed.height, placed.width), (10, 12));
        let px = placed.pixels.as_bytes();
        for y in 0..10 {
            for x in 0..12 {
                if y < 2 || x < 3 {
                    assert_eq!(&px[(y * 12 + x) * 3..][..3], &[0, 0, 0], "({x}, {y})");
                }
            }
        }
        assert!(px.iter().any(|&v| v != 0));
    }

    #[test]
    fn bad_gifs_and_channels_are_errors() {
        assert!(decode_first_frame(STILL, 1, 1 << 20)
            .unwrap_err()
            .contains("0 or 3"));
        assert!(decode_first_frame(STILL, 4, 1 << 20)
            .unwrap_err()
            .contains("0 or 3"));
        for cut in [6, 13, STILL.len() / 2, STILL.len() - 2] {
            assert!(
                decode_first_frame(&STILL[..cut], 0, 1 << 20).is_err(),
                "cut at {cut}"
            );
        }
        assert!(decode_first_frame(STILL, 0, 100)
            .unwrap_err()
            .contains("GIF"));
    }
}
