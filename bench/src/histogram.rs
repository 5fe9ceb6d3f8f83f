//! The log-linear latency histogram from which percentiles are read, fio's scheme (docs/nvme-and-fio.md §3.2-3.3).
//!
//! Values are nanoseconds. Values below 128 ns have a bucket each. From 128 ns up, every power of
//! two `[2^m, 2^(m+1))` is split into 64 equal buckets of width `2^(m-6)`; there are 29 groups
//! of 64, so 1856 buckets, and values from 2^34 ns (≈ 17.2 s) up share the last bucket.
//!
//! A percentile is the representative value of the first bucket whose cumulative count reaches
//! `p/100 × N` (nearest rank on the histogram, no interpolation). The representative value is the
//! bucket's midpoint, so for any value below 2^34 ns the reported percentile differs from the
//! sample it stands for by at most half a bucket: `|reported − sample| ≤ sample / 128` (0.78 %);
//! below 128 ns it is exact.

use alloc::boxed::Box;
use alloc::vec;

/// log2 of the number of buckets per power of two (fio's `FIO_IO_U_PLAT_BITS`).
pub const BUCKET_BITS: u32 = 6;
/// Buckets per power of two (fio's `FIO_IO_U_PLAT_VAL`).
pub const BUCKETS_PER_GROUP: usize = 1 << BUCKET_BITS;
/// Groups of buckets (fio's `FIO_IO_U_PLAT_GROUP_NR`).
pub const GROUPS: usize = 29;
/// All buckets (fio's `FIO_IO_U_PLAT_NR`): 1856.
pub const BUCKETS: usize = GROUPS * BUCKETS_PER_GROUP;
/// Values below this have a bucket of their own.
const EXACT_BELOW_NS: u64 = 2 * BUCKETS_PER_GROUP as u64;
/// From this value up, every value lands in the last bucket (2^34 ns).
pub const ACCURATE_BELOW_NS: u64 = 1 << (GROUPS as u32 - 1 + BUCKET_BITS);

/// A percentile in millionths of a percent: 99.99 % is `99_990_000`.
pub type PercentMillionths = u32;
/// 100 % in [`PercentMillionths`].
pub const HUNDRED_PERCENT: PercentMillionths = 100_000_000;

/// fio's default `percentile_list` (docs/nvme-and-fio.md §3.3), in millionths of a percent.
pub const FIO_DEFAULT_PERCENTILES: [PercentMillionths; 17] = [
    1_000_000, 5_000_000, 10_000_000, 20_000_000, 30_000_000, 40_000_000, 50_000_000, 60_000_000, 70_000_000,
    80_000_000, 90_000_000, 95_000_000, 99_000_000, 99_500_000, 99_900_000, 99_950_000, 99_990_000,
];

/// Index of p50, p99 and p99.9 in [`FIO_DEFAULT_PERCENTILES`].
pub const P50_INDEX: usize = 6;
pub const P99_INDEX: usize = 12;
pub const P99_9_INDEX: usize = 14;

/// The bucket a value in ns falls into, without a branch: with `d` = the bits a value drops (its
/// most significant bit less [`BUCKET_BITS`], 0 below 128 ns), the index is `d × 64 + (value >> d)`.
/// Below 128 ns that is the value itself; from 128 ns up `value >> d` lies in `64..128`, which
/// is the group start `(d + 1) × 64` plus the position in the group. Every value from 2^34 ns
/// up gets an index past the last bucket and is clamped to it, which also lets the compiler see
/// that the index is in bounds.
#[inline]
pub fn bucket_index(value_ns: u64) -> usize {
    let most_significant_bit = 63 - (value_ns | 1).leading_zeros();
    let discarded_bits = most_significant_bit.max(BUCKET_BITS) - BUCKET_BITS;
    let index = ((discarded_bits as usize) << BUCKET_BITS) + (value_ns >> discarded_bits) as usize;
    index.min(BUCKETS - 1)
}

/// The smallest value in a bucket (the last bucket also holds every value from 2^34 ns up).
pub const fn bucket_start_ns(index: usize) -> u64 {
    if index < EXACT_BELOW_NS as usize {
        return index as u64;
    }
    let discarded_bits = (index / BUCKETS_PER_GROUP - 1) as u32;
    ((BUCKETS_PER_GROUP + index % BUCKETS_PER_GROUP) as u64) << discarded_bits
}

/// The value a bucket reports: its midpoint (exact below 128 ns).
pub fn bucket_value_ns(index: usize) -> u64 {
    if index < EXACT_BELOW_NS as usize {
        return index as u64;
    }
    let discarded_bits = (index / BUCKETS_PER_GROUP - 1) as u32;
    let group_base = 1u64 << (discarded_bits + BUCKET_BITS);
    let position_in_group = (index % BUCKETS_PER_GROUP) as u64;
    // Bucket width is 2^discarded_bits ≥ 2, so the midpoint is a whole number.
    group_base + (position_in_group << discarded_bits) + (1 << (discarded_bits - 1))
}

