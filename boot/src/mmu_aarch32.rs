//! The AArch32 identity map: one first-level table of 4096 short-descriptor 1 MiB sections
//! (ARMv7 ARM B3.5.1 section descriptor, table B3-10 memory types with TEX remap off; the same
//! format on the ARM1176 with SCTLR.XP = 1; docs/aarch32-pis.md §4 items 6-9), the MMU enable in
//! the order circle's `memory.cpp` uses (data-cache maintenance by address is `hal::cache`'s).
//!
//! The kernel's [`Region`]s map as in the AArch64 tables: RAM Normal write-back, the DMA pool
//! Normal non-cacheable and execute-never, devices Shareable Device and execute-never. Anything
//! not covered stays unmapped (a translation fault).

use crate::mmu::{MemoryKind, Region};

/// Bytes one section maps.
pub const SECTION_BYTES: u64 = 1 << 20;
const ENTRIES: usize = 4096;
/// The highest address a short-descriptor table maps: 4 GiB.
pub const ADDRESS_LIMIT: u64 = 1 << 32;

/// The first-level table: 16 KiB, aligned to its size (TTBR0 with TTBCR.N = 0).
#[repr(C, align(16384))]
#[derive(Clone, Copy)]
pub struct SectionTable(pub [u32; ENTRIES]);

impl SectionTable {
    pub const EMPTY: SectionTable = SectionTable([0; ENTRIES]);
}

/// Why the table could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// A region boundary is not 1 MiB aligned.
    Misaligned { base: u64, size_bytes: u64 },
    /// A region reaches above 4 GiB.
    OutOfRange { base: u64, size_bytes: u64 },
}

const SECTION: u32 = 0b10;
const BUFFERABLE: u32 = 1 << 2;
const CACHEABLE: u32 = 1 << 3;
const EXECUTE_NEVER: u32 = 1 << 4;
/// AP[1:0] = 0b01: read/write at PL1, no access from User mode (APX = 0).
const PRIVILEGED_READ_WRITE: u32 = 0b01 << 10;
const TEX_SHIFT: u32 = 12;
const SHAREABLE: u32 = 1 << 16;
const BASE_MASK: u32 = 0xfff0_0000;

/// The descriptor of the section at `address` (domain 0).
pub fn section_descriptor(address: u32, kind: MemoryKind) -> u32 {
    let attributes = match kind {
        // TEX 001, C 1, B 1: Normal, inner and outer write-back, write-allocate.
        MemoryKind::Normal => (0b001 << TEX_SHIFT) | CACHEABLE | BUFFERABLE,
        // TEX 001, C 0, B 0: Normal non-cacheable; never executed.
        MemoryKind::NormalNonCacheable => (0b001 << TEX_SHIFT) | EXECUTE_NEVER,
        // TEX 000, C 0, B 1: Shareable Device; execute-never so that no speculative instruction
        // fetch reaches a register.
        MemoryKind::Device => BUFFERABLE | SHAREABLE | EXECUTE_NEVER,
    };
    (address & BASE_MASK) | SECTION | PRIVILEGED_READ_WRITE | attributes
}

fn kind_of(descriptor: u32) -> Option<MemoryKind> {
    if descriptor & 0b11 != SECTION {
        return None;
    }
    let tex = (descriptor >> TEX_SHIFT) & 0b111;
    let cacheable_bufferable = descriptor & (CACHEABLE | BUFFERABLE);
    match (tex, cacheable_bufferable) {
        (0b001, bits) if bits == CACHEABLE | BUFFERABLE => Some(MemoryKind::Normal),
        (0b001, 0) => Some(MemoryKind::NormalNonCacheable),
        (0b000, BUFFERABLE) => Some(MemoryKind::Device),
        _ => None,
    }
}

