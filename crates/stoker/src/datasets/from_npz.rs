//! `from_npz`: the rows of every array of an `.npz` file, or of one `.npy` file.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::Schema;
use stoker_core::exec::{BoxIter, State};
use stoker_core::{Result, StageStats, Tensor};

use super::common::{rows_cardinality, rows_iterate, rows_schema, RowAccess};
use crate::build::BuildCtx;
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;

#[derive(Clone)]
pub struct FromNpz {
    pub path: String,
    /// The field name of a `.npy` file's rows (default `value`).
    pub name: Option<String>,
    pub names: Vec<String>,
    pub columns: Vec<Tensor>,
}

impl FromNpz {
    /// Loads the arrays now.
    pub fn load(path: &str, name: Option<String>) -> Result<FromNpz> {
        let (names, columns): (Vec<String>, Vec<Tensor>) = if path.ends_with(".npy") {
            let n = name.clone().unwrap_or_else(|| "value".into());
            (vec![n], vec![stoker_formats::npy::load_npy(path)?])
        } else {
            stoker_formats::npy::load_npz(path)?.into_iter().unzip()
        };
        Ok(FromNpz {
            path: path.to_string(),
            name,
            names,
            columns,
        })
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl Plan {
    /// The rows of every array of an `.npz` file, or of one `.npy` file (as field `name`).
    pub fn from_npz(path: &str, name: Option<String>) -> Result<Plan> {
        Plan::new(FromNpz::load(path, name)?)
    }
}

impl DatasetOp for FromNpz {
    const KIND: &'static str = "from_npz";
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

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            path: ctx.save_path(&self.path),
            name: self.name.clone(),
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        FromNpz::load(&ctx.load_path(&s.path), s.name)
    }
}
