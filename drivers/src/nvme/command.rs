//! NVMe submission and completion queue entries (NVMe Base Specification 1.4 §4.2 "Submission
//! Queue Entry - Command Format", §4.6 "Completion Queue Entry") and the commands this driver
//! sends: Identify (§5.15), Set Features Number of Queues (§5.21.1.7), Create/Delete I/O
//! Completion and Submission Queue (§5.3-5.6) and NVM Read (NVM Command Set 1.0 / NVMe 1.4
//! §6.9); layouts as summarised in docs/nvme-and-fio.md §1.4-1.8.
#![forbid(unsafe_code)]

use super::status::Status;

pub const SUBMISSION_ENTRY_BYTES: usize = 64;
pub const COMPLETION_ENTRY_BYTES: usize = 16;
/// log2 of the entry sizes, as CC.IOSQES / CC.IOCQES and Identify SQES / CQES encode them.
pub const SUBMISSION_ENTRY_SHIFT: u8 = 6;
pub const COMPLETION_ENTRY_SHIFT: u8 = 4;

/// Admin command opcodes (NVMe 1.4 Figure 139).
pub mod admin_opcode {
    pub const DELETE_IO_SUBMISSION_QUEUE: u8 = 0x00;
    pub const CREATE_IO_SUBMISSION_QUEUE: u8 = 0x01;
    pub const DELETE_IO_COMPLETION_QUEUE: u8 = 0x04;
    pub const CREATE_IO_COMPLETION_QUEUE: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
}

/// NVM command set opcodes (NVMe 1.4 Figure 346).
pub mod io_opcode {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
}

/// Identify CNS values (NVMe 1.4 Figure 244).
pub mod cns {
    pub const NAMESPACE: u8 = 0x00;
    pub const CONTROLLER: u8 = 0x01;
    pub const ACTIVE_NAMESPACE_LIST: u8 = 0x02;
}

/// Feature identifiers (NVMe 1.4 Figure 271).
pub mod feature {
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    pub const HOST_MEMORY_BUFFER: u8 = 0x0d;
}

/// The name of an admin opcode, for messages.
pub fn admin_opcode_name(opcode: u8) -> &'static str {
    match opcode {
        admin_opcode::DELETE_IO_SUBMISSION_QUEUE => "Delete I/O Submission Queue",
        admin_opcode::CREATE_IO_SUBMISSION_QUEUE => "Create I/O Submission Queue",
        admin_opcode::DELETE_IO_COMPLETION_QUEUE => "Delete I/O Completion Queue",
        admin_opcode::CREATE_IO_COMPLETION_QUEUE => "Create I/O Completion Queue",
        admin_opcode::IDENTIFY => "Identify",
        admin_opcode::ABORT => "Abort",
        admin_opcode::SET_FEATURES => "Set Features",
        _ => "admin command",
    }
}

/// The name of an NVM opcode, for messages.
pub fn io_opcode_name(opcode: u8) -> &'static str {
    match opcode {
        io_opcode::FLUSH => "Flush",
        io_opcode::WRITE => "Write",
        io_opcode::READ => "Read",
        _ => "I/O command",
    }
}

/// One 64-byte submission queue entry as sixteen little-endian dwords. Aligned to 8 bytes so that
/// the bare-metal targets (strict alignment, no NEON) build, zero and copy it with 8-byte stores
/// instead of calls to `memset` and `memcpy` (about 40 instructions each per command, as
/// `barebench qemu --profile` showed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct SubmissionEntry {
    pub dwords: [u32; 16],
}

impl SubmissionEntry {
    /// CDW0 = opcode, FUSE = 0 (normal), PSDT = 0 (PRPs); NSID in dword 1.
    pub fn new(opcode: u8, namespace_id: u32) -> Self {
        let mut dwords = [0u32; 16];
        dwords[0] = u32::from(opcode);
        dwords[1] = namespace_id;
        SubmissionEntry { dwords }
    }

