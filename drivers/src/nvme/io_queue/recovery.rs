//! What a queue pair does when a command takes too long (NVMe Base Specification 2.0 §5.1
//! Abort, §3.7.2 Controller Level Reset; the order Linux's drivers/nvme/host/pci.c `nvme_timeout`
//! follows: abort first, reset when the aborted command still does not come back).
//!
//! - A command older than the command timeout fails its request with [`IoErrorKind::Timeout`]
//!   and is aborted on the admin queue; its identifier stays taken until its own completion
//!   arrives (Command Abort Requested, or a late result), which ends it and nothing else.
//! - If the Abort does not complete in time, or the command is still outstanding a second
//!   timeout later, the controller is reset: every pair of the controller fails what it had in
//!   flight and starts again with empty rings (queues re-created by [`AdminChannel`]).
//! - Before any of this, CSTS is read: all ones means the device is gone; everything in flight
//!   fails as [`IoErrorKind::DeviceGone`], once said, and the pair takes no more requests.
//!
//! Every wait here is bounded (the Abort's answer by the command timeout, the reset by CAP.TO
//! and the admin command timeout), so a poll that recovers returns, late but surely.
//!
//! [`AdminChannel`]: super::super::admin::AdminChannel

use super::super::admin::{AbortOutcome, ADMIN_COMMAND_TIMEOUT_MS};
use super::super::error::NvmeError;
use super::super::events::Event;
use super::super::ring::{CompletionRing, SubmissionRing};
use super::{IoQueuePair, RequestSlot, OWN_REQUEST};
use blockdev::{IoError, IoErrorKind};
use hal::mmio::RegisterIo;
use hal::platform::Platform;

/// Timeout checks per timeout period while commands are in flight.
const CHECKS_PER_TIMEOUT: u64 = 4;

