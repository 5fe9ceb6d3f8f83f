//! A simulated NVMe controller for host tests (NVMe Base Specification 1.4 behaviour, with
//! QEMU's `hw/nvme` choices from docs/nvme-and-fio.md §4 where the specification leaves room): a
//! register model (CAP, VS, CC, CSTS, AQA, ASQ, ACQ, doorbells) that reads submission entries
//! from and writes completion entries to host memory, interprets PRPs independently of the
//! driver's builder, and reads a pattern-filled "disk". It records every driver mistake it can
//! see (bad PRPs, command identifier conflicts, doorbells out of range, writes) as a violation,
//! and can be told to misbehave (never ready, fatal status, corrupt completions, media errors).
//! A controller asking for a host memory buffer (HMPRE > 0) checks the descriptor list it is
//! given (NVMe 1.4 §5.21.1.13: 16-byte aligned list, page-aligned entries of at least HMMINDS,
//! no more than HMMAXD, sizes adding up to HSIZE >= HMMIN, all reachable), reads it through the
//! cache-ordering log, and objects to a shutdown while the buffer is still in use (barebench takes
//! it back first, as drivers that free it must).

extern crate std;

use super::command::{admin_opcode, cns, feature, io_opcode, CompletionEntry, SubmissionEntry};
use super::events::{Event, EventSink};
use super::regs::{offsets, CC, CSTS};
use super::status::{code_type, command_specific, generic, media, Status};
use blockdev::DmaBuffer;
use core::cell::{RefCell, RefMut};
use hal::mmio::RegisterIo;
use hal::platform::BusTranslation;
use hal::testing::{Background, ByteRange, EventLog, PlatformEvent};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::format;
use std::rc::{Rc, Weak};
use std::string::String;
use std::vec;
use std::vec::Vec;
use tock_registers::LocalRegisterCopy;

/// Where the simulated DMA pool pretends to sit in CPU physical space.
pub use hal::testing::PHYSICAL_BASE;
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
pub type SimPlatform = hal::testing::ArenaPlatform;

/// The NVMe simulator's view of the test arena (see [`SimPlatform`]).
pub trait NvmeArena {
    /// An arena whose clock moves 100 µs per read (controller waits then take few iterations).
    fn for_nvme(arena_bytes: usize) -> Self;
    /// How the simulated controller sees the arena: `BUS_OFFSET` above its physical addresses.
    fn translation(&self) -> BusTranslation;
    /// The physical address behind `length` bytes at bus address `bus`: through the bus model
    /// when one is set (a root complex's inbound windows, which records what it refuses), else
    /// `BUS_OFFSET` below. `None` when the bus does not forward it.
    fn physical_of_bus(&self, bus: u64, length: usize) -> Option<u64>;
    /// A DMA read by the controller (logged); false when the address is unreachable.
    fn read_bus(&self, bus: u64, out: &mut [u8]) -> bool;
    /// A DMA write by the controller (logged); false when the address is unreachable.
    fn write_bus(&self, bus: u64, data: &[u8]) -> bool;
    /// A 64-bit little-endian word read by the controller (logged), as `read_bus`.
    fn read_bus_u64(&self, bus: u64) -> Option<u64>;
    /// A PRP list entry as the controller's walker sees it, with the physical address it came
    /// from (not logged: the simulator logs the list pages it read as whole runs).
    fn peek_bus_u64(&self, bus: u64) -> Option<(u64, u64)>;
    /// Bytes of a DMA buffer as the CPU reads them (logged, and so checked for a missing
    /// invalidate after the controller wrote them).
    fn bytes_of(&self, buffer: &DmaBuffer) -> Vec<u8>;
}

impl NvmeArena for SimPlatform {
    fn for_nvme(arena_bytes: usize) -> Self {
        let platform = Self::new(arena_bytes);
        platform.set_step_us(100);
        platform
    }

    fn translation(&self) -> BusTranslation {
        BusTranslation {
            cpu_base: PHYSICAL_BASE,
            bus_base: PHYSICAL_BASE + BUS_OFFSET,
            size_bytes: self.arena_bytes() as u64,
        }
    }

    fn physical_of_bus(&self, bus: u64, length: usize) -> Option<u64> {
        match self.bus_view() {
            Some(view) => view.to_physical(bus, length),
            None => bus.checked_sub(BUS_OFFSET),
        }
    }

    fn read_bus(&self, bus: u64, out: &mut [u8]) -> bool {
        self.physical_of_bus(bus, out.len()).is_some_and(|physical| self.device_read(physical, out))
    }

    fn write_bus(&self, bus: u64, data: &[u8]) -> bool {
        self.physical_of_bus(bus, data.len()).is_some_and(|physical| self.device_write(physical, data))
    }

    fn read_bus_u64(&self, bus: u64) -> Option<u64> {
        let mut bytes = [0u8; 8];
        self.read_bus(bus, &mut bytes).then(|| u64::from_le_bytes(bytes))
    }

    fn peek_bus_u64(&self, bus: u64) -> Option<(u64, u64)> {
        let physical = self.physical_of_bus(bus, 8)?;
        let mut bytes = [0u8; 8];
        self.peek(physical, &mut bytes).then(|| (physical, u64::from_le_bytes(bytes)))
    }

