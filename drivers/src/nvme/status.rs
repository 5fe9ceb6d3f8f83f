//! NVMe completion status decoding (NVMe Base Specification 1.4 §4.6.1 "Status Field
//! Definition": Status Code Type, Status Code, Command Retry Delay, More, Do Not Retry; code
//! names from §4.6.1.2.1-2.4 and the NVM command set's additions, as listed in docs/nvme-and-fio.md
//! §1.9).
#![forbid(unsafe_code)]

use core::fmt;

/// Status Code Type values (NVMe 1.4 §4.6.1.1, Figure 125).
pub mod code_type {
    pub const GENERIC: u8 = 0;
    pub const COMMAND_SPECIFIC: u8 = 1;
    pub const MEDIA_AND_DATA_INTEGRITY: u8 = 2;
    pub const PATH: u8 = 3;
    pub const VENDOR_SPECIFIC: u8 = 7;
}

/// Generic status codes the driver itself looks at.
pub mod generic {
    pub const SUCCESS: u8 = 0x00;
    pub const INVALID_OPCODE: u8 = 0x01;
    pub const INVALID_FIELD: u8 = 0x02;
    pub const INVALID_PRP_OFFSET: u8 = 0x13;
    pub const COMMAND_SEQUENCE_ERROR: u8 = 0x0C;
    pub const INVALID_NAMESPACE_OR_FORMAT: u8 = 0x0B;
    pub const LBA_OUT_OF_RANGE: u8 = 0x80;
}

/// Command specific status codes the driver itself looks at.
pub mod command_specific {
    pub const INVALID_QUEUE_IDENTIFIER: u8 = 0x01;
    pub const INVALID_QUEUE_SIZE: u8 = 0x02;
    pub const INVALID_INTERRUPT_VECTOR: u8 = 0x08;
    pub const INVALID_QUEUE_DELETION: u8 = 0x0C;
}

/// Media and data integrity status codes the driver itself looks at.
pub mod media {
    pub const UNRECOVERED_READ_ERROR: u8 = 0x81;
}

/// The 15-bit status field of a completion entry (CQE dword 3 bits 31:17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Status {
    pub code_type: u8,
    pub code: u8,
    /// Command Retry Delay index (CRD).
    pub retry_delay: u8,
    /// More status information in the Error Information log page.
    pub more: bool,
    pub do_not_retry: bool,
}

impl Status {
    pub const SUCCESS: Status =
        Status { code_type: 0, code: 0, retry_delay: 0, more: false, do_not_retry: false };

    /// Decodes the field as it sits in CQE dword 3 bits 31:17, shifted down to bit 0.
    pub fn from_field(field: u16) -> Self {
        Status {
            code: (field & 0xff) as u8,
            code_type: ((field >> 8) & 0x7) as u8,
            retry_delay: ((field >> 11) & 0x3) as u8,
            more: field & (1 << 13) != 0,
            do_not_retry: field & (1 << 14) != 0,
        }
    }

    /// The 15-bit field again (the `code` of an `IoError` carries it).
    pub fn field(&self) -> u16 {
        u16::from(self.code)
            | u16::from(self.code_type & 0x7) << 8
            | u16::from(self.retry_delay & 0x3) << 11
            | u16::from(self.more) << 13
            | u16::from(self.do_not_retry) << 14
    }

    /// A generic or command-specific status with DNR set, for building completions in tests.
    pub fn new(code_type: u8, code: u8, do_not_retry: bool) -> Self {
        Status { code_type, code, retry_delay: 0, more: false, do_not_retry }
    }

    pub fn is_success(&self) -> bool {
        self.code_type == code_type::GENERIC && self.code == generic::SUCCESS
    }

    pub fn is(&self, code_type: u8, code: u8) -> bool {
        self.code_type == code_type && self.code == code
    }

    pub fn type_name(&self) -> &'static str {
        match self.code_type {
            code_type::GENERIC => "generic",
            code_type::COMMAND_SPECIFIC => "command specific",
            code_type::MEDIA_AND_DATA_INTEGRITY => "media and data integrity",
            code_type::PATH => "path related",
            code_type::VENDOR_SPECIFIC => "vendor specific",
            _ => "reserved",
        }
    }

    /// The specification's name for the code.
    pub fn name(&self) -> &'static str {
        match self.code_type {
            code_type::GENERIC => generic_name(self.code),
            code_type::COMMAND_SPECIFIC => command_specific_name(self.code),
            code_type::MEDIA_AND_DATA_INTEGRITY => media_name(self.code),
            code_type::PATH => path_name(self.code),
            code_type::VENDOR_SPECIFIC => "Vendor Specific",
            _ => "Reserved Status Code Type",
        }
    }
}

