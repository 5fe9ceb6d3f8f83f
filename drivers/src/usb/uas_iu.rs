//! USB Attached SCSI information units (T10 UAS-2 / USB-IF UAS 1.0 §6.2-6.4): their IDs, the
//! Command and Task Management IUs the host sends, and the Sense, Response, Read Ready and Write
//! Ready IUs it receives on the status pipe, decoded. The UAS transport ([`super::uas`]) moves
//! them; the transports' shared errors ([`super::transport`]) name a Response IU's code.
#![forbid(unsafe_code)]

use super::scsi::{Cdb, ScsiStatus, Sense};

/// Information unit IDs (UAS §6.2 Table 9).
pub mod iu {
    pub const COMMAND: u8 = 0x01;
    pub const SENSE: u8 = 0x03;
    pub const RESPONSE: u8 = 0x04;
    pub const TASK_MANAGEMENT: u8 = 0x05;
    pub const READ_READY: u8 = 0x06;
    pub const WRITE_READY: u8 = 0x07;
}

/// Task management functions (UAS §6.2.3 Table 12).
pub mod task_function {
    pub const ABORT_TASK: u8 = 0x01;
    pub const ABORT_TASK_SET: u8 = 0x02;
    pub const CLEAR_TASK_SET: u8 = 0x04;
    pub const LOGICAL_UNIT_RESET: u8 = 0x08;
    pub const I_T_NEXUS_RESET: u8 = 0x10;
    pub const QUERY_TASK: u8 = 0x80;
}

/// Response codes of a RESPONSE IU (UAS §6.4.3 Table 17).
pub mod response_code {
    pub const COMPLETE: u8 = 0x00;
    pub const INVALID_IU: u8 = 0x02;
    pub const NOT_SUPPORTED: u8 = 0x04;
    pub const FAILED: u8 = 0x05;
    pub const SUCCEEDED: u8 = 0x08;
    pub const INCORRECT_LUN: u8 = 0x09;
    pub const OVERLAPPED_TAG: u8 = 0x0a;
}

pub fn response_name(code: u8) -> &'static str {
    match code {
        response_code::COMPLETE => "TASK MANAGEMENT FUNCTION COMPLETE",
        response_code::INVALID_IU => "INVALID INFORMATION UNIT",
        response_code::NOT_SUPPORTED => "TASK MANAGEMENT FUNCTION NOT SUPPORTED",
        response_code::FAILED => "TASK MANAGEMENT FUNCTION FAILED",
        response_code::SUCCEEDED => "TASK MANAGEMENT FUNCTION SUCCEEDED",
        response_code::INCORRECT_LUN => "INCORRECT LOGICAL UNIT NUMBER",
        response_code::OVERLAPPED_TAG => "OVERLAPPED TAG ATTEMPTED",
        _ => "reserved response code",
    }
}

pub const COMMAND_IU_BYTES: usize = 32;
pub const TASK_MANAGEMENT_IU_BYTES: usize = 16;
/// An 8-byte SAM LUN for a single-level LUN below 256 (SAM-5 §4.7.2; QEMU reads it from byte 1).
pub fn lun_bytes(lun: u8) -> [u8; 8] {
    [0, lun, 0, 0, 0, 0, 0, 0]
}

/// A Command IU (UAS §6.2.2 Table 10): SIMPLE task attribute, priority 0, no additional CDB.
pub fn command_iu(tag: u16, lun: u8, cdb: &Cdb) -> [u8; COMMAND_IU_BYTES] {
    let mut bytes = [0u8; COMMAND_IU_BYTES];
    bytes[0] = iu::COMMAND;
    bytes[2..4].copy_from_slice(&tag.to_be_bytes());
    bytes[8..16].copy_from_slice(&lun_bytes(lun));
    // All 16 CDB bytes: those past its length are zero (`Cdb` is built so).
    bytes[16..32].copy_from_slice(&cdb.bytes);
    bytes
}

/// A Task Management IU (UAS §6.2.3 Table 11).
pub fn task_management_iu(tag: u16, function: u8, task_tag: u16, lun: u8) -> [u8; TASK_MANAGEMENT_IU_BYTES] {
    let mut bytes = [0u8; TASK_MANAGEMENT_IU_BYTES];
    bytes[0] = iu::TASK_MANAGEMENT;
    bytes[2..4].copy_from_slice(&tag.to_be_bytes());
    bytes[4] = function;
    bytes[6..8].copy_from_slice(&task_tag.to_be_bytes());
    bytes[8..16].copy_from_slice(&lun_bytes(lun));
    bytes
}

/// An IU from the status pipe, decoded (UAS §6.3-6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusIu {
    Sense { tag: u16, status: ScsiStatus, sense: Option<Sense> },
    Response { tag: u16, code: u8 },
    ReadReady { tag: u16 },
    WriteReady { tag: u16 },
    Unknown { id: u8, tag: u16 },
}

