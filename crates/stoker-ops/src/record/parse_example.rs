//! `parse_example`: decodes serialized `tf.train.Example`s into tensors, per element (like
//! `tf.io.parse_single_example`) or per batch (like `tf.io.parse_example`).
//!
//! FixedLen features give `batch_shape + shape` (missing → `default`, else an error); VarLen
//! features give their values, per element as a 1-D tensor (TF's `SparseTensor.values`), per
//! batch padded with zeros / empty strings to the longest row (TF's `tf.sparse.to_dense`).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Names, Schema};
use stoker_core::op::{Op, OpCtx};
use stoker_core::{DType, Error, ErrorPolicy, Origin, Result, Tensor};
use stoker_formats::example_wire::{find_features, ListRef};

use crate::kernels::fields::{build, build_zeroed};
use crate::kernels::spec_json::spec_json;

const OP: &str = "parse_example";

/// A default value for a FixedLen feature: one value (broadcast) or all of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DefaultValue {
    Int(Vec<i64>),
    Float(Vec<f64>),
    Bytes(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FeatureKind {
    Fixed {
        dtype: DType,
        #[serde(default)]
        shape: Vec<usize>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default: Option<DefaultValue>,
    },
    VarLen {
        dtype: DType,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureSpec {
    pub name: String,
    #[serde(flatten)]
    pub kind: FeatureKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParseExample {
    /// The field holding serialized Examples; by default the element's only bytes field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub features: Vec<FeatureSpec>,
}

/// A default resolved to the feature's dtype, with exactly `numel` values.
enum Resolved {
    I64(Vec<i64>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bytes(Vec<Bytes>),
}

fn dtype_ok(d: DType) -> bool {
    matches!(d, DType::I64 | DType::I32 | DType::F32 | DType::Bytes)
}

fn list_name(d: DType) -> &'static str {
    match d {
        DType::I64 | DType::I32 => "int64_list",
        DType::F32 => "float_list",
        _ => "bytes_list",
    }
}

impl ParseExample {
    pub fn new(key: Option<String>, features: Vec<FeatureSpec>) -> Result<ParseExample> {
        let p = ParseExample { key, features };
        p.validate()?;
        Ok(p)
    }

    fn validate(&self) -> Result<()> {
        if self.features.is_empty() {
            return Err(Error::schema(OP, "no features to parse"));
        }
        for f in &self.features {
            let dtype = match &f.kind {
                FeatureKind::Fixed { dtype, .. } | FeatureKind::VarLen { dtype } => *dtype,
            };
            if !dtype_ok(dtype) {
                return Err(Error::schema(
                    OP,
                    format!(
                        "feature '{}': dtype {dtype} is not one of int64, int32 (from an int64 list), float32, string",
                        f.name
                    ),
                ));
            }
            if let FeatureKind::Fixed { .. } = &f.kind {
                self.resolved_default(f)?;
            }
        }
        Ok(())
    }

    fn resolved_default(&self, f: &FeatureSpec) -> Result<Option<Resolved>> {
        let FeatureKind::Fixed {
            dtype,
            shape,
            default,
        } = &f.kind
        else {
            return Ok(None);
        };
        let Some(default) = default else {
            return Ok(None);
        };
        let numel: usize = shape.iter().product();
        let bad = |what: &str| {
            Error::schema(
                OP,
                format!(
                    "feature '{}': default_value {what} for a {dtype} feature",
                    f.name
                ),
            )
        };
        let resolved = match (dtype, default) {
            (DType::I64, DefaultValue::Int(v)) => Resolved::I64(v.clone()),
            (DType::I32, DefaultValue::Int(v)) => {
                Resolved::I32(v.iter().map(|&x| x as i32).collect())
            }
            (DType::F32, DefaultValue::Int(v)) => {
                Resolved::F32(v.iter().map(|&x| x as f32).collect())
            }
            (DType::F32, DefaultValue::Float(v)) => {
                Resolved::F32(v.iter().map(|&x| x as f32).collect())
            }
            (DType::Bytes, DefaultValue::Bytes(v)) => Resolved::Bytes(
                v.iter()
                    .map(|s| Bytes::from(s.clone().into_bytes()))
                    .collect(),
            ),
            _ => return Err(bad("has the wrong type")),
        };
        let len = match &resolved {
            Resolved::I64(v) => v.len(),
            Resolved::I32(v) => v.len(),
            Resolved::F32(v) => v.len(),
            Resolved::Bytes(v) => v.len(),
        };
        let broadcast = |r: Resolved| match r {
            Resolved::I64(v) => Resolved::I64(vec![v[0]; numel]),
            Resolved::I32(v) => Resolved::I32(vec![v[0]; numel]),
            Resolved::F32(v) => Resolved::F32(vec![v[0]; numel]),
            Resolved::Bytes(v) => Resolved::Bytes(vec![v[0].clone(); numel]),
        };
        if len == numel {
            Ok(Some(resolved))
        } else if len == 1 {
            Ok(Some(broadcast(resolved)))
        } else {
            Err(bad(&format!(
                "has {len} values, the shape {shape:?} needs {numel}"
            )))
        }
    }

    /// The key field's name for an element with these fields and dtypes.
    fn key_for<'a>(&'a self, fields: impl Iterator<Item = (&'a str, DType)>) -> Result<String> {
        if let Some(k) = &self.key {
            return Ok(k.clone());
        }
        let bytes: Vec<&str> = fields
            .filter(|(_, d)| *d == DType::Bytes)
            .map(|(n, _)| n)
            .collect();
        match bytes.as_slice() {
            [one] => Ok((*one).to_string()),
            [] => Err(Error::schema(OP, "the input has no bytes field to parse")),
            _ => Err(Error::schema(
                OP,
                format!(
                    "the input has several bytes fields ({}); say which one with key=",
                    bytes.join(", ")
                ),
            )),
        }
    }

    fn output_names(&self, input: &Names, key: &str) -> Names {
        input
            .iter()
            .filter(|n| n.as_ref() != key)
            .cloned()
            .chain(
                self.features
                    .iter()
                    .map(|f| std::sync::Arc::from(f.name.as_str())),
            )
            .collect()
    }
}

impl Op for ParseExample {
    fn name(&self) -> &str {
        OP
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        if input.dynamic {
            return Ok(Schema::dynamic());
        }
        let key = self.key_for(input.fields.iter().map(|f| (f.name.as_str(), f.dtype)))?;
        let Some(spec) = input.lookup(OP, &key)? else {
            return Ok(Schema::dynamic());
        };
        if spec.dtype != DType::Bytes {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{key}' is {}, expected serialized Examples (string)",
                    spec.dtype
                ),
            ));
        }
        if spec.shape.len() > 1 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{key}' has rank {}; parse scalars or a batch (rank 1)",
                    spec.shape.len()
                ),
            ));
        }
        let mut fields: Vec<FieldSpec> = input
            .fields
            .iter()
            .filter(|f| f.name != key)
            .cloned()
            .collect();
        for f in &self.features {
            if fields.iter().any(|g| g.name == f.name) {
                return Err(Error::schema(
                    OP,
                    format!("feature '{}' would overwrite an existing field", f.name),
                ));
            }
            let (dtype, shape) = match &f.kind {
                FeatureKind::Fixed { dtype, shape, .. } => {
                    let mut s = spec.shape.clone();
                    s.extend(shape.iter().map(|&d| Some(d)));
                    (*dtype, s)
                }
                FeatureKind::VarLen { dtype } => {
                    let mut s = spec.shape.clone();
                    s.push(None);
                    (*dtype, s)
                }
            };
            fields.push(FieldSpec::new(f.name.clone(), dtype, shape));
        }
        Ok(Schema::new(fields))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn drops_rows(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let key = self.key_for(
            input
                .names
                .iter()
                .zip(&input.tensors)
                .map(|(n, t)| (n.as_ref(), t.dtype())),
        )?;
        let ki = input.require(OP, &key)?;
        let serialized = &input.tensors[ki];
        let data = serialized.bytes_data().ok_or_else(|| {
            Error::invalid(
                OP,
                format!("field '{key}' is {}, expected string", serialized.dtype()),
            )
        })?;
        let batched = match serialized.shape().len() {
            0 => false,
            1 => true,
            r => {
                return Err(Error::invalid(
                    OP,
                    format!("field '{key}' has rank {r}; expected 0 or 1"),
                ))
            }
        };

        // Decode and check every row first: a bad row raises, or is dropped under `skip`.
        let defaults = self
            .features
            .iter()
            .map(|f| self.resolved_default(f))
            .collect::<Result<Vec<_>>>()?;
        let names: Vec<&str> = self.features.iter().map(|f| f.name.as_str()).collect();
        let mut kept_rows = Vec::with_capacity(data.values.len());
        let mut examples: Vec<Row> = Vec::with_capacity(data.values.len());
        for (row, value) in data.values.iter().enumerate() {
            let checked = find_features(value, &names)
                .map_err(|e| format!("not a valid tf.train.Example: {e}"))
                .and_then(|found| self.check(found, &defaults));
            match checked {
                Ok(lists) => {
                    kept_rows.push(row);
                    examples.push(lists);
                }
                Err(reason) => {
                    let err = Error::invalid_record(OP, data.origin(row), row, reason);
                    if ctx.policy == ErrorPolicy::Skip {
                        ctx.skip(err.to_string());
                    } else {
                        return Err(err);
                    }
                }
            }
        }
        if !batched && examples.is_empty() {
            return Ok(None);
        }

        let mut tensors: Vec<Tensor> = input
            .tensors
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != ki)
            .map(|(_, t)| t.clone())
            .collect();
        // Other fields of a batch lose the dropped rows too.
        if batched && kept_rows.len() != data.values.len() {
            tensors = tensors
                .into_iter()
                .map(|t| select_rows(&t, &kept_rows))
                .collect::<Result<_>>()?;
        }
        let origins: Vec<Option<&Origin>> = kept_rows.iter().map(|&r| data.origin(r)).collect();
        for (i, (f, default)) in self.features.iter().zip(&defaults).enumerate() {
            tensors.push(fill_feature(
                f,
                i,
                default.as_ref(),
                &examples,
                &origins,
                batched,
            )?);
        }
        Ok(Some(Element::new(
            self.output_names(&input.names, &key),
            tensors,
        )))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// The wanted features of one record, each with its number of values (`None`: absent).
