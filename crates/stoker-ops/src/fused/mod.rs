//! The planner's fusions and the fused ops they build: runs of ops the planner replaces by
//! one op that does their work in fewer passes, with the same result. The planner calls the
//! `fuse` functions; users write the ops themselves.
//!
//! A fusion recognises the ops it takes by their spec (`known::Known`), as the registry
//! reads them, without depending on the registry.

mod after_decode;
pub mod crop_row_op;
pub mod decode_crop_or_pad;
pub mod decode_resized_crop;
pub mod device_image;
mod fuse_crop_or_pad;
pub(crate) mod known;
pub mod pixel_chain;
