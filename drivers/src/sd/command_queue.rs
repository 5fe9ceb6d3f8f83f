//! SD command queueing (SD Physical Layer Simplified Specification 6.00 and later: the
//! Performance Enhancement function of the extension registers, and the command queue
//! commands), whatever the host: what the card advertises, switching the queue on, the queue
//! commands, and the host's table of tasks (docs/surface-and-sustained.md §7).
//!
//! - **Extension registers.** A card whose SCR lists CMD48/CMD49 has them. CMD48
//!   READ_EXTR_SINGLE reads and CMD49 WRITE_EXTR_SINGLE writes one 512-byte block whose argument
//!   is MIO (bit 31, 0 = memory), FNO (30:27), page (25:18), offset (17:9) and length − 1 (8:0).
//!   The General Information at function 0, page 0, offset 0 lists the extensions from byte 16:
//!   each with its Standard Function Code (2 bytes; 2 = Performance Enhancement), the address of
//!   the next (bytes 40-41), its number of register sets (byte 42) and the register's address
//!   (bytes 44-47: offset 8:0, page 16:9, FNO 21:18). Of the Performance Enhancement register,
//!   byte 4 bit 0 is cache support and byte 6 bits 4:0 the command queue depth (0: none); byte
//!   262 switches the queue: bit 0 on, bit 1 sequential (in-order) mode, 0 the voluntary mode in
//!   which Application Performance Class A2 is measured. These are the facts Linux relies on
//!   (`drivers/mmc/core/sd.c` `mmc_sd_read_ext_regs`, `sd_parse_ext_reg`,
//!   `sd_parse_ext_reg_perf`; `sd_ops.c` `mmc_sd_read_ext_reg`, `mmc_sd_write_ext_reg`,
//!   `mmc_sd_cmdq_switch`), which takes the depth field as the number of tasks, as this module
//!   does.
//! - **Tasks.** CMD44 Q_TASK_INFO_A gives a task its direction (bit 30, 1 = read), task ID
//!   (20:16) and block count (15:0); CMD45 Q_TASK_INFO_B its start address. CMD13 with bit 15
//!   set answers with the Queue Status Register instead of the card status: bit n set, task n is
//!   ready to run. CMD46 Q_RD_TASK and CMD47 Q_WR_TASK (task ID in 20:16) run a ready task: its
//!   blocks move as a multi-block transfer the card ends itself (no CMD12, no CMD23). CMD43
//!   Q_MANAGEMENT aborts a task (operation 2, task ID in 20:16) or the whole queue (operation
//!   1). The argument layout is the one the SD specification shares with eMMC's command queue
//!   (JEDEC JESD84-B51 CMD44-CMD47).
//!
//! The hosts send these like any other command ([`super::bus::CardBus`]); the SDHCI host runs
//! the tasks from its block device (`crate::sdhci::device`), one data transfer at a time, with the
//! card choosing which of its queued tasks goes next.
#![forbid(unsafe_code)]

use core::fmt;

use blockdev::{Operation, Request};

use super::bus::CardBus;
use super::command::{Command, DataPhase, ResponseKind};
use super::error::SdError;
use super::identify::CardInfo;

/// The most tasks a queue has (a 5-bit task ID).
pub const MAX_TASKS: usize = 32;
/// Bytes of one extension register block.
pub const EXTENSION_BLOCK_BYTES: usize = 512;
/// The Standard Function Code of the Performance Enhancement function.
const PERFORMANCE_ENHANCEMENT: u16 = 2;
/// The Performance Enhancement register's queue depth byte, and its command queue switch.
const QUEUE_DEPTH_BYTE: usize = 6;
const QUEUE_ENABLE_BYTE: u16 = 262;
const CACHE_SUPPORT_BYTE: usize = 4;
/// Reads of the switch after writing it: cards take a while to show the queue on (Linux polls
/// it too, raspberrypi/linux #6076).
const ENABLE_READ_BACKS: u32 = 100;
/// CMD13's Send Queue Status bit.
const SEND_QUEUE_STATUS: u32 = 1 << 15;

