//! SD commands: index, argument, response type, data phase, and their names (SD Physical Layer
//! Simplified Specification v9.00 §4.7.4 command tables, §4.9 responses). Each host encodes them
//! for its own registers (`sdhci::command`, `sdhost::host`).
#![forbid(unsafe_code)]

use core::fmt;

/// The response a command expects (SD §4.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseKind {
    None,
    /// R1: 48 bits with CRC and index, carrying the card status.
    R1,
    /// R1b: R1 plus busy on DAT0.
    R1b,
    /// R2: 136 bits (CID, CSD), CRC checked, no index.
    R2,
    /// R3: 48-bit OCR without CRC or index.
    R3,
    /// R6: 48 bits with CRC and index, carrying the published RCA (SD §4.9.5).
    R6,
    /// R7: 48 bits with CRC and index, carrying the CMD8 echo (SD §4.9.6).
    R7,
}

/// Where a command's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataPhase {
    None,
    /// Card to host: one block of the given size (registers: SCR, SD Status, switch status).
    ReadSingle,
    /// Card to host, several blocks.
    ReadMultiple,
    /// Host to card: one block.
    WriteSingle,
    /// Host to card, several blocks.
    WriteMultiple,
}

impl DataPhase {
    /// Whether the data goes from the host to the card.
    pub fn is_write(self) -> bool {
        matches!(self, DataPhase::WriteSingle | DataPhase::WriteMultiple)
    }
}

/// One SD command: index, argument, response and data phase. `application` marks an ACMD
/// (sent after CMD55).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Command {
    pub index: u8,
    pub application: bool,
    pub argument: u32,
    pub response: ResponseKind,
    pub data: DataPhase,
    /// The well-known name, for messages.
    pub name: &'static str,
}

impl Command {
    const fn new(index: u8, argument: u32, response: ResponseKind, name: &'static str) -> Command {
        Command { index, application: false, argument, response, data: DataPhase::None, name }
    }

    const fn with_data(self, data: DataPhase) -> Command {
        Command { data, ..self }
    }

    const fn application(self) -> Command {
        Command { application: true, ..self }
    }