type Row = Vec<Option<(ListRef, usize)>>;

impl ParseExample {
    /// Checks the types and lengths of the wanted features of one record.
    fn check(
        &self,
        found: Vec<Option<ListRef>>,
        defaults: &[Option<Resolved>],
    ) -> Result<Row, String> {
        let mut row = Vec::with_capacity(found.len());
        for ((f, default), list) in self.features.iter().zip(defaults).zip(found) {
            // A Feature without a list counts as absent, as in TensorFlow.
            let list = list.filter(|l| *l != ListRef::NoKind);
            let entry = match (&f.kind, list) {
                (FeatureKind::Fixed { .. }, None) if default.is_none() => {
                    return Err(format!(
                        "required feature '{}' is missing and has no default_value",
                        f.name
                    ))
                }
                (FeatureKind::Fixed { .. } | FeatureKind::VarLen { .. }, None) => None,
                (FeatureKind::Fixed { dtype, shape, .. }, Some(l)) => {
                    check_type(&f.name, *dtype, &l)?;
                    let numel: usize = shape.iter().product();
                    let n = l
                        .count()
                        .map_err(|e| format!("feature '{}': {e}", f.name))?;
                    if n != numel {
                        return Err(format!(
                            "feature '{}' has {n} values, expected {numel} for shape {shape:?}",
                            f.name
                        ));
                    }
                    Some((l, n))
                }
                (FeatureKind::VarLen { dtype }, Some(l)) => {
                    check_type(&f.name, *dtype, &l)?;
                    let n = l
                        .count()
                        .map_err(|e| format!("feature '{}': {e}", f.name))?;
                    Some((l, n))
                }
            };
            row.push(entry);
        }
        Ok(row)
    }
}

