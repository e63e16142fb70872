//! `decode_csv(field, columns, field_delim, use_quote_delim, na_value, select_cols)`: CSV
//! records (a scalar string, or a vector of them) to one field per column, as
//! `tf.io.decode_csv`: an empty field (or `na_value`) takes the column's default, and is an
//! error for a column without one; a field that is not a number of the column's type, or a
//! record with the wrong number of fields, is an error naming the file, the line and the
//! column (where the record came from a file).

use std::cell::Cell;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Names, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, ErrorPolicy, Origin, Result, Tensor};

use crate::kernels::fields::input_spec;
use crate::kernels::spec_json::spec_json;

const OP: &str = "decode_csv";

/// One output column: its field name, dtype (int32, int64, float32, float64 or string) and
/// the default of an empty field (`None`: the field is required).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeCsv {
    pub field: String,
    pub columns: Vec<Column>,
    #[serde(default = "comma")]
    pub field_delim: String,
    #[serde(default = "yes")]
    pub use_quote_delim: bool,
    #[serde(default)]
    pub na_value: String,
    /// The record's columns to keep, ascending (`None`: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub select_cols: Option<Vec<usize>>,
}

fn comma() -> String {
    ",".into()
}

fn yes() -> bool {
    true
}

thread_local! {
    /// The reader last used on this thread, by delimiter and quoting. Building one makes its
    /// state-machine tables, which costs more than parsing a short line: a map of one line per
    /// element would spend most of its time there.
    static LAST_READER: Cell<Option<((u8, bool), csv_core::Reader)>> = const { Cell::new(None) };
}

/// A column's values for the records of one input.
enum Values {
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Str(Vec<Bytes>),
}

