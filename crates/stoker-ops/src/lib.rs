//! Native ops. Each works on one element and, when it is element-wise, on a whole batch
//! (any number of leading dimensions), so the planner can run it once per batch.
//!
//! Every op names its input field and its output field (by default the same name, replacing
//! the input), and checks its input schema when the pipeline is built.

pub mod channels;
mod fields;
pub mod numeric;

pub mod cast;
pub mod center_crop;
pub mod color_jitter;
pub mod crop_row_op;
pub mod decode_crop_or_pad;
pub mod decode_image;
pub mod decode_raw;
pub mod decode_resized_crop;
pub mod gather_channels;
pub mod jpeg;
pub mod layout;
pub mod normalize;
pub mod one_hot_colors;
mod one_hot_rows;
pub mod parse_example;
pub mod pixel_chain;
mod png_window;
pub mod random_flip;
pub mod random_resized_crop;
pub mod read_file;
pub mod rescale;
pub mod resize;
pub mod resize_with_crop_or_pad;
pub mod select;
pub mod slice;
pub mod spec;
mod u8_quotients;
pub mod unflatten;
pub mod unpack_bits;

pub use spec::OpSpec;
