//! The SDHCI register block with the specification's names (SD Host Controller Simplified
//! Specification v4.20, §2.1.2 register map; the v3.00 layout, which every host here follows).
//!
//! Every access is a 32-bit access to a 32-bit aligned word (the BCM2835/2837 Arasan and BCM2711
//! EMMC2 accept nothing else: docs/hardware.md §2.3), so 8- and 16-bit registers are named here by the
//! word that holds them and the shift inside it.
#![forbid(unsafe_code)]

use hal::mmio::Reg;
use tock_registers::register_bitfields;

/// Word offsets (SDHCI §2.1.2).
pub mod offsets {
    /// SDMA System Address / Argument 2. Never written by this driver: on QEMU a write here with
    /// a non-zero block size and count starts an SDMA transfer (docs/qemu.md §2).
    pub const SDMA_ADDRESS: usize = 0x00;
    /// Block Size (bits 15:0) and 16-bit Block Count (bits 31:16).
    pub const BLOCK_SIZE_COUNT: usize = 0x04;
    pub const ARGUMENT: usize = 0x08;
    /// Transfer Mode (bits 15:0) and Command (bits 31:16): one write issues the command.
    pub const TRANSFER_MODE_COMMAND: usize = 0x0c;
    pub const RESPONSE0: usize = 0x10;
    pub const BUFFER_DATA_PORT: usize = 0x20;
    pub const PRESENT_STATE: usize = 0x24;
    /// Host Control 1 (7:0), Power Control (15:8), Block Gap Control (23:16), Wakeup (31:24).
    pub const HOST_CONTROL_POWER: usize = 0x28;
    /// Clock Control (15:0), Timeout Control (23:16), Software Reset (31:24).
    pub const CLOCK_TIMEOUT_RESET: usize = 0x2c;
    /// Normal Interrupt Status (15:0), Error Interrupt Status (31:16); write 1 to clear.
    pub const INTERRUPT_STATUS: usize = 0x30;
    pub const INTERRUPT_STATUS_ENABLE: usize = 0x34;
    pub const INTERRUPT_SIGNAL_ENABLE: usize = 0x38;
    /// Auto CMD Error Status (15:0), Host Control 2 (31:16).
    pub const AUTO_CMD_ERROR_HOST_CONTROL2: usize = 0x3c;
    pub const CAPABILITIES: usize = 0x40;
    pub const CAPABILITIES_HIGH: usize = 0x44;
    pub const ADMA_ERROR_STATUS: usize = 0x54;
    pub const ADMA_SYSTEM_ADDRESS: usize = 0x58;
    pub const ADMA_SYSTEM_ADDRESS_HIGH: usize = 0x5c;
    /// Slot Interrupt Status (15:0), Host Controller Version (31:16).
    pub const SLOT_STATUS_VERSION: usize = 0xfc;
}