/// Where an extension register lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisterAddress {
    pub function: u8,
    pub page: u8,
    pub offset: u16,
}

impl RegisterAddress {
    /// The register's byte `index`.
    fn byte(self, index: u16) -> RegisterAddress {
        RegisterAddress { offset: self.offset + index, ..self }
    }

    /// CMD48's and CMD49's argument for `length` bytes from here.
    fn argument(self, length: u16) -> u32 {
        u32::from(self.function & 0xf) << 27
            | u32::from(self.page) << 18
            | u32::from(self.offset & 0x1ff) << 9
            | u32::from(length.saturating_sub(1) & 0x1ff)
    }
}

/// CMD48 READ_EXTR_SINGLE: `length` bytes of the register at `address`, in a 512-byte block.
pub fn read_extension(address: RegisterAddress, length: u16) -> Command {
    data_command(48, address.argument(length), DataPhase::ReadSingle, "READ_EXTR_SINGLE")
}

/// CMD49 WRITE_EXTR_SINGLE: one byte (the block's first) to the register at `address`.
pub fn write_extension(address: RegisterAddress) -> Command {
    data_command(49, address.argument(1), DataPhase::WriteSingle, "WRITE_EXTR_SINGLE")
}

/// CMD44 Q_TASK_INFO_A: task `task` moves `blocks` blocks, read or written.
pub fn task_parameters(operation: Operation, task: u8, blocks: u16) -> Command {
    let direction = u32::from(operation == Operation::Read) << 30;
    let argument = direction | u32::from(task & 0x1f) << 16 | u32::from(blocks);
    data_command(44, argument, DataPhase::None, "Q_TASK_INFO_A")
}

/// CMD45 Q_TASK_INFO_B: the task's start, as the card addresses data.
pub fn task_address(address: u32) -> Command {
    data_command(45, address, DataPhase::None, "Q_TASK_INFO_B")
}

/// CMD46 Q_RD_TASK or CMD47 Q_WR_TASK: run task `task`, whose blocks then move.
pub fn execute_task(operation: Operation, task: u8, blocks: u32) -> Command {
    let argument = u32::from(task & 0x1f) << 16;
    match (operation == Operation::Read, blocks > 1) {
        (true, true) => data_command(46, argument, DataPhase::ReadMultiple, "Q_RD_TASK"),
        (true, false) => data_command(46, argument, DataPhase::ReadSingle, "Q_RD_TASK"),
        (false, true) => data_command(47, argument, DataPhase::WriteMultiple, "Q_WR_TASK"),
        (false, false) => data_command(47, argument, DataPhase::WriteSingle, "Q_WR_TASK"),
    }
}

/// CMD13 with Send Queue Status: the R1 response carries the Queue Status Register.
pub fn queue_status(rca: u16) -> Command {
    Command {
        argument: u32::from(rca) << 16 | SEND_QUEUE_STATUS,
        name: "SEND_STATUS (queue)",
        ..Command::send_status(rca)
    }
}

/// CMD43 Q_MANAGEMENT, operation 2: abort task `task`.
pub fn abort_task(task: u8) -> Command {
    Command {
        index: 43,
        application: false,
        argument: u32::from(task & 0x1f) << 16 | 2,
        response: ResponseKind::R1b,
        data: DataPhase::None,
        name: "Q_MANAGEMENT",
    }
}

fn data_command(index: u8, argument: u32, data: DataPhase, name: &'static str) -> Command {
    Command { index, application: false, argument, response: ResponseKind::R1, data, name }
}

/// What a card says about command queueing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueSupport {
    /// The SCR lists no CMD48/CMD49: no extension registers, so no queue.
    NoExtensionRegisters,
    /// The extension registers list no Performance Enhancement function.
    NoPerformanceFunction,
    /// They could not be read or made no sense (why).
    Unreadable(&'static str),
    /// The Performance Enhancement register: its depth (0: no queue), cache support, and
    /// whether the queue is on.
    Performance { register: RegisterAddress, depth: u8, cache: bool, enabled: bool },
}