    pub fn opcode(&self) -> u8 {
        self.dwords[0] as u8
    }

    /// Fused operation (CDW0 bits 9:8).
    pub fn fuse(&self) -> u8 {
        ((self.dwords[0] >> 8) & 0x3) as u8
    }

    /// PRP or SGL for Data Transfer (CDW0 bits 15:14).
    pub fn psdt(&self) -> u8 {
        ((self.dwords[0] >> 14) & 0x3) as u8
    }

    pub fn command_id(&self) -> u16 {
        (self.dwords[0] >> 16) as u16
    }

    /// The entry as eight little-endian 64-bit words, for writing it with half as many stores
    /// as dwords (queue memory is little-endian, NVMe 1.4 §1.5 "Byte, word and dword
    /// relationships").
    pub fn quadwords(&self) -> [u64; 8] {
        let d = &self.dwords;
        let pair = |low: u32, high: u32| u64::from(low) | u64::from(high) << 32;
        [
            pair(d[0], d[1]),
            pair(d[2], d[3]),
            pair(d[4], d[5]),
            pair(d[6], d[7]),
            pair(d[8], d[9]),
            pair(d[10], d[11]),
            pair(d[12], d[13]),
            pair(d[14], d[15]),
        ]
    }

    pub fn set_command_id(&mut self, command_id: u16) {
        self.dwords[0] = (self.dwords[0] & 0xffff) | u32::from(command_id) << 16;
    }

    pub fn namespace_id(&self) -> u32 {
        self.dwords[1]
    }

    /// Data pointer entries (bytes 24-31 and 32-39).
    pub fn prp1(&self) -> u64 {
        u64::from(self.dwords[6]) | u64::from(self.dwords[7]) << 32
    }

    pub fn prp2(&self) -> u64 {
        u64::from(self.dwords[8]) | u64::from(self.dwords[9]) << 32
    }

    pub fn set_prps(&mut self, prp1: u64, prp2: u64) {
        self.dwords[6] = prp1 as u32;
        self.dwords[7] = (prp1 >> 32) as u32;
        self.dwords[8] = prp2 as u32;
        self.dwords[9] = (prp2 >> 32) as u32;
    }

    /// Command dword 10..15.
    pub fn cdw(&self, index: usize) -> u32 {
        self.dwords[index]
    }

