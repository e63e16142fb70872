//! `one_hot(field, depth)`: integer class indices `[...]` → float32 `[..., depth]`, 1.0 at the
//! index and 0.0 elsewhere, as `tf.one_hot(indices, depth)`: an index outside `0..depth`
//! (negative too) gives a row of zeros.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{build_into, input_spec, out_name, put, with_field};
use crate::kernels::one_hot_rows::OneHotRows;
use crate::kernels::spec_json::spec_json;

const OP: &str = "one_hot";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneHot {
    pub field: String,
    pub depth: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn is_index(d: DType) -> bool {
    matches!(
        d,
        DType::U8 | DType::I8 | DType::U16 | DType::I16 | DType::I32 | DType::I64
    )
}

/// The class of each index as `OneHotRows` takes it (outside `0..depth`: `u32::MAX`, a row of
/// zeros).
fn classes(t: &Tensor) -> Option<Vec<u32>> {
    fn of<T: bytemuck::Pod + Copy>(t: &Tensor, f: impl Fn(T) -> i64) -> Option<Vec<u32>> {
        let v = t.typed::<T>()?;
        Some(
            v.iter()
                .map(|&x| u32::try_from(f(x)).unwrap_or(u32::MAX))
                .collect(),
        )
    }
    match t.dtype() {
        DType::U8 => of::<u8>(t, i64::from),
        DType::I8 => of::<i8>(t, i64::from),
        DType::U16 => of::<u16>(t, i64::from),
        DType::I16 => of::<i16>(t, i64::from),
        DType::I32 => of::<i32>(t, i64::from),
        DType::I64 => of::<i64>(t, |x| x),
        _ => None,
    }
}

impl Op for OneHot {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if self.depth == 0 {
            return Err(Error::schema(OP, "depth must be at least 1"));
        }
        let Some(f) = input_spec(input, OP, &self.field, is_index, "integer class indices")? else {
            return Ok(input.clone());
        };
        let mut shape = f.shape.clone();
        shape.push(Some(self.depth));
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), DType::F32, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let classes = classes(t).ok_or_else(|| {
            Error::invalid(
                OP,
                format!(
                    "field '{}' must hold integer class indices, got {}",
                    self.field,
                    t.dtype()
                ),
            )
        })?;
        let mut shape = t.shape().to_vec();
        shape.push(self.depth);
        let output = out_name(&self.field, &self.output);
        let out = build_into(ctx, output, DType::F32, shape, |out: &mut [f32]| {
            let mut rows = OneHotRows::new(out, self.depth);
            rows.write(0, &classes);
            rows.finish();
            Ok(())
        })?;
        Ok(Some(put(input, output, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(out_name(&self.field, &self.output))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::element::names;
    use stoker_core::stats::StageStats;
    use stoker_core::ErrorPolicy;

    #[test]
    fn rows_have_a_one_at_the_index_and_zeros_outside_the_depth() {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        let t = Tensor::from_slice(DType::I64, vec![2, 3], &[0i64, 4, -1, 2, 5, 3]).unwrap();
        let e = Element::new(names(&["c"]), vec![t]);
        let op = OneHot {
            field: "c".into(),
            depth: 5,
            output: None,
        };
        let out = op.apply(e, &ctx).unwrap().unwrap();
        assert_eq!(out.tensors[0].shape(), &[2, 3, 5]);
        let v = out.tensors[0].typed::<f32>().unwrap();
        let want: Vec<f32> = [0i64, 4, -1, 2, 5, 3]
            .iter()
            .flat_map(|&c| (0..5).map(move |j| if j == c { 1.0 } else { 0.0 }))
            .collect();
        assert_eq!(v, want.as_slice());
    }
}
