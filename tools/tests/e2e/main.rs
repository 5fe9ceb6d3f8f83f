//! End-to-end tests: the `barebench` binary run as a user runs it (`qemu_cli`, `report_cli`,
//! `report_from_bench`, `scratch_cli`, `serial_cli`), and, with the `e2e` feature (`make test`
//! enables it), the real kernel images booted in QEMU with their serial output and exit status
//! checked, card images checked with fsck.fat and mtools, and fio-plot run on a report. Each
//! QEMU module opens with `#![cfg(feature = "e2e")]`, so a plain `cargo test` stays fast and
//! offline. The checks of the sources themselves are the `policy` test crate beside this one.
//! (No crate-wide `forbid(unsafe_code)`: `qemu_cli` installs a seccomp filter in the QEMU child.)

#[cfg(feature = "e2e")]
mod qemu_harness;

mod aarch32;
mod benchmark;
mod boot;
mod check;
mod conditions;
mod cpu_budget;
mod farm;
mod faults;
mod fio_consumers;
mod image_e2e;
mod measurement;
mod nvme;
mod pci;
mod profile;
mod qemu_cli;
mod qemu_exit;
mod registers;
mod report_cli;
mod report_from_bench;
mod scratch_cli;
mod sd;
mod serial_cli;
mod surface;
mod trace;
mod usb;
mod writes;