/// Fills `table` with sections for `regions`; later regions override earlier ones where they
/// overlap (the DMA pool inside RAM). Everything else is left unmapped.
pub fn build_section_map(regions: &[Region], table: &mut SectionTable) -> Result<(), MapError> {
    for region in regions {
        if region.base % SECTION_BYTES != 0 || region.size_bytes % SECTION_BYTES != 0 {
            return Err(MapError::Misaligned { base: region.base, size_bytes: region.size_bytes });
        }
        if region.base.checked_add(region.size_bytes).is_none_or(|end| end > ADDRESS_LIMIT) {
            return Err(MapError::OutOfRange { base: region.base, size_bytes: region.size_bytes });
        }
    }
    *table = SectionTable::EMPTY;
    for region in regions {
        let first = (region.base / SECTION_BYTES) as usize;
        let count = (region.size_bytes / SECTION_BYTES) as usize;
        for index in first..first + count {
            table.0[index] = section_descriptor((index as u64 * SECTION_BYTES) as u32, region.kind);
        }
    }
    Ok(())
}

/// Looks an address up: the output address and kind, or `None` when unmapped.
pub fn translate(table: &SectionTable, address: u32) -> Option<(u32, MemoryKind)> {
    let descriptor = table.0[(address >> 20) as usize];
    let kind = kind_of(descriptor)?;
    Some(((descriptor & BASE_MASK) | (address & !BASE_MASK), kind))
}

/// TTBR0: the table's address with the walk attributes (ARMv7 ARM B4.1.154 with the
/// Multiprocessing Extensions: IRGN = write-back write-allocate (IRGN[1] bit 0, IRGN[0] bit 6),
/// RGN = 0b01 outer write-back write-allocate; on the ARM1176 bit 0 is C, inner cacheable, and
/// bit 6 is reserved and read as written).
pub fn translation_base_value(table_address: u32) -> u32 {
    const INNER_WRITE_BACK: u32 = (1 << 6) | 1;
    const OUTER_WRITE_BACK_ALLOCATE: u32 = 0b01 << 3;
    (table_address & !0x3fff) | INNER_WRITE_BACK | OUTER_WRITE_BACK_ALLOCATE
}

/// SCTLR bits the kernel sets with the MMU: M (0), C (2), Z (11), I (12), U (22), XP (23). U and
/// XP select the ARMv6 unaligned-access model and the v6/v7 descriptor format on the ARM1176;
/// on ARMv7 they read as one.
pub const SCTLR_ENABLE_BITS: u32 = 1 | (1 << 2) | (1 << 11) | (1 << 12) | (1 << 22) | (1 << 23);

#[cfg(all(target_arch = "arm", target_os = "none"))]
mod target {
    use super::{translation_base_value, SCTLR_ENABLE_BITS};

    /// Turns on the MMU with data and instruction caches, in circle's order: TTBCR = 0, TTBR0,
    /// DACR = client for domain 0, invalidate caches, branch predictor and TLB, DSB, ISB, SCTLR.
    /// On the ARM1176 the whole data cache is invalidated with c7, c6, 0; ARMv7 has no such
    /// operation and the Cortex-A7 invalidates its caches at reset, so only the instruction cache
    /// is invalidated there. On the Cortex-A7 ACTLR.SMP is set first (Cortex-A7 MPCore TRM
    /// §4.3.31: before caches or the MMU are enabled); other cores' ACTLR is left alone.
    ///
    /// # Safety
    /// `table_address` must be a table from `build_section_map` that maps every address the
    /// kernel uses (its image, stacks, the table itself, devices), and it must stay in place.
    pub unsafe fn enable(table_address: u32, core: Option<crate::cpu::CoreModel>) {
        use crate::cpu::CoreModel;
        let is_arm1176 = core == Some(CoreModel::Arm1176);
        // SAFETY: CP15 writes that configure translation before it is enabled, cache and TLB
        // invalidation while nothing is cached (caches were off), then the SCTLR write; the
        // caller guarantees the table identity-maps everything in use.
        unsafe {
            if core == Some(CoreModel::CortexA7) {
                core::arch::asm!(
                    "mrc p15, 0, {value}, c1, c0, 1",
                    "orr {value}, {value}, #0x40",
                    "mcr p15, 0, {value}, c1, c0, 1",
                    value = out(reg) _,
                    options(nostack)
                );
            }
            core::arch::asm!(
                "mcr p15, 0, {zero}, c2, c0, 2",
                "mcr p15, 0, {ttbr}, c2, c0, 0",
                "mcr p15, 0, {client}, c3, c0, 0",
                zero = in(reg) 0u32,
                ttbr = in(reg) translation_base_value(table_address),
                client = in(reg) 1u32,
                options(nostack)
            );
            if is_arm1176 {
                core::arch::asm!("mcr p15, 0, {zero}, c7, c6, 0", zero = in(reg) 0u32, options(nostack));
            }
            core::arch::asm!(
                "mcr p15, 0, {zero}, c7, c5, 0",
                "mcr p15, 0, {zero}, c7, c5, 6",
                "mcr p15, 0, {zero}, c8, c7, 0",
                "mcr p15, 0, {zero}, c7, c10, 4",
                "mcr p15, 0, {zero}, c7, c5, 4",
                "mrc p15, 0, {value}, c1, c0, 0",
                "orr {value}, {value}, {bits}",
                "mcr p15, 0, {value}, c1, c0, 0",
                "mcr p15, 0, {zero}, c7, c5, 4",
                zero = in(reg) 0u32,
                bits = in(reg) SCTLR_ENABLE_BITS,
                value = out(reg) _,
                options(nostack)
            );
        }
    }
}

