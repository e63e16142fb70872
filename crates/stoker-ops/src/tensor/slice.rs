//! `slice(field, start, stop, axis=-1)`: `x[..., start:stop]` on one axis (copied).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, resolve_axis, with_field};
use crate::kernels::numeric::is_numeric;
use crate::kernels::spec_json::spec_json;

const OP: &str = "slice";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    pub field: String,
    pub start: usize,
    pub stop: usize,
    /// Negative counts from the end, so that the op works on elements and batches alike.
    #[serde(default = "last")]
    pub axis: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn last() -> i64 {
    -1
}

impl Op for Slice {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if self.stop < self.start {
            return Err(Error::schema(
                OP,
                format!("stop {} < start {}", self.stop, self.start),
            ));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_numeric, "a numeric type")? else {
            return Ok(input.clone());
        };
        let a = resolve_axis(OP, self.axis, f.shape.len())
            .map_err(|e| Error::schema(OP, e.to_string()))?;
        let mut shape = f.shape.clone();
        if let Some(d) = shape[a] {
            if self.stop > d {
                return Err(Error::schema(
                    OP,
                    format!("stop {} is past the axis length {d}", self.stop),
                ));
            }
        }
        shape[a] = Some(self.stop - self.start);
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), f.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        self.axis < 0
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let raw = t
            .raw()
            .ok_or_else(|| Error::invalid(OP, "bytes tensors cannot be sliced"))?;
        let a = resolve_axis(OP, self.axis, t.shape().len())?;
        let dim = t.shape()[a];
        if self.stop > dim || self.stop < self.start {
            return Err(Error::invalid(
                OP,
                format!(
                    "{}..{} is out of range for length {dim}",
                    self.start, self.stop
                ),
            ));
        }
        let size = t.dtype().size().unwrap_or(1);
        let inner: usize = t.shape()[a + 1..].iter().product::<usize>() * size;
        let outer: usize = t.shape()[..a].iter().product();
        let take = (self.stop - self.start) * inner;
        let mut storage = stoker_core::storage::shared_pool().take(outer * take);
        for (o, dst) in storage
            .as_bytes_mut()
            .chunks_exact_mut(take.max(1))
            .enumerate()
            .take(outer)
        {
            let src = o * dim * inner + self.start * inner;
            dst.copy_from_slice(&raw[src..src + take]);
        }
        let mut shape = t.shape().to_vec();
        shape[a] = self.stop - self.start;
        let out = Tensor::from_storage(t.dtype(), shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
