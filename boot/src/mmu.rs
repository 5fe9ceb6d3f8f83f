//! Identity-mapped translation tables and MMU enable (Arm ARM D8 "The AArch64 Virtual Memory
//! System Architecture": 4 KiB granule, 48-bit input addresses starting at level 0, block
//! descriptors of 1 GiB at level 1 and 2 MiB at level 2).
//!
//! The kernel describes memory as [`Region`]s: RAM Normal write-back, the DMA pool Normal
//! non-cacheable, devices Device-nGnRE. Later regions override earlier ones where they overlap
//! (the DMA pool lies inside RAM). Regions are mapped at 2 MiB granularity, so every boundary
//! must be 2 MiB aligned; anything not covered stays unmapped and faults, which is how the kernel
//! stops rather than touching an address nobody described.

/// Memory types, as indices into MAIR_EL1 ([`MAIR_VALUE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// Device-nGnRE: registers.
    Device,
    /// Normal, inner and outer write-back, read and write allocate: RAM.
    Normal,
    /// Normal, non-cacheable: the DMA pool, so devices and CPU agree without cache maintenance.
    NormalNonCacheable,
}

impl MemoryKind {
    fn attribute_index(self) -> u64 {
        match self {
            MemoryKind::Device => 0,
            MemoryKind::Normal => 1,
            MemoryKind::NormalNonCacheable => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Device => "device nGnRE",
            MemoryKind::Normal => "normal write-back",
            MemoryKind::NormalNonCacheable => "normal non-cacheable",
        }
    }
}

/// MAIR_EL1: attr0 Device-nGnRE (0x04), attr1 Normal WB RA/WA (0xFF), attr2 Normal NC (0x44).
pub const MAIR_VALUE: u64 = 0x04 | (0xff << 8) | (0x44 << 16);

/// A range of physical addresses and how to map it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub base: u64,
    pub size_bytes: u64,
    pub kind: MemoryKind,
}

impl Region {
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size_bytes)
    }
}

pub const BLOCK_2M: u64 = 2 << 20;
pub const BLOCK_1G: u64 = 1 << 30;
const ENTRIES: usize = 512;
/// The highest address the tables can map: 48-bit input addresses (T0SZ = 16).
pub const ADDRESS_LIMIT: u64 = 1 << 48;

/// One 4 KiB translation table.
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
pub struct Table(pub [u64; ENTRIES]);

impl Table {
    pub const EMPTY: Table = Table([0; ENTRIES]);
}

/// Why the tables could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// A region boundary is not 2 MiB aligned.
    Misaligned { base: u64, size_bytes: u64 },
    /// A region reaches above [`ADDRESS_LIMIT`].
    OutOfRange { base: u64, size_bytes: u64 },
    /// More tables were needed than the storage holds.
    OutOfTables { available: usize },
}

const DESCRIPTOR_VALID: u64 = 1;
const DESCRIPTOR_TABLE: u64 = 0b11;
const DESCRIPTOR_BLOCK: u64 = 0b01;
const ACCESS_FLAG: u64 = 1 << 10;
const INNER_SHAREABLE: u64 = 0b11 << 8;
const PRIVILEGED_EXECUTE_NEVER: u64 = 1 << 53;
const UNPRIVILEGED_EXECUTE_NEVER: u64 = 1 << 54;
const OUTPUT_ADDRESS_MASK: u64 = 0x0000_ffff_ffff_f000;

fn block_descriptor(address: u64, kind: MemoryKind) -> u64 {
    let mut descriptor = address | DESCRIPTOR_BLOCK | ACCESS_FLAG | (kind.attribute_index() << 2);
    descriptor |= UNPRIVILEGED_EXECUTE_NEVER;
    match kind {
        MemoryKind::Normal => descriptor |= INNER_SHAREABLE,
        MemoryKind::NormalNonCacheable => descriptor |= INNER_SHAREABLE | PRIVILEGED_EXECUTE_NEVER,
        // Device memory must never be executable: speculative instruction fetches would reach it.
        MemoryKind::Device => descriptor |= PRIVILEGED_EXECUTE_NEVER,
    }
    descriptor
}