fn check_type(name: &str, dtype: DType, l: &ListRef) -> Result<(), String> {
    let ok = matches!(
        (dtype, l),
        (DType::I64 | DType::I32, ListRef::Int64(_))
            | (DType::F32, ListRef::Float(_))
            | (DType::Bytes, ListRef::Bytes(_))
    );
    if ok {
        Ok(())
    } else {
        Err(format!(
            "feature '{name}' is a {}, expected a {}",
            l.type_name(),
            list_name(dtype)
        ))
    }
}

/// Rows `rows` of `t` along the first axis, copied into a new tensor.
fn select_rows(t: &Tensor, rows: &[usize]) -> Result<Tensor> {
    let parts = rows
        .iter()
        .map(|&r| t.rows(r, 1))
        .collect::<Result<Vec<_>>>()?;
    let mut shape = t.shape().to_vec();
    shape[0] = rows.len();
    if let Some(bd) = t.bytes_data() {
        let per: usize = t.shape()[1..].iter().product();
        let mut values = Vec::new();
        let mut origins = Vec::new();
        for &r in rows {
            values.extend_from_slice(&bd.values[r * per..(r + 1) * per]);
            if !bd.origins.is_empty() {
                origins.extend_from_slice(&bd.origins[r * per..(r + 1) * per]);
            }
        }
        return Tensor::from_bytes(shape, values, origins);
    }
    let mut raw = Vec::new();
    for p in &parts {
        raw.extend_from_slice(p.raw().unwrap_or_default());
    }
    Tensor::from_storage(
        t.dtype(),
        shape,
        stoker_core::storage::Storage::copy_from(&raw),
    )
}