    fn bytes_of(&self, buffer: &DmaBuffer) -> Vec<u8> {
        self.cpu_read(buffer)
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
    /// Admin commands are fetched but never completed.
    AdminCommandsHang,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    /// A bogus completion with an identifier nobody used comes before the next real one.
    UnknownCommandId,
    /// The next completion reports an SQ head past the tail.
    ImpossibleSqHead,
    /// A bogus completion naming another submission queue comes before the next real one.
    WrongSubmissionQueue,
    /// The next completion is posted twice (the copy names a command that already finished).
    DuplicateCompletion,
    /// The next completion is written with the phase tag of the previous pass: to the host the
    /// slot never fills.
    StalePhase,
    /// The next completion carries a status code type the specification reserves (5).
    ReservedStatusType,
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
    /// Each command completes 1 to this many clock reads after its doorbell, drawn per
    /// command, so later commands overtake earlier ones.
    pub completion_latency_max_ticks: u32,
    /// Seed of the latencies and of [`SimController::release_held`]'s picks.
    pub completion_seed: u64,
    /// Whether a Write is expected: otherwise it is a violation (the driver must not write
    /// unless the test opted in), as before writes existed.
    pub accept_writes: bool,
    /// Identify HMPRE, HMMIN, HMMINDS (4 KiB units) and HMMAXD: a DRAM-less drive asks for a
    /// host memory buffer (QEMU's does not: all 0).
    pub host_memory: (u32, u32, u32, u16),
    /// Set Features 0Dh with EHM = 1 fails with Invalid Field whatever it holds, as a drive
    /// that lists HMPRE but will not take a buffer.
    pub refuses_host_memory_buffer: bool,
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
            completion_latency_max_ticks: 4,
            completion_seed: 0x9E37_79B9_7F4A_7C15,
            accept_writes: false,
            host_memory: (0, 0, 0, 0),
            refuses_host_memory_buffer: false,
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

/// A command the controller fetched and has not completed yet.
struct InFlight {
    submission_queue: u16,
    entry: SubmissionEntry,
    /// Log index of the doorbell write that handed the command over.
    doorbell_event: usize,
    /// Fetch order, to count completions that overtake earlier commands.
    fetched: u64,
    /// The clock read (tick) from which the command may complete.
    due_tick: u64,
    /// A status decided at fetch (a command identifier conflict): not executed.
    refused: Option<Status>,
}

#[derive(Clone, Copy)]
struct Pending {
    submission_queue: u16,
    command_id: u16,
    status: Status,
    command_specific: u32,
    /// Posted as is (a corruption), not from the queue's head.
    sq_head_override: Option<u16>,
    /// Posted with the phase tag of the previous pass (a corruption: the phase never flips).
    stale_phase: bool,
}

/// A completion entry in the CQ that the host has not released yet.
struct Posted {
    submission_queue: u16,
    command_id: u16,
    slot: u32,
    /// Where the entry lies (physical).
    entry: ByteRange,
    /// Log index of the DMA write that posted it.
    written_event: usize,
}

struct SimCompletionQueue {
    base: u64,
    entries: u32,
    tail: u32,
    head: u32,
    phase: bool,
    backlog: VecDeque<Pending>,
    posted: VecDeque<Posted>,
    /// Log index of the MMIO write that gave the queue to the controller (CC.EN for the admin
    /// CQ, the doorbell of its Create command for an I/O CQ).
    handover_event: usize,
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
    /// Completions posted while a command fetched earlier from the same SQ was still running.
    pub overtakes: u64,
    /// Completion entries posted at slot 0 after the first pass (the phase tag flipped).
    pub cq_wraps: u64,
    /// Abort commands executed.
    pub aborts: u64,
    /// Controller resets (CC.EN 1 → 0 while enabled).
    pub resets: u32,
    /// (LBA, blocks) of every Write executed, and the Flushes.
    pub write_ranges: Vec<(u64, u32)>,
    pub flushes: u64,
    /// The host memory buffer in use: (bus address, pages) of every descriptor, as read.
    pub host_memory_buffer: Option<Vec<(u64, u32)>>,
    /// Host memory buffers taken back (Set Features 0Dh with EHM = 0 while one was in use).
    pub host_memory_buffers_returned: u32,
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
    in_flight: Vec<InFlight>,
    fetch_count: u64,
    tick: u64,
    random: u64,
    hold_io_completions: bool,
    /// Abort takes the command out and completes it with Command Abort Requested; otherwise
    /// Abort answers "not aborted" and the command goes on (as QEMU's model mostly does).
    honour_aborts: bool,
    /// The device is gone: every register reads all ones, writes go nowhere.
    removed: bool,
    corrupt_next: Option<Corruption>,
    corrupt_next_admin: Option<Corruption>,
    media_errors: Vec<(u32, u64)>,
    /// Blocks written, by (namespace, LBA): reads return these instead of the pattern.
    written: BTreeMap<(u32, u64), Vec<u8>>,
    violations: Vec<String>,
    statistics: SimStatistics,
}

/// The controller's state, shared with the platform, which lets it work on every clock read.
struct SimCore {
    state: RefCell<State>,
}

impl Background for SimCore {
    fn advance(&self, platform: &SimPlatform) {
        // A clock read from inside the controller's own work must not re-enter it.
        if let Ok(mut state) = self.state.try_borrow_mut() {
            state.advance(platform);
        }
    }
}

pub struct SimController<'a> {
    platform: &'a SimPlatform,
    core: Rc<SimCore>,
}

fn cc_field(cc: u32, field: tock_registers::fields::Field<u32, CC::Register>) -> u32 {
    LocalRegisterCopy::<u32, CC::Register>::new(cc).read(field)
}

const CSTS_RDY: u32 = 1;
const CSTS_CFS: u32 = 1 << 1;
const CSTS_SHST_OCCURRING: u32 = 1 << 2;
const CSTS_SHST_COMPLETE: u32 = 2 << 2;
/// Generic status "Command Aborted due to SQ Deletion" (NVMe 1.4 Figure 128).
const ABORTED_SQ_DELETION: u8 = 0x08;
/// Generic status Command Abort Requested (NVMe 2.0 Figure 102).
const COMMAND_ABORT_REQUESTED: u8 = 0x07;
const SUBMISSION_ENTRY_BYTES: u64 = 64;
const COMPLETION_ENTRY_BYTES: u64 = 16;

impl<'a> SimController<'a> {
    pub fn new(platform: &'a SimPlatform, config: SimConfig) -> Self {
        let start_enabled = config.start_enabled;
        let state = State {
            cc: if start_enabled { 0x0046_0001 } else { 0 },
            csts: if start_enabled { CSTS_RDY } else { 0 },
            random: config.completion_seed | 1,
            config,
            aqa: 0,
            asq: 0,
            acq: 0,
            ready_countdown: 0,
            interrupt_mask: 0,
            submission_queues: BTreeMap::new(),
            completion_queues: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            in_flight: Vec::new(),
            fetch_count: 0,
            tick: 0,
            hold_io_completions: false,
            honour_aborts: true,
            removed: false,
            corrupt_next: None,
            corrupt_next_admin: None,
            media_errors: Vec::new(),
            written: BTreeMap::new(),
            violations: Vec::new(),
            statistics: SimStatistics::default(),
        };
        let core = Rc::new(SimCore { state: RefCell::new(state) });
        let background: Weak<dyn Background> = Rc::downgrade(&core) as Weak<SimCore>;
        platform.add_background(background);
        SimController { platform, core }
    }

    fn state(&self) -> RefMut<'_, State> {
        self.core.state.borrow_mut()
    }

    /// The size of BAR0 a controller like this has (registers + doorbells for 64 pairs).
    pub fn register_bytes(&self) -> usize {
        0x1000 + (2 * 65) * (4usize << self.state().config.dstrd)
    }

    /// The driver's mistakes seen so far: the controller's own findings, then the platform
    /// log's (CPU reads without an invalidate).
    pub fn violations(&self) -> Vec<String> {
        let mut violations = self.state().violations.clone();
        violations.extend(self.platform.log().violations());
        violations
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "driver mistakes: {violations:#?}");
    }

    pub fn statistics(&self) -> SimStatistics {
        self.state().statistics.clone()
    }

    pub fn reset_statistics(&self) {
        let mut state = self.state();
        let keep_created = state.statistics.io_queues_created.clone();
        state.statistics = SimStatistics { io_queues_created: keep_created, ..SimStatistics::default() };
    }

    /// Holds I/O commands back (fetched, not completed) until [`SimController::release_held`].
    pub fn hold_io_completions(&self, hold: bool) {
        self.state().hold_io_completions = hold;
    }

    /// Whether Abort takes the named command out (see `State::honour_aborts`).
    pub fn honour_aborts(&self, honour: bool) {
        self.state().honour_aborts = honour;
    }

    /// Removes the device: from now on every register read returns all ones (as a PCIe read
    /// that no device completes) and nothing the driver writes arrives.
    pub fn remove(&self) {
        self.state().removed = true;
    }

    /// I/O commands fetched and not completed.
    pub fn held_count(&self) -> usize {
        self.state().in_flight.iter().filter(|command| command.submission_queue != 0).count()
    }

    /// Completes up to `count` of the I/O commands in flight, picked at random (so in any order).
    pub fn release_held(&self, count: usize) {
        let mut state = self.state();
        for _ in 0..count {
            let held: Vec<usize> = (0..state.in_flight.len())
                .filter(|index| state.in_flight[*index].submission_queue != 0)
                .collect();
            if held.is_empty() {
                break;
            }
            let pick = held[(state.next_random() % held.len() as u64) as usize];
            let command = state.in_flight.remove(pick);
            state.complete(self.platform, command);
        }
    }

    /// Corrupts the next I/O completion.
    pub fn corrupt_next_completion(&self, corruption: Corruption) {
        self.state().corrupt_next = Some(corruption);
    }

    /// Corrupts the next admin completion.
    pub fn corrupt_next_admin_completion(&self, corruption: Corruption) {
        self.state().corrupt_next_admin = Some(corruption);
    }

    /// Reads touching `lba` of namespace `namespace_id` fail with Unrecovered Read Error.
    pub fn add_media_error(&self, namespace_id: u32, lba: u64) {
        self.state().media_errors.push((namespace_id, lba));
    }

    /// What Writes put at (namespace, LBA), if any.
    pub fn written_block(&self, namespace_id: u32, lba: u64) -> Option<Vec<u8>> {
        self.state().written.get(&(namespace_id, lba)).cloned()
    }

    pub fn io_queue_ids(&self) -> Vec<u16> {
        self.state().submission_queues.keys().copied().filter(|q| *q != 0).collect()
    }

    pub fn io_queue_entries(&self, queue_id: u16) -> Option<u32> {
        self.state().submission_queues.get(&queue_id).map(|q| q.entries)
    }

    /// INTMS as the driver left it.
    pub fn interrupt_mask(&self) -> u32 {
        self.state().interrupt_mask
    }

    /// CSTS without the side effects of a register read (for assertions).
    pub fn csts_bits(&self) -> (bool, bool, u32) {
        let csts = self.state().csts;
        (
            csts & CSTS_RDY != 0,
            csts & CSTS_CFS != 0,
            LocalRegisterCopy::<u32, CSTS::Register>::new(csts).read(CSTS::SHST),
        )
    }
}

