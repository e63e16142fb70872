//! `unflatten(field, shape, axis=-1)`: splits one axis into several (like
//! `torch.Tensor.unflatten`), without copying.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result};

use crate::kernels::fields::{input_spec, out_name, put, resolve_axis, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "unflatten";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unflatten {
    pub field: String,
    pub shape: Vec<usize>,
    #[serde(default = "last")]
    pub axis: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn last() -> i64 {
    -1
}

impl Op for Unflatten {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(input, OP, &self.field, |_| true, "any type")? else {
            return Ok(input.clone());
        };
        let a = resolve_axis(OP, self.axis, f.shape.len())
            .map_err(|e| Error::schema(OP, e.to_string()))?;
        let want: usize = self.shape.iter().product();
        if let Some(d) = f.shape[a] {
            if d != want {
                return Err(Error::schema(
                    OP,
                    format!("axis of length {d} cannot become {:?}", self.shape),
                ));
            }
        }
        let mut shape = f.shape[..a].to_vec();
        shape.extend(self.shape.iter().map(|&d| Some(d)));
        shape.extend_from_slice(&f.shape[a + 1..]);
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
        let a = resolve_axis(OP, self.axis, t.shape().len())?;
        let want: usize = self.shape.iter().product();
        if t.shape()[a] != want {
            return Err(Error::invalid(
                OP,
                format!(
                    "axis of length {} cannot become {:?}",
                    t.shape()[a],
                    self.shape
                ),
            ));
        }
        let mut shape = t.shape()[..a].to_vec();
        shape.extend_from_slice(&self.shape);
        shape.extend_from_slice(&t.shape()[a + 1..]);
        let out = t.reshaped(shape)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
