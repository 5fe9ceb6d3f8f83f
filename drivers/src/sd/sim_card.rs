//! The simulated SD card both simulated hosts (`sdhci::sim`, `sdhost::sim`) answer for: what
//! its registers hold and how it behaves during identification (SD Physical Layer Simplified
//! Specification v9.00 §4.2, §5), modelled on QEMU's card (`hw/sd/sd.c`, docs/qemu.md §2)
//! unless a test says otherwise.

/// The simulated card.
#[derive(Clone, Debug)]
pub struct SimCard {
    pub present: bool,
    pub capacity_bytes: u64,
    pub block_addressed: bool,
    pub answers_cmd8: bool,
    pub accepts_1v8: bool,
    /// ACMD41 polls that still answer busy.
    pub busy_polls: u32,
    pub cid: u128,
    pub csd: u128,
    pub scr: [u8; 8],
    pub ssr: [u8; 64],
    pub switch_support: u16,
    pub accepts_cmd23: bool,
    pub rca: u16,
    /// Whether a sampling point exists at all (a card or board too marginal for SDR104 has none).
    pub tunable: bool,
    /// How long after its CMD11 response the card drives DAT[3:0] low, ns (SD §4.2.4.2 says
    /// "immediately"; Linux waits 1 ms before looking).
    pub dat_low_after_cmd11_ns: u64,
    /// 1.8 V switches the card refuses (it keeps DAT[3:0] low after the clock restarts, SD
    /// §4.2.4.2 step 8), counted down across power cycles.
    pub refused_1v8_switches: u32,
    /// An earlier stage left the card at 1.8 V signalling: until its power is cycled it garbles
    /// every answer the host samples at 3.3 V.
    pub left_at_1v8: bool,
    /// An eMMC instead of an SD card.
    pub emmc: Option<SimEmmc>,
    /// An SD 6.00 command queue (`None`: QEMU's card, which has none).
    pub command_queue: Option<SimQueue>,
}

/// Which of its queued tasks a card makes ready first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOrder {
    /// The oldest (sequential mode, or a card that keeps the order).
    Oldest,
    /// The newest: the voluntary mode's freedom used to the full, so tasks run out of order.
    Newest,
}

/// A card with the Performance Enhancement function and a command queue (crate::sd::command_queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimQueue {
    pub depth: u8,
    pub order: QueueOrder,
    /// A task starting at this LBA is refused when run: its CMD46/CMD47 answers with the ERROR
    /// bit and no data moves (a task error).
    pub failing_lba: Option<u64>,
}

/// An eMMC device (JEDEC JESD84-B51): its EXT_CSD, and how many data lines the board wires.
#[derive(Clone, Debug)]
pub struct SimEmmc {
    pub ext_csd: [u8; 512],
    /// Data lines between host and device: 8 on a Compute Module, 4 where a card slot is.
    pub wired_width_bits: u8,
    /// CMD1 polls that still answer busy.
    pub busy_polls: u32,
}

/// JESD84-B51 §7.4 byte offsets the simulated device fills in.
mod ext_csd_offsets {
    pub const S_CMD_SET: usize = 504;
    pub const HPI_FEATURES: usize = 503;
    pub const BKOPS_SUPPORT: usize = 502;
    pub const CMDQ_DEPTH: usize = 307;
    pub const CMDQ_SUPPORT: usize = 308;
    pub const DEVICE_LIFE_TIME_EST_TYP_A: usize = 268;
    pub const DEVICE_LIFE_TIME_EST_TYP_B: usize = 269;
    pub const PRE_EOL_INFO: usize = 267;
    pub const FIRMWARE_VERSION: usize = 254;
    pub const GENERIC_CMD6_TIME: usize = 248;
    pub const POWER_OFF_LONG_TIME: usize = 247;
    pub const INI_TIMEOUT_AP: usize = 241;
    pub const SEC_FEATURE_SUPPORT: usize = 231;
    pub const BOOT_INFO: usize = 228;
    pub const BOOT_SIZE_MULT: usize = 226;
    pub const HC_ERASE_GRP_SIZE: usize = 224;
    pub const HC_WP_GRP_SIZE: usize = 221;
    pub const SEC_COUNT: usize = 212;
    pub const DEVICE_TYPE: usize = 196;
    pub const CSD_STRUCTURE: usize = 194;
    pub const EXT_CSD_REV: usize = 192;
    pub const PARTITIONING_SUPPORT: usize = 160;
}

