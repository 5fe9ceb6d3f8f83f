//! A simulated NVMe controller for host tests (NVMe Base Specification 1.4 behaviour, with
//! QEMU's `hw/nvme` choices from docs/nvme-and-fio.md §4 where the specification leaves room): a
//! register model (CAP, VS, CC, CSTS, AQA, ASQ, ACQ, doorbells) that reads submission entries
//! from and writes completion entries to host memory, interprets PRPs independently of the
//! driver's builder, and reads a pattern-filled "disk". It records every driver mistake it can
//! see (bad PRPs, command identifier conflicts, doorbells out of range, writes) as a violation,
//! and can be told to misbehave (never ready, fatal status, corrupt completions, media errors).

extern crate std;

use super::command::{admin_opcode, cns, feature, io_opcode, CompletionEntry, SubmissionEntry};
use super::events::{Event, EventSink};
use super::regs::{offsets, CC, CSTS};
use super::status::{code_type, command_specific, generic, media, Status};
use crate::mmio::RegisterIo;
use crate::platform::BusTranslation;
use blockdev::DmaBuffer;
use core::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;
use tock_registers::LocalRegisterCopy;

/// Where the simulated DMA pool pretends to sit in CPU physical space.
pub use crate::testing::PHYSICAL_BASE;
/// The simulated bus sees RAM at CPU + this (as BCM2712's PCIe does: docs/hardware.md §1.4), so a
/// driver that forgets the translation hands the controller addresses it cannot reach.
pub const BUS_OFFSET: u64 = 0x10_0000_0000;

// ---------------------------------------------------------------------------------------------
// PRP interpretation, as a controller does it (independent of `prp::build`).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrpWalkError {
    /// PRP1 with bits 1:0 set.
    MisalignedFirst { prp1: u64 },
    /// A data entry after PRP1 that is not page aligned (QEMU: Invalid PRP Offset).
    MisalignedEntry { entry: u64 },
    /// A list pointer that is not 8-byte aligned.
    MisalignedList { pointer: u64 },
    /// A list entry that cannot be read.
    UnreadableList { address: u64 },
}

/// The data segments `(bus address, bytes)` that PRP1/PRP2 describe for `length` bytes,
/// following list pages and their chain pointers; `read_qword` reads a list entry.
pub fn walk_prps(
    prp1: u64,
    prp2: u64,
    length: usize,
    page: usize,
    read_qword: impl Fn(u64) -> Option<u64>,
) -> Result<Vec<(u64, usize)>, PrpWalkError> {
    if prp1 & 3 != 0 {
        return Err(PrpWalkError::MisalignedFirst { prp1 });
    }
    let page64 = page as u64;
    let first = length.min(page - (prp1 % page64) as usize);
    let mut segments = vec![(prp1, first)];
    let mut remaining = length - first;
    if remaining == 0 {
        return Ok(segments);
    }
    if remaining <= page {
        if !prp2.is_multiple_of(page64) {
            return Err(PrpWalkError::MisalignedEntry { entry: prp2 });
        }
        segments.push((prp2, remaining));
        return Ok(segments);
    }
    if prp2 & 7 != 0 {
        return Err(PrpWalkError::MisalignedList { pointer: prp2 });
    }
    let mut entry_address = prp2;
    while remaining > 0 {
        let value =
            read_qword(entry_address).ok_or(PrpWalkError::UnreadableList { address: entry_address })?;
        let last_slot_of_page = entry_address % page64 == page64 - 8;
        if last_slot_of_page && remaining > page {
            if value & 7 != 0 {
                return Err(PrpWalkError::MisalignedList { pointer: value });
            }
            entry_address = value;
            continue;
        }
        if !value.is_multiple_of(page64) {
            return Err(PrpWalkError::MisalignedEntry { entry: value });
        }
        let bytes = remaining.min(page);
        segments.push((value, bytes));
        remaining -= bytes;
        entry_address += 8;
    }
    Ok(segments)
}

// ---------------------------------------------------------------------------------------------
// The platform: a page-aligned arena as DMA memory, a clock that moves on every read.

/// The shared test arena, with the NVMe simulator's view of it: the controller sees the arena at
/// a bus address `BUS_OFFSET` above the physical one, so a driver that forgets its
/// `BusTranslation` fails.
pub type SimPlatform = crate::testing::ArenaPlatform;

impl crate::testing::ArenaPlatform {
    /// An arena whose clock moves 100 µs per read (controller waits then take few iterations).
    pub fn for_nvme(arena_bytes: usize) -> Self {
        let platform = Self::new(arena_bytes);
        platform.set_step_us(100);
        platform
    }

    /// Microseconds the clock advances per read.
    pub fn set_step_us(&self, microseconds: u64) {
        self.set_step_ticks(microseconds * 1000);
    }

    pub fn translation(&self) -> BusTranslation {
        BusTranslation {
            cpu_base: PHYSICAL_BASE,
            bus_base: PHYSICAL_BASE + BUS_OFFSET,
            size_bytes: self.arena_bytes() as u64,
        }
    }