impl RegisterIo for SimController<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let mut state = self.state();
        state.statistics.register_reads += 1;
        if state.removed {
            return u32::MAX;
        }
        let cap = state.config.cap();
        match offset_bytes {
            offsets::CAP => cap as u32,
            0x04 => (cap >> 32) as u32,
            offsets::VS => state.config.version,
            offsets::INTMS | offsets::INTMC => state.interrupt_mask,
            offsets::CC => state.cc,
            offsets::CSTS => state.read_csts(),
            offsets::AQA => state.aqa,
            offsets::ASQ => state.asq as u32,
            0x2C => (state.asq >> 32) as u32,
            offsets::ACQ => state.acq as u32,
            0x34 => (state.acq >> 32) as u32,
            // NVMe 1.4 §3.1.24-25: what a doorbell read returns is undefined.
            offset if offset >= offsets::DOORBELLS => {
                state.violations.push(format!("read of doorbell register {offset:#x}"));
                0
            }
            _ => 0,
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let event = self.platform.log().push(PlatformEvent::MmioWrite { block: "nvme", offset_bytes, value });
        let mut state = self.state();
        if state.removed {
            return;
        }
        match offset_bytes {
            offsets::CC => state.write_cc(value, event),
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
            offset if offset >= offsets::DOORBELLS => state.doorbell(self.platform, offset, value, event),
            _ => state.violations.push(format!("write of {value:#x} to register {offset_bytes:#x}")),
        }
    }
}

/// Merges `(address, bytes)` pieces that follow each other into runs (PRP list entries read,
/// data segments written), so that each run is checked once.
fn contiguous_runs(pieces: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (address, length) in pieces {
        match runs.last_mut() {
            Some((start, bytes)) if *start + *bytes == address => *bytes += length,
            _ => runs.push((address, length)),
        }
    }
    runs
}

/// Checks how the host consumed the completion entry at `entry` (physical), posted at log
/// index `written_event` and released by the head doorbell at `doorbell_event`: phase read,
/// then a load barrier, then the other fields; a load barrier after its last read.
fn check_consumed(
    log: &EventLog,
    entry: ByteRange,
    written_event: usize,
    doorbell_event: usize,
) -> Result<(), String> {
    let phase = ByteRange::new(entry.start + 12, 4);
    let fields = ByteRange::new(entry.start, 12);
    let mut phase_read = false;
    let mut barrier_after_phase = false;
    let mut read_seen = false;
    let mut barrier_after_last_read = false;
    for event in log.between(written_event + 1, doorbell_event) {
        match event {
            PlatformEvent::CpuRead(read) if read.overlap(&entry).is_some() => {
                if read.overlap(&fields).is_some() && !barrier_after_phase {
                    return Err(String::from(
                        "entry fields read before a load barrier followed the phase read",
                    ));
                }
                phase_read |= read.overlap(&phase).is_some();
                read_seen = true;
                barrier_after_last_read = false;
            }
            PlatformEvent::Barrier(kind) if kind.orders_loads() => {
                barrier_after_phase |= phase_read;
                barrier_after_last_read |= read_seen;
            }
            _ => {}
        }
    }
    if !phase_read {
        return Err(String::from("released before the CPU read it"));
    }
    if !barrier_after_last_read {
        return Err(String::from("no load barrier between the entry's reads and the head doorbell"));
    }
    Ok(())
}

