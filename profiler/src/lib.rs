//! barebench's instruction profile of the kernel's measured I/O path, apart from QEMU: the
//! accounting the TCG plugin (`profiler/plugin/`, `libbarebench_profile.so`) does as the guest
//! runs, the A64 encodings it follows, its arguments and the records it writes, which
//! `barebench qemu --profile` reads back (docs/measurement.md §18).
//!
//! `barebench qemu --profile FILE` loads the plugin with the addresses of
//! `bench::cpu_cost::CpuMeter::lap` and of `bench::cpu_cost::run_metered` from the
//! kernel ELF. For every translation block the guest executes, the plugin counts the instructions
//! that really ran (an inline store of each instruction's index in the block, read when the next
//! block starts, so a block QEMU leaves early to redo a device access as the last instruction of
//! a block of its own is counted once), follows calls and returns on a shadow call stack, and
//! charges the counts to the meter's accounts at the meter's own laps (`accounting`). One record
//! per run goes to the output file (`format`); the host tool names the code with the ELF's
//! symbols and debug information and prints the tables and flame-graph stacks.
#![forbid(unsafe_code)]

pub mod accounting;
pub mod arm64;
pub mod format;
pub mod options;
