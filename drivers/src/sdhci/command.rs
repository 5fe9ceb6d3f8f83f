//! SD commands and their SDHCI encoding: index, response type, data phase (SD Physical Layer
//! Simplified Specification v9.00 §4.7.4 command tables; SDHCI §2.2.6 Command register and
//! Table 2-10 response-type/check combinations).
#![forbid(unsafe_code)]

use super::regs::TRANSFER_MODE_COMMAND;
use core::fmt;
use tock_registers::fields::FieldValue;

/// The response a command expects (SD §4.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseKind {
    None,
    /// R1, R6, R7: 48 bits with CRC and index.
    R1,
    /// R1b: R1 plus busy on DAT0.
    R1b,
    /// R2: 136 bits (CID, CSD), CRC checked, no index.
    R2,
    /// R3: 48-bit OCR without CRC or index.
    R3,
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
}

impl Command {
    const fn new(index: u8, argument: u32, response: ResponseKind) -> Command {
        Command { index, application: false, argument, response, data: DataPhase::None }
    }

    const fn with_data(self, data: DataPhase) -> Command {
        Command { data, ..self }
    }

    const fn application(self) -> Command {
        Command { application: true, ..self }
    }

    /// CMD0 GO_IDLE_STATE.
    pub const fn go_idle() -> Command {
        Command::new(0, 0, ResponseKind::None)
    }
    /// CMD2 ALL_SEND_CID.
    pub const fn all_send_cid() -> Command {
        Command::new(2, 0, ResponseKind::R2)
    }
    /// CMD3 SEND_RELATIVE_ADDR (R6).
    pub const fn send_relative_address() -> Command {
        Command::new(3, 0, ResponseKind::R1)
    }
    /// CMD6 SWITCH_FUNC: 64-byte status on DAT.
    pub const fn switch_function(argument: u32) -> Command {
        Command::new(6, argument, ResponseKind::R1).with_data(DataPhase::ReadSingle)
    }
    /// CMD7 SELECT_CARD (R1b).
    pub const fn select_card(rca: u16) -> Command {
        Command::new(7, (rca as u32) << 16, ResponseKind::R1b)
    }
    /// CMD8 SEND_IF_COND: VHS = 1 (2.7-3.6 V), check pattern 0xAA (R7).
    pub const fn send_interface_condition() -> Command {
        Command::new(8, 0x1aa, ResponseKind::R1)
    }
    /// CMD9 SEND_CSD (R2).
    pub const fn send_csd(rca: u16) -> Command {
        Command::new(9, (rca as u32) << 16, ResponseKind::R2)
    }
    /// CMD11 VOLTAGE_SWITCH.
    pub const fn voltage_switch() -> Command {
        Command::new(11, 0, ResponseKind::R1)
    }
    /// CMD12 STOP_TRANSMISSION (R1b).
    pub const fn stop_transmission() -> Command {
        Command::new(12, 0, ResponseKind::R1b)
    }
    /// CMD13 SEND_STATUS.
    pub const fn send_status(rca: u16) -> Command {
        Command::new(13, (rca as u32) << 16, ResponseKind::R1)
    }
    /// CMD16 SET_BLOCKLEN.
    pub const fn set_block_length(bytes: u32) -> Command {
        Command::new(16, bytes, ResponseKind::R1)
    }
    /// CMD17 READ_SINGLE_BLOCK.
    pub const fn read_single_block(address: u32) -> Command {
        Command::new(17, address, ResponseKind::R1).with_data(DataPhase::ReadSingle)
    }
    /// CMD18 READ_MULTIPLE_BLOCK.
    pub const fn read_multiple_block(address: u32) -> Command {
        Command::new(18, address, ResponseKind::R1).with_data(DataPhase::ReadMultiple)
    }
    /// CMD24 WRITE_BLOCK.
    pub const fn write_single_block(address: u32) -> Command {
        Command::new(24, address, ResponseKind::R1).with_data(DataPhase::WriteSingle)
    }
    /// CMD25 WRITE_MULTIPLE_BLOCK.
    pub const fn write_multiple_block(address: u32) -> Command {
        Command::new(25, address, ResponseKind::R1).with_data(DataPhase::WriteMultiple)
    }
    /// CMD19 SEND_TUNING_BLOCK: 64 bytes on a 4-bit bus.
    pub const fn send_tuning_block() -> Command {
        Command::new(19, 0, ResponseKind::R1).with_data(DataPhase::ReadSingle)
    }
    /// CMD23 SET_BLOCK_COUNT.
    pub const fn set_block_count(blocks: u32) -> Command {
        Command::new(23, blocks, ResponseKind::R1)
    }
    /// CMD55 APP_CMD.
    pub const fn app_command(rca: u16) -> Command {
        Command::new(55, (rca as u32) << 16, ResponseKind::R1)
    }
    /// ACMD6 SET_BUS_WIDTH: 0 = 1 bit, 2 = 4 bits.
    pub const fn set_bus_width_4_bit() -> Command {
        Command::new(6, 2, ResponseKind::R1).application()
    }
    /// ACMD13 SD_STATUS: 64 bytes.
    pub const fn sd_status() -> Command {
        Command::new(13, 0, ResponseKind::R1).with_data(DataPhase::ReadSingle).application()
    }
    /// ACMD41 SD_SEND_OP_COND (R3).
    pub const fn send_operating_condition(argument: u32) -> Command {
        Command::new(41, argument, ResponseKind::R3).application()
    }
    /// ACMD51 SEND_SCR: 8 bytes.
    pub const fn send_scr() -> Command {
        Command::new(51, 0, ResponseKind::R1).with_data(DataPhase::ReadSingle).application()
    }

