//! The image for every Raspberry Pi (and QEMU raspi3b/raspi4b), linked at 0x80000.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]
#![forbid(unsafe_code)]

#[cfg(target_os = "none")]
use kernel as _;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("kernel8 is a bare-metal image: build it with `make` (aarch64-unknown-none)");
}
