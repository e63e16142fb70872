//! The planner's passes by name: what `with_options(optimizations={name: False})` can turn
//! off, checked when the options are given (the passes themselves are in the planner).

use stoker_core::{Error, PipelineOptions, Result};

/// The planner's passes: name and what it does.
pub const PASSES: &[(&str, &str)] = &[
    (
        SHARD_DOWN,
        "a shard moves towards the source, so that each shard makes only its own elements",
    ),
    (
        FUSE_DECODE_CROP,
        "decode_image and a crop after it become one op that decodes only the crop",
    ),
    (
        FUSE_PIXELS,
        "a run of flips and per-channel affine ops becomes one pixel_chain pass",
    ),
    (
        FUSE_MAPS,
        "consecutive native maps with the same parallelism become one stage",
    ),
    (
        MAP_AFTER_BATCH,
        "element-wise ops before a batch (or a growing tail of them) run after it, per batch",
    ),
    (
        MAP_AND_BATCH,
        "a parallel map right before a batch writes each element into its batch row",
    ),
];

pub const SHARD_DOWN: &str = "shard_down";
pub const FUSE_DECODE_CROP: &str = "fuse_decode_crop";
pub const FUSE_PIXELS: &str = "fuse_pixels";
pub const FUSE_MAPS: &str = "fuse_maps";
pub const MAP_AFTER_BATCH: &str = "map_after_batch";
pub const MAP_AND_BATCH: &str = "map_and_batch";

/// Whether `options` leave pass `name` on.
pub fn enabled(options: &PipelineOptions, name: &str) -> bool {
    options.optimizations.get(name).copied().unwrap_or(true)
}

/// Refuses options naming a pass that does not exist.
pub fn check_passes(options: &PipelineOptions) -> Result<()> {
    for name in options.optimizations.keys() {
        if !PASSES.iter().any(|(p, _)| p == name) {
            let known: Vec<&str> = PASSES.iter().map(|(p, _)| *p).collect();
            return Err(Error::invalid(
                "optimizations",
                format!(
                    "no planner pass is named '{name}'; the passes are: {}",
                    known.join(", ")
                ),
            ));
        }
    }
    Ok(())
}
