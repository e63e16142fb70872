//! The fused decode + crop ops: `decode_crop_or_pad` (the PNG window decoder decodes only the
//! rows it keeps) and `decode_random_resized_crop` (JPEG region decoding); the first byte
//! picks the op and the crop, the second the element (the random box).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    stoker_fuzz::allow_caught_panics();
    let [mode, element, image @ ..] = data else {
        return;
    };
    let side = 1 + u64::from(mode >> 2);
    let channels = [0, 1, 3, 4][usize::from(mode & 3)];
    let decode = json!({"field": "x", "channels": channels, "max_pixels": 1 << 16});
    let spec = if mode & 0x80 == 0 {
        json!({"op": "decode_crop_or_pad", "decode": decode,
               "crop": {"field": "x", "height": side, "width": side / 2 + 1}})
    } else {
        json!({"op": "decode_random_resized_crop", "decode": decode,
               "crop": {"field": "x", "height": side, "width": side, "seed": 7}})
    };
    stoker_fuzz::apply(&spec, image, u64::from(*element));
});
