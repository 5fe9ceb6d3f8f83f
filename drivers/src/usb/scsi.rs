//! The SCSI commands a USB drive is driven with, and the answers decoded (SCSI Primary Commands
//! SPC-4: INQUIRY §6.6, REQUEST SENSE §6.29, TEST UNIT READY §6.47, sense data §4.5, status
//! codes SAM-5 §5.3; SCSI Block Commands SBC-3: READ CAPACITY(10)/(16) §5.16-5.17, READ(10)/(16)
//! §5.11/5.13, WRITE(10)/(16) §5.32/5.34, SYNCHRONIZE CACHE(10) §5.24; table in
//! docs/usb-storage.md §6). Multi-byte fields are big-endian.

use core::fmt;

/// Operation codes used here.
pub mod opcode {
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const INQUIRY: u8 = 0x12;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2a;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const READ_16: u8 = 0x88;
    pub const WRITE_16: u8 = 0x8a;
    /// SERVICE ACTION IN(16); READ CAPACITY(16) is service action 0x10.
    pub const SERVICE_ACTION_IN_16: u8 = 0x9e;
}

/// INQUIRY allocation length: 36 bytes, the standard data every device returns ("many devices
/// choke" on more: Linux `scsiglue.c`, docs/usb-storage.md §6).
pub const INQUIRY_BYTES: u16 = 36;
/// Fixed-format sense data as REQUEST SENSE returns it (SPC-4 §4.5.3: 18 bytes).
pub const SENSE_BYTES: u8 = 18;
pub const READ_CAPACITY_10_BYTES: usize = 8;
pub const READ_CAPACITY_16_BYTES: u32 = 32;

/// Which way data moves for a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDirection {
    None,
    /// Device to host.
    In,
    /// Host to device.
    Out,
}

/// A command descriptor block of 6 to 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cdb {
    pub bytes: [u8; 16],
    pub length: u8,
}

impl Cdb {
    fn new(length: u8) -> Self {
        Cdb { bytes: [0; 16], length }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.length)]
    }

    pub fn opcode(&self) -> u8 {
        self.bytes[0]
    }

    pub fn test_unit_ready() -> Self {
        Cdb::new(6)
    }

    pub fn request_sense(allocation_bytes: u8) -> Self {
        let mut cdb = Cdb::new(6);
        cdb.bytes[0] = opcode::REQUEST_SENSE;
        cdb.bytes[4] = allocation_bytes;
        cdb
    }

    pub fn inquiry(allocation_bytes: u16) -> Self {
        let mut cdb = Cdb::new(6);
        cdb.bytes[0] = opcode::INQUIRY;
        cdb.bytes[3..5].copy_from_slice(&allocation_bytes.to_be_bytes());
        cdb
    }

    pub fn read_capacity_10() -> Self {
        let mut cdb = Cdb::new(10);
        cdb.bytes[0] = opcode::READ_CAPACITY_10;
        cdb
    }

    pub fn read_capacity_16() -> Self {
        let mut cdb = Cdb::new(16);
        cdb.bytes[0] = opcode::SERVICE_ACTION_IN_16;
        cdb.bytes[1] = 0x10;
        cdb.bytes[10..14].copy_from_slice(&READ_CAPACITY_16_BYTES.to_be_bytes());
        cdb
    }

    fn transfer_10(operation: u8, lba: u32, blocks: u16) -> Self {
        let mut cdb = Cdb::new(10);
        cdb.bytes[0] = operation;
        cdb.bytes[2..6].copy_from_slice(&lba.to_be_bytes());
        cdb.bytes[7..9].copy_from_slice(&blocks.to_be_bytes());
        cdb
    }

    fn transfer_16(operation: u8, lba: u64, blocks: u32) -> Self {
        let mut cdb = Cdb::new(16);
        cdb.bytes[0] = operation;
        cdb.bytes[2..10].copy_from_slice(&lba.to_be_bytes());
        cdb.bytes[10..14].copy_from_slice(&blocks.to_be_bytes());
        cdb
    }

    pub fn read_10(lba: u32, blocks: u16) -> Self {
        Cdb::transfer_10(opcode::READ_10, lba, blocks)
    }

    pub fn read_16(lba: u64, blocks: u32) -> Self {
        Cdb::transfer_16(opcode::READ_16, lba, blocks)
    }

    pub fn write_10(lba: u32, blocks: u16) -> Self {
        Cdb::transfer_10(opcode::WRITE_10, lba, blocks)
    }

    pub fn write_16(lba: u64, blocks: u32) -> Self {
        Cdb::transfer_16(opcode::WRITE_16, lba, blocks)
    }

    /// SYNCHRONIZE CACHE(10) of the whole medium (LBA 0, 0 blocks).
    pub fn synchronize_cache() -> Self {
        let mut cdb = Cdb::new(10);
        cdb.bytes[0] = opcode::SYNCHRONIZE_CACHE_10;
        cdb
    }

    /// A read or write of `blocks` at `lba`: the 10-byte form when both fit it (SBC-3 §5.11:
    /// 32-bit LBA, 16-bit count), the 16-byte form otherwise or when `long_form` is asked for.
    pub fn transfer(write: bool, lba: u64, blocks: u32, long_form: bool) -> Self {
        let fits_10 =
            lba.checked_add(u64::from(blocks)).is_some_and(|end| end <= 1 << 32) && blocks <= 0xffff;
        match (write, fits_10 && !long_form) {
            (false, true) => Cdb::read_10(lba as u32, blocks as u16),
            (true, true) => Cdb::write_10(lba as u32, blocks as u16),
            (false, false) => Cdb::read_16(lba, blocks),
            (true, false) => Cdb::write_16(lba, blocks),
        }
    }

    /// The command's name for messages.
    pub fn name(&self) -> &'static str {
        match (self.bytes[0], self.bytes[1] & 0x1f) {
            (opcode::TEST_UNIT_READY, _) => "TEST UNIT READY",
            (opcode::REQUEST_SENSE, _) => "REQUEST SENSE",
            (opcode::INQUIRY, _) => "INQUIRY",
            (opcode::READ_CAPACITY_10, _) => "READ CAPACITY(10)",
            (opcode::READ_10, _) => "READ(10)",
            (opcode::WRITE_10, _) => "WRITE(10)",
            (opcode::SYNCHRONIZE_CACHE_10, _) => "SYNCHRONIZE CACHE(10)",
            (opcode::READ_16, _) => "READ(16)",
            (opcode::WRITE_16, _) => "WRITE(16)",
            (opcode::SERVICE_ACTION_IN_16, 0x10) => "READ CAPACITY(16)",
            _ => "SCSI command",
        }
    }
}

