//! An SD card behind the BCM2835 sdhost as a `blockdev::BlockDevice`: one request in flight,
//! split into commands of at most 511 blocks (the 9-bit SDHBLC), each a CMD17, or a CMD18
//! announced by CMD23 or ended by CMD12 (the sdhost has no auto-CMD12), its data read by PIO from
//! the FIFO in `poll()`; failed commands are retried a bounded number of times (SD §4.3.3,
//! §4.3.14; Linux `drivers/mmc/host/bcm2835.c` for the controller's side).

use super::host::SdhostHost;
use super::regs::MAX_BLOCKS_PER_COMMAND;
use crate::mmio::RegisterIo;
use crate::platform::{Deadline, Platform};
use crate::sdhci::bringup::CardInfo;
use crate::sdhci::card::{CardState, CardStatus};
use crate::sdhci::card_bus::CardBus;
use crate::sdhci::command::Command;
use crate::sdhci::device::{Cmd23Request, Name, ReadError, BLOCK_BYTES, MAX_ATTEMPTS, MAX_REQUEST_BLOCKS};
use crate::sdhci::error::{CommandFailure, FailureKind, SdError};
use crate::sdhci::host::BLOCK_TIMEOUT_US;
use blockdev::{
    check_request, BlockDevice, Completion, DmaBuffer, Geometry, Operation, Request, SubmitError,
};

/// The command in progress.
#[derive(Clone, Copy, Debug)]
struct ActiveCommand {
    command: Command,
    /// First block of this command, relative to the request.
    first_block: u32,
    blocks: u32,
    words_done: usize,
    attempt: u32,
    deadline: Deadline,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Idle,
    Queued(Request),
    Running(Request, ActiveCommand),
    Done(Completion),
}

/// The SD card on the sdhost as a block device.
pub struct SdhostCard<'p, R: RegisterIo, P: Platform> {
    host: SdhostHost<'p, R, P>,
    card: CardInfo,
    name: Name,
    use_cmd23: bool,
    state: State,
    last_error: Option<SdError>,
}

impl<'p, R: RegisterIo, P: Platform> SdhostCard<'p, R, P> {
    pub fn new(host: SdhostHost<'p, R, P>, card: CardInfo, name: &str, cmd23: Cmd23Request) -> Self {
        let use_cmd23 = match cmd23 {
            Cmd23Request::Auto => card.scr.supports_cmd23(),
            Cmd23Request::On => true,
            Cmd23Request::Off => false,
        };
        SdhostCard { host, card, name: Name::new(name), use_cmd23, state: State::Idle, last_error: None }
    }