    /// The host pointer behind `length` bytes at bus address `bus`, if inside the arena: through
    /// the bus model when one is set (a root complex's inbound windows), else `BUS_OFFSET` below.
    fn pointer(&self, bus: u64, length: usize) -> Option<*mut u8> {
        let physical = match self.bus_view() {
            Some(view) => view.to_physical(bus, length)?,
            None => bus.checked_sub(BUS_OFFSET)?,
        };
        self.cpu_pointer(physical, length)
    }

    pub fn read_bus(&self, bus: u64, out: &mut [u8]) -> bool {
        match self.pointer(bus, out.len()) {
            Some(source) => {
                // SAFETY: `pointer` checked the range lies inside the arena, which lives as long
                // as `self`; the driver under test is not running concurrently.
                unsafe { core::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
                true
            }
            None => false,
        }
    }

    pub fn write_bus(&self, bus: u64, data: &[u8]) -> bool {
        match self.pointer(bus, data.len()) {
            Some(target) => {
                // SAFETY: as for `read_bus`.
                unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), target, data.len()) };
                true
            }
            None => false,
        }
    }

    pub fn read_bus_u64(&self, bus: u64) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.read_bus(bus, &mut bytes).then(|| u64::from_le_bytes(bytes))
    }

    /// Bytes of a DMA buffer as the CPU sees them.
    pub fn bytes_of(&self, buffer: &DmaBuffer) -> Vec<u8> {
        let mut out = vec![0u8; buffer.length_bytes];
        assert!(self.read_bus(buffer.physical_address + BUS_OFFSET, &mut out));
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Events recorded for assertions.

#[derive(Default)]
pub struct RecordingEvents {
    pub messages: RefCell<Vec<String>>,
}

impl EventSink for RecordingEvents {
    fn report(&self, source: &str, event: &Event) {
        self.messages.borrow_mut().push(format!("{source}: {event}"));
    }
}

impl RecordingEvents {
    pub fn any_contains(&self, text: &str) -> bool {
        self.messages.borrow().iter().any(|m| m.contains(text))
    }
}

// ---------------------------------------------------------------------------------------------
// The controller model.

#[derive(Clone, Debug)]
pub struct SimNamespace {
    pub id: u32,
    pub blocks: u64,
    /// log2 of the LBA data size (9 or 12).
    pub lba_shift: u8,
    pub metadata_bytes: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// CSTS.RDY never follows CC.EN = 1.
    NeverReady,
    /// CSTS.CFS is set when the controller is enabled.
    FatalOnEnable,
    /// CSTS.SHST stays at "occurring".
    NeverFinishesShutdown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// A bogus completion with an identifier nobody used comes before the next real one.
    UnknownCommandId,
    /// The next completion reports an SQ head past the tail.
    ImpossibleSqHead,
    /// A bogus completion naming another submission queue comes before the next real one.
    WrongSubmissionQueue,
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// CAP.MQES (0-based).
    pub mqes: u16,
    pub timeout_units: u8,
    pub dstrd: u8,
    pub mpsmin: u8,
    pub mpsmax: u8,
    /// CAP.CSS.
    pub command_sets: u8,
    pub mdts: u8,
    pub version: u32,
    /// I/O queue pairs the controller can allocate.
    pub max_io_queue_pairs: u16,
    /// Identify NN.
    pub namespace_count: u32,
    pub namespaces: Vec<SimNamespace>,
    pub supports_active_list: bool,
    /// CC.EN = 1 and CSTS.RDY = 1 at start (left on by firmware).
    pub start_enabled: bool,
    /// CSTS reads after CC.EN = 1 before RDY shows.
    pub ready_after_reads: u32,
    pub fault: Option<Fault>,
    pub serial: &'static str,
    pub model: &'static str,
    pub firmware: &'static str,
    pub rtd3_entry_latency_us: u32,
}

impl Default for SimConfig {
    /// What QEMU 10's `-device nvme,serial=barebench0` with a 64 MiB drive reports (docs/qemu.md §3).
    fn default() -> Self {
        SimConfig {
            mqes: 0x7ff,
            timeout_units: 15,
            dstrd: 0,
            mpsmin: 0,
            mpsmax: 4,
            command_sets: 0x41,
            mdts: 7,
            version: 0x0001_0400,
            max_io_queue_pairs: 64,
            namespace_count: 256,
            namespaces: vec![SimNamespace { id: 1, blocks: 131_072, lba_shift: 9, metadata_bytes: 0 }],
            supports_active_list: true,
            start_enabled: false,
            ready_after_reads: 0,
            fault: None,
            serial: "barebench0",
            model: "QEMU NVMe Ctrl",
            firmware: "10.0.2",
            rtd3_entry_latency_us: 0,
        }
    }
}

impl SimConfig {
    pub fn cap(&self) -> u64 {
        u64::from(self.mqes)
            | 1 << 16
            | u64::from(self.timeout_units) << 24
            | u64::from(self.dstrd) << 32
            | u64::from(self.command_sets) << 37
            | u64::from(self.mpsmin) << 48
            | u64::from(self.mpsmax) << 52
    }
}

struct SimSubmissionQueue {
    base: u64,
    entries: u32,
    completion_queue: u16,
    head: u32,
    tail: u32,
}

struct Pending {
    submission_queue: u16,
    command_id: u16,
    status: Status,
    command_specific: u32,
    /// Posted as is (a corruption), not from the queue's head.
    sq_head_override: Option<u16>,
}

struct SimCompletionQueue {
    base: u64,
    entries: u32,
    tail: u32,
    head: u32,
    phase: bool,
    backlog: VecDeque<Pending>,
    /// (submission queue, command id) of every posted entry the host has not released yet.
    posted: VecDeque<(u16, u16)>,
}

#[derive(Clone, Debug, Default)]
pub struct SimStatistics {
    pub register_reads: u64,
    pub sq_doorbell_writes: u64,
    pub cq_doorbell_writes: u64,
    pub reads: u64,
    pub read_bytes_max: usize,
    pub chained_lists: u64,
    pub list_reads: u64,
    pub max_outstanding: usize,
    pub admin_commands: Vec<u8>,
    pub io_queues_created: Vec<u16>,
    pub io_queues_deleted: Vec<u16>,
    pub io_queues_alive_at_shutdown: usize,
    pub shutdowns: u32,
    pub reads_per_queue: BTreeMap<u16, u64>,
    /// (LBA, blocks) of every Read executed.
    pub read_ranges: Vec<(u64, u32)>,
}

struct State {
    config: SimConfig,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    ready_countdown: u32,
    /// INTMS as the driver set it.
    interrupt_mask: u32,
    submission_queues: BTreeMap<u16, SimSubmissionQueue>,
    completion_queues: BTreeMap<u16, SimCompletionQueue>,
    outstanding: BTreeSet<(u16, u16)>,
    hold_io_completions: bool,
    held: Vec<(u16, Pending)>,
    corrupt_next: Option<Corruption>,
    corrupt_next_admin: Option<Corruption>,
    media_errors: Vec<(u32, u64)>,
    data_corruptions: Vec<(u32, u64)>,
    violations: Vec<String>,
    statistics: SimStatistics,
}

pub struct SimController<'a> {
    platform: &'a SimPlatform,
    state: RefCell<State>,
}