impl SimEmmc {
    /// An eMMC 5.1 device of `capacity_bytes` as a Compute Module carries one: HS26, HS52,
    /// DDR52, HS200 and HS400 at 1.8 V in DEVICE_TYPE (0x57), 4 MiB boot partitions, command
    /// queue of 32, life time estimates at their best, 8 data lines wired.
    pub fn realistic_5_1(capacity_bytes: u64) -> SimEmmc {
        use ext_csd_offsets::*;
        let mut ext_csd = [0u8; 512];
        ext_csd[S_CMD_SET] = 0x01;
        ext_csd[HPI_FEATURES] = 0x01;
        ext_csd[BKOPS_SUPPORT] = 0x01;
        ext_csd[CMDQ_SUPPORT] = 0x01;
        ext_csd[CMDQ_DEPTH] = 31;
        ext_csd[DEVICE_LIFE_TIME_EST_TYP_A] = 0x01;
        ext_csd[DEVICE_LIFE_TIME_EST_TYP_B] = 0x01;
        ext_csd[PRE_EOL_INFO] = 0x01;
        ext_csd[FIRMWARE_VERSION..FIRMWARE_VERSION + 8].copy_from_slice(b"FW 1.2.3");
        ext_csd[GENERIC_CMD6_TIME] = 0x0a;
        ext_csd[POWER_OFF_LONG_TIME] = 0x3c;
        ext_csd[INI_TIMEOUT_AP] = 0x0a;
        ext_csd[SEC_FEATURE_SUPPORT] = 0x55;
        ext_csd[BOOT_INFO] = 0x07;
        ext_csd[BOOT_SIZE_MULT] = 0x20;
        ext_csd[HC_ERASE_GRP_SIZE] = 0x01;
        ext_csd[HC_WP_GRP_SIZE] = 0x10;
        let sectors = (capacity_bytes / 512) as u32;
        ext_csd[SEC_COUNT..SEC_COUNT + 4].copy_from_slice(&sectors.to_le_bytes());
        ext_csd[DEVICE_TYPE] = 0x57;
        ext_csd[CSD_STRUCTURE] = 0x02;
        ext_csd[EXT_CSD_REV] = 0x08;
        ext_csd[PARTITIONING_SUPPORT] = 0x07;
        SimEmmc { ext_csd, wired_width_bits: 8, busy_polls: 3 }
    }
}

impl SimCard {
    /// QEMU's card for an image of `capacity_bytes` (docs/qemu.md §2: SDSC up to 2 GiB, CSD v1,
    /// OCR 0x80ffff00; SDHC above, CSD v2, OCR 0xc0ffff00; SCR 0x02258000; CMD6 support 0x8003).
    pub fn qemu_like(capacity_bytes: u64) -> SimCard {
        let block_addressed = capacity_bytes > 2 << 30;
        let csd = if block_addressed {
            (1u128 << 126)
                | (0x32u128 << 96)
                | (0x5b5u128 << 84)
                | (9u128 << 80)
                | (((capacity_bytes / (512 * 1024)) as u128 - 1) << 48)
        } else {
            (0x32u128 << 96)
                | (0x5b5u128 << 84)
                | (9u128 << 80)
                | (((capacity_bytes >> 18) as u128 - 1) << 62)
                | (7u128 << 47)
        };
        SimCard {
            present: true,
            capacity_bytes,
            block_addressed,
            answers_cmd8: true,
            accepts_1v8: false,
            busy_polls: 1,
            cid: u128::from_be_bytes([
                0xaa, b'X', b'Y', b'Q', b'E', b'M', b'U', b'!', 0x01, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x62,
                0x3f,
            ]),
            csd,
            scr: [0x02, 0x25, 0x80, 0x00, 0, 0, 0, 0],
            ssr: {
                let mut ssr = [0u8; 64];
                ssr[0] = 0x80;
                ssr
            },
            switch_support: 0x8003,
            accepts_cmd23: true,
            rca: 0x4567,
            tunable: true,
            dat_low_after_cmd11_ns: 300_000,
            refused_1v8_switches: 0,
            left_at_1v8: false,
            emmc: None,
            command_queue: None,
        }
    }

    /// An A2 card of `capacity_bytes`: SCR listing CMD23 and CMD48/49 (bits 33 and 34), the
    /// Performance Enhancement function with a command queue of `queue.depth` tasks.
    pub fn with_command_queue(capacity_bytes: u64, queue: SimQueue) -> SimCard {
        let mut card = SimCard::qemu_like(capacity_bytes);
        card.scr[3] |= 0x06;
        card.command_queue = Some(queue);
        card
    }

    /// An eMMC 5.1 of `capacity_bytes` (sector addressed above 2 GB, JESD84-B51 §7.1), its CID
    /// and CSD in the eMMC layouts (JESD84-B51 §7.2, §7.3: CSD_STRUCTURE 3 "version coded in
    /// EXT_CSD", SPEC_VERS 4, C_SIZE 0xFFF above 2 GB).
    pub fn emmc(capacity_bytes: u64) -> SimCard {
        let mut card = SimCard::qemu_like(capacity_bytes);
        card.block_addressed = capacity_bytes > 2 << 30;
        card.answers_cmd8 = false;
        // MID 0x15, CBX 01 (BGA), OID 0x00, PNM "BJTD4R", PRV 0x10, PSN, MDT 2023-08.
        card.cid = u128::from_be_bytes([
            0x15, 0x01, 0x00, b'B', b'J', b'T', b'D', b'4', b'R', 0x10, 0x12, 0x34, 0x56, 0x78, 0x8a, 0x01,
        ]);
        card.csd = (3u128 << 126)
            | (4u128 << 122)
            | (0x32u128 << 96)
            | (0x8f5u128 << 84)
            | (9u128 << 80)
            | (0xfffu128 << 62)
            | (7u128 << 47);
        card.emmc = Some(SimEmmc::realistic_5_1(capacity_bytes));
        card
    }
}
