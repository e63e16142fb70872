//! `stoker analyze`: reads the traces PyTorch (Kineto), TensorFlow and JAX write, finds where
//! the accelerator sat idle and why, and what to change.

pub mod analysis;
pub mod compare;
pub mod error;
mod event;
pub mod intervals;
pub mod memory;
pub mod model;
pub mod read;
pub mod report;
pub mod split;
pub mod xspace;

pub use error::{AnalyzeError, Result};

/// Reads and analyses the trace at `path`.
pub fn analyze_path(path: &std::path::Path) -> Result<analysis::Analysis> {
    Ok(analysis::analyze(&model::load(path)?))
}
