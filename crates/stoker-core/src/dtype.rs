//! Element types of tensors.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The type of a tensor's elements. `Bytes` tensors hold variable-length byte strings.
/// Serialised by its NumPy name (`float32`, `string`, ...); any spelling [`DType::parse`]
/// accepts is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    U8,
    U16,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
    Bytes,
}

impl DType {
    /// Size of one element in bytes; `None` for variable-length bytes.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
            DType::Bytes => return None,
        })
    }

    /// NumPy's name for the type (`string` for bytes, as in TensorFlow).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::Bytes => "string",
        }
    }

    /// Parses NumPy, TensorFlow or Rust spellings: `float32`, `f32`, `string`, `bytes`, ...
    pub fn parse(name: &str) -> Option<DType> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "bool" => DType::Bool,
            "uint8" | "u8" => DType::U8,
            "uint16" | "u16" => DType::U16,
            "int8" | "i8" => DType::I8,
            "int16" | "i16" => DType::I16,
            "int32" | "i32" => DType::I32,
            "int64" | "i64" => DType::I64,
            "float16" | "f16" | "half" => DType::F16,
            "bfloat16" | "bf16" => DType::BF16,
            "float32" | "f32" | "float" => DType::F32,
            "float64" | "f64" | "double" => DType::F64,
            "string" | "bytes" | "str" => DType::Bytes,
            _ => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
}

impl Serialize for DType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
        let name = String::deserialize(d)?;
        DType::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown dtype '{name}'")))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in [
            DType::Bool,
            DType::U8,
            DType::I8,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::BF16,
            DType::F32,
            DType::F64,
            DType::Bytes,
        ] {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        assert_eq!(DType::parse("nope"), None);
        assert_eq!(DType::F16.size(), Some(2));
        assert_eq!(DType::Bytes.size(), None);
    }
}