    /// Identify (NVMe 1.4 §5.15): CNS in CDW10 bits 7:0, the 4 KiB result at `buffer_bus`.
    pub fn identify(cns_value: u8, namespace_id: u32, buffer_bus: u64) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::IDENTIFY, namespace_id);
        entry.set_prps(buffer_bus, 0);
        entry.dwords[10] = u32::from(cns_value);
        entry
    }

    /// Set Features, Number of Queues (NVMe 1.4 §5.21.1.7): `submission_queues` and
    /// `completion_queues` I/O queues wanted (1-based here, written 0-based).
    pub fn set_number_of_queues(submission_queues: u16, completion_queues: u16) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::SET_FEATURES, 0);
        entry.dwords[10] = u32::from(feature::NUMBER_OF_QUEUES);
        entry.dwords[11] = u32::from(completion_queues.saturating_sub(1)) << 16
            | u32::from(submission_queues.saturating_sub(1));
        entry
    }

    /// Abort (NVMe Base Specification 2.0 §5.1): CDW10 bits 15:0 the submission queue, bits
    /// 31:16 the command identifier of the command to abort.
    pub fn abort(queue_id: u16, command_id: u16) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::ABORT, 0);
        entry.dwords[10] = u32::from(command_id) << 16 | u32::from(queue_id);
        entry
    }

    /// Create I/O Completion Queue (NVMe 1.4 §5.3), polled: PC = 1, IEN = 0, IV = 0.
    pub fn create_io_completion_queue(queue_id: u16, entries: u32, base_bus: u64) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::CREATE_IO_COMPLETION_QUEUE, 0);
        entry.set_prps(base_bus, 0);
        entry.dwords[10] = (entries - 1) << 16 | u32::from(queue_id);
        // CDW11: IV 31:16 = 0, IEN bit 1 = 0, PC bit 0 = 1.
        entry.dwords[11] = 1;
        entry
    }

    /// Create I/O Submission Queue (NVMe 1.4 §5.4): PC = 1, QPRIO = 0 (urgent/ignored under
    /// round robin), CQID = `completion_queue_id`.
    pub fn create_io_submission_queue(
        queue_id: u16,
        entries: u32,
        base_bus: u64,
        completion_queue_id: u16,
    ) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::CREATE_IO_SUBMISSION_QUEUE, 0);
        entry.set_prps(base_bus, 0);
        entry.dwords[10] = (entries - 1) << 16 | u32::from(queue_id);
        entry.dwords[11] = u32::from(completion_queue_id) << 16 | 1;
        entry
    }

    /// Delete I/O Submission Queue (NVMe 1.4 §5.6).
    pub fn delete_io_submission_queue(queue_id: u16) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::DELETE_IO_SUBMISSION_QUEUE, 0);
        entry.dwords[10] = u32::from(queue_id);
        entry
    }

    /// Delete I/O Completion Queue (NVMe 1.4 §5.5).
    pub fn delete_io_completion_queue(queue_id: u16) -> Self {
        let mut entry = SubmissionEntry::new(admin_opcode::DELETE_IO_COMPLETION_QUEUE, 0);
        entry.dwords[10] = u32::from(queue_id);
        entry
    }

    /// Read (NVMe 1.4 §6.9): SLBA in CDW10/11, NLB (0-based) in CDW12 bits 15:0, no FUA, no
    /// limited retry, no protection information.
    pub fn read(namespace_id: u32, lba: u64, block_count: u32, prp1: u64, prp2: u64) -> Self {
        Self::transfer(io_opcode::READ, namespace_id, lba, block_count, (prp1, prp2))
    }

    /// Write (NVMe 1.4 §6.15): the same fields as a Read (no FUA: durability is the Flush's).
    pub fn write(namespace_id: u32, lba: u64, block_count: u32, prp1: u64, prp2: u64) -> Self {
        Self::transfer(io_opcode::WRITE, namespace_id, lba, block_count, (prp1, prp2))
    }

    /// Flush (NVMe 1.4 §6.8): commits the namespace's volatile write cache; no data, no fields
    /// besides NSID.
    pub fn flush(namespace_id: u32) -> Self {
        SubmissionEntry::new(io_opcode::FLUSH, namespace_id)
    }

    fn transfer(opcode: u8, namespace_id: u32, lba: u64, block_count: u32, (prp1, prp2): (u64, u64)) -> Self {
        SubmissionEntry::from_quadwords(
            IoEntry::transfer(opcode, 0, namespace_id, (lba, block_count), (prp1, prp2)).quadwords,
        )
    }

    /// The entry whose eight little-endian 64-bit words are `quadwords`.
    pub fn from_quadwords(quadwords: [u64; 8]) -> Self {
        SubmissionEntry {
            dwords: core::array::from_fn(|index| (quadwords[index / 2] >> (32 * (index % 2))) as u32),
        }
    }

    /// For a Read or Write: starting LBA and block count.
    pub fn read_range(&self) -> (u64, u32) {
        (u64::from(self.dwords[10]) | u64::from(self.dwords[11]) << 32, (self.dwords[12] & 0xffff) + 1)
    }
}

/// An NVM I/O command (Read, Write or Flush) as the eight little-endian 64-bit words of its
/// 64-byte entry (NVMe 1.4 Figure 104; queue memory is little-endian, §1.5), built in registers
/// so that the queue pair writes it into the SQ with eight stores: no entry assembled dword by
/// dword on the stack and copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoEntry {
    pub quadwords: [u64; 8],
}

