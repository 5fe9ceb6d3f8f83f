//! SD commands in SDHCI's Command register: index, response type, CRC and index checks, data
//! present (SDHCI §2.2.6 Command register and Table 2-10 response-type/check combinations).
#![forbid(unsafe_code)]

use super::regs::TRANSFER_MODE_COMMAND;
use crate::sd::command::{Command, DataPhase, ResponseKind};
use tock_registers::fields::FieldValue;

/// The Command register half of word 0x0C (bits 31:16): index, response type, CRC and index
/// checks, data present (SDHCI Table 2-10: R2 checks CRC only, R3 checks nothing).
pub fn command_field(command: &Command) -> FieldValue<u32, TRANSFER_MODE_COMMAND::Register> {
    use TRANSFER_MODE_COMMAND::*;
    let response = match command.response {
        ResponseKind::None => RESPONSE_TYPE::None,
        ResponseKind::R1 | ResponseKind::R6 | ResponseKind::R7 => {
            RESPONSE_TYPE::Short48 + CRC_CHECK::SET + INDEX_CHECK::SET
        }
        ResponseKind::R1b => RESPONSE_TYPE::Short48Busy + CRC_CHECK::SET + INDEX_CHECK::SET,
        ResponseKind::R2 => RESPONSE_TYPE::Long136 + CRC_CHECK::SET,
        ResponseKind::R3 => RESPONSE_TYPE::Short48,
    };
    let kind = if command.index == 12 { COMMAND_TYPE::Abort } else { COMMAND_TYPE::Normal };
    let data = match command.data {
        DataPhase::None => DATA_PRESENT::CLEAR,
        _ => DATA_PRESENT::SET,
    };
    response + kind + data + COMMAND_INDEX.val(u32::from(command.index))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_register_encodings() {
        // (SDHCI Table 2-10; index in bits 13:8 of the 16-bit Command register, i.e. 29:24 here.)
        let encoded = |command: Command| command_field(&command).value;
        assert_eq!(encoded(Command::go_idle()), 0x0000_0000);
        // CMD8, R7 = 48-bit with CRC and index checks: 0x081A.
        assert_eq!(encoded(Command::send_interface_condition()), 0x081a_0000);
        // CMD3, R6, the same checks: 0x031A.
        assert_eq!(encoded(Command::send_relative_address()), 0x031a_0000);
        // CMD2, R2 = 136-bit with CRC check only: 0x0209.
        assert_eq!(encoded(Command::all_send_cid()), 0x0209_0000);
        // ACMD41, R3 = 48-bit, no checks: 0x2902.
        assert_eq!(encoded(Command::send_operating_condition(0)), 0x2902_0000);
        // CMD7, R1b: 0x071B.
        assert_eq!(encoded(Command::select_card(1)), 0x071b_0000);
        // CMD17 with data: 0x113A.
        assert_eq!(encoded(Command::read_single_block(0)), 0x113a_0000);
        // CMD12 is an abort command (type 3): 0x0CDB.
        assert_eq!(encoded(Command::stop_transmission()), 0x0cdb_0000);
        // ACMD51 reads data: 0x333A.
        assert_eq!(encoded(Command::send_scr()), 0x333a_0000);
        // CMD24 and CMD25 carry data too (the direction is the Transfer Mode's): 0x183A, 0x193A.
        assert_eq!(encoded(Command::write_single_block(0)), 0x183a_0000);
        assert_eq!(encoded(Command::write_multiple_block(0)), 0x193a_0000);
        assert!(
            Command::write_multiple_block(0).data.is_write()
                && !Command::read_single_block(0).data.is_write()
        );
    }
}
