//! The PCI host bridge's device tree properties (IEEE 1275 PCI Bus Binding §2.2.1.1 and the
//! Linux `pci-host-ecam-generic` binding): `ranges` entries with a three-cell PCI address
//! (phys.hi space code in bits 25:24 — 01 I/O, 10 32-bit memory, 11 64-bit memory — and the
//! prefetchable bit 30), a parent CPU address and a size; `dma-ranges` the same way inbound.

use super::{HostWindows, Window};
use crate::platform::BusTranslation;

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

/// Decodes entries; `parent_address_cells` is the host node's parent's `#address-cells`,
/// `size_cells` the host node's own `#size-cells` (PCI child addresses are always 3 cells).
pub fn decode(
    value: &[u8],
    parent_address_cells: usize,
    size_cells: usize,
) -> impl Iterator<Item = RangeEntry> + '_ {
    let entry_bytes = (3 + parent_address_cells + size_cells) * 4;
    value.chunks_exact(entry_bytes).filter_map(move |entry| {
        let phys_hi = cells(entry, 1)? as u32;
        Some(RangeEntry {
            space: (phys_hi >> 24) & 0b11,
            prefetchable: phys_hi & PREFETCHABLE != 0,
            pci_address: cells(&entry[4..], 2)?,
            parent_address: cells(&entry[12..], parent_address_cells)?,
            size_bytes: cells(&entry[(3 + parent_address_cells) * 4..], size_cells)?,
        })
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