impl IoEntry {
    /// Read (NVMe 1.4 §6.9) or Write (§6.15): CDW0 = opcode, FUSE = 0, PSDT = 0 (PRPs), the
    /// command identifier in bits 31:16; NSID; PRP1, PRP2; SLBA in CDW10/11; NLB (0-based) in
    /// CDW12 bits 15:0 (no FUA, no limited retry, no protection information); everything else 0.
    #[inline]
    pub fn transfer(
        opcode: u8,
        command_id: u16,
        namespace_id: u32,
        (lba, block_count): (u64, u32),
        (prp1, prp2): (u64, u64),
    ) -> Self {
        debug_assert!((1..=65536).contains(&block_count));
        let dword12 = u64::from(block_count.wrapping_sub(1) & 0xffff);
        IoEntry {
            quadwords: [Self::head(opcode, command_id, namespace_id), 0, 0, prp1, prp2, lba, dword12, 0],
        }
    }

    /// Flush (NVMe 1.4 §6.8): no data, no fields besides NSID.
    #[inline]
    pub fn flush(command_id: u16, namespace_id: u32) -> Self {
        IoEntry { quadwords: [Self::head(io_opcode::FLUSH, command_id, namespace_id), 0, 0, 0, 0, 0, 0, 0] }
    }

    /// CDW0 and NSID.
    fn head(opcode: u8, command_id: u16, namespace_id: u32) -> u64 {
        u64::from(opcode) | u64::from(command_id) << 16 | u64::from(namespace_id) << 32
    }
}

/// One 16-byte completion queue entry as four little-endian dwords.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionEntry {
    pub dwords: [u32; 4],
}

impl CompletionEntry {
    /// Dword 0, command specific (Set Features Number of Queues puts NSQA/NCQA here).
    pub fn command_specific(&self) -> u32 {
        self.dwords[0]
    }

    /// SQ Head Pointer (DW2 bits 15:0).
    pub fn sq_head(&self) -> u16 {
        self.dwords[2] as u16
    }

    /// SQ Identifier (DW2 bits 31:16).
    pub fn sq_id(&self) -> u16 {
        (self.dwords[2] >> 16) as u16
    }

    /// Command Identifier (DW3 bits 15:0).
    pub fn command_id(&self) -> u16 {
        self.dwords[3] as u16
    }

    /// Phase Tag (DW3 bit 16).
    pub fn phase(&self) -> bool {
        phase_of(self.dwords[3])
    }

    /// The status field (DW3 bits 31:17).
    pub fn status(&self) -> Status {
        Status::from_field((self.dwords[3] >> 17) as u16)
    }

    /// Builds an entry (the simulated controller uses this; also handy in tests).
    pub fn new(
        command_specific: u32,
        sq_head: u16,
        sq_id: u16,
        command_id: u16,
        phase: bool,
        status: Status,
    ) -> Self {
        CompletionEntry {
            dwords: [
                command_specific,
                0,
                u32::from(sq_id) << 16 | u32::from(sq_head),
                u32::from(status.field()) << 17 | u32::from(phase) << 16 | u32::from(command_id),
            ],
        }
    }
}

/// The phase tag of a CQE's dword 3.
pub fn phase_of(dword3: u32) -> bool {
    dword3 & (1 << 16) != 0
}

