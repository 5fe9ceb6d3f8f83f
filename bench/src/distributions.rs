//! fio's distributions for one run: the latency bands (`latency_ns`, `latency_us`,
//! `latency_ms`), the queue-depth bands (`iodepth_level`, `iodepth_submit`, `iodepth_complete`)
//! and IOPS and bandwidth sampled over fixed intervals of the measured window (`iops_min` …
//! `bw_samples`), computed as fio 3.x computes them (docs/fio-json.md §3–§5; fio `stat.c`
//! `__add_samples()`, `stat_calc_lat()`, `stat_calc_dist()`; `io_u.c` `io_u_mark_latency()`,
//! `io_u_mark_depth()`).
//!
//! Counting is integers only. The runner's per-pass cost is a comparison against the next sample
//! boundary; per batch and per reap pass one band index and a counter bump.

use crate::histogram::{bucket_start_ns, BUCKETS};
use crate::stats::{LatencyAccumulator, LatencySummary};
use crate::units::{KIB, NS_PER_MS, NS_PER_S, NS_PER_US};

/// Upper bounds (exclusive) of fio's latency bands within one unit: `"2"` is 0–1, `"4"` 2–3, …,
/// `"1000"` 750–999 (`latency_ns` and `latency_us`; `latency_ms` adds two more bands).
pub const LATENCY_BAND_EDGES: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
/// Bands in `latency_ms`: the ten above, `"2000"` (1000–1999 ms) and `">=2000"`.
pub const MS_BANDS: usize = 12;
/// Every band: ten in ns, ten in µs, twelve in ms.
pub const LATENCY_BANDS: usize = 2 * LATENCY_BAND_EDGES.len() + MS_BANDS;
/// The JSON key of each `latency_ms` band.
pub const MS_BAND_KEYS: [&str; MS_BANDS] =
    ["2", "4", "10", "20", "50", "100", "250", "500", "750", "1000", "2000", ">=2000"];
/// The JSON key of each `latency_ns` and `latency_us` band.
pub const UNIT_BAND_KEYS: [&str; 10] = ["2", "4", "10", "20", "50", "100", "250", "500", "750", "1000"];

/// The band within one unit of every value below 1000 (`"2"` is band 0, …, `"1000"` band 9):
/// one table read per completion instead of a search of the edges.
const BAND_WITHIN_UNIT: [u8; 1000] = {
    let mut table = [0u8; 1000];
    let mut value = 0;
    while value < 1000 {
        let mut band = 0;
        while band < LATENCY_BAND_EDGES.len() && LATENCY_BAND_EDGES[band] <= value as u64 {
            band += 1;
        }
        table[value] = band as u8;
        value += 1;
    }
    table
};

/// The band within one unit of `value` (below 1000): 0 and 1 → "2", …, 750–999 → "1000".
const fn within(value: u64) -> usize {
    BAND_WITHIN_UNIT[value as usize] as usize
}

/// Index into [`LATENCY_BANDS`] of a completion latency (fio truncates to the unit first).
pub const fn latency_band(clat_ns: u64) -> usize {
    let edges = LATENCY_BAND_EDGES.len();
    if clat_ns < NS_PER_US {
        return within(clat_ns);
    }
    let clat_us = clat_ns / NS_PER_US;
    if clat_us < 1000 {
        return edges + within(clat_us);
    }
    let clat_ms = clat_ns / NS_PER_MS;
    let ms_band = match clat_ms {
        0..1000 => within(clat_ms),
        1000..2000 => MS_BANDS - 2,
        _ => MS_BANDS - 1,
    };
    2 * edges + ms_band
}

/// In [`BAND_OF_BUCKET`]: the bucket's values fall in more than one latency band.
const SPANS_BANDS: u8 = u8::MAX;

/// The latency band of the values in each histogram bucket ([`crate::histogram`]), or
/// [`SPANS_BANDS`] for the few buckets that an edge of the bands cuts: bands grow with the value,
/// so a bucket whose first and last values share a band lies in it whole.
const BAND_OF_BUCKET: [u8; BUCKETS] = {
    let mut table = [0u8; BUCKETS];
    let mut index = 0;
    while index < BUCKETS {
        let last_ns = if index + 1 < BUCKETS { bucket_start_ns(index + 1) - 1 } else { u64::MAX };
        let (first, last) = (latency_band(bucket_start_ns(index)), latency_band(last_ns));
        table[index] = if first == last { first as u8 } else { SPANS_BANDS };
        index += 1;
    }
    table
};