impl State {
    fn next_random(&mut self) -> u64 {
        // xorshift64* (Vigna 2016).
        let mut x = self.random;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.random = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn page_bytes(&self) -> u64 {
        1u64 << (12 + cc_field(self.cc, CC::MPS))
    }

    /// The physical address of a DMA access to `length` bytes at bus address `bus`, started by
    /// the MMIO write at log index `handover`, after checking the access against the log (see
    /// `EventLog::check_device_access`); `None` when the bus does not forward it (the caller
    /// reports that: the access fails).
    fn checked_physical(
        &mut self,
        platform: &SimPlatform,
        what: &str,
        bus: u64,
        length: u64,
        handover: usize,
        require_written: bool,
    ) -> Option<u64> {
        let physical = platform.physical_of_bus(bus, length as usize)?;
        self.check_access(platform, what, ByteRange::new(physical, length), handover, require_written);
        Some(physical)
    }

    /// Checks a DMA access to the physical `range` started by the MMIO write at log index
    /// `handover` (see `EventLog::check_device_access`).
    fn check_access(
        &mut self,
        platform: &SimPlatform,
        what: &str,
        range: ByteRange,
        handover: usize,
        require_written: bool,
    ) {
        let log = platform.log();
        if let Err(violation) = log.check_device_access(range, handover, log.len(), require_written) {
            self.violations.push(format!("{what}: {violation}"));
        }
    }

    fn write_cc(&mut self, value: u32, event: usize) {
        let was_enabled = self.cc & 1 != 0;
        let enable = value & 1 != 0;
        let old_shn = cc_field(self.cc, CC::SHN);
        self.cc = value;
        if !was_enabled && enable {
            self.enable(event);
        } else if was_enabled && !enable {
            self.statistics.resets += 1;
            self.submission_queues.clear();
            self.completion_queues.clear();
            self.outstanding.clear();
            self.in_flight.clear();
            self.csts = 0;
            self.interrupt_mask = 0;
        }
        let shn = cc_field(value, CC::SHN);
        if was_enabled && !enable {
            // A controller reset disables the host memory buffer (NVMe 1.4 §8.9).
            self.statistics.host_memory_buffer = None;
        }
        if enable && shn != 0 && old_shn == 0 && self.statistics.host_memory_buffer.take().is_some() {
            self.violations.push(String::from(
                "shutdown with the host memory buffer still in use (Set Features 0Dh EHM = 0 first)",
            ));
        }
        if enable && shn != 0 && old_shn == 0 {
            self.statistics.shutdowns += 1;
            self.statistics.io_queues_alive_at_shutdown = self
                .submission_queues
                .keys()
                .chain(self.completion_queues.keys())
                .filter(|q| **q != 0)
                .count();
            self.csts &= !(3 << 2);
            self.csts |= if self.config.fault == Some(Fault::NeverFinishesShutdown) {
                CSTS_SHST_OCCURRING
            } else {
                CSTS_SHST_COMPLETE
            };
        }
    }

    /// CC.EN 0 → 1 at log index `event`: checks the admin queue setup and creates queue 0.
    fn enable(&mut self, event: usize) {
        let page = self.page_bytes();
        let mps = cc_field(self.cc, CC::MPS) as u8;
        let mut problems = Vec::new();
        if !self.asq.is_multiple_of(page) || !self.acq.is_multiple_of(page) {
            problems.push(format!("admin queues at {:#x}/{:#x} not aligned to {page}", self.asq, self.acq));
        }
        let sq_entries = (self.aqa & 0xfff) + 1;
        let cq_entries = ((self.aqa >> 16) & 0xfff) + 1;
        if sq_entries < 2 || cq_entries < 2 {
            problems.push(format!("AQA {:#x} has a queue below 2 entries", self.aqa));
        }
        if cc_field(self.cc, CC::IOSQES) != 6 || cc_field(self.cc, CC::IOCQES) != 4 {
            problems.push(format!("CC {:#x} entry sizes are not 64/16", self.cc));
        }
        if mps < self.config.mpsmin || mps > self.config.mpsmax {
            problems.push(format!("CC.MPS {mps} outside CAP"));
        }
        if cc_field(self.cc, CC::CSS) != 0 {
            problems.push(format!("CC.CSS {}", cc_field(self.cc, CC::CSS)));
        }
        if !problems.is_empty() || self.config.fault == Some(Fault::FatalOnEnable) {
            self.violations.extend(problems);
            self.csts |= CSTS_CFS;
            return;
        }
        self.submission_queues.insert(
            0,
            SimSubmissionQueue { base: self.asq, entries: sq_entries, completion_queue: 0, head: 0, tail: 0 },
        );
        self.completion_queues.insert(0, SimCompletionQueue::new(self.acq, cq_entries, event));
        if self.config.fault != Some(Fault::NeverReady) {
            self.ready_countdown = self.config.ready_after_reads;
            if self.ready_countdown == 0 {
                self.csts |= CSTS_RDY;
            }
        }
    }

    fn read_csts(&mut self) -> u32 {
        if self.ready_countdown > 0 {
            self.ready_countdown -= 1;
            if self.ready_countdown == 0 && self.cc & 1 != 0 {
                self.csts |= CSTS_RDY;
            }
        }
        self.csts
    }

    fn doorbell(&mut self, platform: &SimPlatform, offset: usize, value: u32, event: usize) {
        let stride = 4usize << self.config.dstrd;
        let index = (offset - offsets::DOORBELLS) / stride;
        if !(offset - offsets::DOORBELLS).is_multiple_of(stride) {
            self.violations.push(format!("doorbell write at {offset:#x} between doorbells"));
            return;
        }
        let queue = (index / 2) as u16;
        if self.csts & CSTS_RDY == 0 {
            self.violations.push(format!("doorbell {offset:#x} written while not ready"));
            return;
        }
        if index.is_multiple_of(2) {
            self.statistics.sq_doorbell_writes += 1;
            self.submission_doorbell(platform, queue, value, event);
        } else {
            self.statistics.cq_doorbell_writes += 1;
            self.completion_doorbell(platform, queue, value, event);
        }
    }

    /// A new SQ tail: fetches every entry up to it (each must have been written, cleaned and
    /// ordered by a store barrier before this doorbell). The commands complete later.
    fn submission_doorbell(&mut self, platform: &SimPlatform, queue: u16, value: u32, event: usize) {
        let Some(sq) = self.submission_queues.get_mut(&queue) else {
            self.violations.push(format!("SQ {queue} tail doorbell {value} for a queue that does not exist"));
            return;
        };
        if value >= sq.entries {
            self.violations.push(format!("SQ {queue} tail {value} outside {} entries", sq.entries));
            return;
        }
        sq.tail = value;
        while let Some(entry) = self.fetch(platform, queue, event) {
            self.accept(queue, entry, event);
        }
    }

    /// Reads the entry at the SQ's head, if the head is behind the tail.
    fn fetch(&mut self, platform: &SimPlatform, queue: u16, event: usize) -> Option<SubmissionEntry> {
        let sq = self.submission_queues.get_mut(&queue)?;
        if sq.head == sq.tail {
            return None;
        }
        let slot = sq.head;
        let address = sq.base + u64::from(slot) * SUBMISSION_ENTRY_BYTES;
        sq.head = (sq.head + 1) % sq.entries;
        let what = format!("SQ {queue} entry {slot}");
        let physical = self.checked_physical(platform, &what, address, SUBMISSION_ENTRY_BYTES, event, true);
        let mut bytes = [0u8; SUBMISSION_ENTRY_BYTES as usize];
        if !physical.is_some_and(|physical| platform.device_read(physical, &mut bytes)) {
            self.violations.push(format!("SQ {queue} entry at {address:#x} unreachable"));
            self.csts |= CSTS_CFS;
            return None;
        }
        let mut entry = SubmissionEntry::default();
        for (index, word) in entry.dwords.iter_mut().enumerate() {
            *word = u32::from_le_bytes(bytes[4 * index..4 * index + 4].try_into().unwrap());
        }
        Some(entry)
    }

    /// Takes a fetched command in flight, due a few clock reads from now.
    fn accept(&mut self, queue: u16, entry: SubmissionEntry, event: usize) {
        let key = (queue, entry.command_id());
        let refused = if self.outstanding.contains(&key) {
            self.violations.push(format!(
                "command identifier {} reused on SQ {queue} while outstanding",
                entry.command_id()
            ));
            Some(Status::new(code_type::GENERIC, 0x03, true))
        } else {
            self.outstanding.insert(key);
            let on_queue = self.outstanding.iter().filter(|(q, _)| *q == queue).count();
            self.statistics.max_outstanding = self.statistics.max_outstanding.max(on_queue);
            None
        };
        let latency = 1 + self.next_random() % u64::from(self.config.completion_latency_max_ticks.max(1));
        self.fetch_count += 1;
        self.in_flight.push(InFlight {
            submission_queue: queue,
            entry,
            doorbell_event: event,
            fetched: self.fetch_count,
            due_tick: self.tick + latency,
            refused,
        });
    }

    /// One clock read: completes the commands whose time has come, earliest due first.
    fn advance(&mut self, platform: &SimPlatform) {
        self.tick += 1;
        loop {
            let hold_io = self.hold_io_completions;
            let hold_admin = self.config.fault == Some(Fault::AdminCommandsHang);
            let due = (0..self.in_flight.len())
                .filter(|index| {
                    let command = &self.in_flight[*index];
                    let held = if command.submission_queue == 0 { hold_admin } else { hold_io };
                    command.due_tick <= self.tick && !held
                })
                .min_by_key(|index| self.in_flight[*index].due_tick);
            let Some(index) = due else {
                return;
            };
            let command = self.in_flight.remove(index);
            self.complete(platform, command);
        }
    }

    /// Executes a command and posts its completion.
    fn complete(&mut self, platform: &SimPlatform, command: InFlight) {
        let queue = command.submission_queue;
        let Some(completion_queue) = self.submission_queues.get(&queue).map(|sq| sq.completion_queue) else {
            return;
        };
        if self
            .in_flight
            .iter()
            .any(|other| other.submission_queue == queue && other.fetched < command.fetched)
        {
            self.statistics.overtakes += 1;
        }
        let (status, command_specific) = match command.refused {
            Some(status) => (status, 0),
            None if queue == 0 => self.execute_admin(platform, &command.entry, command.doorbell_event),
            None => self.execute_io(platform, queue, &command.entry, command.doorbell_event),
        };
        let pending = Pending {
            submission_queue: queue,
            command_id: command.entry.command_id(),
            status,
            command_specific,
            sq_head_override: None,
            stale_phase: false,
        };
        if let Some(cq) = self.completion_queues.get_mut(&completion_queue) {
            cq.backlog.push_back(pending);
        }
        self.post(platform, completion_queue);
    }

    /// A new CQ head: the released entries must have been consumed in order (see
    /// [`check_consumed`]); their slots take new completions.
    fn completion_doorbell(&mut self, platform: &SimPlatform, queue: u16, value: u32, event: usize) {
        let Some(cq) = self.completion_queues.get_mut(&queue) else {
            self.violations.push(format!("CQ {queue} head doorbell {value} for a queue that does not exist"));
            return;
        };
        let posted = (cq.tail + cq.entries - cq.head) % cq.entries;
        let released = (value + cq.entries - cq.head) % cq.entries;
        if value >= cq.entries || released > posted {
            self.violations.push(format!(
                "CQ {queue} head {value} beyond the entries posted (head {}, tail {})",
                cq.head, cq.tail
            ));
            return;
        }
        cq.head = value;
        let finished: Vec<Posted> = cq.posted.drain(..released as usize).collect();
        for entry in finished {
            if let Err(violation) = check_consumed(platform.log(), entry.entry, entry.written_event, event) {
                self.violations.push(format!("CQ {queue} entry {}: {violation}", entry.slot));
            }
            self.outstanding.remove(&(entry.submission_queue, entry.command_id));
        }
        self.post(platform, queue);
    }

    /// The next completion to post on `queue`, with any corruption the test asked for.
    fn next_to_post(&mut self, queue: u16) -> Option<Pending> {
        let cq = self.completion_queues.get_mut(&queue)?;
        if (cq.tail + 1) % cq.entries == cq.head || cq.backlog.is_empty() {
            return None;
        }
        let corruption = if queue == 0 { self.corrupt_next_admin.take() } else { self.corrupt_next.take() };
        let mut pending = cq.backlog.pop_front().expect("not empty");
        let bogus = |submission_queue, command_id| Pending {
            submission_queue,
            command_id,
            status: Status::SUCCESS,
            command_specific: 0,
            sq_head_override: None,
            stale_phase: false,
        };
        match corruption {
            Some(Corruption::UnknownCommandId) => {
                cq.backlog.push_front(pending);
                pending = bogus(queue, 0xFFF0);
            }
            Some(Corruption::WrongSubmissionQueue) => {
                let real_queue = pending.submission_queue;
                cq.backlog.push_front(pending);
                pending = bogus(real_queue + 7, 0);
            }
            Some(Corruption::ImpossibleSqHead) => pending.sq_head_override = Some(0xFFFE),
            Some(Corruption::DuplicateCompletion) => cq.backlog.push_front(pending),
            Some(Corruption::StalePhase) => pending.stale_phase = true,
            Some(Corruption::ReservedStatusType) => pending.status = Status::new(5, 0x01, false),
            None => {}
        }
        Some(pending)
    }

    /// Moves backlog entries into the CQ while it has room.
    fn post(&mut self, platform: &SimPlatform, queue: u16) {
        while let Some(pending) = self.next_to_post(queue) {
            let sq_head = match pending.sq_head_override {
                Some(head) => head,
                None => self
                    .submission_queues
                    .get(&pending.submission_queue)
                    .map(|sq| sq.head as u16)
                    .unwrap_or(0),
            };
            let cq = self.completion_queues.get_mut(&queue).expect("checked by next_to_post");
            let entry = CompletionEntry::new(
                pending.command_specific,
                sq_head,
                pending.submission_queue,
                pending.command_id,
                cq.phase != pending.stale_phase,
                pending.status,
            );
            let mut bytes = [0u8; COMPLETION_ENTRY_BYTES as usize];
            for (index, word) in entry.dwords.iter().enumerate() {
                bytes[4 * index..4 * index + 4].copy_from_slice(&word.to_le_bytes());
            }
            let (slot, address, handover) =
                (cq.tail, cq.base + u64::from(cq.tail) * COMPLETION_ENTRY_BYTES, cq.handover_event);
            let what = format!("CQ {queue} entry {slot}");
            let physical =
                self.checked_physical(platform, &what, address, COMPLETION_ENTRY_BYTES, handover, false);
            let written_event = platform.log().len();
            let Some(physical) = physical.filter(|physical| platform.device_write(*physical, &bytes)) else {
                self.violations.push(format!("CQ {queue} entry at {address:#x} unreachable"));
                self.csts |= CSTS_CFS;
                return;
            };
            let cq = self.completion_queues.get_mut(&queue).expect("still there");
            cq.posted.push_back(Posted {
                submission_queue: pending.submission_queue,
                command_id: pending.command_id,
                slot,
                entry: ByteRange::new(physical, COMPLETION_ENTRY_BYTES),
                written_event,
            });
            cq.tail += 1;
            if cq.tail == cq.entries {
                cq.tail = 0;
                cq.phase = !cq.phase;
                self.statistics.cq_wraps += 1;
            }
        }
    }

    /// Writes `data` where the command's PRPs point, reading PRP lists as a controller does;
    /// `handover` is the log index of the doorbell that submitted the command.
    fn transfer(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        data: &[u8],
        handover: usize,
    ) -> Result<(), Status> {
        let mut copy = data.to_vec();
        self.move_data(platform, entry, DataDirection::ToHost(&mut copy), handover)
    }

    /// Moves a command's data through its PRPs: to host memory for a Read, from it for a Write.
    fn move_data(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        mut data: DataDirection<'_>,
        handover: usize,
    ) -> Result<(), Status> {
        let data_len = data.len();
        let page = self.page_bytes() as usize;
        // (bus address, physical address if the bus forwarded it) of every list entry read.
        let list_reads = RefCell::new(Vec::new());
        let segments = walk_prps(entry.prp1(), entry.prp2(), data_len, page, |address| {
            let read = platform.peek_bus_u64(address);
            list_reads.borrow_mut().push((address, read.map(|(physical, _)| physical)));
            read.map(|(_, value)| value)
        });
        let list_reads = list_reads.into_inner();
        self.statistics.list_reads += list_reads.len() as u64;
        if list_reads.iter().skip(1).any(|(address, _)| address.is_multiple_of(page as u64)) {
            self.statistics.chained_lists += 1;
        }
        let physical_entries =
            list_reads.iter().filter_map(|(_, physical)| physical.map(|physical| (physical, 8)));
        for (start, bytes) in contiguous_runs(physical_entries) {
            self.check_access(platform, "PRP list", ByteRange::new(start, bytes), handover, true);
            let mut copy = vec![0u8; bytes as usize];
            platform.device_read(start, &mut copy);
        }
        let segments = segments.map_err(|error| {
            self.violations.push(format!(
                "bad PRPs {:#x}/{:#x} for {} bytes: {error:?}",
                entry.prp1(),
                entry.prp2(),
                data_len
            ));
            Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true)
        })?;
        // Segments that follow each other on the bus carry data that follows each other too.
        let mut offset = 0;
        for (start, bytes) in
            contiguous_runs(segments.iter().map(|&(address, bytes)| (address, bytes as u64)))
        {
            let piece = offset..offset + bytes as usize;
            let from_host = matches!(data, DataDirection::FromHost(_));
            let physical = self.checked_physical(platform, "data", start, bytes, handover, from_host);
            let moved = physical.is_some_and(|physical| match &mut data {
                DataDirection::ToHost(data) => platform.device_write(physical, &data[piece]),
                DataDirection::FromHost(data) => platform.device_read(physical, &mut data[piece]),
            });
            if !moved {
                self.violations
                    .push(format!("data segment {start:#x}+{bytes:#x} unreachable (bus translation?)"));
                return Err(Status::new(code_type::GENERIC, 0x04, false));
            }
            offset += bytes as usize;
        }
        Ok(())
    }