register_bitfields![u32,
    /// Transfer Mode (§2.2.5) in bits 15:0 and Command (§2.2.6) in bits 31:16 of word 0x0C.
    pub TRANSFER_MODE_COMMAND [
        DMA_ENABLE OFFSET(0) NUMBITS(1) [],
        BLOCK_COUNT_ENABLE OFFSET(1) NUMBITS(1) [],
        AUTO_COMMAND OFFSET(2) NUMBITS(2) [None = 0, Cmd12 = 1, Cmd23 = 2],
        READ OFFSET(4) NUMBITS(1) [],
        MULTI_BLOCK OFFSET(5) NUMBITS(1) [],
        RESPONSE_TYPE OFFSET(16) NUMBITS(2) [
            None = 0,
            Long136 = 1,
            Short48 = 2,
            Short48Busy = 3
        ],
        CRC_CHECK OFFSET(19) NUMBITS(1) [],
        INDEX_CHECK OFFSET(20) NUMBITS(1) [],
        DATA_PRESENT OFFSET(21) NUMBITS(1) [],
        COMMAND_TYPE OFFSET(22) NUMBITS(2) [Normal = 0, Abort = 3],
        COMMAND_INDEX OFFSET(24) NUMBITS(6) []
    ],
    /// Present State (§2.2.9).
    pub PRESENT_STATE [
        COMMAND_INHIBIT OFFSET(0) NUMBITS(1) [],
        DATA_INHIBIT OFFSET(1) NUMBITS(1) [],
        DAT_LINE_ACTIVE OFFSET(2) NUMBITS(1) [],
        READ_TRANSFER_ACTIVE OFFSET(9) NUMBITS(1) [],
        BUFFER_READ_ENABLE OFFSET(11) NUMBITS(1) [],
        CARD_INSERTED OFFSET(16) NUMBITS(1) [],
        CARD_STATE_STABLE OFFSET(17) NUMBITS(1) [],
        DAT_LEVEL OFFSET(20) NUMBITS(4) [],
        CMD_LEVEL OFFSET(24) NUMBITS(1) []
    ],
    /// Host Control 1 (§2.2.10) in bits 7:0 and Power Control (§2.2.11) in bits 15:8 of 0x28.
    pub HOST_CONTROL_POWER [
        DATA_WIDTH_4_BIT OFFSET(1) NUMBITS(1) [],
        HIGH_SPEED_ENABLE OFFSET(2) NUMBITS(1) [],
        DMA_SELECT OFFSET(3) NUMBITS(2) [Sdma = 0, Adma2_32 = 2, Adma2_64 = 3],
        /// Extended Data Transfer Width: an 8-bit bus (eMMC).
        DATA_WIDTH_8_BIT OFFSET(5) NUMBITS(1) [],
        BUS_POWER OFFSET(8) NUMBITS(1) [],
        BUS_VOLTAGE OFFSET(9) NUMBITS(3) [V1_8 = 0b101, V3_0 = 0b110, V3_3 = 0b111]
    ],
    /// Clock Control (§2.2.14), Timeout Control (§2.2.15), Software Reset (§2.2.16) of 0x2C.
    pub CLOCK_TIMEOUT_RESET [
        INTERNAL_CLOCK_ENABLE OFFSET(0) NUMBITS(1) [],
        INTERNAL_CLOCK_STABLE OFFSET(1) NUMBITS(1) [],
        SD_CLOCK_ENABLE OFFSET(2) NUMBITS(1) [],
        /// Bits 9:8 of the 10-bit divider (v3 divided clock mode).
        DIVIDER_HIGH OFFSET(6) NUMBITS(2) [],
        /// Bits 7:0 of the divider.
        DIVIDER_LOW OFFSET(8) NUMBITS(8) [],
        DATA_TIMEOUT OFFSET(16) NUMBITS(4) [],
        RESET_ALL OFFSET(24) NUMBITS(1) [],
        RESET_COMMAND_LINE OFFSET(25) NUMBITS(1) [],
        RESET_DATA_LINE OFFSET(26) NUMBITS(1) []
    ],
    /// Normal (§2.2.17) and Error (§2.2.18) Interrupt Status, and their enables (0x34).
    pub INTERRUPT [
        COMMAND_COMPLETE OFFSET(0) NUMBITS(1) [],
        TRANSFER_COMPLETE OFFSET(1) NUMBITS(1) [],
        DMA_INTERRUPT OFFSET(3) NUMBITS(1) [],
        BUFFER_WRITE_READY OFFSET(4) NUMBITS(1) [],
        BUFFER_READ_READY OFFSET(5) NUMBITS(1) [],
        CARD_INSERTION OFFSET(6) NUMBITS(1) [],
        CARD_REMOVAL OFFSET(7) NUMBITS(1) [],
        CARD_INTERRUPT OFFSET(8) NUMBITS(1) [],
        ERROR_INTERRUPT OFFSET(15) NUMBITS(1) [],
        COMMAND_TIMEOUT_ERROR OFFSET(16) NUMBITS(1) [],
        COMMAND_CRC_ERROR OFFSET(17) NUMBITS(1) [],
        COMMAND_END_BIT_ERROR OFFSET(18) NUMBITS(1) [],
        COMMAND_INDEX_ERROR OFFSET(19) NUMBITS(1) [],
        DATA_TIMEOUT_ERROR OFFSET(20) NUMBITS(1) [],
        DATA_CRC_ERROR OFFSET(21) NUMBITS(1) [],
        DATA_END_BIT_ERROR OFFSET(22) NUMBITS(1) [],
        CURRENT_LIMIT_ERROR OFFSET(23) NUMBITS(1) [],
        AUTO_COMMAND_ERROR OFFSET(24) NUMBITS(1) [],
        ADMA_ERROR OFFSET(25) NUMBITS(1) [],
        TUNING_ERROR OFFSET(26) NUMBITS(1) []
    ],
    /// Host Control 2 (§2.2.24) in bits 31:16 of 0x3C.
    pub HOST_CONTROL2 [
        UHS_MODE OFFSET(16) NUMBITS(3) [Sdr12 = 0, Sdr25 = 1, Sdr50 = 2, Sdr104 = 3, Ddr50 = 4],
        SIGNALING_1V8 OFFSET(19) NUMBITS(1) [],
        EXECUTE_TUNING OFFSET(22) NUMBITS(1) [],
        SAMPLING_CLOCK_SELECT OFFSET(23) NUMBITS(1) []
    ],
    /// Capabilities, low word (§2.2.26).
    pub CAPABILITIES [
        TIMEOUT_CLOCK_FREQUENCY OFFSET(0) NUMBITS(6) [],
        TIMEOUT_CLOCK_UNIT_MHZ OFFSET(7) NUMBITS(1) [],
        /// Base clock in MHz: bits 15:8 in v3, bits 13:8 before.
        BASE_CLOCK_MHZ OFFSET(8) NUMBITS(8) [],
        MAX_BLOCK_LENGTH OFFSET(16) NUMBITS(2) [],
        EIGHT_BIT_BUS OFFSET(18) NUMBITS(1) [],
        ADMA2 OFFSET(19) NUMBITS(1) [],
        HIGH_SPEED OFFSET(21) NUMBITS(1) [],
        SDMA OFFSET(22) NUMBITS(1) [],
        VOLTAGE_3V3 OFFSET(24) NUMBITS(1) [],
        VOLTAGE_3V0 OFFSET(25) NUMBITS(1) [],
        VOLTAGE_1V8 OFFSET(26) NUMBITS(1) [],
        SYSTEM_BUS_64_BIT OFFSET(28) NUMBITS(1) []
    ],
    /// Slot Interrupt Status (§2.2.33) in bits 15:0, Host Controller Version (§2.2.34) in 31:16.
    pub SLOT_STATUS_VERSION [
        SPECIFICATION_VERSION OFFSET(16) NUMBITS(8) []
    ],
    /// Capabilities, high word (§2.2.26, bits 63:32).
    pub CAPABILITIES_HIGH [
        SDR50 OFFSET(0) NUMBITS(1) [],
        SDR104 OFFSET(1) NUMBITS(1) [],
        DDR50 OFFSET(2) NUMBITS(1) [],
        /// Timer Count for Re-Tuning (bits 43:40).
        RETUNING_TIMER_COUNT OFFSET(8) NUMBITS(4) [],
        SDR50_NEEDS_TUNING OFFSET(13) NUMBITS(1) []
    ]
];