    /// CMD0 GO_IDLE_STATE.
    pub const fn go_idle() -> Command {
        Command::new(0, 0, ResponseKind::None, "GO_IDLE_STATE")
    }
    /// CMD2 ALL_SEND_CID.
    pub const fn all_send_cid() -> Command {
        Command::new(2, 0, ResponseKind::R2, "ALL_SEND_CID")
    }
    /// CMD3 SEND_RELATIVE_ADDR (R6).
    pub const fn send_relative_address() -> Command {
        Command::new(3, 0, ResponseKind::R6, "SEND_RELATIVE_ADDR")
    }
    /// CMD6 SWITCH_FUNC: 64-byte status on DAT.
    pub const fn switch_function(argument: u32) -> Command {
        Command::new(6, argument, ResponseKind::R1, "SWITCH_FUNC").with_data(DataPhase::ReadSingle)
    }
    /// CMD7 SELECT_CARD (R1b).
    pub const fn select_card(rca: u16) -> Command {
        Command::new(7, (rca as u32) << 16, ResponseKind::R1b, "SELECT_CARD")
    }
    /// CMD8 SEND_IF_COND: VHS = 1 (2.7-3.6 V), check pattern 0xAA (R7).
    pub const fn send_interface_condition() -> Command {
        Command::new(8, 0x1aa, ResponseKind::R7, "SEND_IF_COND")
    }
    /// CMD9 SEND_CSD (R2).
    pub const fn send_csd(rca: u16) -> Command {
        Command::new(9, (rca as u32) << 16, ResponseKind::R2, "SEND_CSD")
    }
    /// CMD11 VOLTAGE_SWITCH.
    pub const fn voltage_switch() -> Command {
        Command::new(11, 0, ResponseKind::R1, "VOLTAGE_SWITCH")
    }
    /// CMD12 STOP_TRANSMISSION (R1b).
    pub const fn stop_transmission() -> Command {
        Command::new(12, 0, ResponseKind::R1b, "STOP_TRANSMISSION")
    }
    /// CMD13 SEND_STATUS.
    pub const fn send_status(rca: u16) -> Command {
        Command::new(13, (rca as u32) << 16, ResponseKind::R1, "SEND_STATUS")
    }
    /// CMD16 SET_BLOCKLEN.
    pub const fn set_block_length(bytes: u32) -> Command {
        Command::new(16, bytes, ResponseKind::R1, "SET_BLOCKLEN")
    }
    /// CMD17 READ_SINGLE_BLOCK.
    pub const fn read_single_block(address: u32) -> Command {
        Command::new(17, address, ResponseKind::R1, "READ_SINGLE_BLOCK").with_data(DataPhase::ReadSingle)
    }
    /// CMD18 READ_MULTIPLE_BLOCK.
    pub const fn read_multiple_block(address: u32) -> Command {
        Command::new(18, address, ResponseKind::R1, "READ_MULTIPLE_BLOCK").with_data(DataPhase::ReadMultiple)
    }
    /// CMD24 WRITE_BLOCK.
    pub const fn write_single_block(address: u32) -> Command {
        Command::new(24, address, ResponseKind::R1, "WRITE_BLOCK").with_data(DataPhase::WriteSingle)
    }
    /// CMD25 WRITE_MULTIPLE_BLOCK.
    pub const fn write_multiple_block(address: u32) -> Command {
        Command::new(25, address, ResponseKind::R1, "WRITE_MULTIPLE_BLOCK")
            .with_data(DataPhase::WriteMultiple)
    }
    /// CMD19 SEND_TUNING_BLOCK: 64 bytes on a 4-bit bus.
    pub const fn send_tuning_block() -> Command {
        Command::new(19, 0, ResponseKind::R1, "SEND_TUNING_BLOCK").with_data(DataPhase::ReadSingle)
    }
    /// CMD23 SET_BLOCK_COUNT.
    pub const fn set_block_count(blocks: u32) -> Command {
        Command::new(23, blocks, ResponseKind::R1, "SET_BLOCK_COUNT")
    }
    /// CMD55 APP_CMD.
    pub const fn app_command(rca: u16) -> Command {
        Command::new(55, (rca as u32) << 16, ResponseKind::R1, "APP_CMD")
    }
    /// ACMD6 SET_BUS_WIDTH: 0 = 1 bit, 2 = 4 bits.
    pub const fn set_bus_width_4_bit() -> Command {
        Command::new(6, 2, ResponseKind::R1, "SET_BUS_WIDTH").application()
    }
    /// ACMD13 SD_STATUS: 64 bytes.
    pub const fn sd_status() -> Command {
        Command::new(13, 0, ResponseKind::R1, "SD_STATUS").with_data(DataPhase::ReadSingle).application()
    }
    /// ACMD41 SD_SEND_OP_COND (R3).
    pub const fn send_operating_condition(argument: u32) -> Command {
        Command::new(41, argument, ResponseKind::R3, "SD_SEND_OP_COND").application()
    }
    /// ACMD51 SEND_SCR: 8 bytes.
    pub const fn send_scr() -> Command {
        Command::new(51, 0, ResponseKind::R1, "SEND_SCR").with_data(DataPhase::ReadSingle).application()
    }

    /// Whether the response is a full R1 card status (R6 and R7, the answers to CMD3 and CMD8,
    /// carry other fields: SD §4.9.5, §4.9.6).
    pub fn returns_card_status(&self) -> bool {
        matches!(self.response, ResponseKind::R1 | ResponseKind::R1b)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.application { "ACMD" } else { "CMD" };
        write!(f, "{prefix}{} ({}) arg {:#010x}", self.index, self.name, self.argument)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn arguments_and_names() {
        assert_eq!(Command::select_card(0xb368).argument, 0xb368_0000);
        assert_eq!(Command::send_csd(0x1234).argument, 0x1234_0000);
        assert_eq!(Command::set_bus_width_4_bit().argument, 2);
        assert!(Command::sd_status().application);
        // R6 and R7 (CMD3, CMD8) carry no card status; R3 (ACMD41) neither.
        assert!(
            Command::send_status(1).returns_card_status() && Command::select_card(1).returns_card_status()
        );
        for other in
            [Command::send_relative_address(), Command::send_interface_condition(), Command::go_idle()]
        {
            assert!(!other.returns_card_status(), "{other}");
        }
        assert!(!Command::send_operating_condition(0).returns_card_status());
        assert_eq!(
            Command::read_multiple_block(0x800).to_string(),
            "CMD18 (READ_MULTIPLE_BLOCK) arg 0x00000800"
        );
        assert_eq!(
            Command::send_operating_condition(0x40ff_8000).to_string(),
            "ACMD41 (SD_SEND_OP_COND) arg 0x40ff8000"
        );
        assert_eq!(Command::set_block_count(8).to_string(), "CMD23 (SET_BLOCK_COUNT) arg 0x00000008");
        assert_eq!(Command::write_single_block(8).to_string(), "CMD24 (WRITE_BLOCK) arg 0x00000008");
        assert_eq!(
            Command::write_multiple_block(8).to_string(),
            "CMD25 (WRITE_MULTIPLE_BLOCK) arg 0x00000008"
        );
    }
}
