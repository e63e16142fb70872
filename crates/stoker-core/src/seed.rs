//! Seeds of the steps that draw random numbers (shuffles, random ops, mixes).
//!
//! A seed is either given by the user or drawn because none was. A drawn seed is drawn when
//! the step is made, and the step keeps it: every dataset made from that step (a `take` and a
//! `skip` of one shuffled dataset, say) draws from the same number, as in tf.data. What a
//! process must hand on is the drawn seeds' values, in the plan's order: a saved state
//! records them, so that a pipeline without seeds resumes exactly in a new process (whose
//! steps drew other numbers), and the ranks of a data-parallel job take rank 0's (see
//! [`Seeds`]).

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A fresh random number (from the OS's randomness).
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

    /// A seed drawn because none was given: a random number, unique to the step.
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

/// What the drawn seeds of one pipeline stand for in a run: each its own number, unless
/// values were taken from elsewhere (a saved state, rank 0): then the k-th drawn seed of the
/// plan (in the order its steps and ops list them) stands for the k-th value. A given seed is
/// itself.
#[derive(Clone, Debug, Default)]
pub struct Seeds {
    taken: HashMap<u64, u64>,
}

impl Seeds {
    /// The resolution of `plan_seeds` (the plan's seeds, in the plan's order), with `values`
    /// for its drawn ones where given (see [`drawn_in_order`]).
    pub fn new(plan_seeds: &[Seed], values: Option<&[u64]>) -> Seeds {
        let Some(values) = values else {
            return Seeds::default();
        };
        let taken = drawn_in_order(plan_seeds)
            .into_iter()
            .zip(values)
            .map(|(placeholder, &v)| (placeholder, v))
            .collect();
        Seeds { taken }
    }

    /// No values taken: every drawn seed is its own number.
    pub fn none() -> &'static Seeds {
        static NONE: std::sync::OnceLock<Seeds> = std::sync::OnceLock::new();
        NONE.get_or_init(Seeds::default)
    }

    /// The number `seed` stands for in this run.
    pub fn resolve(&self, seed: Seed) -> u64 {
        if seed.drawn {
            if let Some(&v) = self.taken.get(&seed.value) {
                return v;
            }
        }
        seed.value
    }

    /// The numbers the plan's drawn seeds stand for, in the plan's order: what a saved state
    /// records and rank 0 hands the others.
    pub fn values(&self, plan_seeds: &[Seed]) -> Vec<u64> {
        drawn_in_order(plan_seeds)
            .into_iter()
            .map(|placeholder| self.resolve(Seed::from_drawn(placeholder)))
            .collect()
    }
}

impl Seed {
    fn from_drawn(value: u64) -> Seed {
        Seed { value, drawn: true }
    }
}

/// The distinct drawn seeds of `plan_seeds`, in order: a step that appears twice in a plan
/// (one dataset zipped with itself) has one seed, in its first place.
pub fn drawn_in_order(plan_seeds: &[Seed]) -> Vec<u64> {
    let mut seen = std::collections::HashSet::new();
    plan_seeds
        .iter()
        .filter(|s| s.drawn && seen.insert(s.value))
        .map(|s| s.value)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drawn_seeds_are_their_own_until_values_are_taken_by_place() {
        let (a, b, given) = (Seed::drawn(), Seed::drawn(), Seed::given(7));
        let mine = [a, given, b, a];
        let own = Seeds::new(&mine, None);
        assert_eq!(own.resolve(a), a.value);
        assert_eq!(own.resolve(given), 7);
        assert_eq!(own.values(&mine), vec![a.value, b.value]);
        // Another process's plan, other draws in the same places: they take these values.
        let (c, d) = (Seed::drawn(), Seed::drawn());
        let theirs = [c, given, d, c];
        let taken = Seeds::new(&theirs, Some(&own.values(&mine)));
        assert_eq!(taken.resolve(c), a.value);
        assert_eq!(taken.resolve(d), b.value);
        assert_eq!(taken.resolve(given), 7);
        assert_eq!(taken.values(&theirs), own.values(&mine));
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
