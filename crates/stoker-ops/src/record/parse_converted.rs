//! `parse_converted(fields, field="record")`: the elements `stoker convert` stored, back from
//! their `tf.train.Example` records: each field as its dtype and shape, from the feature that
//! holds it (see [`Stored`]). The manifest of a converted dataset lists the fields; this op is
//! how `Dataset.from_converted` reads them, so a spec of it needs no feature list written by
//! hand. Encoded images (PNG, JPEG) come out as their bytes, for a `decode_image` after it.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, ErrorPolicy, Result, Tensor};
use stoker_formats::example_wire::{find_features, ListRef};

use crate::kernels::fields::input_spec;
use crate::kernels::spec_json::spec_json;

const OP: &str = "parse_converted";

/// How a field is stored in an Example.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stored {
    /// An `int64_list` of the values (int64 fields).
    Int64,
    /// A `float_list` of the values (float32 fields).
    Float,
    /// A `bytes_list` of the values (string fields).
    Bytes,
    /// One `bytes_list` value: the values' little-endian bytes (`tf.io.decode_raw`).
    Raw,
    /// One `bytes_list` value: a PNG of a uint8 `[H, W, C]` image.
    Png,
    /// One `bytes_list` value: a JPEG of a uint8 `[H, W, C]` image.
    Jpeg,
}

impl Stored {
    pub fn name(self) -> &'static str {
        match self {
            Stored::Int64 => "int64",
            Stored::Float => "float",
            Stored::Bytes => "bytes",
            Stored::Raw => "raw",
            Stored::Png => "png",
            Stored::Jpeg => "jpeg",
        }
    }

    /// Whether the stored value is an encoded image.
    pub fn is_image(self) -> bool {
        matches!(self, Stored::Png | Stored::Jpeg)
    }
}

/// One stored field: its name, dtype and shape (`None`: a size that varies), and how it is
/// stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredField {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<Option<usize>>,
    pub stored: Stored,
}

impl StoredField {
    /// The feature holding the field's shape, for a field whose shape varies (an encoded
    /// image carries its own).
    pub fn shape_feature(&self) -> Option<String> {
        (self.shape.contains(&None) && !self.stored.is_image())
            .then(|| format!("{}/shape", self.name))
    }

