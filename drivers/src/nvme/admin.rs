//! The admin queue, shared by a controller and its I/O queue pairs so that a pair whose command
//! timed out can recover (NVMe Base Specification 2.0 §5.1 Abort, §3.7.2 Controller Level Reset;
//! 1.4 §7.6.1 for the re-initialisation): commands run one at a time with a bound on each wait,
//! Abort names a command by queue and identifier, and a controller reset disables the controller,
//! enables it with a fresh admin queue and re-creates every I/O queue in the same memory. Each
//! reset moves [`AdminChannel::generation`] on, which tells every pair that its commands are gone.
#![forbid(unsafe_code)]

use super::command::{CompletionEntry, SubmissionEntry, COMPLETION_ENTRY_BYTES};
use super::enable::{disable, enable_with_admin_queue, WaitReporter};
use super::error::NvmeError;
use super::events::{Event, EventSink};
use super::regs::{offsets, Capabilities};
use super::ring::{CompletionRing, QueueMemory, SubmissionRing};
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// How long one admin command may take.
pub const ADMIN_COMMAND_TIMEOUT_MS: u64 = 10_000;

/// An I/O queue pair as the controller was told about it, to create it again after a reset (its
/// CQ zeroed first: phase tags start at 1).
#[derive(Clone, Copy, Debug)]
pub struct QueueRecord<'p> {
    pub queue_id: u16,
    pub memory: QueueMemory<'p>,
}

/// What Abort said about the command it named (NVMe 2.0 §5.1.1, completion DW0 bit 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbortOutcome {
    /// The command was aborted: its own completion (Command Abort Requested) follows.
    Aborted,
    /// The controller did not abort it (it may still complete).
    NotAborted,
}

/// The admin queue and what a reset needs; see the module documentation.
pub struct AdminChannel<'p, R: RegisterIo, P: Platform> {
    pub(crate) registers: R,
    pub(crate) platform: &'p P,
    pub(crate) events: &'p dyn EventSink,
    pub(crate) label: String,
    pub(crate) capabilities: Capabilities,
    submission: SubmissionRing<'p>,
    completion: CompletionRing<'p>,
    admin_memory: QueueMemory<'p>,
    next_command_id: u16,
    usable: bool,
    /// Queue pairs asked for with Set Features Number of Queues (asked again after a reset).
    pub(crate) pairs_requested: u16,
    queues: Vec<QueueRecord<'p>>,
    /// Moves on with every controller reset; each queue pair holds a clone and compares it with
    /// the generation its rings belong to on every kick and poll (a load, no borrow).
    generation: Rc<Cell<u32>>,
    resets: u32,
    last_reset_us: u64,
}

/// The admin channel as the controller and its pairs hold it.
pub type SharedAdmin<'p, R, P> = Rc<RefCell<AdminChannel<'p, R, P>>>;

impl<'p, R: RegisterIo, P: Platform> AdminChannel<'p, R, P> {
    /// The channel over the admin queue in `memory` that the controller was just enabled with.
    pub(crate) fn new(
        registers: R,
        platform: &'p P,
        events: &'p dyn EventSink,
        label: String,
        capabilities: Capabilities,
        memory: QueueMemory<'p>,
    ) -> Self {
        let (submission, completion) = admin_rings(&memory, &capabilities);
        AdminChannel {
            registers,
            platform,
            events,
            label,
            capabilities,
            submission,
            completion,
            admin_memory: memory,
            next_command_id: 0,
            usable: true,
            pairs_requested: 0,
            queues: Vec::new(),
            generation: Rc::new(Cell::new(0)),
            resets: 0,
            last_reset_us: 0,
        }
    }

    /// Moves on with every controller reset.
    pub fn generation(&self) -> u32 {
        self.generation.get()
    }

    /// The reset generation as the pairs follow it.
    pub fn generation_counter(&self) -> Rc<Cell<u32>> {
        Rc::clone(&self.generation)
    }

    /// Controller resets so far.
    pub fn resets(&self) -> u32 {
        self.resets
    }

    /// CSTS reads as all ones: nothing answers at BAR0 any more (the device was removed or its
    /// link went down; a PCIe read that nobody completes returns all ones).
    pub fn device_gone(&self) -> bool {
        self.registers.read32(offsets::CSTS) == u32::MAX
    }

    pub(crate) fn record_queue(&mut self, record: QueueRecord<'p>) {
        self.queues.push(record);
    }

    pub(crate) fn forget_queues(&mut self) {
        self.queues.clear();
    }

    /// Runs one admin command to completion, waiting at most `timeout_us`.
    pub fn command(
        &mut self,
        mut entry: SubmissionEntry,
        timeout_us: u64,
    ) -> Result<CompletionEntry, NvmeError> {
        if !self.usable {
            return Err(NvmeError::AdminQueueUnusable);
        }
        let opcode = entry.opcode();
        let command_id = self.next_command_id;
        self.next_command_id = command_id.wrapping_add(1);
        entry.set_command_id(command_id);
        let Some(sequence) = self.submission.push(&entry) else {
            // Commands run one at a time and each completion moves the head, so the ring only
            // fills if the controller never reported a head: treat it as unusable.
            self.usable = false;
            return Err(NvmeError::AdminQueueUnusable);
        };
        self.submission.notify(&self.registers, self.platform);
        let completion = self.wait_for_completion(opcode, command_id, timeout_us)?;
        if self.submission.accept_head(completion.sq_head(), sequence).is_err() {
            return Err(NvmeError::AdminProtocol { opcode, command_id, reported_head: completion.sq_head() });
        }
        let status = completion.status();
        if !status.is_success() {
            return Err(NvmeError::AdminFailed {
                opcode,
                status,
                command_specific: completion.command_specific(),
            });
        }
        Ok(completion)
    }