fn cc_field(cc: u32, field: tock_registers::fields::Field<u32, CC::Register>) -> u32 {
    LocalRegisterCopy::<u32, CC::Register>::new(cc).read(field)
}

const CSTS_RDY: u32 = 1;
const CSTS_CFS: u32 = 1 << 1;
const CSTS_SHST_OCCURRING: u32 = 1 << 2;
const CSTS_SHST_COMPLETE: u32 = 2 << 2;

impl<'a> SimController<'a> {
    pub fn new(platform: &'a SimPlatform, config: SimConfig) -> Self {
        let start_enabled = config.start_enabled;
        SimController {
            platform,
            state: RefCell::new(State {
                cc: if start_enabled { 0x0046_0001 } else { 0 },
                csts: if start_enabled { CSTS_RDY } else { 0 },
                config,
                aqa: 0,
                asq: 0,
                acq: 0,
                ready_countdown: 0,
                interrupt_mask: 0,
                submission_queues: BTreeMap::new(),
                completion_queues: BTreeMap::new(),
                outstanding: BTreeSet::new(),
                hold_io_completions: false,
                held: Vec::new(),
                corrupt_next: None,
                corrupt_next_admin: None,
                media_errors: Vec::new(),
                data_corruptions: Vec::new(),
                violations: Vec::new(),
                statistics: SimStatistics::default(),
            }),
        }
    }

    /// The size of BAR0 a controller like this has (registers + doorbells for 64 pairs).
    pub fn register_bytes(&self) -> usize {
        let state = self.state.borrow();
        0x1000 + (2 * 65) * (4usize << state.config.dstrd)
    }