/// SCSI status codes (SAM-5 §5.3.1 Table 33).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScsiStatus(pub u8);

impl ScsiStatus {
    pub const GOOD: ScsiStatus = ScsiStatus(0x00);
    pub const CHECK_CONDITION: ScsiStatus = ScsiStatus(0x02);
    pub const BUSY: ScsiStatus = ScsiStatus(0x08);
    pub const TASK_SET_FULL: ScsiStatus = ScsiStatus(0x28);
    pub const TASK_ABORTED: ScsiStatus = ScsiStatus(0x40);

    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "GOOD",
            0x02 => "CHECK CONDITION",
            0x04 => "CONDITION MET",
            0x08 => "BUSY",
            0x18 => "RESERVATION CONFLICT",
            0x28 => "TASK SET FULL",
            0x30 => "ACA ACTIVE",
            0x40 => "TASK ABORTED",
            _ => "reserved status",
        }
    }
}

impl fmt::Display for ScsiStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.0)
    }
}

/// Sense key, additional sense code and qualifier (SPC-4 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub code: u8,
    pub qualifier: u8,
}

impl Sense {
    /// Decodes fixed (0x70/0x71) or descriptor (0x72/0x73) format sense data.
    pub fn parse(bytes: &[u8]) -> Option<Sense> {
        match bytes.first()? & 0x7f {
            0x70 | 0x71 if bytes.len() >= 14 => {
                Some(Sense { key: bytes[2] & 0x0f, code: bytes[12], qualifier: bytes[13] })
            }
            0x72 | 0x73 if bytes.len() >= 4 => {
                Some(Sense { key: bytes[1] & 0x0f, code: bytes[2], qualifier: bytes[3] })
            }
            _ => None,
        }
    }

    /// A 24-bit code for error counters: key, ASC, ASCQ.
    pub fn code24(&self) -> u32 {
        (u32::from(self.key) << 16) | (u32::from(self.code) << 8) | u32::from(self.qualifier)
    }