/// [`latency_band`] of `clat_ns`, which the histogram put in bucket `bucket`: one table read,
/// except in a bucket an edge of the bands cuts.
#[inline]
pub fn latency_band_in_bucket(bucket: usize, clat_ns: u64) -> usize {
    match BAND_OF_BUCKET.get(bucket) {
        Some(&band) if band != SPANS_BANDS => usize::from(band),
        _ => latency_band(clat_ns),
    }
}

/// Keys of fio's depth bands: `iodepth_level` uses [`LEVEL_BAND_KEYS`], submit and complete
/// [`BATCH_BAND_KEYS`].
pub const DEPTH_BANDS: usize = 7;
pub const LEVEL_BAND_KEYS: [&str; DEPTH_BANDS] = ["1", "2", "4", "8", "16", "32", ">=64"];
pub const BATCH_BAND_KEYS: [&str; DEPTH_BANDS] = ["0", "4", "8", "16", "32", "64", ">=64"];

/// `iodepth_level` band of `in_flight` requests: 1, 2–3, 4–7, 8–15, 16–31, 32–63, ≥64. Each
/// band is a power of two, so the band is the position of the highest bit (no chain of compares
/// on the hot path of every doorbell).
#[inline]
pub fn level_band(in_flight: usize) -> usize {
    ((in_flight | 1).ilog2() as usize).min(DEPTH_BANDS - 1)
}

/// `iodepth_submit`/`iodepth_complete` band of a batch of `count`: 0, 1–4, 5–8, 9–16, 17–32,
/// 33–64, >64: from 5 up, the band of `count − 1` is the position of its highest bit.
#[inline]
pub fn batch_band(count: usize) -> usize {
    if count == 0 {
        return 0;
    }
    (((count - 1) | 1).ilog2() as usize).clamp(1, DEPTH_BANDS - 1)
}

/// The queue-depth bands of one run, counted inside the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DepthCounts {
    /// Per request: how many were in flight right after the doorbell that sent it.
    pub level: [u64; DEPTH_BANDS],
    /// Per doorbell: how many requests it sent.
    pub submit: [u64; DEPTH_BANDS],
    /// Per poll that found completions: how many it found (empty polls are waiting, not reaps).
    pub complete: [u64; DEPTH_BANDS],
}

/// Counts up to this one have a slot of their own in a [`DepthTally`]; every larger count falls
/// in the same bands as this one (`>=64` of the levels, `>64` of the batches).
const TALLIED_COUNTS: usize = 65;

/// What [`DepthCounts`] are made of, counted where the run loop is: per doorbell and per reap the
/// raw count's slot gets one add (a compare clamps it), and the bands are formed once, when the
/// run's result is made ([`DepthTally::counts`]), instead of on every pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthTally {
    /// Requests sent by doorbells that left `i` in flight (`i` up to [`TALLIED_COUNTS`]).
    sent_at_level: [u64; TALLIED_COUNTS + 1],
    /// Doorbells that sent `i` requests.
    doorbells_of: [u64; TALLIED_COUNTS + 1],
    /// Polls that found `i` completions.
    reaps_of: [u64; TALLIED_COUNTS + 1],
}

impl Default for DepthTally {
    fn default() -> Self {
        DepthTally {
            sent_at_level: [0; TALLIED_COUNTS + 1],
            doorbells_of: [0; TALLIED_COUNTS + 1],
            reaps_of: [0; TALLIED_COUNTS + 1],
        }
    }
}

impl DepthTally {
    /// One doorbell for `batch` requests, leaving `in_flight` in flight.
    #[inline]
    pub fn record_kick(&mut self, batch: usize, in_flight: usize) {
        self.sent_at_level[in_flight.min(TALLIED_COUNTS)] += batch as u64;
        self.doorbells_of[batch.min(TALLIED_COUNTS)] += 1;
    }