impl StatusIu {
    /// `bytes` as received (the IU's length is what the transfer delivered).
    pub fn parse(bytes: &[u8]) -> StatusIu {
        if bytes.len() < 4 {
            return StatusIu::Unknown { id: bytes.first().copied().unwrap_or(0), tag: 0 };
        }
        let tag = u16::from_be_bytes([bytes[2], bytes[3]]);
        match bytes[0] {
            iu::SENSE if bytes.len() >= 16 => {
                let length = usize::from(u16::from_be_bytes([bytes[14], bytes[15]]));
                let sense = bytes.get(16..16 + length).and_then(Sense::parse);
                StatusIu::Sense { tag, status: ScsiStatus(bytes[6]), sense }
            }
            iu::RESPONSE if bytes.len() >= 8 => StatusIu::Response { tag, code: bytes[7] },
            iu::READ_READY => StatusIu::ReadReady { tag },
            iu::WRITE_READY => StatusIu::WriteReady { tag },
            id => StatusIu::Unknown { id, tag },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_ius_carry_tag_lun_and_cdb() {
        let bytes = command_iu(0x0102, 0, &Cdb::read_10(0x10, 8));
        assert_eq!(bytes[0], iu::COMMAND);
        assert_eq!(&bytes[2..4], &[1, 2]);
        assert_eq!(bytes[4], 0, "SIMPLE, priority 0");
        assert_eq!(bytes[6], 0, "no additional CDB");
        assert_eq!(&bytes[8..16], &[0; 8]);
        assert_eq!(&bytes[16..26], &[0x28, 0, 0, 0, 0, 0x10, 0, 0, 8, 0]);
        assert_eq!(&command_iu(1, 3, &Cdb::test_unit_ready())[8..10], &[0, 3]);
        let long = command_iu(16, 0, &Cdb::read_16(1, 2));
        assert_eq!(long[16], 0x88);
        assert_eq!(long[31], 0);
    }

    #[test]
    fn task_management_ius_name_the_task() {
        let bytes = task_management_iu(16, task_function::ABORT_TASK, 5, 0);
        assert_eq!(bytes, [5, 0, 0, 16, 1, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(task_management_iu(2, task_function::LOGICAL_UNIT_RESET, 0, 1)[4], 8);
        assert_eq!(task_management_iu(2, 0, 0, 1)[9], 1);
    }

    #[test]
    fn status_ius_decode() {
        // A GOOD Sense IU as QEMU sends it: 16 bytes, sense length 0.
        let mut good = [0u8; 16];
        good[0] = iu::SENSE;
        good[3] = 7;
        assert_eq!(StatusIu::parse(&good), StatusIu::Sense { tag: 7, status: ScsiStatus::GOOD, sense: None });
        // CHECK CONDITION with 18 bytes of fixed sense: MEDIUM ERROR.
        let mut check = [0u8; 34];
        check[0] = iu::SENSE;
        check[3] = 2;
        check[6] = 0x02;
        check[15] = 18;
        check[16] = 0x70;
        check[18] = 0x03;
        check[28] = 0x11;
        let StatusIu::Sense { tag: 2, status, sense: Some(sense) } = StatusIu::parse(&check) else {
            panic!("{:?}", StatusIu::parse(&check));
        };
        assert_eq!(status, ScsiStatus::CHECK_CONDITION);
        assert_eq!((sense.key, sense.code), (3, 0x11));
        // Sense length beyond what arrived: no sense, status kept.
        check[15] = 100;
        assert!(matches!(StatusIu::parse(&check), StatusIu::Sense { sense: None, .. }));
        assert_eq!(
            StatusIu::parse(&[4, 0, 0, 16, 0, 0, 0, 0x0a]),
            StatusIu::Response { tag: 16, code: 0x0a }
        );
        assert_eq!(StatusIu::parse(&[6, 0, 0, 3]), StatusIu::ReadReady { tag: 3 });
        assert_eq!(StatusIu::parse(&[7, 0, 1, 0]), StatusIu::WriteReady { tag: 256 });
        assert_eq!(StatusIu::parse(&[9, 0, 0, 1]), StatusIu::Unknown { id: 9, tag: 1 });
        assert_eq!(StatusIu::parse(&[3, 0]), StatusIu::Unknown { id: 3, tag: 0 });
        assert_eq!(StatusIu::parse(&[3, 0, 0, 1, 0]), StatusIu::Unknown { id: 3, tag: 1 }, "short Sense IU");
        assert_eq!(response_name(0x0a), "OVERLAPPED TAG ATTEMPTED");
        assert_eq!(response_name(0x42), "reserved response code");
        assert_eq!(lun_bytes(5), [0, 5, 0, 0, 0, 0, 0, 0]);
    }
}
