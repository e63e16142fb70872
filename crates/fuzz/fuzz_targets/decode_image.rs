//! `decode_image` on PNG (the window decoder and the `png` crate) and JPEG (libjpeg-turbo by
//! default; zune-jpeg with `--no-default-features`): the first byte picks the channels and
//! the output dtype, the pixel limit keeps allocations small.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    stoker_fuzz::allow_caught_panics();
    let Some((&mode, image)) = data.split_first() else {
        return;
    };
    let channels = [0, 1, 2, 3, 4][usize::from(mode % 5)];
    let dtype = if mode & 8 != 0 { "uint16" } else { "uint8" };
    let spec = json!({"op": "decode_image", "field": "x", "channels": channels,
                      "max_pixels": 1 << 16, "dtype": dtype});
    stoker_fuzz::apply(&spec, image, 0);
});