impl<R: RegisterIo, P: Platform> IoQueuePair<'_, R, P> {
    /// Looks for commands older than the timeout (at most [`CHECKS_PER_TIMEOUT`] times per
    /// timeout period) and recovers from them.
    pub(super) fn check_timeouts(&mut self) {
        let now = self.platform.now_ticks();
        if now < self.next_timeout_check_ticks || self.unusable {
            return;
        }
        self.next_timeout_check_ticks = now + (self.timeout_ticks / CHECKS_PER_TIMEOUT).max(1);
        for command_id in 0..self.commands.len() {
            let command = self.commands[command_id];
            if !command.in_use {
                continue;
            }
            let age_ticks = now.saturating_sub(command.issued_at_ticks);
            if age_ticks < self.timeout_ticks {
                continue;
            }
            if self.device_gone() {
                return self.give_up(IoErrorKind::DeviceGone);
            }
            if command.timed_out {
                if age_ticks >= 2 * self.timeout_ticks {
                    // Aborted a timeout ago and still not back.
                    return self.reset_controller(command_id as u16);
                }
                continue;
            }
            if !self.time_out(command_id as u16, age_ticks) {
                return;
            }
        }
    }

    /// CSTS reads as all ones (only asked once a command is overdue: no register read on the
    /// I/O path otherwise).
    fn device_gone(&self) -> bool {
        self.admin.as_ref().is_some_and(|admin| admin.borrow().device_gone())
    }

    /// Fails command `command_id`'s request with a timeout and aborts the command. Returns
    /// false when the recovery went on to a reset (the caller's view of the slots is stale).
    fn time_out(&mut self, command_id: u16, age_ticks: u64) -> bool {
        let queue_id = self.setup.queue_id;
        let slot = &mut self.commands[usize::from(command_id)];
        slot.timed_out = true;
        let (index, lba, block_count) = (slot.request, slot.lba, slot.block_count);
        self.statistics.timeouts += 1;
        let error = IoError { kind: IoErrorKind::Timeout, code: u32::from(command_id) };
        if index != OWN_REQUEST {
            // A request in its command's record fails with this error when the command ends.
            self.requests[index as usize].error.get_or_insert(error);
        }
        let waited_ms = self.platform.ticks_to_ns(age_ticks) / 1_000_000;
        self.report(Event::CommandTimedOut { queue_id, command_id, lba, block_count, waited_ms });
        let Some(admin) = self.admin.clone() else {
            return true;
        };
        self.statistics.aborts_sent += 1;
        let wait_us = self.setup.command_timeout_us.min(ADMIN_COMMAND_TIMEOUT_MS * 1000);
        let answer = admin.borrow_mut().abort(queue_id, command_id, wait_us);
        match answer {
            Ok(outcome) => {
                let aborted = outcome == AbortOutcome::Aborted;
                self.report_follow_up(Event::AbortAnswered { queue_id, command_id, aborted });
                true
            }
            // Refused (e.g. Abort Command Limit Exceeded): as not aborted; a reset follows if
            // the command does not come back within another timeout.
            Err(NvmeError::AdminFailed { .. }) => {
                self.report_follow_up(Event::AbortAnswered { queue_id, command_id, aborted: false });
                true
            }
            Err(_) => {
                self.reset_controller(command_id);
                false
            }
        }
    }

    /// Resets the controller after command `command_id` could not be aborted, and follows it.
    fn reset_controller(&mut self, command_id: u16) {
        let Some(admin) = self.admin.clone() else {
            return;
        };
        let result = admin.borrow_mut().reset_controller();
        let took_ms = admin.borrow().last_reset_us() / 1000;
        let queue_id = self.setup.queue_id;
        self.events
            .report(&self.setup.name, &Event::ControllerReset { queue_id, command_id, took_ms, result });
        if result.is_err() {
            let kind = if self.device_gone() { IoErrorKind::DeviceGone } else { IoErrorKind::Timeout };
            return self.give_up(kind);
        }
        self.follow_controller_reset();
    }

    /// After a controller reset (by this pair or another of the controller): everything in
    /// flight is gone; it fails, and the rings start again empty, as the queues were re-created.
    pub(super) fn follow_controller_reset(&mut self) {
        let generation = self.reset_generation.get();
        if generation == self.generation {
            return;
        }
        self.generation = generation;
        self.statistics.resets_seen += 1;
        self.fail_everything(IoErrorKind::Timeout);
        let setup = &self.setup;
        self.submission_ring = SubmissionRing::new(
            setup.queue.submission.region,
            setup.queue.entries,
            setup.submission_doorbell,
        );
        self.completion_ring = CompletionRing::new(
            setup.queue.completion.region,
            setup.queue.entries,
            setup.completion_doorbell,
        );
    }

    /// The device is gone, or could not be reset: what is in flight fails with `kind`, said
    /// once, and nothing more is sent.
    fn give_up(&mut self, kind: IoErrorKind) {
        if self.unusable {
            return;
        }
        self.unusable = true;
        let outstanding = self.requests_in_flight();
        let queue_id = self.setup.queue_id;
        let event = match kind {
            IoErrorKind::DeviceGone => Event::DeviceGone { queue_id, outstanding },
            _ => Event::QueueAbandoned { queue_id, outstanding },
        };
        self.events.report(&self.setup.name, &event);
        self.fail_everything(kind);
    }

    /// Ends every request in flight with `kind` (unless it failed already): commands are
    /// forgotten, pieces not yet sent are not sent; the requests come out of the next polls.
    fn fail_everything(&mut self, kind: IoErrorKind) {
        let error = IoError { kind, code: 0 };
        for command_id in 0..self.commands.len() {
            let slot = &mut self.commands[command_id];
            if !slot.in_use {
                continue;
            }
            slot.in_use = false;
            let slot = *slot;
            self.free_commands.push(command_id as u16);
            if slot.request == OWN_REQUEST {
                self.adopt_failed(&slot, command_id as u16, error);
                continue;
            }
            let request = &mut self.requests[slot.request as usize];
            request.pieces_done += 1;
            request.error.get_or_insert(error);
        }
        for index in self.waiting.drain(..) {
            let request = &mut self.requests[index as usize];
            request.pieces_total = request.pieces_issued;
            request.error.get_or_insert(error);
        }
        self.unreleased = 0;
        let mut idle = alloc::vec![false; self.requests.len()];
        for index in &self.free_requests {
            idle[*index as usize] = true;
        }
        for index in &self.finished_early {
            idle[*index as usize] = true;
        }
        for (index, request) in self.requests.iter().enumerate() {
            if !idle[index] && request.pieces_done >= request.pieces_total {
                self.finished_early.push_back(index as u32);
            }
        }
    }

    /// A request that lived in its command's record moves to a request slot as a failure
    /// (with `error`, or its timeout), to come out of the next poll like every failed request.
    fn adopt_failed(&mut self, command: &super::CommandSlot, command_id: u16, error: IoError) {
        let index = self.free_requests.pop().expect("a request slot for every request in flight");
        self.own_requests_in_flight -= 1;
        let error = if command.timed_out {
            IoError { kind: IoErrorKind::Timeout, code: u32::from(command_id) }
        } else {
            error
        };
        self.requests[index as usize] = RequestSlot {
            tag: command.tag,
            operation: command.operation,
            lba: command.lba,
            block_count: command.block_count,
            buffer: command.data,
            data_bus: 0,
            pieces_total: 1,
            pieces_issued: 1,
            pieces_done: 1,
            error: Some(error),
        };
    }
}
