//! The PCI host bridge's device tree properties (IEEE 1275 PCI Bus Binding §2.2.1.1 and the
//! Linux `pci-host-ecam-generic` binding): `ranges` entries with a three-cell PCI address
//! (phys.hi space code in bits 25:24 — 01 I/O, 10 32-bit memory, 11 64-bit memory — and the
//! prefetchable bit 30), a parent CPU address and a size; `dma-ranges` the same way inbound.
//! The same triples describe any bus's `dma-ranges` (Devicetree Specification §2.3.9), so
//! [`bus_translation`] reads them for simple buses too (BCM2711's `emmc2bus`).
#![forbid(unsafe_code)]

use super::{HostWindows, Window};
use hal::platform::BusTranslation;

const SPACE_IO: u32 = 0b01;
const SPACE_MEMORY32: u32 = 0b10;
const SPACE_MEMORY64: u32 = 0b11;
const PREFETCHABLE: u32 = 1 << 30;

fn cells(bytes: &[u8], count: usize) -> Option<u64> {
    let mut value = 0u64;
    for index in 0..count {
        let word = u32::from_be_bytes(bytes.get(index * 4..index * 4 + 4)?.try_into().ok()?);
        value = (value << 32) | u64::from(word);
    }
    Some(value)
}

/// One decoded `ranges` or `dma-ranges` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeEntry {
    pub space: u32,
    pub prefetchable: bool,
    pub pci_address: u64,
    pub parent_address: u64,
    pub size_bytes: u64,
}

/// One `ranges`/`dma-ranges` triple with the child address still in its cells.
struct RawEntry<'a> {
    child: &'a [u8],
    parent_address: u64,
    size_bytes: u64,
}

/// Splits a `ranges`/`dma-ranges` value into its triples of `child_address_cells`,
/// `parent_address_cells` and `size_cells` cells.
fn raw_entries(
    value: &[u8],
    child_address_cells: usize,
    parent_address_cells: usize,
    size_cells: usize,
) -> impl Iterator<Item = RawEntry<'_>> {
    let entry_bytes = (child_address_cells + parent_address_cells + size_cells) * 4;
    value.chunks_exact(entry_bytes.max(4)).filter_map(move |entry| {
        let (child, rest) = entry.split_at_checked(child_address_cells * 4)?;
        Some(RawEntry {
            child,
            parent_address: cells(rest, parent_address_cells)?,
            size_bytes: cells(rest.get(parent_address_cells * 4..)?, size_cells)?,
        })
    })
}

/// Decodes entries; `parent_address_cells` is the host node's parent's `#address-cells`,
/// `size_cells` the host node's own `#size-cells` (PCI child addresses are always 3 cells).
pub fn decode(
    value: &[u8],
    parent_address_cells: usize,
    size_cells: usize,
) -> impl Iterator<Item = RangeEntry> + '_ {
    raw_entries(value, 3, parent_address_cells, size_cells).filter_map(|entry| {
        let phys_hi = cells(entry.child, 1)? as u32;
        Some(RangeEntry {
            space: (phys_hi >> 24) & 0b11,
            prefetchable: phys_hi & PREFETCHABLE != 0,
            pci_address: cells(&entry.child[4..], 2)?,
            parent_address: entry.parent_address,
            size_bytes: entry.size_bytes,
        })
    })
}

/// How devices on a simple bus see memory, from the bus node's `dma-ranges`: the first entry
/// (child address in the bus's `#address-cells`, parent address in its parent's, size in the
/// bus's `#size-cells`); an empty property is the identity (Devicetree Specification §2.3.9).
/// `None` when the value holds no whole entry.
pub fn bus_translation(
    dma_ranges: &[u8],
    child_address_cells: usize,
    parent_address_cells: usize,
    size_cells: usize,
) -> Option<BusTranslation> {
    if dma_ranges.is_empty() {
        return Some(BusTranslation::IDENTITY);
    }
    let entry = raw_entries(dma_ranges, child_address_cells, parent_address_cells, size_cells).next()?;
    Some(BusTranslation {
        cpu_base: entry.parent_address,
        bus_base: cells(entry.child, child_address_cells)?,
        size_bytes: entry.size_bytes,
    })
}

