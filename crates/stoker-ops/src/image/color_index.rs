//! `color_index(field, colors, fallback)`: an RGB label map `[..., 3]` uint8 → the class index
//! of each pixel's colour `[...]` (uint8 up to 256 classes, else int32): the label a
//! segmentation dataset stores once (`convert`), a third the size of the colours and a
//! thirty-second of the one-hot, which `one_hot` makes online.

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::image::one_hot_colors::{rgb_pixels, OneHotColors};
use crate::kernels::fields::{input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "color_index";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColorIndex {
    pub field: String,
    /// `[r, g, b]` of each class, in class order.
    pub colors: Vec<[u8; 3]>,
    /// The class of a colour not in `colors` (else such a pixel is an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

impl ColorIndex {
    fn table(&self) -> OneHotColors {
        OneHotColors {
            field: self.field.clone(),
            colors: self.colors.clone(),
            fallback: self.fallback,
            zeros_for_others: false,
            output: None,
        }
    }

    fn dtype(&self) -> DType {
        if self.colors.len() <= 256 {
            DType::U8
        } else {
            DType::I32
        }
    }
}

impl Op for ColorIndex {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.table().lookup_for(OP)?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, "uint8 RGB")? else {
            return Ok(input.clone());
        };
        match f.shape.split_last() {
            Some((last, lead)) if *last == Some(3) || last.is_none() => Ok(with_field(
                input,
                FieldSpec::new(
                    out_name(&self.field, &self.output),
                    self.dtype(),
                    lead.to_vec(),
                ),
            )),
            _ => Err(Error::schema(
                OP,
                format!(
                    "field '{}' has shape {}; expected [..., 3] RGB",
                    self.field,
                    f.shape_str()
                ),
            )),
        }
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let t = &input.tensors[input.require(OP, &self.field)?];
        let px = rgb_pixels(OP, &self.field, t)?;
        let shape = t.shape()[..t.shape().len() - 1].to_vec();
        let mut classes = Vec::with_capacity(px.len() / 3);
        self.table().lookup_for(OP)?.classes(px, 0, &mut classes)?;
        let out = match self.dtype() {
            DType::U8 => {
                let v: Vec<u8> = classes.iter().map(|&c| c as u8).collect();
                Tensor::from_slice(DType::U8, shape, &v)?
            }
            _ => {
                let v: Vec<i32> = classes.iter().map(|&c| c as i32).collect();
                Tensor::from_slice(DType::I32, shape, &v)?
            }
        };
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
