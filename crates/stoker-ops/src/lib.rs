//! Native ops. Each works on one element and, when it is element-wise, on a whole batch
//! (any number of leading dimensions), so the planner can run it once per batch.
//!
//! Every op names its input field and its output field (by default the same name, replacing
//! the input), and checks its input schema when the pipeline is built.
//!
//! The crate is in layers, each a module, from the bottom: [`kernels`] (shared kernels and
//! helpers), [`codecs`] (JPEG and PNG decoding), [`record`] and [`tensor`] (record and tensor
//! ops), [`image`] (image ops), [`fused`] (the planner's fusions and the fused ops), and at the
//! top [`spec`], the registry of every op ([`OpSpec`]). A module imports only from its own
//! layer and the layers below it: no op imports the registry (an op writes its own spec with
//! `kernels::spec_json`, and the fusions recognise ops with `fused::known`).

pub mod kernels;

pub mod codecs;

pub mod record;
pub mod tensor;

pub mod image;

pub mod fused;

pub mod spec;

pub use spec::OpSpec;