    pub fn violations(&self) -> Vec<String> {
        self.state.borrow().violations.clone()
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "driver mistakes: {violations:#?}");
    }

    pub fn statistics(&self) -> SimStatistics {
        self.state.borrow().statistics.clone()
    }

    pub fn reset_statistics(&self) {
        let mut state = self.state.borrow_mut();
        let keep_created = state.statistics.io_queues_created.clone();
        state.statistics = SimStatistics { io_queues_created: keep_created, ..SimStatistics::default() };
    }

    /// Holds I/O completions back until [`SimController::release_held`].
    pub fn hold_io_completions(&self, hold: bool) {
        self.state.borrow_mut().hold_io_completions = hold;
    }

    pub fn held_count(&self) -> usize {
        self.state.borrow().held.len()
    }

    /// Posts up to `count` held completions (oldest first).
    pub fn release_held(&self, count: usize) {
        let mut state = self.state.borrow_mut();
        let count = count.min(state.held.len());
        let released: Vec<_> = state.held.drain(..count).collect();
        for (queue, pending) in released {
            if let Some(cq) = state.completion_queues.get_mut(&queue) {
                cq.backlog.push_back(pending);
            }
            Self::post(self.platform, &mut state, queue);
        }
    }

    /// Corrupts the next I/O completion.
    pub fn corrupt_next_completion(&self, corruption: Corruption) {
        self.state.borrow_mut().corrupt_next = Some(corruption);
    }

    /// Corrupts the next admin completion.
    pub fn corrupt_next_admin_completion(&self, corruption: Corruption) {
        self.state.borrow_mut().corrupt_next_admin = Some(corruption);
    }

    /// Reads touching `lba` of namespace `namespace_id` fail with Unrecovered Read Error.
    pub fn add_media_error(&self, namespace_id: u32, lba: u64) {
        self.state.borrow_mut().media_errors.push((namespace_id, lba));
    }

    /// Reads of `lba` return its first byte inverted (data the driver must not call good).
    pub fn add_data_corruption(&self, namespace_id: u32, lba: u64) {
        self.state.borrow_mut().data_corruptions.push((namespace_id, lba));
    }

    pub fn io_queue_ids(&self) -> Vec<u16> {
        self.state.borrow().submission_queues.keys().copied().filter(|q| *q != 0).collect()
    }

    pub fn io_queue_entries(&self, queue_id: u16) -> Option<u32> {
        self.state.borrow().submission_queues.get(&queue_id).map(|q| q.entries)
    }

    fn page_bytes(state: &State) -> u64 {
        1u64 << (12 + cc_field(state.cc, CC::MPS))
    }

    fn write_cc(&self, state: &mut State, value: u32) {
        let was_enabled = state.cc & 1 != 0;
        let enable = value & 1 != 0;
        let old_shn = cc_field(state.cc, CC::SHN);
        state.cc = value;
        if !was_enabled && enable {
            self.enable(state);
        } else if was_enabled && !enable {
            state.submission_queues.clear();
            state.completion_queues.clear();
            state.outstanding.clear();
            state.held.clear();
            state.csts = 0;
            state.interrupt_mask = 0;
        }
        let shn = cc_field(value, CC::SHN);
        if enable && shn != 0 && old_shn == 0 {
            state.statistics.shutdowns += 1;
            state.statistics.io_queues_alive_at_shutdown = state
                .submission_queues
                .keys()
                .chain(state.completion_queues.keys())
                .filter(|q| **q != 0)
                .count();
            state.csts &= !(3 << 2);
            state.csts |= if state.config.fault == Some(Fault::NeverFinishesShutdown) {
                CSTS_SHST_OCCURRING
            } else {
                CSTS_SHST_COMPLETE
            };
        }
    }

    fn enable(&self, state: &mut State) {
        let page = Self::page_bytes(state);
        let mps = cc_field(state.cc, CC::MPS) as u8;
        let mut problems = Vec::new();
        if !state.asq.is_multiple_of(page) || !state.acq.is_multiple_of(page) {
            problems.push(format!("admin queues at {:#x}/{:#x} not aligned to {page}", state.asq, state.acq));
        }
        let sq_entries = (state.aqa & 0xfff) + 1;
        let cq_entries = ((state.aqa >> 16) & 0xfff) + 1;
        if sq_entries < 2 || cq_entries < 2 {
            problems.push(format!("AQA {:#x} has a queue below 2 entries", state.aqa));
        }
        if cc_field(state.cc, CC::IOSQES) != 6 || cc_field(state.cc, CC::IOCQES) != 4 {
            problems.push(format!("CC {:#x} entry sizes are not 64/16", state.cc));
        }
        if mps < state.config.mpsmin || mps > state.config.mpsmax {
            problems.push(format!("CC.MPS {mps} outside CAP"));
        }
        if cc_field(state.cc, CC::CSS) != 0 {
            problems.push(format!("CC.CSS {}", cc_field(state.cc, CC::CSS)));
        }
        if !problems.is_empty() || state.config.fault == Some(Fault::FatalOnEnable) {
            state.violations.extend(problems);
            state.csts |= CSTS_CFS;
            return;
        }
        state.submission_queues.insert(
            0,
            SimSubmissionQueue {
                base: state.asq,
                entries: sq_entries,
                completion_queue: 0,
                head: 0,
                tail: 0,
            },
        );
        state.completion_queues.insert(
            0,
            SimCompletionQueue {
                base: state.acq,
                entries: cq_entries,
                tail: 0,
                head: 0,
                phase: true,
                backlog: VecDeque::new(),
                posted: VecDeque::new(),
            },
        );
        if state.config.fault != Some(Fault::NeverReady) {
            state.ready_countdown = state.config.ready_after_reads;
            if state.ready_countdown == 0 {
                state.csts |= CSTS_RDY;
            }
        }
    }

    fn read_csts(&self, state: &mut State) -> u32 {
        if state.ready_countdown > 0 {
            state.ready_countdown -= 1;
            if state.ready_countdown == 0 && state.cc & 1 != 0 {
                state.csts |= CSTS_RDY;
            }
        }
        state.csts
    }

    fn doorbell(&self, state: &mut State, offset: usize, value: u32) {
        let stride = 4usize << state.config.dstrd;
        let index = (offset - offsets::DOORBELLS) / stride;
        if !(offset - offsets::DOORBELLS).is_multiple_of(stride) {
            state.violations.push(format!("doorbell write at {offset:#x} between doorbells"));
            return;
        }
        let queue = (index / 2) as u16;
        if state.csts & CSTS_RDY == 0 {
            state.violations.push(format!("doorbell {offset:#x} written while not ready"));
            return;
        }
        if index.is_multiple_of(2) {
            state.statistics.sq_doorbell_writes += 1;
            self.submission_doorbell(state, queue, value);
        } else {
            state.statistics.cq_doorbell_writes += 1;
            self.completion_doorbell(state, queue, value);
        }
    }

    fn submission_doorbell(&self, state: &mut State, queue: u16, value: u32) {
        let Some(sq) = state.submission_queues.get_mut(&queue) else {
            state
                .violations
                .push(format!("SQ {queue} tail doorbell {value} for a queue that does not exist"));
            return;
        };
        if value >= sq.entries {
            state.violations.push(format!("SQ {queue} tail {value} outside {} entries", sq.entries));
            return;
        }
        sq.tail = value;
        loop {
            let Some(sq) = state.submission_queues.get_mut(&queue) else {
                return;
            };
            if sq.head == sq.tail {
                break;
            }
            let address = sq.base + u64::from(sq.head) * 64;
            sq.head = (sq.head + 1) % sq.entries;
            let completion_queue = sq.completion_queue;
            let mut bytes = [0u8; 64];
            if !self.platform.read_bus(address, &mut bytes) {
                state.violations.push(format!("SQ {queue} entry at {address:#x} unreachable"));
                state.csts |= CSTS_CFS;
                return;
            }
            let mut entry = SubmissionEntry::default();
            for (index, word) in entry.dwords.iter_mut().enumerate() {
                *word = u32::from_le_bytes(bytes[4 * index..4 * index + 4].try_into().unwrap());
            }
            let key = (queue, entry.command_id());
            let (status, command_specific) = if state.outstanding.contains(&key) {
                state.violations.push(format!(
                    "command identifier {} reused on SQ {queue} while outstanding",
                    entry.command_id()
                ));
                (Status::new(code_type::GENERIC, 0x03, true), 0)
            } else {
                state.outstanding.insert(key);
                state.statistics.max_outstanding = state
                    .statistics
                    .max_outstanding
                    .max(state.outstanding.iter().filter(|(q, _)| *q == queue).count());
                if queue == 0 {
                    self.execute_admin(state, &entry)
                } else {
                    self.execute_io(state, queue, &entry)
                }
            };
            let pending = Pending {
                submission_queue: queue,
                command_id: entry.command_id(),
                status,
                command_specific,
                sq_head_override: None,
            };
            if queue != 0 && state.hold_io_completions {
                state.held.push((completion_queue, pending));
            } else if let Some(cq) = state.completion_queues.get_mut(&completion_queue) {
                cq.backlog.push_back(pending);
            }
        }
        let completion_queue = state.submission_queues[&queue].completion_queue;
        Self::post(self.platform, state, completion_queue);
    }

    fn completion_doorbell(&self, state: &mut State, queue: u16, value: u32) {
        let Some(cq) = state.completion_queues.get_mut(&queue) else {
            state
                .violations
                .push(format!("CQ {queue} head doorbell {value} for a queue that does not exist"));
            return;
        };
        let posted = (cq.tail + cq.entries - cq.head) % cq.entries;
        let released = (value + cq.entries - cq.head) % cq.entries;
        if value >= cq.entries || released > posted {
            state.violations.push(format!(
                "CQ {queue} head {value} beyond the entries posted (head {}, tail {})",
                cq.head, cq.tail
            ));
            return;
        }
        cq.head = value;
        let finished: Vec<_> = cq.posted.drain(..released as usize).collect();
        for key in finished {
            state.outstanding.remove(&key);
        }
        Self::post(self.platform, state, queue);
    }

    /// Moves backlog entries into the CQ while it has room.
    fn post(platform: &SimPlatform, state: &mut State, queue: u16) {
        loop {
            let corruption =
                if queue == 0 { state.corrupt_next_admin.take() } else { state.corrupt_next.take() };
            let Some(cq) = state.completion_queues.get_mut(&queue) else {
                return;
            };
            if (cq.tail + 1) % cq.entries == cq.head || cq.backlog.is_empty() {
                return;
            }
            let mut pending = cq.backlog.pop_front().expect("not empty");
            match corruption {
                Some(Corruption::UnknownCommandId) => {
                    cq.backlog.push_front(pending);
                    pending = Pending {
                        submission_queue: queue,
                        command_id: 0xFFF0,
                        status: Status::SUCCESS,
                        command_specific: 0,
                        sq_head_override: None,
                    };
                }
                Some(Corruption::WrongSubmissionQueue) => {
                    let real_queue = pending.submission_queue;
                    cq.backlog.push_front(pending);
                    pending = Pending {
                        submission_queue: real_queue + 7,
                        command_id: 0,
                        status: Status::SUCCESS,
                        command_specific: 0,
                        sq_head_override: None,
                    };
                }
                Some(Corruption::ImpossibleSqHead) => pending.sq_head_override = Some(0xFFFE),
                None => {}
            }
            let Some(cq) = state.completion_queues.get_mut(&queue) else {
                return;
            };
            let sq_head = match pending.sq_head_override {
                Some(head) => head,
                None => state
                    .submission_queues
                    .get(&pending.submission_queue)
                    .map(|sq| sq.head as u16)
                    .unwrap_or(0),
            };
            let entry = CompletionEntry::new(
                pending.command_specific,
                sq_head,
                pending.submission_queue,
                pending.command_id,
                cq.phase,
                pending.status,
            );
            let mut bytes = [0u8; 16];
            for (index, word) in entry.dwords.iter().enumerate() {
                bytes[4 * index..4 * index + 4].copy_from_slice(&word.to_le_bytes());
            }
            let address = cq.base + u64::from(cq.tail) * 16;
            if !platform.write_bus(address, &bytes) {
                state.violations.push(format!("CQ {queue} entry at {address:#x} unreachable"));
                state.csts |= CSTS_CFS;
                return;
            }
            cq.posted.push_back((pending.submission_queue, pending.command_id));
            cq.tail += 1;
            if cq.tail == cq.entries {
                cq.tail = 0;
                cq.phase = !cq.phase;
            }
        }
    }

    fn transfer(&self, state: &mut State, entry: &SubmissionEntry, data: &[u8]) -> Result<(), Status> {
        let page = Self::page_bytes(state) as usize;
        let platform = self.platform;
        let list_reads = Cell::new(0u64);
        let chained = Cell::new(false);
        let segments = walk_prps(entry.prp1(), entry.prp2(), data.len(), page, |address| {
            list_reads.set(list_reads.get() + 1);
            if address.is_multiple_of(page as u64) && list_reads.get() > 1 {
                chained.set(true);
            }
            platform.read_bus_u64(address)
        });
        state.statistics.list_reads += list_reads.get();
        if chained.get() {
            state.statistics.chained_lists += 1;
        }
        let segments = match segments {
            Ok(segments) => segments,
            Err(error) => {
                state.violations.push(format!(
                    "bad PRPs {:#x}/{:#x} for {} bytes: {error:?}",
                    entry.prp1(),
                    entry.prp2(),
                    data.len()
                ));
                return Err(Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true));
            }
        };
        let mut offset = 0;
        for (address, bytes) in segments {
            if !platform.write_bus(address, &data[offset..offset + bytes]) {
                state
                    .violations
                    .push(format!("data segment {address:#x}+{bytes:#x} unreachable (bus translation?)"));
                return Err(Status::new(code_type::GENERIC, 0x04, false));
            }
            offset += bytes;
        }
        Ok(())
    }

    fn execute_admin(&self, state: &mut State, entry: &SubmissionEntry) -> (Status, u32) {
        let opcode = entry.opcode();
        state.statistics.admin_commands.push(opcode);
        let invalid_field = Status::new(code_type::GENERIC, generic::INVALID_FIELD, true);
        if entry.psdt() != 0 || entry.fuse() != 0 {
            state.violations.push(format!("admin {opcode:#x} with PSDT/FUSE set"));
            return (invalid_field, 0);
        }
        let specific = |code| Status::new(code_type::COMMAND_SPECIFIC, code, true);
        let page = Self::page_bytes(state);
        match opcode {
            admin_opcode::IDENTIFY => {
                let data = match entry.cdw(10) & 0xff {
                    value if value == u32::from(cns::CONTROLLER) => self.controller_data(state),
                    value if value == u32::from(cns::NAMESPACE) => {
                        let id = entry.namespace_id();
                        if id == 0 || id > state.config.namespace_count {
                            return (
                                Status::new(code_type::GENERIC, generic::INVALID_NAMESPACE_OR_FORMAT, true),
                                0,
                            );
                        }
                        Self::namespace_data(state, id)
                    }
                    value
                        if value == u32::from(cns::ACTIVE_NAMESPACE_LIST)
                            && state.config.supports_active_list =>
                    {
                        let mut data = vec![0u8; 4096];
                        let after = entry.namespace_id();
                        let mut ids: Vec<u32> =
                            state.config.namespaces.iter().map(|n| n.id).filter(|id| *id > after).collect();
                        ids.sort_unstable();
                        for (index, id) in ids.iter().take(1024).enumerate() {
                            data[4 * index..4 * index + 4].copy_from_slice(&id.to_le_bytes());
                        }
                        data
                    }
                    _ => return (invalid_field, 0),
                };
                match self.transfer(state, entry, &data) {
                    Ok(()) => (Status::SUCCESS, 0),
                    Err(status) => (status, 0),
                }
            }
            admin_opcode::SET_FEATURES if entry.cdw(10) & 0xff == u32::from(feature::NUMBER_OF_QUEUES) => {
                if state.completion_queues.keys().any(|q| *q != 0) {
                    return (Status::new(code_type::GENERIC, generic::COMMAND_SEQUENCE_ERROR, true), 0);
                }
                let submission = entry.cdw(11) & 0xffff;
                let completion = entry.cdw(11) >> 16;
                if submission == 0xffff || completion == 0xffff {
                    return (invalid_field, 0);
                }
                let most = u32::from(state.config.max_io_queue_pairs);
                let granted_sq = (submission + 1).min(most) - 1;
                let granted_cq = (completion + 1).min(most) - 1;
                (Status::SUCCESS, granted_cq << 16 | granted_sq)
            }
            admin_opcode::CREATE_IO_COMPLETION_QUEUE => {
                let queue = (entry.cdw(10) & 0xffff) as u16;
                let entries = (entry.cdw(10) >> 16) + 1;
                let flags = entry.cdw(11);
                if queue == 0
                    || queue > state.config.max_io_queue_pairs
                    || state.completion_queues.contains_key(&queue)
                {
                    return (specific(command_specific::INVALID_QUEUE_IDENTIFIER), 0);
                }
                if entries < 2 || entries > u32::from(state.config.mqes) + 1 {
                    return (specific(command_specific::INVALID_QUEUE_SIZE), 0);
                }
                if flags & 1 == 0 {
                    return (invalid_field, 0);
                }
                if flags & 2 != 0 {
                    state.violations.push(format!("CQ {queue} created with interrupts enabled"));
                }
                if flags >> 16 != 0 {
                    return (specific(command_specific::INVALID_INTERRUPT_VECTOR), 0);
                }
                if !entry.prp1().is_multiple_of(page) {
                    return (Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true), 0);
                }
                state.completion_queues.insert(
                    queue,
                    SimCompletionQueue {
                        base: entry.prp1(),
                        entries,
                        tail: 0,
                        head: 0,
                        phase: true,
                        backlog: VecDeque::new(),
                        posted: VecDeque::new(),
                    },
                );
                (Status::SUCCESS, 0)
            }
            admin_opcode::CREATE_IO_SUBMISSION_QUEUE => {
                let queue = (entry.cdw(10) & 0xffff) as u16;
                let entries = (entry.cdw(10) >> 16) + 1;
                let completion_queue = (entry.cdw(11) >> 16) as u16;
                if entry.cdw(11) & 1 == 0 {
                    return (invalid_field, 0);
                }
                if completion_queue == 0 || !state.completion_queues.contains_key(&completion_queue) {
                    return (specific(0x00), 0);
                }
                if queue == 0
                    || queue > state.config.max_io_queue_pairs
                    || state.submission_queues.contains_key(&queue)
                {
                    return (specific(command_specific::INVALID_QUEUE_IDENTIFIER), 0);
                }
                if entries < 2 || entries > u32::from(state.config.mqes) + 1 {
                    return (specific(command_specific::INVALID_QUEUE_SIZE), 0);
                }
                if !entry.prp1().is_multiple_of(page) {
                    return (Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true), 0);
                }
                state.submission_queues.insert(
                    queue,
                    SimSubmissionQueue { base: entry.prp1(), entries, completion_queue, head: 0, tail: 0 },
                );
                state.statistics.io_queues_created.push(queue);
                (Status::SUCCESS, 0)
            }
            admin_opcode::DELETE_IO_SUBMISSION_QUEUE => {
                let queue = (entry.cdw(10) & 0xffff) as u16;
                if queue == 0 || state.submission_queues.remove(&queue).is_none() {
                    return (specific(command_specific::INVALID_QUEUE_IDENTIFIER), 0);
                }
                state.statistics.io_queues_deleted.push(queue);
                (Status::SUCCESS, 0)
            }
            admin_opcode::DELETE_IO_COMPLETION_QUEUE => {
                let queue = (entry.cdw(10) & 0xffff) as u16;
                if queue == 0 || !state.completion_queues.contains_key(&queue) {
                    return (specific(command_specific::INVALID_QUEUE_IDENTIFIER), 0);
                }
                if state.submission_queues.values().any(|sq| sq.completion_queue == queue) {
                    return (specific(command_specific::INVALID_QUEUE_DELETION), 0);
                }
                state.completion_queues.remove(&queue);
                (Status::SUCCESS, 0)
            }
            _ => (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0),
        }
    }

    fn execute_io(&self, state: &mut State, queue: u16, entry: &SubmissionEntry) -> (Status, u32) {
        let opcode = entry.opcode();
        if opcode == io_opcode::WRITE {
            state.violations.push(String::from("the driver sent a Write command"));
            return (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0);
        }
        if opcode != io_opcode::READ {
            return (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0);
        }
        let Some(namespace) = state.config.namespaces.iter().find(|n| n.id == entry.namespace_id()).cloned()
        else {
            return (Status::new(code_type::GENERIC, generic::INVALID_NAMESPACE_OR_FORMAT, true), 0);
        };
        let (lba, blocks) = entry.read_range();
        if lba + u64::from(blocks) > namespace.blocks {
            state.violations.push(format!(
                "read of {blocks} blocks at {lba} beyond {} blocks reached the controller",
                namespace.blocks
            ));
            return (Status::new(code_type::GENERIC, generic::LBA_OUT_OF_RANGE, true), 0);
        }
        let bytes = (blocks as usize) << namespace.lba_shift;
        let max_bytes = (Self::page_bytes(state) as usize) << state.config.mdts;
        if state.config.mdts != 0 && bytes > max_bytes {
            state.violations.push(format!("read of {bytes} bytes exceeds MDTS ({max_bytes})"));
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 0);
        }
        state.statistics.reads += 1;
        state.statistics.read_ranges.push((lba, blocks));
        *state.statistics.reads_per_queue.entry(queue).or_default() += 1;
        state.statistics.read_bytes_max = state.statistics.read_bytes_max.max(bytes);
        let first_byte = lba << namespace.lba_shift;
        let mut data = pattern_bytes(first_byte, bytes);
        for (id, bad) in &state.data_corruptions {
            if *id == namespace.id && (lba..lba + u64::from(blocks)).contains(bad) {
                data[((bad - lba) << namespace.lba_shift) as usize] ^= 0xff;
            }
        }
        if let Err(status) = self.transfer(state, entry, &data) {
            return (status, 0);
        }
        let hit = state
            .media_errors
            .iter()
            .any(|(id, bad)| *id == namespace.id && (lba..lba + u64::from(blocks)).contains(bad));
        if hit {
            return (
                Status::new(code_type::MEDIA_AND_DATA_INTEGRITY, media::UNRECOVERED_READ_ERROR, true),
                0,
            );
        }
        (Status::SUCCESS, 0)
    }

    fn controller_data(&self, state: &State) -> Vec<u8> {
        let config = &state.config;
        let mut data = vec![0u8; 4096];
        data[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
        data[2..4].copy_from_slice(&0x1af4u16.to_le_bytes());
        let mut put_text = |range: core::ops::Range<usize>, text: &str| {
            data[range.clone()].fill(b' ');
            data[range.start..range.start + text.len()].copy_from_slice(text.as_bytes());
        };
        put_text(4..24, config.serial);
        put_text(24..64, config.model);
        put_text(64..72, config.firmware);
        data[77] = config.mdts;
        data[80..84].copy_from_slice(&config.version.to_le_bytes());
        data[88..92].copy_from_slice(&config.rtd3_entry_latency_us.to_le_bytes());
        data[512] = 0x66;
        data[513] = 0x44;
        data[516..520].copy_from_slice(&config.namespace_count.to_le_bytes());
        data[525] = 1;
        data
    }

    fn namespace_data(state: &State, id: u32) -> Vec<u8> {
        let mut data = vec![0u8; 4096];
        let Some(namespace) = state.config.namespaces.iter().find(|n| n.id == id) else {
            return data;
        };
        data[0..8].copy_from_slice(&namespace.blocks.to_le_bytes());
        data[8..16].copy_from_slice(&namespace.blocks.to_le_bytes());
        data[25] = 1; // two formats
        let in_use = u32::from(namespace.metadata_bytes) | u32::from(namespace.lba_shift) << 16;
        let other_shift: u8 = if namespace.lba_shift == 9 { 12 } else { 9 };
        data[26] = 0;
        data[128..132].copy_from_slice(&in_use.to_le_bytes());
        data[132..136].copy_from_slice(&(u32::from(other_shift) << 16).to_le_bytes());
        data
    }
}

