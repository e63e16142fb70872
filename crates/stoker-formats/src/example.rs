//! `tf.train.Example`, as hand-written prost messages whose bytes fields are [`Bytes`]
//! slices of the record they were decoded from (no copy).
//!
//! Field numbers follow tensorflow/core/example/{example,feature}.proto.

use std::collections::BTreeMap;

use bytes::Bytes;
use prost::Message;

#[derive(Clone, PartialEq, Message)]
pub struct Example {
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Features {
    /// A sorted map, so that serialisation is deterministic.
    #[prost(btree_map = "string, message", tag = "1")]
    pub feature: BTreeMap<String, Feature>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Feature {
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub kind: Option<Kind>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

#[derive(Clone, PartialEq, Message)]
pub struct BytesList {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub value: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct FloatList {
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

impl Kind {
    /// The list type's name as TensorFlow spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::BytesList(_) => "bytes_list",
            Kind::FloatList(_) => "float_list",
            Kind::Int64List(_) => "int64_list",
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Kind::BytesList(l) => l.value.len(),
            Kind::FloatList(l) => l.value.len(),
            Kind::Int64List(l) => l.value.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Feature {
    pub fn bytes(values: Vec<Bytes>) -> Feature {
        Feature {
            kind: Some(Kind::BytesList(BytesList { value: values })),
        }
    }
    pub fn floats(values: Vec<f32>) -> Feature {
        Feature {
            kind: Some(Kind::FloatList(FloatList { value: values })),
        }
    }
    pub fn int64s(values: Vec<i64>) -> Feature {
        Feature {
            kind: Some(Kind::Int64List(Int64List { value: values })),
        }
    }
}

impl Example {
    /// An Example holding `features`.
    pub fn with_features(features: impl IntoIterator<Item = (String, Feature)>) -> Example {
        Example {
            features: Some(Features {
                feature: features.into_iter().collect(),
            }),
        }
    }

    pub fn serialize(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Decodes without copying the bytes values out of `data`.
    pub fn parse(data: Bytes) -> Result<Example, prost::DecodeError> {
        Example::decode(data)
    }

    pub fn feature(&self, name: &str) -> Option<&Kind> {
        self.features
            .as_ref()
            .and_then(|f| f.feature.get(name))
            .and_then(|f| f.kind.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ex = Example::with_features([
            (
                "d".to_string(),
                Feature::bytes(vec![Bytes::from_static(b"xyz")]),
            ),
            ("s".to_string(), Feature::int64s(vec![-5, 7])),
            ("f".to_string(), Feature::floats(vec![0.5])),
        ]);
        let data = Bytes::from(ex.serialize());
        let back = Example::parse(data.clone()).unwrap();
        assert_eq!(back, ex);
        match back.feature("d") {
            Some(Kind::BytesList(l)) => {
                // The value is a slice of the input buffer, not a copy.
                let inside = data.as_ptr_range().contains(&l.value[0].as_ptr());
                assert!(inside);
            }
            other => panic!("{other:?}"),
        }
        assert!(Example::parse(Bytes::from_static(b"\xff\xff\xff")).is_err());
    }
}