/// The kind of the last region that overlaps `[start, start + length)`, if any.
fn kind_over(regions: &[Region], start: u64, length: u64) -> Option<MemoryKind> {
    regions
        .iter()
        .rev()
        .find(|region| region.base < start + length && region.end() > start)
        .map(|region| region.kind)
}

/// The kind of a whole 1 GiB block when one kind covers all of it (or nothing does).
fn uniform_kind_of_gigabyte(regions: &[Region], start: u64) -> Option<Option<MemoryKind>> {
    let last_overlapping = regions.iter().rev().find(|r| r.base < start + BLOCK_1G && r.end() > start);
    match last_overlapping {
        None => Some(None),
        Some(region) if region.base <= start && region.end() >= start + BLOCK_1G => Some(Some(region.kind)),
        Some(_) => None,
    }
}

/// Builds identity-mapping tables for `regions` into `tables` and returns the index of the root
/// (level 0) table. Table descriptors hold the tables' own addresses, so `tables` must be where
/// the MMU will find them (identity-mapped memory in the kernel).
pub fn build_identity_map(regions: &[Region], tables: &mut [Table]) -> Result<usize, MapError> {
    for region in regions {
        if region.base % BLOCK_2M != 0 || region.size_bytes % BLOCK_2M != 0 {
            return Err(MapError::Misaligned { base: region.base, size_bytes: region.size_bytes });
        }
        if region.end() > ADDRESS_LIMIT || region.base.checked_add(region.size_bytes).is_none() {
            return Err(MapError::OutOfRange { base: region.base, size_bytes: region.size_bytes });
        }
    }
    let available = tables.len();
    let mut used = 0usize;
    let mut allocate = |tables: &mut [Table]| -> Result<usize, MapError> {
        if used == available {
            return Err(MapError::OutOfTables { available });
        }
        tables[used] = Table::EMPTY;
        used += 1;
        Ok(used - 1)
    };
    let root = allocate(tables)?;
    let table_address = |tables: &[Table], index: usize| &tables[index] as *const Table as u64;

    // Every 1 GiB block that some region touches, in ascending order.
    let mut gigabyte = 0u64;
    while gigabyte < ADDRESS_LIMIT / BLOCK_1G {
        let start = gigabyte * BLOCK_1G;
        let next_region_start = regions.iter().filter(|r| r.end() > start).map(|r| r.base.max(start)).min();
        let Some(next_start) = next_region_start else {
            break;
        };
        if next_start >= start + BLOCK_1G {
            gigabyte = next_start / BLOCK_1G;
            continue;
        }

        let level0_index = (start >> 39) as usize % ENTRIES;
        let level1_index = (start >> 30) as usize % ENTRIES;
        let level1 = match tables[root].0[level0_index] {
            0 => {
                let index = allocate(tables)?;
                tables[root].0[level0_index] = table_address(tables, index) | DESCRIPTOR_TABLE;
                index
            }
            descriptor => index_of(tables, descriptor & OUTPUT_ADDRESS_MASK),
        };

        match uniform_kind_of_gigabyte(regions, start) {
            Some(Some(kind)) => tables[level1].0[level1_index] = block_descriptor(start, kind),
            Some(None) => {}
            None => {
                let level2 = allocate(tables)?;
                tables[level1].0[level1_index] = table_address(tables, level2) | DESCRIPTOR_TABLE;
                for (slot, entry) in tables[level2].0.iter_mut().enumerate() {
                    let block_start = start + slot as u64 * BLOCK_2M;
                    if let Some(kind) = kind_over(regions, block_start, BLOCK_2M) {
                        *entry = block_descriptor(block_start, kind);
                    }
                }
            }
        }
        gigabyte += 1;
    }
    Ok(root)
}

fn index_of(tables: &[Table], address: u64) -> usize {
    let base = tables.as_ptr() as u64;
    ((address - base) / core::mem::size_of::<Table>() as u64) as usize
}