    fn execute_admin(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        handover: usize,
    ) -> (Status, u32) {
        let opcode = entry.opcode();
        self.statistics.admin_commands.push(opcode);
        let invalid_field = Status::new(code_type::GENERIC, generic::INVALID_FIELD, true);
        if entry.psdt() != 0 || entry.fuse() != 0 {
            self.violations.push(format!("admin {opcode:#x} with PSDT/FUSE set"));
            return (invalid_field, 0);
        }
        match opcode {
            admin_opcode::IDENTIFY => self.identify(platform, entry, handover),
            admin_opcode::SET_FEATURES if entry.cdw(10) & 0xff == u32::from(feature::NUMBER_OF_QUEUES) => {
                self.set_number_of_queues(entry)
            }
            admin_opcode::SET_FEATURES if entry.cdw(10) & 0xff == u32::from(feature::HOST_MEMORY_BUFFER) => {
                self.set_host_memory_buffer(platform, entry, handover)
            }
            admin_opcode::CREATE_IO_COMPLETION_QUEUE => self.create_completion_queue(entry, handover),
            admin_opcode::CREATE_IO_SUBMISSION_QUEUE => self.create_submission_queue(entry),
            admin_opcode::DELETE_IO_SUBMISSION_QUEUE => self.delete_submission_queue(platform, entry),
            admin_opcode::DELETE_IO_COMPLETION_QUEUE => self.delete_completion_queue(entry),
            admin_opcode::ABORT => self.abort(platform, entry),
            _ => (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0),
        }
    }

