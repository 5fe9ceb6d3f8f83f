//! One polled NVMe I/O queue pair as a block device (NVMe Base Specification 1.4 §4.1 queues,
//! §4.3 PRPs, §4.6 completion entries, §6.9 Read; docs/nvme-and-fio.md §1.7-1.8 and SPDK's qpair
//! design in §2.1): requests are split at the command limit (MDTS) into Read commands with
//! precomputed per-command PRP list pages, written to the SQ at `kick()` with one doorbell per
//! batch, and completed by polling the phase tag; the SQ head comes from each completion.
//!
//! In-flight accounting: the pair accepts up to `entries - 1` requests (`max_in_flight`), each
//! of any size up to `max_request_blocks`. A request split at MDTS needs several commands; the
//! pieces that do not fit in the SQ (or find no free command identifier) wait inside the pair
//! and are issued, in request order, as completions free slots, so `max_in_flight` never promises
//! more than the pair can keep.
#![forbid(unsafe_code)]

use super::admin::SharedAdmin;
use super::command::{io_opcode, CompletionEntry, IoEntry};
use super::events::{Event, EventSink};
use super::prp;
use super::ring::{CompletionRing, ImpossibleHead, QueueMemory, SubmissionRing};
use super::status::Status;
use alloc::collections::VecDeque;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::{
    check_request, BlockDevice, CommandDetail, Completion, DmaBuffer, Geometry, IoError, IoErrorKind,
    Operation, Request, SubmitError,
};
use core::cell::Cell;
use hal::dma::DmaAllocation;
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Platform};

/// The largest request the block interface accepts; the pair splits it into commands.
pub const MAX_REQUEST_BYTES: u64 = 16 << 20;
/// Error reports per queue pair and run (between two [`BlockDevice::take_unreported_failures`])
/// before further errors are only counted.
pub const MAX_REPORTS_PER_RUN: u32 = 4;
/// Distinct error statuses counted per queue pair.
pub const STATUS_KINDS_COUNTED: usize = 16;

/// Everything a queue pair needs, prepared by `Controller::create_io_queue_pair`.
pub struct QueuePairSetup<'p> {
    pub name: String,
    pub queue_id: u16,
    pub namespace_id: u32,
    pub block_bytes: u32,
    pub block_count: u64,
    /// The most blocks one Read command carries (MDTS, capped by the driver).
    pub max_command_blocks: u32,
    /// CC.MPS page size: PRP entries and list pages use it.
    pub page_bytes: usize,
    /// The SQ and the CQ, `queue.entries` each.
    pub queue: QueueMemory<'p>,
    /// `entries - 1` groups of `list_pages_per_command` pages, one group per command identifier.
    pub lists: Option<DmaAllocation<'p>>,
    pub list_pages_per_command: usize,
    pub submission_doorbell: usize,
    pub completion_doorbell: usize,
    pub dma: BusTranslation,
    /// How long a command may take before it is aborted (`nvme.timeout-ms=`).
    pub command_timeout_us: u64,
}

/// Counters of one queue pair (SPDK's perf counts doorbell writes the same way:
/// docs/nvme-and-fio.md §1.8).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStatistics {
    pub requests_submitted: u64,
    pub requests_completed: u64,
    pub requests_failed: u64,
    /// Requests that needed more than one command.
    pub requests_split: u64,
    pub commands_submitted: u64,
    pub commands_completed: u64,
    pub sq_doorbell_writes: u64,
    pub cq_doorbell_writes: u64,
    /// Commands that completed with an error status.
    pub command_errors: u64,
    /// Completions that could not be trusted (unknown CID, impossible SQ head, wrong SQ).
    pub protocol_errors: u64,
    /// Commands that took longer than the command timeout.
    pub timeouts: u64,
    /// Abort commands sent for them.
    pub aborts_sent: u64,
    /// Controller resets this pair went through (its own recoveries and its neighbours').
    pub resets_seen: u64,
    /// The most commands one pair had in flight at once.
    pub max_commands_in_flight: u32,
    /// The most requests one pair had in flight at once.
    pub max_requests_in_flight: u32,
    /// Error statuses seen and how often, first seen first.
    pub errors_by_status: Vec<(Status, u64)>,
}

impl QueueStatistics {
    /// Counts `times` more errors with `status` (a new kind only while fewer than
    /// [`STATUS_KINDS_COUNTED`] are listed).
    fn count_status(&mut self, status: Status, times: u64) {
        if let Some(entry) = self.errors_by_status.iter_mut().find(|(s, _)| *s == status) {
            entry.1 += times;
        } else if self.errors_by_status.len() < STATUS_KINDS_COUNTED {
            self.errors_by_status.push((status, times));
        }
    }

    /// Adds another pair's counters (for a namespace spread over several pairs). Maxima stay
    /// the largest any one pair reached: pairs peak at different moments, so their sum would
    /// claim more in flight than there ever was.
    pub fn add(&mut self, other: &QueueStatistics) {
        self.requests_submitted += other.requests_submitted;
        self.requests_completed += other.requests_completed;
        self.requests_failed += other.requests_failed;
        self.requests_split += other.requests_split;
        self.commands_submitted += other.commands_submitted;
        self.commands_completed += other.commands_completed;
        self.sq_doorbell_writes += other.sq_doorbell_writes;
        self.cq_doorbell_writes += other.cq_doorbell_writes;
        self.command_errors += other.command_errors;
        self.protocol_errors += other.protocol_errors;
        self.timeouts += other.timeouts;
        self.aborts_sent += other.aborts_sent;
        self.resets_seen += other.resets_seen;
        self.max_commands_in_flight = self.max_commands_in_flight.max(other.max_commands_in_flight);
        self.max_requests_in_flight = self.max_requests_in_flight.max(other.max_requests_in_flight);
        for (status, count) in &other.errors_by_status {
            self.count_status(*status, *count);
        }
    }
}

/// What a command identifier stands for while its command is in flight. A request that needs one
/// command (any 4 KiB read) lives in this record alone, from `submit` to its completion: its
/// entry goes into the SQ at once when nothing waits before it, and its completion finishes it
/// from here, with no request slot and no trip through the waiting queue. Pieces of a split
/// request (and requests that had to wait) name their [`RequestSlot`] instead.
#[derive(Clone, Copy, Debug)]
struct CommandSlot {
    in_use: bool,
    /// It outlived the command timeout: its request has failed, an Abort was sent, and its
    /// completion, if one comes, ends it without being taken for anything else.
    timed_out: bool,
    /// The request slot this command is a piece of, or [`OWN_REQUEST`].
    request: u32,
    /// For [`OWN_REQUEST`]: the request's tag, operation and data (as many bytes as it moves).
    tag: u32,
    operation: Operation,
    data: DmaBuffer,
    /// The push sequence number of its SQ entry.
    sq_sequence: u64,
    lba: u64,
    block_count: u32,
    /// When its doorbell was rung (the counter of the platform's clock).
    issued_at_ticks: u64,
}

/// [`CommandSlot::request`] of a command that is a whole request by itself.
const OWN_REQUEST: u32 = u32::MAX;

const IDLE_COMMAND: CommandSlot = CommandSlot {
    in_use: false,
    timed_out: false,
    request: OWN_REQUEST,
    tag: 0,
    operation: Operation::Read,
    data: DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 0 },
    sq_sequence: 0,
    lba: 0,
    block_count: 0,
    issued_at_ticks: 0,
};

/// A request that needs more than one command, or that found no room to go straight into the
/// SQ at `submit`: its pieces are issued from the waiting queue.
#[derive(Clone, Copy, Debug)]
struct RequestSlot {
    tag: u32,
    operation: Operation,
    lba: u64,
    block_count: u32,
    buffer: DmaBuffer,
    data_bus: u64,
    pieces_total: u32,
    pieces_issued: u32,
    pieces_done: u32,
    error: Option<IoError>,
}

const IDLE_REQUEST: RequestSlot = RequestSlot {
    tag: 0,
    operation: Operation::Read,
    lba: 0,
    block_count: 0,
    buffer: DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 0 },
    data_bus: 0,
    pieces_total: 0,
    pieces_issued: 0,
    pieces_done: 0,
    error: None,
};

mod recovery;

/// A polled I/O SQ/CQ pair bound to one namespace.
pub struct IoQueuePair<'p, R: RegisterIo, P: Platform> {
    setup: QueuePairSetup<'p>,
    registers: R,
    platform: &'p P,
    events: &'p dyn EventSink,
    geometry: Geometry,
    submission_ring: SubmissionRing<'p>,
    completion_ring: CompletionRing<'p>,
    commands: Vec<CommandSlot>,
    free_commands: Vec<u16>,
    /// The command identifiers of the entries written since the last SQ doorbell, in SQ order:
    /// the doorbell stamps them.
    unnotified_commands: Vec<u16>,
    /// Requests in flight that live in their command's record ([`OWN_REQUEST`]).
    own_requests_in_flight: u32,
    requests: Vec<RequestSlot>,
    free_requests: Vec<u32>,
    /// Requests with pieces not yet in the SQ, oldest first; the last `unreleased` were
    /// submitted after the latest `kick()` and may not start yet.
    waiting: VecDeque<u32>,
    unreleased: usize,
    /// Requests that finished without a completion entry (a piece could not be built).
    finished_early: VecDeque<u32>,
    lists_bus: u64,
    statistics: QueueStatistics,
    reports_made: u32,
    /// Reports left out since the limit was reached.
    reports_left_out: u64,
    /// The controller's admin queue, for Abort and controller reset (none in some tests).
    admin: Option<SharedAdmin<'p, R, P>>,
    /// The admin channel's reset generation this pair's rings belong to, and the channel's
    /// counter (without an admin channel, a counter of its own that never moves).
    generation: u32,
    reset_generation: Rc<Cell<u32>>,
    timeout_ticks: u64,
    next_timeout_check_ticks: u64,
    /// The device is gone or could not be recovered: nothing more is sent.
    unusable: bool,
}

