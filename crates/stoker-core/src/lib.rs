//! stoker's engine core.
//!
//! An *element* is a set of named [`Tensor`]s; a pipeline is a chain of iterators
//! ([`exec::ElementIter`]) that pull elements from their inputs. Asynchronous stages
//! (parallel map, interleave, prefetch) run on worker threads and hand results through
//! bounded channels, so memory stays bounded and a dropped iterator stops its threads.
//!
//! This crate knows nothing of Python or of file formats: sources and native ops plug in
//! through the [`op::Op`] and [`exec::IterFactory`] traits.

pub mod dtype;
pub mod element;
pub mod error;
pub mod exec;
pub mod knob;
pub mod op;
pub mod options;
pub mod origin;
pub mod ram;
pub mod row_slots;
pub mod seed;
pub mod stats;
pub mod storage;
pub mod stream_copy;
pub mod tensor;
pub mod trace;

pub use dtype::DType;
pub use element::{Element, FieldSpec, Names, Schema};
pub use error::{Error, Result};
pub use op::Op;
pub use options::{ErrorPolicy, PipelineOptions};
pub use origin::Origin;
pub use seed::{Seed, Seeds};
pub use stats::{StageStats, StatsRegistry};
pub use tensor::Tensor;
