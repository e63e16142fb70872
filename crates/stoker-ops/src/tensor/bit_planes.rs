//! `bit_planes(field, start, shape, indices, signs, dtype)`: planes of bits straight from
//! packed bytes, in one pass: the bits `start .. start + prod(shape)` of each row of bytes
//! (most significant bit first, as `unpack_bits`), seen as `shape` (channels last), with the
//! channels gathered and negated as `gather_channels` does, cast to `dtype`. It equals
//! `unpack_bits → slice → unflatten → gather_channels` (or `→ cast` without indices) without
//! their intermediate tensors: W1's board, flags and mate bit come out of the record's bytes
//! directly.
//!
//! For float32 output and rows whose channels are whole bytes (the start and the channel
//! count multiples of 8), each output row is expanded from one bit mask: the OR of one table
//! entry per input byte, the output channels that byte sets. A set channel is its sign (±1),
//! an unset one +0 (never -0, as TensorFlow's integer negation gives).

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
    /// The number of bytes every row must have (any when absent): a TensorFlow reshape of
    /// the unpacked bits fails on a row of another length, and so does this op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_bytes: Option<usize>,
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

    fn check_row(&self, bytes: usize) -> std::result::Result<(), String> {
        match self.row_bytes {
            Some(n) if n != bytes => Err(format!(
                "field '{}' has rows of {bytes} bytes where {n} are expected",
                self.field
            )),
            _ => Ok(()),
        }
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
            self.check_row(bytes).map_err(|e| Error::schema(OP, e))?;
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
        self.check_row(bytes).map_err(|e| Error::invalid(OP, e))?;
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
            let planes = BytePlanes::new(&plan, c / 8);
            let (first, width) = (self.start / 8, rows * (c / 8));
            build::<f32>(DType::F32, shape, |out| {
                let rows_in = src
                    .chunks_exact(bytes.max(1))
                    .map(|r| &r[first..first + width]);
                planes.fill(out, rows_in, rows * m);
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

/// The float32 path for byte-aligned channels: output channels in groups of 32, one mask
/// per group.
struct BytePlanes {
    /// Input bytes per channel row.
    per_row: usize,
    groups: usize,
    /// `masks[(k * 256 + v) * groups + g]`: the channels of group `g` that byte `k` of a
    /// channel row sets when its value is `v`.
    masks: Vec<u32>,
    /// The bits of each output channel's value when set (its sign as ±1.0).
    values: Vec<u32>,
}

impl BytePlanes {
    fn new(plan: &[(usize, i8)], per_row: usize) -> Self {
        let groups = plan.len().div_ceil(32);
        let mut masks = vec![0u32; per_row * 256 * groups];
        for (j, &(ch, _)) in plan.iter().enumerate() {
            let (byte, shift) = (ch / 8, 7 - ch % 8);
            for v in 0..256usize {
                if (v >> shift) & 1 == 1 {
                    masks[(byte * 256 + v) * groups + j / 32] |= 1 << (j % 32);
                }
            }
        }
        let values = plan.iter().map(|&(_, s)| f32::from(s).to_bits()).collect();
        BytePlanes {
            per_row,
            groups,
            masks,
            values,
        }
    }

    /// Writes each input row's planes (`row_len` values) into `out`, row after row.
    fn fill<'a>(&self, out: &mut [f32], rows: impl Iterator<Item = &'a [u8]>, row_len: usize) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, all the function needs.
            unsafe { self.fill_avx2(out, rows, row_len) };
            return;
        }
        self.fill_any(out, rows, row_len);
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2<'a>(
        &self,
        out: &mut [f32],
        rows: impl Iterator<Item = &'a [u8]>,
        row_len: usize,
    ) {
        self.fill_any(out, rows, row_len);
    }

    #[inline(always)]
    fn fill_any<'a>(&self, out: &mut [f32], rows: impl Iterator<Item = &'a [u8]>, row_len: usize) {
        let (m, groups) = (self.values.len(), self.groups);
        let mut mask = vec![0u32; groups];
        for (dst, row) in out.chunks_exact_mut(row_len).zip(rows) {
            for (d, channel_bytes) in dst.chunks_exact_mut(m).zip(row.chunks_exact(self.per_row)) {
                if groups == 1 {
                    let bytes = channel_bytes.iter().enumerate();
                    let one = bytes.fold(0, |x, (k, &v)| x | self.masks[k * 256 + usize::from(v)]);
                    expand(d, &self.values, one);
                    continue;
                }
                mask.fill(0);
                for (k, &v) in channel_bytes.iter().enumerate() {
                    let at = (k * 256 + usize::from(v)) * groups;
                    for (x, &y) in mask.iter_mut().zip(&self.masks[at..at + groups]) {
                        *x |= y;
                    }
                }
                for ((d, values), &mask) in d.chunks_mut(32).zip(self.values.chunks(32)).zip(&mask)
                {
                    expand(d, values, mask);
                }
            }
        }
    }
}

