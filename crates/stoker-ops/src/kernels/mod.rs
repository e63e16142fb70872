//! The lowest layer: small kernels and helpers shared by the ops (numeric conversion,
//! per-channel loops, exact byte quotients, one-hot rows, field handling, spec JSON). Nothing
//! here knows any op.

pub mod channels;
pub(crate) mod fields;
pub mod numeric;
pub(crate) mod one_hot_rows;
pub(crate) mod spec_json;
pub(crate) mod u8_quotients;