/// Bucket counts for one statistic of one run. Allocated once (≈ 14.5 KiB) and reset per run.
/// Recording a value only counts it; the exact extremes that bound the percentiles come from the
/// statistic's [`crate::stats::LatencyAccumulator`], which keeps them anyway.
pub struct LatencyHistogram {
    /// A fixed-size array, so that indexing it with a [`bucket_index`] needs no bounds check.
    counts: Box<[u64; BUCKETS]>,
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        let counts: Box<[u64]> = vec![0u64; BUCKETS].into_boxed_slice();
        LatencyHistogram { counts: counts.try_into().unwrap_or_else(|_| unreachable!("BUCKETS counts")) }
    }

    pub fn reset(&mut self) {
        self.counts.fill(0);
    }

    /// Counts `value_ns`; returns its bucket's index.
    #[inline]
    pub fn record(&mut self, value_ns: u64) -> usize {
        let index = bucket_index(value_ns);
        self.counts[index] += 1;
        index
    }

    /// Values recorded (the sum of the counts).
    pub fn samples(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The count in each bucket (index with [`bucket_value_ns`] for the value).
    pub fn counts(&self) -> &[u64] {
        self.counts.as_slice()
    }

    /// Fills `values_ns[i]` with percentile `percentiles[i]`; `percentiles` must be ascending.
    /// Each value is its bucket's midpoint (fio's rule), clamped to `(smallest, largest)`, the
    /// exact extremes of what was recorded (a bucket's midpoint can lie beyond the samples in
    /// it): clamping only moves a value toward the true percentile, so the error bound holds.
    /// With no samples every value is 0.
    pub fn percentiles_ns(
        &self,
        percentiles: &[PercentMillionths],
        (smallest_ns, largest_ns): (u64, u64),
        values_ns: &mut [u64],
    ) {
        values_ns.fill(0);
        let samples = self.samples();
        if samples == 0 {
            return;
        }
        let mut wanted = percentiles.iter().zip(values_ns.iter_mut()).peekable();
        let mut cumulative: u128 = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            cumulative += u128::from(count);
            // cumulative ≥ p/100 × N  ⇔  cumulative × 100·10^6 ≥ p_millionths × N.
            while let Some((&percent, _)) = wanted.peek() {
                let threshold = u128::from(percent) * u128::from(samples);
                if cumulative * u128::from(HUNDRED_PERCENT) < threshold {
                    break;
                }
                if let Some((_, value)) = wanted.next() {
                    *value = bucket_value_ns(index).clamp(smallest_ns, largest_ns.max(smallest_ns));
                }
            }
            if wanted.peek().is_none() {
                return;
            }
        }
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_never_leave_the_range_of_the_samples() {
        let mut histogram = LatencyHistogram::new();
        // 273 734 ns sits low in a bucket whose midpoint is higher; 250 000 likewise.
        for value in [250_000u64, 260_000, 273_734] {
            histogram.record(value);
        }
        let mut values = [0u64; 3];
        let extremes = (250_000, 273_734);
        histogram.percentiles_ns(&[1_000_000, 50_000_000, HUNDRED_PERCENT], extremes, &mut values);
        assert!(values.iter().all(|v| (250_000..=273_734).contains(v)), "{values:?}");
        histogram.reset();
        histogram.record(1_000_000);
        histogram.percentiles_ns(&[HUNDRED_PERCENT], (1_000_000, 1_000_000), &mut values[..1]);
        assert_eq!(values[0], 1_000_000);
    }
    use proptest::prelude::*;
    use std::vec::Vec;

    #[test]
    fn layout_matches_fio() {
        assert_eq!(BUCKETS, 1856);
        assert_eq!(ACCURATE_BELOW_NS, 17_179_869_184);
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(127), 127);
        assert_eq!(bucket_index(128), 128);
        assert_eq!(bucket_index(129), 128);
        assert_eq!(bucket_index(130), 129);
        assert_eq!(bucket_index(255), 191);
        assert_eq!(bucket_index(256), 192);
        assert_eq!(bucket_index(ACCURATE_BELOW_NS - 1), BUCKETS - 1);
        assert_eq!(bucket_index(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_value_ns(128), 129);
        assert_eq!(bucket_value_ns(191), 255);
        // 10 µs sits in a group of 128-ns buckets (docs/nvme-and-fio.md §3.2 example).
        let at_10_us = bucket_index(10_000);
        assert_eq!(bucket_value_ns(at_10_us + 1) - bucket_value_ns(at_10_us), 128);
        // Percentile values seen in fio's own output are bucket midpoints.
        for fio_value in [110_080u64, 1_433_600, 71_168, 62_208] {
            assert_eq!(bucket_value_ns(bucket_index(fio_value)), fio_value);
        }
    }

    /// The definition of the layout, one case at a time: below 128 ns a bucket per value, then
    /// 64 buckets per power of two, everything from 2^34 ns in the last one.
    fn reference_bucket_index(value_ns: u64) -> usize {
        if value_ns < EXACT_BELOW_NS {
            return value_ns as usize;
        }
        let most_significant_bit = 63 - value_ns.leading_zeros();
        let discarded_bits = most_significant_bit - BUCKET_BITS;
        let group_start = (discarded_bits as usize + 1) * BUCKETS_PER_GROUP;
        let position_in_group = ((value_ns >> discarded_bits) as usize) & (BUCKETS_PER_GROUP - 1);
        (group_start + position_in_group).min(BUCKETS - 1)
    }

    #[test]
    fn bucket_index_agrees_with_the_layout_at_every_boundary() {
        let mut values: Vec<u64> = (0..=4096).collect();
        for bit in 7..64 {
            let power = 1u64 << bit;
            for delta in 0..=130u64 {
                values.extend([power.wrapping_sub(delta), power.saturating_add(delta)]);
            }
            // Every bucket edge in the group of this power of two.
            let width = power >> BUCKET_BITS;
            values.extend((0..64).flat_map(|k| [power + k * width, (power + k * width).saturating_sub(1)]));
        }
        values.extend([u64::MAX, u64::MAX - 1, ACCURATE_BELOW_NS, ACCURATE_BELOW_NS - 1]);
        let mut random = crate::offsets::RandomGenerator::new(0x615);
        values.extend((0..100_000).map(|_| random.next_u64() >> random.below(64)));
        for value in values {
            assert_eq!(bucket_index(value), reference_bucket_index(value), "{value}");
        }
    }

    #[test]
    fn every_bucket_midpoint_maps_back_to_its_bucket() {
        for index in 0..BUCKETS {
            assert_eq!(bucket_index(bucket_value_ns(index)), index);
            assert_eq!(bucket_index(bucket_start_ns(index)), index);
            if index > 0 {
                assert_eq!(bucket_index(bucket_start_ns(index) - 1), index - 1);
            }
        }
    }

    #[test]
    fn percentiles_of_an_empty_histogram_are_zero() {
        let histogram = LatencyHistogram::new();
        let mut values = [7u64; 17];
        histogram.percentiles_ns(&FIO_DEFAULT_PERCENTILES, (0, 0), &mut values);
        assert_eq!(values, [0; 17]);
    }

    #[test]
    fn percentile_rank_is_inclusive_and_reset_clears() {
        let mut histogram = LatencyHistogram::new();
        for value in 1..=100u64 {
            histogram.record(value);
        }
        let mut values = [0u64; 3];
        assert_eq!(histogram.samples(), 100);
        histogram.percentiles_ns(&[1_000_000, 50_000_000, HUNDRED_PERCENT], (1, 100), &mut values);
        assert_eq!(values, [1, 50, 100]);
        histogram.reset();
        assert_eq!(histogram.samples(), 0);
        assert!(histogram.counts().iter().all(|&c| c == 0));
    }

    /// Nearest-rank percentile of sorted samples: the k-th smallest with k = ⌈p·N/100⌉.
    fn exact_percentile(sorted: &[u64], percent: PercentMillionths) -> u64 {
        let n = sorted.len() as u128;
        let rank = (u128::from(percent) * n).div_ceil(u128::from(HUNDRED_PERCENT));
        sorted[(rank.max(1) - 1) as usize]
    }

    /// Samples from a mixture of clusters, each spread around `2^exponent` by up to
    /// `2^spread` either way, plus some values below 200 ns; drawn from a seeded generator so
    /// that proptest varies (and shrinks) the shape rather than thousands of values.
    fn latency_samples(clusters: &[(u32, u32)], count: usize, seed: u64) -> Vec<u64> {
        let mut random = crate::offsets::RandomGenerator::new(seed);
        (0..count)
            .map(|_| {
                if random.below(10) == 0 {
                    return random.below(200);
                }
                let (exponent, spread) = clusters[random.below(clusters.len() as u64) as usize];
                let low = 1u64 << exponent.saturating_sub(spread).max(1);
                let high = (1u64 << (exponent + spread).min(33)).max(low + 1);
                low + random.below(high - low)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn percentiles_are_within_the_stated_bound(
            clusters in prop::collection::vec((7u32..34, 0u32..4), 1..4),
            count in 1usize..5000,
            seed in any::<u64>(),
        ) {
            let samples = latency_samples(&clusters, count, seed);
            let mut histogram = LatencyHistogram::new();
            for &sample in &samples {
                histogram.record(sample);
            }
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            let mut reported = [0u64; 17];
            let extremes = (sorted[0], sorted[sorted.len() - 1]);
            histogram.percentiles_ns(&FIO_DEFAULT_PERCENTILES, extremes, &mut reported);
            for (&percent, &value) in FIO_DEFAULT_PERCENTILES.iter().zip(&reported) {
                let exact = exact_percentile(&sorted, percent);
                prop_assert!(exact < ACCURATE_BELOW_NS);
                let error = value.abs_diff(exact);
                // Half a bucket: at most exact/128; exact below 128 ns.
                prop_assert!(error * 128 <= exact,
                    "p{percent}: reported {value}, exact {exact}");
                if exact < 128 {
                    prop_assert_eq!(value, exact);
                }
            }
        }
    }
}
