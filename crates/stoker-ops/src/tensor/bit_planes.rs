//! `bit_planes(field, start, shape, indices, signs, dtype)`: planes of bits straight from
//! packed bytes, in one pass: the bits `start .. start + prod(shape)` of each row of bytes
//! (most significant bit first, as `unpack_bits`), seen as `shape` (channels last), with the
//! channels gathered and negated as `gather_channels` does, cast to `dtype`. It equals
//! `unpack_bits → slice → unflatten → gather_channels` (or `→ cast` without indices) without
//! their intermediate tensors: W1's board, flags and mate bit come out of the record's bytes
//! directly.
//!
//! For float32 output and rows whose channels are whole bytes (the start and the channel
//! count multiples of 8), each output row is the sum of one table entry per input byte: the
//! channels that byte feeds, as ±1 or +0 (never -0, as TensorFlow's integer negation gives).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::numeric::{from_f64, is_numeric};
use crate::kernels::spec_json::spec_json;
use crate::tensor::gather_channels::check_signs;

const OP: &str = "bit_planes";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BitPlanes {
    pub field: String,
    /// The first bit taken, counted from the first byte's most significant bit.
    pub start: usize,
    /// The bits' shape; the last axis is the channels.
    pub shape: Vec<usize>,
    /// The input channels in output order (all of them in order when empty).
    #[serde(default)]
    pub indices: Vec<usize>,
    /// +1 / -1 per output channel; all +1 when empty.
    #[serde(default)]
    pub signs: Vec<i8>,
    #[serde(default = "f32_dtype")]
    pub dtype: DType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn f32_dtype() -> DType {
    DType::F32
}

impl BitPlanes {
    fn channels(&self) -> usize {
        self.shape.last().copied().unwrap_or(1)
    }

    fn bits(&self) -> usize {
        self.shape.iter().product()
    }

    /// (input channel, sign) of each output channel.
    fn plan(&self) -> Vec<(usize, i8)> {
        if self.indices.is_empty() {
            return (0..self.channels()).map(|c| (c, 1)).collect();
        }
        (self.indices.iter().enumerate())
            .map(|(j, &c)| (c, self.signs.get(j).copied().unwrap_or(1)))
            .collect()
    }

    fn out_shape(&self) -> Vec<usize> {
        let mut shape = self.shape.clone();
        if let Some(last) = shape.last_mut() {
            *last = self.plan().len();
        }
        shape
    }

    fn check(&self) -> Result<()> {
        let bad = |why: String| Err(Error::schema(OP, why));
        if self.shape.is_empty() || self.shape.contains(&0) {
            return bad(format!(
                "shape must have at least one axis, none of size 0, got {:?}",
                self.shape
            ));
        }
        check_signs(OP, &self.signs, self.indices.len())?;
        if let Some(&i) = self.indices.iter().find(|&&i| i >= self.channels()) {
            return bad(format!(
                "index {i} is out of range for {} channels",
                self.channels()
            ));
        }
        if !is_numeric(self.dtype) {
            return bad("the output dtype must be numeric".into());
        }
        Ok(())
    }
}

impl Op for BitPlanes {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, "uint8")? else {
            return Ok(input.clone());
        };
        let Some((&last, lead)) = f.shape.split_last() else {
            return Err(Error::schema(
                OP,
                format!("field '{}' is a scalar", self.field),
            ));
        };
        if let Some(bytes) = last {
            if self.start + self.bits() > bytes * 8 {
                return Err(Error::schema(
                    OP,
                    format!(
                        "bits {}..{} are past the {} bits of field '{}'",
                        self.start,
                        self.start + self.bits(),
                        bytes * 8,
                        self.field
                    ),
                ));
            }
        }
        let mut shape = lead.to_vec();
        shape.extend(self.out_shape().into_iter().map(Some));
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), self.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        self.check()?;
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let src = t
            .typed::<u8>()
            .filter(|_| t.dtype() == DType::U8)
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "field '{}' must be uint8 bytes, got {}",
                        self.field,
                        t.dtype()
                    ),
                )
            })?;
        let Some((&bytes, lead)) = t.shape().split_last() else {
            return Err(Error::invalid(
                OP,
                format!("field '{}' is a scalar", self.field),
            ));
        };
        if self.start + self.bits() > bytes * 8 {
            return Err(Error::invalid(
                OP,
                format!(
                    "bits {}..{} are past the {} bits of each row",
                    self.start,
                    self.start + self.bits(),
                    bytes * 8
                ),
            ));
        }
        let mut shape = lead.to_vec();
        shape.extend(self.out_shape());
        let plan = self.plan();
        let (c, m) = (self.channels(), plan.len());
        let rows = self.bits() / c;
        let bit = |row: &[u8], k: usize| (row[k / 8] >> (7 - k % 8)) & 1;
        let out = if self.dtype == DType::F32 && self.start % 8 == 0 && c % 8 == 0 {
            // One table per input byte of a channel row: the output row's values that byte
            // gives (the others 0.0), for each of its 256 values.
            let per_row = c / 8;
            let mut tables = vec![0f32; per_row * 256 * m];
            for (j, &(ch, sign)) in plan.iter().enumerate() {
                let (byte, shift) = (ch / 8, 7 - ch % 8);
                for v in 0..256usize {
                    if (v >> shift) & 1 == 1 {
                        tables[(byte * 256 + v) * m + j] = f32::from(sign);
                    }
                }
            }
            build::<f32>(DType::F32, shape, |out| {
                let first = self.start / 8;
                for (dst, row) in out
                    .chunks_exact_mut(rows * m)
                    .zip(src.chunks_exact(bytes.max(1)))
                {
                    let planes = &row[first..first + rows * per_row];
                    for (d, channel_bytes) in
                        dst.chunks_exact_mut(m).zip(planes.chunks_exact(per_row))
                    {
                        d.fill(0.0);
                        for (k, &v) in channel_bytes.iter().enumerate() {
                            let t = &tables[(k * 256 + usize::from(v)) * m..][..m];
                            for (x, &y) in d.iter_mut().zip(t) {
                                *x += y;
                            }
                        }
                    }
                }
                Ok(())
            })?
        } else {
            let mut values = Vec::with_capacity(src.len() / bytes.max(1) * rows * m);
            for row in src.chunks_exact(bytes.max(1)) {
                for r in 0..rows {
                    for &(ch, sign) in &plan {
                        let b = bit(row, self.start + r * c + ch);
                        // +0.0 for a negated 0, as integer negation gives.
                        values.push(if b == 0 { 0.0 } else { f64::from(sign) });
                    }
                }
            }
            from_f64(self.dtype, shape, &values)?
        };
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
    use stoker_core::{ErrorPolicy, Tensor};

    fn run(op: &BitPlanes, rows: &[Vec<u8>]) -> Tensor {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
        };
        let k = rows[0].len();
        let flat: Vec<u8> = rows.concat();
        let t = Tensor::from_slice(DType::U8, vec![rows.len(), k], &flat).unwrap();
        let e = Element::new(names(&["d"]), vec![t]);
        let out = op.apply(e, &ctx).unwrap().unwrap();
        out.tensors[0].clone()
    }

    /// The op against the chain it replaces, computed bit by bit here.
    fn reference(op: &BitPlanes, rows: &[Vec<u8>]) -> Vec<f64> {
        let (c, plan) = (op.channels(), op.plan());
        let mut out = Vec::new();
        for row in rows {
            let bits: Vec<u8> = row
                .iter()
                .flat_map(|b| (0..8).rev().map(move |s| (b >> s) & 1))
                .collect();
            let taken = &bits[op.start..op.start + op.bits()];
            for r in taken.chunks_exact(c) {
                for &(ch, sign) in &plan {
                    out.push(f64::from(i32::from(r[ch]) * i32::from(sign)));
                }
            }
        }
        out
    }

    #[test]
    fn equals_unpack_slice_gather_on_both_paths() {
        let rows: Vec<Vec<u8>> = (0..5u32)
            .map(|r| (0..8u32).map(|i| (r * 37 + i * 91 + 13) as u8).collect())
            .collect();
        let signed = BitPlanes {
            field: "d".into(),
            start: 8,
            shape: vec![2, 16],
            indices: vec![3, 0, 15, 8, 8, 1],
            signs: vec![1, -1, 1, -1, 1, -1],
            dtype: DType::F32,
            output: None,
        };
        // Byte-aligned float32: the table path; a start off the byte and int8: the bit path.
        let unaligned = BitPlanes {
            start: 3,
            dtype: DType::I8,
            ..signed.clone()
        };
        for op in [&signed, &unaligned] {
            let out = run(op, &rows);
            assert_eq!(out.shape(), &[5, 2, 6]);
            let got: Vec<f64> = match op.dtype {
                DType::F32 => out
                    .typed::<f32>()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect(),
                _ => out
                    .typed::<i8>()
                    .unwrap()
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect(),
            };
            assert_eq!(got, reference(op, &rows));
        }
        // No negative zero: a 0 bit negated is +0.0.
        let out = run(&signed, &rows);
        assert!(out
            .typed::<f32>()
            .unwrap()
            .iter()
            .all(|v| *v != 0.0 || v.is_sign_positive()));
    }

    #[test]
    fn bits_past_the_row_are_refused() {
        let op = BitPlanes {
            field: "d".into(),
            start: 60,
            shape: vec![8],
            indices: vec![],
            signs: vec![],
            dtype: DType::F32,
            output: None,
        };
        let schema = Schema::new(vec![FieldSpec::fixed("d", DType::U8, &[8])]);
        let err = op.output_schema(&schema).unwrap_err().to_string();
        assert!(err.contains("past the 64 bits"), "{err}");
    }
}
