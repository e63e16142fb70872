//! `from_tensor_slices`: the rows of in-memory columns.

use std::sync::Arc;

use stoker_core::element::{names, Schema};
use stoker_core::exec::slices::SlicesIter;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{Error, Result, StageStats, Tensor};

use super::{not_loadable, rows_schema, DatasetOp, NoSpec, RandomAccess, RowAccess};
use crate::build::BuildCtx;
use crate::plan::Plan;
use crate::spec::SpecCtx;

#[derive(Clone)]
pub struct FromTensorSlices {
    pub names: Vec<String>,
    pub columns: Vec<Tensor>,
}

impl DatasetOp for FromTensorSlices {
    const KIND: &'static str = "from_tensor_slices";
    const SOURCE: bool = true;
    type Spec = NoSpec;

    fn inputs(&self) -> Vec<&Plan> {
        Vec::new()
    }

    fn inputs_mut(&mut self) -> Vec<&mut Plan> {
        Vec::new()
    }

    fn schema(&self) -> Result<Schema> {
        rows_schema(&self.names, &self.columns, Self::KIND)
    }

    fn deterministic(&self) -> bool {
        true
    }

    fn iterate(
        &self,
        _: &Plan,
        _: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let mut it = SlicesIter::new(names(&self.names), self.columns.clone())?;
        if let Some(s) = at {
            it = it.restore(s)?;
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn supports_random_access(&self) -> bool {
        true
    }

    fn random_access(&self, _: &Plan, _: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        let rows = self
            .columns
            .first()
            .and_then(|c| c.shape().first())
            .copied();
        Ok(Some(Box::new(RowAccess {
            names: names(&self.names),
            columns: self.columns.clone(),
            rows: rows.unwrap_or(0) as u64,
        })))
    }

    fn to_spec(&self, _: &SpecCtx) -> Result<Option<NoSpec>> {
        Err(Error::Spec(
            "from_tensor_slices cannot be saved in a spec: its arrays live in memory; save them \
             with np.savez and use stoker.Dataset.from_npz"
                .into(),
        ))
    }

    fn from_spec(_: NoSpec, _: Option<Plan>, _: &SpecCtx) -> Result<Self> {
        Err(not_loadable("its arrays live in memory; use from_npz"))
    }
}
