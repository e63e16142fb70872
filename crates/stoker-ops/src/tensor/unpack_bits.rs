//! `unpack_bits(field)`: uint8 `[..., k]` → uint8 `[..., 8k]` of 0/1, most significant bit
//! first (NumPy's `unpackbits` with `bitorder="big"`).

use serde::{Deserialize, Serialize};
use stoker_core::element::{Element, FieldSpec, Schema};
use stoker_core::op::{Fields, Op, OpCtx};
use stoker_core::{DType, Error, Result};

use crate::kernels::fields::{build, input_spec, out_name, put, with_field};
use crate::kernels::spec_json::spec_json;

const OP: &str = "unpack_bits";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UnpackBits {
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Byte b → its 8 bits MSB first, as the 8 bytes of a little-endian u64.
const fn bit_table() -> [u64; 256] {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut word = 0u64;
        let mut j = 0;
        while j < 8 {
            let bit = ((b >> (7 - j)) & 1) as u64;
            word |= bit << (8 * j);
            j += 1;
        }
        table[b] = word;
        b += 1;
    }
    table
}

static BITS: [u64; 256] = bit_table();

impl Op for UnpackBits {
    fn name(&self) -> &str {
        OP
    }

    fn fields(&self) -> Fields {
        Fields::one(&self.field, self.output.as_deref())
    }

    fn output_schema(&self, input: &Schema) -> Result<Schema> {
        let Some(f) = input_spec(input, OP, &self.field, |d| d == DType::U8, "uint8")? else {
            return Ok(input.clone());
        };
        let mut shape = f.shape.clone();
        match shape.last_mut() {
            Some(last) => *last = last.map(|k| 8 * k),
            None => {
                return Err(Error::schema(
                    OP,
                    format!("field '{}' is a scalar; unpack a vector", self.field),
                ))
            }
        }
        Ok(with_field(
            input,
            FieldSpec::new(out_name(&self.field, &self.output), DType::U8, shape),
        ))
    }

    fn elementwise(&self) -> bool {
        true
    }

    fn apply(&self, input: Element, _ctx: &OpCtx<'_>) -> Result<Option<Element>> {
        let i = input.require(OP, &self.field)?;
        let t = &input.tensors[i];
        let bytes = t
            .typed::<u8>()
            .filter(|_| t.dtype() == DType::U8 && !t.shape().is_empty())
            .ok_or_else(|| {
                Error::invalid(
                    OP,
                    format!(
                        "field '{}' must be a uint8 vector, got {} {:?}",
                        self.field,
                        t.dtype(),
                        t.shape()
                    ),
                )
            })?;
        let mut shape = t.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last *= 8;
        }
        let out = build::<u8>(DType::U8, shape, |out| {
            for (dst, &b) in out.chunks_exact_mut(8).zip(bytes) {
                dst.copy_from_slice(&BITS[b as usize].to_le_bytes());
            }
            Ok(())
        })?;
        Ok(Some(put(input, out_name(&self.field, &self.output), out)))
    }

    fn spec(&self) -> Result<serde_json::Value> {
        spec_json(OP, self)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn msb_first() {
        assert_eq!(
            super::BITS[0b1000_0001].to_le_bytes(),
            [1, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(
            super::BITS[0b0100_0000].to_le_bytes(),
            [0, 1, 0, 0, 0, 0, 0, 0]
        );
    }
}
