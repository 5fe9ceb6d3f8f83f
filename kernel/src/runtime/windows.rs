//! The one place the kernel opens MMIO windows: every `Mmio` comes from a register block
//! (`board::MmioBlock`: kind, base, size) of the board table (kernel/src/board.rs), at the
//! device tree's address where the tree has the node, or from a block that PCI enumeration or the
//! device tree found (a BAR, an ECAM). Sizes come from the block, never from the caller.
//!
//! Opening a window is safe: a block is opened only inside a span admitted once, at boot, as the
//! board's device memory ([`admit`]: the spans the memory map maps as Device memory, which hold
//! registers and no RAM), so no window can reach memory Rust uses.

use super::sync::SingleCoreCell;
use crate::board::{BlockKind, BoardProfile, MissingBlock, MmioBlock, Span};
use drivers::gpio::Bcm2835Gpio;
use hal::mmio::Mmio;

/// The GPIO window, opened once (the console routes the UART pins through it, the SD hosts
/// their slot's pins).
static GPIO: SingleCoreCell<Option<Mmio>> = SingleCoreCell::new(None);

/// Spans admitted as device memory (a board has at most three; one more for a console the
/// device tree names on an unknown board).
static DEVICE_SPANS: SingleCoreCell<heapless::Vec<Span, 8>> = SingleCoreCell::new(heapless::Vec::new());

/// Lets windows be opened inside `span`; false when the table is full.
///
/// # Safety
/// `span` must hold device registers and no RAM, be mapped as device memory (or reached with
/// the MMU off) for the rest of the run, and its registers must tolerate 32-bit accesses.
pub unsafe fn admit(span: Span) -> bool {
    DEVICE_SPANS.with(|spans| spans.push(span).is_ok()).unwrap_or(false)
}

/// A block that lies outside every admitted device span.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {:?} block at {:#x}+{:#x} lies outside the board's device memory", .block.kind, .block.base, .block.size_bytes)]
pub struct OutsideDevices {
    pub block: MmioBlock,
}

/// Why the board's block of a kind could not be opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("{0}")]
    Missing(MissingBlock),
    #[error("{0}")]
    Outside(OutsideDevices),
}

fn admitted(block: &MmioBlock) -> bool {
    let end = block.base.checked_add(block.size_bytes);
    let inside = |span: &Span| block.base >= span.base && end.is_some_and(|end| end <= span.end());
    DEVICE_SPANS.with(|spans| spans.iter().any(inside)).unwrap_or(false)
}

/// A window on `block`, when it lies inside an admitted device span.
pub fn open(block: MmioBlock) -> Result<Mmio, OutsideDevices> {
    if !admitted(&block) {
        return Err(OutsideDevices { block });
    }
    // SAFETY: the block lies inside a span `admit`'s caller vouched for: device registers only,
    // mapped as device memory for the rest of the run, tolerating 32-bit accesses; its size is
    // the block's own, so `Mmio` keeps every access inside it.
    Ok(unsafe { Mmio::new(block.base as usize, block.size_bytes as usize) })
}

/// The board table's block of `kind`, opened.
pub fn open_kind(profile: &BoardProfile, kind: BlockKind) -> Result<Mmio, WindowError> {
    let block = profile.block(kind).map_err(WindowError::Missing)?;
    open(block).map_err(WindowError::Outside)
}

/// Reads the 32-bit register at `offset_bytes` of `block` when it answers: `Ok(None)` when the
/// read takes a synchronous external abort (a block that is absent, as the PCIe root complex is
/// on QEMU's raspi4b: docs/qemu.md §9).
#[cfg(target_arch = "aarch64")]
pub fn probe_read32(block: MmioBlock, offset_bytes: u64) -> Result<Option<u32>, OutsideDevices> {
    let inside = offset_bytes.is_multiple_of(4) && offset_bytes + 4 <= block.size_bytes;
    if !inside || !admitted(&block) {
        return Err(OutsideDevices { block });
    }
    // SAFETY: the address is 4-byte aligned, inside the block, which lies in admitted device
    // memory (mapped as device memory; see `admit`).
    Ok(unsafe { boot::probe_read32((block.base + offset_bytes) as usize) })
}

/// The BCM2835 system timer's window at the kernel's first instruction, before any span is
/// admitted, when the core is an ARM1176: that core comes only in the BCM2835 (Pi 1, Zero),
/// whose table gives the block inside its device span, and the MMU is still off, so every access
/// is a device access. None on any other core.
#[cfg(target_arch = "arm")]
pub fn bcm2835_system_timer_at_entry(main_id: boot::cpu::MainId) -> Option<Mmio> {
    if main_id.core_model() != Some(boot::cpu::CoreModel::Arm1176) {
        return None;
    }
    let profile = &crate::board::RASPBERRY_PI_1;
    let block = profile.block(BlockKind::SystemTimer).ok()?;
    let end = block.base.checked_add(block.size_bytes)?;
    if !profile.device_spans.iter().any(|span| block.base >= span.base && end <= span.end()) {
        return None;
    }
    // SAFETY: an ARM1176 runs only on the BCM2835, whose system timer is this block of device
    // registers (board table) inside its device span; with the MMU off the access is a device
    // access, and `Mmio` keeps every access inside the block.
    Some(unsafe { Mmio::new(block.base as usize, block.size_bytes as usize) })
}

/// The board's GPIO function select, when it has one: the same window for every user.
pub fn gpio(profile: &BoardProfile) -> Option<Bcm2835Gpio<Mmio>> {
    let block = profile.block(BlockKind::Gpio).ok()?;
    let window = GPIO.with(|window| {
        if window.is_none() {
            *window = open(block).ok();
        }
        *window
    })??;
    Some(Bcm2835Gpio::new(window))
}
