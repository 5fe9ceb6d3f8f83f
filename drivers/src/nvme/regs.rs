//! NVMe controller registers at BAR0 (NVMe Base Specification 1.4, §3.1 "Register Definition";
//! offsets and fields as tabulated in docs/nvme-and-fio.md §1.1): CAP, VS, CC, CSTS, AQA, ASQ, ACQ and
//! the doorbells from 0x1000, with their fields declared for `tock_registers::LocalRegisterCopy`.
#![forbid(unsafe_code)]

use core::fmt;
use hal::mmio::Reg;
use tock_registers::register_bitfields;
use tock_registers::LocalRegisterCopy;

/// Byte offsets from BAR0 (NVMe 1.4 §3.1, Figure 68).
pub mod offsets {
    pub const CAP: usize = 0x00;
    pub const VS: usize = 0x08;
    /// Interrupt Mask Set / Clear (NVMe 1.4 §3.1.3-3.1.4).
    pub const INTMS: usize = 0x0C;
    pub const INTMC: usize = 0x10;
    pub const CC: usize = 0x14;
    pub const CSTS: usize = 0x1C;
    pub const AQA: usize = 0x24;
    pub const ASQ: usize = 0x28;
    pub const ACQ: usize = 0x30;
    /// SQ 0 tail doorbell; the others follow at the doorbell stride (NVMe 1.4 §3.1.24-25).
    pub const DOORBELLS: usize = 0x1000;
}

register_bitfields! [u64,
    /// Controller Capabilities (NVMe 1.4 §3.1.1).
    pub CAP [
        /// Maximum Queue Entries Supported, 0-based.
        MQES OFFSET(0) NUMBITS(16) [],
        /// Contiguous Queues Required.
        CQR OFFSET(16) NUMBITS(1) [],
        /// Arbitration Mechanism Supported.
        AMS OFFSET(17) NUMBITS(2) [],
        /// Timeout: worst-case time for CSTS.RDY to follow CC.EN, in 500 ms units.
        TO OFFSET(24) NUMBITS(8) [],
        /// Doorbell Stride: 4 << DSTRD bytes between doorbells.
        DSTRD OFFSET(32) NUMBITS(4) [],
        /// NVM Subsystem Reset Supported.
        NSSRS OFFSET(36) NUMBITS(1) [],
        /// Command Sets Supported; bit 0 = NVM command set.
        CSS OFFSET(37) NUMBITS(8) [],
        /// Boot Partition Support.
        BPS OFFSET(45) NUMBITS(1) [],
        /// Memory Page Size Minimum: 2^(12 + MPSMIN) bytes.
        MPSMIN OFFSET(48) NUMBITS(4) [],
        /// Memory Page Size Maximum: 2^(12 + MPSMAX) bytes.
        MPSMAX OFFSET(52) NUMBITS(4) [],
        /// Persistent Memory Region Supported.
        PMRS OFFSET(56) NUMBITS(1) [],
        /// Controller Memory Buffer Supported.
        CMBS OFFSET(57) NUMBITS(1) []
    ]
];

register_bitfields! [u32,
    /// Version (NVMe 1.4 §3.1.2).
    pub VS [
        TER OFFSET(0) NUMBITS(8) [],
        MNR OFFSET(8) NUMBITS(8) [],
        MJR OFFSET(16) NUMBITS(16) []
    ],
    /// Controller Configuration (NVMe 1.4 §3.1.5).
    pub CC [
        EN OFFSET(0) NUMBITS(1) [],
        /// I/O Command Set Selected (0 = NVM).
        CSS OFFSET(4) NUMBITS(3) [],
        /// Memory Page Size: 2^(12 + MPS) bytes.
        MPS OFFSET(7) NUMBITS(4) [],
        /// Arbitration Mechanism Selected (0 = round robin).
        AMS OFFSET(11) NUMBITS(3) [],
        /// Shutdown Notification.
        SHN OFFSET(14) NUMBITS(2) [
            None = 0,
            Normal = 1,
            Abrupt = 2
        ],
        /// I/O Submission Queue Entry Size: 2^IOSQES bytes.
        IOSQES OFFSET(16) NUMBITS(4) [],
        /// I/O Completion Queue Entry Size: 2^IOCQES bytes.
        IOCQES OFFSET(20) NUMBITS(4) []
    ],
    /// Controller Status (NVMe 1.4 §3.1.6).
    pub CSTS [
        RDY OFFSET(0) NUMBITS(1) [],
        /// Controller Fatal Status.
        CFS OFFSET(1) NUMBITS(1) [],
        /// Shutdown Status.
        SHST OFFSET(2) NUMBITS(2) [
            Normal = 0,
            Occurring = 1,
            Complete = 2
        ],
        NSSRO OFFSET(4) NUMBITS(1) [],
        /// Processing Paused.
        PP OFFSET(5) NUMBITS(1) []
    ],
    /// Admin Queue Attributes (NVMe 1.4 §3.1.8); both sizes 0-based.
    pub AQA [
        ASQS OFFSET(0) NUMBITS(12) [],
        ACQS OFFSET(16) NUMBITS(12) []
    ]
];

