//! `one_hot_colors(field, colors)`: an RGB label map `[..., 3]` uint8 → one-hot `[..., K]`
//! float32 over the K class colours (a `class_dict.csv` table). A pixel of another colour is an
//! error naming it and where it is, unless `fallback` names the class to use.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result, Tensor};

use crate::kernels::fields::{build_into, input_spec, out_name, put, with_field};
use crate::kernels::one_hot_rows::OneHotRows;
use crate::kernels::spec_json::spec_json;

const OP: &str = "one_hot_colors";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OneHotColors {
    pub field: String,
    /// `[r, g, b]` of each class, in class order.
    pub colors: Vec<[u8; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<usize>,
    /// A pixel of no class colour gets a row of zeros (as TensorFlow's per-colour `equal`
    /// one-hot gives), instead of an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zeros_for_others: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

fn key([r, g, b]: [u8; 3]) -> u32 {
    u32::from(r) << 16 | u32::from(g) << 8 | u32::from(b)
}

impl OneHotColors {
    /// The class of each colour key. Colours are distinct 24-bit values, so classes fit a u32.
    fn check(&self) -> Result<HashMap<u32, u32>> {
        if self.colors.is_empty() {
            return Err(Error::schema(OP, "no class colours"));
        }
        if self.fallback.is_some() && self.zeros_for_others {
            return Err(Error::schema(
                OP,
                "give fallback or zeros_for_others, not both",
            ));
        }
        if let Some(f) = self.fallback {
            if f >= self.colors.len() {
                return Err(Error::schema(
                    OP,
                    format!(
                        "fallback class {f} is not one of the {} classes",
                        self.colors.len()
                    ),
                ));
            }
        }
        let mut index = HashMap::with_capacity(self.colors.len());
        for (i, &c) in self.colors.iter().enumerate() {
            if index.insert(key(c), i as u32).is_some() {
                return Err(Error::schema(OP, format!("colour {c:?} is listed twice")));
            }
        }
        Ok(index)
    }

    /// The class lookup for this op's colours.
    pub(crate) fn lookup(&self) -> Result<ClassLookup> {
        self.lookup_for(OP)
    }

    /// The class lookup for these colours, for op `op` (which its errors name).
    pub(crate) fn lookup_for(&self, op: &'static str) -> Result<ClassLookup> {
        Ok(ClassLookup {
            op,
            index: self.check()?,
            // Class `len` is no class: its one-hot row is all zeros.
            fallback: if self.zeros_for_others {
                Some(self.colors.len() as u32)
            } else {
                self.fallback.map(|f| f as u32)
            },
            last: (u32::MAX, 0),
        })
    }
}

/// The class of each pixel's colour.
pub(crate) struct ClassLookup {
    op: &'static str,
    index: HashMap<u32, u32>,
    fallback: Option<u32>,
    /// The last colour key looked up and its class: label maps come in runs of one colour.
    last: (u32, u32),
}

impl ClassLookup {
    /// `classes` becomes the class of each RGB pixel of `px`, the first of which is pixel
    /// number `first` (for the error naming a colour that is not a class's).
    pub(crate) fn classes(
        &mut self,
        px: &[u8],
        first: usize,
        classes: &mut Vec<u32>,
    ) -> Result<()> {
        classes.clear();
        for (i, rgb) in px.chunks_exact(3).enumerate() {
            let kk = key([rgb[0], rgb[1], rgb[2]]);
            if kk != self.last.0 {
                let class = match (self.index.get(&kk), self.fallback) {
                    (Some(&c), _) => c,
                    (None, Some(f)) => f,
                    (None, None) => {
                        return Err(Error::invalid(
                            self.op,
                            format!("pixel {} has colour {:?}, which is not a class colour (set fallback to map it to a class)", first + i, [rgb[0], rgb[1], rgb[2]]),
                        ))
                    }
                };
                self.last = (kk, class);
            }
            classes.push(self.last.1);
        }
        Ok(())
    }
}

/// The pixels of `t`, field `field` of op `op`, which must be uint8 `[..., 3]` RGB.
pub(crate) fn rgb_pixels<'t>(op: &str, field: &str, t: &'t Tensor) -> Result<&'t [u8]> {
    t.typed::<u8>()
        .filter(|_| t.dtype() == DType::U8 && t.shape().last() == Some(&3))
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "field '{field}' must be uint8 [..., 3], got {} {:?}",
                    t.dtype(),
                    t.shape()
                ),
            )
        })
}

impl Op for OneHotColors {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        self.check()?;
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, "uint8 RGB")? else {
            return Ok(input.clone());
        };
        let mut shape = f.shape.clone();
        match shape.last_mut() {
            Some(last) if *last == Some(3) || last.is_none() => *last = Some(self.colors.len()),
            _ => {
                return Err(Error::schema(
                    OP,
                    format!(
                        "field '{}' has shape {}; expected [..., 3] RGB",
                        self.field,
                        f.shape_str()
                    ),
                ))
            }
        }
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), DType::F32, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let t = &input.tensors[input.require(OP, &self.field)?];
        let px = rgb_pixels(OP, &self.field, t)?;
        let k = self.colors.len();
        let mut shape = t.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = k;
        }
        let output = out_name(&self.field, &self.output);
        let out = build_into(ctx, output, DType::F32, shape, |out: &mut [f32]| {
            // Classes are looked up a chunk of pixels at a time, then the chunk's rows are
            // written whole (zeros and the one) in one pass over the output, which is far
            // larger than the cache. Label maps come in runs of one colour: remember the last
            // lookup.
            const CHUNK: usize = 4096;
            let mut classes: Vec<u32> = Vec::with_capacity(CHUNK);
            let mut lookup = self.lookup()?;
            let mut rows = OneHotRows::new(out, k);
            for (n, chunk) in px.chunks(3 * CHUNK).enumerate() {
                lookup.classes(chunk, n * CHUNK, &mut classes)?;
                rows.write(n * CHUNK, &classes);
            }
            rows.finish();
            Ok(())
        })?;
        Ok(Some(put(input, output, out)))
    }

    fn batch_row_field(&self) -> Option<&str> {
        Some(out_name(&self.field, &self.output))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}
