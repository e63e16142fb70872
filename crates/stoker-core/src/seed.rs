//! Seeds of the steps that draw random numbers (shuffles, random ops, mixes).
//!
//! A seed is either given by the user or drawn because none was. A drawn seed is only a
//! placeholder in the plan: each run of a pipeline resolves it through its [`Seeds`], which
//! give the k-th drawn seed of the plan (in the plan's order) a value made from one number,
//! the run's *root*. The root is what a saved state records and what the ranks of a
//! data-parallel job share, so that a pipeline without seeds resumes exactly in a new
//! process and hands every rank the same order.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exec::shuffle::epoch_seed;

/// A fresh random number (from the OS's randomness): a drawn seed, or a root.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    // std's hasher keys are drawn from the OS's randomness, fresh for every `RandomState`.
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// A step's seed. In a spec, a given seed is its number and a drawn one is left out (or
/// `null`), so that loading the spec draws again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Seed {
    value: u64,
    drawn: bool,
}

impl Seed {
    /// The seed a user gave.
    pub fn given(value: u64) -> Seed {
        Seed {
            value,
            drawn: false,
        }
    }

    /// A seed drawn because none was given: a random placeholder, unique to the step.
    pub fn drawn() -> Seed {
        Seed {
            value: random_u64(),
            drawn: true,
        }
    }

    /// `Some(seed)` given, `None` drawn.
    pub fn from_option(seed: Option<u64>) -> Seed {
        seed.map_or_else(Seed::drawn, Seed::given)
    }

    /// The user's number, `None` for a drawn seed.
    pub fn given_value(&self) -> Option<u64> {
        (!self.drawn).then_some(self.value)
    }

    pub fn is_drawn(&self) -> bool {
        self.drawn
    }
}

/// A fresh drawn seed: what a spec without a seed means.
impl Default for Seed {
    fn default() -> Seed {
        Seed::drawn()
    }
}

impl Serialize for Seed {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.given_value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Seed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seed, D::Error> {
        Ok(Seed::from_option(Option::<u64>::deserialize(d)?))
    }
}

/// What the drawn seeds of one pipeline stand for in a run: the k-th drawn seed of the plan
/// (in the order its steps and ops list them) is `mix(root, k)`. Two processes that build the
/// same pipeline and use the same root resolve every drawn seed alike; a given seed is itself.
#[derive(Clone, Debug, Default)]
pub struct Seeds {
    root: u64,
    by_placeholder: HashMap<u64, u64>,
}

impl Seeds {
    /// The resolution of `drawn` (the plan's seeds, in the plan's order; given ones are
    /// passed over) under `root`.
    pub fn new(root: u64, drawn: impl IntoIterator<Item = Seed>) -> Seeds {
        let mut by_placeholder = HashMap::new();
        for seed in drawn.into_iter().filter(Seed::is_drawn) {
            let k = by_placeholder.len() as u64;
            // A step that appears twice in a plan (one dataset zipped with itself) keeps
            // the value of its first place, as it keeps one seed.
            by_placeholder
                .entry(seed.value)
                .or_insert_with(|| epoch_seed(root, k));
        }
        Seeds {
            root,
            by_placeholder,
        }
    }

    /// No drawn seeds listed, root 0: for steps that resolve none (a filter's predicate).
    pub fn none() -> &'static Seeds {
        static NONE: std::sync::OnceLock<Seeds> = std::sync::OnceLock::new();
        NONE.get_or_init(Seeds::default)
    }

    pub fn root(&self) -> u64 {
        self.root
    }

    /// The number `seed` stands for in this run. A drawn seed the plan does not list (a
    /// step made while the pipeline runs, inside an `interleave`'s function) gets one mixed
    /// from the root and its placeholder: fixed for the run, new in each process.
    pub fn resolve(&self, seed: Seed) -> u64 {
        if !seed.drawn {
            return seed.value;
        }
        match self.by_placeholder.get(&seed.value) {
            Some(&v) => v,
            None => epoch_seed(self.root ^ 0xA076_1D64_78BD_642F, seed.value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_seeds_resolve_by_their_place_under_the_root() {
        let (a, b, given) = (Seed::drawn(), Seed::drawn(), Seed::given(7));
        let one = Seeds::new(5, [a, given, b]);
        // Other placeholders in the same places: the same values.
        let (c, d) = (Seed::drawn(), Seed::drawn());
        let two = Seeds::new(5, [c, given, d]);
        assert_eq!(one.resolve(a), two.resolve(c));
        assert_eq!(one.resolve(b), two.resolve(d));
        assert_ne!(one.resolve(a), one.resolve(b));
        assert_eq!(one.resolve(given), 7);
        // Another root, other values.
        assert_ne!(Seeds::new(6, [a]).resolve(a), one.resolve(a));
    }

    #[test]
    fn a_spec_keeps_given_seeds_and_draws_again_for_the_others() {
        let given: Seed = serde_json::from_str("3").unwrap();
        assert_eq!(given.given_value(), Some(3));
        let drawn: Seed = serde_json::from_str("null").unwrap();
        assert!(drawn.is_drawn());
        assert_eq!(serde_json::to_string(&given).unwrap(), "3");
        assert_ne!(Seed::drawn(), Seed::drawn());
    }
}
