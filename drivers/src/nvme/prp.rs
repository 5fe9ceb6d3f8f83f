//! Physical Region Page lists for one NVMe command (NVMe Base Specification 1.4 §4.3 "Physical
//! Region Page Entry and List"; rules as in docs/nvme-and-fio.md §1.7): PRP1 may start anywhere
//! dword-aligned in a page, every later entry is page aligned; a transfer ending in the second
//! page puts that page in PRP2; a longer one puts a list pointer in PRP2, and a list page whose
//! entries do not all fit uses its last slot to point at the next list page.
#![forbid(unsafe_code)]

use core::fmt;

/// Bytes per PRP entry.
pub const ENTRY_BYTES: usize = 8;

/// PRP1 and PRP2 of a command, and how much of the command's list memory they use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrpPointers {
    pub prp1: u64,
    pub prp2: u64,
    /// Data entries written to the list (0 when PRP2 is unused or a data pointer).
    pub list_entries: usize,
    /// List pages written, chain pages included.
    pub list_pages: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrpError {
    /// A transfer of zero bytes.
    Empty,
    /// PRP entries must have bits 1:0 clear (NVMe 1.4 §4.3).
    MisalignedData { bus_address: u64 },
    /// The command's list memory is too small for this transfer.
    ListTooSmall { list_entries: usize, pages_needed: usize, pages_available: usize },
}

impl fmt::Display for PrpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrpError::Empty => write!(f, "empty transfer"),
            PrpError::MisalignedData { bus_address } => {
                write!(f, "data at bus address {bus_address:#x} is not 4-byte aligned")
            }
            PrpError::ListTooSmall { list_entries, pages_needed, pages_available } => write!(
                f,
                "{list_entries} PRP entries need {pages_needed} list pages, {pages_available} available"
            ),
        }
    }
}

/// Memory pages touched by `length_bytes` starting `first_offset_bytes` into a page.
pub fn pages_spanned(first_offset_bytes: usize, length_bytes: usize, page_bytes: usize) -> usize {
    (first_offset_bytes + length_bytes).div_ceil(page_bytes)
}

/// List pages holding `list_entries` data entries: one page holds `page/8` entries, and each
/// page but the last gives its final slot to the chain pointer.
pub fn list_pages_for_entries(list_entries: usize, page_bytes: usize) -> usize {
    let per_page = page_bytes / ENTRY_BYTES;
    if list_entries == 0 {
        0
    } else {
        (list_entries.saturating_sub(1)).div_ceil(per_page - 1).max(1)
    }
}

/// Data entries a list must hold for this transfer (0 when PRP1 and PRP2 suffice).
pub fn list_entries_for(first_offset_bytes: usize, length_bytes: usize, page_bytes: usize) -> usize {
    match pages_spanned(first_offset_bytes, length_bytes, page_bytes) {
        0..=2 => 0,
        pages => pages - 1,
    }
}

/// List pages one command needs in the worst case for transfers up to `max_transfer_bytes`
/// (data starting 4 bytes before a page boundary).
pub fn worst_case_list_pages(max_transfer_bytes: usize, page_bytes: usize) -> usize {
    let worst_offset = page_bytes - 4;
    list_pages_for_entries(list_entries_for(worst_offset, max_transfer_bytes, page_bytes), page_bytes)
}

/// Builds the PRPs for `length_bytes` at bus address `data_bus`. List entries go to the command's
/// list memory, `list_capacity_pages` contiguous pages at bus address `list_bus` (page aligned),
/// through `write_entry(index, value)`: `index` counts 8-byte slots from the start of that memory.
///
/// Inlined into the command's path: a transfer within two pages (any 4 KiB read) is a mask and
/// a compare with no list and no call; only a longer one goes on to [`build_list`].
#[inline(always)]
pub fn build(
    data_bus: u64,
    length_bytes: usize,
    page_bytes: usize,
    list_bus: u64,
    list_capacity_pages: usize,
    write_entry: impl FnMut(usize, u64),
) -> Result<PrpPointers, PrpError> {
    if length_bytes == 0 {
        return Err(PrpError::Empty);
    }
    if data_bus & 0x3 != 0 {
        return Err(PrpError::MisalignedData { bus_address: data_bus });
    }
    // Memory page sizes are powers of two (CC.MPS: 2 ^ (12 + MPS), NVMe 1.4 §3.1.5): the offset
    // is a mask, and one or two pages a comparison, on every command's path.
    debug_assert!(page_bytes.is_power_of_two());
    let page = page_bytes as u64;
    let first_offset = (data_bus & (page - 1)) as usize;
    let second_page = data_bus - first_offset as u64 + page;
    let end = first_offset + length_bytes;
    if end <= page_bytes {
        return Ok(PrpPointers { prp1: data_bus, prp2: 0, list_entries: 0, list_pages: 0 });
    }
    if end <= 2 * page_bytes {
        return Ok(PrpPointers { prp1: data_bus, prp2: second_page, list_entries: 0, list_pages: 0 });
    }
    build_list(data_bus, length_bytes, page_bytes, list_bus, list_capacity_pages, write_entry)
}

