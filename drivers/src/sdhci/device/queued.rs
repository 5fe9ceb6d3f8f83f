//! The SD card on an SDHCI host with its command queue on (`sd.cq=on`,
//! crate::sd::command_queue): as many requests in flight as the card has tasks. `submit()`
//! gives a request a task ID; when no data moves, each new task goes to the card with CMD44 and
//! CMD45, then CMD13 with Send Queue Status asks which tasks are ready, and the lowest ready one
//! runs with CMD46 or CMD47 through the same data phase as any read or write
//! ([`super::SdCard::start`]: ADMA2 or PIO, Transfer Complete after the card's busy). The card
//! decides the order: in its voluntary mode it may make a later task ready first. A task that
//! fails (refused in its response, or an error of its transfer) is aborted with CMD43 and fails
//! alone; the others go on. Nothing waits in `submit()` or `kick()` longer than the short
//! queueing commands take; `poll()` moves the running task on and starts the next.
#![forbid(unsafe_code)]

use super::{block, command_queue, ActiveCommand, RequestState, SdCard};
use crate::sd::command_queue::{QueueSupport, TaskQueue, MAX_TASKS};
use crate::sd::error::SdError;
use blockdev::{Completion, Geometry, Request, SubmitError};
use hal::dma::DmaRegion;
use hal::mmio::RegisterIo;
use hal::platform::Platform;

/// Blocks one task moves at most (CMD44's 16-bit count).
pub const MAX_TASK_BLOCKS: u32 = 65_535;
/// Queue Status reads in a row that may fail before the queued tasks are failed.
const STATUS_FAILURES_ALLOWED: u32 = 8;

/// The host's tasks, and completions of tasks that failed before their data moved.
pub(super) struct Tasks {
    queue: TaskQueue,
    failed: [Option<Completion>; MAX_TASKS],
    status_failures: u32,
}

impl Tasks {
    /// The card's geometry with the queue on: one request per task, each at most one task's
    /// blocks.
    pub(super) fn geometry(&self, card: Geometry) -> Geometry {
        Geometry {
            max_in_flight: u32::from(self.queue.depth()),
            max_request_blocks: card.max_request_blocks.min(MAX_TASK_BLOCKS),
            ..card
        }
    }

    fn push_failed(&mut self, completion: Completion) {
        if let Some(slot) = self.failed.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some(completion);
        }
    }

    fn take_failed(&mut self) -> Option<Completion> {
        self.failed.iter_mut().find_map(Option::take)
    }
}

impl<'p, R: RegisterIo, P: Platform> SdCard<'p, R, P> {
    /// What the card advertises about command queueing (CMD48 reads only; nothing changes).
    pub fn command_queue_support(&mut self) -> QueueSupport {
        command_queue::discover(&mut self.host, &self.card.info)
    }

    /// Switches the card's command queue on (CMD49, voluntary mode) and runs requests as tasks
    /// from now on; returns the depth.
    pub fn enable_command_queue(&mut self, support: QueueSupport) -> Result<u8, SdError> {
        let depth = command_queue::enable(&mut self.host, self.card.info.rca, support)?;
        self.queue =
            Some(Tasks { queue: TaskQueue::new(depth), failed: [None; MAX_TASKS], status_failures: 0 });
        Ok(depth)
    }

    /// The queue's depth when it is on.
    pub fn command_queue_depth(&self) -> Option<u8> {
        self.queue.as_ref().map(|tasks| tasks.queue.depth())
    }

    /// The task whose data is moving, if one is.
    pub(super) fn running_task(&self) -> Option<u8> {
        self.queue.as_ref().and_then(|tasks| tasks.queue.running()).map(|(id, _)| id)
    }

    pub(super) fn submit_task(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        self.accept(&request).map_err(|error| (request, error))?;
        let Some(tasks) = self.queue.as_mut() else {
            return Err((request, SubmitError::Unsupported));
        };
        tasks.queue.submit(request).map(|_| ()).ok_or((request, SubmitError::QueueFull))
    }

    pub(super) fn kick_tasks(&mut self) {
        if matches!(self.state, RequestState::Idle) {
            self.dispatch_tasks();
        }
    }