/// `Name (SCT/SC)` followed by the flags that are set, e.g.
/// `Invalid Field in Command (00/02) dnr`.
impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:02x}/{:02x})", self.name(), self.code_type, self.code)?;
        if self.do_not_retry {
            write!(f, " dnr")?;
        }
        if self.more {
            write!(f, " more")?;
        }
        if self.retry_delay != 0 {
            write!(f, " crd:{}", self.retry_delay)?;
        }
        Ok(())
    }
}

/// NVMe 1.4 Figure 126 (generic command status) and Figure 127 (NVM command set values 80h-84h).
fn generic_name(code: u8) -> &'static str {
    match code {
        0x00 => "Successful Completion",
        0x01 => "Invalid Command Opcode",
        0x02 => "Invalid Field in Command",
        0x03 => "Command ID Conflict",
        0x04 => "Data Transfer Error",
        0x05 => "Commands Aborted due to Power Loss Notification",
        0x06 => "Internal Error",
        0x07 => "Command Abort Requested",
        0x08 => "Command Aborted due to SQ Deletion",
        0x09 => "Command Aborted due to Failed Fused Command",
        0x0A => "Command Aborted due to Missing Fused Command",
        0x0B => "Invalid Namespace or Format",
        0x0C => "Command Sequence Error",
        0x0D => "Invalid SGL Segment Descriptor",
        0x0E => "Invalid Number of SGL Descriptors",
        0x0F => "Data SGL Length Invalid",
        0x10 => "Metadata SGL Length Invalid",
        0x11 => "SGL Descriptor Type Invalid",
        0x12 => "Invalid Use of Controller Memory Buffer",
        0x13 => "PRP Offset Invalid",
        0x14 => "Atomic Write Unit Exceeded",
        0x15 => "Operation Denied",
        0x16 => "SGL Offset Invalid",
        0x18 => "Host Identifier Inconsistent Format",
        0x19 => "Keep Alive Timer Expired",
        0x1A => "Keep Alive Timeout Invalid",
        0x1B => "Command Aborted due to Preempt and Abort",
        0x1C => "Sanitize Failed",
        0x1D => "Sanitize In Progress",
        0x1E => "SGL Data Block Granularity Invalid",
        0x1F => "Command Not Supported for Queue in CMB",
        0x20 => "Namespace is Write Protected",
        0x21 => "Command Interrupted",
        0x22 => "Transient Transport Error",
        0x80 => "LBA Out of Range",
        0x81 => "Capacity Exceeded",
        0x82 => "Namespace Not Ready",
        0x83 => "Reservation Conflict",
        0x84 => "Format In Progress",
        0xC0..=0xFF => "Vendor Specific",
        _ => "Reserved Generic Status",
    }
}

/// NVMe 1.4 Figure 128 (command specific status) and Figure 129 (NVM command set values).
fn command_specific_name(code: u8) -> &'static str {
    match code {
        0x00 => "Completion Queue Invalid",
        0x01 => "Invalid Queue Identifier",
        0x02 => "Invalid Queue Size",
        0x03 => "Abort Command Limit Exceeded",
        0x05 => "Asynchronous Event Request Limit Exceeded",
        0x06 => "Invalid Firmware Slot",
        0x07 => "Invalid Firmware Image",
        0x08 => "Invalid Interrupt Vector",
        0x09 => "Invalid Log Page",
        0x0A => "Invalid Format",
        0x0B => "Firmware Activation Requires Conventional Reset",
        0x0C => "Invalid Queue Deletion",
        0x0D => "Feature Identifier Not Saveable",
        0x0E => "Feature Not Changeable",
        0x0F => "Feature Not Namespace Specific",
        0x10 => "Firmware Activation Requires NVM Subsystem Reset",
        0x11 => "Firmware Activation Requires Controller Level Reset",
        0x12 => "Firmware Activation Requires Maximum Time Violation",
        0x13 => "Firmware Activation Prohibited",
        0x14 => "Overlapping Range",
        0x15 => "Namespace Insufficient Capacity",
        0x16 => "Namespace Identifier Unavailable",
        0x18 => "Namespace Already Attached",
        0x19 => "Namespace Is Private",
        0x1A => "Namespace Not Attached",
        0x1B => "Thin Provisioning Not Supported",
        0x1C => "Controller List Invalid",
        0x1D => "Device Self-test In Progress",
        0x1E => "Boot Partition Write Prohibited",
        0x1F => "Invalid Controller Identifier",
        0x20 => "Invalid Secondary Controller State",
        0x21 => "Invalid Number of Controller Resources",
        0x22 => "Invalid Resource Identifier",
        0x23 => "Sanitize Prohibited While Persistent Memory Region is Enabled",
        0x24 => "ANA Group Identifier Invalid",
        0x25 => "ANA Attach Failed",
        0x80 => "Conflicting Attributes",
        0x81 => "Invalid Protection Information",
        0x82 => "Attempted Write to Read Only Range",
        0xC0..=0xFF => "Vendor Specific",
        _ => "Reserved Command Specific Status",
    }
}

