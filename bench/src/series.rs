//! A throughput series of bounded size: however many samples a scan or a sustained write takes
//! (a 1 TB drive in 4 MiB steps is about 250 000), at most [`MAX_POINTS`] points are kept. When
//! the series is full, neighbouring points are merged in pairs, each keeping the slowest and the
//! fastest sample it holds and the bytes and time of all of them, so no dip is averaged away
//! (docs/surface-and-sustained.md §3).

use alloc::vec::Vec;

use crate::units::{MIB, NS_PER_S};

/// The most points a series keeps (each 48 bytes, 48 KiB in all; the JSON prints each once).
pub const MAX_POINTS: usize = 1024;

/// Thousandths of a MiB/s: `bytes` moved in `ns`, truncated (0 for no time).
pub fn milli_mib_per_s(bytes: u64, ns: u64) -> u64 {
    if ns == 0 {
        return 0;
    }
    (u128::from(bytes) * 1000 * u128::from(NS_PER_S) / (u128::from(ns) * u128::from(MIB))) as u64
}

/// One point: consecutive samples merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesPoint {
    /// Where the first sample starts and the last one ends: bytes from the device's start for a
    /// scan, ns from the run's start for a sustained write.
    pub start: u64,
    pub end: u64,
    /// How many samples the point holds.
    pub samples: u64,
    /// All the bytes of its samples and the time they took: their mean rate.
    pub bytes: u64,
    pub ns: u64,
    /// The slowest and fastest sample, thousandths of a MiB/s.
    pub min_milli_mib_s: u64,
    pub max_milli_mib_s: u64,
}

impl SeriesPoint {
    /// The mean rate of the samples in the point, thousandths of a MiB/s.
    pub fn mean_milli_mib_s(&self) -> u64 {
        milli_mib_per_s(self.bytes, self.ns)
    }

    fn merge(&mut self, later: &SeriesPoint) {
        self.end = later.end;
        self.samples += later.samples;
        self.bytes += later.bytes;
        self.ns += later.ns;
        self.min_milli_mib_s = self.min_milli_mib_s.min(later.min_milli_mib_s);
        self.max_milli_mib_s = self.max_milli_mib_s.max(later.max_milli_mib_s);
    }
}

/// Samples in order of position, at most [`MAX_POINTS`] points, each of `samples_per_point`
/// samples (a power of two) but the last, which may hold fewer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundedSeries {
    points: Vec<SeriesPoint>,
    samples_per_point: u64,
    capacity: usize,
}

impl Default for BoundedSeries {
    fn default() -> Self {
        BoundedSeries::new()
    }
}

impl BoundedSeries {
    pub fn new() -> BoundedSeries {
        BoundedSeries::with_capacity(MAX_POINTS)
    }

    /// A series of at most `capacity` points (at least 2).
    pub fn with_capacity(capacity: usize) -> BoundedSeries {
        let capacity = capacity.max(2);
        BoundedSeries { points: Vec::with_capacity(capacity), samples_per_point: 1, capacity }
    }

    /// Adds the sample `[start, end)` that moved `bytes` in `ns`.
    pub fn push(&mut self, start: u64, end: u64, bytes: u64, ns: u64) {
        let rate = milli_mib_per_s(bytes, ns);
        let sample =
            SeriesPoint { start, end, samples: 1, bytes, ns, min_milli_mib_s: rate, max_milli_mib_s: rate };
        match self.points.last_mut() {
            Some(last) if last.samples < self.samples_per_point => last.merge(&sample),
            _ => {
                if self.points.len() == self.capacity {
                    self.halve();
                    return self.push(start, end, bytes, ns);
                }
                self.points.push(sample);
            }
        }
    }

    /// Merges the points in pairs: half as many, each of twice the samples.
    fn halve(&mut self) {
        let merged: Vec<SeriesPoint> = self
            .points
            .chunks(2)
            .map(|pair| {
                let mut point = pair[0];
                if let Some(second) = pair.get(1) {
                    point.merge(second);
                }
                point
            })
            .collect();
        self.points = merged;
        self.samples_per_point *= 2;
    }

    pub fn points(&self) -> &[SeriesPoint] {
        &self.points
    }

    /// How many samples a full point holds.
    pub fn samples_per_point(&self) -> u64 {
        self.samples_per_point
    }

    /// Samples pushed so far.
    pub fn samples(&self) -> u64 {
        self.points.iter().map(|point| point.samples).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_thousandths_of_a_mib_per_second() {
        assert_eq!(milli_mib_per_s(MIB, NS_PER_S), 1000);
        assert_eq!(milli_mib_per_s(3 * MIB, 2 * NS_PER_S), 1500);
        assert_eq!(milli_mib_per_s(MIB, 0), 0);
    }

    #[test]
    fn a_full_series_merges_pairs_and_keeps_the_extremes() {
        let mut series = BoundedSeries::with_capacity(4);
        // Eight samples of 1 MiB: the fifth is slow (1 s instead of 10 ms).
        for index in 0..8u64 {
            let ns = if index == 4 { NS_PER_S } else { 10_000_000 };
            series.push(index * MIB, (index + 1) * MIB, MIB, ns);
        }
        assert_eq!(series.samples(), 8);
        assert_eq!(series.samples_per_point(), 2);
        let points = series.points();
        assert_eq!(points.len(), 4);
        assert_eq!((points[2].start, points[2].end, points[2].samples), (4 * MIB, 6 * MIB, 2));
        assert_eq!(points[2].min_milli_mib_s, 1000);
        assert_eq!(points[2].max_milli_mib_s, 100_000);
        assert_eq!(points[0].min_milli_mib_s, 100_000);
        // The mean is the bytes over the time, not the mean of the rates.
        assert_eq!(points[2].mean_milli_mib_s(), milli_mib_per_s(2 * MIB, NS_PER_S + 10_000_000));
        series.push(8 * MIB, 9 * MIB, MIB, 10_000_000);
        assert_eq!(series.points().len(), 3);
        assert_eq!(series.samples_per_point(), 4);
        assert_eq!(series.points()[2].samples, 1);
    }

    #[test]
    fn a_quarter_of_a_million_samples_stay_within_the_bound() {
        let mut series = BoundedSeries::new();
        for index in 0..250_000u64 {
            series.push(index * 4 * MIB, (index + 1) * 4 * MIB, 4 * MIB, 20_000_000);
        }
        assert!(series.points().len() <= MAX_POINTS && series.points().len() > MAX_POINTS / 2);
        assert_eq!(series.samples(), 250_000);
        assert_eq!(series.points().last().unwrap().end, 250_000 * 4 * MIB);
    }
}
