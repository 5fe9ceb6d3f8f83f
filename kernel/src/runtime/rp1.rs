//! RP1 on the Pi 5, behind BCM2712's pcie2, as far as the kernel uses what the firmware left up
//! (docs/console.md, docs/usb-storage.md §7): whether RP1 can be reached at all, checked without
//! touching pcie2 while its bridge is in reset (the firmware's default unless config.txt says
//! `pciex4_reset=0`; a pcie2 access then raises an SError or hangs), and the console mirrored to
//! RP1 UART0 on the header pins GPIO 14/15. The same check comes before RP1's USB controllers are
//! touched and before pcie1's bring-up, which leaves the shared RESCAL alone while RP1's link is
//! live.
#![forbid(unsafe_code)]

use super::windows;
use crate::board::{BlockKind, BoardFamily, BoardProfile};
use crate::discovery::BoardInfo;
use crate::println;
use drivers::pci::brcmstb::resets::{link_access, LinkAccess, PCIE2_BRIDGE_LINE};
use drivers::pl011::Pl011;

/// Whether RP1, behind pcie2, can be touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rp1Access {
    /// Not a Pi 5 (or its table lacks the blocks).
    NotHere,
    /// pcie2's bridge is in reset (the firmware's default, `pciex4_reset=1`): nothing of pcie2
    /// or RP1 may be read, the access would hang or fault.
    BridgeInReset,
    /// The bridge is out of reset but the link is down.
    LinkDown { status: u32 },
    /// The link is up: RP1's peripherals answer through the window the firmware set up.
    Reachable,
}

/// Checks, in this order and reading nothing else: the reset controller's status of pcie2's
/// bridge line (a block of its own, always readable), then pcie2's MISC_PCIE_STATUS
/// (`drivers::pci::brcmstb::resets::link_access`). The check to make before any RP1 access.
pub fn rp1_access(profile: &BoardProfile) -> Rp1Access {
    if profile.family != BoardFamily::RaspberryPi5 {
        return Rp1Access::NotHere;
    }
    let (Ok(controller), Ok(pcie2)) =
        (profile.block(BlockKind::BridgeResetController), profile.block(BlockKind::Rp1PcieBridge))
    else {
        return Rp1Access::NotHere;
    };
    // Opening a window reads nothing: the reset controller's status register is read first, and
    // pcie2's status only when that says its bridge is out of reset (`link_access`).
    let (Ok(controller), Ok(pcie2)) = (windows::open(controller), windows::open(pcie2)) else {
        return Rp1Access::NotHere;
    };
    match link_access(&controller, PCIE2_BRIDGE_LINE, || pcie2) {
        LinkAccess::BridgeInReset => Rp1Access::BridgeInReset,
        LinkAccess::LinkDown { status } => Rp1Access::LinkDown { status },
        LinkAccess::LinkUp => Rp1Access::Reachable,
    }
}

/// Whether RP1's link is up (the check pcie1's bring-up makes before RESCAL).
pub fn rp1_link_live(profile: &BoardProfile) -> bool {
    rp1_access(profile) == Rp1Access::Reachable
}

/// On a Pi 5 whose firmware left RP1 up with UART0 set up, sends the console to the header pins
/// too; otherwise says why not.
pub fn mirror_console(info: &BoardInfo) {
    if info.profile.family != BoardFamily::RaspberryPi5 {
        return;
    }
    super::stage(format_args!("header console check (RP1 behind pcie2)"));
    let why_not = match rp1_access(info.profile) {
        Rp1Access::NotHere => "the board table has no pcie2 blocks in its device memory",
        Rp1Access::BridgeInReset => {
            "pcie2 (RP1's link) is held in reset, the firmware's default; `pciex4_reset=0` and \
             `enable_rp1_uart=1` in config.txt keep it up (barebench image --pi5-console header)"
        }
        Rp1Access::LinkDown { status } => {
            println!(
                "console    debug UART only, not the header pins GPIO 14/15: pcie2 (RP1's link) is out of \
                 reset but down (MISC_PCIE_STATUS {status:#010x})"
            );
            return;
        }
        // RP1 UART0 through pcie2's window, which answers (checked above).
        Rp1Access::Reachable => match info.profile.block(BlockKind::Rp1Uart0) {
            Ok(block) => match windows::open(block) {
                Ok(window) if Pl011::new(window).is_set_up() => {
                    let _ = super::console::add_mirror(block);
                    println!("console    mirrored to RP1 UART0 (header pins GPIO 14/15), as the firmware set it up");
                    return;
                }
                Ok(_) => "RP1 UART0 is not set up (add `enable_rp1_uart=1` to config.txt)",
                Err(_) => "RP1 UART0 lies outside the board's device memory",
            },
            Err(_) => "the board table has no RP1 UART0",
        },
    };
    println!("console    debug UART only, not the header pins GPIO 14/15: {why_not}");
}