#[cfg(all(target_arch = "arm", target_os = "none"))]
pub use target::enable;

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;

    fn region(base: u64, size_bytes: u64, kind: MemoryKind) -> Region {
        Region { base, size_bytes, kind }
    }

    #[test]
    fn pi1_map_has_ram_pool_and_devices_where_they_belong() {
        // Pi 1 / Zero: 448 MiB of ARM RAM, peripherals at 0x2000_0000 (docs/aarch32-pis.md §1).
        let regions = [
            region(0, 0x1c00_0000, MemoryKind::Normal),
            region(0x0140_0000, 0x0400_0000, MemoryKind::NormalNonCacheable),
            region(0x2000_0000, 0x0100_0000, MemoryKind::Device),
        ];
        let mut table = Box::new(SectionTable::EMPTY);
        build_section_map(&regions, &mut table).unwrap();
        assert_eq!(translate(&table, 0x8000), Some((0x8000, MemoryKind::Normal)));
        assert_eq!(translate(&table, 0x0200_1234), Some((0x0200_1234, MemoryKind::NormalNonCacheable)));
        assert_eq!(translate(&table, 0x0540_0000), Some((0x0540_0000, MemoryKind::Normal)));
        assert_eq!(translate(&table, 0x2020_1018), Some((0x2020_1018, MemoryKind::Device)));
        assert_eq!(translate(&table, 0x1c00_0000), None);
        assert_eq!(translate(&table, 0x2100_0000), None);
        assert_eq!(translate(&table, 0xffff_fff0), None);
    }

    #[test]
    fn descriptors_follow_the_short_format() {
        // circle's RAM entry 0x0040E is TEX 000 WB; ours adds write-allocate (TEX 001).
        assert_eq!(section_descriptor(0x0010_0000, MemoryKind::Normal), 0x0010_140e);
        assert_eq!(section_descriptor(0x3f00_0000, MemoryKind::Device), 0x3f01_0416);
        assert_eq!(section_descriptor(0x0200_0000, MemoryKind::NormalNonCacheable), 0x0200_1412);
        for kind in [MemoryKind::Device, MemoryKind::NormalNonCacheable] {
            assert_ne!(section_descriptor(0, kind) & EXECUTE_NEVER, 0, "{kind:?}");
        }
        assert_eq!(section_descriptor(0, MemoryKind::Normal) & EXECUTE_NEVER, 0);
        assert_eq!(translation_base_value(0x0010_4000), 0x0010_4049);
    }

    #[test]
    fn misaligned_or_high_regions_are_errors() {
        let mut table = Box::new(SectionTable::EMPTY);
        assert_eq!(
            build_section_map(&[region(0x8000, SECTION_BYTES, MemoryKind::Normal)], &mut table),
            Err(MapError::Misaligned { base: 0x8000, size_bytes: SECTION_BYTES })
        );
        assert!(matches!(
            build_section_map(&[region(0xfff0_0000, 2 * SECTION_BYTES, MemoryKind::Device)], &mut table),
            Err(MapError::OutOfRange { .. })
        ));
        // The last section of the 4 GiB space can be mapped.
        build_section_map(&[region(0xfff0_0000, SECTION_BYTES, MemoryKind::Device)], &mut table).unwrap();
        assert_eq!(translate(&table, 0xffff_fffc).map(|t| t.1), Some(MemoryKind::Device));
    }
}
