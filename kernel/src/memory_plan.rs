//! Where the heap and the DMA pool go, and the regions the MMU maps (docs/architecture.md "Memory": identity map, RAM
//! normal write-back, a DMA pool normal non-cacheable, devices nGnRE). Pure arithmetic, tested on
//! the host; `runtime` applies it.
#![forbid(unsafe_code)]

use crate::board::Span;
use boot::mmu::{MemoryKind, Region, BLOCK_2M};
use core::fmt;

/// Most memory ranges the plan handles (RAM banks, device spans, reservations).
pub const MAX_SPANS: usize = 16;
pub const MAX_REGIONS: usize = 2 * MAX_SPANS + 4;

#[derive(Clone, Debug)]
pub struct MemoryPlan {
    pub heap: Span,
    pub dma_pool: Span,
    pub regions: heapless::Vec<Region, MAX_REGIONS>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// No RAM bank holds the image.
    ImageOutsideRam {
        image: Span,
    },
    /// Not even the smallest heap or pool fits.
    NoRoom {
        what: &'static str,
        bytes: u64,
    },
    TooManyRanges,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::ImageOutsideRam { image } => {
                write!(f, "the kernel image at {:#x}-{:#x} is not in any RAM bank", image.base, image.end())
            }
            PlanError::NoRoom { what, bytes } => {
                write!(f, "no room for the {what} ({bytes} bytes)")
            }
            PlanError::TooManyRanges => write!(f, "more memory ranges than the kernel can map"),
        }
    }
}

pub struct PlanRequest<'a> {
    pub ram: &'a [Span],
    pub devices: &'a [Span],
    pub image: Span,
    /// Ranges that must stay untouched (the device tree blob, firmware reservations).
    pub reserved: &'a [Span],
    /// Ranges that must be mapped as normal memory even if outside RAM (the device tree blob).
    pub keep_mapped: &'a [Span],
    pub dma_limit: u64,
    pub heap_bytes: u64,
    /// Pool sizes to try, largest first.
    pub dma_pool_bytes: &'a [u64],
}

fn align_up(value: u64, alignment: u64) -> u64 {
    value.div_ceil(alignment) * alignment
}

fn align_down(value: u64, alignment: u64) -> u64 {
    value / alignment * alignment
}

fn overlaps(a: Span, b: Span) -> bool {
    a.base < b.end() && b.base < a.end()
}

/// The first 2 MiB-aligned range of `bytes` at or above `floor`, inside one RAM bank, below
/// `limit` and clear of everything in `avoid`.
fn place(ram: &[Span], avoid: &[Span], floor: u64, limit: u64, bytes: u64) -> Option<Span> {
    for bank in ram {
        let mut candidate = align_up(bank.base.max(floor), BLOCK_2M);
        let bank_end = align_down(bank.end().min(limit), BLOCK_2M);
        while candidate.checked_add(bytes)? <= bank_end {
            let span = Span::new(candidate, bytes);
            match avoid.iter().find(|reserved| overlaps(span, **reserved)) {
                Some(blocker) => candidate = align_up(blocker.end(), BLOCK_2M),
                None => return Some(span),
            }
        }
    }
    None
}