    pub(super) fn poll_tasks(&mut self, completions: &mut [Completion]) -> usize {
        let mut delivered = 0;
        while delivered < completions.len() {
            let Some(completion) = self.queue.as_mut().and_then(Tasks::take_failed) else { break };
            completions[delivered] = completion;
            delivered += 1;
        }
        self.advance();
        if let (RequestState::Done(completion), true) = (self.state, delivered < completions.len()) {
            completions[delivered] = completion;
            delivered += 1;
            self.state = RequestState::Idle;
            if let Some((id, tasks)) = self.running_task().zip(self.queue.as_mut()) {
                tasks.queue.finish(id);
            }
        }
        if matches!(self.state, RequestState::Idle) {
            self.dispatch_tasks();
        }
        delivered
    }

    /// With no data moving: the new tasks to the card, then the lowest ready task started.
    fn dispatch_tasks(&mut self) {
        while let Some((id, request)) = self.queue.as_ref().and_then(|tasks| tasks.queue.next_submitted()) {
            let announced = self.announce(id, &request);
            let Some(tasks) = self.queue.as_mut() else { return };
            match announced {
                Ok(()) => tasks.queue.mark_queued(id),
                Err(error) => {
                    tasks.queue.finish(id);
                    let completion = self.card.fail(&request, error, 1);
                    if let Some(tasks) = self.queue.as_mut() {
                        tasks.push_failed(completion);
                    }
                }
            }
        }
        let waiting = self
            .queue
            .as_ref()
            .is_some_and(|tasks| tasks.queue.running().is_none() && tasks.queue.any_queued());
        if !waiting {
            return;
        }
        let ready = match self.queue_status() {
            Ok(ready) => ready,
            Err(error) => return self.status_failed(error),
        };
        let Some((_, request)) = self.queue.as_mut().and_then(|tasks| tasks.queue.start_ready(ready)) else {
            return;
        };
        let Ok(data) = DmaRegion::of_buffer(self.host.platform(), request.buffer) else {
            return self.fail_running(
                request,
                SdError::UnusableHost { reason: "task buffer not DMA memory", value: 0 },
            );
        };
        let segment = self.prepare(&request, 0);
        self.start_with_retries(request, data, segment, block::MAX_ATTEMPTS);
    }

    /// CMD44 and CMD45 for task `id`.
    fn announce(&mut self, id: u8, request: &Request) -> Result<(), SdError> {
        let rca = self.card.info.rca;
        let blocks = request.block_count.min(MAX_TASK_BLOCKS) as u16;
        self.host.send_command(&command_queue::task_parameters(request.operation, id, blocks), rca)?;
        let address = self.card.info.data_address(request.lba);
        self.host.send_command(&command_queue::task_address(address), rca)?;
        Ok(())
    }

    /// The Queue Status Register (CMD13 with Send Queue Status): its value is no card status, so
    /// its bits are not checked as one.
    fn queue_status(&mut self) -> Result<u32, SdError> {
        let command = command_queue::queue_status(self.card.info.rca);
        self.host.issue(&command, 0, 0, 0)?;
        let response = self.host.wait_command_complete(&command)?;
        if let Some(tasks) = self.queue.as_mut() {
            tasks.status_failures = 0;
        }
        Ok(response.short())
    }

    /// The Queue Status could not be read: tried again at the next poll, and after
    /// [`STATUS_FAILURES_ALLOWED`] in a row every queued task fails.
    fn status_failed(&mut self, error: SdError) {
        self.host.recover(false);
        let Some(tasks) = self.queue.as_mut() else { return };
        tasks.status_failures += 1;
        if tasks.status_failures < STATUS_FAILURES_ALLOWED {
            return;
        }
        tasks.status_failures = 0;
        while let Some((id, request)) =
            self.queue.as_mut().and_then(|tasks| tasks.queue.start_ready(u32::MAX))
        {
            let completion = self.card.fail(&request, error, 1);
            if let Some(tasks) = self.queue.as_mut() {
                tasks.queue.finish(id);
                tasks.push_failed(completion);
            }
        }
    }

    /// A running task failed (in its response or its transfer): the host's lines are reset, the
    /// card told to drop the task (CMD43), and the task fails alone.
    pub(super) fn fail_task(&mut self, request: Request, active: ActiveCommand<'p>, error: SdError) {
        self.clean_up_after(&error);
        self.fail(request, error, active.attempt);
    }

    /// The running task could not even start.
    fn fail_running(&mut self, request: Request, error: SdError) {
        self.fail(request, error, 1);
    }
}
