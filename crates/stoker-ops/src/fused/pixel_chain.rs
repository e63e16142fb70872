//! `pixel_chain`: a run of flips and per-channel affine ops on one image field, fused into a
//! single pass that reads the source pixels once and writes the float32 result once. The
//! planner puts it in place of the run (see [`fuse`]), so users write the ops themselves.
//!
//! Fused ops: `random_flip`, `rescale` (to float32, e.g. `convert_image_dtype`),
//! `color_jitter` with brightness and/or contrast only, and `normalize`. Each of the value
//! ops is `y = a[c] * x + b[c]` per channel (contrast too: the mean it uses is an affine
//! function of the source's mean), so the chain composes (in f64) into one `a`, `b` per
//! channel; flips commute with all of them and with the mean. The result equals the op-by-op
//! result up to float32 rounding (a few ulp; tested to 1e-5).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Result};

use crate::fused::known::Known;
use crate::image::color_jitter::ColorJitter;
use crate::image::random_flip::{FlipAxis, RandomFlip};
use crate::kernels::channels::{self, PerChannel};
use crate::kernels::fields::{build_chunks_into, put};
use crate::kernels::spec_json::spec_json;
use crate::tensor::normalize::Normalize;
use crate::tensor::rescale::Rescale;

const OP: &str = "pixel_chain";

/// One fused op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Stage {
    RandomFlip(RandomFlip),
    Rescale(Rescale),
    ColorJitter(ColorJitter),
    Normalize(Normalize),
}

impl Stage {
    pub(crate) fn op(&self) -> &dyn Op {
        match self {
            Stage::RandomFlip(o) => o,
            Stage::Rescale(o) => o,
            Stage::ColorJitter(o) => o,
            Stage::Normalize(o) => o,
        }
    }

    /// The stage for `spec` if it can join a chain on `field` (in place, float32 out).
    pub(crate) fn of(spec: Known, field: Option<&str>) -> Option<(String, Stage)> {
        let (f, out, stage) = match spec {
            Known::RandomFlip(o) => (o.field.clone(), o.output.clone(), Stage::RandomFlip(o)),
            Known::Rescale(o) if o.dtype == DType::F32 => {
                (o.field.clone(), o.output.clone(), Stage::Rescale(o))
            }
            Known::ColorJitter(o) if o.saturation.is_none() && o.hue.is_none() => {
                (o.field.clone(), o.output.clone(), Stage::ColorJitter(o))
            }
            Known::Normalize(o) => (o.field.clone(), o.output.clone(), Stage::Normalize(o)),
            _ => return None,
        };
        let in_place = out.as_deref().is_none_or(|o| o == f);
        (in_place && field.is_none_or(|want| want == f)).then_some((f, stage))
    }