/// The memory windows named by `ranges` (I/O space is skipped: nothing here uses it). The first
/// window of each kind wins.
pub fn host_windows(ranges: &[u8], parent_address_cells: usize, size_cells: usize) -> HostWindows {
    let mut windows = HostWindows::default();
    for entry in decode(ranges, parent_address_cells, size_cells) {
        let window = Window {
            cpu_base: entry.parent_address,
            pci_base: entry.pci_address,
            size_bytes: entry.size_bytes,
            prefetchable: entry.prefetchable,
        };
        let above_4g = entry.pci_address >= 1 << 32;
        match entry.space {
            SPACE_MEMORY64 if above_4g && windows.memory64.is_none() => windows.memory64 = Some(window),
            SPACE_MEMORY32 | SPACE_MEMORY64 if !above_4g && windows.memory32.is_none() => {
                windows.memory32 = Some(window)
            }
            _ => {}
        }
    }
    windows
}

/// How devices behind the host see RAM: from the largest memory `dma-ranges` entry (a Pi 5's
/// pcie1 also lists a 4 KiB window onto its MSI controller), or the identity when there is none
/// (QEMU virt has no `dma-ranges`: devices see CPU physical addresses).
pub fn dma_translation(
    dma_ranges: Option<&[u8]>,
    parent_address_cells: usize,
    size_cells: usize,
) -> BusTranslation {
    dma_ranges
        .and_then(|value| {
            decode(value, parent_address_cells, size_cells)
                .filter(|e| e.space != SPACE_IO)
                .max_by_key(|e| e.size_bytes)
        })
        .map(|entry| BusTranslation {
            cpu_base: entry.parent_address,
            bus_base: entry.pci_address,
            size_bytes: entry.size_bytes,
        })
        .unwrap_or(BusTranslation::IDENTITY)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn be_bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|word| word.to_be_bytes()).collect()
    }

    #[test]
    fn simple_bus_dma_ranges_give_a_translation() {
        // BCM2711 emmc2bus as shipped (B0) and as a C0 board's firmware edits it: 2 child cells,
        // 2 parent cells, 1 size cell (Linux bcm2711.dtsi; docs/hardware.md §1.4).
        let b0 = be_bytes(&[0, 0xc000_0000, 0, 0, 0x4000_0000]);
        assert_eq!(
            bus_translation(&b0, 2, 2, 1),
            Some(BusTranslation { cpu_base: 0, bus_base: 0xc000_0000, size_bytes: 0x4000_0000 })
        );
        let c0 = be_bytes(&[0, 0, 0, 0, 0xfc00_0000]);
        assert_eq!(
            bus_translation(&c0, 2, 2, 1),
            Some(BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0xfc00_0000 })
        );
        // Empty: identity. Shorter than one entry: nothing.
        assert_eq!(bus_translation(&[], 2, 2, 1), Some(BusTranslation::IDENTITY));
        assert_eq!(bus_translation(&b0[..16], 2, 2, 1), None);
        // The PCI decoder on the same splitter: phys.hi space and prefetchable bits.
        let pci = be_bytes(&[
            0x4300_0000,
            0x4,
            0,
            0x18,
            0,
            0x3,
            0,
            0x0200_0000,
            0,
            0x8000_0000,
            0x1b,
            0x8000_0000,
            0,
            0x8000_0000,
        ]);
        let entries: Vec<RangeEntry> = decode(&pci, 2, 2).collect();
        assert_eq!(
            entries,
            [
                RangeEntry {
                    space: SPACE_MEMORY64,
                    prefetchable: true,
                    pci_address: 0x4_0000_0000,
                    parent_address: 0x18_0000_0000,
                    size_bytes: 0x3_0000_0000,
                },
                RangeEntry {
                    space: SPACE_MEMORY32,
                    prefetchable: false,
                    pci_address: 0x8000_0000,
                    parent_address: 0x1b_8000_0000,
                    size_bytes: 0x8000_0000,
                },
            ]
        );
        // One-cell addresses.
        let narrow = be_bytes(&[0x8000_0000, 0x1000, 0x100]);
        assert_eq!(
            bus_translation(&narrow, 1, 1, 1),
            Some(BusTranslation { cpu_base: 0x1000, bus_base: 0x8000_0000, size_bytes: 0x100 })
        );
    }
}