/// NVMe 1.4 Figure 130 (media and data integrity errors).
fn media_name(code: u8) -> &'static str {
    match code {
        0x80 => "Write Fault",
        0x81 => "Unrecovered Read Error",
        0x82 => "End-to-end Guard Check Error",
        0x83 => "End-to-end Application Tag Check Error",
        0x84 => "End-to-end Reference Tag Check Error",
        0x85 => "Compare Failure",
        0x86 => "Access Denied",
        0x87 => "Deallocated or Unwritten Logical Block",
        0xC0..=0xFF => "Vendor Specific",
        _ => "Reserved Media Error Status",
    }
}

/// NVMe 1.4 Figure 131 (path related status).
fn path_name(code: u8) -> &'static str {
    match code {
        0x00 => "Internal Path Error",
        0x01 => "Asymmetric Access Persistent Loss",
        0x02 => "Asymmetric Access Inaccessible",
        0x03 => "Asymmetric Access Transition",
        0x60 => "Controller Pathing Error",
        0x70 => "Host Pathing Error",
        0x71 => "Command Aborted By Host",
        0xC0..=0xFF => "Vendor Specific",
        _ => "Reserved Path Status",
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn the_field_round_trips_through_every_bit() {
        for field in 0u16..0x8000 {
            assert_eq!(Status::from_field(field).field(), field);
        }
        let status = Status::from_field(0x4002);
        assert_eq!(status.code_type, 0);
        assert_eq!(status.code, 2);
        assert!(status.do_not_retry && !status.more);
    }

    #[test]
    fn cqe_dword3_status_bits_land_in_the_right_fields() {
        // DW3 = CID 5, phase 1, SC 0x81, SCT 2, CRD 1, M 1, DNR 1 (docs/nvme-and-fio.md §1.8 layout).
        let dw3: u32 = 5 | 1 << 16 | 0x81 << 17 | 2 << 25 | 1 << 28 | 1 << 30 | 1 << 31;
        let status = Status::from_field((dw3 >> 17) as u16);
        assert_eq!(status.code, 0x81);
        assert_eq!(status.code_type, 2);
        assert_eq!(status.retry_delay, 1);
        assert!(status.more && status.do_not_retry);
        assert_eq!(status.name(), "Unrecovered Read Error");
        assert_eq!(status.type_name(), "media and data integrity");
        assert_eq!(format!("{status}"), "Unrecovered Read Error (02/81) dnr more crd:1");
    }

    #[test]
    fn names_come_from_the_right_table() {
        let name = |sct, sc| Status::new(sct, sc, false).name();
        assert_eq!(name(0, 0x02), "Invalid Field in Command");
        assert_eq!(name(0, 0x13), "PRP Offset Invalid");
        assert_eq!(name(0, 0x80), "LBA Out of Range");
        assert_eq!(name(1, 0x02), "Invalid Queue Size");
        assert_eq!(name(1, 0x08), "Invalid Interrupt Vector");
        assert_eq!(name(1, 0x0C), "Invalid Queue Deletion");
        assert_eq!(name(2, 0x80), "Write Fault");
        assert_eq!(name(3, 0x71), "Command Aborted By Host");
        assert_eq!(name(7, 0x12), "Vendor Specific");
        assert_eq!(name(5, 0x00), "Reserved Status Code Type");
        assert_eq!(name(0, 0x17), "Reserved Generic Status");
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::new(0, 2, true).is_success());
        assert!(!Status::new(1, 0, false).is_success());
        assert_eq!(format!("{}", Status::new(0, 2, true)), "Invalid Field in Command (00/02) dnr");
    }
}