/// Looks an address up in tables built by [`build_identity_map`]: the output address and memory
/// kind, or `None` when unmapped. Used by tests and by the kernel to describe its map.
pub fn translate(tables: &[Table], root: usize, address: u64) -> Option<(u64, MemoryKind)> {
    let level0 = tables[root].0[((address >> 39) & 0x1ff) as usize];
    if level0 & DESCRIPTOR_VALID == 0 {
        return None;
    }
    let level1 = tables[index_of(tables, level0 & OUTPUT_ADDRESS_MASK)].0[((address >> 30) & 0x1ff) as usize];
    let (descriptor, block_size) = match level1 & 0b11 {
        DESCRIPTOR_BLOCK => (level1, BLOCK_1G),
        DESCRIPTOR_TABLE => {
            let level2 =
                tables[index_of(tables, level1 & OUTPUT_ADDRESS_MASK)].0[((address >> 21) & 0x1ff) as usize];
            if level2 & 0b11 != DESCRIPTOR_BLOCK {
                return None;
            }
            (level2, BLOCK_2M)
        }
        _ => return None,
    };
    let kind = match (descriptor >> 2) & 0b111 {
        0 => MemoryKind::Device,
        1 => MemoryKind::Normal,
        _ => MemoryKind::NormalNonCacheable,
    };
    let output = (descriptor & OUTPUT_ADDRESS_MASK & !(block_size - 1)) | (address & (block_size - 1));
    Some((output, kind))
}

