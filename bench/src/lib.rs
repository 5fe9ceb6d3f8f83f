//! The benchmark: jobs, runner, statistics and report formats (docs/architecture.md "What is measured", "Output", "Configuration").
//!
//! # How the kernel uses it
//!
//! ```text
//! let config = bench::cmdline::Config::from_command_line(bootargs, |key| kernel_owns(key),
//!     &mut |error| println!("{error}"));
//! let bytes = bench::runner::buffer_bytes_needed(&config, &geometries);   // size the DMA area
//! let results = bench::runner::run_benchmark(&config, &mut devices, &clock, dma_area,
//!     &bench::runner::ReportContext { board, timer_frequency_hz, extra: &[] }, &mut console);
//! ```
//!
//! - [`cmdline`]: `key=value` settings ([`cmdline::settings`]), [`cmdline::Config`] with
//!   [`cmdline::Config::apply`] (→ [`cmdline::Applied::NotMine`] for keys that are not the
//!   benchmark's) and [`cmdline::Config::from_command_line`] (presets first, then every key);
//!   [`cmdline::KNOWN_KEYS`] and [`cmdline::unknown_setting_message`] for the kernel's own
//!   unknown-key message.
//! - [`runner`]: [`runner::run_benchmark`] prints a line before each run, an in-place progress
//!   line during it, a table after each job, a summary of medians with device ratios, and the
//!   fio-compatible JSON between [`JSON_BEGIN_MARKER`] and [`JSON_END_MARKER`]; it returns
//!   [`runner::BenchmarkResults`]. [`runner::buffer_bytes_needed`] and
//!   [`runner::minimum_buffer_bytes`] size the DMA area.
//! - [`histogram`], [`stats`], [`wide`]: integer-only statistics (fio's 1856-bucket histogram,
//!   exact mean and standard deviation).
//! - [`offsets`]: seeded sequential and random offsets. [`results`]: runs and medians.
//! - [`report`], [`json`]: the console tables and the JSON writer.
//! - `fio_json` (feature `std`): reading fio's and barebench's JSON back, and finding it in a
//!   serial log, for the host tool.
//!
//! Memory: the histograms are allocated once per benchmark, per-tag arrays once per job, result
//! records once per run; nothing is allocated per I/O. Nothing is ever written to a device.
#![cfg_attr(not(any(test, feature = "std")), no_std)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod cmdline;
pub mod console;
pub mod cpu_cost;
#[cfg(feature = "std")]
pub mod fio_json;
pub mod histogram;
pub mod json;
pub mod offsets;
pub mod plan;
pub mod report;
pub mod results;
pub mod run;
pub mod runner;
#[cfg(test)]
mod sim;
pub mod stats;
pub mod units;
pub mod wide;

/// The line printed just before the machine-readable results; nothing else prints it.
pub const JSON_BEGIN_MARKER: &str = "==== barebench results: fio-compatible JSON begin ====";
/// The line printed just after the machine-readable results; nothing else prints it.
pub const JSON_END_MARKER: &str = "==== barebench results: fio-compatible JSON end ====";
