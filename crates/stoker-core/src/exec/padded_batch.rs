//! `padded_batch(n, padded_shapes, padding_values, drop_remainder)`: like `batch`, but each
//! field is padded (at the end of every axis) to a common shape first — the largest in the
//! batch, or the shape the user fixed — as `tf.data.Dataset.padded_batch` does: numbers with
//! a number (0 unless given), strings with a string (empty unless given).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use bytes::Bytes;

use crate::dtype::DType;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::exec::batch::stack;
use crate::exec::{BoxIter, ElementIter};
use crate::stats::StageStats;
use crate::storage::{batch_pool, shared_pool, Storage};
use crate::tensor::Tensor;

const OP: &str = "padded_batch";

/// How each field is padded. Fields not named get the largest shape in the batch and 0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Padding {
    /// Per field, the padded shape: `None` in a dimension means "the batch's largest".
    #[serde(default)]
    pub shapes: BTreeMap<String, Vec<Option<usize>>>,
    /// Per field, the value written where there is no data.
    #[serde(default)]
    pub values: BTreeMap<String, PadValue>,
    /// The value for the fields `values` does not name (0, or an empty string, if not given):
    /// one value for every field, where the fields are known only when a Python function has
    /// run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<PadValue>,
}

/// A padding value: a whole number kept exact (an int64 beyond 2^53 too), a float, a
/// non-finite float by name (JSON has no NaN or infinity), or a string's bytes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PadValue {
    Int(i64),
    Float(f64),
    NonFinite(NonFinite),
    Bytes { bytes: Vec<u8> },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NonFinite {
    #[serde(rename = "nan")]
    Nan,
    #[serde(rename = "inf")]
    Inf,
    #[serde(rename = "-inf")]
    NegInf,
}

impl PadValue {
    /// The number; `None` for a string.
    fn as_f64(&self) -> Option<f64> {
        Some(match self {
            PadValue::Int(i) => *i as f64,
            PadValue::Float(v) => *v,
            PadValue::NonFinite(NonFinite::Nan) => f64::NAN,
            PadValue::NonFinite(NonFinite::Inf) => f64::INFINITY,
            PadValue::NonFinite(NonFinite::NegInf) => f64::NEG_INFINITY,
            PadValue::Bytes { .. } => return None,
        })
    }
}

impl std::fmt::Display for PadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PadValue::Int(i) => write!(f, "{i}"),
            PadValue::Bytes { bytes } => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            other => write!(f, "{}", other.as_f64().unwrap_or(f64::NAN)),
        }
    }
}

impl Padding {
    /// The padded shape for `field` given its elements' shapes (all of one rank).
    fn target(&self, field: &str, shapes: &[&[usize]]) -> Result<Vec<usize>> {
        let rank = shapes.first().map_or(0, |s| s.len());
        if let Some(i) = shapes.iter().position(|s| s.len() != rank) {
            return Err(Error::invalid(
                OP,
                format!(
                    "field '{field}': element {i} has rank {} but element 0 has rank {rank}; \
                     padding cannot change the rank",
                    shapes[i].len()
                ),
            ));
        }
        let largest: Vec<usize> = (0..rank)
            .map(|d| shapes.iter().map(|s| s[d]).max().unwrap_or(0))
            .collect();
        let Some(fixed) = self.shapes.get(field) else {
            return Ok(largest);
        };
        if fixed.len() != rank {
            return Err(Error::invalid(
                OP,
                format!(
                    "field '{field}': padded shape {fixed:?} has rank {} but the elements have rank {rank}",
                    fixed.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(rank);
        for (d, (want, big)) in fixed.iter().zip(&largest).enumerate() {
            match want {
                Some(w) if w < big => {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "field '{field}': an element has size {big} in dimension {d}, \
                             larger than the padded size {w}"
                        ),
                    ))
                }
                Some(w) => out.push(*w),
                None => out.push(*big),
            }
        }
        Ok(out)
    }
}

pub struct PaddedBatchIter {
    input: BoxIter,
    size: usize,
    drop_remainder: bool,
    padding: Arc<Padding>,
    stats: Arc<StageStats>,
    pending: Vec<Element>,
}

impl PaddedBatchIter {
    pub fn new(
        input: BoxIter,
        size: usize,
        drop_remainder: bool,
        padding: Arc<Padding>,
        stats: Arc<StageStats>,
    ) -> Self {
        PaddedBatchIter {
            input,
            size,
            drop_remainder,
            padding,
            stats,
            pending: Vec::with_capacity(size),
        }
    }
}

impl ElementIter for PaddedBatchIter {
    fn state(&self) -> Result<crate::exec::State> {
        Ok(crate::exec::State::over(self.input.state()?))
    }

