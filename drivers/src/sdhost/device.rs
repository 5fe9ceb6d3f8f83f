//! An SD card behind the BCM2835 sdhost as a `blockdev::BlockDevice`: one request in flight,
//! split into commands of at most 511 blocks (the 9-bit SDHBLC), each a CMD17, or a CMD18
//! announced by CMD23 or ended by CMD12 (the sdhost has no auto-CMD12), its data read by PIO from
//! the FIFO in `poll()`; failed commands are retried a bounded number of times (SD §4.3.3,
//! §4.3.14; Linux `drivers/mmc/host/bcm2835.c` for the controller's side).

use super::host::{failure_kind, SdhostHost};
use super::regs::MAX_BLOCKS_PER_COMMAND;
use crate::sd::block::{self, BlockCard, RequestState, SdBlockDevice, BLOCK_BYTES, MAX_ATTEMPTS};
use crate::sd::bus::{CardBus, BLOCK_TIMEOUT_US};
use crate::sd::command::Command;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::CardInfo;
use crate::sd::options::Cmd23Request;
use blockdev::{check_request, BlockDevice, Completion, Geometry, Operation, Request, SubmitError};
use hal::dma::DmaRegion;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// The command in progress.
#[derive(Clone, Copy, Debug)]
struct ActiveCommand<'p> {
    command: Command,
    /// The whole request's data, as the CPU reaches it for PIO.
    data: DmaRegion<'p>,
    /// First block of this command, relative to the request.
    first_block: u32,
    blocks: u32,
    words_done: usize,
    attempt: u32,
    deadline: Deadline,
}

/// The request: at submission, its data as the CPU reaches it.
type State<'p> = RequestState<DmaRegion<'p>, ActiveCommand<'p>>;

/// The SD card on the sdhost as a block device.
pub struct SdhostCard<'p, R: RegisterIo, P: Platform> {
    host: SdhostHost<'p, R, P>,
    card: BlockCard,
    state: State<'p>,
}

impl<'p, R: RegisterIo, P: Platform> SdhostCard<'p, R, P> {
    pub fn new(host: SdhostHost<'p, R, P>, card: CardInfo, name: &str, cmd23: Cmd23Request) -> Self {
        SdhostCard { host, card: BlockCard::new(card, name, cmd23), state: RequestState::Idle }
    }

