//! `from_tensor_slices`: the rows of in-memory columns.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{DType, Error, Result, StageStats, Tensor};

use super::common::{rows_cardinality, rows_iterate, rows_schema, RowAccess};
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;

#[derive(Clone)]
pub struct FromTensorSlices {
    pub names: Vec<String>,
    pub columns: Vec<Tensor>,
}

impl DatasetOp for FromTensorSlices {
    const KIND: &'static str = "from_tensor_slices";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        rows_schema(&self.names, &self.columns, Self::KIND)
    }

    fn cardinality(&self) -> Cardinality {
        rows_cardinality(&self.columns)
    }

    fn randomness(&self) -> Randomness {
        Randomness::Fixed
    }

    fn iterate(
        &self,
        _: &Plan,
        _: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        rows_iterate(&self.names, &self.columns, stats, at)
    }

    fn supports_random_access(&self) -> bool {
        true
    }

    fn random_access(&self, _: &Plan, _: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        Ok(Some(Box::new(RowAccess::new(&self.names, &self.columns))))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<Spec>> {
        let bytes: usize = self.columns.iter().map(column_bytes).sum();
        if bytes > MAX_SPEC_BYTES {
            return Err(Error::Spec(format!(
                "from_tensor_slices cannot be saved in a spec: its arrays hold {:.0} MB (a spec \
                 holds up to {} MB of them inline); save them with np.savez and use \
                 stoker.Dataset.from_npz",
                bytes as f64 / 1e6,
                MAX_SPEC_BYTES / 1_000_000
            )));
        }
        let columns = (self.names.iter().zip(&self.columns))
            .map(|(name, t)| {
                Ok(Column {
                    name: name.clone(),
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                    values: values_json(name, t)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(Spec { columns }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        let mut names = Vec::with_capacity(s.columns.len());
        let mut columns = Vec::with_capacity(s.columns.len());
        for c in s.columns {
            columns.push(tensor_of(&c)?);
            names.push(c.name);
        }
        Ok(FromTensorSlices { names, columns })
    }
}

/// In-memory arrays larger than this are not written into a spec.
const MAX_SPEC_BYTES: usize = 64_000_000;

/// The spec form: the columns inline (numbers as JSON numbers, exact; strings as UTF-8).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    columns: Vec<Column>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Column {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// The values in row-major order.
    values: Vec<serde_json::Value>,
}

fn column_bytes(t: &Tensor) -> usize {
    match t.bytes_data() {
        Some(b) => b.values.iter().map(|v| v.len() + 8).sum(),
        None => t.raw().map_or(0, <[u8]>::len),
    }
}

fn values_json(name: &str, t: &Tensor) -> Result<Vec<serde_json::Value>> {
    if let Some(b) = t.bytes_data() {
        return (b.values.iter())
            .map(|v| match std::str::from_utf8(v) {
                Ok(text) => Ok(serde_json::Value::from(text)),
                Err(_) => Err(Error::Spec(format!(
                    "from_tensor_slices cannot be saved in a spec: column '{name}' holds bytes \
                     that are not UTF-8 text"
                ))),
            })
            .collect();
    }
    if t.dtype() == DType::I64 {
        let v = t
            .typed::<i64>()
            .ok_or_else(|| Error::internal("int64 column"))?;
        return Ok(v.iter().map(|&x| x.into()).collect());
    }
    let v = stoker_ops::kernels::numeric::to_f64("from_tensor_slices", t)?;
    Ok(v.into_iter().map(serde_json::Value::from).collect())
}

fn tensor_of(c: &Column) -> Result<Tensor> {
    let n: usize = c.shape.iter().product();
    let bad = |why: &str| Error::Spec(format!("column '{}': {why}", c.name));
    if c.values.len() != n {
        return Err(bad(&format!(
            "{} values for shape {:?}",
            c.values.len(),
            c.shape
        )));
    }
    match c.dtype {
        DType::Bytes => {
            let values = (c.values.iter())
                .map(|v| v.as_str().map(|s| Bytes::copy_from_slice(s.as_bytes())))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("string values expected"))?;
            Tensor::from_bytes(c.shape.clone(), values, Vec::new())
        }
        DType::I64 => {
            let values = (c.values.iter())
                .map(serde_json::Value::as_i64)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("int64 values expected"))?;
            Tensor::from_slice(DType::I64, c.shape.clone(), &values)
        }
        dtype => {
            let values = (c.values.iter())
                .map(serde_json::Value::as_f64)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("numbers expected"))?;
            stoker_ops::kernels::numeric::from_f64(dtype, c.shape.clone(), &values)
        }
    }
}