    fn identify(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        handover: usize,
    ) -> (Status, u32) {
        let invalid_field = Status::new(code_type::GENERIC, generic::INVALID_FIELD, true);
        let data = match entry.cdw(10) & 0xff {
            value if value == u32::from(cns::CONTROLLER) => self.controller_data(),
            value if value == u32::from(cns::NAMESPACE) => {
                let id = entry.namespace_id();
                if id == 0 || id > self.config.namespace_count {
                    return (Status::new(code_type::GENERIC, generic::INVALID_NAMESPACE_OR_FORMAT, true), 0);
                }
                self.namespace_data(id)
            }
            value if value == u32::from(cns::ACTIVE_NAMESPACE_LIST) && self.config.supports_active_list => {
                let mut data = vec![0u8; 4096];
                let after = entry.namespace_id();
                let mut ids: Vec<u32> =
                    self.config.namespaces.iter().map(|n| n.id).filter(|id| *id > after).collect();
                ids.sort_unstable();
                for (index, id) in ids.iter().take(1024).enumerate() {
                    data[4 * index..4 * index + 4].copy_from_slice(&id.to_le_bytes());
                }
                data
            }
            _ => return (invalid_field, 0),
        };
        match self.transfer(platform, entry, &data, handover) {
            Ok(()) => (Status::SUCCESS, 0),
            Err(status) => (status, 0),
        }
    }