pub fn plan(request: &PlanRequest<'_>) -> Result<MemoryPlan, PlanError> {
    if !request.ram.iter().any(|bank| request.image.base >= bank.base && request.image.end() <= bank.end()) {
        return Err(PlanError::ImageOutsideRam { image: request.image });
    }
    let mut avoid: heapless::Vec<Span, { MAX_SPANS + 3 }> = heapless::Vec::new();
    for span in request.reserved.iter().chain(core::iter::once(&request.image)) {
        avoid.push(*span).map_err(|_| PlanError::TooManyRanges)?;
    }
    let floor = request.image.end();
    let heap = place(request.ram, &avoid, floor, u64::MAX, request.heap_bytes)
        .ok_or(PlanError::NoRoom { what: "heap", bytes: request.heap_bytes })?;
    avoid.push(heap).map_err(|_| PlanError::TooManyRanges)?;
    let smallest_pool = request.dma_pool_bytes.last().copied().unwrap_or(0);
    let dma_pool = request
        .dma_pool_bytes
        .iter()
        .find_map(|&bytes| place(request.ram, &avoid, floor, request.dma_limit, bytes))
        .ok_or(PlanError::NoRoom { what: "DMA pool", bytes: smallest_pool })?;

    let mut regions: heapless::Vec<Region, MAX_REGIONS> = heapless::Vec::new();
    let mut add = |span: Span, kind: MemoryKind, round_outward: bool| -> Result<(), PlanError> {
        let (base, end) = if round_outward {
            (align_down(span.base, BLOCK_2M), align_up(span.end(), BLOCK_2M))
        } else {
            (align_up(span.base, BLOCK_2M), align_down(span.end(), BLOCK_2M))
        };
        if end > base {
            regions
                .push(Region { base, size_bytes: end - base, kind })
                .map_err(|_| PlanError::TooManyRanges)?;
        }
        Ok(())
    };
    for bank in request.ram {
        add(*bank, MemoryKind::Normal, false)?;
    }
    // The image's first 2 MiB may be shared with a bank boundary that rounding dropped.
    add(request.image, MemoryKind::Normal, true)?;
    for span in request.keep_mapped {
        add(*span, MemoryKind::Normal, true)?;
    }
    for span in request.devices {
        add(*span, MemoryKind::Device, true)?;
    }
    add(dma_pool, MemoryKind::NormalNonCacheable, false)?;
    Ok(MemoryPlan { heap, dma_pool, regions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{QEMU_VIRT, RASPBERRY_PI_3};

    const MIB: u64 = 1 << 20;

    #[test]
    fn pi3_plan_keeps_the_pool_low_and_off_the_image() {
        let request = PlanRequest {
            ram: &[Span::new(0, 0x3c00_0000)],
            devices: RASPBERRY_PI_3.device_spans,
            image: Span::new(0x8_0000, 0x30_0000),
            reserved: &[Span::new(0, 0x1000)],
            keep_mapped: &[],
            dma_limit: 1 << 30,
            heap_bytes: 16 * MIB,
            dma_pool_bytes: &[128 * MIB, 64 * MIB],
        };
        let plan = plan(&request).unwrap();
        assert_eq!(plan.heap, Span::new(0x40_0000, 16 * MIB));
        assert_eq!(plan.dma_pool, Span::new(0x140_0000, 128 * MIB));
        assert_eq!(plan.regions.last().unwrap().kind, MemoryKind::NormalNonCacheable);
        assert!(plan.regions.iter().any(|r| r.kind == MemoryKind::Device && r.base == 0x3f00_0000));
    }

    #[test]
    fn virt_plan_steps_over_the_device_tree() {
        // -m 256M puts the DTB at 0x4800_0000 (docs/qemu.md §1): 128 MiB fits on neither side of it,
        // so the pool shrinks to 64 MiB below it.
        let dtb = Span::new(0x4800_0000, MIB);
        let request = PlanRequest {
            ram: &[Span::new(0x4000_0000, 256 * MIB)],
            devices: QEMU_VIRT.device_spans,
            image: Span::new(0x4008_0000, 0x20_0000),
            reserved: &[dtb],
            keep_mapped: &[dtb],
            dma_limit: u64::MAX,
            heap_bytes: 16 * MIB,
            dma_pool_bytes: &[128 * MIB, 64 * MIB],
        };
        let plan = plan(&request).unwrap();
        assert!(!overlaps(plan.dma_pool, dtb) && !overlaps(plan.heap, dtb));
        assert_eq!(plan.dma_pool, Span::new(0x4140_0000, 64 * MIB));
    }

    #[test]
    fn shrinking_pool_and_errors() {
        let small = PlanRequest {
            ram: &[Span::new(0, 64 * MIB)],
            devices: &[],
            image: Span::new(0x8_0000, MIB),
            reserved: &[],
            keep_mapped: &[],
            dma_limit: u64::MAX,
            heap_bytes: 8 * MIB,
            dma_pool_bytes: &[128 * MIB, 32 * MIB],
        };
        assert_eq!(plan(&small).unwrap().dma_pool.size_bytes, 32 * MIB);
        let tiny = PlanRequest { dma_pool_bytes: &[128 * MIB], ..small };
        assert_eq!(plan(&tiny).unwrap_err(), PlanError::NoRoom { what: "DMA pool", bytes: 128 * MIB });
        let lost = PlanRequest { image: Span::new(1 << 33, MIB), ..small };
        assert!(matches!(plan(&lost), Err(PlanError::ImageOutsideRam { .. })));
    }
}