    /// One poll that found `completions`.
    #[inline]
    pub fn record_reap(&mut self, completions: usize) {
        self.reaps_of[completions.min(TALLIED_COUNTS)] += 1;
    }

    /// fio's bands of what was recorded.
    pub fn counts(&self) -> DepthCounts {
        let mut counts = DepthCounts::default();
        for count in 0..=TALLIED_COUNTS {
            counts.level[level_band(count)] += self.sent_at_level[count];
            counts.submit[batch_band(count)] += self.doorbells_of[count];
            counts.complete[batch_band(count)] += self.reaps_of[count];
        }
        counts
    }
}

/// A percentage in millionths of a percent (100 % = 10^8), printed with six decimals.
pub type PercentMicro = u128;

/// `100 × count / total` in millionths of a percent, raised to `floor` when non-zero and below
/// it, as fio does (0.01 for latency bands, 0.1 for depth bands); 0 when `total` is 0.
pub fn fio_percent(count: u64, total: u64, floor: PercentMicro) -> PercentMicro {
    if total == 0 || count == 0 {
        return 0;
    }
    let percent = u128::from(count) * 100_000_000 / u128::from(total);
    percent.max(floor)
}

/// fio's floor for non-zero latency bands: 0.01 %.
pub const LATENCY_PERCENT_FLOOR: PercentMicro = 10_000;
/// fio's floor for non-zero depth bands: 0.1 %.
pub const DEPTH_PERCENT_FLOOR: PercentMicro = 100_000;

/// min, max, mean, sample standard deviation and count of interval samples (IOPS, or KiB/s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RateSummary {
    pub samples: u64,
    pub min: u64,
    pub max: u64,
    /// Thousandths.
    pub mean_milli: u128,
    /// Thousandths (divisor n − 1; 0 with fewer than two samples).
    pub stddev_milli: u128,
}

impl RateSummary {
    fn from_accumulator(accumulator: &LatencyAccumulator) -> RateSummary {
        let LatencySummary { samples, min_ns, max_ns, mean_milli_ns, stddev_milli_ns } =
            accumulator.summary();
        RateSummary {
            samples,
            min: min_ns,
            max: max_ns,
            mean_milli: mean_milli_ns,
            stddev_milli: stddev_milli_ns,
        }
    }
}

/// IOPS and bandwidth sampled every interval of the measured window, as fio's helper thread
/// does: at each boundary the I/Os completed since the previous one give one sample,
/// `delta × 10^9 / elapsed ns` (bandwidth then ÷ 1024: KiB/s), where elapsed runs from the
/// previous nominal boundary to the moment the sample is taken (at most the window's end).
/// An interval in which nothing completed adds no sample; the trailing partial interval is
/// dropped, so a window holds ⌊window / interval⌋ boundaries.
#[derive(Clone, Copy, Debug)]
pub struct RateSampler {
    /// The tick at or after which the next sample is due; `u64::MAX` when none is.
    pub next_due_ticks: u64,
    interval_ticks: u64,
    window_end_ticks: u64,
    boundaries_left: u64,
    ios_at_previous: u64,
    iops: LatencyAccumulator,
    bandwidth_kib: LatencyAccumulator,
}

impl RateSampler {
    /// Sampling over the window `[window_start, window_start + window)` in ticks.
    pub fn new(window_start_ticks: u64, window_ticks: u64, interval_ticks: u64) -> RateSampler {
        let interval_ticks = interval_ticks.max(1);
        let boundaries = window_ticks / interval_ticks;
        RateSampler {
            next_due_ticks: if boundaries == 0 { u64::MAX } else { window_start_ticks + interval_ticks },
            interval_ticks,
            window_end_ticks: window_start_ticks + window_ticks,
            boundaries_left: boundaries,
            ios_at_previous: 0,
            iops: LatencyAccumulator::new(),
            bandwidth_kib: LatencyAccumulator::new(),
        }
    }

