//! The simulated card's extension registers and command queue (SD Physical Layer 6.00 and later,
//! crate::sd::command_queue), for a card with [`SimQueue`] set: CMD48/CMD49 on the General
//! Information (function 0) and the Performance Enhancement register (function 2, page 0,
//! offset 0), CMD44/CMD45 queueing tasks, CMD13 with Send Queue Status answering the Queue
//! Status Register, CMD46/CMD47 running a ready task, CMD43 aborting one.
//!
//! As strict as a card: queue commands before byte 262 switched the queue on, a CMD45 without
//! its CMD44, a task ID in use, running a task that is not ready, a task transfer whose Block
//! Count is not the task's or that asks for auto-CMD12 are all refused (ILLEGAL_COMMAND) or
//! recorded as violations. The card makes one task ready at a time, the oldest or the newest
//! queued ([`QueueOrder`]), and refuses the task at [`SimQueue::failing_lba`] when it is run.
#![forbid(unsafe_code)]

extern crate std;

use std::collections::BTreeMap;
use std::vec;
use std::vec::Vec;

use super::{Response, SimState, Source};
use crate::sd::card_registers::CardStatus;
use crate::sd::sim_card::{QueueOrder, SimQueue};

/// The card status ERROR bit (SD §4.10.1): a general error, here a task the card cannot run.
const GENERAL_ERROR: u32 = 1 << 19;
/// Where the simulated card keeps its Performance Enhancement register.
const PERFORMANCE_FUNCTION: u8 = 2;

/// A task the card holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Task {
    read: bool,
    blocks: u32,
    address: Option<u32>,
}

/// The card's side of the queue.
#[derive(Clone, Debug, Default)]
pub struct CardQueue {
    pub enabled: bool,
    tasks: BTreeMap<u8, Task>,
    /// Task IDs in the order their CMD45 came.
    arrival: Vec<u8>,
    last_task_info: Option<u8>,
    /// The task whose data is about to move: its block count and start address.
    running: Option<(u32, u32)>,
    /// Register pages written by CMD49: (function, page) to their 512 bytes.
    written: BTreeMap<(u8, u8), Vec<u8>>,
    /// Tasks run, in the order they ran.
    pub run_order: Vec<u8>,
}

impl SimState {
    fn queue_config(&self) -> Option<SimQueue> {
        self.card.command_queue
    }

    /// The 512 bytes of extension register page (`function`, `page`) as the card holds them.
    fn extension_page(&self, function: u8, page: u8) -> Vec<u8> {
        if let Some(bytes) = self.queue.written.get(&(function, page)) {
            return bytes.clone();
        }
        let mut bytes = vec![0u8; 512];
        let Some(config) = self.queue_config() else { return bytes };
        match (function, page) {
            (0, 0) => {
                // General Information: revision 0, length 64, one extension at 16: the
                // Performance Enhancement function (code 2), one register at FNO 2, page 0, offset 0.
                bytes[2..4].copy_from_slice(&64u16.to_le_bytes());
                bytes[4] = 1;
                bytes[16] = 2;
                bytes[16 + 42] = 1;
                bytes[16 + 44..16 + 48]
                    .copy_from_slice(&(u32::from(PERFORMANCE_FUNCTION) << 18).to_le_bytes());
            }
            (PERFORMANCE_FUNCTION, 0) => {
                bytes[0] = 1;
                bytes[4] = 1;
                bytes[6] = config.depth & 0x1f;
                bytes[262] = u8::from(self.queue.enabled);
            }
            _ => {}
        }
        bytes
    }

    /// The answer to a command of the queue or the extension registers (`Some`), or `None` when
    /// `index` is none of them (the ordinary card answers).
    pub(super) fn queue_respond(
        &mut self,
        index: u8,
        argument: u32,
        application: bool,
    ) -> Option<Option<Response>> {
        if application {
            return None;
        }
        let config = self.queue_config()?;
        match index {
            13 if argument & 1 << 15 != 0 && self.queue.enabled => {
                Some(Some(Response::Short(self.queue_status(config))))
            }
            48 | 49 => Some(Some(Response::Short(self.card_status()))),
            43 => {
                let task = (argument >> 16 & 0x1f) as u8;
                match argument & 0xf {
                    2 => {
                        self.queue.tasks.remove(&task);
                        self.queue.arrival.retain(|id| *id != task);
                    }
                    1 => {
                        self.queue.tasks.clear();
                        self.queue.arrival.clear();
                    }
                    _ => return Some(self.illegal()),
                }
                Some(Some(Response::Short(self.card_status())))
            }
            44 => {
                let task = (argument >> 16 & 0x1f) as u8;
                if !self.queue.enabled || task >= config.depth || self.queue.tasks.contains_key(&task) {
                    return Some(self.illegal());
                }
                let read = argument & 1 << 30 != 0;
                self.queue.tasks.insert(task, Task { read, blocks: argument & 0xffff, address: None });
                self.queue.last_task_info = Some(task);
                Some(Some(Response::Short(self.card_status())))
            }
            45 => {
                let Some(task) = self.queue.last_task_info.take().filter(|_| self.queue.enabled) else {
                    return Some(self.illegal());
                };
                if let Some(entry) = self.queue.tasks.get_mut(&task) {
                    entry.address = Some(argument);
                }
                self.queue.arrival.push(task);
                Some(Some(Response::Short(self.card_status())))
            }
            46 | 47 => Some(Some(self.run_task(config, index, argument))),
            _ => None,
        }
    }