impl QueueSupport {
    /// The tasks the card can queue (0: none).
    pub fn depth(&self) -> u8 {
        match self {
            QueueSupport::Performance { depth, .. } => *depth,
            _ => 0,
        }
    }
}

impl fmt::Display for QueueSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueSupport::NoExtensionRegisters => {
                f.write_str("the card has no command queue (no extension registers: SCR CMD48/49 bit clear)")
            }
            QueueSupport::NoPerformanceFunction => {
                f.write_str("the card has no command queue (no Performance Enhancement function)")
            }
            QueueSupport::Unreadable(why) => write!(f, "the card's extension registers could not be read: {why}"),
            QueueSupport::Performance { depth: 0, .. } => {
                f.write_str("the card has no command queue (Performance Enhancement register: queue depth 0)")
            }
            QueueSupport::Performance { depth, cache, .. } => write!(
                f,
                "the card advertises command queueing, depth {depth}, cache {} (Performance Enhancement register)",
                if *cache { "supported" } else { "not supported" }
            ),
        }
    }
}

/// The Performance Enhancement register's address from the General Information block.
pub fn performance_register(
    general: &[u8; EXTENSION_BLOCK_BYTES],
) -> Result<Option<RegisterAddress>, &'static str> {
    let revision = u16::from_le_bytes([general[0], general[1]]);
    let length = u16::from_le_bytes([general[2], general[3]]);
    if revision != 0 || usize::from(length) > 2 * EXTENSION_BLOCK_BYTES {
        return Err("General Information revision or length not understood");
    }
    let mut next = 16usize;
    for _ in 0..general[4] {
        let Some(extension) = general.get(next..next + 48) else {
            return Err("an extension lies beyond the General Information block read");
        };
        let code = u16::from_le_bytes([extension[0], extension[1]]);
        let register = u32::from_le_bytes([extension[44], extension[45], extension[46], extension[47]]);
        if code == PERFORMANCE_ENHANCEMENT && extension[42] == 1 {
            return Ok(Some(RegisterAddress {
                function: (register >> 18 & 0xf) as u8,
                page: (register >> 9 & 0xff) as u8,
                offset: (register & 0x1ff) as u16,
            }));
        }
        next = usize::from(u16::from_le_bytes([extension[40], extension[41]]));
    }
    Ok(None)
}

/// What the card advertises (reads only: CMD48 of the General Information and of the
/// Performance Enhancement register).
pub fn discover<B: CardBus>(bus: &mut B, card: &CardInfo) -> QueueSupport {
    if !card.scr.supports_extension_registers() {
        return QueueSupport::NoExtensionRegisters;
    }
    let mut block = [0u8; EXTENSION_BLOCK_BYTES];
    let general = RegisterAddress { function: 0, page: 0, offset: 0 };
    if bus.read_register_data(&read_extension(general, 512), card.rca, &mut block).is_err() {
        return QueueSupport::Unreadable("CMD48 of the General Information failed");
    }
    let register = match performance_register(&block) {
        Ok(Some(register)) => register,
        Ok(None) => return QueueSupport::NoPerformanceFunction,
        Err(why) => return QueueSupport::Unreadable(why),
    };
    if bus.read_register_data(&read_extension(register, 512), card.rca, &mut block).is_err() {
        return QueueSupport::Unreadable("CMD48 of the Performance Enhancement register failed");
    }
    let enabled = match read_byte(bus, card.rca, register.byte(QUEUE_ENABLE_BYTE)) {
        Ok(byte) => byte & 1 != 0,
        Err(_) => return QueueSupport::Unreadable("CMD48 of the command queue switch failed"),
    };
    QueueSupport::Performance {
        register,
        depth: block[QUEUE_DEPTH_BYTE] & 0x1f,
        cache: block[CACHE_SUPPORT_BYTE] & 1 != 0,
        enabled,
    }
}

