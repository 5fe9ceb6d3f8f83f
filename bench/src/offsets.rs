//! Offsets for sequential and random jobs inside a region, from a seeded generator.
//!
//! The generator is xoroshiro128++ seeded through SplitMix64 (Blackman & Vigna, "Scrambled linear
//! pseudorandom number generators", ACM TOMS 2021; both algorithms are public domain): two words
//! of state, which a random job's loop loads and stores once per request, and eight operations per
//! draw, with a period of 2^128 − 1, far beyond any run's draws; and a
//! bounded draw uses Lemire's multiply-and-reject method (Lemire, "Fast random integer generation
//! in an interval", ACM TOMACS 2019), so random offsets are exactly uniform over the region's
//! blocks and the same seed gives the same offsets on every machine.

/// SplitMix64: one step of the sequence that seeds xoroshiro128++.
fn split_mix_64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes a base seed with a stream number (the job index) into a seed of its own.
pub fn derived_seed(base_seed: u64, stream: u64) -> u64 {
    let mut state = base_seed ^ stream.wrapping_mul(0xd6e8_feb8_6659_fd93);
    split_mix_64(&mut state)
}

/// xoroshiro128++: 128 bits of state, 64-bit outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RandomGenerator {
    state: [u64; 2],
}

impl RandomGenerator {
    /// Seeded with two SplitMix64 outputs, never both zero (SplitMix64's output step is a
    /// bijection of its state, and two steps are two different states).
    pub fn new(seed: u64) -> RandomGenerator {
        let mut seeder = seed;
        let state = [split_mix_64(&mut seeder), split_mix_64(&mut seeder)];
        RandomGenerator { state }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1] = self.state;
        let result = s0.wrapping_add(s1).rotate_left(17).wrapping_add(s0);
        let s1 = s1 ^ s0;
        self.state = [s0.rotate_left(49) ^ s1 ^ (s1 << 21), s1.rotate_left(28)];
        result
    }

    /// A uniform value in `0..bound` (`bound` > 0).
    #[inline]
    pub fn below(&mut self, bound: u64) -> u64 {
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        if (product as u64) < bound {
            // Reject the few low products that would make some results more likely.
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }
}

/// Sequential (wrapping at the end of the region) or uniformly random.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessPattern {
    Sequential,
    Random,
}

/// Produces byte offsets `region_offset + k × block_bytes` for `k` in `0..block_slots`.
#[derive(Clone, Debug)]
pub struct OffsetGenerator {
    pattern: AccessPattern,
    region_offset_bytes: u64,
    block_bytes: u64,
    block_slots: u64,
    next_slot: u64,
    random: RandomGenerator,
}

impl OffsetGenerator {
    /// `block_slots` must be at least 1.
    pub fn new(
        pattern: AccessPattern,
        region_offset_bytes: u64,
        block_bytes: u64,
        block_slots: u64,
        seed: u64,
    ) -> OffsetGenerator {
        OffsetGenerator {
            pattern,
            region_offset_bytes,
            block_bytes,
            block_slots: block_slots.max(1),
            next_slot: 0,
            random: RandomGenerator::new(seed),
        }
    }

    #[inline]
    pub fn next_offset_bytes(&mut self) -> u64 {
        let slot = match self.pattern {
            AccessPattern::Sequential => {
                let slot = self.next_slot;
                self.next_slot = (slot + 1) % self.block_slots;
                slot
            }
            AccessPattern::Random => self.random.below(self.block_slots),
        };
        self.region_offset_bytes + slot * self.block_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    #[test]
    fn the_generator_gives_xoroshiro128_plus_plus_published_outputs() {
        // Seeded with SplitMix64 from 0, as Bitcoin Core's src/test/xoroshiro128plusplus_tests.cpp
        // seeds its generator, whose reference values these are.
        let mut random = RandomGenerator::new(0);
        let outputs = [random.next_u64(), random.next_u64(), random.next_u64(), random.next_u64()];
        assert_eq!(
            outputs,
            [0x6f68_e1e7_e264_6ee1, 0xbf97_1b7f_4540_94ad, 0x48f2_de55_6f30_de38, 0x6ea7_c59f_89bb_fc75]
        );
    }

    #[test]
    fn same_seed_same_sequence_different_seed_different_sequence() {
        let mut a = RandomGenerator::new(1);
        let mut b = RandomGenerator::new(1);
        let mut c = RandomGenerator::new(2);
        let first: [u64; 4] = core::array::from_fn(|_| a.next_u64());
        let again: [u64; 4] = core::array::from_fn(|_| b.next_u64());
        let other: [u64; 4] = core::array::from_fn(|_| c.next_u64());
        assert_eq!(first, again);
        assert_ne!(first, other);
        assert_ne!(derived_seed(1, 0), derived_seed(1, 1));
    }

    #[test]
    fn split_mix_matches_its_published_first_output() {
        // SplitMix64 seeded with 0 starts 0xe220a8397b1dcdaf (Vigna's reference splitmix64.c).
        let mut state = 0;
        assert_eq!(split_mix_64(&mut state), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn bounded_draws_are_uniform() {
        let mut random = RandomGenerator::new(0x5eed);
        let mut counts = vec![0u32; 10];
        let draws = 100_000;
        for _ in 0..draws {
            counts[random.below(10) as usize] += 1;
        }
        // Each bucket expects 10 000; 5 standard deviations is ±474.
        for &count in &counts {
            assert!(count.abs_diff(10_000) < 474, "{counts:?}");
        }
        assert_eq!(random.below(1), 0);
        let huge = random.below(u64::MAX);
        assert!(huge < u64::MAX);
    }

    #[test]
    fn sequential_wraps_and_random_stays_aligned_inside_the_region() {
        let mut sequential = OffsetGenerator::new(AccessPattern::Sequential, 4096, 1024, 3, 0);
        let offsets: [u64; 5] = core::array::from_fn(|_| sequential.next_offset_bytes());
        assert_eq!(offsets, [4096, 5120, 6144, 4096, 5120]);

        let mut random = OffsetGenerator::new(AccessPattern::Random, 1 << 30, 4096, 1000, 9);
        let mut seen_first = false;
        let mut seen_last = false;
        for _ in 0..100_000 {
            let offset = random.next_offset_bytes();
            assert!((1 << 30..(1 << 30) + 1000 * 4096).contains(&offset));
            assert_eq!(offset % 4096, 0);
            seen_first |= offset == 1 << 30;
            seen_last |= offset == (1 << 30) + 999 * 4096;
        }
        assert!(seen_first && seen_last);
    }
}