    /// Abort (NVMe 2.0 §5.1): DW0 bit 0 clear when the command was aborted; the aborted
    /// command completes with Command Abort Requested (00/07) before the Abort does.
    fn abort(&mut self, platform: &SimPlatform, entry: &SubmissionEntry) -> (Status, u32) {
        let queue = (entry.cdw(10) & 0xffff) as u16;
        let command_id = (entry.cdw(10) >> 16) as u16;
        self.statistics.aborts += 1;
        if !self.submission_queues.contains_key(&queue) {
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 1);
        }
        let found = self.in_flight.iter().position(|command| {
            command.submission_queue == queue && command.entry.command_id() == command_id
        });
        match found {
            Some(index) if self.honour_aborts && queue != 0 => {
                let mut command = self.in_flight.remove(index);
                command.refused = Some(Status::new(code_type::GENERIC, COMMAND_ABORT_REQUESTED, false));
                self.complete(platform, command);
                (Status::SUCCESS, 0)
            }
            _ => (Status::SUCCESS, 1),
        }
    }

    /// Set Features Host Memory Buffer (NVMe 1.4 §5.21.1.13).
    fn set_host_memory_buffer(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        handover: usize,
    ) -> (Status, u32) {
        let invalid_field = Status::new(code_type::GENERIC, generic::INVALID_FIELD, true);
        let (preferred, minimum, min_descriptor, max_descriptors) = self.config.host_memory;
        if preferred == 0 {
            self.violations.push(String::from("Set Features 0Dh to a controller without HMPRE"));
            return (invalid_field, 0);
        }
        if entry.cdw(11) & 1 == 0 {
            if self.statistics.host_memory_buffer.take().is_some() {
                self.statistics.host_memory_buffers_returned += 1;
            }
            return (Status::SUCCESS, 0);
        }
        if self.statistics.host_memory_buffer.is_some() {
            return (Status::new(code_type::GENERIC, generic::COMMAND_SEQUENCE_ERROR, true), 0);
        }
        if self.config.refuses_host_memory_buffer {
            return (invalid_field, 0);
        }
        let page = self.page_bytes();
        let list = u64::from(entry.cdw(14)) << 32 | u64::from(entry.cdw(13));
        let (size_pages, count) = (entry.cdw(12), entry.cdw(15));
        let mut problems = Vec::new();
        if list & 0xf != 0 {
            problems.push(format!("descriptor list {list:#x} not 16-byte aligned"));
        }
        if count == 0 || (max_descriptors != 0 && count > u32::from(max_descriptors)) {
            problems.push(format!("{count} descriptors (HMMAXD {max_descriptors})"));
        }
        if u64::from(size_pages) * page < u64::from(minimum) * 4096 {
            problems.push(format!("HSIZE {size_pages} pages below HMMIN {minimum} × 4 KiB"));
        }
        let mut descriptors = Vec::new();
        let list_bytes = count as usize * 16;
        match self.checked_physical(
            platform,
            "host memory descriptor list",
            list,
            list_bytes as u64,
            handover,
            true,
        ) {
            Some(physical) if problems.is_empty() => {
                let mut raw = vec![0u8; list_bytes];
                platform.device_read(physical, &mut raw);
                for piece in raw.chunks(16) {
                    let address = u64::from_le_bytes(piece[0..8].try_into().expect("8 bytes"));
                    let pages = u32::from_le_bytes(piece[8..12].try_into().expect("4 bytes"));
                    descriptors.push((address, pages));
                }
            }
            Some(_) => {}
            None => problems.push(format!("descriptor list {list:#x} unreachable")),
        }
        let mut total = 0u64;
        for &(address, pages) in &descriptors {
            total += u64::from(pages);
            let bytes = u64::from(pages) * page;
            if address % page != 0 || pages == 0 || bytes < u64::from(min_descriptor) * 4096 {
                problems.push(format!(
                    "descriptor {address:#x} × {pages} pages: misaligned, empty or below HMMINDS"
                ));
            } else if platform.physical_of_bus(address, bytes as usize).is_none() {
                problems.push(format!("descriptor {address:#x} × {pages} pages unreachable"));
            }
        }
        if problems.is_empty() && total != u64::from(size_pages) {
            problems.push(format!("descriptors add up to {total} pages, HSIZE says {size_pages}"));
        }
        if !problems.is_empty() {
            self.violations.extend(problems.into_iter().map(|p| format!("host memory buffer: {p}")));
            return (invalid_field, 0);
        }
        self.statistics.host_memory_buffer = Some(descriptors);
        (Status::SUCCESS, 0)
    }

    fn set_number_of_queues(&mut self, entry: &SubmissionEntry) -> (Status, u32) {
        if self.completion_queues.keys().any(|q| *q != 0) {
            return (Status::new(code_type::GENERIC, generic::COMMAND_SEQUENCE_ERROR, true), 0);
        }
        let submission = entry.cdw(11) & 0xffff;
        let completion = entry.cdw(11) >> 16;
        if submission == 0xffff || completion == 0xffff {
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 0);
        }
        let most = u32::from(self.config.max_io_queue_pairs);
        let granted_sq = (submission + 1).min(most) - 1;
        let granted_cq = (completion + 1).min(most) - 1;
        (Status::SUCCESS, granted_cq << 16 | granted_sq)
    }

    /// Checks a queue identifier and size of a Create command.
    fn check_new_queue(&self, queue: u16, entries: u32, exists: bool) -> Option<Status> {
        let specific = |code| Status::new(code_type::COMMAND_SPECIFIC, code, true);
        if queue == 0 || queue > self.config.max_io_queue_pairs || exists {
            return Some(specific(command_specific::INVALID_QUEUE_IDENTIFIER));
        }
        if entries < 2 || entries > u32::from(self.config.mqes) + 1 {
            return Some(specific(command_specific::INVALID_QUEUE_SIZE));
        }
        None
    }

    fn create_completion_queue(&mut self, entry: &SubmissionEntry, handover: usize) -> (Status, u32) {
        let queue = (entry.cdw(10) & 0xffff) as u16;
        let entries = (entry.cdw(10) >> 16) + 1;
        let flags = entry.cdw(11);
        if let Some(status) =
            self.check_new_queue(queue, entries, self.completion_queues.contains_key(&queue))
        {
            return (status, 0);
        }
        if flags & 1 == 0 {
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 0);
        }
        if flags & 2 != 0 {
            self.violations.push(format!("CQ {queue} created with interrupts enabled"));
        }
        if flags >> 16 != 0 {
            return (
                Status::new(code_type::COMMAND_SPECIFIC, command_specific::INVALID_INTERRUPT_VECTOR, true),
                0,
            );
        }
        if !entry.prp1().is_multiple_of(self.page_bytes()) {
            return (Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true), 0);
        }
        self.completion_queues.insert(queue, SimCompletionQueue::new(entry.prp1(), entries, handover));
        (Status::SUCCESS, 0)
    }

    fn create_submission_queue(&mut self, entry: &SubmissionEntry) -> (Status, u32) {
        let queue = (entry.cdw(10) & 0xffff) as u16;
        let entries = (entry.cdw(10) >> 16) + 1;
        let completion_queue = (entry.cdw(11) >> 16) as u16;
        if entry.cdw(11) & 1 == 0 {
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 0);
        }
        if completion_queue == 0 || !self.completion_queues.contains_key(&completion_queue) {
            return (Status::new(code_type::COMMAND_SPECIFIC, 0x00, true), 0);
        }
        if let Some(status) =
            self.check_new_queue(queue, entries, self.submission_queues.contains_key(&queue))
        {
            return (status, 0);
        }
        if !entry.prp1().is_multiple_of(self.page_bytes()) {
            return (Status::new(code_type::GENERIC, generic::INVALID_PRP_OFFSET, true), 0);
        }
        self.submission_queues.insert(
            queue,
            SimSubmissionQueue { base: entry.prp1(), entries, completion_queue, head: 0, tail: 0 },
        );
        self.statistics.io_queues_created.push(queue);
        (Status::SUCCESS, 0)
    }

    /// Deletes an I/O SQ; its commands still in flight complete as aborted (NVMe 1.4 §5.6).
    fn delete_submission_queue(&mut self, platform: &SimPlatform, entry: &SubmissionEntry) -> (Status, u32) {
        let queue = (entry.cdw(10) & 0xffff) as u16;
        let Some(sq) = self.submission_queues.get(&queue).filter(|_| queue != 0) else {
            return (
                Status::new(code_type::COMMAND_SPECIFIC, command_specific::INVALID_QUEUE_IDENTIFIER, true),
                0,
            );
        };
        let completion_queue = sq.completion_queue;
        let (aborted, running): (Vec<InFlight>, Vec<InFlight>) = core::mem::take(&mut self.in_flight)
            .into_iter()
            .partition(|command| command.submission_queue == queue);
        self.in_flight = running;
        for command in aborted {
            if let Some(cq) = self.completion_queues.get_mut(&completion_queue) {
                cq.backlog.push_back(Pending {
                    submission_queue: queue,
                    command_id: command.entry.command_id(),
                    status: Status::new(code_type::GENERIC, ABORTED_SQ_DELETION, false),
                    command_specific: 0,
                    sq_head_override: None,
                    stale_phase: false,
                });
            }
        }
        self.post(platform, completion_queue);
        self.submission_queues.remove(&queue);
        self.statistics.io_queues_deleted.push(queue);
        (Status::SUCCESS, 0)
    }

    fn delete_completion_queue(&mut self, entry: &SubmissionEntry) -> (Status, u32) {
        let queue = (entry.cdw(10) & 0xffff) as u16;
        let specific = |code| Status::new(code_type::COMMAND_SPECIFIC, code, true);
        if queue == 0 || !self.completion_queues.contains_key(&queue) {
            return (specific(command_specific::INVALID_QUEUE_IDENTIFIER), 0);
        }
        if self.submission_queues.values().any(|sq| sq.completion_queue == queue) {
            return (specific(command_specific::INVALID_QUEUE_DELETION), 0);
        }
        self.completion_queues.remove(&queue);
        (Status::SUCCESS, 0)
    }

    /// A Read (the only I/O command the driver may send).
    fn execute_io(
        &mut self,
        platform: &SimPlatform,
        queue: u16,
        entry: &SubmissionEntry,
        handover: usize,
    ) -> (Status, u32) {
        let opcode = entry.opcode();
        if opcode == io_opcode::WRITE && !self.config.accept_writes {
            self.violations.push(String::from("the driver sent a Write command"));
            return (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0);
        }
        if ![io_opcode::READ, io_opcode::WRITE, io_opcode::FLUSH].contains(&opcode) {
            return (Status::new(code_type::GENERIC, generic::INVALID_OPCODE, true), 0);
        }
        let Some(namespace) = self.config.namespaces.iter().find(|n| n.id == entry.namespace_id()).cloned()
        else {
            return (Status::new(code_type::GENERIC, generic::INVALID_NAMESPACE_OR_FORMAT, true), 0);
        };
        if opcode == io_opcode::FLUSH {
            if entry.prp1() != 0 || entry.dwords[10..16].iter().any(|&word| word != 0) {
                self.violations.push(String::from("a Flush carried PRPs or command fields"));
            }
            self.statistics.flushes += 1;
            return (Status::SUCCESS, 0);
        }
        let (lba, blocks) = entry.read_range();
        if lba + u64::from(blocks) > namespace.blocks {
            self.violations.push(format!(
                "read of {blocks} blocks at {lba} beyond {} blocks reached the controller",
                namespace.blocks
            ));
            return (Status::new(code_type::GENERIC, generic::LBA_OUT_OF_RANGE, true), 0);
        }
        let bytes = (blocks as usize) << namespace.lba_shift;
        let max_bytes = (self.page_bytes() as usize) << self.config.mdts;
        if self.config.mdts != 0 && bytes > max_bytes {
            self.violations.push(format!("read of {bytes} bytes exceeds MDTS ({max_bytes})"));
            return (Status::new(code_type::GENERIC, generic::INVALID_FIELD, true), 0);
        }
        if opcode == io_opcode::WRITE {
            return self.execute_write(platform, entry, &namespace, (lba, blocks), handover);
        }
        self.statistics.reads += 1;
        self.statistics.read_ranges.push((lba, blocks));
        *self.statistics.reads_per_queue.entry(queue).or_default() += 1;
        self.statistics.read_bytes_max = self.statistics.read_bytes_max.max(bytes);
        let data = self.disk_contents(&namespace, lba, blocks);
        if let Err(status) = self.transfer(platform, entry, &data, handover) {
            return (status, 0);
        }
        let hit = self
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

    /// A Write (only with `accept_writes`): the data is fetched from the PRPs and kept.
    fn execute_write(
        &mut self,
        platform: &SimPlatform,
        entry: &SubmissionEntry,
        namespace: &SimNamespace,
        (lba, blocks): (u64, u32),
        handover: usize,
    ) -> (Status, u32) {
        let block_bytes = 1usize << namespace.lba_shift;
        let mut data = vec![0u8; blocks as usize * block_bytes];
        if let Err(status) = self.move_data(platform, entry, DataDirection::FromHost(&mut data), handover) {
            return (status, 0);
        }
        self.statistics.write_ranges.push((lba, blocks));
        for (index, block) in data.chunks(block_bytes).enumerate() {
            self.written.insert((namespace.id, lba + index as u64), block.to_vec());
        }
        (Status::SUCCESS, 0)
    }

    /// The pattern of `blocks` blocks from `lba` (or what was written there), with the
    /// corruptions the test asked for.
    fn disk_contents(&self, namespace: &SimNamespace, lba: u64, blocks: u32) -> Vec<u8> {
        let bytes = (blocks as usize) << namespace.lba_shift;
        let mut data = pattern_bytes(lba << namespace.lba_shift, bytes);
        let block_bytes = 1usize << namespace.lba_shift;
        for (index, block) in data.chunks_mut(block_bytes).enumerate() {
            if let Some(written) = self.written.get(&(namespace.id, lba + index as u64)) {
                block.copy_from_slice(written);
            }
        }
        data
    }

    fn controller_data(&self) -> Vec<u8> {
        let config = &self.config;
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
        let (preferred, minimum, min_descriptor, max_descriptors) = config.host_memory;
        data[272..276].copy_from_slice(&preferred.to_le_bytes());
        data[276..280].copy_from_slice(&minimum.to_le_bytes());
        data[332..336].copy_from_slice(&min_descriptor.to_le_bytes());
        data[336..338].copy_from_slice(&max_descriptors.to_le_bytes());
        data[512] = 0x66;
        data[513] = 0x44;
        data[516..520].copy_from_slice(&config.namespace_count.to_le_bytes());
        data[525] = 1;
        data
    }

    fn namespace_data(&self, id: u32) -> Vec<u8> {
        let mut data = vec![0u8; 4096];
        let Some(namespace) = self.config.namespaces.iter().find(|n| n.id == id) else {
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

/// Which way a command's data goes.
enum DataDirection<'d> {
    /// A Read: the controller writes host memory.
    ToHost(&'d mut [u8]),
    /// A Write: the controller reads host memory (which the driver must have written back).
    FromHost(&'d mut [u8]),
}

impl DataDirection<'_> {
    fn len(&self) -> usize {
        match self {
            DataDirection::ToHost(data) | DataDirection::FromHost(data) => data.len(),
        }
    }
}

impl SimCompletionQueue {
    fn new(base: u64, entries: u32, handover_event: usize) -> Self {
        SimCompletionQueue {
            base,
            entries,
            tail: 0,
            head: 0,
            phase: true,
            backlog: VecDeque::new(),
            posted: VecDeque::new(),
            handover_event,
        }
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

#[cfg(test)]
mod tests {
    use super::super::regs;
    use super::*;
    use blockdev::Clock;
    use hal::barrier;
    use hal::dma::DmaRegion;
    use hal::platform::Platform;

    /// A controller enabled by hand, with an admin queue pair and an identify buffer.
    struct Bench<'a> {
        platform: &'a SimPlatform,
        sim: SimController<'a>,
        submission: DmaRegion<'a>,
        completion: DmaRegion<'a>,
        identify: DmaRegion<'a>,
    }

    fn region(platform: &SimPlatform, bytes: usize) -> DmaRegion<'_> {
        let region = DmaRegion::allocate(platform, bytes, 4096).unwrap();
        platform.clean_for_device(&region.buffer());
        region
    }

    fn bus(region: &DmaRegion) -> u64 {
        region.physical_address() + BUS_OFFSET
    }

    fn enabled(platform: &SimPlatform) -> Bench<'_> {
        let sim = SimController::new(platform, SimConfig::default());
        let (submission, completion, identify) =
            (region(platform, 4096), region(platform, 4096), region(platform, 4096));
        sim.write32(offsets::AQA, regs::admin_queue_attributes(4, 4));
        sim.write64(offsets::ASQ, bus(&submission));
        sim.write64(offsets::ACQ, bus(&completion));
        barrier::store_before_doorbell();
        sim.write32(offsets::CC, regs::enable_configuration(0));
        assert!(sim.csts_bits().0, "ready");
        Bench { platform, sim, submission, completion, identify }
    }

    impl Bench<'_> {
        /// Writes an Identify Controller into SQ slot 0 and cleans it (no barrier yet).
        fn write_identify(&self) {
            let mut entry = SubmissionEntry::identify(cns::CONTROLLER, 0, bus(&self.identify));
            entry.set_command_id(5);
            self.submission.write_words(0, &entry.dwords);
            self.platform.clean_for_device(&self.submission.slice(0, 64));
        }

        fn ring_submission(&self) {
            self.sim.write32(regs::submission_doorbell(0, 4), 1);
        }

        fn run_until_posted(&self) {
            for _ in 0..10 {
                self.platform.now_ticks();
            }
            assert_eq!(self.sim.statistics().admin_commands, [admin_opcode::IDENTIFY]);
        }

        fn release_completion(&self) {
            self.sim.write32(regs::completion_doorbell(0, 4), 1);
        }

        fn violations_containing(&self, text: &str) -> usize {
            self.sim.violations().iter().filter(|violation| violation.contains(text)).count()
        }
    }

    #[test]
    fn a_well_ordered_admin_command_passes() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        barrier::store_before_doorbell();
        bench.ring_submission();
        let mut out = [0u32; 4];
        bench.completion.read_words(0, &mut out);
        assert_eq!(out, [0; 4], "nothing posted inside the doorbell write");
        bench.run_until_posted();
        platform.invalidate_for_cpu(&bench.completion.slice(0, 16));
        assert_eq!(bench.completion.read_u32(12) & 1 << 16, 1 << 16, "phase 1");
        barrier::load_after_completion();
        bench.completion.read_words(0, &mut out[..3]);
        barrier::load_after_completion();
        bench.release_completion();
        bench.sim.assert_no_violations();
    }

    #[test]
    fn a_doorbell_not_ordered_after_the_entry_is_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        bench.ring_submission();
        assert_eq!(
            bench.violations_containing("SQ 0 entry 0: device access"),
            1,
            "{:?}",
            bench.sim.violations()
        );
        assert_eq!(bench.violations_containing("no store barrier"), 1);
    }

    #[test]
    fn an_entry_written_after_its_clean_is_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        bench.submission.write_words(32, &[0]);
        barrier::store_before_doorbell();
        bench.ring_submission();
        assert_eq!(bench.violations_containing("not cleaned before the last store barrier"), 1);
    }

    #[test]
    fn a_data_buffer_written_by_the_cpu_and_not_cleaned_is_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.identify.write_words(0, &[0xdead_beef]);
        bench.write_identify();
        barrier::store_before_doorbell();
        bench.ring_submission();
        bench.run_until_posted();
        assert_eq!(bench.violations_containing("data: device access"), 1, "{:?}", bench.sim.violations());
    }

    #[test]
    fn completion_fields_read_before_the_load_barrier_are_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        barrier::store_before_doorbell();
        bench.ring_submission();
        bench.run_until_posted();
        platform.invalidate_for_cpu(&bench.completion.slice(0, 16));
        let mut entry = [0u32; 4];
        bench.completion.read_words(0, &mut entry);
        barrier::load_after_completion();
        bench.release_completion();
        assert_eq!(bench.violations_containing("fields read before a load barrier"), 1);
    }

    #[test]
    fn a_head_doorbell_not_ordered_after_the_reads_is_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        barrier::store_before_doorbell();
        bench.ring_submission();
        bench.run_until_posted();
        platform.invalidate_for_cpu(&bench.completion.slice(0, 16));
        bench.completion.read_u32(12);
        barrier::load_after_completion();
        bench.completion.read_words(0, &mut [0u32; 3]);
        bench.release_completion();
        assert_eq!(bench.violations_containing("no load barrier between the entry's reads"), 1);
    }

    #[test]
    fn a_completion_released_unread_or_read_stale_is_flagged() {
        let platform = SimPlatform::for_nvme(1 << 20);
        let bench = enabled(&platform);
        bench.write_identify();
        barrier::store_before_doorbell();
        bench.ring_submission();
        bench.run_until_posted();
        barrier::load_after_completion();
        bench.release_completion();
        assert_eq!(bench.violations_containing("released before the CPU read it"), 1);
        let mut data = [0u8; 8];
        bench.identify.read_bytes(0, &mut data);
        assert_eq!(bench.violations_containing("that no invalidate followed"), 1, "identify data read stale");
    }
}
