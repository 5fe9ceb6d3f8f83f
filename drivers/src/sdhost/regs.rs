//! The BCM2835 sdhost register block (docs/aarch32-pis.md §7; names and bits as in Linux
//! `drivers/mmc/host/bcm2835.c` and QEMU `hw/sd/bcm2835_sdhost.c`; the block is absent from the
//! BCM2835 ARM Peripherals datasheet). At PERI + 0x20_2000 on BCM2835/2836/2837.

/// Bytes of the register window the driver uses (up to SDHBLC).
pub const BLOCK_BYTES: usize = 0x100;

pub mod offsets {
    /// Command: index, flags, NEW to issue (the hardware clears NEW when done).
    pub const COMMAND: usize = 0x00;
    pub const ARGUMENT: usize = 0x04;
    /// Data timeout in SD clocks.
    pub const TIMEOUT: usize = 0x08;
    /// Clock divider: SDCLK = core clock / (value + 2), 11 bits.
    pub const CLOCK_DIVIDER: usize = 0x0c;
    /// Response words: 0 holds bits 31:0 (or the short response), 3 bits 127:96.
    pub const RESPONSE0: usize = 0x10;
    /// Host status, write 1 to clear.
    pub const HOST_STATUS: usize = 0x20;
    /// Card power: bit 0.
    pub const POWER: usize = 0x30;
    /// Emergency debug mode: the state machine, FIFO fill level and thresholds.
    pub const DEBUG_MODE: usize = 0x34;
    /// Host configuration.
    pub const HOST_CONFIG: usize = 0x38;
    /// Block size in bytes.
    pub const BLOCK_BYTES: usize = 0x3c;
    /// The 16-word data FIFO.
    pub const DATA: usize = 0x40;
    /// Block count.
    pub const BLOCK_COUNT: usize = 0x50;
}

pub mod command {
    pub const INDEX_MASK: u32 = 0x3f;
    pub const READ: u32 = 1 << 6;
    pub const WRITE: u32 = 1 << 7;
    pub const LONG_RESPONSE: u32 = 1 << 9;
    pub const NO_RESPONSE: u32 = 1 << 10;
    pub const BUSY_WAIT: u32 = 1 << 11;
    pub const FAIL: u32 = 1 << 14;
    pub const NEW: u32 = 1 << 15;
}

pub mod status {
    pub const DATA_FLAG: u32 = 1 << 0;
    pub const FIFO_ERROR: u32 = 1 << 3;
    pub const CRC7_ERROR: u32 = 1 << 4;
    pub const CRC16_ERROR: u32 = 1 << 5;
    pub const COMMAND_TIMEOUT: u32 = 1 << 6;
    pub const DATA_TIMEOUT: u32 = 1 << 7;
    pub const SDIO_INTERRUPT: u32 = 1 << 8;
    pub const BLOCK_INTERRUPT: u32 = 1 << 9;
    pub const BUSY_INTERRUPT: u32 = 1 << 10;
    pub const ERRORS: u32 = FIFO_ERROR | CRC7_ERROR | CRC16_ERROR | COMMAND_TIMEOUT | DATA_TIMEOUT;
    /// What Linux writes to clear everything at reset (bits 10:3).
    pub const CLEAR_ALL: u32 = 0x7f8;
}

pub mod config {
    pub const WIDE_INTERNAL_BUS: u32 = 1 << 1;
    /// The 4-bit card bus.
    pub const WIDE_EXTERNAL_BUS: u32 = 1 << 2;
    /// Use the whole divider in data mode too (without it only its low 3 bits count).
    pub const SLOW_CARD: u32 = 1 << 3;
    pub const DATA_INTERRUPT_ENABLE: u32 = 1 << 4;
    pub const BLOCK_INTERRUPT_ENABLE: u32 = 1 << 8;
    /// Raise BUSY_INTERRUPT when a BUSY_WAIT command's busy ends.
    pub const BUSY_INTERRUPT_ENABLE: u32 = 1 << 10;
}

pub mod debug_mode {
    pub const STATE_MASK: u32 = 0xf;
    pub const STATE_IDENTIFICATION: u32 = 0x0;
    pub const STATE_DATA: u32 = 0x1;
    pub const STATE_READ_DATA: u32 = 0x2;
    pub const STATE_READ_WAIT: u32 = 0x4;
    pub const STATE_WRITE_START1: u32 = 0xa;
    pub const FIFO_WORDS_SHIFT: u32 = 4;
    pub const FIFO_WORDS_MASK: u32 = 0x1f;
    pub const WRITE_THRESHOLD_SHIFT: u32 = 9;
    pub const READ_THRESHOLD_SHIFT: u32 = 14;
    pub const THRESHOLD_MASK: u32 = 0x1f;
    /// Linux's thresholds "due to silicon bug".
    pub const THRESHOLD_WORDS: u32 = 4;
    pub const FORCE_DATA_MODE: u32 = 1 << 19;
}

/// Words the data FIFO holds.
pub const FIFO_WORDS: u32 = 16;
/// The largest divider value (11 bits).
pub const MAX_DIVIDER: u32 = 0x7ff;
/// Blocks one command may move: SDHBLC holds 9 bits (QEMU's register list).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 511;
