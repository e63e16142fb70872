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

    /// For a file read as uncompressed whose first record header is bad: what to say when
    /// its first bytes are a GZIP or ZLIB stream's, else nothing.
    pub fn hint(head: &[u8]) -> &'static str {
        match head {
            [0x1f, 0x8b, ..] => {
                " (the file starts like a GZIP stream: read it with compression_type=\"GZIP\")"
            }
            // A ZLIB header: deflate (CM 8), a window of at most 32 KiB, the check bits.
            [cmf, flg, ..]
                if cmf & 0x0f == 8
                    && cmf >> 4 <= 7
                    && (u16::from(*cmf) << 8 | u16::from(*flg)) % 31 == 0 =>
            {
                " (the file starts like a ZLIB stream: read it with compression_type=\"ZLIB\")"
            }
            _ => "",
        }
    }
}