    /// Polls the admin CQ until the completion of `command_id` arrives; completions for other
    /// commands are reported and ignored while the deadline keeps running.
    fn wait_for_completion(
        &mut self,
        opcode: u8,
        command_id: u16,
        timeout_us: u64,
    ) -> Result<CompletionEntry, NvmeError> {
        let deadline = Deadline::after_us(self.platform, timeout_us);
        loop {
            if let Some(completion) = self.completion.pop(self.platform) {
                self.completion.release(&self.registers);
                if completion.command_id() == command_id && completion.sq_id() == 0 {
                    return Ok(completion);
                }
                self.events.report(
                    &self.label,
                    &Event::UnknownCommandId {
                        queue_id: 0,
                        command_id: completion.command_id(),
                        sq_head: completion.sq_head(),
                        status: completion.status(),
                    },
                );
            }
            if deadline.has_passed(self.platform) {
                self.usable = false;
                return Err(NvmeError::AdminTimeout {
                    opcode,
                    command_id,
                    waited_ms: deadline.elapsed_us(self.platform) / 1000,
                    csts: self.registers.read32(offsets::CSTS),
                });
            }
            core::hint::spin_loop();
        }
    }

    /// Abort (NVMe 2.0 §5.1): asks the controller to abort command `command_id` of submission
    /// queue `queue_id`, waiting at most `timeout_us` for the answer.
    pub fn abort(
        &mut self,
        queue_id: u16,
        command_id: u16,
        timeout_us: u64,
    ) -> Result<AbortOutcome, NvmeError> {
        let completion = self.command(SubmissionEntry::abort(queue_id, command_id), timeout_us)?;
        Ok(if completion.command_specific() & 1 == 0 {
            AbortOutcome::Aborted
        } else {
            AbortOutcome::NotAborted
        })
    }

    /// Controller Level Reset by CC.EN = 0 (NVMe 2.0 §3.7.2), then the initialisation again: a
    /// fresh admin queue in the same memory, Set Features Number of Queues, and every recorded
    /// I/O queue created again with its CQ zeroed. Every command in flight is gone afterwards.
    pub fn reset_controller(&mut self) -> Result<(), NvmeError> {
        let started = Deadline::after_us(self.platform, 0);
        let result = self.reset_and_recreate();
        self.last_reset_us = started.elapsed_us(self.platform);
        result
    }

    /// How long the last reset took, to the re-created queues (µs).
    pub fn last_reset_us(&self) -> u64 {
        self.last_reset_us
    }

    fn reset_and_recreate(&mut self) -> Result<(), NvmeError> {
        self.generation.set(self.generation.get().wrapping_add(1));
        self.resets += 1;
        let waits = WaitReporter { events: self.events, label: &self.label };
        disable(&self.registers, self.platform, &self.capabilities, waits)?;
        let memory = self.admin_memory;
        let completion = memory.completion.region;
        completion.zero(0, completion.length_bytes());
        (self.submission, self.completion) = admin_rings(&memory, &self.capabilities);
        self.usable = true;
        let waits = WaitReporter { events: self.events, label: &self.label };
        enable_with_admin_queue(&self.registers, self.platform, &self.capabilities, &memory, waits)?;
        let timeout_us = ADMIN_COMMAND_TIMEOUT_MS * 1000;
        if self.pairs_requested > 0 {
            let pairs = self.pairs_requested;
            self.command(SubmissionEntry::set_number_of_queues(pairs, pairs), timeout_us)?;
        }
        for QueueRecord { queue_id, memory } in self.queues.clone() {
            let cq = memory.completion.region;
            cq.zero(0, memory.entries as usize * COMPLETION_ENTRY_BYTES);
            self.platform.clean_for_device(&cq.buffer());
            self.command(
                SubmissionEntry::create_io_completion_queue(
                    queue_id,
                    memory.entries,
                    memory.completion.bus_address,
                ),
                timeout_us,
            )?;
            self.command(
                SubmissionEntry::create_io_submission_queue(
                    queue_id,
                    memory.entries,
                    memory.submission.bus_address,
                    queue_id,
                ),
                timeout_us,
            )?;
        }
        Ok(())
    }
}

/// The admin queue's rings over `memory`, empty, with queue 0's doorbells.
fn admin_rings<'p>(
    memory: &QueueMemory<'p>,
    capabilities: &Capabilities,
) -> (SubmissionRing<'p>, CompletionRing<'p>) {
    let stride = capabilities.doorbell_stride_bytes;
    let submission_doorbell = super::regs::submission_doorbell(0, stride);
    let completion_doorbell = super::regs::completion_doorbell(0, stride);
    (
        SubmissionRing::new(memory.submission.region, memory.entries, submission_doorbell),
        CompletionRing::new(memory.completion.region, memory.entries, completion_doorbell),
    )
}