impl DecodeCsv {
    fn check(&self) -> Result<()> {
        if self.field_delim.len() != 1 {
            return Err(Error::invalid(
                OP,
                format!("field_delim must be one byte, got {:?}", self.field_delim),
            ));
        }
        if self.columns.is_empty() {
            return Err(Error::invalid(
                OP,
                "record_defaults must have at least one column",
            ));
        }
        for c in &self.columns {
            if !matches!(
                c.dtype,
                DType::I32 | DType::I64 | DType::F32 | DType::F64 | DType::Bytes
            ) {
                return Err(Error::invalid(
                    OP,
                    format!("column '{}': {} is not a CSV type (int32, int64, float32, float64, string)", c.name, c.dtype),
                ));
            }
        }
        if let Some(cols) = &self.select_cols {
            if cols.len() != self.columns.len() {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "select_cols has {} columns, record_defaults {}",
                        cols.len(),
                        self.columns.len()
                    ),
                ));
            }
            if cols.windows(2).any(|w| w[0] >= w[1]) {
                return Err(Error::invalid(OP, "select_cols must be strictly ascending"));
            }
        }
        Ok(())
    }

    /// Splits `line` into its fields (into `out`, ending at `ends`).
    fn split(
        &self,
        reader: &mut csv_core::Reader,
        line: &[u8],
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
    ) {
        reader.reset();
        out.clear();
        ends.clear();
        if line.is_empty() {
            ends.push(0);
            return;
        }
        out.resize(line.len() + 1, 0);
        ends.resize(line.len() + 1, 0);
        let (mut input, mut nout, mut nend) = (line, 0, 0);
        loop {
            let (r, nin, o, e) = reader.read_record(input, &mut out[nout..], &mut ends[nend..]);
            input = &input[nin..];
            nout += o;
            nend += e;
            match r {
                csv_core::ReadRecordResult::InputEmpty => continue,
                csv_core::ReadRecordResult::OutputFull => out.resize(out.len() * 2, 0),
                csv_core::ReadRecordResult::OutputEndsFull => ends.resize(ends.len() * 2, 0),
                csv_core::ReadRecordResult::Record | csv_core::ReadRecordResult::End => break,
            }
        }
        out.truncate(nout);
        ends.truncate(nend);
    }

    /// The columns of `data`'s records, and how many records they hold; under the skip
    /// policy a bad record is counted in `ctx`'s stats and left out.
    fn decode(
        &self,
        data: &[Bytes],
        origins: &dyn Fn(usize) -> Option<Origin>,
        ctx: &OpCtx<'_>,
    ) -> Result<(Vec<Values>, usize)> {
        let mut values: Vec<Values> = (self.columns.iter())
            .map(|c| match c.dtype {
                DType::I32 => Values::I32(Vec::with_capacity(data.len())),
                DType::I64 => Values::I64(Vec::with_capacity(data.len())),
                DType::F32 => Values::F32(Vec::with_capacity(data.len())),
                DType::F64 => Values::F64(Vec::with_capacity(data.len())),
                _ => Values::Str(Vec::with_capacity(data.len())),
            })
            .collect();
        let key = (self.field_delim.as_bytes()[0], self.use_quote_delim);
        // `split` resets the reader before each line.
        let mut reader = match LAST_READER.take() {
            Some((k, reader)) if k == key => reader,
            _ => csv_core::ReaderBuilder::new()
                .delimiter(key.0)
                .quoting(key.1)
                .build(),
        };
        let (mut out, mut ends) = (Vec::new(), Vec::new());
        let mut row = Vec::with_capacity(self.columns.len());
        let mut kept = 0;
        for (r, line) in data.iter().enumerate() {
            row.clear();
            match self.record(&mut reader, line, &mut out, &mut ends, &mut row) {
                Ok(()) => {
                    for (v, parsed) in values.iter_mut().zip(row.drain(..)) {
                        match (v, parsed) {
                            (Values::I32(v), Parsed::I32(x)) => v.push(x),
                            (Values::I64(v), Parsed::I64(x)) => v.push(x),
                            (Values::F32(v), Parsed::F32(x)) => v.push(x),
                            (Values::F64(v), Parsed::F64(x)) => v.push(x),
                            (Values::Str(v), Parsed::Str(x)) => v.push(x),
                            _ => return Err(Error::internal("decode_csv: column type mismatch")),
                        }
                    }
                    kept += 1;
                }
                Err(reason) => {
                    let origin = origins(r);
                    // Lines counted from 1, as an editor shows them (the origin's record is
                    // from 0).
                    let reason = match &origin {
                        Some(o) => format!("line {}: {reason}", o.record + 1),
                        None => reason,
                    };
                    let err = Error::invalid_record(OP, origin.as_ref(), r, reason);
                    if ctx.policy != ErrorPolicy::Skip {
                        return Err(err);
                    }
                    ctx.skip(err.to_string());
                }
            }
        }
        LAST_READER.set(Some((key, reader)));
        Ok((values, kept))
    }

    /// One record's fields parsed into `row`, or why it is bad.
    fn record(
        &self,
        reader: &mut csv_core::Reader,
        line: &[u8],
        out: &mut Vec<u8>,
        ends: &mut Vec<usize>,
        row: &mut Vec<Parsed>,
    ) -> std::result::Result<(), String> {
        check_quotes(line, self.field_delim.as_bytes()[0], self.use_quote_delim)?;
        self.split(reader, line, out, ends);
        let have = ends.len();
        match &self.select_cols {
            Some(cols) => {
                let need = cols.last().map_or(0, |c| c + 1);
                if have < need {
                    return Err(format!(
                        "expected at least {need} fields, the record has {have}"
                    ));
                }
            }
            None => {
                if have != self.columns.len() {
                    return Err(format!(
                        "expected {} fields, the record has {have}",
                        self.columns.len()
                    ));
                }
            }
        }
        for (k, column) in self.columns.iter().enumerate() {
            let col = self.select_cols.as_ref().map_or(k, |cols| cols[k]);
            let start = if col == 0 { 0 } else { ends[col - 1] };
            let raw = &out[start..ends[col]];
            let at = || format!("column {} ('{}')", col + 1, column.name);
            let text: std::borrow::Cow<'_, [u8]> =
                if raw.is_empty() || raw == self.na_value.as_bytes() {
                    match &column.default {
                        None => {
                            return Err(format!(
                                "{}: the field is empty and the column has no default",
                                at()
                            ))
                        }
                        Some(serde_json::Value::String(s)) => s.as_bytes().into(),
                        Some(other) => other.to_string().into_bytes().into(),
                    }
                } else {
                    raw.into()
                };
            let number = std::str::from_utf8(&text)
                .map(str::trim_ascii)
                .unwrap_or("");
            let invalid = |ty: &str| {
                format!(
                    "{}: {:?} is not a valid {ty}",
                    at(),
                    String::from_utf8_lossy(&text)
                )
            };
            row.push(match column.dtype {
                DType::I32 => Parsed::I32(number.parse().map_err(|_| invalid("int32"))?),
                DType::I64 => Parsed::I64(number.parse().map_err(|_| invalid("int64"))?),
                DType::F32 => Parsed::F32(number.parse().map_err(|_| invalid("float32"))?),
                DType::F64 => Parsed::F64(number.parse().map_err(|_| invalid("float64"))?),
                _ => Parsed::Str(Bytes::copy_from_slice(&text)),
            });
        }
        Ok(())
    }
}