    /// An illegal command: no response, ILLEGAL_COMMAND in the next status.
    fn illegal(&mut self) -> Option<Response> {
        self.pending_errors |= CardStatus::ILLEGAL_COMMAND;
        None
    }

    /// The Queue Status Register: the one task the card makes ready.
    fn queue_status(&self, config: SimQueue) -> u32 {
        let ready = match config.order {
            QueueOrder::Oldest => self.queue.arrival.first(),
            QueueOrder::Newest => self.queue.arrival.last(),
        };
        ready.map_or(0, |task| 1 << task)
    }

    /// CMD46/CMD47: the ready task runs (its data follows), or is refused with the ERROR bit
    /// when it starts at the failing LBA (then the card drops it).
    fn run_task(&mut self, config: SimQueue, index: u8, argument: u32) -> Response {
        let task = (argument >> 16 & 0x1f) as u8;
        let ready = self.queue_status(config) & 1 << task != 0;
        let entry = self.queue.tasks.get(&task).copied();
        let Some(entry) = entry.filter(|entry| ready && entry.read == (index == 46)) else {
            self.violations.push("a task run that is not ready, or in the wrong direction");
            return Response::Short(self.card_status() | CardStatus::ILLEGAL_COMMAND);
        };
        self.queue.tasks.remove(&task);
        self.queue.arrival.retain(|id| *id != task);
        let address = entry.address.unwrap_or(0);
        let sector = if self.card.block_addressed { u64::from(address) } else { u64::from(address) / 512 };
        if config.failing_lba == Some(sector) {
            self.queue.running = None;
            return Response::Short(self.card_status() | GENERAL_ERROR);
        }
        self.queue.running = Some((entry.blocks, address));
        self.queue.run_order.push(task);
        Response::Short(self.card_status())
    }

    /// Where the data of CMD46/CMD47/CMD48/CMD49 comes from or goes (`None`: no data phase, the
    /// command was refused); `blocks` is set to what the card sends.
    pub(super) fn queue_data_source(
        &mut self,
        index: u8,
        argument: u32,
        mode: u16,
        blocks: &mut u32,
    ) -> Option<Source> {
        match index {
            46 | 47 => {
                let (task_blocks, address) = self.queue.running.take()?;
                if *blocks != task_blocks {
                    self.violations.push("a task's Block Count is not the task's block count");
                }
                if (mode >> 2) & 0b11 != 0 {
                    self.violations.push("a task's transfer asked for an auto command (a task ends itself)");
                }
                *blocks = task_blocks;
                let sector =
                    if self.card.block_addressed { u64::from(address) } else { u64::from(address) / 512 };
                Some(Source::Sectors { first_sector: sector })
            }
            48 => {
                let (function, page, offset, length) = fields(argument);
                let page_bytes = self.extension_page(function, page);
                let mut bytes = vec![0u8; 512];
                let end = (offset + length).min(512);
                bytes[..end - offset].copy_from_slice(&page_bytes[offset..end]);
                Some(Source::Bytes(bytes))
            }
            49 => Some(Source::Extension { argument }),
            _ => None,
        }
    }

    /// A CMD49 block arrived: its first byte goes to the addressed register byte; byte 262 of the
    /// Performance Enhancement register switches the queue.
    pub(super) fn extension_written(&mut self, argument: u32, bytes: &[u8]) {
        let (function, page, offset, _) = fields(argument);
        let mut page_bytes = self.extension_page(function, page);
        page_bytes[offset] = bytes[0];
        if (function, page, offset) == (PERFORMANCE_FUNCTION, 0, 262) {
            self.queue.enabled = bytes[0] & 1 != 0;
        }
        self.queue.written.insert((function, page), page_bytes);
    }
}

/// CMD48/CMD49's function, page, offset and length.
fn fields(argument: u32) -> (u8, u8, usize, usize) {
    let function = (argument >> 27 & 0xf) as u8;
    let page = (argument >> 18 & 0xff) as u8;
    let offset = (argument >> 9 & 0x1ff) as usize;
    let length = (argument & 0x1ff) as usize + 1;
    (function, page, offset, length)
}
