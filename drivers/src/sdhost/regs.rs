//! The BCM2835 sdhost register block (docs/aarch32-pis.md §7; names and bits as in Linux
//! `drivers/mmc/host/bcm2835.c` and QEMU `hw/sd/bcm2835_sdhost.c`; the block is absent from the
//! BCM2835 ARM Peripherals datasheet). At PERI + 0x20_2000 on BCM2835/2836/2837.
#![forbid(unsafe_code)]

use hal::mmio::Reg;
use tock_registers::fields::FieldValue;
use tock_registers::register_bitfields;

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

register_bitfields![u32,
    /// SDCMD: index, response and data flags, NEW to issue (the hardware clears NEW when done,
    /// and sets FAIL when the command failed).
    pub COMMAND [
        INDEX OFFSET(0) NUMBITS(6) [],
        READ OFFSET(6) NUMBITS(1) [],
        WRITE OFFSET(7) NUMBITS(1) [],
        LONG_RESPONSE OFFSET(9) NUMBITS(1) [],
        NO_RESPONSE OFFSET(10) NUMBITS(1) [],
        BUSY_WAIT OFFSET(11) NUMBITS(1) [],
        FAIL OFFSET(14) NUMBITS(1) [],
        NEW OFFSET(15) NUMBITS(1) []
    ],
    /// SDHSTS, write 1 to clear.
    pub HOST_STATUS [
        DATA_FLAG OFFSET(0) NUMBITS(1) [],
        FIFO_ERROR OFFSET(3) NUMBITS(1) [],
        CRC7_ERROR OFFSET(4) NUMBITS(1) [],
        CRC16_ERROR OFFSET(5) NUMBITS(1) [],
        COMMAND_TIMEOUT OFFSET(6) NUMBITS(1) [],
        DATA_TIMEOUT OFFSET(7) NUMBITS(1) [],
        SDIO_INTERRUPT OFFSET(8) NUMBITS(1) [],
        BLOCK_INTERRUPT OFFSET(9) NUMBITS(1) [],
        /// Raised when a BUSY_WAIT command's busy ends (with BUSY_INTERRUPT_ENABLE).
        BUSY_INTERRUPT OFFSET(10) NUMBITS(1) []
    ],
    /// SDHCFG.
    pub HOST_CONFIG [
        WIDE_INTERNAL_BUS OFFSET(1) NUMBITS(1) [],
        /// The 4-bit card bus.
        WIDE_EXTERNAL_BUS OFFSET(2) NUMBITS(1) [],
        /// Use the whole divider in data mode too (without it only its low 3 bits count).
        SLOW_CARD OFFSET(3) NUMBITS(1) [],
        DATA_INTERRUPT_ENABLE OFFSET(4) NUMBITS(1) [],
        BLOCK_INTERRUPT_ENABLE OFFSET(8) NUMBITS(1) [],
        /// Raise BUSY_INTERRUPT when a BUSY_WAIT command's busy ends.
        BUSY_INTERRUPT_ENABLE OFFSET(10) NUMBITS(1) []
    ],
    /// SDEDM, the emergency debug mode register: the state machine, the FIFO's fill level and
    /// thresholds.
    pub DEBUG_MODE [
        STATE OFFSET(0) NUMBITS(4) [
            Identification = 0x0,
            Data = 0x1,
            ReadData = 0x2,
            ReadWait = 0x4,
            WriteStart1 = 0xa
        ],
        /// Words waiting in the FIFO.
        FIFO_WORDS OFFSET(4) NUMBITS(5) [],
        WRITE_THRESHOLD OFFSET(9) NUMBITS(5) [],
        READ_THRESHOLD OFFSET(14) NUMBITS(5) [],
        FORCE_DATA_MODE OFFSET(19) NUMBITS(1) []
    ]
];

/// The registers with fields.
pub const COMMAND: Reg<COMMAND::Register> = Reg::new(offsets::COMMAND);
pub const HOST_STATUS: Reg<HOST_STATUS::Register> = Reg::new(offsets::HOST_STATUS);
pub const HOST_CONFIG: Reg<HOST_CONFIG::Register> = Reg::new(offsets::HOST_CONFIG);
pub const DEBUG_MODE: Reg<DEBUG_MODE::Register> = Reg::new(offsets::DEBUG_MODE);

/// Every error bit of SDHSTS: FIFO, CRC7, CRC16, command and data timeout (bits 7:3).
pub const ERRORS: FieldValue<u32, HOST_STATUS::Register> = FieldValue::<u32, _>::new(0b1_1111, 3, 0b1_1111);
/// What Linux writes to SDHSTS to clear everything at reset (bits 10:3).
pub const CLEAR_ALL: FieldValue<u32, HOST_STATUS::Register> = FieldValue::<u32, _>::new(0xff, 3, 0xff);
/// Linux's FIFO thresholds, "due to silicon bug".
pub const THRESHOLD_WORDS: u32 = 4;

/// Words the data FIFO holds.
pub const FIFO_WORDS: u32 = 16;
/// The largest divider value (11 bits).
pub const MAX_DIVIDER: u32 = 0x7ff;
/// Blocks one command may move: SDHBLC holds 9 bits (QEMU's register list).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 511;
