//! Helpers shared by the analyzer's integration tests.

/// A small deterministic generator (xorshift64) for damaging files in place: the same damage
/// on every run, no dependency.
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