/// `length` bytes of the test pattern from device byte `first_byte` (a multiple of 512).
pub fn pattern_bytes(first_byte: u64, length: usize) -> Vec<u8> {
    let mut data = vec![0u8; length];
    let first_sector = first_byte / 512;
    for (index, chunk) in data.chunks_mut(512).enumerate() {
        let mut sector = [0u8; 512];
        blockdev::pattern::fill_sector(first_sector + index as u64, &mut sector);
        chunk.copy_from_slice(&sector[..chunk.len()]);
    }
    data
}

impl RegisterIo for SimController<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let mut state = self.state.borrow_mut();
        state.statistics.register_reads += 1;
        let cap = state.config.cap();
        match offset_bytes {
            offsets::CAP => cap as u32,
            0x04 => (cap >> 32) as u32,
            offsets::VS => state.config.version,
            offsets::INTMS | offsets::INTMC => state.interrupt_mask,
            offsets::CC => state.cc,
            offsets::CSTS => self.read_csts(&mut state),
            offsets::AQA => state.aqa,
            offsets::ASQ => state.asq as u32,
            0x2C => (state.asq >> 32) as u32,
            offsets::ACQ => state.acq as u32,
            0x34 => (state.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let mut state = self.state.borrow_mut();
        match offset_bytes {
            offsets::CC => self.write_cc(&mut state, value),
            offsets::AQA => state.aqa = value,
            offsets::ASQ => state.asq = (state.asq & !0xffff_ffff) | u64::from(value),
            0x2C => state.asq = (state.asq & 0xffff_ffff) | u64::from(value) << 32,
            offsets::ACQ => state.acq = (state.acq & !0xffff_ffff) | u64::from(value),
            0x34 => state.acq = (state.acq & 0xffff_ffff) | u64::from(value) << 32,
            // Masking is allowed (MSI-X is never enabled); unmasking would ask for interrupts.
            offsets::INTMS => state.interrupt_mask |= value,
            offsets::INTMC => {
                state.violations.push(format!("INTMC written with {value:#x}: interrupts unmasked"))
            }
            offset if offset >= offsets::DOORBELLS => self.doorbell(&mut state, offset, value),
            _ => state.violations.push(format!("write of {value:#x} to register {offset_bytes:#x}")),
        }
    }
}

impl SimController<'_> {
    /// INTMS as the driver left it.
    pub fn interrupt_mask(&self) -> u32 {
        self.state.borrow().interrupt_mask
    }

    /// CSTS without the side effects of a register read (for assertions).
    pub fn csts_bits(&self) -> (bool, bool, u32) {
        let csts = self.state.borrow().csts;
        (
            csts & CSTS_RDY != 0,
            csts & CSTS_CFS != 0,
            LocalRegisterCopy::<u32, CSTS::Register>::new(csts).read(CSTS::SHST),
        )
    }
}