/// TCR_EL1 for 48-bit identity mapping through TTBR0 with 4 KiB pages, write-back cacheable,
/// inner-shareable table walks; TTBR1 walks disabled; IPS from ID_AA64MMFR0_EL1.PARange.
pub fn translation_control_value(parange: u64) -> u64 {
    let t0sz = 16u64;
    let inner_write_back = 0b01 << 8;
    let outer_write_back = 0b01 << 10;
    let inner_shareable = 0b11 << 12;
    let granule_4k_ttbr0 = 0b00 << 14;
    let disable_ttbr1_walks = 1 << 23;
    let granule_4k_ttbr1 = 0b10 << 30;
    let intermediate_physical_size = (parange.min(5)) << 32;
    t0sz | inner_write_back
        | outer_write_back
        | inner_shareable
        | granule_4k_ttbr0
        | disable_ttbr1_walks
        | granule_4k_ttbr1
        | intermediate_physical_size
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
mod target {
    use aarch64_cpu::asm::barrier;
    use aarch64_cpu::registers::{ReadWriteable, Writeable, MAIR_EL1, SCTLR_EL1, TCR_EL1, TTBR0_EL1};

    /// Loads the tables and turns on the MMU with data and instruction caches.
    ///
    /// # Safety
    /// `root_table_address` must be a level-0 table from `build_identity_map` that identity-maps
    /// every address the kernel uses (its image, stack, the tables themselves, devices), and the
    /// tables must stay in place for the rest of the run.
    pub unsafe fn enable(root_table_address: u64, translation_control: u64) {
        MAIR_EL1.set(super::MAIR_VALUE);
        TCR_EL1.set(translation_control);
        TTBR0_EL1.set(root_table_address);
        barrier::isb(barrier::SY);
        // SAFETY: invalidating all EL1 TLB entries has no effect beyond forgetting translations,
        // and nothing is translated yet (the MMU is off).
        unsafe { core::arch::asm!("tlbi vmalle1", "dsb ish", "isb", options(nostack)) };
        SCTLR_EL1.modify(SCTLR_EL1::M::Enable + SCTLR_EL1::C::Cacheable + SCTLR_EL1::I::Cacheable);
        barrier::isb(barrier::SY);
    }
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub use target::enable;

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    fn region(base: u64, size_bytes: u64, kind: MemoryKind) -> Region {
        Region { base, size_bytes, kind }
    }

    #[test]
    fn pi3_map_has_ram_pool_and_devices_where_they_belong() {
        // Pi 3: RAM below the peripherals at 0x3F00_0000, ARM-local block at 0x4000_0000.
        let regions = [
            region(0, 0x3f00_0000, MemoryKind::Normal),
            region(0x0100_0000, 0x0400_0000, MemoryKind::NormalNonCacheable),
            region(0x3f00_0000, 0x0100_0000, MemoryKind::Device),
            region(0x4000_0000, BLOCK_2M, MemoryKind::Device),
        ];
        let mut tables = vec![Table::EMPTY; 8];
        let root = build_identity_map(&regions, &mut tables).unwrap();
        assert_eq!(translate(&tables, root, 0x8_0000), Some((0x8_0000, MemoryKind::Normal)));
        assert_eq!(
            translate(&tables, root, 0x0200_1234),
            Some((0x0200_1234, MemoryKind::NormalNonCacheable))
        );
        assert_eq!(translate(&tables, root, 0x0500_0000), Some((0x0500_0000, MemoryKind::Normal)));
        assert_eq!(translate(&tables, root, 0x3f20_1000), Some((0x3f20_1000, MemoryKind::Device)));
        assert_eq!(translate(&tables, root, 0x4000_0040), Some((0x4000_0040, MemoryKind::Device)));
        assert_eq!(translate(&tables, root, 0x4020_0000), None);
        assert_eq!(translate(&tables, root, 0x8000_0000), None);
    }

    #[test]
    fn whole_gigabytes_use_level1_blocks_and_high_windows_work() {
        // QEMU virt: devices below 1 GiB, RAM above, ECAM at 0x40_1000_0000, 64-bit MMIO at 512 GiB.
        let regions = [
            region(0, 0x4000_0000, MemoryKind::Device),
            region(0x4000_0000, 0x4000_0000, MemoryKind::Normal),
            region(0x40_1000_0000, 0x1000_0000, MemoryKind::Device),
            region(0x80_0000_0000, 0x80_0000_0000, MemoryKind::Device),
        ];
        let mut tables = vec![Table::EMPTY; 8];
        let root = build_identity_map(&regions, &mut tables).unwrap();
        assert_eq!(translate(&tables, root, 0x0900_0000).map(|t| t.1), Some(MemoryKind::Device));
        assert_eq!(translate(&tables, root, 0x7fff_fff8).map(|t| t.1), Some(MemoryKind::Normal));
        assert_eq!(translate(&tables, root, 0x40_1000_8000).map(|t| t.1), Some(MemoryKind::Device));
        assert_eq!(translate(&tables, root, 0x40_0fff_f000), None);
        assert_eq!(translate(&tables, root, 0xff_ffff_f000).map(|t| t.1), Some(MemoryKind::Device));
        assert_eq!(translate(&tables, root, 0x100_0000_0000), None);
        // Root, one level-1 table per 512 GiB, one level-2 table for the ECAM's partial gigabyte.
        assert!(tables.iter().filter(|t| t.0.iter().any(|&d| d != 0)).count() <= 4);
    }

    #[test]
    fn device_and_pool_blocks_are_never_executable() {
        for kind in [MemoryKind::Device, MemoryKind::NormalNonCacheable] {
            let descriptor = block_descriptor(0x20_0000, kind);
            assert_ne!(descriptor & PRIVILEGED_EXECUTE_NEVER, 0, "{kind:?}");
        }
        assert_eq!(block_descriptor(0x20_0000, MemoryKind::Normal) & PRIVILEGED_EXECUTE_NEVER, 0);
    }

    #[test]
    fn misaligned_or_too_many_tables_are_errors() {
        let mut tables = vec![Table::EMPTY; 2];
        assert_eq!(
            build_identity_map(&[region(0x1000, BLOCK_2M, MemoryKind::Normal)], &mut tables),
            Err(MapError::Misaligned { base: 0x1000, size_bytes: BLOCK_2M })
        );
        let scattered =
            [region(0, BLOCK_2M, MemoryKind::Normal), region(BLOCK_1G, BLOCK_2M, MemoryKind::Normal)];
        assert_eq!(build_identity_map(&scattered, &mut tables), Err(MapError::OutOfTables { available: 2 }));
        assert!(matches!(
            build_identity_map(
                &[region(ADDRESS_LIMIT - BLOCK_2M, 2 * BLOCK_2M, MemoryKind::Device)],
                &mut tables
            ),
            Err(MapError::OutOfRange { .. })
        ));
    }

    #[test]
    fn tcr_fields() {
        let tcr = translation_control_value(2);
        assert_eq!(tcr & 0x3f, 16);
        assert_eq!((tcr >> 32) & 0b111, 2);
        assert_ne!(tcr & (1 << 23), 0);
    }
}
