//! The benchmark: jobs, runner, statistics and report formats (issue 5).
#![no_std]
