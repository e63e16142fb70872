//! Compression of TFRecord files, named as in TensorFlow.

use stoker_core::{Error, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Zlib,
}

impl Compression {
    /// `""`/`"NONE"`, `"GZIP"`, `"ZLIB"` (any case), as TensorFlow's `compression_type`.
    pub fn parse(name: &str) -> Result<Compression> {
        match name.to_ascii_uppercase().as_str() {
            "" | "NONE" => Ok(Compression::None),
            "GZIP" => Ok(Compression::Gzip),
            "ZLIB" => Ok(Compression::Zlib),
            other => Err(Error::schema(
                "TFRecordDataset",
                format!("unknown compression_type '{other}'; use None, 'GZIP' or 'ZLIB'"),
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gzip => "GZIP",
            Compression::Zlib => "ZLIB",
        }
    }
}
