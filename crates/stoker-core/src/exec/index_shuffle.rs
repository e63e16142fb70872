//! A seeded pseudo-random permutation of `0..n`, computed position by position in O(1)
//! memory (what `global_shuffle` hands out): a balanced Feistel network over the smallest
//! even number of bits that holds `n`, with cycle walking to stay below `n`, as Grain's
//! `index_shuffle` does. Since the network's domain is less than four times `n`, a position
//! takes fewer than four walks on average.

const ROUNDS: usize = 6;

#[derive(Clone, Debug)]
pub struct IndexShuffle {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; ROUNDS],
}

/// SplitMix64's finaliser: a well-mixed 64-bit function of `z`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl IndexShuffle {
    /// The permutation of `0..n` for `seed`.
    pub fn new(n: u64, seed: u64) -> IndexShuffle {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let bits = bits + bits % 2;
        let half_bits = bits / 2;
        let mut keys = [0u64; ROUNDS];
        for (r, k) in keys.iter_mut().enumerate() {
            *k = mix(seed ^ (r as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
        IndexShuffle {
            n,
            half_bits,
            mask: (1u64 << half_bits) - 1,
            keys,
        }
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn round_trip(&self, x: u64) -> u64 {
        let (mut l, mut r) = (x >> self.half_bits, x & self.mask);
        for k in self.keys {
            let f = mix(r ^ k) & self.mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }

    /// The element at position `i` (< n) of the permutation.
    pub fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = i;
        loop {
            x = self.round_trip(x);
            if x < self.n {
                return x;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_once_and_seeds_differ() {
        for n in [1u64, 2, 3, 7, 64, 100, 1000, 4097] {
            let p = IndexShuffle::new(n, 11);
            let mut seen: Vec<u64> = (0..n).map(|i| p.at(i)).collect();
            let order = seen.clone();
            seen.sort_unstable();
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n={n}");
            if n >= 64 {
                let q = IndexShuffle::new(n, 12);
                let other: Vec<u64> = (0..n).map(|i| q.at(i)).collect();
                assert_ne!(order, other);
                // Not close to the identity: few fixed points.
                let fixed = order
                    .iter()
                    .enumerate()
                    .filter(|(i, v)| *i as u64 == **v)
                    .count();
                assert!(fixed < (n as usize) / 8, "n={n}: {fixed} fixed points");
            }
        }
    }
}