/// [`build`] for a transfer that spans more than two pages: PRP2 points at a list.
#[inline(never)]
fn build_list(
    data_bus: u64,
    length_bytes: usize,
    page_bytes: usize,
    list_bus: u64,
    list_capacity_pages: usize,
    mut write_entry: impl FnMut(usize, u64),
) -> Result<PrpPointers, PrpError> {
    let page = page_bytes as u64;
    let first_offset = (data_bus & (page - 1)) as usize;
    let second_page = data_bus - first_offset as u64 + page;
    let list_entries = list_entries_for(first_offset, length_bytes, page_bytes);
    let pages_needed = list_pages_for_entries(list_entries, page_bytes);
    if pages_needed > list_capacity_pages {
        return Err(PrpError::ListTooSmall {
            list_entries,
            pages_needed,
            pages_available: list_capacity_pages,
        });
    }
    let per_page = page_bytes / ENTRY_BYTES;
    let mut list_page = 0usize;
    let mut slot = 0usize;
    for entry in 0..list_entries {
        let remaining = list_entries - entry;
        if slot == per_page - 1 && remaining > 1 {
            write_entry(list_page * per_page + slot, list_bus + (list_page as u64 + 1) * page);
            list_page += 1;
            slot = 0;
        }
        write_entry(list_page * per_page + slot, second_page + entry as u64 * page);
        slot += 1;
    }
    Ok(PrpPointers { prp1: data_bus, prp2: list_bus, list_entries, list_pages: list_page + 1 })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::sim::{walk_prps, PrpWalkError};
    use super::*;
    use std::collections::BTreeMap;
    use std::vec;
    use std::vec::Vec;

    const PAGE: usize = 4096;
    const LIST_BUS: u64 = 0x20_0000_0000;

    /// List memory for the tests: one slot per 8-byte entry, `EMPTY` where nothing was written.
    struct ListMemory {
        slots: Vec<u64>,
        written: Vec<usize>,
    }

    const EMPTY: u64 = u64::MAX;

    impl ListMemory {
        fn new(pages: usize) -> Self {
            ListMemory { slots: vec![EMPTY; pages * PAGE / ENTRY_BYTES], written: Vec::new() }
        }

        fn clear(&mut self) {
            for index in self.written.drain(..) {
                self.slots[index] = EMPTY;
            }
        }
    }

    /// Builds PRPs into list memory, lets the simulated controller's independent walker read
    /// them back, and checks that the walk covers exactly the buffer, cut at page boundaries.
    fn build_and_walk_in(memory: &mut ListMemory, data_bus: u64, length: usize) -> PrpPointers {
        memory.clear();
        let capacity_pages = memory.slots.len() * ENTRY_BYTES / PAGE;
        let prps = {
            let ListMemory { slots, written } = &mut *memory;
            build(data_bus, length, PAGE, LIST_BUS, capacity_pages, |index, value| {
                assert!(index < slots.len(), "entry {index} outside the list memory");
                assert_eq!(slots[index], EMPTY, "slot {index} written twice");
                slots[index] = value;
                written.push(index);
            })
            .unwrap_or_else(|e| panic!("{length} bytes at {data_bus:#x}: {e}"))
        };
        let slots = &memory.slots;
        let read_qword = |bus: u64| -> Option<u64> {
            let index = (bus.checked_sub(LIST_BUS)? as usize) / ENTRY_BYTES;
            slots.get(index).copied().filter(|value| *value != EMPTY)
        };
        let segments = walk_prps(prps.prp1, prps.prp2, length, PAGE, read_qword)
            .unwrap_or_else(|e| panic!("{length} bytes at {data_bus:#x}: {e:?}"));
        // Independent model: the segments are the buffer cut at page boundaries, in order.
        let mut address = data_bus;
        let mut left = length;
        for (index, &(segment_address, segment_bytes)) in segments.iter().enumerate() {
            let chunk = left.min(PAGE - (address as usize % PAGE));
            assert_eq!(
                (segment_address, segment_bytes),
                (address, chunk),
                "segment {index} of {length} bytes at {data_bus:#x}"
            );
            address += chunk as u64;
            left -= chunk;
        }
        assert_eq!(left, 0, "{length} bytes at {data_bus:#x}: {left} bytes not covered");
        assert_eq!(memory.written.len(), prps.list_entries + prps.list_pages.saturating_sub(1));
        prps
    }

    fn build_and_walk(data_bus: u64, length: usize, capacity_pages: usize) -> PrpPointers {
        build_and_walk_in(&mut ListMemory::new(capacity_pages), data_bus, length)
    }

    #[test]
    fn every_size_at_aligned_and_unaligned_offsets() {
        let mut memory = ListMemory::new(worst_case_list_pages(8 << 20, PAGE));
        // Every 512-byte multiple from 512 B to 4 MiB + 8 KiB (1026 pages, three chained list
        // pages), page aligned, 512 bytes in and 4 bytes before a page end (the worst case).
        for offset in [0u64, 512, 4092] {
            let data_bus = 0x10_4000_0000 + offset;
            for length in (512..=(4 << 20) + 8192).step_by(512) {
                build_and_walk_in(&mut memory, data_bus, length);
            }
        }
        // More offsets, and sizes up to 8 MiB, at a stride that lands on every 512-byte position
        // within a page.
        for offset in [4u64, 2048, 3584] {
            let data_bus = 0x10_4000_0000 + offset;
            for length in (512..=(8 << 20)).step_by(4096 * 9 + 512) {
                build_and_walk_in(&mut memory, data_bus, length);
            }
        }
        build_and_walk_in(&mut memory, 0x10_4000_0000, 8 << 20);
        build_and_walk_in(&mut memory, 0x10_4000_0ffc, 8 << 20);
    }

    #[test]
    fn the_table_in_the_reference_holds() {
        // docs/nvme-and-fio.md §1.7, page-aligned buffers.
        let base = 0x4000_0000;
        let capacity = 4;
        let p = build_and_walk(base, 4096, capacity);
        assert_eq!((p.prp2, p.list_entries), (0, 0));
        let p = build_and_walk(base, 8192, capacity);
        assert_eq!((p.prp2, p.list_entries), (base + 4096, 0));
        let p = build_and_walk(base, 64 << 10, capacity);
        assert_eq!((p.prp2, p.list_entries, p.list_pages), (LIST_BUS, 15, 1));
        let p = build_and_walk(base, 1 << 20, capacity);
        assert_eq!((p.list_entries, p.list_pages), (255, 1));
        let p = build_and_walk(base, 2 << 20, capacity);
        assert_eq!((p.list_entries, p.list_pages), (511, 1), "511 entries fit one page");
        let p = build_and_walk(base, (2 << 20) + 4096, capacity);
        assert_eq!((p.list_entries, p.list_pages), (512, 1), "512 fill all slots");
        let p = build_and_walk(base, (2 << 20) + 8192, capacity);
        assert_eq!((p.list_entries, p.list_pages), (513, 2), "513 need a chain");
        // Unaligned start: one extra page.
        let p = build_and_walk(base + 512, 4096, capacity);
        assert_eq!((p.prp2, p.list_entries), (base + 4096, 0));
        let p = build_and_walk(base + 512, 8192, capacity);
        assert_eq!((p.prp2, p.list_entries), (LIST_BUS, 2));
        let p = build_and_walk(base + 4092, 8, capacity);
        assert_eq!((p.prp1, p.prp2), (base + 4092, base + 4096));
    }

    #[test]
    fn list_page_counts_match_the_chaining_rule() {
        assert_eq!(list_pages_for_entries(0, PAGE), 0);
        assert_eq!(list_pages_for_entries(1, PAGE), 1);
        assert_eq!(list_pages_for_entries(512, PAGE), 1);
        assert_eq!(list_pages_for_entries(513, PAGE), 2);
        assert_eq!(list_pages_for_entries(1023, PAGE), 2);
        assert_eq!(list_pages_for_entries(1024, PAGE), 3);
        // 4 MiB starting just before a page boundary: 1025 pages, 1024 list entries.
        assert_eq!(worst_case_list_pages(4 << 20, PAGE), 3);
        assert_eq!(worst_case_list_pages(2 << 20, PAGE), 1);
        assert_eq!(worst_case_list_pages(8192, PAGE), 1);
        assert_eq!(worst_case_list_pages(4096, PAGE), 0);
        // Larger pages hold more entries.
        assert_eq!(list_pages_for_entries(2048, 16384), 1);
    }

    #[test]
    fn chained_pages_are_linked_in_order() {
        let length = 5 << 20; // 1280 pages, 1279 list entries, 3 list pages
        let prps = build_and_walk(0x8000_0000, length, 3);
        assert_eq!((prps.list_entries, prps.list_pages), (1279, 3));
        let mut slots = BTreeMap::new();
        build(0x8000_0000, length, PAGE, LIST_BUS, 3, |i, v| {
            slots.insert(i, v);
        })
        .unwrap();
        assert_eq!(slots[&511], LIST_BUS + 4096, "last slot of page 0 chains");
        assert_eq!(slots[&1023], LIST_BUS + 8192, "last slot of page 1 chains");
        assert_eq!(slots[&512], 0x8000_0000 + 512 * 4096);
    }

    #[test]
    fn bad_transfers_are_refused() {
        let noop = |_: usize, _: u64| {};
        assert_eq!(build(0x1000, 0, PAGE, LIST_BUS, 1, noop), Err(PrpError::Empty));
        assert_eq!(
            build(0x1002, 512, PAGE, LIST_BUS, 1, noop),
            Err(PrpError::MisalignedData { bus_address: 0x1002 })
        );
        assert_eq!(
            build(0x1000, 3 << 20, PAGE, LIST_BUS, 1, noop),
            Err(PrpError::ListTooSmall { list_entries: 767, pages_needed: 2, pages_available: 1 })
        );
        // The walker rejects what a controller would reject.
        assert_eq!(
            walk_prps(0x1000, 0x2200, 8192, PAGE, |_| None),
            Err(PrpWalkError::MisalignedEntry { entry: 0x2200 })
        );
    }
}