    /// Changes the pixel values, not just their positions.
    pub(crate) fn is_affine(&self) -> bool {
        !matches!(self, Stage::RandomFlip(_))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PixelChain {
    pub field: String,
    pub stages: Vec<Stage>,
}

/// What one element's draws make of the chain: `y = a[c] * x + b[c]`, then flips.
struct Composed {
    a: Vec<f32>,
    b: Vec<f32>,
    flip_horizontal: bool,
    flip_vertical: bool,
}

/// One element's draws with the source's channel means `m` left open:
/// `y = a[c] * x + b0[c] + bm[c] * m[c]`, then flips. A contrast stage is the only one that
/// reads the mean, and the current image's mean is the affine image of the source's, so every
/// chain is of this form; a device that makes the pixels computes `m` there.
#[derive(Clone, Debug, PartialEq)]
pub struct Affine {
    pub a: Vec<f64>,
    pub b0: Vec<f64>,
    pub bm: Vec<f64>,
    pub flip_horizontal: bool,
    pub flip_vertical: bool,
}

impl Affine {
    /// Whether `bm` is used (the channel means must be computed).
    pub fn reads_means(&self) -> bool {
        self.bm.iter().any(|&v| v != 0.0)
    }
}

/// The stages of `stages` composed for this element (see [`Affine`]).
pub fn compose_affine(stages: &[Stage], channels: usize, ctx: &OpCtx<'_>) -> Result<Affine> {
    let (mut a, mut b0, mut bm) = (
        vec![1f64; channels],
        vec![0f64; channels],
        vec![0f64; channels],
    );
    let (mut flip_horizontal, mut flip_vertical) = (false, false);
    for stage in stages {
        match stage {
            Stage::RandomFlip(f) if f.flips(ctx) => match f.axis {
                FlipAxis::Horizontal => flip_horizontal = !flip_horizontal,
                FlipAxis::Vertical => flip_vertical = !flip_vertical,
            },
            Stage::RandomFlip(_) => {}
            Stage::Rescale(r) => {
                let k = r.scale / r.divisor;
                for c in 0..channels {
                    a[c] *= k;
                    b0[c] = b0[c] * k + r.offset;
                    bm[c] *= k;
                }
            }
            Stage::ColorJitter(j) => {
                j.check(Some(channels))?;
                let draw = j.draw(ctx);
                let delta = f64::from(draw.brightness.unwrap_or(0.0));
                b0.iter_mut().for_each(|b| *b += delta);
                if let Some(f) = draw.contrast {
                    // (y - mean(y)) * f + mean(y), with mean(y) = a * m + b: the new offset
                    // gains a * m * (1 - f).
                    let f = f64::from(f);
                    for c in 0..channels {
                        bm[c] += a[c] * (1.0 - f);
                        a[c] *= f;
                    }
                }
            }
            Stage::Normalize(n) => {
                n.check(Some(channels))?;
                for c in 0..channels {
                    let (mean, std) = (f64::from(n.mean[c]), f64::from(n.std[c]));
                    a[c] /= std;
                    b0[c] = (b0[c] - mean) / std;
                    bm[c] /= std;
                }
            }
        }
    }
    Ok(Affine {
        a,
        b0,
        bm,
        flip_horizontal,
        flip_vertical,
    })
}

impl PixelChain {
    /// Composes the stages for this element; `src_means` gives the source's per-channel means
    /// (computed only if a contrast stage needs them).
    fn compose(
        &self,
        channels: usize,
        ctx: &OpCtx<'_>,
        src_means: impl FnOnce() -> Vec<f32>,
    ) -> Result<Composed> {
        let m = compose_affine(&self.stages, channels, ctx)?;
        let means = if m.reads_means() {
            src_means()
        } else {
            Vec::new()
        };
        let b = (0..channels)
            .map(|c| {
                let mean = f64::from(means.get(c).copied().unwrap_or(0.0));
                (m.b0[c] + m.bm[c] * mean) as f32
            })
            .collect();
        Ok(Composed {
            a: m.a.iter().map(|&v| v as f32).collect(),
            b,
            flip_horizontal: m.flip_horizontal,
            flip_vertical: m.flip_vertical,
        })
    }

    /// The stages one by one (for inputs the fused kernel does not take).
    fn unfused(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let mut e = input;
        for stage in &self.stages {
            match stage.op().apply(e, ctx)? {
                Some(next) => e = next,
                None => return Ok(None),
            }
        }
        Ok(Some(e))
    }
}

/// The output, one row at a time: `dst = a * src + b` per channel, flipped as asked.
struct Rows<'a, S> {
    src: &'a [S],
    /// Rows (image rows, or for element-wise chains on a batch any run of whole pixels) and
    /// values per row; the last row may be shorter.
    rows: usize,
    len: usize,
    channels: usize,
    kernel: PerChannel,
    flip_horizontal: bool,
    flip_vertical: bool,
    /// A source row in reverse pixel order, for horizontal flips.
    reversed: Vec<S>,
}

/// Pixels per row when the rows are not an image's (a batch run through element-wise stages):
/// small enough for a streamed row's scratch to stay in the L1 cache.
const FLAT_ROW_PIXELS: usize = 1024;

impl<'a, S: Copy + Into<f32> + Default> Rows<'a, S> {
    /// An image's rows; the stages' flips apply.
    fn image(src: &'a [S], [h, w, c]: [usize; 3], m: &Composed) -> Self {
        Rows {
            src,
            rows: h,
            len: w * c,
            channels: c,
            kernel: PerChannel::new(&m.a, &m.b),
            flip_horizontal: m.flip_horizontal,
            flip_vertical: m.flip_vertical,
            reversed: vec![S::default(); if m.flip_horizontal { w * c } else { 0 }],
        }
    }

