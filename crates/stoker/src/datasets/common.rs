//! What the operator modules share: schema helpers, the restore helpers, spec value types.

use std::sync::Arc;

use serde::Serialize;
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::exec::{BoxIter, ElementIter, State};
use stoker_core::{Error, Result, StageStats, Tensor};

use crate::plan::Plan;
use crate::properties::{Cardinality, AUTOTUNE};
use crate::random_access::RandomAccess;

/// The error for a spec of a step that cannot be loaded from one.
pub(crate) fn not_loadable(why: &str) -> Error {
    Error::Spec(format!("cannot be loaded from a spec: {why}"))
}

/// The spec form of an operator that has none: reads anything, which `from_spec` refuses.
#[derive(Clone, Debug)]
pub struct NoSpec;

impl Serialize for NoSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_unit()
    }
}

impl<'de> serde::Deserialize<'de> for NoSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| NoSpec)
    }
}

/// The schema of the step's input, unchanged.
pub(crate) fn same(input: &Plan) -> Schema {
    input.schema().clone()
}

/// The schema of the rows of `columns` (for `from_tensor_slices` and `from_npz`).
/// The elements of a source of `columns`: their rows.
pub(crate) fn rows_cardinality(columns: &[Tensor]) -> Cardinality {
    let rows = columns.first().and_then(|c| c.shape().first().copied());
    Cardinality::Finite(rows.unwrap_or(0) as u64)
}

pub(crate) fn rows_schema(names: &[String], columns: &[Tensor], step: &str) -> Result<Schema> {
    let mut fields = Vec::with_capacity(names.len());
    let mut rows = None;
    for (n, c) in names.iter().zip(columns) {
        let Some((&first, rest)) = c.shape().split_first() else {
            return Err(Error::schema(
                step,
                format!("'{n}' is a scalar; every component needs a first dimension to slice"),
            ));
        };
        match rows {
            Some(r) if r != first => {
                return Err(Error::schema(
                    step,
                    format!("components have different first dimensions: {r} and {first} ('{n}')"),
                ))
            }
            _ => rows = Some(first),
        }
        fields.push(FieldSpec::fixed(n.clone(), c.dtype(), rest));
    }
    Ok(Schema::new(fields))
}

/// `schema`, refused when two fields have the same name.
pub(crate) fn unique(step: &str, schema: Schema) -> Result<Schema> {
    let mut seen = std::collections::HashSet::new();
    for f in &schema.fields {
        if !seen.insert(f.name.as_str()) {
            return Err(Error::schema(
                step,
                format!("two fields would be named '{}'", f.name),
            ));
        }
    }
    Ok(schema)
}

pub(crate) fn check_parallelism(step: &str, n: Option<i64>) -> Result<()> {
    match n {
        Some(n) if n == 0 || n < AUTOTUNE => Err(Error::schema(
            step,
            format!("num_parallel_calls must be >= 1 or AUTOTUNE, got {n}"),
        )),
        _ => Ok(()),
    }
}

/// The input of a step that has one (checked by the spec reader before `from_spec`).
pub(crate) fn input_of(input: Option<Plan>) -> Result<Plan> {
    input.ok_or_else(|| Error::Spec("needs an input step before it".into()))
}

/// Passes over the `count` elements `it` hands out first: how the operators whose state lives
/// in the caller's code (a Python generator, a scan's state, groups being filled) restore, by
/// running the pass again up to the saved position. `source` names what ended early, `hint`
/// says why that may be.
pub(crate) fn pass_over(
    it: &mut dyn ElementIter,
    count: u64,
    step: &str,
    source: &str,
    hint: &str,
) -> Result<()> {
    for i in 0..count {
        if it.next()?.is_none() {
            return Err(Error::invalid(
                step,
                format!("restoring a state {count} elements in, {source} ended after {i}{hint}"),
            ));
        }
    }
    Ok(())
}

/// The state of input `i` in `at`, the state of a stage restored (`None` when not restored).
pub(crate) fn input_at<'a>(
    at: Option<&'a State>,
    step: &str,
    i: usize,
) -> Result<Option<&'a State>> {
    at.map(|s| s.input(step, i)).transpose()
}

/// Random access to the rows of in-memory columns (`from_tensor_slices`, `from_npz`).
pub(crate) struct RowAccess {
    pub names: stoker_core::element::Names,
    pub columns: Vec<Tensor>,
    pub rows: u64,
}

impl RowAccess {
    pub fn new(field_names: &[String], columns: &[Tensor]) -> RowAccess {
        let rows = columns.first().and_then(|c| c.shape().first()).copied();
        RowAccess {
            names: stoker_core::element::names(field_names),
            columns: columns.to_vec(),
            rows: rows.unwrap_or(0) as u64,
        }
    }
}

/// The iterator over the rows of in-memory columns, at a state if one is given.
pub(crate) fn rows_iterate(
    field_names: &[String],
    columns: &[Tensor],
    stats: Arc<StageStats>,
    at: Option<&State>,
) -> Result<BoxIter> {
    let mut it = stoker_core::exec::slices::SlicesIter::new(
        stoker_core::element::names(field_names),
        columns.to_vec(),
    )?;
    if let Some(s) = at {
        it = it.restore(s)?;
    }
    Ok(stoker_core::stats::Metered::wrap(Box::new(it), stats))
}

impl RandomAccess for RowAccess {
    fn count(&self) -> Result<u64> {
        Ok(self.rows)
    }

    fn get(&self, positions: &[u64]) -> Result<Vec<Element>> {
        positions
            .iter()
            .map(|&p| {
                let tensors = self
                    .columns
                    .iter()
                    .map(|c| c.row(p as usize))
                    .collect::<Result<Vec<_>>>()?;
                Ok(Element::new(self.names.clone(), tensors))
            })
            .collect()
    }

    fn state_at(&self, upto: u64) -> Result<State> {
        Ok(State::leaf(vec![upto.min(self.rows)]))
    }
}