/// The registers the driver decodes, each with the word that holds it and its bitfields.
pub const PRESENT_STATE: Reg<PRESENT_STATE::Register> = Reg::new(offsets::PRESENT_STATE);
pub const HOST_CONTROL2: Reg<HOST_CONTROL2::Register> = Reg::new(offsets::AUTO_CMD_ERROR_HOST_CONTROL2);
pub const CAPABILITIES: Reg<CAPABILITIES::Register> = Reg::new(offsets::CAPABILITIES);
pub const CAPABILITIES_HIGH: Reg<CAPABILITIES_HIGH::Register> = Reg::new(offsets::CAPABILITIES_HIGH);
pub const SLOT_STATUS_VERSION: Reg<SLOT_STATUS_VERSION::Register> = Reg::new(offsets::SLOT_STATUS_VERSION);

/// Normal Interrupt Status bits the driver waits on, and all error bits (§2.2.17-18).
pub mod interrupt {
    pub const COMMAND_COMPLETE: u32 = 1 << 0;
    pub const TRANSFER_COMPLETE: u32 = 1 << 1;
    pub const BUFFER_WRITE_READY: u32 = 1 << 4;
    pub const BUFFER_READ_READY: u32 = 1 << 5;
    /// Card Inserted went from 1 to 0 (§2.2.17).
    pub const CARD_REMOVAL: u32 = 1 << 7;
    pub const CARD_INTERRUPT: u32 = 1 << 8;
    pub const ERROR_INTERRUPT: u32 = 1 << 15;
    /// Command-line errors: timeout, CRC, end bit, index.
    pub const COMMAND_ERRORS: u32 = 0xf << 16;
    pub const COMMAND_TIMEOUT: u32 = 1 << 16;
    pub const COMMAND_CRC: u32 = 1 << 17;
    pub const COMMAND_END_BIT: u32 = 1 << 18;
    pub const COMMAND_INDEX: u32 = 1 << 19;
    pub const DATA_TIMEOUT: u32 = 1 << 20;
    pub const DATA_CRC: u32 = 1 << 21;
    pub const DATA_END_BIT: u32 = 1 << 22;
    pub const CURRENT_LIMIT: u32 = 1 << 23;
    pub const AUTO_COMMAND: u32 = 1 << 24;
    pub const ADMA: u32 = 1 << 25;
    pub const TUNING: u32 = 1 << 26;
    /// Every error bit of the v3 register (bits 26:16) and the vendor-specific ones (31:28).
    pub const ALL_ERRORS: u32 = 0xf7ff_0000;
    /// Every bit: written to Normal/Error Interrupt Status, clears whatever is latched (the
    /// register is write-1-to-clear, §2.2.17-18).
    pub const CLEAR_ALL: u32 = 0xffff_ffff;
    /// The status bits the driver enables (everything but the card interrupt, which would
    /// latch SDIO noise: docs/hardware.md §2.9 step 5).
    pub const ENABLED: u32 = !CARD_INTERRUPT;
}

/// The specification version in the Host Controller Version register (§2.2.34).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SpecVersion(pub u8);

impl SpecVersion {
    pub const V3_00: SpecVersion = SpecVersion(2);

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "1.00",
            1 => "2.00",
            2 => "3.00",
            3 => "4.00",
            4 => "4.10",
            5 => "4.20",
            _ => "unknown",
        }
    }

    /// v3.00 and later: 10-bit divided clock, 8-bit base clock field, Host Control 2.
    pub fn at_least_v3(self) -> bool {
        self >= SpecVersion::V3_00
    }
}