/// One field, parsed.
enum Parsed {
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Str(Bytes),
}

impl Op for DecodeCsv {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::Named {
            reads: vec![self.field.clone()],
            writes: self.columns.iter().map(|c| c.name.clone()).collect(),
        }
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::Bytes, "string")? else {
            return Ok(input.clone());
        };
        let shape = f.shape.clone();
        let mut out = input.clone();
        out.fields.retain(|g| g.name != self.field);
        for c in &self.columns {
            out.fields.retain(|g| g.name != c.name);
            out.fields
                .push(FieldSpec::new(c.name.clone(), c.dtype, shape.clone()));
        }
        Ok(out)
    }

    fn elementwise(&self) -> bool {
        true
    }

    /// Under the skip policy a batch of records comes out without its bad ones.
    fn drops_rows(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let data = t.bytes_data().ok_or_else(|| {
            Error::invalid(OP, format!("field '{}' is not a string tensor", self.field))
        })?;
        let (values, kept) = self.decode(&data.values, &|r| data.origins.get(r).cloned(), ctx)?;
        let shape = match t.shape() {
            _ if kept == data.values.len() => t.shape().to_vec(),
            [] => return Ok(None),
            [_] => vec![kept],
            _ => {
                return Err(Error::invalid(
                    OP,
                    "skipping bad records needs one record or a vector of them per element",
                ))
            }
        };
        let mut names: Vec<std::sync::Arc<str>> = Vec::new();
        let mut tensors = Vec::new();
        for (n, v) in input.names.iter().zip(&input.tensors) {
            if n.as_ref() != self.field && !self.columns.iter().any(|c| c.name == n.as_ref()) {
                names.push(n.clone());
                tensors.push(v.clone());
            }
        }
        for (c, v) in self.columns.iter().zip(values) {
            names.push(std::sync::Arc::from(c.name.as_str()));
            tensors.push(match v {
                Values::I32(v) => Tensor::from_slice(DType::I32, shape.clone(), &v)?,
                Values::I64(v) => Tensor::from_slice(DType::I64, shape.clone(), &v)?,
                Values::F32(v) => Tensor::from_slice(DType::F32, shape.clone(), &v)?,
                Values::F64(v) => Tensor::from_slice(DType::F64, shape.clone(), &v)?,
                Values::Str(v) => Tensor::from_bytes(shape.clone(), v, Vec::new())?,
            });
        }
        Ok(Some(Element::new(Names::from(names), tensors)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// Quoting as TensorFlow's `decode_csv` and `CsvDataset` require it: with quoting on, a field
/// that starts with `"` ends at a `"` followed by the delimiter or the record's end, a `"`
/// inside it doubled (`""`), and a field that does not start with `"` holds none; with quoting
/// on or off, a field not in quotes holds no line break (TensorFlow skips one where a field
/// starts; here that is an error too). The CSV reader takes more (it joins `"ab"c` to `abc`,
/// and ends a record at a line break): what it would take that TensorFlow refuses is an error.
fn check_quotes(line: &[u8], delim: u8, quoting: bool) -> std::result::Result<(), String> {
    let mut at = 0;
    let mut column = 0;
    loop {
        if quoting && line.get(at) == Some(&b'"') {
            at += 1;
            loop {
                match line.get(at) {
                    None => return Err(format!("column {column}: a quoted field is not closed")),
                    Some(b'"') if line.get(at + 1) == Some(&b'"') => at += 2,
                    Some(b'"') => {
                        at += 1;
                        break;
                    }
                    Some(_) => at += 1,
                }
            }
            match line.get(at) {
                None => return Ok(()),
                Some(&b) if b == delim => {}
                Some(_) => {
                    return Err(format!(
                        "column {column}: a quote inside a quoted field must be doubled (\"\")"
                    ))
                }
            }
        } else {
            let end = line[at..]
                .iter()
                .position(|&b| b == delim)
                .map_or(line.len(), |p| at + p);
            if line[at..end]
                .iter()
                .any(|&b| (quoting && b == b'"') || matches!(b, b'\n' | b'\r'))
            {
                return Err(format!(
                    "column {column}: a field not in quotes cannot hold a quote or a line break"
                ));
            }
            if end == line.len() {
                return Ok(());
            }
            at = end;
        }
        at += 1; // the delimiter
        column += 1;
    }
}
