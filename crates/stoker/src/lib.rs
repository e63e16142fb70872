//! stoker: an input-pipeline engine for ML training.
//!
//! Build a [`Plan`] (the dataset graph; every step is checked against its input's schema),
//! then run it as a [`Pipeline`]:
//!
//! ```no_run
//! use stoker::{Plan, Pipeline};
//! use stoker_formats::Compression;
//!
//! let plan = Plan::tfrecord(vec!["data/*.tfrecord".into()], Compression::None, true, 4)?
//!     .shuffle(10_000, Some(0), true)?
//!     .batch(512, true)?
//!     .prefetch(stoker::AUTOTUNE)?;
//! let pipeline = Pipeline::new(&plan)?;
//! let mut it = pipeline.iter()?;
//! while let Some(batch) = it.next()? {
//!     let _records = batch.get("record");
//! }
//! # Ok::<(), stoker_core::Error>(())
//! ```

pub mod bench_run;
pub mod build;
pub mod convert;
pub mod datasets;
pub mod disk_cache;
pub mod element_codec;
pub mod passes;
pub mod pipeline;
pub mod plan;
pub mod planner;
pub mod properties;
pub mod random_access;
pub mod registry;
pub mod report;
pub mod sources;
pub mod spec;
pub mod tuner;
pub mod verdict;

pub use pipeline::Pipeline;
pub use plan::{Plan, Step, AUTOTUNE};
pub use stoker_core as core;
pub use stoker_formats as formats;
pub use stoker_ops as ops;