fn read_byte<B: CardBus>(bus: &mut B, rca: u16, address: RegisterAddress) -> Result<u8, SdError> {
    let mut block = [0u8; EXTENSION_BLOCK_BYTES];
    bus.read_register_data(&read_extension(address, 1), rca, &mut block)?;
    Ok(block[0])
}

/// Switches the card's queue on in voluntary mode (byte 262 = 1) and reads the switch back
/// until the card shows it on; returns the depth.
pub fn enable<B: CardBus>(bus: &mut B, rca: u16, support: QueueSupport) -> Result<u8, SdError> {
    let QueueSupport::Performance { register, depth: depth @ 1.., .. } = support else {
        return Err(SdError::UnusableCard { reason: "the card has no command queue", value: 0 });
    };
    let switch = register.byte(QUEUE_ENABLE_BYTE);
    let mut block = [0u8; EXTENSION_BLOCK_BYTES];
    block[0] = 1;
    bus.write_register_data(&write_extension(switch), rca, &block)?;
    for _ in 0..ENABLE_READ_BACKS {
        if read_byte(bus, rca, switch)? & 1 != 0 {
            return Ok(depth);
        }
    }
    // Left off, so that the card takes ordinary reads and writes again.
    block[0] = 0;
    bus.write_register_data(&write_extension(switch), rca, &block)?;
    Err(SdError::UnusableCard { reason: "the command queue switch did not stay on", value: 0 })
}

/// Where a task is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Free,
    /// Submitted; CMD44/CMD45 not yet sent.
    Submitted(Request),
    /// Queued on the card.
    Queued(Request),
    /// Its data is moving.
    Running(Request),
}

/// The host's side of the queue: which request each task ID holds and where it is.
#[derive(Clone, Debug)]
pub struct TaskQueue {
    depth: u8,
    slots: [Slot; MAX_TASKS],
}

impl TaskQueue {
    pub fn new(depth: u8) -> TaskQueue {
        TaskQueue { depth: depth.clamp(1, MAX_TASKS as u8), slots: [Slot::Free; MAX_TASKS] }
    }

    pub fn depth(&self) -> u8 {
        self.depth
    }

    /// Takes `request` as a task; `None` when every task ID is in use.
    pub fn submit(&mut self, request: Request) -> Option<u8> {
        let id = self.slots[..usize::from(self.depth)].iter().position(|slot| *slot == Slot::Free)?;
        self.slots[id] = Slot::Submitted(request);
        Some(id as u8)
    }

    /// A submitted task whose CMD44/CMD45 are still to be sent.
    pub fn next_submitted(&self) -> Option<(u8, Request)> {
        self.slots.iter().enumerate().find_map(|(id, slot)| match slot {
            Slot::Submitted(request) => Some((id as u8, *request)),
            _ => None,
        })
    }

    /// The card has task `id`.
    pub fn mark_queued(&mut self, id: u8) {
        if let Slot::Submitted(request) = self.slots[usize::from(id)] {
            self.slots[usize::from(id)] = Slot::Queued(request);
        }
    }

    /// The running task, if one is.
    pub fn running(&self) -> Option<(u8, Request)> {
        self.slots.iter().enumerate().find_map(|(id, slot)| match slot {
            Slot::Running(request) => Some((id as u8, *request)),
            _ => None,
        })
    }

    /// Whether any task is queued on the card.
    pub fn any_queued(&self) -> bool {
        self.slots.iter().any(|slot| matches!(slot, Slot::Queued(_)))
    }

    /// A queued task the Queue Status Register `ready` says is ready, now running; the
    /// lowest ready ID, whatever order the tasks came in (the card chose).
    pub fn start_ready(&mut self, ready: u32) -> Option<(u8, Request)> {
        let id = (0..self.depth)
            .find(|&id| ready & 1 << id != 0 && matches!(self.slots[usize::from(id)], Slot::Queued(_)))?;
        let Slot::Queued(request) = self.slots[usize::from(id)] else { return None };
        self.slots[usize::from(id)] = Slot::Running(request);
        Some((id, request))
    }

