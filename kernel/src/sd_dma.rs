//! How an SD host's DMA sees RAM on this machine (docs/hardware.md §1.4, §2.4). For BCM2711's
//! EMMC2 it depends on the SoC stepping: B0 sees the first GiB at bus 0xC000_0000, C0 (Pi 4B from
//! PCB revision 1.4, Pi 400, CM4) sees RAM at its own address below 0xFC00_0000. The firmware
//! writes the right one into the device tree's `emmc2bus` `dma-ranges` (Linux
//! `arch/arm/boot/dts/broadcom/bcm2711.dtsi`); without a tree the board revision decides, as
//! circle's `machineinfo.cpp` does; when neither knows, nobody does, and data moves by PIO.
#![forbid(unsafe_code)]

use crate::board::{SdDma, EMMC2_B0_DMA, EMMC2_C0_DMA};
use crate::devicetree::DeviceTree;
use core::fmt;
use drivers::mailbox::{Bcm2711Stepping, BoardRevision};
use drivers::pci::ranges;
use hal::platform::BusTranslation;

/// The compatible of BCM2711's EMMC2 node, a child of `emmc2bus`.
const EMMC2_COMPATIBLE: &str = "brcm,bcm2711-emmc2";

/// Where a host's DMA translation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaSource {
    /// Fixed for the board family (board table, or the PCI host's `dma-ranges`).
    Board,
    /// The `dma-ranges` of the node above the host in the device tree.
    DeviceTree,
    /// The board revision code names the stepping.
    Revision { revision: u32, stepping: &'static str },
    /// Neither a tree nor a revision said: PIO.
    Unknown,
}

/// A host's DMA translation (`None`: unknown, use PIO) and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaDecision {
    pub translation: Option<BusTranslation>,
    pub source: DmaSource,
}

impl DmaDecision {
    pub fn fixed(translation: BusTranslation) -> Self {
        DmaDecision { translation: Some(translation), source: DmaSource::Board }
    }
}

/// `dma-offset 0xc0000000 (device tree emmc2bus dma-ranges)`, or `dma-offset none (PIO: ...)`:
/// the bus address of CPU physical 0 through the window.
impl fmt::Display for DmaDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(translation) = self.translation else {
            return write!(
                f,
                "dma-offset none (PIO: neither the device tree nor the board revision names the DMA window)"
            );
        };
        write!(f, "dma-offset {:#x}", translation.bus_base.wrapping_sub(translation.cpu_base))?;
        match self.source {
            DmaSource::Board => Ok(()),
            DmaSource::DeviceTree => write!(f, " (device tree dma-ranges)"),
            DmaSource::Revision { revision, stepping } => {
                write!(f, " (board revision {revision:#08x}: {stepping} stepping)")
            }
            DmaSource::Unknown => Ok(()),
        }
    }
}

/// The DMA translation of a board-table SD host.
pub fn decide(dma: SdDma, tree: Option<&DeviceTree<'_>>, revision: Option<u32>) -> DmaDecision {
    match dma {
        SdDma::Fixed(translation) => DmaDecision::fixed(translation),
        SdDma::Bcm2711Emmc2 => emmc2(tree, revision),
    }
}

fn emmc2(tree: Option<&DeviceTree<'_>>, revision: Option<u32>) -> DmaDecision {
    if let Some(translation) = tree.and_then(emmc2_from_tree) {
        return DmaDecision { translation: Some(translation), source: DmaSource::DeviceTree };
    }
    match revision.and_then(bcm2711_stepping) {
        Some((stepping, translation)) => DmaDecision {
            translation: Some(translation),
            source: DmaSource::Revision { revision: revision.unwrap_or_default(), stepping },
        },
        None => DmaDecision { translation: None, source: DmaSource::Unknown },
    }
}

/// The `dma-ranges` of the bus above the EMMC2 node (`emmc2bus`): the first entry, child
/// addresses in the bus's cells, parent addresses in its parent's (Devicetree Specification
/// §2.3.9); an empty property is the identity. `None` without such a node or property.
fn emmc2_from_tree(tree: &DeviceTree<'_>) -> Option<BusTranslation> {
    let emmc2 = tree.find_compatible(&[EMMC2_COMPATIBLE])?;
    let bus = tree.parent_of(&emmc2)?;
    let value = tree.property(bus.offset, "dma-ranges")?;
    ranges::bus_translation(value, bus.address_cells, bus.parent_address_cells, bus.size_cells)
}

