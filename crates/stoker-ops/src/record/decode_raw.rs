//! `decode_raw(field, dtype)`: reinterprets each byte string as a vector of numbers, like
//! `tf.io.decode_raw`: bytes of shape S become `S + [n]`.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "decode_raw";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeRaw {
    pub field: String,
    pub dtype: DType,
    #[serde(default = "yes")]
    pub little_endian: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn yes() -> bool {
    true
}

impl Op for DecodeRaw {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if self.dtype.size().is_none() {
            return Err(Error::schema(OP, "the output dtype must be numeric"));
        }
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::Bytes, "string")? else {
            return Ok(input.clone());
        };
        let mut shape = f.shape.clone();
        shape.push(None);
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), self.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let data = t.bytes_data().ok_or_else(|| {
            Error::invalid(
                OP,
                format!("field '{}' is {}, expected string", self.field, t.dtype()),
            )
        })?;
        let size = self
            .dtype
            .size()
            .ok_or_else(|| Error::invalid(OP, "the output dtype must be numeric"))?;
        let width = data.values.first().map_or(0, |v| v.len());
        for (row, v) in data.values.iter().enumerate() {
            if v.len() != width || v.len() % size != 0 {
                let reason = if v.len() % size != 0 {
                    format!(
                        "{} bytes is not a whole number of {} values",
                        v.len(),
                        self.dtype
                    )
                } else {
                    format!("{} bytes, but the first value of the batch has {width}; all must have the same length", v.len())
                };
                return Err(Error::invalid_record(OP, data.origin(row), row, reason));
            }
        }
        let mut shape = t.shape().to_vec();
        shape.push(width / size);
        let mut storage = stoker_core::storage::shared_pool().take(data.values.len() * width);
        for (dst, v) in storage
            .as_bytes_mut()
            .chunks_exact_mut(width.max(1))
            .zip(&data.values)
        {
            dst.copy_from_slice(v);
            if !self.little_endian && size > 1 {
                for word in dst.chunks_exact_mut(size) {
                    word.reverse();
                }
            }
        }
        let out = Tensor::from_storage(self.dtype, shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