impl<'p, R: RegisterIo, P: Platform> IoQueuePair<'p, R, P> {
    pub fn new(
        setup: QueuePairSetup<'p>,
        registers: R,
        platform: &'p P,
        events: &'p dyn EventSink,
        admin: Option<SharedAdmin<'p, R, P>>,
    ) -> Self {
        let slots = setup.queue.entries - 1;
        let geometry = Geometry {
            logical_block_bytes: setup.block_bytes,
            block_count: setup.block_count,
            max_request_blocks: (MAX_REQUEST_BYTES / u64::from(setup.block_bytes)).min(u64::from(u32::MAX))
                as u32,
            max_in_flight: slots,
        };
        let lists_bus = setup.lists.map_or(0, |lists| lists.bus_address);
        IoQueuePair {
            registers,
            platform,
            events,
            geometry,
            submission_ring: SubmissionRing::new(
                setup.queue.submission.region,
                setup.queue.entries,
                setup.submission_doorbell,
            ),
            completion_ring: CompletionRing::new(
                setup.queue.completion.region,
                setup.queue.entries,
                setup.completion_doorbell,
            ),
            commands: alloc::vec![IDLE_COMMAND; slots as usize],
            free_commands: (0..slots as u16).rev().collect(),
            unnotified_commands: alloc::vec![0; setup.queue.entries as usize],
            own_requests_in_flight: 0,
            requests: alloc::vec![IDLE_REQUEST; slots as usize],
            free_requests: (0..slots).rev().collect(),
            waiting: VecDeque::with_capacity(slots as usize),
            unreleased: 0,
            finished_early: VecDeque::new(),
            lists_bus,
            statistics: QueueStatistics::default(),
            reports_made: 0,
            reports_left_out: 0,
            generation: admin.as_ref().map_or(0, |admin| admin.borrow().generation()),
            reset_generation: admin
                .as_ref()
                .map_or_else(|| Rc::new(Cell::new(0)), |admin| admin.borrow().generation_counter()),
            admin,
            timeout_ticks: platform.ns_to_ticks(setup.command_timeout_us.saturating_mul(1000)).max(1),
            next_timeout_check_ticks: 0,
            unusable: false,
            setup,
        }
    }

    pub fn queue_id(&self) -> u16 {
        self.setup.queue_id
    }

    pub fn namespace_id(&self) -> u32 {
        self.setup.namespace_id
    }

    /// SQ and CQ entries.
    pub fn entries(&self) -> u32 {
        self.setup.queue.entries
    }

    pub fn max_command_blocks(&self) -> u32 {
        self.setup.max_command_blocks
    }

    pub fn requests_in_flight(&self) -> u32 {
        self.geometry.max_in_flight - self.free_requests.len() as u32 + self.own_requests_in_flight
    }

    pub fn commands_in_flight(&self) -> u32 {
        self.geometry.max_in_flight - self.free_commands.len() as u32
    }

    pub fn statistics(&self) -> &QueueStatistics {
        &self.statistics
    }

    /// Reports `event` unless this run's reports are used up; then it is only counted.
    fn report(&mut self, event: Event) {
        if self.reports_made < MAX_REPORTS_PER_RUN {
            self.events.report(&self.setup.name, &event);
            self.reports_made += 1;
        } else {
            self.reports_left_out += 1;
        }
    }

    /// Reports what followed a described failure (an Abort's answer, a late completion): shown
    /// while failures are being described, never counted as one.
    fn report_follow_up(&mut self, event: Event) {
        if self.reports_made <= MAX_REPORTS_PER_RUN && self.reports_left_out == 0 {
            self.events.report(&self.setup.name, &event);
        }
    }

    /// How many reports were left out since the last call; the next run's reports start anew.
    pub fn take_unreported_failures(&mut self) -> u64 {
        self.reports_made = 0;
        core::mem::take(&mut self.reports_left_out)
    }

    /// Moves pieces of released requests into the SQ while it and the command identifiers
    /// allow. Returns how many commands were written.
    fn issue_waiting(&mut self) -> u32 {
        let mut issued = 0;
        while self.waiting.len() > self.unreleased
            && !self.free_commands.is_empty()
            && !self.submission_ring.is_full()
        {
            let index = self.waiting[0];
            if self.issue_piece(index) {
                issued += 1;
            }
            let request = &self.requests[index as usize];
            if request.pieces_issued == request.pieces_total {
                self.waiting.pop_front();
            }
        }
        issued
    }

