//! The benchmark: jobs, runner, statistics and report formats (docs/architecture.md "What is measured", "Output", "Configuration").
//!
//! # How the kernel uses it
//!
//! ```text
//! let config = bench::settings::Config::from_command_line(bootargs, |key| kernel_owns(key),
//!     &mut |error| println!("{error}"));
//! let bytes = bench::plan::buffer_bytes_needed(&config, &geometries);   // size the DMA area
//! let region = bench::plan::device_region(&config, &geometry, "sd0");   // what to sample first
//! let environment = bench::runner::RunEnvironment { clock: &timer, cpu_counters: &pmu,
//!     buffer_area: dma_area, memory: Some(&buffer_memory), writes: None,
//!     conditions: Some(&firmware_conditions) };
//! let context = bench::results::ReportContext { board, timer_frequency_hz, extra: &[],
//!     device_facts: &facts };
//! let results = bench::runner::run_benchmark(&config, &mut devices, &environment, &context,
//!     &mut console);   // console: bench::console::Console
//! ```
//!
//! - [`settings`]: `key=value` settings ([`settings::settings`]), [`settings::Config`] with
//!   [`settings::Config::apply`] (→ [`settings::Applied::NotMine`] for keys that are not the
//!   benchmark's) and [`settings::Config::from_command_line`] (presets first, then every key);
//!   [`settings::KNOWN_KEYS`] and [`settings::unknown_setting_message`] for the kernel's own
//!   unknown-key message.
//! - [`runner`]: [`runner::run_benchmark`] prints warnings about the devices, a line before each
//!   run, an in-place progress line during it, a table and the CPU cost per I/O after each job,
//!   a summary of medians with device ratios, and the fio-compatible JSON between
//!   [`JSON_BEGIN_MARKER`] and [`JSON_END_MARKER`]; it returns [`results::BenchmarkResults`].
//! - [`plan`]: each job fitted to each device (a [`region::Region`] of it);
//!   [`plan::buffer_bytes_needed`] and [`plan::minimum_buffer_bytes`] size the DMA area, which
//!   the kernel's [`buffers::BufferMemory`] lets the CPU reach. [`run_loop`]: one run (reap, fill, end
//!   of pass).
//! - [`console`]: the [`console::Console`] the benchmark writes to and the progress line that
//!   never waits for it. [`cpu_cost`]: the [`cpu_cost::CpuCounters`] the kernel provides and the
//!   meter that splits driver from bookkeeping.
//! - [`histogram`], [`stats`], [`wide`]: integer-only statistics (fio's 1856-bucket histogram,
//!   exact mean and standard deviation); [`distributions`]: fio's latency and queue-depth bands
//!   and the interval samples of IOPS and bandwidth.
//! - [`conditions`]: the throttle flags, temperature, clocks and boot time the kernel reads
//!   through a [`conditions::ConditionsSource`] and `cooldown=` waits; [`conditions_summary`]: the
//!   throttled runs and the `conditions:` sentence at the end.
//! - [`offsets`]: seeded sequential and random offsets. [`results`]: runs, medians and the
//!   kernel's facts, as data.
//! - [`scan`], [`sustained`], [`hdparm`]: the jobs that are not fio's (the whole surface read
//!   once, the scratch region written for minutes, hdparm's `-T`/`-t`), each a sequential stream
//!   (`stream`) with an observer of its own, run once per device (`stream_jobs`); [`series`]:
//!   their throughput series, bounded whatever the device's size.
//! - [`report`], [`json`]: the console tables and the JSON writer, which read [`results`].
//! - `fio_json` (feature `std`): reading fio's and barebench's JSON back, and finding it in a
//!   serial log, for the host tool.
//!
//! Memory: the histograms are allocated once per benchmark, per-tag arrays once per job, result
//! records once per run; nothing is allocated per I/O. Nothing is written to a device except by
//! write and mixed jobs inside a marked scratch region on a device `write=` names (docs/writes.md).
#![cfg_attr(not(any(test, feature = "std")), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod buffers;
pub mod conditions;
pub mod conditions_summary;
pub mod console;
pub mod cpu_cost;
pub mod distributions;
#[cfg(feature = "std")]
pub mod fio_json;
pub mod hdparm;
pub mod histogram;
pub mod json;
mod json_writer;
pub mod offsets;
pub mod pattern_check;
pub mod plan;
pub mod region;
pub mod report;
pub mod results;
pub mod run_loop;
pub mod runner;
pub mod scan;
pub mod series;
pub mod settings;
#[cfg(test)]
mod sim;
pub mod stall_watch;
pub mod stats;
pub(crate) mod stream;
pub(crate) mod stream_jobs;
pub mod stream_json;
pub(crate) mod stream_plan;
pub mod stream_results;
pub(crate) mod stream_run;
pub mod sustained;
pub mod trace;
pub mod units;
pub mod wide;
pub mod written;

/// The line printed just before the machine-readable results; nothing else prints it.
pub const JSON_BEGIN_MARKER: &str = "==== barebench results: fio-compatible JSON begin ====";
/// The line printed just after the machine-readable results; nothing else prints it.
pub const JSON_END_MARKER: &str = "==== barebench results: fio-compatible JSON end ====";