    /// Task `id` is over (done or failed): its ID is free again.
    pub fn finish(&mut self, id: u8) -> Option<Request> {
        let request = match self.slots[usize::from(id)] {
            Slot::Free => None,
            Slot::Submitted(request) | Slot::Queued(request) | Slot::Running(request) => Some(request),
        };
        self.slots[usize::from(id)] = Slot::Free;
        request
    }

    /// Tasks not yet finished.
    pub fn in_use(&self) -> usize {
        self.slots.iter().filter(|slot| **slot != Slot::Free).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::DmaBuffer;

    fn request(tag: u32) -> Request {
        let buffer = DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 512 };
        Request { tag, operation: Operation::Read, lba: u64::from(tag), block_count: 1, buffer }
    }

    #[test]
    fn commands_carry_their_fields_where_the_specification_puts_them() {
        let register = RegisterAddress { function: 2, page: 1, offset: 0x10 };
        assert_eq!(read_extension(register, 512).argument, 2 << 27 | 1 << 18 | 0x10 << 9 | 0x1ff);
        assert_eq!(write_extension(register.byte(262)).argument, 2 << 27 | 1 << 18 | 0x116 << 9);
        assert_eq!(write_extension(register).data, DataPhase::WriteSingle);
        assert_eq!(task_parameters(Operation::Read, 5, 64).argument, 1 << 30 | 5 << 16 | 64);
        assert_eq!(task_parameters(Operation::Write, 31, 1).argument, 31 << 16 | 1);
        assert_eq!(execute_task(Operation::Write, 3, 8).index, 47);
        assert_eq!(execute_task(Operation::Read, 3, 8).argument, 3 << 16);
        assert_eq!(queue_status(0x1234).argument, 0x1234_8000);
        assert_eq!((abort_task(7).index, abort_task(7).argument), (43, 7 << 16 | 2));
    }

    #[test]
    fn the_performance_function_is_found_in_the_general_information() {
        let mut general = [0u8; 512];
        general[2..4].copy_from_slice(&64u16.to_le_bytes());
        general[4] = 2;
        // Extension 1 at 16: power management (code 1), next at 64.
        general[16] = 1;
        general[56..58].copy_from_slice(&64u16.to_le_bytes());
        general[58] = 1;
        // Extension 2 at 64: performance enhancement, FNO 2, page 0, offset 0.
        general[64] = 2;
        general[64 + 42] = 1;
        general[64 + 44..64 + 48].copy_from_slice(&(2u32 << 18).to_le_bytes());
        assert_eq!(
            performance_register(&general),
            Ok(Some(RegisterAddress { function: 2, page: 0, offset: 0 }))
        );
        general[64] = 3;
        assert_eq!(performance_register(&general), Ok(None));
        general[0] = 1;
        assert!(performance_register(&general).is_err());
    }

    #[test]
    fn tasks_take_free_ids_and_run_as_the_card_says() {
        let mut queue = TaskQueue::new(4);
        for tag in 0..4 {
            assert_eq!(queue.submit(request(tag)), Some(tag as u8));
        }
        assert_eq!(queue.submit(request(9)), None, "four tasks at most");
        while let Some((id, _)) = queue.next_submitted() {
            queue.mark_queued(id);
        }
        // The card makes task 2 ready first.
        assert_eq!(queue.start_ready(0b0100).map(|(id, r)| (id, r.tag)), Some((2, 2)));
        assert_eq!(queue.running().map(|(id, _)| id), Some(2));
        assert_eq!(queue.finish(2).map(|r| r.tag), Some(2));
        assert_eq!(queue.submit(request(7)), Some(2), "the freed ID is reused");
        assert_eq!(queue.in_use(), 4);
        assert_eq!(queue.start_ready(0), None);
        assert_eq!(TaskQueue::new(0).depth(), 1);
    }
}