    pub fn key_name(&self) -> &'static str {
        match self.key {
            0x0 => "NO SENSE",
            0x1 => "RECOVERED ERROR",
            0x2 => "NOT READY",
            0x3 => "MEDIUM ERROR",
            0x4 => "HARDWARE ERROR",
            0x5 => "ILLEGAL REQUEST",
            0x6 => "UNIT ATTENTION",
            0x7 => "DATA PROTECT",
            0x8 => "BLANK CHECK",
            0x9 => "VENDOR SPECIFIC",
            0xa => "COPY ABORTED",
            0xb => "ABORTED COMMAND",
            0xd => "VOLUME OVERFLOW",
            0xe => "MISCOMPARE",
            _ => "reserved sense key",
        }
    }

    /// The additional sense code's meaning for the codes a USB drive commonly reports (SPC-4
    /// Annex D), if it is one of them.
    pub fn code_name(&self) -> Option<&'static str> {
        Some(match (self.code, self.qualifier) {
            (0x00, 0x00) => "no additional sense information",
            (0x00, 0x06) => "I/O process terminated",
            (0x04, 0x00) => "logical unit not ready, cause not reportable",
            (0x04, 0x01) => "logical unit is in process of becoming ready",
            (0x04, 0x02) => "logical unit not ready, initializing command required",
            (0x11, 0x00) => "unrecovered read error",
            (0x20, 0x00) => "invalid command operation code",
            (0x21, 0x00) => "logical block address out of range",
            (0x24, 0x00) => "invalid field in CDB",
            (0x25, 0x00) => "logical unit not supported",
            (0x26, 0x00) => "invalid field in parameter list",
            (0x27, 0x00) => "write protected",
            (0x28, 0x00) => "not ready to ready change, medium may have changed",
            (0x29, _) => "power on, reset, or bus device reset occurred",
            (0x3a, _) => "medium not present",
            (0x4b, 0x06) => "initiator detected error, invalid tag",
            (0x4e, 0x00) => "overlapped commands attempted",
            _ => return None,
        })
    }

    /// NOT READY, becoming ready, or UNIT ATTENTION: TEST UNIT READY is worth repeating.
    pub fn worth_retrying(&self) -> bool {
        matches!((self.key, self.code, self.qualifier), (0x2, 0x04, 0x01) | (0x6, 0x28, _) | (0x6, 0x29, _))
            || (self.key == 0x2 && self.code == 0x04 && self.qualifier == 0x00)
    }
}

impl fmt::Display for Sense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key_name())?;
        if let Some(name) = self.code_name() {
            write!(f, ": {name}")?;
        }
        write!(f, " ({:02x}/{:02x}/{:02x})", self.key, self.code, self.qualifier)
    }
}

/// Standard INQUIRY data (SPC-4 §6.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inquiry {
    /// Peripheral device type (0 = direct access block device).
    pub device_type: u8,
    /// Peripheral qualifier (0 = connected).
    pub qualifier: u8,
    pub removable: bool,
    /// VERSION (6 = SPC-4).
    pub version: u8,
    pub vendor: [u8; 8],
    pub product: [u8; 16],
    pub revision: [u8; 4],
}

impl Inquiry {
    /// Decodes the first 36 bytes; shorter answers have blank strings where bytes are missing.
    pub fn parse(bytes: &[u8]) -> Option<Inquiry> {
        if bytes.len() < 5 {
            return None;
        }
        let field = |start: usize, out: &mut [u8]| {
            for (index, byte) in out.iter_mut().enumerate() {
                *byte =
                    bytes.get(start + index).copied().filter(|b| (0x20..0x7f).contains(b)).unwrap_or(b' ');
            }
        };
        let mut inquiry = Inquiry {
            device_type: bytes[0] & 0x1f,
            qualifier: bytes[0] >> 5,
            removable: bytes[1] & 0x80 != 0,
            version: bytes[2],
            vendor: [b' '; 8],
            product: [b' '; 16],
            revision: [b' '; 4],
        };
        field(8, &mut inquiry.vendor);
        field(16, &mut inquiry.product);
        field(32, &mut inquiry.revision);
        Some(inquiry)
    }

    pub fn vendor_text(&self) -> &str {
        text(&self.vendor)
    }

    pub fn product_text(&self) -> &str {
        text(&self.product)
    }

    pub fn revision_text(&self) -> &str {
        text(&self.revision)
    }

    pub fn device_type_name(&self) -> &'static str {
        match self.device_type {
            0x00 => "direct-access block device",
            0x05 => "CD/DVD device",
            0x07 => "optical memory device",
            0x0e => "simplified direct-access device",
            0x1f => "unknown or no device type",
            _ => "not a block device",
        }
    }

    /// A disk the benchmark can read: connected, direct access (SBC).
    pub fn is_direct_access(&self) -> bool {
        self.qualifier == 0 && (self.device_type == 0x00 || self.device_type == 0x0e)
    }
}

fn text(bytes: &[u8]) -> &str {
    core::str::from_utf8(bytes).unwrap_or("?").trim_end()
}

/// What READ CAPACITY says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    pub last_lba: u64,
    pub block_bytes: u32,
}

