//! RP1 on the Pi 5, behind BCM2712's pcie2, as far as the kernel uses what the firmware left up:
//! whether its link can be reached, checked without touching pcie2 while its bridge is in reset
//! (the firmware's default unless config.txt says `pciex4_reset=0`; a pcie2 access then raises
//! an SError or hangs). Used before RP1's USB controllers are touched and before pcie1's
//! bring-up, which leaves the shared RESCAL alone while RP1's link is live.
#![forbid(unsafe_code)]

use super::windows;
use crate::board::{BlockKind, BoardFamily, BoardProfile};
use drivers::pci::brcmstb::resets::{link_access, LinkAccess, PCIE2_BRIDGE_LINE};

/// pcie2's state, or `None` off a Pi 5 (or when the table lacks the blocks). Reads the reset
/// controller's status of line 44, then, only with the bridge out of reset, pcie2's
/// MISC_PCIE_STATUS.
pub fn rp1_link(profile: &BoardProfile) -> Option<LinkAccess> {
    if profile.family != BoardFamily::RaspberryPi5 {
        return None;
    }
    let reset = profile.pcie?.bridge_reset?;
    let controller = windows::open(reset.controller).ok()?;
    // Opening a window reads nothing; `link_access` reads pcie2 only once it is out of reset.
    let pcie2 = windows::open_kind(profile, BlockKind::Rp1PcieBridge).ok()?;
    Some(link_access(&controller, PCIE2_BRIDGE_LINE, || pcie2))
}

/// Whether RP1's link is up (the check pcie1's bring-up makes before RESCAL).
pub fn rp1_link_live(profile: &BoardProfile) -> bool {
    rp1_link(profile) == Some(LinkAccess::LinkUp)
}
