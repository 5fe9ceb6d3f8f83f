//! The one place the kernel opens MMIO windows: every `Mmio` comes from a register block
//! (`board::MmioBlock`: kind, base, size) of the board table (kernel/src/board.rs), at the
//! device tree's address where the tree has the node, or from a block that PCI enumeration or the
//! device tree found (a BAR, an ECAM). Sizes come from the block, never from the caller.

use super::sync::SingleCoreCell;
use crate::board::{BlockKind, BoardProfile, MissingBlock, MmioBlock};
use drivers::gpio::Bcm2835Gpio;
use drivers::mmio::Mmio;

/// The GPIO window, opened once (the console routes the UART pins through it, the SD hosts
/// their slot's pins).
static GPIO: SingleCoreCell<Option<Mmio>> = SingleCoreCell::new(None);

/// A window on `block`.
///
/// # Safety
/// `block` must be a register block of this machine (from the board table, a device tree node
/// or an assigned PCI BAR), covered by the memory map as device memory for the rest of the run,
/// and the caller's driver the only user of the registers it touches.
pub unsafe fn open(block: MmioBlock) -> Mmio {
    // SAFETY: the caller guarantees the block (see above); its size is the block's own.
    unsafe { Mmio::new(block.base as usize, block.size_bytes as usize) }
}

/// The board table's block of `kind`, opened.
///
/// # Safety
/// As for [`open`]: `profile` must be this machine's board.
pub unsafe fn open_kind(profile: &BoardProfile, kind: BlockKind) -> Result<Mmio, MissingBlock> {
    // SAFETY: the caller guarantees `profile` is this board's, whose table gives the block.
    profile.block(kind).map(|block| unsafe { open(block) })
}

/// The board's GPIO function select, when it has one: the same window for every user.
pub fn gpio(profile: &BoardProfile) -> Option<Bcm2835Gpio<Mmio>> {
    let block = profile.block(BlockKind::Gpio).ok()?;
    let window = GPIO.with(|window| {
        // SAFETY: the board table gives this board's GPIO block, mapped as device memory; GPIO
        // function select is only changed from the one core, one pin group at a time.
        *window.get_or_insert_with(|| unsafe { open(block) })
    });
    window.map(Bcm2835Gpio::new)
}
