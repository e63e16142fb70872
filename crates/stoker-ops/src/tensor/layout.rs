//! `layout(field, to)`: images `[..., H, W, C]` ↔ `[..., C, H, W]` (HWC ↔ CHW), copied.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{Error, Result, Tensor};

use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "layout";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    Chw,
    Hwc,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangeLayout {
    pub field: String,
    /// The layout to produce (the input is the other one).
    pub to: Layout,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// The last three dimensions after the change: the last axis moves to third-from-last (to
/// CHW) or back (to HWC).
fn permute<T: Copy>(dims: &[T], to: Layout) -> [T; 3] {
    let r = dims.len();
    let (a, b, c) = (dims[r - 3], dims[r - 2], dims[r - 1]);
    match to {
        Layout::Chw => [c, a, b],
        Layout::Hwc => [b, c, a],
    }
}

impl Op for ChangeLayout {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(input, OP, &self.field, |_| true, "an image")? else {
            return Ok(input.clone());
        };
        let r = f.shape.len();
        if r < 3 {
            return Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected rank >= 3",
                    self.field,
                    f.shape_str()
                ),
            ));
        }
        let mut shape = f.shape.clone();
        shape[r - 3..].copy_from_slice(&permute(&f.shape, self.to));
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), f.dtype, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let raw = t
            .raw()
            .ok_or_else(|| Error::invalid(OP, "bytes tensors have no layout"))?;
        let r = t.shape().len();
        if r < 3 {
            return Err(Error::invalid(
                OP,
                format!("expected rank >= 3, got {:?}", t.shape()),
            ));
        }
        let size = t.dtype().size().unwrap_or(1);
        let (a, b, c) = (t.shape()[r - 3], t.shape()[r - 2], t.shape()[r - 1]);
        let outer: usize = t.shape()[..r - 3].iter().product();
        let img = a * b * c * size;
        let mut storage = stoker_core::storage::shared_pool().take(raw.len());
        let out = storage.as_bytes_mut();
        for o in 0..outer {
            let (src, dst) = (
                &raw[o * img..(o + 1) * img],
                &mut out[o * img..(o + 1) * img],
            );
            for x in 0..a {
                for y in 0..b {
                    for z in 0..c {
                        // Source index (x, y, z) in [a, b, c]; destination per layout.
                        let s = ((x * b + y) * c + z) * size;
                        let d = match self.to {
                            Layout::Chw => ((z * a + x) * b + y) * size,
                            Layout::Hwc => ((y * c + z) * a + x) * size,
                        };
                        dst[d..d + size].copy_from_slice(&src[s..s + size]);
                    }
                }
            }
        }
        let mut shape = t.shape().to_vec();
        shape[r - 3..].copy_from_slice(&permute(t.shape(), self.to));
        let out = Tensor::from_storage(t.dtype(), shape, storage)?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