    pub fn card(&self) -> &CardInfo {
        &self.card
    }
    pub fn host(&self) -> &SdhostHost<'p, R, P> {
        &self.host
    }
    pub fn host_platform(&self) -> &'p P {
        self.host.platform()
    }
    pub fn uses_cmd23(&self) -> bool {
        self.use_cmd23
    }
    /// The full description of the last failed request.
    pub fn last_error(&self) -> Option<SdError> {
        self.last_error
    }

    fn start_command(
        &mut self,
        request: &Request,
        first_block: u32,
        attempt: u32,
    ) -> Result<ActiveCommand, SdError> {
        let blocks = (request.block_count - first_block).min(MAX_BLOCKS_PER_COMMAND);
        let address = self.card.data_address(request.lba + u64::from(first_block));
        let command = if blocks > 1 {
            Command::read_multiple_block(address)
        } else {
            Command::read_single_block(address)
        };
        if blocks > 1 && self.use_cmd23 {
            self.host.send_command(&Command::set_block_count(blocks), self.card.rca)?;
        }
        self.host.issue(&command, BLOCK_BYTES, blocks)?;
        self.host.wait_command_complete(&command)?;
        Ok(ActiveCommand {
            command,
            first_block,
            blocks,
            words_done: 0,
            attempt,
            deadline: Deadline::after_us(self.host.platform(), BLOCK_TIMEOUT_US),
        })
    }

    fn start_with_retries(&mut self, request: Request, first_block: u32, mut attempt: u32) {
        loop {
            match self.start_command(&request, first_block, attempt) {
                Ok(active) => {
                    self.state = State::Running(request, active);
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
        let rca = self.card.rca;
        if let Ok(response) = self.host.send_command(&Command::send_status(rca), rca) {
            if matches!(CardStatus(response.short()).state(), CardState::SendingData | CardState::ReceiveData)
            {
                let _ = self.host.send_command(&Command::stop_transmission(), rca);
            }
        }
        self.host.recover();
        attempt < MAX_ATTEMPTS && !matches!(error, SdError::NoCard { .. })
    }

    fn fail(&mut self, request: Request, error: SdError, attempts: u32) {
        let error = match error {
            SdError::Command(failure) => SdError::Command(CommandFailure { attempts, ..failure }),
            other => other,
        };
        self.last_error = Some(error);
        self.state = State::Done(Completion { tag: request.tag, result: Err(error.io_error()) });
    }

    fn data_failure(&mut self, request: Request, active: ActiveCommand, kind: FailureKind, host_status: u32) {
        let mut failure = self.host.failure(active.command, kind, host_status);
        failure.blocks_done = (active.words_done * 4 / BLOCK_BYTES as usize) as u32;
        failure.blocks = active.blocks;
        let error = SdError::Command(failure);
        if self.retry_after(&error, active.attempt) {
            self.start_with_retries(request, active.first_block, active.attempt + 1);
        } else {
            self.fail(request, error, active.attempt);
        }
    }

    /// Moves whatever the FIFO holds and advances the request; never waits for data.
    fn advance(&mut self, request: Request, mut active: ActiveCommand) {
        let offset = (active.first_block * BLOCK_BYTES) as usize;
        let length = (active.blocks * BLOCK_BYTES) as usize;
        let Some(data) = request.buffer.slice(offset, length) else {
            return self.data_failure(request, active, FailureKind::BadResponse, 0);
        };
        // SAFETY: the buffer belongs to the submitted request, which the caller may not touch
        // until it completes, and no DMA is programmed for it (PIO).
        let bytes = unsafe { data.as_bytes_mut() };
        let before = active.words_done;
        if let Err(host_status) = self.host.read_fifo(bytes, &mut active.words_done) {
            return self.data_failure(request, active, SdhostHost::<R, P>::kind_of(host_status), host_status);
        }
        if active.words_done < length / 4 {
            if active.words_done != before {
                active.deadline = Deadline::after_us(self.host.platform(), BLOCK_TIMEOUT_US);
            } else if active.deadline.has_passed(self.host.platform()) {
                return self.data_failure(request, active, FailureKind::NoCompletion, 0);
            }
            self.state = State::Running(request, active);
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
        self.host.platform().clean_for_device(&data);
        let next_block = active.first_block + active.blocks;
        if next_block < request.block_count {
            self.start_with_retries(request, next_block, 1);
        } else {
            self.state = State::Done(Completion { tag: request.tag, result: Ok(()) });
        }
    }

    /// The end of a command's data: the state machine back in data mode, and an open-ended
    /// CMD18 stopped with CMD12.
    fn finish_command(&mut self, active: &ActiveCommand) -> Result<(), SdError> {
        if active.blocks > 1 && !self.use_cmd23 {
            self.host.finish_data(&active.command)?;
            self.host.send_command(&Command::stop_transmission(), self.card.rca)?;
            return Ok(());
        }
        self.host.finish_data(&active.command)
    }

    /// Reads `block_count` blocks at `lba` into `buffer` and waits (bounded) for the result.
    pub fn read_blocking(
        &mut self,
        lba: u64,
        block_count: u32,
        buffer: DmaBuffer,
        timeout_us: u64,
    ) -> Result<(), ReadError> {
        let request = Request { tag: 0, operation: Operation::Read, lba, block_count, buffer };
        self.submit(request).map_err(|(_, error)| ReadError::Refused(error))?;
        self.kick();
        let deadline = Deadline::after_us(self.host.platform(), timeout_us);
        let mut completions = [Completion::default()];
        loop {
            if self.poll(&mut completions) == 1 {
                return completions[0].result.map_err(|_| {
                    ReadError::Failed(
                        self.last_error
                            .unwrap_or(SdError::UnusableCard { reason: "unknown failure", value: 0 }),
                    )
                });
            }
            if deadline.has_passed(self.host.platform()) {
                return Err(ReadError::Timeout);
            }
        }
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for SdhostCard<'_, R, P> {
    fn name(&self) -> &str {
        self.name.as_str()
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            logical_block_bytes: BLOCK_BYTES,
            block_count: self.card.capacity_bytes() / u64::from(BLOCK_BYTES),
            max_request_blocks: MAX_REQUEST_BLOCKS,
            max_in_flight: 1,
        }
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if !matches!(self.state, State::Idle) {
            return Err((request, SubmitError::QueueFull));
        }
        if request.operation != Operation::Read {
            return Err((request, SubmitError::Unsupported));
        }
        check_request(&self.geometry(), &request).map_err(|error| (request, error))?;
        self.state = State::Queued(request);
        Ok(())
    }

    fn kick(&mut self) {
        if let State::Queued(request) = self.state {
            self.start_with_retries(request, 0, 1);
        }
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if let State::Running(request, active) = self.state {
            self.advance(request, active);
        }
        match self.state {
            State::Done(completion) if !completions.is_empty() => {
                completions[0] = completion;
                self.state = State::Idle;
                1
            }
            _ => 0,
        }
    }
}