/// The largest admin queue AQA can describe (NVMe 1.4 §3.1.8: 4096 entries).
pub const ADMIN_QUEUE_MAX_ENTRIES: u32 = 4096;

/// CAP decoded into the units the driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub raw: u64,
    /// Largest I/O queue, in entries (CAP.MQES + 1).
    pub max_queue_entries: u32,
    pub contiguous_queues_required: bool,
    /// CAP.TO as given (500 ms units).
    pub timeout_units: u8,
    /// Bytes between doorbell registers (4 << CAP.DSTRD).
    pub doorbell_stride_bytes: usize,
    /// CAP.CSS bit 0.
    pub nvm_command_set: bool,
    pub command_sets: u8,
    pub page_min_bytes: usize,
    pub page_max_bytes: usize,
    pub mpsmin: u8,
    pub mpsmax: u8,
}

impl Capabilities {
    pub fn decode(raw: u64) -> Self {
        let cap = LocalRegisterCopy::<u64, CAP::Register>::new(raw);
        let mpsmin = cap.read(CAP::MPSMIN) as u8;
        let mpsmax = cap.read(CAP::MPSMAX) as u8;
        Capabilities {
            raw,
            max_queue_entries: cap.read(CAP::MQES) as u32 + 1,
            contiguous_queues_required: cap.is_set(CAP::CQR),
            timeout_units: cap.read(CAP::TO) as u8,
            doorbell_stride_bytes: 4usize << cap.read(CAP::DSTRD),
            nvm_command_set: cap.read(CAP::CSS) & 1 != 0,
            command_sets: cap.read(CAP::CSS) as u8,
            page_min_bytes: 1usize << (12 + mpsmin),
            page_max_bytes: 1usize << (12 + mpsmax),
            mpsmin,
            mpsmax,
        }
    }

    /// How long CSTS.RDY may take to follow CC.EN (CAP.TO × 500 ms, NVMe 1.4 §3.1.1).
    pub fn ready_timeout_ms(&self) -> u64 {
        u64::from(self.timeout_units) * 500
    }

    pub fn dstrd(&self) -> u32 {
        self.doorbell_stride_bytes.trailing_zeros() - 2
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CAP {:#018x}: MQES {} ({} entries), DSTRD {} ({}-byte doorbell stride), TO {} ({} ms), MPSMIN {} ({} B), MPSMAX {} ({} B), CQR {}, CSS {:#04x}{}",
            self.raw,
            self.max_queue_entries - 1,
            self.max_queue_entries,
            self.dstrd(),
            self.doorbell_stride_bytes,
            self.timeout_units,
            self.ready_timeout_ms(),
            self.mpsmin,
            self.page_min_bytes,
            self.mpsmax,
            self.page_max_bytes,
            u8::from(self.contiguous_queues_required),
            self.command_sets,
            if self.nvm_command_set { " (NVM)" } else { " (no NVM command set)" }
        )
    }
}

/// The VS register (and Identify Controller VER, same encoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version(pub u32);

impl Version {
    pub fn major(self) -> u16 {
        LocalRegisterCopy::<u32, VS::Register>::new(self.0).read(VS::MJR) as u16
    }
    pub fn minor(self) -> u8 {
        LocalRegisterCopy::<u32, VS::Register>::new(self.0).read(VS::MNR) as u8
    }
    pub fn tertiary(self) -> u8 {
        LocalRegisterCopy::<u32, VS::Register>::new(self.0).read(VS::TER) as u8
    }
    /// At least `major.minor`.
    pub fn at_least(self, major: u16, minor: u8) -> bool {
        (self.major(), self.minor()) >= (major, minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.tertiary())
    }
}

/// CC with the fields the driver sets at enable (docs/nvme-and-fio.md §1.2 step 5): NVM command set,
/// `page_shift - 12` as MPS, round robin, 64-byte SQEs, 16-byte CQEs, EN = 1.
pub fn enable_configuration(mps: u8) -> u32 {
    (CC::EN::SET
        + CC::CSS.val(0)
        + CC::MPS.val(u32::from(mps))
        + CC::AMS.val(0)
        + CC::SHN::None
        + CC::IOSQES.val(6)
        + CC::IOCQES.val(4))
    .value
}

/// CC and CSTS with the fields they decode as (NVMe 1.4 §3.1.5, §3.1.6).
pub const CC: Reg<CC::Register> = Reg::new(offsets::CC);
pub const CSTS: Reg<CSTS::Register> = Reg::new(offsets::CSTS);

