//! The benchmark: jobs, runner, statistics and report formats (issue 5; design.md "What is measured").
#![cfg_attr(not(any(test, feature = "std")), no_std)]

#[cfg(any(test, feature = "std"))]
extern crate std;

#[cfg(feature = "std")]
pub mod fio_json;

/// The line printed just before the machine-readable results; nothing else prints it.
pub const JSON_BEGIN_MARKER: &str = "==== barebench results: fio-compatible JSON begin ====";
/// The line printed just after the machine-readable results; nothing else prints it.
pub const JSON_END_MARKER: &str = "==== barebench results: fio-compatible JSON end ====";
