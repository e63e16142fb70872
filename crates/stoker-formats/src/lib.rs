//! File formats: TFRecord framing, `tf.train.Example`, NumPy's `.npy` / `.npz`, text lines and
//! fixed-length records.

pub mod compression;
pub mod example;
pub mod example_wire;
pub mod fixed_length;
pub mod npy;
pub mod text_line;
pub mod tfrecord_index;
pub mod tfrecord_reader;
pub mod tfrecord_writer;

pub use compression::Compression;
pub use tfrecord_reader::{RecordReader, TfRecordIter};
pub use tfrecord_writer::RecordWriter;

/// TFRecord's masked CRC32C: rotate right by 15 and add a constant, so that a CRC of data that
/// itself contains CRCs stays well distributed.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}