fn fill_feature(
    f: &FeatureSpec,
    index: usize,
    default: Option<&Resolved>,
    rows: &[Row],
    origins: &[Option<&Origin>],
    batched: bool,
) -> Result<Tensor> {
    let n = rows.len();
    let bad = |e: String| Error::invalid(OP, format!("feature '{}': {e}", f.name));
    fn list(row: &Row, index: usize) -> Option<&(ListRef, usize)> {
        row[index].as_ref()
    }
    match &f.kind {
        FeatureKind::Fixed { dtype, shape, .. } => {
            let numel: usize = shape.iter().product();
            let mut out_shape = if batched { vec![n] } else { vec![] };
            out_shape.extend_from_slice(shape);
            match dtype {
                DType::I64 => build::<i64>(DType::I64, out_shape, |out| {
                    for (dst, row) in out.chunks_exact_mut(numel.max(1)).zip(rows) {
                        match (list(row, index), default) {
                            (Some((l, _)), _) => l.int64s_into(dst).map_err(bad)?,
                            (None, Some(Resolved::I64(d))) => dst.copy_from_slice(d),
                            _ => {}
                        }
                    }
                    Ok(())
                }),
                DType::I32 => build::<i32>(DType::I32, out_shape, |out| {
                    for (dst, row) in out.chunks_exact_mut(numel.max(1)).zip(rows) {
                        match (list(row, index), default) {
                            (Some((l, _)), _) => l.int64s_into(dst).map_err(bad)?,
                            (None, Some(Resolved::I32(d))) => dst.copy_from_slice(d),
                            _ => {}
                        }
                    }
                    Ok(())
                }),
                DType::F32 => build::<f32>(DType::F32, out_shape, |out| {
                    for (dst, row) in out.chunks_exact_mut(numel.max(1)).zip(rows) {
                        match (list(row, index), default) {
                            (Some((l, _)), _) => l.floats_into(dst).map_err(bad)?,
                            (None, Some(Resolved::F32(d))) => dst.copy_from_slice(d),
                            _ => {}
                        }
                    }
                    Ok(())
                }),
                _ => {
                    let mut out = Vec::with_capacity(n * numel);
                    let mut out_origins = Vec::with_capacity(n * numel);
                    for (row, origin) in rows.iter().zip(origins) {
                        match (list(row, index), default) {
                            (Some((l, _)), _) => l.bytes_into(&mut out).map_err(bad)?,
                            (None, Some(Resolved::Bytes(d))) => out.extend(d.iter().cloned()),
                            _ => {}
                        }
                        if let Some(o) = origin {
                            out_origins.extend(std::iter::repeat_n((*o).clone(), numel));
                        }
                    }
                    Tensor::from_bytes(out_shape, out, out_origins)
                }
            }
        }
        FeatureKind::VarLen { dtype } => {
            let lens: Vec<usize> = rows
                .iter()
                .map(|r| list(r, index).map_or(0, |(_, c)| *c))
                .collect();
            let width = lens.iter().copied().max().unwrap_or(0);
            let out_shape = if batched { vec![n, width] } else { vec![width] };
            match dtype {
                DType::I64 => build_zeroed::<i64>(DType::I64, out_shape, |out| {
                    for (dst, row) in out.chunks_mut(width.max(1)).zip(rows) {
                        if let Some((l, _)) = list(row, index) {
                            l.int64s_into(dst).map_err(bad)?;
                        }
                    }
                    Ok(())
                }),
                DType::I32 => build_zeroed::<i32>(DType::I32, out_shape, |out| {
                    for (dst, row) in out.chunks_mut(width.max(1)).zip(rows) {
                        if let Some((l, _)) = list(row, index) {
                            l.int64s_into(dst).map_err(bad)?;
                        }
                    }
                    Ok(())
                }),
                DType::F32 => build_zeroed::<f32>(DType::F32, out_shape, |out| {
                    for (dst, row) in out.chunks_mut(width.max(1)).zip(rows) {
                        if let Some((l, _)) = list(row, index) {
                            l.floats_into(dst).map_err(bad)?;
                        }
                    }
                    Ok(())
                }),
                _ => {
                    let mut out = Vec::with_capacity(n * width);
                    for (row, len) in rows.iter().zip(&lens) {
                        if let Some((l, _)) = list(row, index) {
                            l.bytes_into(&mut out).map_err(bad)?;
                        }
                        out.extend(std::iter::repeat_n(Bytes::new(), width - len));
                    }
                    Tensor::from_bytes(out_shape, out, Vec::new())
                }
            }
        }
    }
}
