//! Exact latency count, min, max, mean and sample standard deviation in integers (docs/nvme-and-fio.md §3.3: exact, n−1).
//!
//! Per sample the accumulator adds the value to a 64-bit sum and its square to a 128-bit sum,
//! each with a count of how often it wrapped (a 128-bit and a 192-bit sum: a value is below 2^64
//! and a square below 2^128, so each sum wraps at most once per sample), so nothing rounds or
//! overflows however long a run is. A wrap is counted out of line: it comes after 2^64 ns of
//! latency in all at the earliest, and the hot path then adds without loading or storing the
//! counts. The mean and
//! standard deviation are produced once, in thousandths of a nanosecond, rounded to nearest.

use crate::wide::U256;

/// Thousandths of a nanosecond per nanosecond (the fixed-point scale of means and deviations).
pub const MILLI_PER_UNIT: u128 = 1000;

/// Running sums for one latency statistic of one run, without the count: the run loop records
/// three statistics per I/O and counts the I/Os once. Per sample: two compares, one 64-bit and one
/// 128-bit addition, and a branch on each one's carry (this is on the hot path of the CPU cost
/// per I/O, docs/measurement.md §10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySums {
    /// `u64::MAX` until the first sample, so that a sample needs no test of the count.
    min_ns: u64,
    max_ns: u64,
    /// Σx = `sum_wraps` × 2^64 + `sum_low_ns`.
    sum_low_ns: u64,
    sum_wraps: u64,
    /// Σx² = `sum_squares_wraps` × 2^128 + `sum_squares_low_ns2`.
    sum_squares_low_ns2: u128,
    sum_squares_wraps: u64,
}

impl Default for LatencySums {
    fn default() -> Self {
        LatencySums {
            min_ns: u64::MAX,
            max_ns: 0,
            sum_low_ns: 0,
            sum_wraps: 0,
            sum_squares_low_ns2: 0,
            sum_squares_wraps: 0,
        }
    }
}

/// Running sums and the count for one latency statistic of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyAccumulator {
    samples: u64,
    sums: LatencySums,
}

/// The finished statistic: what fio prints as `min`, `max`, `mean`, `stddev`, `N`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    pub samples: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Mean in thousandths of a ns, rounded to nearest (0 without samples).
    pub mean_milli_ns: u128,
    /// Sample standard deviation (divisor n − 1) in thousandths of a ns, rounded to nearest
    /// (0 with fewer than two samples, as fio prints).
    pub stddev_milli_ns: u128,
}

impl LatencySummary {
    /// The mean in whole nanoseconds, rounded to nearest.
    pub fn mean_ns(&self) -> u64 {
        ((self.mean_milli_ns + MILLI_PER_UNIT / 2) / MILLI_PER_UNIT).try_into().unwrap_or(u64::MAX)
    }
}

impl LatencyAccumulator {
    pub fn new() -> LatencyAccumulator {
        LatencyAccumulator::default()
    }

    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.samples += 1;
        self.sums.record(value_ns);
    }

    pub fn samples(&self) -> u64 {
        self.samples
    }

    pub fn summary(&self) -> LatencySummary {
        self.sums.summary(self.samples)
    }
}

impl LatencySums {
    /// Adds one sample; the caller counts them.
    #[inline]
    pub fn record(&mut self, value_ns: u64) {
        self.min_ns = self.min_ns.min(value_ns);
        self.max_ns = self.max_ns.max(value_ns);
        let (sum_low, sum_wrapped) = self.sum_low_ns.overflowing_add(value_ns);
        self.sum_low_ns = sum_low;
        if sum_wrapped {
            count_wrap(&mut self.sum_wraps);
        }
        let value = u128::from(value_ns);
        let (squares_low, squares_wrapped) = self.sum_squares_low_ns2.overflowing_add(value * value);
        self.sum_squares_low_ns2 = squares_low;
        if squares_wrapped {
            count_wrap(&mut self.sum_squares_wraps);
        }
    }

    /// Σx (at most 2^64 − 1 samples below 2^64 each: below 2^128).
    fn sum_ns(&self) -> u128 {
        (u128::from(self.sum_wraps) << 64) + u128::from(self.sum_low_ns)
    }

    fn sum_squares_ns2(&self) -> U256 {
        U256 { high: u128::from(self.sum_squares_wraps), low: self.sum_squares_low_ns2 }
    }

    /// The statistic of the `samples` values recorded.
    pub fn summary(&self, samples: u64) -> LatencySummary {
        LatencySummary {
            samples,
            min_ns: if samples == 0 { 0 } else { self.min_ns },
            max_ns: self.max_ns,
            mean_milli_ns: self.mean_milli_ns(samples),
            stddev_milli_ns: self.stddev_milli_ns(samples),
        }
    }

    fn mean_milli_ns(&self, samples: u64) -> u128 {
        if samples == 0 {
            return 0;
        }
        // sum × 1000 can exceed 128 bits only in theory; U256 keeps it exact.
        let n = u128::from(samples);
        U256::product(self.sum_ns(), MILLI_PER_UNIT)
            .checked_add(U256::from_u128(n / 2))
            .and_then(|scaled| scaled.div_rem_u128(n))
            .and_then(|(quotient, _)| quotient.to_u128())
            .unwrap_or(u128::MAX)
    }

