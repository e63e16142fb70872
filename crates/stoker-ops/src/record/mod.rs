//! Record ops: from stored records to tensors (`parse_example`, `decode_raw`, `read_file`).

pub mod decode_csv;
pub mod decode_raw;
pub mod parse_converted;
pub mod parse_example;
pub mod read_file;