/// AQA for an admin SQ of `sq_entries` and CQ of `cq_entries` (sizes are written 0-based).
pub fn admin_queue_attributes(sq_entries: u32, cq_entries: u32) -> u32 {
    (AQA::ASQS.val(sq_entries - 1) + AQA::ACQS.val(cq_entries - 1)).value
}

/// Offset of SQ `queue_id`'s tail doorbell (NVMe 1.4 §3.1.24: 1000h + (2y × (4 << DSTRD))).
pub fn submission_doorbell(queue_id: u16, stride_bytes: usize) -> usize {
    offsets::DOORBELLS + 2 * usize::from(queue_id) * stride_bytes
}

/// Offset of CQ `queue_id`'s head doorbell (NVMe 1.4 §3.1.25: 1000h + ((2y + 1) × (4 << DSTRD))).
pub fn completion_doorbell(queue_id: u16, stride_bytes: usize) -> usize {
    offsets::DOORBELLS + (2 * usize::from(queue_id) + 1) * stride_bytes
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    /// CAP as QEMU 10's `nvme` device reports it (docs/qemu.md §3, read from the device).
    const QEMU_CAP: u64 = 0x0040_0820_0f01_07ff;

    #[test]
    fn qemu_capabilities_decode_as_measured() {
        let cap = Capabilities::decode(QEMU_CAP);
        assert_eq!(cap.max_queue_entries, 2048);
        assert!(cap.contiguous_queues_required);
        assert_eq!(cap.timeout_units, 15);
        assert_eq!(cap.ready_timeout_ms(), 7500);
        assert_eq!(cap.doorbell_stride_bytes, 4);
        assert_eq!(cap.dstrd(), 0);
        assert!(cap.nvm_command_set);
        assert_eq!(cap.command_sets, 0x41);
        assert_eq!(cap.page_min_bytes, 4096);
        assert_eq!(cap.page_max_bytes, 65536);
        let text = std::format!("{cap}");
        assert!(text.contains("MQES 2047 (2048 entries)"), "{text}");
        assert!(text.contains("TO 15 (7500 ms)"), "{text}");
        assert!(text.contains("MPSMAX 4 (65536 B)"), "{text}");
    }

    #[test]
    fn stride_and_page_fields_shift_the_right_way() {
        // DSTRD 3 → 32-byte stride; MPSMIN 1 → 8 KiB (the circle driver shifted DSTRD the wrong
        // way, docs/hardware.md §3.9).
        let cap = Capabilities::decode((3u64 << 32) | (1u64 << 48) | (2u64 << 52) | 0x3f);
        assert_eq!(cap.doorbell_stride_bytes, 32);
        assert_eq!(cap.dstrd(), 3);
        assert_eq!(cap.page_min_bytes, 8192);
        assert_eq!(cap.max_queue_entries, 64);
        assert!(!cap.nvm_command_set);
        assert_eq!(submission_doorbell(0, 32), 0x1000);
        assert_eq!(completion_doorbell(0, 32), 0x1020);
        assert_eq!(submission_doorbell(3, 32), 0x10C0);
        assert_eq!(completion_doorbell(3, 4), 0x101C);
    }

    #[test]
    fn configuration_values_match_the_known_good_one() {
        // CC = 0x00460001 enabled QEMU's controller (docs/qemu.md §3).
        assert_eq!(enable_configuration(0), 0x0046_0001);
        assert_eq!(enable_configuration(2) >> 7 & 0xf, 2);
        let mut cc = LocalRegisterCopy::<u32, CC::Register>::new(0x0046_0001);
        assert!(cc.is_set(CC::EN));
        cc.modify(CC::SHN::Normal);
        assert_eq!(cc.get(), 0x0046_4001);
        cc.modify(CC::EN::CLEAR);
        assert_eq!(cc.get(), 0x0046_4000);
        assert_eq!(admin_queue_attributes(32, 16), 0x000F_001F);
    }

    #[test]
    fn status_bits_decode() {
        let csts = LocalRegisterCopy::<u32, CSTS::Register>::new;
        assert!(csts(1).is_set(CSTS::RDY) && !csts(2).is_set(CSTS::RDY));
        assert!(csts(2).is_set(CSTS::CFS) && !csts(1).is_set(CSTS::CFS));
        assert!(csts(0b1001).matches_all(CSTS::SHST::Complete));
        assert!(!csts(0b0101).matches_all(CSTS::SHST::Complete));
        let version = Version(0x0001_0400);
        assert_eq!(std::format!("{version}"), "1.4.0");
        assert!(version.at_least(1, 1) && version.at_least(1, 4) && !version.at_least(2, 0));
    }
}
