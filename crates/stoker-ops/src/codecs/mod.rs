//! Image codecs, below the ops: JPEG decoding (libjpeg-turbo or zune-jpeg), the PNG window
//! decoder, GIF and BMP as TensorFlow reads them, and the pieces of PNG's file structure and
//! the size checks they share with `decode_image`. Codecs know no op.

pub(crate) mod bmp;
pub(crate) mod decoded;
pub mod encode;
pub(crate) mod gif;
pub mod jpeg;
pub(crate) mod png_file;
pub(crate) mod png_window;