/// Number of Queues as the controller allocated them (CQE DW0: NSQA 15:0, NCQA 31:16, both
/// 0-based; NVMe 1.4 Figure 285), as 1-based counts (submission, completion).
pub fn allocated_queue_counts(command_specific: u32) -> (u32, u32) {
    ((command_specific & 0xffff) + 1, (command_specific >> 16) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_encodes_lba_count_and_prps() {
        let mut entry = SubmissionEntry::read(1, 0x1_2345_6789, 256, 0x4000_1200, 0x10_0000_0000);
        entry.set_command_id(0xBEEF);
        assert_eq!(entry.dwords[0], 0xBEEF_0002);
        assert_eq!(entry.opcode(), io_opcode::READ);
        assert_eq!((entry.fuse(), entry.psdt()), (0, 0));
        assert_eq!(entry.command_id(), 0xBEEF);
        assert_eq!(entry.namespace_id(), 1);
        assert_eq!(entry.dwords[10], 0x2345_6789);
        assert_eq!(entry.dwords[11], 0x1);
        assert_eq!(entry.dwords[12], 255);
        assert_eq!(entry.prp1(), 0x4000_1200);
        assert_eq!(entry.prp2(), 0x10_0000_0000);
        assert_eq!(entry.read_range(), (0x1_2345_6789, 256));
        let largest = SubmissionEntry::read(1, 0, 65536, 0, 0);
        assert_eq!(largest.dwords[12], 0xffff);
        assert_eq!(largest.read_range().1, 65536);
        entry.set_command_id(1);
        assert_eq!(entry.dwords[0], 0x0001_0002, "the old CID is replaced");
    }

    #[test]
    fn admin_commands_encode_their_fields() {
        let identify = SubmissionEntry::identify(cns::CONTROLLER, 0, 0x8000_0000);
        assert_eq!(identify.opcode(), 0x06);
        assert_eq!(identify.dwords[10], 1);
        assert_eq!(identify.prp1(), 0x8000_0000);
        assert_eq!(identify.prp2(), 0);

        let abort = SubmissionEntry::abort(3, 0x1234);
        assert_eq!((abort.opcode(), abort.dwords[10]), (0x08, 0x1234_0003));

        let queues = SubmissionEntry::set_number_of_queues(4, 2);
        assert_eq!(queues.opcode(), 0x09);
        assert_eq!(queues.dwords[10], 0x07);
        assert_eq!(queues.dwords[11], 0x0001_0003);

        let cq = SubmissionEntry::create_io_completion_queue(3, 256, 0x4010_0000);
        assert_eq!(cq.opcode(), 0x05);
        assert_eq!(cq.dwords[10], 0x00FF_0003);
        assert_eq!(cq.dwords[11], 0x0000_0001, "PC = 1, IEN = 0, IV = 0");
        assert_eq!(cq.prp1(), 0x4010_0000);

        let sq = SubmissionEntry::create_io_submission_queue(3, 1024, 0x4020_0000, 3);
        assert_eq!(sq.opcode(), 0x01);
        assert_eq!(sq.dwords[10], 0x03FF_0003);
        assert_eq!(sq.dwords[11], 0x0003_0001, "CQID 3, PC = 1");

        assert_eq!(SubmissionEntry::delete_io_submission_queue(2).dwords[10], 2);
        assert_eq!(SubmissionEntry::delete_io_submission_queue(2).opcode(), 0x00);
        assert_eq!(SubmissionEntry::delete_io_completion_queue(2).opcode(), 0x04);
    }

    #[test]
    fn completion_fields_decode() {
        let status = Status::new(0, 0x80, true);
        let entry = CompletionEntry::new(0x003F_003F, 17, 2, 300, true, status);
        assert_eq!(entry.command_specific(), 0x003F_003F);
        assert_eq!(entry.sq_head(), 17);
        assert_eq!(entry.sq_id(), 2);
        assert_eq!(entry.command_id(), 300);
        assert!(entry.phase());
        assert_eq!(entry.status(), status);
        assert_eq!(entry.dwords[3] >> 31, 1, "DNR is bit 31");
        let quiet = CompletionEntry::new(0, 0, 0, 0, false, Status::SUCCESS);
        assert!(!quiet.phase());
        assert!(quiet.status().is_success());
        assert_eq!(allocated_queue_counts(0x003F_0007), (8, 64));
    }
}
