//! What the decoders hand back, and the size check every decoder makes before it allocates.

use stoker_core::storage::Storage;

/// A decoded image: height, width, channels and its pixels (HWC).
#[derive(Debug)]
pub(crate) struct Decoded {
    pub height: usize,
    pub width: usize,
    pub channels: usize,
    pub pixels: Storage,
}

pub(crate) fn check_size(width: usize, height: usize, max_pixels: u64) -> Result<(), String> {
    let pixels = width as u64 * height as u64;
    if width == 0 || height == 0 {
        return Err(format!(
            "the header claims an empty image ({width}x{height})"
        ));
    }
    if pixels > max_pixels {
        return Err(format!(
            "the header claims {width}x{height} = {pixels} pixels, over the limit of {max_pixels} (max_pixels)"
        ));
    }
    Ok(())
}
