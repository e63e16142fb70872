//! The dataset operators, one module each.
//!
//! A module holds everything about its operator: its parameters and inputs, its schema rule,
//! its spec form (a serde struct), how it starts its iterator or restores it from a saved
//! state, and the properties the planner, the verdict and `global_shuffle` read (what it draws
//! on besides its input, which threads it runs on and its parallelism knob, whether it keeps
//! batches together, whether it has random access). A new operator is a new module plus one
//! line in [`crate::registry`].

/// `inputs` and `inputs_mut` of a step over one input, its field `input`.
macro_rules! one_input {
    () => {
        fn inputs(&self) -> Vec<&Plan> {
            vec![&self.input]
        }

        fn inputs_mut(&mut self) -> Vec<&mut Plan> {
            vec![&mut self.input]
        }
    };
}

/// `inputs` and `inputs_mut` of a source.
macro_rules! no_inputs {
    () => {
        fn inputs(&self) -> Vec<&Plan> {
            Vec::new()
        }

        fn inputs_mut(&mut self) -> Vec<&mut Plan> {
            Vec::new()
        }
    };
}

pub mod assert_cardinality;
pub mod batch;
pub mod cache;
pub mod choose_from_datasets;
pub mod common;
pub mod concatenate;
pub mod elements;
pub mod enumerate;
pub mod filter;
pub mod fixed_length_record;
pub mod from_generator;
pub mod from_npz;
pub mod from_tensor_slices;
pub mod global_shuffle;
pub mod group_by_window;
pub mod interleave;
pub mod list_files;
pub mod map;
pub mod options;
pub mod padded_batch;
pub mod prefetch;
pub mod range;
pub mod repeat;
pub mod sample_from_datasets;
pub mod scan;
pub mod shard;
pub mod shuffle;
pub mod skip;
pub mod take;
pub mod take_while;
pub mod text_line;
pub mod tfrecord;
pub mod unbatch;
pub mod window;
pub mod zip;
