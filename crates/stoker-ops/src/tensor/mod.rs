//! Tensor ops: dtype, shape, field and value changes of any tensor.

pub mod bit_planes;
pub mod cast;
pub mod compute;
pub mod element_seed;
pub mod ensure_shape;
pub mod gather_channels;
pub mod layout;
pub mod normalize;
pub mod one_hot;
pub mod rescale;
pub mod select;
pub mod slice;
pub mod unflatten;
pub mod unpack_bits;