/// The EMMC2 window a BCM2711 board revision implies (`BoardRevision::bcm2711_stepping`).
fn bcm2711_stepping(revision: u32) -> Option<(&'static str, BusTranslation)> {
    let stepping = BoardRevision(revision).bcm2711_stepping()?;
    let translation = match stepping {
        Bcm2711Stepping::B0 => EMMC2_B0_DMA,
        Bcm2711Stepping::C0 => EMMC2_C0_DMA,
    };
    Some((stepping.name(), translation))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devicetree::builder::{pi4_like, with_property_value, EMMC2_C0_DMA_RANGES};
    use std::string::ToString;

    fn leak(blob: std::vec::Vec<u8>) -> &'static [u8] {
        std::boxed::Box::leak(blob.into_boxed_slice())
    }

    #[test]
    fn the_device_tree_decides_the_emmc2_window() {
        // As shipped (B0): bus 0xC000_0000 -> CPU 0, 1 GiB; the revision is not consulted.
        let b0 = DeviceTree::parse(leak(pi4_like("x"))).unwrap();
        let decision = decide(SdDma::Bcm2711Emmc2, Some(&b0), Some(0x00c0_3115));
        assert_eq!(decision, DmaDecision { translation: Some(EMMC2_B0_DMA), source: DmaSource::DeviceTree });
        assert_eq!(decision.to_string(), "dma-offset 0xc0000000 (device tree dma-ranges)");
        // Edited by a C0 board's firmware: identity below the peripherals.
        let c0_blob =
            with_property_value(&pi4_like("x"), "/emmc2bus", "dma-ranges", &EMMC2_C0_DMA_RANGES).unwrap();
        let c0 = DeviceTree::parse(leak(c0_blob)).unwrap();
        let decision = decide(SdDma::Bcm2711Emmc2, Some(&c0), Some(0x00a0_3111));
        assert_eq!(decision.translation, Some(EMMC2_C0_DMA));
        assert_eq!(decision.to_string(), "dma-offset 0x0 (device tree dma-ranges)");
    }

    #[test]
    fn without_a_tree_the_board_revision_decides_and_else_pio() {
        let emmc2 = |revision| decide(SdDma::Bcm2711Emmc2, None, revision);
        // Pi 4B 1 GB rev 1.1 and 2 GB rev 1.2: B0.
        assert_eq!(emmc2(Some(0x00a0_3111)).translation, Some(EMMC2_B0_DMA));
        assert_eq!(emmc2(Some(0x00b0_3112)).translation, Some(EMMC2_B0_DMA));
        // Pi 4B rev 1.4 and 1.5 (QEMU's raspi4b answers b03115), Pi 400, CM4: C0.
        assert_eq!(emmc2(Some(0x00c0_3114)).translation, Some(EMMC2_C0_DMA));
        assert_eq!(emmc2(Some(0x00b0_3115)).translation, Some(EMMC2_C0_DMA));
        assert_eq!(emmc2(Some(0x00c0_3130)).translation, Some(EMMC2_C0_DMA));
        assert_eq!(emmc2(Some(0x00b0_3140)).translation, Some(EMMC2_C0_DMA));
        assert_eq!(
            emmc2(Some(0x00b0_3115)).to_string(),
            "dma-offset 0x0 (board revision 0xb03115: C0 stepping)"
        );
        // Not a BCM2711 board, an old-style code, or nothing: unknown, so PIO.
        for revision in [Some(0x00a0_2082), Some(0x0000_000e), None] {
            let decision = emmc2(revision);
            assert_eq!(decision, DmaDecision { translation: None, source: DmaSource::Unknown });
        }
        assert!(emmc2(None).to_string().starts_with("dma-offset none (PIO"));
        // A tree without emmc2bus (QEMU's own trees) also falls through to the revision.
        let mut b = crate::devicetree::builder::Builder::new();
        b.begin("").cells("#address-cells", &[1]).cells("#size-cells", &[1]).end();
        let bare = DeviceTree::parse(leak(b.finish())).unwrap();
        assert_eq!(
            decide(SdDma::Bcm2711Emmc2, Some(&bare), Some(0x00a0_3111)).translation,
            Some(EMMC2_B0_DMA)
        );
    }

    #[test]
    fn fixed_windows_are_passed_through() {
        let decision = decide(SdDma::Fixed(BusTranslation::IDENTITY), None, None);
        assert_eq!(decision, DmaDecision::fixed(BusTranslation::IDENTITY));
        assert_eq!(decision.to_string(), "dma-offset 0x0");
    }
}