/// `out[j]` = `values[j]` (as bits) where bit `j` of `mask` is set, +0.0 elsewhere.
#[inline(always)]
fn expand(out: &mut [f32], values: &[u32], mask: u32) {
    for (j, (o, &v)) in out.iter_mut().zip(values).enumerate() {
        let bit = 1u32 << j;
        let on = u32::from(mask & bit == bit);
        *o = f32::from_bits(v & on.wrapping_neg());
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
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
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
            row_bytes: None,
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

    /// More than 32 output channels (several masks per channel row), on the AVX2 path where
    /// the CPU has it and on the portable one.
    #[test]
    fn many_channels_equal_the_reference_on_every_path() {
        let rows: Vec<Vec<u8>> = (0..3u32)
            .map(|r| (0..12u32).map(|i| (r * 53 + i * 29 + 7) as u8).collect())
            .collect();
        let indices: Vec<usize> = (0..40).rev().chain([5, 5, 0]).collect();
        let signs: Vec<i8> = (0..indices.len())
            .map(|j| if j % 3 == 0 { -1 } else { 1 })
            .collect();
        let op = BitPlanes {
            field: "d".into(),
            start: 16,
            shape: vec![2, 40],
            indices,
            signs,
            dtype: DType::F32,
            row_bytes: None,
            output: None,
        };
        let want = reference(&op, &rows);
        let got: Vec<f64> = (run(&op, &rows).typed::<f32>().unwrap().iter())
            .map(|&v| f64::from(v))
            .collect();
        assert_eq!(got, want);
        let planes = BytePlanes::new(&op.plan(), 5);
        let mut out = vec![f32::NAN; want.len()];
        let rows_in = rows.iter().map(|r| &r[2..12]);
        planes.fill_any(&mut out, rows_in, 2 * 43);
        assert_eq!(out.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(), want);
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
            row_bytes: None,
            output: None,
        };
        let schema = Schema::new(vec![FieldSpec::fixed("d", DType::U8, &[8])]);
        let err = op.output_schema(&schema).unwrap_err().to_string();
        assert!(err.contains("past the 64 bits"), "{err}");
    }

    /// With `row_bytes`, a row of another length is an error (as TensorFlow's reshape of the
    /// unpacked bits fails), in the schema and at run time; a row of that length is read.
    #[test]
    fn rows_of_another_length_are_refused() {
        let op = BitPlanes {
            field: "d".into(),
            start: 0,
            shape: vec![8],
            indices: vec![],
            signs: vec![],
            dtype: DType::F32,
            row_bytes: Some(2),
            output: None,
        };
        let schema = Schema::new(vec![FieldSpec::fixed("d", DType::U8, &[3])]);
        let err = op.output_schema(&schema).unwrap_err().to_string();
        assert!(err.contains("rows of 3 bytes where 2"), "{err}");
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element: 0,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        let t = Tensor::from_slice(DType::U8, vec![1, 3], &[1u8, 2, 3]).unwrap();
        let err = op
            .apply(Element::new(names(&["d"]), vec![t]), &ctx)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rows of 3 bytes where 2"), "{err}");
        assert_eq!(run(&op, &[vec![0b1000_0001, 0]]).shape(), &[1, 8]);
    }
}