    /// Any pixels of `c` channels, in rows of `FLAT_ROW_PIXELS` (for stages without flips).
    fn flat(src: &'a [S], c: usize, m: &Composed) -> Self {
        let len = c * FLAT_ROW_PIXELS.min(src.len() / c.max(1)).max(1);
        Rows {
            src,
            rows: src.len().div_ceil(len),
            len,
            channels: c,
            kernel: PerChannel::new(&m.a, &m.b),
            flip_horizontal: false,
            flip_vertical: false,
            reversed: Vec::new(),
        }
    }

    /// Writes output row `y` into `dst` (`len` values, fewer in a short last row).
    fn make(&mut self, y: usize, dst: &mut [f32]) {
        let sy = if self.flip_vertical {
            self.rows - 1 - y
        } else {
            y
        };
        let start = sy * self.len;
        let mut src_row = &self.src[start..start + dst.len()];
        if self.flip_horizontal {
            reverse_pixels(src_row, &mut self.reversed, self.channels);
            src_row = &self.reversed;
        }
        self.kernel.map(src_row, dst, |x, a, b| x.into() * a + b);
    }
}

/// `dst` = the pixels of `src` (`c` values each) in reverse order. The usual channel counts
/// get fixed-size copies: a `copy_from_slice` of `c` values would be a `memcpy` call per pixel.
fn reverse_pixels<S: Copy>(src: &[S], dst: &mut [S], c: usize) {
    fn fixed<S: Copy, const N: usize>(src: &[S], dst: &mut [S]) {
        for (d, s) in dst.chunks_exact_mut(N).zip(src.chunks_exact(N).rev()) {
            if let (Ok(d), Ok(s)) = (<&mut [S; N]>::try_from(d), <&[S; N]>::try_from(s)) {
                *d = *s;
            }
        }
    }
    match c {
        1 => fixed::<S, 1>(src, dst),
        3 => fixed::<S, 3>(src, dst),
        4 => fixed::<S, 4>(src, dst),
        _ => {
            for (d, s) in dst
                .chunks_exact_mut(c.max(1))
                .zip(src.chunks_exact(c.max(1)).rev())
            {
                d.copy_from_slice(s);
            }
        }
    }
}

impl Op for PixelChain {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, None)
    }

    fn seeds(&self) -> Vec<stoker_core::Seed> {
        self.stages.iter().flat_map(|s| s.op().seeds()).collect()
    }

    fn deterministic(&self) -> bool {
        self.stages.iter().all(|s| s.op().deterministic())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.stages
            .iter()
            .try_fold(input.clone(), |s, stage| stage.op().output_schema(&s))
    }

    fn elementwise(&self) -> bool {
        self.stages.iter().all(|s| s.op().elementwise())
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        // [H, W, C] images; a batch or any other rank only when nothing depends on the rows.
        let image = match (t.shape(), self.elementwise()) {
            (&[h, w, c], _) => Some([h, w, c]),
            (&[.., c], true) if c > 0 => None,
            _ => return self.unfused(input, ctx),
        };
        let c = image.map_or_else(|| t.shape().last().copied().unwrap_or(1), |s| s[2]);
        // Written a row at a time: straight into the element's batch row where there is one.
        let (field, out_shape) = (self.field.as_str(), t.shape().to_vec());
        let out = match t.dtype() {
            DType::U8 => {
                let src = t.typed::<u8>().unwrap_or_default();
                let m = self.compose(c, ctx, || channels::means_u8(src, c))?;
                let mut rows =
                    image.map_or_else(|| Rows::flat(src, c, &m), |s| Rows::image(src, s, &m));
                let len = rows.len;
                build_chunks_into(ctx, field, DType::F32, out_shape, len, |y, dst| {
                    rows.make(y, dst)
                })?
            }
            DType::F32 => {
                let src = t.typed::<f32>().unwrap_or_default();
                let m = self.compose(c, ctx, || channels::means(src, c))?;
                let mut rows =
                    image.map_or_else(|| Rows::flat(src, c, &m), |s| Rows::image(src, s, &m));
                let len = rows.len;
                build_chunks_into(ctx, field, DType::F32, out_shape, len, |y, dst| {
                    rows.make(y, dst)
                })?
            }
            _ => return self.unfused(input, ctx),
        };
        Ok(Some(put(input, &self.field, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(&self.field)
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

/// Replaces each run of two or more fusable ops (see the module docs) on the same field with
/// one [`PixelChain`], looking past ops that declare they neither read nor write that field
/// (they then run after it). The run must change values (its output is then float32): flips alone
/// keep their dtype and stay as they are.
pub fn fuse(ops: &[Arc<dyn Op>]) -> Vec<Arc<dyn Op>> {
    let mut out: Vec<Arc<dyn Op>> = Vec::with_capacity(ops.len());
    let mut i = 0;
    while i < ops.len() {
        let mut field: Option<String> = None;
        let mut stages = Vec::new();
        // Ops between stages that declare they neither read nor write the chain's field: the
        // chain is fused across them, and they run after it.
        let (mut passed, mut pending) = (Vec::new(), Vec::new());
        let mut end = i;
        for (j, op) in ops.iter().enumerate().skip(i) {
            if let Some((f, stage)) = Known::of(op).and_then(|s| Stage::of(s, field.as_deref())) {
                field = Some(f);
                stages.push(stage);
                passed.append(&mut pending);
                end = j + 1;
            } else if field.as_deref().is_some_and(|f| !op.fields().touches(f)) {
                pending.push(op.clone());
            } else {
                break;
            }
        }
        match field {
            Some(field) if stages.len() >= 2 && stages.iter().any(Stage::is_affine) => {
                out.push(Arc::new(PixelChain { field, stages }));
                out.append(&mut passed);
                i = end;
            }
            _ => {
                out.push(ops[i].clone());
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_core::element::names;
    use stoker_core::stats::StageStats;
    use stoker_core::{ErrorPolicy, Tensor};

    fn chain_ops() -> Vec<Arc<dyn Op>> {
        let json = [
            r#"{"op": "random_flip", "field": "image", "axis": "horizontal", "seed": 1}"#,
            r#"{"op": "rescale", "field": "image", "divisor": 255.0}"#,
            r#"{"op": "color_jitter", "field": "image", "brightness": [-0.2, 0.2],
                "contrast": [0.8, 1.2], "seed": 2}"#,
            r#"{"op": "random_flip", "field": "image", "axis": "vertical", "seed": 3}"#,
            r#"{"op": "normalize", "field": "image", "mean": [0.485, 0.456, 0.406],
                "std": [0.229, 0.224, 0.225]}"#,
        ];
        json.iter().map(|j| op(j)).collect()
    }

    /// The op of spec `json`, one of the chain's kinds.
    fn op(json: &str) -> Arc<dyn Op> {
        match serde_json::from_str(json).unwrap() {
            Known::RandomFlip(o) => Arc::new(o),
            Known::Rescale(o) => Arc::new(o),
            Known::ColorJitter(o) => Arc::new(o),
            Known::Normalize(o) => Arc::new(o),
            other => panic!("not a chain op: {other:?}"),
        }
    }

    fn image(dtype: DType, h: usize, w: usize) -> Tensor {
        let n = h * w * 3;
        let px: Vec<u8> = (0..n).map(|i| ((i * 37 + i / 7) % 256) as u8).collect();
        match dtype {
            DType::U8 => Tensor::from_slice(DType::U8, vec![h, w, 3], &px).unwrap(),
            _ => {
                let f: Vec<f32> = px.iter().map(|&v| f32::from(v) / 255.0).collect();
                Tensor::from_slice(DType::F32, vec![h, w, 3], &f).unwrap()
            }
        }
    }

    fn run(ops: &[Arc<dyn Op>], x: Tensor, element: u64) -> Vec<f32> {
        let stats = StageStats::new("t", "t");
        let ctx = OpCtx {
            policy: ErrorPolicy::Raise,
            stats: &stats,
            element,
            epoch: 0,
            row: None,
            seeds: stoker_core::Seeds::none(),
            skipped: Default::default(),
        };
        let mut e = Element::new(names(&["image"]), vec![x]);
        for op in ops {
            e = op.apply(e, &ctx).unwrap().unwrap();
        }
        e.tensors[0].typed::<f32>().unwrap().to_vec()
    }

    #[test]
    fn a_chain_is_random_when_one_of_its_stages_is() {
        let ops = chain_ops();
        let fused = fuse(&ops);
        assert_eq!(fused.len(), 1);
        assert!(!fused[0].deterministic(), "the chain hides random stages");
        // rescale + normalize only: deterministic.
        let plain = fuse(&[ops[1].clone(), ops[4].clone()]);
        assert_eq!(plain.len(), 1);
        assert!(plain[0].deterministic());
    }

    #[test]
    fn fused_equals_op_by_op_for_u8_and_f32_sources() {
        let ops = chain_ops();
        let fused = fuse(&ops);
        assert_eq!(fused.len(), 1, "{fused:?}");
        assert_eq!(fused[0].name(), OP);
        for element in 0..16 {
            for (dtype, from) in [(DType::U8, 0), (DType::F32, 1)] {
                let want = run(&ops[from..], image(dtype, 13, 21), element);
                let got = run(&fuse(&ops[from..]), image(dtype, 13, 21), element);
                assert_eq!(want.len(), got.len());
                let worst = want
                    .iter()
                    .zip(&got)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst < 1e-5,
                    "element {element} {dtype}: max |diff| {worst}"
                );
            }
        }
    }

    #[test]
    fn only_runs_with_a_value_op_on_one_field_are_fused() {
        let ops = chain_ops();
        // Two flips alone keep their dtype: not fused.
        let flips = [ops[0].clone(), ops[3].clone()];
        assert_eq!(fuse(&flips).len(), 2);
        // A single op is left alone.
        assert_eq!(fuse(&ops[1..2])[0].name(), "rescale");
        // An op declaring it leaves the field alone is looked past, and runs after the chain.
        let other = op(r#"{"op": "rescale", "field": "mask", "divisor": 255.0}"#);
        let mixed = [ops[1].clone(), other.clone(), ops[4].clone()];
        let fused = fuse(&mixed);
        assert_eq!(fused.len(), 2, "{fused:?}");
        assert_eq!(fused[0].name(), OP);
        assert!(Arc::ptr_eq(&fused[1], &other));
        // One that may touch any field (it does not say) breaks the run.
        let opaque: Arc<dyn Op> = Arc::new(crate::tensor::select::Select {
            fields: vec!["image".into()],
        });
        assert_eq!(opaque.fields(), Fields::All);
        let mixed = [ops[1].clone(), opaque, ops[4].clone()];
        assert_eq!(fuse(&mixed).len(), 3);
        // So does an op on the chain's field that is no stage of it.
        let cast = Arc::new(crate::tensor::cast::Cast {
            field: "image".into(),
            dtype: DType::F16,
            output: None,
        });
        assert!(cast.fields().touches("image"));
        assert_eq!(fuse(&[ops[1].clone(), cast, ops[4].clone()]).len(), 3);
        // Ops after the last stage stay where they are.
        let tail = fuse(&[ops[1].clone(), ops[4].clone(), other.clone()]);
        assert_eq!(tail.len(), 2);
        assert!(Arc::ptr_eq(&tail[1], &other));
    }

    #[test]
    fn batches_of_elementwise_stages_are_fused_too() {
        let ops = [chain_ops()[1].clone(), chain_ops()[4].clone()];
        let fused = fuse(&ops);
        assert!(fused[0].elementwise());
        // A small batch, and one of 2,146 pixels: rows of 1,024 pixels, the last one short.
        for shape in [[2, 4, 5, 3], [2, 37, 29, 3]] {
            let n = shape.iter().product::<usize>();
            let px: Vec<u8> = (0..n).map(|i| (i * 11 % 256) as u8).collect();
            let batch = || Tensor::from_slice(DType::U8, shape.to_vec(), &px).unwrap();
            let want = run(&ops, batch(), 0);
            let got = run(&fused, batch(), 0);
            assert_eq!(want.len(), got.len());
            assert!(want.iter().zip(&got).all(|(a, b)| (a - b).abs() < 1e-5));
        }
    }
}