impl Capacity {
    /// READ CAPACITY(10) data (SBC-3 §5.16.2); a last LBA of 0xFFFFFFFF means "use (16)".
    pub fn parse_10(bytes: &[u8]) -> Option<Capacity> {
        let bytes: &[u8; 8] = bytes.get(..READ_CAPACITY_10_BYTES)?.try_into().ok()?;
        Some(Capacity {
            last_lba: u64::from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            block_bytes: u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        })
    }

    /// READ CAPACITY(16) parameter data (SBC-3 §5.17.2).
    pub fn parse_16(bytes: &[u8]) -> Option<Capacity> {
        let last = bytes.get(..8)?;
        let size = bytes.get(8..12)?;
        Some(Capacity {
            last_lba: u64::from_be_bytes(last.try_into().ok()?),
            block_bytes: u32::from_be_bytes(size.try_into().ok()?),
        })
    }

    /// READ CAPACITY(10) could not say: the medium has 2^32 blocks or more.
    pub fn needs_16(&self) -> bool {
        self.last_lba == 0xffff_ffff
    }

    pub fn blocks(&self) -> u64 {
        self.last_lba + 1
    }

    /// A block size the block interface can carry: a power of two from 512 to 64 KiB.
    pub fn block_size_is_usable(&self) -> bool {
        self.block_bytes.is_power_of_two() && (512..=65536).contains(&self.block_bytes)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn cdbs_have_the_layouts_of_spc4_and_sbc3() {
        assert_eq!(Cdb::test_unit_ready().as_slice(), [0; 6]);
        assert_eq!(Cdb::request_sense(18).as_slice(), [3, 0, 0, 0, 18, 0]);
        assert_eq!(Cdb::inquiry(36).as_slice(), [0x12, 0, 0, 0, 36, 0]);
        assert_eq!(Cdb::read_capacity_10().as_slice(), [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Cdb::read_capacity_16().as_slice(),
            [0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0]
        );
        assert_eq!(Cdb::read_10(0x0102_0304, 0x0506).as_slice(), [0x28, 0, 1, 2, 3, 4, 0, 5, 6, 0]);
        assert_eq!(
            Cdb::read_16(0x0102_0304_0506_0708, 0x090a_0b0c).as_slice(),
            [0x88, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0, 0]
        );
        assert_eq!(Cdb::write_10(7, 8).as_slice(), [0x2a, 0, 0, 0, 0, 7, 0, 0, 8, 0]);
        assert_eq!(Cdb::write_16(7, 8).as_slice()[..2], [0x8a, 0]);
        assert_eq!(Cdb::write_16(7, 8).as_slice()[13], 8);
        assert_eq!(Cdb::synchronize_cache().as_slice(), [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn transfers_pick_the_short_form_when_it_fits() {
        assert_eq!(Cdb::transfer(false, 100, 8, false).opcode(), opcode::READ_10);
        assert_eq!(Cdb::transfer(true, 100, 8, false).opcode(), opcode::WRITE_10);
        assert_eq!(Cdb::transfer(false, 100, 8, true).opcode(), opcode::READ_16);
        assert_eq!(Cdb::transfer(false, 0xffff_fff8, 8, false).opcode(), opcode::READ_10, "ends at 2^32");
        assert_eq!(Cdb::transfer(false, 0xffff_fff9, 8, false).opcode(), opcode::READ_16, "ends past 2^32");
        assert_eq!(Cdb::transfer(false, 0, 0x1_0000, false).opcode(), opcode::READ_16, "count past 16 bits");
        assert_eq!(Cdb::transfer(true, 1 << 40, 1, false).opcode(), opcode::WRITE_16);
        assert_eq!(Cdb::transfer(false, u64::MAX, 1, false).opcode(), opcode::READ_16);
        assert_eq!(Cdb::read_capacity_16().name(), "READ CAPACITY(16)");
        assert_eq!(Cdb::read_10(0, 1).name(), "READ(10)");
        let mut odd = Cdb::read_capacity_16();
        odd.bytes[1] = 0x11;
        assert_eq!(odd.name(), "SCSI command");
    }

    #[test]
    fn sense_data_decodes_in_both_formats_with_names() {
        // QEMU's MEDIUM ERROR for a blkdebug errno 61 (docs/usb-storage.md §8).
        let mut fixed = [0u8; 18];
        fixed[0] = 0x70;
        fixed[2] = 0x03;
        fixed[7] = 10;
        fixed[12] = 0x11;
        let sense = Sense::parse(&fixed).unwrap();
        assert_eq!(sense, Sense { key: 3, code: 0x11, qualifier: 0 });
        assert_eq!(format!("{sense}"), "MEDIUM ERROR: unrecovered read error (03/11/00)");
        assert_eq!(sense.code24(), 0x03_11_00);
        let descriptor = [0x72, 0x0b, 0x00, 0x06, 0, 0, 0, 0];
        let aborted = Sense::parse(&descriptor).unwrap();
        assert_eq!(format!("{aborted}"), "ABORTED COMMAND: I/O process terminated (0b/00/06)");
        assert_eq!(Sense::parse(&[0x70, 0, 2]), None, "too short");
        assert_eq!(Sense::parse(&[0x05; 18]), None, "not a sense format");
        assert_eq!(Sense::parse(&[]), None);
        let vendor = Sense { key: 9, code: 0x80, qualifier: 1 };
        assert_eq!(format!("{vendor}"), "VENDOR SPECIFIC (09/80/01)");
    }

    #[test]
    fn only_becoming_ready_and_unit_attention_are_retried() {
        assert!(Sense { key: 2, code: 4, qualifier: 1 }.worth_retrying());
        assert!(Sense { key: 2, code: 4, qualifier: 0 }.worth_retrying());
        assert!(Sense { key: 6, code: 0x28, qualifier: 0 }.worth_retrying());
        assert!(Sense { key: 6, code: 0x29, qualifier: 2 }.worth_retrying());
        assert!(!Sense { key: 2, code: 0x3a, qualifier: 0 }.worth_retrying(), "no medium: give up");
        assert!(!Sense { key: 3, code: 0x11, qualifier: 0 }.worth_retrying());
        assert!(!Sense { key: 2, code: 4, qualifier: 2 }.worth_retrying());
    }

    #[test]
    fn inquiry_strings_and_type_decode() {
        let mut bytes = [0u8; 36];
        bytes[1] = 0x80;
        bytes[2] = 5;
        bytes[8..16].copy_from_slice(b"QEMU    ");
        bytes[16..32].copy_from_slice(b"QEMU HARDDISK   ");
        bytes[32..36].copy_from_slice(b"2.5+");
        let inquiry = Inquiry::parse(&bytes).unwrap();
        assert_eq!(
            (inquiry.vendor_text(), inquiry.product_text(), inquiry.revision_text()),
            ("QEMU", "QEMU HARDDISK", "2.5+")
        );
        assert!(inquiry.removable && inquiry.is_direct_access());
        assert_eq!(inquiry.device_type_name(), "direct-access block device");
        // Short and dirty answers: blanks for what is missing, control bytes blanked.
        let short = Inquiry::parse(&[0x05, 0, 0, 0, 0, 0, 0, 0, b'A', 0x01, b'B']).unwrap();
        assert_eq!(short.vendor_text(), "A B");
        assert!(!short.is_direct_access());
        assert_eq!(short.device_type_name(), "CD/DVD device");
        assert_eq!(Inquiry::parse(&[0; 4]), None);
        let absent = Inquiry::parse(&[0x7f, 0, 0, 0, 0]).unwrap();
        assert!(!absent.is_direct_access(), "qualifier 3: no device");
    }

    #[test]
    fn capacities_decode_and_say_when_16_is_needed() {
        let capacity = Capacity::parse_10(&[0, 0x01, 0xff, 0xff, 0, 0, 2, 0]).unwrap();
        assert_eq!((capacity.blocks(), capacity.block_bytes), (131_072, 512));
        assert!(!capacity.needs_16() && capacity.block_size_is_usable());
        assert!(Capacity::parse_10(&[0xff, 0xff, 0xff, 0xff, 0, 0, 2, 0]).unwrap().needs_16());
        let mut long = [0u8; 32];
        long[..8].copy_from_slice(&0x1_0000_0000u64.to_be_bytes());
        long[8..12].copy_from_slice(&4096u32.to_be_bytes());
        let big = Capacity::parse_16(&long).unwrap();
        assert_eq!((big.blocks(), big.block_bytes), (0x1_0000_0001, 4096));
        assert_eq!(Capacity::parse_10(&[0; 7]), None);
        assert_eq!(Capacity::parse_16(&[0; 11]), None);
        assert!(!Capacity { last_lba: 0, block_bytes: 520 }.block_size_is_usable());
        assert!(!Capacity { last_lba: 0, block_bytes: 256 }.block_size_is_usable());
        assert_eq!(format!("{}", ScsiStatus::CHECK_CONDITION), "CHECK CONDITION (0x02)");
        assert_eq!(ScsiStatus(0x99).name(), "reserved status");
    }
}