    /// Writes the next Read or Write command (or the Flush) of request `index` into the SQ (no
    /// doorbell).
    fn issue_piece(&mut self, index: u32) -> bool {
        let request = &self.requests[index as usize];
        let setup = &self.setup;
        let first_block = request.pieces_issued * setup.max_command_blocks;
        let block_count = setup.max_command_blocks.min(request.block_count - first_block);
        let lba = request.lba + u64::from(first_block);
        let data_bus = request.data_bus + u64::from(first_block) * u64::from(setup.block_bytes);
        let operation = request.operation;
        let (block_count, lba) = if operation == Operation::Flush { (0, 0) } else { (block_count, lba) };
        let command_id = self.free_commands.pop().expect("checked by the caller");
        let Some(sq_sequence) = self.write_command(command_id, operation, (lba, block_count), data_bus)
        else {
            // Not reachable for requests that passed `submit`'s checks; fail the request
            // rather than send something the controller would misread.
            self.free_commands.push(command_id);
            let request = &mut self.requests[index as usize];
            request.error.get_or_insert(IoError { kind: IoErrorKind::Transfer, code: 0 });
            request.pieces_total = request.pieces_issued;
            if request.pieces_done == request.pieces_total {
                self.finished_early.push_back(index);
            }
            return false;
        };
        self.requests[index as usize].pieces_issued += 1;
        let data = DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 0 };
        self.record_command(
            command_id,
            CommandSlot {
                in_use: true,
                timed_out: false,
                request: index,
                tag: 0,
                operation,
                data,
                sq_sequence,
                lba,
                block_count,
                issued_at_ticks: 0,
            },
        );
        true
    }

    /// Builds the command's PRPs (a Flush has none) and writes its entry into the SQ (no
    /// doorbell). Returns its SQ sequence number; `None` when its PRPs could not be built.
    #[inline(always)]
    fn write_command(
        &mut self,
        command_id: u16,
        operation: Operation,
        (lba, block_count): (u64, u32),
        data_bus: u64,
    ) -> Option<u64> {
        let setup = &self.setup;
        let namespace_id = setup.namespace_id;
        let entry = if operation == Operation::Flush {
            IoEntry::flush(command_id, namespace_id)
        } else {
            let length_bytes = block_count as usize * setup.block_bytes as usize;
            let list_offset = usize::from(command_id) * setup.list_pages_per_command * setup.page_bytes;
            let prps = prp::build(
                data_bus,
                length_bytes,
                setup.page_bytes,
                self.lists_bus + list_offset as u64,
                setup.list_pages_per_command,
                |slot, value| {
                    if let Some(lists) = setup.lists {
                        lists.region.write_u64(list_offset + slot * prp::ENTRY_BYTES, value);
                    }
                },
            )
            .ok()?;
            if let (Some(lists), true) = (setup.lists, prps.list_pages > 0) {
                let written = lists.region.slice(list_offset, prps.list_pages * setup.page_bytes);
                self.platform.clean_for_device(&written);
            }
            let opcode = if operation == Operation::Write { io_opcode::WRITE } else { io_opcode::READ };
            IoEntry::transfer(opcode, command_id, namespace_id, (lba, block_count), (prps.prp1, prps.prp2))
        };
        let sq_sequence = self.submission_ring.push_io(&entry).expect("checked by the caller");
        self.unnotified_commands[self.submission_ring.unnotified() - 1] = command_id;
        Some(sq_sequence)
    }

    /// Records a command written into the SQ; its doorbell stamps it.
    #[inline(always)]
    fn record_command(&mut self, command_id: u16, command: CommandSlot) {
        self.commands[usize::from(command_id)] = command;
        self.statistics.commands_submitted += 1;
    }

    /// Tells the controller about every entry written since the last doorbell (one write), and
    /// stamps their commands with one clock reading: their timeouts count from here.
    #[inline(always)]
    fn ring_submission_doorbell(&mut self) {
        let written = self.submission_ring.unnotified();
        if written == 0 {
            return;
        }
        let now_ticks = self.platform.now_ticks();
        for command_id in &self.unnotified_commands[..written] {
            self.commands[usize::from(*command_id)].issued_at_ticks = now_ticks;
        }
        // Commands in flight only grow here (a completion only takes them away): the most at
        // once is a doorbell's count, counted once per doorbell instead of once per command.
        let in_flight = self.commands_in_flight();
        self.statistics.max_commands_in_flight = self.statistics.max_commands_in_flight.max(in_flight);
        if self.submission_ring.notify(&self.registers, self.platform) {
            self.statistics.sq_doorbell_writes += 1;
        }
    }

    /// Handles one completion entry; returns the finished request, if this was its last piece,
    /// with this entry's identifiers.
    #[inline(always)]
    fn complete(&mut self, entry: &CompletionEntry) -> Option<(Completion, CommandDetail)> {
        let command_id = entry.command_id();
        if !self.trusted(entry) {
            return None;
        }
        let outcome = self.command_outcome(entry, command_id);
        let command = &mut self.commands[usize::from(command_id)];
        command.in_use = false;
        let (index, tag, operation, data) = (command.request, command.tag, command.operation, command.data);
        self.free_commands.push(command_id);
        self.statistics.commands_completed += 1;
        let detail =
            CommandDetail { queue_id: self.setup.queue_id, command_id, sq_head: Some(entry.sq_head()) };
        if index == OWN_REQUEST {
            self.own_requests_in_flight -= 1;
            return Some((self.finish_transfer(tag, operation, data, outcome), detail));
        }
        let request = &mut self.requests[index as usize];
        request.pieces_done += 1;
        if let Err(error) = outcome {
            request.error.get_or_insert(error);
            if request.pieces_issued < request.pieces_total {
                // The request has failed: its remaining pieces are not sent.
                request.pieces_total = request.pieces_issued;
                if let Some(position) = self.waiting.iter().position(|i| *i == index) {
                    self.waiting.remove(position);
                }
            }
        }
        let request = &self.requests[index as usize];
        (request.pieces_done == request.pieces_total).then(|| (self.finish(index), detail))
    }

    /// Whether an entry names this queue and a command in flight; otherwise the entry is
    /// reported and ignored.
    #[inline(always)]
    fn trusted(&mut self, entry: &CompletionEntry) -> bool {
        let queue_id = self.setup.queue_id;
        let command_id = entry.command_id();
        let known = self.commands.get(usize::from(command_id)).is_some_and(|command| command.in_use);
        if entry.sq_id() == queue_id && known {
            return true;
        }
        self.distrust(entry);
        false
    }

    /// Reports an entry that names another queue or no command in flight.
    #[cold]
    #[inline(never)]
    fn distrust(&mut self, entry: &CompletionEntry) {
        let queue_id = self.setup.queue_id;
        let command_id = entry.command_id();
        let event = if entry.sq_id() != queue_id {
            Event::WrongSubmissionQueue { queue_id, reported_queue_id: entry.sq_id(), command_id }
        } else {
            Event::UnknownCommandId { queue_id, command_id, sq_head: entry.sq_head(), status: entry.status() }
        };
        self.statistics.protocol_errors += 1;
        self.report(event);
    }

    /// The result of command `command_id`: its status, unless the SQ head it reports is
    /// impossible.
    #[inline(always)]
    fn command_outcome(&mut self, entry: &CompletionEntry, command_id: u16) -> Result<(), IoError> {
        let command = &self.commands[usize::from(command_id)];
        let (timed_out, sq_sequence) = (command.timed_out, command.sq_sequence);
        let head = self.submission_ring.accept_head(entry.sq_head(), sq_sequence);
        if !timed_out && head.is_ok() && entry.status().is_success() {
            return Ok(());
        }
        self.command_failure(entry, command_id, timed_out, head)
    }

    /// Why command `command_id` failed, reported: a completion after its timeout, an
    /// impossible SQ head (`head`, as the ring took it), a reserved status, or its error status.
    #[cold]
    #[inline(never)]
    fn command_failure(
        &mut self,
        entry: &CompletionEntry,
        command_id: u16,
        timed_out: bool,
        head: Result<(), ImpossibleHead>,
    ) -> Result<(), IoError> {
        let queue_id = self.setup.queue_id;
        if timed_out {
            // The aborted command's own completion (Command Abort Requested, or its late
            // result): it ends that command and nothing else; the request failed already.
            self.report_follow_up(Event::LateCompletion { queue_id, command_id, status: entry.status() });
            return Err(IoError { kind: IoErrorKind::Timeout, code: u32::from(command_id) });
        }
        if let Err(known) = head {
            self.statistics.protocol_errors += 1;
            self.report(Event::ImpossibleSqHead {
                queue_id,
                command_id,
                reported_head: entry.sq_head(),
                known_head: known.known_head,
                tail: known.tail,
                entries: self.setup.queue.entries,
            });
            return Err(IoError { kind: IoErrorKind::Protocol, code: u32::from(entry.sq_head()) });
        }
        let status = entry.status();
        if (RESERVED_CODE_TYPES).contains(&status.code_type) {
            // Not a status the specification defines: the completion cannot be trusted.
            self.statistics.protocol_errors += 1;
            self.report(Event::ReservedStatus { queue_id, command_id, status });
            return Err(IoError { kind: IoErrorKind::Protocol, code: u32::from(status.field()) });
        }
        self.statistics.command_errors += 1;
        self.statistics.count_status(status, 1);
        let command = &self.commands[usize::from(command_id)];
        let (lba, block_count) = (command.lba, command.block_count);
        self.report(Event::CommandFailed {
            queue_id,
            command_id,
            opcode: io_opcode::READ,
            namespace_id: self.setup.namespace_id,
            lba,
            block_count,
            status,
            command_specific: entry.command_specific(),
            sq_head: entry.sq_head(),
        });
        Err(IoError { kind: io_error_kind(status), code: u32::from(status.field()) })
    }

    /// `submit` for a request that already passed [`check_request`] against this pair's
    /// geometry (the namespace checks once for all its pairs): the bus address, the data
    /// cleaned from the cache, and the request's command written into the SQ when it needs one
    /// and nothing waits before it; otherwise a request slot in the waiting queue.
    #[inline(always)]
    pub(crate) fn submit_checked(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if self.unusable {
            return Err((request, SubmitError::DeviceUnusable));
        }
        let bytes = request.block_count as usize * self.setup.block_bytes as usize;
        let data_bus = match request.operation {
            Operation::Flush => 0,
            Operation::Read | Operation::Write => {
                let Ok(data_bus) = self.setup.dma.to_bus(request.buffer.physical_address, bytes as u64)
                else {
                    return Err((request, SubmitError::BadBuffer));
                };
                if data_bus & 0x3 != 0 {
                    return Err((request, SubmitError::BadBuffer));
                }
                data_bus
            }
        };
        if self.requests_in_flight() == self.geometry.max_in_flight {
            return Err((request, SubmitError::QueueFull));
        }
        // `check_request` found the buffer at least this long: the data is its first `bytes`.
        let data = DmaBuffer { length_bytes: bytes, ..request.buffer };
        // Nothing dirty in the cache may later be written back over the data the device writes.
        self.platform.clean_for_device(&data);
        self.statistics.requests_submitted += 1;
        let fits_one_command = request.block_count <= self.setup.max_command_blocks;
        if !(fits_one_command && self.waiting.is_empty() && self.issue_own(&request, data, data_bus)) {
            self.wait_for_issue(&request, data_bus);
        }
        Ok(())
    }

    /// Writes a request of one command into the SQ as that command's record, when a command
    /// identifier and an SQ slot are free (the doorbell follows at `kick`). Returns whether it
    /// did.
    #[inline(always)]
    fn issue_own(&mut self, request: &Request, data: DmaBuffer, data_bus: u64) -> bool {
        if self.submission_ring.is_full() {
            return false;
        }
        let Some(command_id) = self.free_commands.pop() else {
            return false;
        };
        let range = (request.lba, request.block_count);
        let Some(sq_sequence) = self.write_command(command_id, request.operation, range, data_bus) else {
            // The waiting queue's issue fails it the usual way.
            self.free_commands.push(command_id);
            return false;
        };
        self.own_requests_in_flight += 1;
        self.record_command(
            command_id,
            CommandSlot {
                in_use: true,
                timed_out: false,
                request: OWN_REQUEST,
                tag: request.tag,
                operation: request.operation,
                data,
                sq_sequence,
                lba: request.lba,
                block_count: request.block_count,
                issued_at_ticks: 0,
            },
        );
        true
    }

    /// Gives a request a slot in the waiting queue; its pieces are issued from there, in
    /// request order, from the next `kick`.
    fn wait_for_issue(&mut self, request: &Request, data_bus: u64) {
        let index = self.free_requests.pop().expect("a request slot for every request in flight");
        let pieces_total = request.block_count.div_ceil(self.setup.max_command_blocks).max(1);
        self.requests[index as usize] = RequestSlot {
            tag: request.tag,
            operation: request.operation,
            lba: request.lba,
            block_count: request.block_count,
            buffer: request.buffer,
            data_bus,
            pieces_total,
            pieces_issued: 0,
            pieces_done: 0,
            error: None,
        };
        self.waiting.push_back(index);
        self.unreleased += 1;
        if pieces_total > 1 {
            self.statistics.requests_split += 1;
        }
    }

    /// Ends the request in slot `index`.
    fn finish(&mut self, index: u32) -> Completion {
        let request = &self.requests[index as usize];
        let bytes = request.block_count as usize * self.setup.block_bytes as usize;
        let data = request.buffer.slice(0, bytes).unwrap_or(DmaBuffer { length_bytes: 0, ..request.buffer });
        let (tag, operation, error) = (request.tag, request.operation, request.error);
        self.free_requests.push(index);
        self.finish_transfer(tag, operation, data, error.map_or(Ok(()), Err))
    }

    /// A request's completion: its read data made visible to the CPU, and counted.
    #[inline(always)]
    fn finish_transfer(
        &mut self,
        tag: u32,
        operation: Operation,
        data: DmaBuffer,
        result: Result<(), IoError>,
    ) -> Completion {
        if operation == Operation::Read {
            self.platform.invalidate_for_cpu(&data);
        }
        self.statistics.requests_completed += 1;
        if result.is_err() {
            self.statistics.requests_failed += 1;
        }
        Completion { tag, result }
    }
}