    pub fn host(&self) -> &SdhostHost<'p, R, P> {
        &self.host
    }

    fn start_command(
        &mut self,
        request: &Request,
        data: DmaRegion<'p>,
        first_block: u32,
        attempt: u32,
    ) -> Result<ActiveCommand<'p>, SdError> {
        let blocks = (request.block_count - first_block).min(MAX_BLOCKS_PER_COMMAND);
        let command = self.card.data_command(request.operation, request.lba + u64::from(first_block), blocks);
        if blocks > 1 && self.card.uses_cmd23 {
            self.host.send_command(&Command::set_block_count(blocks), self.card.info.rca)?;
        }
        self.host.issue(&command, BLOCK_BYTES, blocks)?;
        self.host.wait_command_complete(&command)?;
        Ok(ActiveCommand {
            command,
            data,
            first_block,
            blocks,
            words_done: 0,
            attempt,
            deadline: Deadline::after_us(self.host.platform(), BLOCK_TIMEOUT_US),
        })
    }

    fn start_with_retries(
        &mut self,
        request: Request,
        data: DmaRegion<'p>,
        first_block: u32,
        mut attempt: u32,
    ) {
        loop {
            match self.start_command(&request, data, first_block, attempt) {
                Ok(active) => {
                    self.state = RequestState::Running(request, active);
                    return;
                }
                Err(error) => {
                    if !self.retry_after(&error, attempt) {
                        self.fail(request, error, attempt);
                        return;
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Cleans up after a failed command (status, FIFO, state machine; CMD12 only when the card
    /// is still sending, as an illegal CMD12 would flag the next response); whether to retry.
    fn retry_after(&mut self, error: &SdError, attempt: u32) -> bool {
        self.host.recover();
        block::stop_if_transferring(&mut self.host, self.card.info.rca);
        self.host.recover();
        attempt < MAX_ATTEMPTS && !matches!(error, SdError::NoCard { .. })
    }

    fn fail(&mut self, request: Request, error: SdError, attempts: u32) {
        self.state = RequestState::Done(self.card.fail(&request, error, attempts));
    }

    fn data_failure(
        &mut self,
        request: Request,
        active: ActiveCommand<'p>,
        kind: FailureKind,
        host_status: u32,
    ) {
        let mut failure = self.host.failure(active.command, kind, host_status);
        failure.blocks_done = (active.words_done * 4 / BLOCK_BYTES as usize) as u32;
        failure.blocks = active.blocks;
        let error = SdError::Command(failure);
        if self.retry_after(&error, active.attempt) {
            self.start_with_retries(request, active.data, active.first_block, active.attempt + 1);
        } else {
            self.fail(request, error, active.attempt);
        }
    }

    /// Moves whatever the FIFO holds and advances the request; never waits for data.
    fn advance(&mut self, request: Request, mut active: ActiveCommand<'p>) {
        let offset = (active.first_block * BLOCK_BYTES) as usize;
        let length = (active.blocks * BLOCK_BYTES) as usize;
        let Some(mut target) = active.data.subregion(offset, length) else {
            return self.data_failure(request, active, FailureKind::BadResponse, 0);
        };
        let before = active.words_done;
        if let Err(host_status) = self.host.read_fifo(&mut target, &mut active.words_done) {
            return self.data_failure(request, active, failure_kind(host_status), host_status);
        }
        if active.words_done < length / 4 {
            if active.words_done != before {
                active.deadline = Deadline::after_us(self.host.platform(), BLOCK_TIMEOUT_US);
            } else if active.deadline.has_passed(self.host.platform()) {
                return self.data_failure(request, active, FailureKind::NoCompletion, 0);
            }
            self.state = RequestState::Running(request, active);
            return;
        }
        if let Err(error) = self.finish_command(&active) {
            if let SdError::Command(failure) = error {
                return self.data_failure(request, active, failure.kind, failure.interrupt_status);
            }
            return self.fail(request, error, active.attempt);
        }
        // The CPU wrote these bytes (PIO): push them to memory, so that a caller's
        // invalidate-after-read cannot discard them.
        self.host.platform().clean_for_device(&target.buffer());
        let next_block = active.first_block + active.blocks;
        if next_block < request.block_count {
            self.start_with_retries(request, active.data, next_block, 1);
        } else {
            self.state = RequestState::Done(Completion { tag: request.tag, result: Ok(()) });
        }
    }

    /// The end of a command's data: the state machine back in data mode, and an open-ended
    /// CMD18 stopped with CMD12.
    fn finish_command(&mut self, active: &ActiveCommand<'p>) -> Result<(), SdError> {
        if active.blocks > 1 && !self.card.uses_cmd23 {
            self.host.finish_data(&active.command)?;
            self.host.send_command(&Command::stop_transmission(), self.card.info.rca)?;
            return Ok(());
        }
        self.host.finish_data(&active.command)
    }
}

impl<'p, R: RegisterIo, P: Platform> SdBlockDevice<'p> for SdhostCard<'p, R, P> {
    type Clock = P;

    fn clock(&self) -> &'p P {
        self.host.platform()
    }
    fn block_card(&self) -> &BlockCard {
        &self.card
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for SdhostCard<'_, R, P> {
    fn name(&self) -> &str {
        self.card.name()
    }

    fn geometry(&self) -> Geometry {
        self.card.geometry()
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if !matches!(self.state, RequestState::Idle) {
            return Err((request, SubmitError::QueueFull));
        }
        if request.operation != Operation::Read {
            return Err((request, SubmitError::Unsupported));
        }
        check_request(&self.geometry(), &request).map_err(|error| (request, error))?;
        // The CPU moves the data from the FIFO, so it must be the platform's DMA memory.
        let Ok(data) = DmaRegion::of_buffer(self.host.platform(), request.buffer) else {
            return Err((request, SubmitError::BadBuffer));
        };
        self.state = RequestState::Queued(request, data);
        Ok(())
    }

    fn kick(&mut self) {
        if let RequestState::Queued(request, data) = self.state {
            self.start_with_retries(request, data, 0, 1);
        }
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if let RequestState::Running(request, active) = self.state {
            self.advance(request, active);
        }
        self.state.take_completion(completions)
    }
}
