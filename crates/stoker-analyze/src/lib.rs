//! `stoker analyze`: reads the traces PyTorch (Kineto), TensorFlow and JAX write, finds where
//! the accelerator sat idle and why, and what to change.

pub mod analysis;
mod build;
pub mod compare;
pub mod dialect;
pub mod error;
pub mod intervals;
pub mod memory;
pub mod model;
pub mod report;

pub use dialect::chrome_json::{read, split};
pub use dialect::load;
pub use dialect::xspace::decode as xspace;
pub use error::{AnalyzeError, Result};

/// Reads and analyses the trace at `path`.
pub fn analyze_path(path: &std::path::Path) -> Result<analysis::Analysis> {
    Ok(analysis::analyze(&load(path)?))
}
