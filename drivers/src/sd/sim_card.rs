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
}