/// Status code types the specification reserves (NVMe Base Specification 2.0 Figure 92: 4h-6h).
const RESERVED_CODE_TYPES: core::ops::RangeInclusive<u8> = 4..=6;

/// The block interface's kind for a failed command: the media and data integrity status codes
/// (status code type 2, NVMe Base Specification 2.0 §4.2.3.2.3) are the medium's; every other
/// status is the device's answer to the command.
fn io_error_kind(status: Status) -> IoErrorKind {
    if status.code_type == super::status::code_type::MEDIA_AND_DATA_INTEGRITY {
        IoErrorKind::Media
    } else {
        IoErrorKind::DeviceStatus
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for IoQueuePair<'_, R, P> {
    fn name(&self) -> &str {
        &self.setup.name
    }

    fn take_unreported_failures(&mut self) -> u64 {
        IoQueuePair::take_unreported_failures(self)
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Checks the request (range, length, buffer reachable and 4-byte aligned) and queues it;
    /// nothing reaches the controller until `kick()`. Reads, writes (which the benchmark sends
    /// only inside a marked scratch region of a device `write=` names) and flushes.
    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if let Err(error) = check_request(&self.geometry, &request) {
            return Err((request, error));
        }
        self.submit_checked(request)
    }

    /// NVMe Flush is valid with or without a volatile write cache (NVMe 1.4 §6.8: without one
    /// it completes at once), so flushes always go to the controller.
    fn flush_support(&self) -> blockdev::FlushSupport {
        blockdev::FlushSupport::Command
    }

    /// Writes the submitted requests' commands into the SQ and rings its doorbell once.
    #[inline(always)]
    fn kick(&mut self) {
        self.follow_controller_reset();
        // Requests in flight grow only by `submit`, which a kick follows: the most at once is
        // a kick's count, counted once per batch instead of once per request.
        let in_flight = self.requests_in_flight();
        self.statistics.max_requests_in_flight = self.statistics.max_requests_in_flight.max(in_flight);
        self.unreleased = 0;
        if self.unusable {
            return;
        }
        if !self.waiting.is_empty() {
            self.issue_waiting();
        }
        self.ring_submission_doorbell();
    }

    /// Consumes new completion entries (phase tag), releases them with one CQ head doorbell
    /// write, then issues waiting pieces into the freed slots (one SQ doorbell write).
    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        self.poll_detailed(completions, &mut [])
    }

    /// As `poll`; `details` (when not empty) gets each completion's queue, command identifier
    /// and the SQ head its completion entry reported.
    #[inline(always)]
    fn poll_detailed(&mut self, completions: &mut [Completion], details: &mut [CommandDetail]) -> usize {
        self.follow_controller_reset();
        let mut produced = 0;
        while produced < completions.len() {
            let Some(index) = self.finished_early.pop_front() else {
                break;
            };
            completions[produced] = self.finish(index);
            if let Some(detail) = details.get_mut(produced) {
                // Failed before any of its commands was issued.
                *detail = CommandDetail { queue_id: self.setup.queue_id, ..CommandDetail::default() };
            }
            produced += 1;
        }
        let mut consumed = 0u32;
        // At most one pass over the CQ per call, so that a controller posting nonsense cannot
        // keep `poll` from returning.
        while produced < completions.len() && consumed < self.setup.queue.entries {
            let Some(entry) = self.completion_ring.pop(self.platform) else {
                break;
            };
            consumed += 1;
            if let Some((done, detail)) = self.complete(&entry) {
                completions[produced] = done;
                if let Some(slot) = details.get_mut(produced) {
                    *slot = detail;
                }
                produced += 1;
            }
        }
        if self.completion_ring.release(&self.registers) {
            self.statistics.cq_doorbell_writes += 1;
            if self.waiting.len() > self.unreleased && self.issue_waiting() > 0 {
                self.ring_submission_doorbell();
            }
        } else if consumed == 0 && self.commands_in_flight() > 0 {
            // Nothing new: the moment to notice a command that takes too long. What recovery
            // fails comes out of the next poll.
            self.check_timeouts();
        }
        produced
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::controller::{Controller, DepthChoice};
    use super::super::events::DiscardEvents;
    use super::super::sim::NvmeArena;
    use super::super::sim::{
        pattern_bytes, Corruption, RecordingEvents, SimConfig, SimController, SimNamespace, SimPlatform,
    };
    use super::*;
    use blockdev::Clock;
    use hal::barrier::BarrierKind;
    use hal::testing::{ByteRange, PlatformEvent};
    use std::format;
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec as StdVec;

    const ARENA: usize = 96 << 20;

    type Pair<'a> = IoQueuePair<'a, &'a SimController<'a>, SimPlatform>;

    fn pair<'a>(
        sim: &'a SimController<'a>,
        platform: &'a SimPlatform,
        events: &'a dyn EventSink,
        depth: u32,
    ) -> Pair<'a> {
        configured_pair(sim, platform, events, depth, None)
    }

    /// A pair of `depth` entries on a freshly brought-up controller, with the driver's command
    /// timeout or `timeout_ms`.
    fn configured_pair<'a>(
        sim: &'a SimController<'a>,
        platform: &'a SimPlatform,
        events: &'a dyn EventSink,
        depth: u32,
        timeout_ms: Option<u64>,
    ) -> Pair<'a> {
        let mut controller = Controller::bring_up(
            sim,
            sim.register_bytes(),
            platform,
            platform.translation(),
            events,
            "nvme 00:02.0".to_string(),
        )
        .unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(1).unwrap();
        if let Some(timeout_ms) = timeout_ms {
            controller.set_io_timeout_ms(timeout_ms);
        }
        let depth = DepthChoice::new(depth, controller.capabilities());
        controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string()).unwrap()
    }

    /// A pair whose commands time out after `timeout_ms`.
    fn pair_with_timeout<'a>(
        sim: &'a SimController<'a>,
        platform: &'a SimPlatform,
        events: &'a dyn EventSink,
        timeout_ms: u64,
    ) -> Pair<'a> {
        configured_pair(sim, platform, events, 8, Some(timeout_ms))
    }

    fn read(tag: u32, lba: u64, block_count: u32, buffer: DmaBuffer) -> Request {
        Request { tag, operation: Operation::Read, lba, block_count, buffer }
    }

    /// Polls until `count` completions arrived (bounded), returning them. Time passes between
    /// polls (a clock read), so the simulated controller works.
    fn wait_for(platform: &SimPlatform, device: &mut dyn BlockDevice, count: usize) -> StdVec<Completion> {
        let mut all = StdVec::new();
        let mut out = [Completion::default(); 8];
        for _ in 0..100_000 {
            platform.now_ticks();
            let n = device.poll(&mut out);
            all.extend_from_slice(&out[..n]);
            if all.len() >= count {
                return all;
            }
        }
        panic!("only {} of {count} completions", all.len());
    }

    fn check_pattern(platform: &SimPlatform, buffer: &DmaBuffer, first_byte: u64, bytes: usize) {
        let data = platform.bytes_of(buffer);
        assert!(
            data[..bytes] == pattern_bytes(first_byte, bytes)[..],
            "data at device byte {first_byte} ({bytes} bytes) differs"
        );
    }

    #[test]
    fn detailed_polls_name_the_queue_command_and_reported_sq_head() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        let buffer = platform.allocate_dma(8 * 4096, 4096).unwrap();
        // Four single-command reads, then one split into two commands (MDTS 512 KiB).
        for tag in 0..4u32 {
            device
                .submit(read(tag, u64::from(tag) * 8, 8, buffer.slice(tag as usize * 4096, 4096).unwrap()))
                .unwrap();
        }
        let large = platform.allocate_dma(1 << 20, 4096).unwrap();
        device.submit(read(9, 4096, 2048, large)).unwrap();
        device.kick();
        let mut completions = [Completion::default(); 8];
        let mut details = [CommandDetail { queue_id: 77, command_id: 77, sq_head: None }; 8];
        let mut seen = StdVec::new();
        for _ in 0..100_000 {
            platform.now_ticks();
            let count = device.poll_detailed(&mut completions, &mut details);
            seen.extend(completions[..count].iter().zip(&details[..count]).map(|(c, d)| (c.tag, *d)));
            if seen.len() == 5 {
                break;
            }
        }
        assert_eq!(seen.len(), 5, "{seen:?}");
        let queue_id = device.queue_id();
        assert!(seen.iter().all(|(_, detail)| detail.queue_id == queue_id && detail.queue_id != 0));
        // Six commands went into an 8-entry SQ: every reported head is a slot index past the
        // command's own, and the command identifiers of one batch are distinct.
        let mut ids: StdVec<u16> = seen.iter().map(|(_, d)| d.command_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 5, "{seen:?}");
        assert!(
            seen.iter().all(|(_, d)| matches!(d.sq_head, Some(head) if (1..8).contains(&head))),
            "{seen:?}"
        );
        // The split request reports its last command: the sixth entry, so the head is past it.
        let (_, split) = seen.iter().find(|(tag, _)| *tag == 9).unwrap();
        assert_eq!(split.sq_head, Some(6), "{seen:?}");
        // A plain poll leaves no trace of details behind.
        device.submit(read(1, 0, 8, buffer.slice(0, 4096).unwrap())).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].tag, 1);
        sim.assert_no_violations();
    }

    #[test]
    fn reads_of_every_shape_return_the_disk_contents() {
        for (mdts, lba_shift) in [(7u8, 9u8), (3, 9), (9, 9), (7, 12), (0, 9), (1, 12)] {
            let platform = SimPlatform::for_nvme(ARENA);
            let config = SimConfig {
                mdts,
                namespaces: vec![SimNamespace {
                    id: 1,
                    blocks: (256 << 20) >> lba_shift,
                    lba_shift,
                    metadata_bytes: 0,
                }],
                ..SimConfig::default()
            };
            let sim = SimController::new(&platform, config);
            let mut device = pair(&sim, &platform, &DiscardEvents, 64);
            let block = 1u64 << lba_shift;
            let blocks_total = device.geometry().block_count;
            let buffer = platform.allocate_dma((8 << 20) + 8192, 4096).unwrap();
            let sizes = [512u64, 4096, 64 << 10, 1 << 20, 4 << 20, (5 << 20) + 4096];
            let mut tag = 0;
            for size in sizes.iter().filter(|s| **s >= block) {
                let blocks = (size / block) as u32;
                let (lbas, offsets): (&[u64], &[usize]) = if *size <= 65536 {
                    (&[0, blocks_total / 3 + 1, blocks_total - u64::from(blocks)], &[0, 512, 4092])
                } else {
                    (&[blocks_total - u64::from(blocks)], &[0, 4092])
                };
                for &lba in lbas {
                    for &buffer_offset in offsets {
                        let data = buffer.slice(buffer_offset, *size as usize).unwrap();
                        tag += 1;
                        device.submit(read(tag, lba, blocks, data)).unwrap();
                        device.kick();
                        let done = wait_for(&platform, &mut device, 1);
                        assert_eq!(done[0], Completion { tag, result: Ok(()) });
                        check_pattern(&platform, &data, lba * block, *size as usize);
                    }
                }
            }
            sim.assert_no_violations();
            let statistics = sim.statistics();
            let limit = if mdts == 0 { 4 << 20 } else { 4096usize << mdts };
            assert!(
                statistics.read_bytes_max <= limit,
                "mdts {mdts}: {} > {limit}",
                statistics.read_bytes_max
            );
            if mdts == 0 {
                assert!(statistics.chained_lists > 0, "4 MiB commands chain list pages");
            }
            if mdts == 3 {
                assert!(device.statistics().requests_split > 0);
            }
        }
    }

    /// What an event of the log is, in words, for one queue pair and one data buffer.
    fn label(pair: &Pair, data: &DmaBuffer, event: &PlatformEvent) -> Option<&'static str> {
        let region = |memory: &hal::dma::DmaRegion| {
            ByteRange::new(memory.physical_address(), memory.length_bytes() as u64)
        };
        let sq = region(&pair.setup.queue.submission.region);
        let cq = region(&pair.setup.queue.completion.region);
        let lists = pair.setup.lists.map(|lists| region(&lists.region)).unwrap_or(ByteRange::new(0, 0));
        let data = ByteRange::of(data);
        let within = |range: &ByteRange, area: &ByteRange| range.overlap(area) == Some(*range);
        let label = match *event {
            PlatformEvent::MmioWrite { offset_bytes, .. }
                if offset_bytes == pair.setup.submission_doorbell =>
            {
                "SQ doorbell"
            }
            PlatformEvent::MmioWrite { offset_bytes, .. }
                if offset_bytes == pair.setup.completion_doorbell =>
            {
                "CQ doorbell"
            }
            PlatformEvent::Barrier(BarrierKind::Store) => "store barrier",
            PlatformEvent::Barrier(BarrierKind::Load) => "load barrier",
            PlatformEvent::Barrier(BarrierKind::Full) => "full barrier",
            PlatformEvent::CpuWrite(range) if within(&range, &sq) => "CPU writes SQ entry",
            PlatformEvent::CpuWrite(range) if within(&range, &lists) => "CPU writes PRP list",
            PlatformEvent::Clean(range) if within(&range, &sq) => "clean SQ entry",
            PlatformEvent::Clean(range) if within(&range, &lists) => "clean PRP list",
            PlatformEvent::Clean(range) if range == data => "clean data",
            PlatformEvent::DeviceRead(range) if within(&range, &sq) => "device reads SQ entry",
            PlatformEvent::DeviceRead(range) if within(&range, &lists) => "device reads PRP list",
            PlatformEvent::DeviceWrite(range) if within(&range, &data) => "device writes data",
            PlatformEvent::DeviceWrite(range) if within(&range, &cq) => "device writes CQ entry",
            PlatformEvent::Invalidate(range) if within(&range, &cq) => "invalidate CQ entry",
            PlatformEvent::Invalidate(range) if range == data => "invalidate data",
            PlatformEvent::CpuRead(range) if within(&range, &cq) && range.length_bytes == 4 => {
                "CPU reads CQ phase"
            }
            PlatformEvent::CpuRead(range) if within(&range, &cq) => "CPU reads CQ entry",
            PlatformEvent::CpuRead(range) if range == data => "CPU reads data",
            _ => return None,
        };
        Some(label)
    }

    #[test]
    fn one_read_follows_the_order_the_hardware_needs() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        let data = platform.allocate_dma(16 << 10, 4096).unwrap();
        sim.hold_io_completions(true);
        let start = platform.log().len();
        // 16 KiB in four pages: PRP1 and a list of three entries.
        device.submit(read(1, 64, 32, data)).unwrap();
        device.kick();
        let mut out = [Completion::default(); 2];
        assert_eq!(device.poll(&mut out), 0, "not complete before the controller ran");
        sim.release_held(1);
        assert_eq!(device.poll(&mut out), 1);
        check_pattern(&platform, &data, 64 * 512, 16 << 10);
        let mut trace: StdVec<&str> =
            platform.log().since(start).iter().filter_map(|event| label(&device, &data, event)).collect();
        trace.dedup();
        assert_eq!(
            trace,
            [
                // submit: nothing dirty may be written back over the data later
                "clean data",
                // kick: the list and the entry written, cleaned, ordered, then the doorbell
                "CPU writes PRP list",
                "clean PRP list",
                "CPU writes SQ entry",
                "clean SQ entry",
                "store barrier",
                "SQ doorbell",
                "device reads SQ entry",
                // an empty poll: one invalidate and one load, no barrier
                "invalidate CQ entry",
                "CPU reads CQ phase",
                // the controller works later
                "device reads PRP list",
                "device writes data",
                "device writes CQ entry",
                // the poll that finds it: phase, load barrier, the rest of the entry
                "invalidate CQ entry",
                "CPU reads CQ phase",
                "load barrier",
                "CPU reads CQ entry",
                // the request is done: its data becomes visible to the CPU
                "invalidate data",
                // the next slot is not new yet
                "invalidate CQ entry",
                "CPU reads CQ phase",
                // the slot goes back to the controller after the reads
                "load barrier",
                "CQ doorbell",
                "CPU reads data",
            ]
        );
        sim.assert_no_violations();
    }

    #[test]
    fn commands_complete_after_the_doorbell_and_out_of_order() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 16);
        let buffer = platform.allocate_dma(12 * 4096, 4096).unwrap();
        sim.reset_statistics();
        for tag in 0..12u32 {
            let data = buffer.slice(tag as usize * 4096, 4096).unwrap();
            device.submit(read(tag, u64::from(tag) * 8, 8, data)).unwrap();
        }
        device.kick();
        assert_eq!(sim.held_count(), 12, "fetched at the doorbell");
        let mut out = [Completion::default(); 16];
        assert_eq!(device.poll(&mut out), 0, "none completed inside the doorbell write");
        let tags: StdVec<u32> = wait_for(&platform, &mut device, 12).iter().map(|c| c.tag).collect();
        assert_ne!(tags, (0..12).collect::<StdVec<_>>(), "completion order differs from submission order");
        assert!(sim.statistics().overtakes > 0);
        assert_eq!(device.statistics().requests_split, 0, "4 KiB reads need one command each");
        for tag in tags {
            let data = buffer.slice(tag as usize * 4096, 4096).unwrap();
            check_pattern(&platform, &data, u64::from(tag) * 8 * 512, 4096);
        }
        sim.assert_no_violations();
    }

    #[test]
    fn one_doorbell_per_kick_and_per_poll_batch() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 64);
        let buffer = platform.allocate_dma(16 * 4096, 4096).unwrap();
        sim.reset_statistics();
        sim.hold_io_completions(true);
        for tag in 0..16u32 {
            let data = buffer.slice(tag as usize * 4096, 4096).unwrap();
            device.submit(read(tag, u64::from(tag) * 8, 8, data)).unwrap();
        }
        assert_eq!(sim.statistics().sq_doorbell_writes, 0, "submit alone rings nothing");
        device.kick();
        assert_eq!(sim.statistics().sq_doorbell_writes, 1);
        assert_eq!(sim.held_count(), 16);
        let mut out = [Completion::default(); 32];
        assert_eq!(device.poll(&mut out), 0, "poll never blocks");
        sim.release_held(16);
        assert_eq!(device.poll(&mut out), 16);
        assert_eq!(sim.statistics().cq_doorbell_writes, 1, "one CQ head write for 16");
        assert_eq!(sim.statistics().register_reads, 0, "no MMIO reads on the I/O path");
        let mut tags: StdVec<u32> = out[..16].iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..16).collect::<StdVec<_>>());
        assert!(platform.clean_calls.get() > 0 && platform.invalidate_calls.get() > 0);
        sim.assert_no_violations();
    }

    #[test]
    fn the_phase_flips_through_many_wraps_of_a_small_queue() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 4);
        assert_eq!(device.geometry().max_in_flight, 3);
        let buffer = platform.allocate_dma(3 * 4096, 4096).unwrap();
        let mut done = 0;
        for tag in 0..3u32 {
            let data = buffer.slice(tag as usize * 4096, 4096).unwrap();
            device.submit(read(tag, u64::from(tag), 8, data)).unwrap();
        }
        device.kick();
        let mut out = [Completion::default(); 4];
        let mut polls = 0;
        while done < 200 {
            polls += 1;
            assert!(polls < 100_000, "stuck after {done} completions");
            platform.now_ticks();
            let n = device.poll(&mut out);
            for completion in &out[..n] {
                assert_eq!(completion.result, Ok(()));
                done += 1;
                let slot = completion.tag % 3;
                let data = buffer.slice(slot as usize * 4096, 4096).unwrap();
                check_pattern(&platform, &data, u64::from(completion.tag) * 512, 4096);
                let tag = completion.tag + 3;
                device.submit(read(tag, u64::from(tag), 8, data)).unwrap();
            }
            device.kick();
        }
        sim.assert_no_violations();
        assert!(device.statistics().commands_submitted > 200);
        let statistics = sim.statistics();
        assert!(statistics.cq_wraps >= 40, "{} passes over the CQ", statistics.cq_wraps);
        assert!(statistics.overtakes > 10, "{} completions overtook", statistics.overtakes);
    }

    #[test]
    fn a_full_queue_of_split_requests_keeps_every_piece_moving() {
        // 1 MiB requests with a 32 KiB command limit: 32 commands each, at depth 16 (15 slots).
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { mdts: 3, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let mut device = pair(&sim, &platform, &DiscardEvents, 16);
        let slots = device.geometry().max_in_flight;
        assert_eq!(slots, 15);
        let buffer = platform.allocate_dma((slots as usize) << 20, 4096).unwrap();
        sim.hold_io_completions(true);
        for tag in 0..slots {
            let data = buffer.slice((tag as usize) << 20, 1 << 20).unwrap();
            device.submit(read(tag, u64::from(tag) * 2048, 2048, data)).unwrap();
        }
        let refused = device.submit(read(99, 0, 8, buffer.slice(0, 4096).unwrap()));
        assert_eq!(refused.unwrap_err().1, SubmitError::QueueFull);
        device.kick();
        assert_eq!(sim.held_count(), 15, "only as many commands as SQ slots");
        let mut completed = StdVec::new();
        let mut out = [Completion::default(); 16];
        for _ in 0..10_000 {
            sim.release_held(7);
            let n = device.poll(&mut out);
            completed.extend_from_slice(&out[..n]);
            if completed.len() == slots as usize {
                break;
            }
        }
        assert_eq!(completed.len(), slots as usize);
        for completion in &completed {
            assert_eq!(completion.result, Ok(()));
            let data = buffer.slice((completion.tag as usize) << 20, 1 << 20).unwrap();
            check_pattern(&platform, &data, u64::from(completion.tag) * 2048 * 512, 1 << 20);
        }
        let statistics = device.statistics();
        assert_eq!(statistics.commands_submitted, 15 * 32);
        assert_eq!(statistics.max_commands_in_flight, 15);
        assert!(sim.statistics().max_outstanding <= 15);
        sim.assert_no_violations();
    }

    #[test]
    fn writes_and_flushes_reach_the_controller_with_their_data() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { mdts: 2, accept_writes: true, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        // 64 blocks with MDTS 16 KiB: two Write commands.
        let buffer = platform.allocate_dma(64 * 512, 4096).unwrap();
        let data: StdVec<u8> = (0..64 * 512).map(|i| (i * 7 % 251) as u8).collect();
        platform.cpu_write(&buffer, &data);
        device
            .submit(Request { tag: 1, operation: Operation::Write, lba: 1000, block_count: 64, buffer })
            .unwrap();
        let flush = DmaBuffer { length_bytes: 0, ..buffer };
        device
            .submit(Request { tag: 2, operation: Operation::Flush, lba: 0, block_count: 0, buffer: flush })
            .unwrap();
        device.kick();
        let completions = wait_for(&platform, &mut device, 2);
        assert!(completions.iter().all(|c| c.result.is_ok()), "{completions:?}");
        let mut statistics = sim.statistics();
        statistics.write_ranges.sort_unstable(); // the controller runs commands in any order
        assert_eq!(statistics.write_ranges, vec![(1000, 32), (1032, 32)]);
        assert_eq!(statistics.flushes, 1);
        for block in 0..64u64 {
            let written = sim.written_block(1, 1000 + block).unwrap();
            assert_eq!(written[..], data[block as usize * 512..(block as usize + 1) * 512], "block {block}");
        }
        // Reads return what was written.
        let back = platform.allocate_dma(64 * 512, 4096).unwrap();
        device.submit(read(3, 1000, 64, back)).unwrap();
        device.kick();
        wait_for(&platform, &mut device, 1);
        assert_eq!(platform.bytes_of(&back)[..], data[..]);
        assert_eq!(device.flush_support(), blockdev::FlushSupport::Command);
        sim.assert_no_violations();
    }

    #[test]
    fn the_simulator_calls_an_unexpected_write_a_violation() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        let buffer = platform.allocate_dma(512, 4096).unwrap();
        platform.cpu_write(&buffer, &[1; 512]);
        device
            .submit(Request { tag: 1, operation: Operation::Write, lba: 0, block_count: 1, buffer })
            .unwrap();
        device.kick();
        let completions = wait_for(&platform, &mut device, 1);
        assert!(completions[0].result.is_err());
        assert_eq!(sim.written_block(1, 0), None);
        assert!(sim.violations().iter().any(|v| v.contains("the driver sent a Write command")));
    }

    #[test]
    fn refused_requests_never_reach_the_controller() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        let buffer = platform.allocate_dma(8192, 4096).unwrap();
        let end = device.geometry().block_count;
        sim.reset_statistics();
        let cases = [
            (read(1, end, 1, buffer), SubmitError::OutOfRange),
            (read(2, end - 1, 2, buffer), SubmitError::OutOfRange),
            (read(3, u64::MAX, 1, buffer), SubmitError::OutOfRange),
            (read(4, 0, 0, buffer), SubmitError::BadLength),
            (read(5, 0, 17, buffer), SubmitError::BadBuffer),
            (read(6, 0, 1, buffer.slice(2, 512).unwrap()), SubmitError::BadBuffer),
            (
                Request { operation: Operation::Write, ..read(7, 0, 1, buffer.slice(2, 512).unwrap()) },
                SubmitError::BadBuffer,
            ),
            (Request { operation: Operation::Flush, ..read(9, 0, 1, buffer) }, SubmitError::BadLength),
            (
                read(8, 0, 1, DmaBuffer { cpu_address: 0x1000, physical_address: 0x1000, length_bytes: 512 }),
                SubmitError::BadBuffer,
            ),
        ];
        for (request, expected) in cases {
            let (back, error) = device.submit(request).unwrap_err();
            assert_eq!(back, request);
            assert_eq!(error, expected, "request {}", request.tag);
        }
        device.kick();
        assert_eq!(sim.statistics().reads, 0);
        assert_eq!(sim.statistics().sq_doorbell_writes, 0);
        sim.assert_no_violations();
    }

    #[test]
    fn command_errors_fail_the_request_by_name_and_are_counted() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { mdts: 3, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let events = RecordingEvents::default();
        let mut device = pair(&sim, &platform, &events, 8);
        sim.add_media_error(1, 100);
        let buffer = platform.allocate_dma(1 << 20, 4096).unwrap();
        // 1 MiB from LBA 0: pieces of 64 blocks; the second fails; the rest are not all sent.
        device.submit(read(5, 0, 2048, buffer)).unwrap();
        device.kick();
        let done = wait_for(&platform, &mut device, 1);
        let status_field = super::super::status::Status::new(2, 0x81, true).field();
        assert_eq!(done[0].result, Err(IoError { kind: IoErrorKind::Media, code: u32::from(status_field) }));
        assert!(
            events.any_contains("nvme0: Read failed: Unrecovered Read Error (02/81) dnr; sqid:1"),
            "{:?}",
            events.messages.borrow()
        );
        let statistics = device.statistics().clone();
        assert_eq!(statistics.command_errors, 1);
        assert_eq!(statistics.requests_failed, 1);
        assert_eq!(statistics.errors_by_status.len(), 1);
        assert!(statistics.commands_submitted < 32, "pieces after the failure not sent");
        // The queue still works afterwards.
        device.submit(read(6, 4096, 8, buffer)).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].result, Ok(()));
        sim.assert_no_violations();
    }

    #[test]
    fn untrustworthy_completions_are_reported_and_not_trusted() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair(&sim, &platform, &events, 8);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();

        sim.corrupt_next_completion(Corruption::UnknownCommandId);
        device.submit(read(1, 0, 8, buffer)).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].result, Ok(()), "the real one still counts");
        assert!(events.any_contains("unknown command identifier 65520"));

        sim.corrupt_next_completion(Corruption::WrongSubmissionQueue);
        device.submit(read(2, 0, 8, buffer)).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].result, Ok(()));
        assert!(events.any_contains("names submission queue 8"));

        sim.corrupt_next_completion(Corruption::DuplicateCompletion);
        device.submit(read(4, 0, 8, buffer)).unwrap();
        device.kick();
        let done = wait_for(&platform, &mut device, 1);
        assert_eq!(done, [Completion { tag: 4, result: Ok(()) }], "the copy completes nothing");
        let mut out = [Completion::default(); 2];
        assert_eq!(device.poll(&mut out), 0);
        assert!(events.any_contains("unknown command identifier"), "{:?}", events.messages.borrow());
        assert_eq!(device.statistics().protocol_errors, 3);

        sim.corrupt_next_completion(Corruption::ImpossibleSqHead);
        device.submit(read(3, 0, 8, buffer)).unwrap();
        device.kick();
        let done = wait_for(&platform, &mut device, 1);
        assert_eq!(done[0].result.unwrap_err().kind, IoErrorKind::Protocol);
        assert!(events.any_contains("reports SQ head 65534, impossible"));
        assert_eq!(device.statistics().protocol_errors, 4);

        // The queue goes on working with the head it could prove.
        for tag in 10..30 {
            device.submit(read(tag, 8, 8, buffer)).unwrap();
            device.kick();
            assert_eq!(wait_for(&platform, &mut device, 1)[0].result, Ok(()));
        }
        sim.assert_no_violations();
    }

    #[test]
    fn a_reserved_status_code_type_fails_the_command_as_a_protocol_error() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair(&sim, &platform, &events, 8);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        sim.corrupt_next_completion(Corruption::ReservedStatusType);
        device.submit(read(1, 0, 8, buffer)).unwrap();
        device.kick();
        let error = wait_for(&platform, &mut device, 1)[0].result.unwrap_err();
        assert_eq!(error.kind, IoErrorKind::Protocol);
        assert!(events.any_contains("has a reserved status code type"), "{:?}", events.messages);
        assert_eq!((device.statistics().protocol_errors, device.statistics().command_errors), (1, 0));
        device.submit(read(2, 0, 8, buffer)).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].result, Ok(()));
        sim.assert_no_violations();
    }

    #[test]
    fn a_completion_whose_phase_never_flips_is_a_timeout_and_a_reset_brings_the_queue_back() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        sim.corrupt_next_completion(Corruption::StalePhase);
        device.submit(read(1, 0, 8, buffer)).unwrap();
        device.kick();
        // The entry is there with the old phase: to the driver the slot never fills.
        let done = wait_for(&platform, &mut device, 1);
        assert_eq!(done[0].result.unwrap_err().kind, IoErrorKind::Timeout);
        assert!(events.any_contains("Read timed out"));
        assert_eq!(sim.statistics().resets, 1, "the command the controller thinks done cannot be aborted");
        for tag in 2..20 {
            device.submit(read(tag, u64::from(tag) * 8, 8, buffer)).unwrap();
            device.kick();
            assert_eq!(wait_for(&platform, &mut device, 1), [Completion { tag, result: Ok(()) }]);
        }
    }

    #[test]
    fn error_reports_stop_after_a_limit_but_counting_goes_on() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair(&sim, &platform, &events, 8);
        sim.add_media_error(1, 0);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        for tag in 0..40 {
            device.submit(read(tag, 0, 1, buffer)).unwrap();
            device.kick();
            wait_for(&platform, &mut device, 1);
        }
        assert_eq!(device.statistics().command_errors, 40);
        assert_eq!(events.messages.borrow().len(), MAX_REPORTS_PER_RUN as usize);
        assert_eq!(device.statistics().errors_by_status[0].1, 40);
        // The run's end takes the count of those left out; the next run describes anew.
        assert_eq!(device.take_unreported_failures(), 40 - u64::from(MAX_REPORTS_PER_RUN));
        assert_eq!(device.take_unreported_failures(), 0);
        device.submit(read(41, 0, 1, buffer)).unwrap();
        device.kick();
        wait_for(&platform, &mut device, 1);
        assert_eq!(events.messages.borrow().len(), MAX_REPORTS_PER_RUN as usize + 1);
    }

    #[test]
    fn a_request_of_one_command_is_written_into_the_sq_at_submit_and_handed_over_at_kick() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut device = pair(&sim, &platform, &DiscardEvents, 8);
        let buffer = platform.allocate_dma(2 * 4096, 4096).unwrap();
        sim.reset_statistics();
        sim.hold_io_completions(true);
        let data = buffer.slice(0, 4096).unwrap();
        let start = platform.log().len();
        device.submit(read(1, 0, 8, data)).unwrap();
        let written: StdVec<&str> =
            platform.log().since(start).iter().filter_map(|event| label(&device, &data, event)).collect();
        // Its one record is its command: the entry is in the SQ, the controller not yet told.
        assert!(written.contains(&"CPU writes SQ entry"), "{written:?}");
        assert!(!written.contains(&"SQ doorbell"), "{written:?}");
        assert_eq!((sim.statistics().sq_doorbell_writes, sim.held_count()), (0, 0));
        assert_eq!(device.requests_in_flight(), 1);
        device.submit(read(2, 8, 8, buffer.slice(4096, 4096).unwrap())).unwrap();
        device.kick();
        assert_eq!((sim.statistics().sq_doorbell_writes, sim.held_count()), (1, 2), "one doorbell for both");
        assert_eq!(device.statistics().max_requests_in_flight, 2);
        assert_eq!(device.statistics().max_commands_in_flight, 2);
        sim.hold_io_completions(false);
        let mut tags: StdVec<u32> = wait_for(&platform, &mut device, 2).iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, [1, 2]);
        assert_eq!(device.requests_in_flight(), 0);
        check_pattern(&platform, &data, 0, 4096);
        sim.assert_no_violations();
    }

    #[test]
    fn a_command_written_at_submit_times_out_counting_from_its_doorbell() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        sim.hold_io_completions(true);
        device.submit(read(1, 0, 8, buffer)).unwrap();
        // 40 ms between submit and kick: the command's 50 ms start at its doorbell.
        platform.set_step_us(40_000);
        platform.now_ticks();
        platform.set_step_us(1);
        device.kick();
        let (done, waited_ns) = wait_timed(&platform, &mut device, 1);
        assert_eq!(done[0].result.unwrap_err().kind, IoErrorKind::Timeout);
        assert!((50_000_000..100_000_000).contains(&waited_ns), "{waited_ns} ns after the kick");
        sim.assert_no_violations();
    }

    #[test]
    fn submitted_but_unkicked_requests_do_not_start_from_poll() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { mdts: 1, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let mut device = pair(&sim, &platform, &DiscardEvents, 4);
        let buffer = platform.allocate_dma(64 << 10, 4096).unwrap();
        // 64 KiB at 8 KiB per command: 8 pieces through 3 slots.
        device.submit(read(1, 0, 128, buffer)).unwrap();
        device.kick();
        let second = buffer.slice(0, 4096).unwrap();
        device.submit(read(2, 0, 8, second)).unwrap();
        // Poll until the first finishes; the second, never kicked, must not have been read.
        let done = wait_for(&platform, &mut device, 1);
        assert_eq!(done[0].tag, 1);
        assert_eq!(sim.statistics().reads, 8);
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1)[0].tag, 2);
        assert_eq!(sim.statistics().reads, 9);
        sim.assert_no_violations();
    }

    #[test]
    fn statistics_add_up_and_maxima_stay_maxima() {
        let invalid_field = Status::new(0, 2, true);
        let unrecovered = Status::new(2, 0x81, false);
        // Every counter a different value, so a counter added into the wrong field shows.
        let one = QueueStatistics {
            requests_submitted: 1,
            requests_completed: 2,
            requests_failed: 3,
            requests_split: 4,
            commands_submitted: 5,
            commands_completed: 6,
            sq_doorbell_writes: 7,
            cq_doorbell_writes: 8,
            command_errors: 9,
            protocol_errors: 10,
            timeouts: 11,
            aborts_sent: 12,
            resets_seen: 13,
            max_commands_in_flight: 5,
            max_requests_in_flight: 2,
            errors_by_status: vec![(invalid_field, 2)],
        };
        let other = QueueStatistics {
            requests_submitted: 100,
            requests_completed: 200,
            requests_failed: 300,
            requests_split: 400,
            commands_submitted: 500,
            commands_completed: 600,
            sq_doorbell_writes: 700,
            cq_doorbell_writes: 800,
            command_errors: 900,
            protocol_errors: 1000,
            timeouts: 1100,
            aborts_sent: 1200,
            resets_seen: 1300,
            max_commands_in_flight: 3,
            max_requests_in_flight: 7,
            errors_by_status: vec![(unrecovered, 1_000_000), (invalid_field, 3)],
        };
        let mut total = QueueStatistics::default();
        total.add(&one);
        total.add(&other);
        let expected = QueueStatistics {
            requests_submitted: 101,
            requests_completed: 202,
            requests_failed: 303,
            requests_split: 404,
            commands_submitted: 505,
            commands_completed: 606,
            sq_doorbell_writes: 707,
            cq_doorbell_writes: 808,
            command_errors: 909,
            protocol_errors: 1010,
            timeouts: 1111,
            aborts_sent: 1212,
            resets_seen: 1313,
            // Two pairs that each peaked at 5 and 3 never had 8 in flight.
            max_commands_in_flight: 5,
            max_requests_in_flight: 7,
            // First seen first.
            errors_by_status: vec![(invalid_field, 5), (unrecovered, 1_000_000)],
        };
        assert_eq!(total, expected);
        assert_eq!(format!("{}", total.errors_by_status[0].0), "Invalid Field in Command (00/02) dnr");
    }

    /// Polls until `count` requests completed; also how long that took on the platform's clock.
    fn wait_timed(platform: &SimPlatform, device: &mut Pair<'_>, count: usize) -> (StdVec<Completion>, u64) {
        let start = platform.now_ns();
        let done = wait_for(platform, device, count);
        (done, platform.now_ns() - start)
    }

    #[test]
    fn a_command_past_its_timeout_is_aborted_and_its_abort_completion_ends_only_it() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(8192, 4096).unwrap();
        sim.hold_io_completions(true);
        device.submit(read(1, 0, 8, buffer.slice(0, 4096).unwrap())).unwrap();
        device.submit(read(2, 8, 8, buffer.slice(4096, 4096).unwrap())).unwrap();
        device.kick();
        let (done, waited_ns) = wait_timed(&platform, &mut device, 2);
        for completion in &done {
            assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Timeout);
        }
        assert!((50_000_000..100_000_000).contains(&waited_ns), "{waited_ns} ns");
        assert_eq!(sim.statistics().aborts, 2);
        assert_eq!(sim.statistics().resets, 0, "an honoured Abort needs no reset");
        assert!(events.any_contains("nvme0: Read timed out: no completion after 5"), "{:?}", events.messages);
        assert!(events.any_contains("Abort of sqid:1 cid:0: aborted"));
        assert!(events
            .any_contains("late completion of timed-out sqid:1 cid:0 (Command Abort Requested (00/07))"));
        let statistics = device.statistics();
        assert_eq!((statistics.timeouts, statistics.aborts_sent, statistics.command_errors), (2, 2, 0));
        // The queue goes on.
        sim.hold_io_completions(false);
        device.submit(read(3, 16, 8, buffer)).unwrap();
        device.kick();
        assert_eq!(wait_for(&platform, &mut device, 1), [Completion { tag: 3, result: Ok(()) }]);
        check_pattern(&platform, &buffer, 16 * 512, 4096);
        sim.assert_no_violations();
    }

    #[test]
    fn a_command_the_controller_will_not_abort_ends_in_a_controller_reset_and_the_queue_works_after() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(1 << 20, 4096).unwrap();
        sim.hold_io_completions(true);
        sim.honour_aborts(false);
        // A split request (2 commands at QEMU's 512 KiB) and a small one.
        device.submit(read(1, 0, 2048, buffer)).unwrap();
        device.kick();
        let (done, waited_ns) = wait_timed(&platform, &mut device, 1);
        assert_eq!(done[0].tag, 1);
        assert_eq!(done[0].result.unwrap_err().kind, IoErrorKind::Timeout);
        // Aborted at 50 ms, reset when still not back a timeout later.
        assert!((100_000_000..200_000_000).contains(&waited_ns), "{waited_ns} ns");
        assert_eq!(sim.statistics().resets, 1);
        assert!(events.any_contains("Abort of sqid:1 cid:0: not aborted"));
        assert!(events.any_contains("controller reset (sqid:1 cid:0 could not be aborted) in "));
        assert_eq!(device.statistics().resets_seen, 1);
        assert_eq!(sim.io_queue_ids(), [1], "the I/O queue was created again");
        sim.hold_io_completions(false);
        for tag in 10..40 {
            device.submit(read(tag, u64::from(tag) * 8, 8, buffer)).unwrap();
            device.kick();
            assert_eq!(wait_for(&platform, &mut device, 1), [Completion { tag, result: Ok(()) }]);
            check_pattern(&platform, &buffer, u64::from(tag) * 8 * 512, 4096);
        }
        sim.assert_no_violations();
    }

    #[test]
    fn a_late_completion_of_a_timed_out_command_is_not_taken_for_a_new_one() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(8192, 4096).unwrap();
        sim.hold_io_completions(true);
        sim.honour_aborts(false);
        device.submit(read(1, 0, 8, buffer.slice(0, 4096).unwrap())).unwrap();
        device.kick();
        // Past the timeout (Abort sent, not honoured), short of the reset (2 clock reads per
        // pass at 100 µs each: 60 ms).
        for _ in 0..300 {
            platform.now_ticks();
            assert_eq!(device.poll(&mut [Completion::default(); 4]), 0);
        }
        assert_eq!(device.statistics().timeouts, 1);
        // A new read takes another identifier; then the late one arrives.
        device.submit(read(2, 8, 8, buffer.slice(4096, 4096).unwrap())).unwrap();
        device.kick();
        sim.release_held(2);
        let done = wait_for(&platform, &mut device, 2);
        let result_of = |tag| done.iter().find(|c| c.tag == tag).unwrap().result;
        assert_eq!(result_of(1).unwrap_err().kind, IoErrorKind::Timeout);
        assert_eq!(result_of(2), Ok(()));
        assert!(
            events.any_contains("late completion of timed-out sqid:1 cid:0 (Successful Completion (00/00))")
        );
        assert_eq!((device.statistics().protocol_errors, sim.statistics().resets), (0, 0));
        sim.assert_no_violations();
    }

    #[test]
    fn a_removed_device_fails_what_is_in_flight_as_gone_says_so_once_and_takes_nothing_more() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut device = pair_with_timeout(&sim, &platform, &events, 50);
        let buffer = platform.allocate_dma(3 * 4096, 4096).unwrap();
        sim.hold_io_completions(true);
        for tag in 0..3u32 {
            device
                .submit(read(tag, u64::from(tag) * 8, 8, buffer.slice(tag as usize * 4096, 4096).unwrap()))
                .unwrap();
        }
        device.kick();
        sim.remove();
        let done = wait_for(&platform, &mut device, 3);
        for completion in &done {
            assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::DeviceGone);
        }
        let gone_reports = events.messages.borrow().iter().filter(|m| m.contains("device gone")).count();
        assert_eq!(gone_reports, 1, "{:?}", events.messages);
        assert!(events.any_contains("nvme0: device gone (CSTS reads 0xffffffff): 3 requests in flight"));
        assert_eq!(device.submit(read(9, 0, 8, buffer)).unwrap_err().1, SubmitError::DeviceUnusable);
        for _ in 0..1000 {
            platform.now_ticks();
            assert_eq!(device.poll(&mut [Completion::default(); 4]), 0);
        }
        assert_eq!(sim.statistics().aborts, 0, "nothing is sent to a device that is gone");
    }

    #[test]
    fn media_statuses_fail_as_media_errors_and_the_rest_as_device_status() {
        // Unrecovered Read Error, End-to-end Guard Check Error: the medium's (type 2).
        assert_eq!(io_error_kind(Status::new(2, 0x81, false)), IoErrorKind::Media);
        assert_eq!(io_error_kind(Status::new(2, 0x82, true)), IoErrorKind::Media);
        // Invalid Field, LBA Out of Range, a path error: the device's answer.
        assert_eq!(io_error_kind(Status::new(0, 0x02, true)), IoErrorKind::DeviceStatus);
        assert_eq!(io_error_kind(Status::new(0, 0x80, true)), IoErrorKind::DeviceStatus);
        assert_eq!(io_error_kind(Status::new(3, 0x00, false)), IoErrorKind::DeviceStatus);
    }

    #[test]
    fn statistics_list_a_limited_number_of_error_kinds() {
        let mut total = QueueStatistics::default();
        for code in 0..STATUS_KINDS_COUNTED as u8 + 4 {
            total.count_status(Status::new(0, code, false), 2);
        }
        total.count_status(Status::new(0, 0, false), 1);
        assert_eq!(total.errors_by_status.len(), STATUS_KINDS_COUNTED);
        assert_eq!(total.errors_by_status[0], (Status::new(0, 0, false), 3));
        assert_eq!(
            total.errors_by_status.last().unwrap().0,
            Status::new(0, STATUS_KINDS_COUNTED as u8 - 1, false)
        );
    }
}
