//! `read_file(field)`: a file name → the file's bytes (like `tf.io.read_file`). The bytes keep
//! the file as their origin, so a later op that fails on them (e.g. a bad image) names it.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Origin, Result, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "read_file";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadFile {
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl Op for ReadFile {
    fn work(&self) -> stoker_core::op::Work {
        stoker_core::op::Work::ReadFile
    }

    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(
            input,
            OP,
            &self.field,
            |d| d == DType::Bytes,
            "file names (string)",
        )?
        else {
            return Ok(input.clone());
        };
        if !f.shape.is_empty() {
            return Err(Error::schema(
                OP,
                format!("field '{}' must hold one file name per element", self.field),
            ));
        }
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), DType::Bytes, vec![]),
        ))
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let name = t
            .bytes_data()
            .filter(|_| t.shape().is_empty())
            .and_then(|b| b.values.first())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!("field '{}' must be a scalar file name", self.field),
                )
            })?;
        let path =
            std::str::from_utf8(name).map_err(|_| Error::invalid(OP, "file name is not UTF-8"))?;
        let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let origin = Origin {
            file: Arc::from(path),
            record: 0,
            offset: 0,
        };
        let out = Tensor::scalar_bytes(Bytes::from(data), Some(origin));
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
