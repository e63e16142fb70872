//! `slice(field, start, stop, axis=-1, clamp=false)`: `x[..., start:stop]` on one axis
//! (copied). With `clamp`, bounds past the axis's end are cut to it, as Python's and
//! TensorFlow's strided slices cut them (`x[:512]` of a shorter `x` is all of it); without,
//! they are an error.

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
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clamp: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn last() -> i64 {
    -1
}

impl Slice {
    /// The bounds on an axis of length `dim`: cut to it with `clamp`, else as given.
    fn bounds(&self, dim: usize) -> (usize, usize) {
        if self.clamp {
            let start = self.start.min(dim);
            (start, self.stop.clamp(start, dim))
        } else {
            (self.start, self.stop)
        }
    }
}

impl Op for Slice {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if self.stop < self.start && !self.clamp {
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
        shape[a] = match shape[a] {
            Some(d) if self.stop > d && !self.clamp => {
                return Err(Error::schema(
                    OP,
                    format!("stop {} is past the axis length {d}", self.stop),
                ));
            }
            Some(d) => {
                let (start, stop) = self.bounds(d);
                Some(stop - start)
            }
            None if self.clamp => None,
            None => Some(self.stop - self.start),
        };
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
        let (start, stop) = self.bounds(dim);
        if stop > dim || stop < start {
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
        let take = (stop - start) * inner;
        let mut storage = stoker_core::storage::shared_pool().take(outer * take);
        for (o, dst) in storage
            .as_bytes_mut()
            .chunks_exact_mut(take.max(1))
            .enumerate()
            .take(outer)
        {
            let src = o * dim * inner + start * inner;
            dst.copy_from_slice(&raw[src..src + take]);
        }
        let mut shape = t.shape().to_vec();
        shape[a] = stop - start;
        let out = Tensor::from_storage(t.dtype(), shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
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
    use stoker_core::{DType, ErrorPolicy};

    fn sliced(start: usize, stop: usize, clamp: bool, len: usize) -> Result<Vec<i32>> {
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
        let values: Vec<i32> = (0..len as i32).collect();
        let t = Tensor::from_slice(DType::I32, vec![len], &values)?;
        let op = Slice {
            field: "x".into(),
            start,
            stop,
            axis: -1,
            clamp,
            output: None,
        };
        let out = op.apply(Element::new(names(&["x"]), vec![t]), &ctx)?;
        let out = out.ok_or_else(|| Error::internal("no element"))?;
        Ok(out.tensors[0].typed::<i32>().unwrap_or_default().to_vec())
    }

    #[test]
    fn clamped_bounds_are_cut_to_the_axis_as_python_s() -> Result<()> {
        assert_eq!(sliced(1, 10, true, 4)?, vec![1, 2, 3]);
        assert_eq!(sliced(5, 10, true, 4)?, Vec::<i32>::new());
        assert_eq!(sliced(3, 2, true, 4)?, Vec::<i32>::new());
        assert_eq!(sliced(1, 3, true, 4)?, vec![1, 2]);
        assert!(sliced(1, 10, false, 4).is_err());
        Ok(())
    }
}