    /// With sum = q·n + r (q = ⌊mean⌋), the sum of squared deviations is
    /// M2 = Σx² − sum²/n = A − r²/n where A = Σx² − q²·n − 2·q·r is an integer, so
    /// variance = M2/(n−1) = (A·n − r²) / (n·(n−1)), every term an integer.
    fn stddev_milli_ns(&self, samples: u64) -> u128 {
        if samples < 2 {
            return 0;
        }
        let n = u128::from(samples);
        let sum_ns = self.sum_ns();
        let (q, r) = (sum_ns / n, sum_ns % n);
        let exact = || -> Option<u128> {
            let q_squared_n = U256::product(q, q).checked_mul_u128(n)?;
            let two_q_r = U256::product(q, r).checked_mul_u128(2)?;
            let a = self.sum_squares_ns2().checked_sub(q_squared_n)?.checked_sub(two_q_r)?;
            let numerator = a.checked_mul_u128(n)?.checked_sub(U256::product(r, r))?;
            // Variance in millionths of ns² so that its root is in thousandths of a ns.
            let scaled = numerator.checked_mul_u128(MILLI_PER_UNIT * MILLI_PER_UNIT)?;
            let (variance_micro, _) = scaled.div_rem_u128(n * (n - 1))?;
            let root = variance_micro.integer_sqrt();
            // Round to nearest: (root + ½)² = root² + root + ¼ ≤ v  ⇔  v − root² > root.
            let excess = variance_micro.checked_sub(U256::product(root, root))?;
            Some(root + u128::from(excess > U256::from_u128(root)))
        };
        // Only a variance numerator beyond 2^256 (impossible for a physical run) fails.
        exact().unwrap_or(u128::MAX)
    }
}

/// One more wrap of a running sum: rare, so out of line.
#[cold]
#[inline(never)]
fn count_wrap(wraps: &mut u64) {
    *wraps += 1;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    fn summary_of(samples: &[u64]) -> LatencySummary {
        let mut accumulator = LatencyAccumulator::new();
        for &sample in samples {
            accumulator.record(sample);
        }
        accumulator.summary()
    }

    #[test]
    fn small_cases_are_exact() {
        assert_eq!(summary_of(&[]), LatencySummary::default());
        let one = summary_of(&[42]);
        assert_eq!((one.min_ns, one.max_ns, one.mean_milli_ns), (42, 42, 42_000));
        assert_eq!(one.stddev_milli_ns, 0);
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7, stddev 2.138089935…
        let eight = summary_of(&[2, 4, 4, 4, 5, 5, 7, 9]);
        assert_eq!(eight.mean_milli_ns, 5_000);
        assert_eq!(eight.stddev_milli_ns, 2_138);
        // 1, 2: mean 1.5, stddev 0.7071…
        let two = summary_of(&[1, 2]);
        assert_eq!((two.mean_milli_ns, two.stddev_milli_ns), (1_500, 707));
        // Mean rounds half up: (1 + 1 + 2) / 3 = 1.3333…
        assert_eq!(summary_of(&[1, 1, 2]).mean_milli_ns, 1_333);
    }

    #[test]
    fn huge_values_do_not_overflow() {
        let summary = summary_of(&[u64::MAX, u64::MAX, 0]);
        assert_eq!(summary.max_ns, u64::MAX);
        assert_eq!(summary.min_ns, 0);
        // mean = 2/3 · (2^64 − 1)
        assert_eq!(summary.mean_milli_ns, (2 * u128::from(u64::MAX) * 1000 + 1) / 3);
        assert!(summary.stddev_milli_ns > 0 && summary.stddev_milli_ns < u128::MAX);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn mean_and_stddev_match_a_float_reference(
            samples in prop::collection::vec(0u64..20_000_000_000, 2..2000)
        ) {
            let summary = summary_of(&samples);
            let n = samples.len() as f64;
            let mean = samples.iter().map(|&s| s as f64).sum::<f64>() / n;
            let variance = samples.iter().map(|&s| (s as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0);
            let stddev = variance.sqrt();
            let mean_milli = summary.mean_milli_ns as f64;
            let stddev_milli = summary.stddev_milli_ns as f64;
            prop_assert!((mean_milli - mean * 1000.0).abs() <= 0.5 + mean * 1e-9,
                "mean {mean_milli} vs {}", mean * 1000.0);
            prop_assert!((stddev_milli - stddev * 1000.0).abs() <= 1.0 + stddev * 1e-6,
                "stddev {stddev_milli} vs {}", stddev * 1000.0);
            prop_assert_eq!(summary.min_ns, *samples.iter().min().unwrap());
            prop_assert_eq!(summary.max_ns, *samples.iter().max().unwrap());
            prop_assert_eq!(summary.samples, samples.len() as u64);
        }
    }

    #[test]
    fn squares_that_wrap_past_128_bits_stay_exact() {
        // Each square is just under 2^128: the sum of squares wraps at every second sample.
        let constant = summary_of(&[u64::MAX; 7]);
        assert_eq!(constant.stddev_milli_ns, 0);
        assert_eq!(constant.mean_milli_ns, u128::from(u64::MAX) * 1000);
        // u64::MAX − 2 and u64::MAX: mean u64::MAX − 1, sample deviation √2.
        let two = summary_of(&[u64::MAX - 2, u64::MAX]);
        assert_eq!(two.mean_milli_ns, (u128::from(u64::MAX) - 1) * 1000);
        assert_eq!(two.stddev_milli_ns, 1_414);
        assert_eq!((two.min_ns, two.max_ns), (u64::MAX - 2, u64::MAX));
    }

    #[test]
    fn constant_samples_have_zero_deviation() {
        let samples: Vec<u64> = (0..1000).map(|_| 123_456_789).collect();
        let summary = summary_of(&samples);
        assert_eq!(summary.stddev_milli_ns, 0);
        assert_eq!(summary.mean_milli_ns, 123_456_789_000);
    }
}