    /// The field as it comes out of [`ParseConverted`]: an encoded image as one string.
    pub fn parsed_spec(&self) -> FieldSpec {
        if self.stored.is_image() {
            FieldSpec::fixed(&self.name, DType::Bytes, &[])
        } else {
            FieldSpec::new(&self.name, self.dtype, self.shape.clone())
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParseConverted {
    pub fields: Vec<StoredField>,
    #[serde(default = "record")]
    pub field: String,
}

fn record() -> String {
    "record".into()
}

impl ParseConverted {
    /// Every feature the records are searched for: the fields, then the shape features.
    fn features(&self) -> Vec<String> {
        let names = self.fields.iter().map(|f| f.name.clone());
        names
            .chain(self.fields.iter().filter_map(StoredField::shape_feature))
            .collect()
    }

    /// That the fields can be stored as they say, and no two features share a name.
    pub fn check_fields(&self) -> Result<()> {
        let names = self.features();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(Error::schema(OP, format!("feature '{n}' is named twice")));
            }
        }
        for f in &self.fields {
            let ok = match f.stored {
                Stored::Int64 => f.dtype == DType::I64,
                Stored::Float => f.dtype == DType::F32,
                Stored::Bytes => f.dtype == DType::Bytes,
                Stored::Raw => f.dtype.size().is_some(),
                Stored::Png | Stored::Jpeg => f.dtype == DType::U8 && f.shape.len() == 3,
            };
            if !ok {
                return Err(Error::schema(
                    OP,
                    format!(
                        "field '{}': {} {:?} cannot be stored as {}",
                        f.name,
                        f.dtype,
                        f.shape,
                        f.stored.name()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The tensor of field `f` from its list and its shape feature's.
    fn tensor(
        &self,
        f: &StoredField,
        list: &ListRef,
        shape: Option<&ListRef>,
    ) -> Result<Tensor, String> {
        if f.stored.is_image() {
            // The encoded image carries its own shape.
            let mut v = Vec::with_capacity(1);
            match list {
                ListRef::Bytes(_) if list.count()? == 1 => list.bytes_into(&mut v)?,
                _ => {
                    return Err(format!(
                        "a {} list, expected one encoded image",
                        list.type_name()
                    ))
                }
            }
            return Tensor::from_bytes(Vec::new(), v, Vec::new()).map_err(|e| e.to_string());
        }
        let shape = match shape {
            None => (f.shape.iter())
                .map(|d| d.ok_or_else(|| "no shape feature".to_string()))
                .collect::<Result<Vec<usize>, String>>()?,
            Some(l) => {
                let mut dims = vec![0i64; l.count()?];
                l.int64s_into(&mut dims)?;
                let dims: Vec<usize> = (dims.iter())
                    .map(|&d| usize::try_from(d).map_err(|_| format!("shape {dims:?}")))
                    .collect::<Result<_, String>>()?;
                let fits = dims.len() == f.shape.len()
                    && dims
                        .iter()
                        .zip(&f.shape)
                        .all(|(d, s)| s.is_none_or(|s| s == *d));
                if !fits {
                    return Err(format!("shape {dims:?} does not fit {:?}", f.shape));
                }
                dims
            }
        };
        let n: usize = shape.iter().product();
        let count = list.count()?;
        let want = match f.stored {
            Stored::Int64 | Stored::Float | Stored::Bytes => n,
            _ => 1,
        };
        if count != want {
            return Err(format!("{count} values in its list, expected {want}"));
        }
        let kind_ok = matches!(
            (f.stored, list),
            (Stored::Int64, ListRef::Int64(_))
                | (Stored::Float, ListRef::Float(_))
                | (_, ListRef::Bytes(_))
        );
        if !kind_ok
            || (matches!(list, ListRef::Bytes(_))
                && matches!(f.stored, Stored::Int64 | Stored::Float))
        {
            return Err(format!(
                "a {} list, stored as {}",
                list.type_name(),
                f.stored.name()
            ));
        }
        let internal = |e: Error| e.to_string();
        match f.stored {
            Stored::Int64 => {
                let mut v = vec![0i64; n];
                list.int64s_into(&mut v)?;
                Tensor::from_slice(DType::I64, shape, &v).map_err(internal)
            }
            Stored::Float => {
                let mut v = vec![0f32; n];
                list.floats_into(&mut v)?;
                Tensor::from_slice(DType::F32, shape, &v).map_err(internal)
            }
            Stored::Bytes => {
                let mut v = Vec::with_capacity(n);
                list.bytes_into(&mut v)?;
                Tensor::from_bytes(shape, v, Vec::new()).map_err(internal)
            }
            Stored::Raw => {
                let mut v: Vec<Bytes> = Vec::with_capacity(1);
                list.bytes_into(&mut v)?;
                let raw = v.first().map(|b| b.as_ref()).unwrap_or_default();
                let size = f.dtype.size().unwrap_or(1);
                if raw.len() != n * size {
                    return Err(format!(
                        "{} bytes, expected {} for {} {shape:?}",
                        raw.len(),
                        n * size,
                        f.dtype
                    ));
                }
                let storage = stoker_core::storage::Storage::copy_from(raw);
                Tensor::from_storage(f.dtype, shape, storage).map_err(internal)
            }
            Stored::Png | Stored::Jpeg => Err("an encoded image".into()),
        }
    }
}

impl Op for ParseConverted {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        // It builds a new element (the record field is gone).
        Fields::All
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check_fields()?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::Bytes, "string")? else {
            return Ok(Schema::new(
                self.fields.iter().map(StoredField::parsed_spec).collect(),
            ));
        };
        if !f.shape.is_empty() {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' must be one record (a scalar string), not a batch",
                    self.field
                ),
            ));
        }
        Ok(Schema::new(
            self.fields.iter().map(StoredField::parsed_spec).collect(),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let data = t
            .bytes_data()
            .filter(|_| t.shape().is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "field '{}' must be one record (a scalar string)",
                        self.field
                    ),
                )
            })?;
        let origin = data.origin(0);
        let record = data.values.first().cloned().unwrap_or_default();
        let names = self.features();
        let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        let parsed = find_features(&record, &wanted).and_then(|found| {
            let mut shapes = found[self.fields.len()..].iter();
            let mut tensors = Vec::with_capacity(self.fields.len());
            for (f, list) in self.fields.iter().zip(&found) {
                let shape = match f.shape_feature() {
                    Some(name) => match shapes.next() {
                        Some(Some(l)) => Some(l),
                        _ => return Err(format!("feature '{name}' is missing")),
                    },
                    None => None,
                };
                let Some(list) = list else {
                    return Err(format!("feature '{}' is missing", f.name));
                };
                let t = self
                    .tensor(f, list, shape)
                    .map_err(|why| format!("feature '{}': {why}", f.name))?;
                tensors.push(t);
            }
            Ok(tensors)
        });
        match parsed {
            Ok(tensors) => {
                let names: Vec<Arc<str>> = self
                    .fields
                    .iter()
                    .map(|f| Arc::from(f.name.as_str()))
                    .collect();
                Ok(Some(Element::new(names.into(), tensors)))
            }
            Err(reason) => {
                let err = Error::invalid_record(OP, origin, 0, reason);
                if ctx.policy == ErrorPolicy::Skip {
                    ctx.skip(err.to_string());
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