    /// Whether the response is a full R1 card status (R6 and R7, the answers to CMD3 and CMD8,
    /// carry other fields: SD §4.9.5, §4.9.6).
    pub fn returns_card_status(&self) -> bool {
        let r6_or_r7 = !self.application && matches!(self.index, 3 | 8);
        matches!(self.response, ResponseKind::R1 | ResponseKind::R1b) && !r6_or_r7
    }

    /// The well-known name, for messages.
    pub fn name(&self) -> &'static str {
        match (self.application, self.index) {
            (false, 0) => "GO_IDLE_STATE",
            (false, 2) => "ALL_SEND_CID",
            (false, 3) => "SEND_RELATIVE_ADDR",
            (false, 6) => "SWITCH_FUNC",
            (false, 7) => "SELECT_CARD",
            (false, 8) => "SEND_IF_COND",
            (false, 9) => "SEND_CSD",
            (false, 11) => "VOLTAGE_SWITCH",
            (false, 12) => "STOP_TRANSMISSION",
            (false, 13) => "SEND_STATUS",
            (false, 16) => "SET_BLOCKLEN",
            (false, 17) => "READ_SINGLE_BLOCK",
            (false, 18) => "READ_MULTIPLE_BLOCK",
            (false, 19) => "SEND_TUNING_BLOCK",
            (false, 23) => "SET_BLOCK_COUNT",
            (false, 24) => "WRITE_BLOCK",
            (false, 25) => "WRITE_MULTIPLE_BLOCK",
            (false, 55) => "APP_CMD",
            (true, 6) => "SET_BUS_WIDTH",
            (true, 13) => "SD_STATUS",
            (true, 41) => "SD_SEND_OP_COND",
            (true, 51) => "SEND_SCR",
            _ => "unnamed",
        }
    }

    /// The Command register half of word 0x0C (bits 31:16): index, response type, CRC and index
    /// checks, data present (SDHCI Table 2-10: R2 checks CRC only, R3 checks nothing).
    pub fn command_field(&self) -> FieldValue<u32, TRANSFER_MODE_COMMAND::Register> {
        use TRANSFER_MODE_COMMAND::*;
        let response = match self.response {
            ResponseKind::None => RESPONSE_TYPE::None,
            ResponseKind::R1 => RESPONSE_TYPE::Short48 + CRC_CHECK::SET + INDEX_CHECK::SET,
            ResponseKind::R1b => RESPONSE_TYPE::Short48Busy + CRC_CHECK::SET + INDEX_CHECK::SET,
            ResponseKind::R2 => RESPONSE_TYPE::Long136 + CRC_CHECK::SET,
            ResponseKind::R3 => RESPONSE_TYPE::Short48,
        };
        let kind = if self.index == 12 { COMMAND_TYPE::Abort } else { COMMAND_TYPE::Normal };
        let data = match self.data {
            DataPhase::None => DATA_PRESENT::CLEAR,
            _ => DATA_PRESENT::SET,
        };
        response + kind + data + COMMAND_INDEX.val(u32::from(self.index))
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.application { "ACMD" } else { "CMD" };
        write!(f, "{prefix}{} ({}) arg {:#010x}", self.index, self.name(), self.argument)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn command_register_encodings() {
        // (SDHCI Table 2-10; index in bits 13:8 of the 16-bit Command register, i.e. 29:24 here.)
        assert_eq!(Command::go_idle().command_field().value, 0x0000_0000);
        // CMD8, R7 = 48-bit with CRC and index checks: 0x081A.
        assert_eq!(Command::send_interface_condition().command_field().value, 0x081a_0000);
        // CMD2, R2 = 136-bit with CRC check only: 0x0209.
        assert_eq!(Command::all_send_cid().command_field().value, 0x0209_0000);
        // ACMD41, R3 = 48-bit, no checks: 0x2902.
        assert_eq!(Command::send_operating_condition(0).command_field().value, 0x2902_0000);
        // CMD7, R1b: 0x071B.
        assert_eq!(Command::select_card(1).command_field().value, 0x071b_0000);
        // CMD17 with data: 0x113A.
        assert_eq!(Command::read_single_block(0).command_field().value, 0x113a_0000);
        // CMD12 is an abort command (type 3): 0x0CDB.
        assert_eq!(Command::stop_transmission().command_field().value, 0x0cdb_0000);
        // ACMD51 reads data: 0x333A.
        assert_eq!(Command::send_scr().command_field().value, 0x333a_0000);
        // CMD24 and CMD25 carry data too (the direction is the Transfer Mode's): 0x183A, 0x193A.
        assert_eq!(Command::write_single_block(0).command_field().value, 0x183a_0000);
        assert_eq!(Command::write_multiple_block(0).command_field().value, 0x193a_0000);
        assert!(
            Command::write_multiple_block(0).data.is_write()
                && !Command::read_single_block(0).data.is_write()
        );
    }

    #[test]
    fn arguments_and_names() {
        assert_eq!(Command::select_card(0xb368).argument, 0xb368_0000);
        assert_eq!(Command::send_csd(0x1234).argument, 0x1234_0000);
        assert_eq!(Command::set_bus_width_4_bit().argument, 2);
        assert!(Command::sd_status().application);
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
