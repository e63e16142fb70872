//! Image ops: decoding (through `codecs`), resizing, cropping, flips and colour changes of
//! `[H, W, C]` images.

pub mod center_crop;
pub mod color_index;
pub mod color_jitter;
pub mod decode_image;
pub mod one_hot_colors;
pub mod random_crop;
pub mod random_flip;
pub mod random_resized_crop;
pub mod resize;
pub mod resize_bilinear;
pub mod resize_with_crop_or_pad;