    fn next(&mut self) -> Result<Option<Element>> {
        while self.pending.len() < self.size {
            match self.stats.pull(&mut self.input)? {
                Some(e) => self.pending.push(e),
                None => break,
            }
        }
        if self.pending.is_empty() || (self.drop_remainder && self.pending.len() < self.size) {
            self.pending.clear();
            return Ok(None);
        }
        let out = stack_padded(&self.pending, &self.padding);
        self.pending.clear();
        out.map(Some)
    }
}

/// Pads every element's fields to their common shape, then stacks them.
pub fn stack_padded(elements: &[Element], padding: &Padding) -> Result<Element> {
    let Some(first) = elements.first() else {
        return Err(Error::internal("padded batch of no elements"));
    };
    // Named where the fields were known only at run time (after a Python function): checked
    // here, as the plan checks them where it knows the fields.
    if let Some(name) = (padding.shapes.keys().chain(padding.values.keys()))
        .find(|n| !first.names.iter().any(|f| &**f == n.as_str()))
    {
        return Err(Error::invalid(
            OP,
            format!(
                "no field '{name}' to pad (the element's fields: {})",
                first
                    .names
                    .iter()
                    .map(|n| &**n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let mut padded: Vec<Element> = elements.to_vec();
    for (f, name) in first.names.iter().enumerate() {
        let dtype = first.tensors[f].dtype();
        let shapes: Vec<&[usize]> = elements.iter().map(|e| e.tensors[f].shape()).collect();
        let target = padding.target(name, &shapes)?;
        let strings = dtype == DType::Bytes;
        let value = (padding.values.get(&**name).or(padding.default.as_ref()))
            .cloned()
            .unwrap_or(if strings {
                PadValue::Bytes { bytes: Vec::new() }
            } else {
                PadValue::Int(0)
            });
        // A value the dtype does not hold is an error where it is written, not a silent
        // conversion (tf.data refuses it whether or not a field needs padding).
        let fill = || {
            encode(dtype, &value).ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "field '{name}': the padding value {value} is not a {dtype} value; give one of the field's dtype"
                    ),
                )
            })
        };
        for (i, e) in padded.iter_mut().enumerate() {
            let t = &e.tensors[f];
            if t.dtype() != dtype {
                return Err(Error::invalid(
                    OP,
                    format!(
                        "field '{name}': element {i} is {} but element 0 is {dtype}",
                        t.dtype()
                    ),
                ));
            }
            if t.shape() != target.as_slice() {
                e.tensors[f] = if strings {
                    pad_strings(t, &target, &Bytes::from(fill()?))?
                } else {
                    pad(t, &target, &fill()?)?
                };
            }
        }
    }
    stack(&padded, &batch_pool())
}

/// The destination index of each row (along the last axis) of a `shape`-shaped tensor
/// placed at the origin of a `target`-shaped one, in elements.
fn row_starts(shape: &[usize], target: &[usize]) -> impl Iterator<Item = usize> {
    let rank = shape.len();
    let rows: usize = shape[..rank.saturating_sub(1)].iter().product();
    let lead: Vec<usize> = shape[..rank.saturating_sub(1)].to_vec();
    let dims = target.to_vec();
    let mut index = vec![0usize; lead.len()];
    (0..rows).map(move |_| {
        let mut offset = 0;
        for (d, &i) in index.iter().enumerate() {
            offset = offset * dims[d] + i;
        }
        // Next row index (odometer over all but the last axis).
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < lead[d] {
                break;
            }
            index[d] = 0;
        }
        offset * dims.last().copied().unwrap_or(1)
    })
}

/// A string tensor placed at the origin of a `target`-shaped one filled with `fill`.
fn pad_strings(t: &Tensor, target: &[usize], fill: &Bytes) -> Result<Tensor> {
    let data = t
        .bytes_data()
        .ok_or_else(|| Error::internal("padding a string tensor without strings"))?;
    let mut values = vec![fill.clone(); target.iter().product::<usize>()];
    let row = t.shape().last().copied().unwrap_or(1);
    for (r, dst) in row_starts(t.shape(), target).enumerate() {
        values[dst..dst + row].clone_from_slice(&data.values[r * row..(r + 1) * row]);
    }
    Tensor::from_bytes(target.to_vec(), values, Vec::new())
}

/// `t` placed at the origin of a `target`-shaped tensor filled with `fill` (one value's bytes).
fn pad(t: &Tensor, target: &[usize], fill: &[u8]) -> Result<Tensor> {
    let size = t.dtype().size().unwrap_or(1);
    let raw = t
        .raw()
        .ok_or_else(|| Error::internal("padding a tensor without dense data"))?;
    let mut storage: Storage = shared_pool().take(target.iter().product::<usize>() * size);
    let out = storage.as_bytes_mut();
    for chunk in out.chunks_exact_mut(size) {
        chunk.copy_from_slice(&fill[..size]);
    }
    // Copy the source row by row (rows along the last axis).
    let row = t.shape().last().copied().unwrap_or(1) * size;
    for (r, dst) in row_starts(t.shape(), target).enumerate() {
        out[dst * size..dst * size + row].copy_from_slice(&raw[r * row..(r + 1) * row]);
    }
    Tensor::from_storage(t.dtype(), target.to_vec(), storage)
}

/// `value` as one element of `dtype`, little-endian; None where `dtype` does not hold it
/// exactly (a fraction or an out-of-range number for an integer; a finite number beyond a
/// float's range).
fn encode(dtype: DType, value: &PadValue) -> Option<Vec<u8>> {
    if let PadValue::Bytes { bytes } = value {
        return (dtype == DType::Bytes).then(|| bytes.clone());
    }
    let int = match *value {
        PadValue::Int(i) => Some(i),
        PadValue::Float(v) if v.fract() == 0.0 && v.abs() < 9.3e18 => Some(v as i64),
        PadValue::Float(_) | PadValue::NonFinite(_) | PadValue::Bytes { .. } => None,
    };
    let float = value.as_f64()?;
    let bytes = match dtype {
        DType::Bool => match int? {
            0 | 1 => vec![int? as u8],
            _ => return None,
        },
        DType::U8 => u8::try_from(int?).ok()?.to_le_bytes().to_vec(),
        DType::U16 => u16::try_from(int?).ok()?.to_le_bytes().to_vec(),
        DType::I8 => i8::try_from(int?).ok()?.to_le_bytes().to_vec(),
        DType::I16 => i16::try_from(int?).ok()?.to_le_bytes().to_vec(),
        DType::I32 => i32::try_from(int?).ok()?.to_le_bytes().to_vec(),
        DType::I64 => int?.to_le_bytes().to_vec(),
        DType::F16 => narrow(float, half::f16::from_f64(float).to_f64())
            .then(|| half::f16::from_f64(float).to_le_bytes().to_vec())?,
        DType::BF16 => narrow(float, half::bf16::from_f64(float).to_f64())
            .then(|| half::bf16::from_f64(float).to_le_bytes().to_vec())?,
        DType::F32 => {
            narrow(float, f64::from(float as f32)).then(|| (float as f32).to_le_bytes().to_vec())?
        }
        DType::F64 => float.to_le_bytes().to_vec(),
        DType::Bytes => return None,
    };
    Some(bytes)
}

/// Whether a float narrowed to `narrowed` stayed in range (an infinity only from one).
fn narrow(value: f64, narrowed: f64) -> bool {
    narrowed.is_finite() || !value.is_finite()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::names;
    use crate::exec::VecIter;

    fn element(rows: usize, cols: usize, base: i32) -> Result<Element> {
        let v: Vec<i32> = (0..(rows * cols) as i32).map(|i| base + i).collect();
        Ok(Element::new(
            names(&["x"]),
            vec![Tensor::from_slice(DType::I32, vec![rows, cols], &v)?],
        ))
    }

    #[test]
    fn pads_to_the_largest_shape_with_the_value() {
        let st = Arc::new(StageStats::new("pb", "pb"));
        let padding = Padding {
            values: [("x".to_string(), PadValue::Float(-1.0))].into(),
            ..Padding::default()
        };
        let input = VecIter::boxed(vec![element(1, 3, 0), element(2, 1, 10)]);
        let mut it = PaddedBatchIter::new(input, 2, false, Arc::new(padding), st);
        let b = it.next().unwrap().unwrap();
        assert_eq!(b.tensors[0].shape(), &[2, 2, 3]);
        assert_eq!(
            b.tensors[0].typed::<i32>().unwrap(),
            &[0, 1, 2, -1, -1, -1, 10, -1, -1, 11, -1, -1]
        );
        assert!(it.next().unwrap().is_none());
    }

    #[test]
    fn fixed_shapes_and_errors() {
        let padding = Padding {
            shapes: [("x".to_string(), vec![Some(3), None])].into(),
            ..Padding::default()
        };
        let b = stack_padded(&[element(1, 2, 0).unwrap()], &padding).unwrap();
        assert_eq!(b.tensors[0].shape(), &[1, 3, 2]);
        let too_big = stack_padded(&[element(4, 2, 0).unwrap()], &padding).unwrap_err();
        assert!(
            too_big
                .to_string()
                .contains("larger than the padded size 3"),
            "{too_big}"
        );
    }

    #[test]
    fn strings_are_padded_with_a_string() {
        let words = |v: &[&str]| -> Element {
            let values = v.iter().map(|w| Bytes::from(w.to_string())).collect();
            Element::new(
                names(&["w"]),
                vec![Tensor::from_bytes(vec![v.len()], values, Vec::new()).unwrap()],
            )
        };
        let text = |b: &Element| -> Vec<String> {
            let data = b.tensors[0].bytes_data().unwrap();
            data.values
                .iter()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect()
        };
        let batch = [words(&["a"]), words(&["b", "c"])];
        let b = stack_padded(&batch, &Padding::default()).unwrap();
        assert_eq!(b.tensors[0].shape(), &[2, 2]);
        assert_eq!(text(&b), ["a", "", "b", "c"]);
        let padding = Padding {
            shapes: [("w".to_string(), vec![Some(3)])].into(),
            default: Some(PadValue::Bytes {
                bytes: b"-".to_vec(),
            }),
            ..Padding::default()
        };
        let b = stack_padded(&batch, &padding).unwrap();
        assert_eq!(text(&b), ["a", "-", "-", "b", "c", "-"]);
        let number = Padding {
            default: Some(PadValue::Int(0)),
            ..Padding::default()
        };
        let e = stack_padded(&batch, &number).unwrap_err().to_string();
        assert!(e.contains("is not a string value"), "{e}");
    }

    #[test]
    fn a_padding_value_the_dtype_does_not_hold_is_refused() {
        let big = (1i64 << 53) + 1;
        assert_eq!(
            encode(DType::I64, &PadValue::Int(big)),
            Some(big.to_le_bytes().to_vec())
        );
        assert_eq!(
            encode(DType::I32, &PadValue::Float(-7.0)),
            Some((-7i32).to_le_bytes().to_vec())
        );
        assert_eq!(encode(DType::I32, &PadValue::Float(1.5)), None);
        assert_eq!(encode(DType::U8, &PadValue::Int(300)), None);
        assert_eq!(encode(DType::U8, &PadValue::Int(-1)), None);
        assert_eq!(encode(DType::Bool, &PadValue::Int(2)), None);
        assert_eq!(encode(DType::F32, &PadValue::Float(1e300)), None);
        assert_eq!(
            encode(DType::F32, &PadValue::Float(f64::NEG_INFINITY)),
            Some(f32::NEG_INFINITY.to_le_bytes().to_vec())
        );
        assert_eq!(encode(DType::F16, &PadValue::Int(70_000)), None);
        assert_eq!(
            encode(DType::F32, &PadValue::NonFinite(NonFinite::Nan)).map(|b| b.len()),
            Some(4)
        );
        assert_eq!(
            encode(DType::I32, &PadValue::NonFinite(NonFinite::Inf)),
            None
        );
        let spec: Padding =
            serde_json::from_str(r#"{"values": {"x": 9007199254740993, "y": 0.5, "z": "-inf"}}"#)
                .unwrap();
        assert_eq!(spec.values["x"], PadValue::Int(big));
        assert_eq!(spec.values["y"], PadValue::Float(0.5));
        assert_eq!(spec.values["z"], PadValue::NonFinite(NonFinite::NegInf));
    }
}
