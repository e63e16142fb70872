//! `from_tensor_slices`: the rows of in-memory columns.

use std::sync::Arc;

use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{Error, Result, StageStats, Tensor};

use super::{
    not_loadable, rows_cardinality, rows_iterate, rows_schema, Cardinality, DatasetOp, NoSpec,
    RandomAccess, RowAccess,
};
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

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        rows_schema(&self.names, &self.columns, Self::KIND)
    }

    fn cardinality(&self) -> Cardinality {
        rows_cardinality(&self.columns)
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
        rows_iterate(&self.names, &self.columns, stats, at)
    }

    fn supports_random_access(&self) -> bool {
        true
    }

    fn random_access(&self, _: &Plan, _: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        Ok(Some(Box::new(RowAccess::new(&self.names, &self.columns))))
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
