//! `list_files`: the file names matching glob patterns, sorted or shuffled (a new order each
//! pass).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::names;
use stoker_core::element::{FieldSpec, Schema};
use stoker_core::exec::shuffle::epoch_seed;
use stoker_core::exec::{BoxIter, State};
use stoker_core::stats::Metered;
use stoker_core::{DType, Result, Seed, StageStats};

use super::common::RowAccess;
use crate::build::{file_column, file_names, BuildCtx};
use crate::plan::{DatasetOp, Plan, SpecCtx};
use crate::properties::{Cardinality, Randomness};
use crate::random_access::RandomAccess;
use crate::sources::Strings;

#[derive(Clone, Debug)]
pub struct ListFiles {
    pub patterns: Vec<String>,
    /// The files the patterns matched when the dataset was made.
    pub files: Vec<String>,
    pub shuffle: bool,
    /// The seed given, or a drawn one (see [`stoker_core::seed`]).
    pub seed: Seed,
}

impl ListFiles {
    /// Expands and checks `patterns` now; `seed: None` draws one.
    pub fn new(patterns: Vec<String>, shuffle: bool, seed: Option<u64>) -> Result<ListFiles> {
        let files = crate::sources::expand_files(Self::KIND, &patterns)?;
        Ok(ListFiles {
            patterns,
            files,
            shuffle,
            seed: Seed::from_option(seed),
        })
    }
}

impl ListFiles {
    /// The files in the order of the pass at `ctx`'s epoch.
    fn files_of_pass(&self, ctx: &BuildCtx) -> Vec<String> {
        let mut files = self.files.clone();
        if self.shuffle {
            use rand::seq::SliceRandom;
            use rand::SeedableRng;
            let seed = epoch_seed(ctx.seed(self.seed), ctx.epoch);
            files.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
        }
        files
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    files: Strings,
    #[serde(default = "yes")]
    shuffle: bool,
    #[serde(default)]
    seed: Option<u64>,
}

fn yes() -> bool {
    true
}

impl Plan {
    /// File names matching `patterns`, sorted, or shuffled with `seed` (a new order each epoch).
    pub fn list_files(patterns: Vec<String>, shuffle: bool, seed: Option<u64>) -> Result<Plan> {
        Plan::new(ListFiles::new(patterns, shuffle, seed)?)
    }
}

impl DatasetOp for ListFiles {
    const KIND: &'static str = "list_files";
    const SOURCE: bool = true;
    type Spec = Spec;

    no_inputs!();

    fn schema(&self) -> Result<Schema> {
        Ok(Schema::new(vec![FieldSpec::fixed(
            "filename",
            DType::Bytes,
            &[],
        )]))
    }

    fn cardinality(&self) -> Cardinality {
        Cardinality::Finite(self.files.len() as u64)
    }

    fn randomness(&self) -> Randomness {
        if self.shuffle {
            Randomness::Seeded
        } else {
            Randomness::Fixed
        }
    }

    fn supports_random_access(&self) -> bool {
        true
    }

    fn random_access(&self, _: &Plan, ctx: &BuildCtx) -> Result<Option<Box<dyn RandomAccess>>> {
        let files = self.files_of_pass(ctx);
        Ok(Some(Box::new(RowAccess {
            names: names(&["filename"]),
            columns: vec![file_column(&files)?],
            rows: files.len() as u64,
        })))
    }

    fn iterate(
        &self,
        _: &Plan,
        ctx: &BuildCtx,
        stats: Arc<StageStats>,
        at: Option<&State>,
    ) -> Result<BoxIter> {
        let mut it = file_names(&self.files_of_pass(ctx), "filename")?;
        if let Some(s) = at {
            it = it.restore(s)?;
        }
        Ok(Metered::wrap(Box::new(it), stats))
    }

    fn seeds(&self) -> Vec<Seed> {
        if self.shuffle {
            vec![self.seed]
        } else {
            Vec::new()
        }
    }

    fn to_spec(&self, ctx: &SpecCtx) -> Result<Option<Spec>> {
        Ok(Some(Spec {
            files: Strings::Many(self.patterns.iter().map(|p| ctx.save_path(p)).collect()),
            shuffle: self.shuffle,
            seed: self.seed.given_value(),
        }))
    }

    fn from_spec(s: Spec, _: Option<Plan>, ctx: &SpecCtx) -> Result<Self> {
        let patterns = s
            .files
            .into_vec()
            .iter()
            .map(|p| ctx.load_path(p))
            .collect();
        ListFiles::new(patterns, s.shuffle, s.seed)
    }
}
