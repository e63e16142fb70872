//! `ensure_shape(field, shape)`: checks that every element's field has `shape` (`None`: any
//! size in that dimension), as `tf.ensure_shape` does, and as tf.data checks what a function
//! returns against the static shapes its graph gives it (a `set_shape` among them). The
//! schema takes the sizes it names. Nothing is copied.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result};

use crate::kernels::fields::{input_spec, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "ensure_shape";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnsureShape {
    pub field: String,
    pub shape: Vec<Option<usize>>,
}

impl EnsureShape {
    fn fits(&self, shape: &[Option<usize>]) -> bool {
        shape.len() == self.shape.len()
            && (shape.iter().zip(&self.shape)).all(|(have, want)| match (have, want) {
                (Some(h), Some(w)) => h == w,
                _ => true,
            })
    }

    fn wanted(&self) -> String {
        let dims: Vec<String> = (self.shape.iter())
            .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
            .collect();
        format!("[{}]", dims.join(", "))
    }
}

impl Op for EnsureShape {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, None)
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(input, OP, &self.field, |_| true, "any type")? else {
            return Ok(input.clone());
        };
        if !self.fits(&f.shape) {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {:?}, not {}",
                    self.field,
                    f.shape,
                    self.wanted()
                ),
            ));
        }
        let shape = (f.shape.iter().zip(&self.shape))
            .map(|(have, want)| want.or(*have))
            .collect();
        Ok(with_field(
            input,
            FieldSpec::new(self.field.clone(), f.dtype, shape),
        ))
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let shape: Vec<Option<usize>> = input.tensors[i].shape().iter().map(|&d| Some(d)).collect();
        if !self.fits(&shape) {
            return Err(Error::invalid(
                OP,
                format!(
                    "field '{}': incompatible shapes: expected {} but got {:?}",
                    self.field,
                    self.wanted(),
                    input.tensors[i].shape()
                ),
            ));
        }
        Ok(Some(input))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::element::names;
    use stoker_core::{DType, Tensor};

    #[test]
    fn passes_a_matching_shape_and_names_a_wrong_one() {
        let op = EnsureShape {
            field: "x".into(),
            shape: vec![Some(2), None],
        };
        let element = |shape: Vec<usize>| {
            let n = shape.iter().product::<usize>();
            let values = vec![0u8; n];
            Element::new(
                names(&["x"]),
                vec![Tensor::from_slice(DType::U8, shape, &values).unwrap()],
            )
        };
        let stats = stoker_core::stats::StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: stoker_core::ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        assert!(op.apply(element(vec![2, 5]), &ctx).unwrap().is_some());
        for wrong in [vec![3, 5], vec![2], vec![1, 2, 5]] {
            let e = op.apply(element(wrong), &ctx).unwrap_err().to_string();
            assert!(e.contains("expected [2, ?]"), "{e}");
        }
        let schema = Schema::new(vec![FieldSpec::new("x", DType::U8, vec![None, Some(5)])]);
        let out = op.output_schema(&schema).unwrap();
        assert_eq!(out.fields[0].shape, vec![Some(2), Some(5)]);
        let fixed = Schema::new(vec![FieldSpec::new("x", DType::U8, vec![Some(3), None])]);
        assert!(op.output_schema(&fixed).is_err());
    }
}
