//! The image for the 32-bit Pis: Pi 1, Zero, Zero W, CM1 (`kernel.img`) and Pi 2 v1.0/1.1
//! (`kernel7.img`), the same bytes under both names, linked at 0x8000 where the firmware loads
//! them (docs/aarch32-pis.md §2); QEMU raspi0, raspi1ap and raspi2b run its ELF.
#![cfg_attr(target_os = "none", no_std)]
#![cfg_attr(target_os = "none", no_main)]

#[cfg(target_os = "none")]
use kernel as _;

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("kernel32 is a bare-metal image: build it with `make` (armv6-none-eabihf)");
}
