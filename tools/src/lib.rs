//! barebench host library: SD card image, QEMU runs, serial capture, reports (docs/architecture.md "Layout").

pub mod apt;
pub mod compare_linux;
pub mod console_listen;
pub mod disk;
pub mod farm;
pub mod image;
pub mod pattern;
pub mod profile;
pub mod qemu;
pub mod qemu_boot_card;
pub mod qemu_faults;
pub mod report;
pub mod scratch;
pub mod serial;
pub mod signals;
pub mod stages;