    /// Takes the sample due at `next_due_ticks`, `now_ticks` being at or after it; `ios` is the
    /// count of I/Os completed in the window so far, each of `block_bytes`.
    pub fn sample(&mut self, now_ticks: u64, ios: u64, block_bytes: u64, ticks_per_second: u64) {
        let previous_boundary = self.next_due_ticks - self.interval_ticks;
        let elapsed_ticks = now_ticks.min(self.window_end_ticks).saturating_sub(previous_boundary).max(1);
        let delta = ios - self.ios_at_previous;
        if delta > 0 {
            let elapsed_ns = blockdev::ticks_to_ns(elapsed_ticks, ticks_per_second).max(1);
            let per_second = |amount: u128| amount * u128::from(NS_PER_S) / u128::from(elapsed_ns);
            let iops = per_second(u128::from(delta));
            let bandwidth_kib = per_second(u128::from(delta) * u128::from(block_bytes)) / u128::from(KIB);
            self.iops.record(iops.min(u128::from(u64::MAX)) as u64);
            self.bandwidth_kib.record(bandwidth_kib.min(u128::from(u64::MAX)) as u64);
            self.ios_at_previous = ios;
        }
        self.boundaries_left -= 1;
        self.next_due_ticks =
            if self.boundaries_left == 0 { u64::MAX } else { self.next_due_ticks + self.interval_ticks };
    }

    pub fn iops(&self) -> RateSummary {
        RateSummary::from_accumulator(&self.iops)
    }

    pub fn bandwidth_kib(&self) -> RateSummary {
        RateSummary::from_accumulator(&self.bandwidth_kib)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_bands_have_fios_edges_and_truncate_to_the_unit() {
        let cases: [(u64, usize); 14] = [
            (0, 0),
            (1, 0),
            (2, 1),
            (999, 9),
            (1_000, 10),         // 1 µs → "2" of latency_us
            (1_999, 10),         // truncated to 1 µs
            (2_000, 11),         // 2 µs → "4"
            (99_999, 15),        // 99 µs → "100"
            (100_000, 16),       // 100 µs → "250"
            (999_999, 19),       // 999 µs → "1000"
            (1_000_000, 20),     // 1 ms → "2" of latency_ms
            (999_999_999, 29),   // 999 ms → "1000"
            (1_999_999_999, 30), // 1999 ms → "2000"
            (2_000_000_000, 31), // ">=2000"
        ];
        for (clat_ns, band) in cases {
            assert_eq!(latency_band(clat_ns), band, "{clat_ns} ns");
        }
        assert_eq!(latency_band(u64::MAX), LATENCY_BANDS - 1);
    }

    #[test]
    fn the_band_read_from_a_bucket_is_the_band_of_the_value() {
        let mut values: Vec<u64> = (0..=5000).collect();
        for unit in [1u64, NS_PER_US, NS_PER_MS] {
            for edge in LATENCY_BAND_EDGES.iter().chain(&[2000]) {
                let at = edge * unit;
                values.extend([at.saturating_sub(2), at - 1, at, at + 1, at + 2]);
            }
        }
        for index in 0..BUCKETS {
            let start = bucket_start_ns(index);
            values.extend([start, start.saturating_sub(1), start + 1]);
        }
        let mut random = crate::offsets::RandomGenerator::new(0xba4d);
        values.extend((0..200_000).map(|_| random.next_u64() >> random.below(64)));
        values.extend([u64::MAX, u64::MAX - 1]);
        let mut spanning = 0;
        for value in values {
            let bucket = crate::histogram::bucket_index(value);
            assert_eq!(latency_band_in_bucket(bucket, value), latency_band(value), "{value} ns");
            spanning += usize::from(BAND_OF_BUCKET[bucket] == SPANS_BANDS);
        }
        // Most values are read from the table; only the buckets an edge cuts are not.
        assert!(BAND_OF_BUCKET.iter().filter(|&&band| band == SPANS_BANDS).count() < 40);
        assert!(spanning > 0);
    }

    #[test]
    fn depth_bands_match_fios_ranges_for_every_count() {
        let level = |in_flight: usize| match in_flight {
            0..=1 => 0,
            2..=3 => 1,
            4..=7 => 2,
            8..=15 => 3,
            16..=31 => 4,
            32..=63 => 5,
            _ => 6,
        };
        let batch = |count: usize| match count {
            0 => 0,
            1..=4 => 1,
            5..=8 => 2,
            9..=16 => 3,
            17..=32 => 4,
            33..=64 => 5,
            _ => 6,
        };
        for count in (0..=4096).chain([usize::MAX, usize::MAX - 1, 1 << 40]) {
            assert_eq!(level_band(count), level(count), "level of {count}");
            assert_eq!(batch_band(count), batch(count), "batch of {count}");
        }
    }

    #[test]
    fn depth_bands_have_fios_ranges() {
        let levels: Vec<usize> = [1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 1023].map(level_band).to_vec();
        assert_eq!(levels, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]);
        let batches: Vec<usize> = [0, 1, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65].map(batch_band).to_vec();
        assert_eq!(batches, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]);
        let mut tally = DepthTally::default();
        tally.record_kick(3, 32);
        tally.record_kick(1, 1);
        tally.record_reap(0);
        tally.record_reap(40);
        let counts = tally.counts();
        assert_eq!(counts.level, [1, 0, 0, 0, 0, 3, 0]);
        assert_eq!(counts.submit, [0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(counts.complete, [1, 0, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn a_tally_gives_the_bands_that_counting_each_event_in_its_band_gives() {
        let mut random = crate::offsets::RandomGenerator::new(0xdef7);
        let mut tally = DepthTally::default();
        let mut reference = DepthCounts::default();
        let edges = [0usize, 1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 63, 64, 65, 66, 1023, 1024, 1 << 40];
        let draws = (0..20_000).map(|_| random.below(1100) as usize);
        let counts: Vec<usize> = edges.into_iter().chain(draws).collect();
        for pair in counts.windows(2) {
            let (batch, in_flight) = (pair[0], pair[1]);
            tally.record_kick(batch, in_flight);
            reference.level[level_band(in_flight)] += batch as u64;
            reference.submit[batch_band(batch)] += 1;
            tally.record_reap(in_flight);
            reference.complete[batch_band(in_flight)] += 1;
        }
        assert_eq!(tally.counts(), reference);
    }

    #[test]
    fn percentages_have_fios_floors() {
        assert_eq!(fio_percent(0, 10, LATENCY_PERCENT_FLOOR), 0);
        assert_eq!(fio_percent(3, 0, LATENCY_PERCENT_FLOOR), 0);
        assert_eq!(fio_percent(1, 3, LATENCY_PERCENT_FLOOR), 33_333_333);
        assert_eq!(fio_percent(1, 1_000_000, LATENCY_PERCENT_FLOOR), 10_000, "0.0001 % → 0.01 %");
        assert_eq!(fio_percent(1, 1_000_000, DEPTH_PERCENT_FLOOR), 100_000, "→ 0.1 %");
        assert_eq!(fio_percent(7, 7, DEPTH_PERCENT_FLOOR), 100_000_000);
    }

    #[test]
    fn samples_cover_whole_intervals_only_and_skip_idle_ones() {
        // 1 MHz ticks, window 0..2_500_000 (2.5 s), interval 500 ms → 5 boundaries.
        let mut sampler = RateSampler::new(1_000, 2_500_000, 500_000);
        assert_eq!(sampler.next_due_ticks, 501_000);
        sampler.sample(501_000, 100, 4096, 1_000_000); // 100 I/Os in 0.5 s = 200 IOPS
        sampler.sample(1_001_000, 100, 4096, 1_000_000); // idle: no sample
        sampler.sample(1_501_500, 400, 4096, 1_000_000); // 300 in 0.5005 s (from 1_001_000)
        assert_eq!(sampler.next_due_ticks, 2_001_000);
        sampler.sample(2_001_000, 500, 4096, 1_000_000);
        sampler.sample(2_600_000, 600, 4096, 1_000_000); // elapsed capped at the window end
        assert_eq!(sampler.next_due_ticks, u64::MAX);
        let iops = sampler.iops();
        // 200; 300 / 0.5005 s = 599; 100 / 0.5 s = 200 twice.
        assert_eq!((iops.samples, iops.min, iops.max), (4, 200, 599));
        assert_eq!(iops.mean_milli, 299_750);
        let bandwidth = sampler.bandwidth_kib();
        assert_eq!((bandwidth.samples, bandwidth.min, bandwidth.max), (4, 800, 2397));
        assert_eq!(RateSampler::new(0, 499_999, 500_000).next_due_ticks, u64::MAX, "no whole interval");
    }
}
