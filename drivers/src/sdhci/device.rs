//! An SD card behind an SDHCI host as a `blockdev::BlockDevice`: one request in flight, split
//! into commands of at most 65535 blocks (SDHCI §2.2.3 16-bit Block Count), each a CMD17/CMD24 or
//! a CMD18/CMD25 ended by auto-CMD12 or announced by CMD23 (SD §4.3.3, §4.3.4, §4.3.14; SDHCI
//! §3.7.2 data transfer, §1.15 auto CMD12), moved by PIO in `poll()` or by ADMA2 (SDHCI §1.13),
//! with error recovery and bounded retries (SDHCI §3.10). A write ends with Transfer Complete,
//! which the host raises only once the card has released its busy signal on DAT0 (SDHCI §2.2.9
//! DAT Line Active), so the next command never meets a card still programming its flash. `kick()` only hands a command to the controller;
//! `poll()` runs each request's state machine one look at the interrupt status at a time.

use super::adma::{AdmaError, AdmaFormat, DescriptorLimit, DescriptorTable};
use super::host::{failure_kind, SdhciHost, COMMAND_TIMEOUT_US};
use super::regs::{interrupt, offsets, HOST_CONTROL_POWER, TRANSFER_MODE_COMMAND};
use crate::sd::block::{self, BlockCard, RequestState, SdBlockDevice, BLOCK_BYTES, MAX_ATTEMPTS};
use crate::sd::bus::{BLOCK_TIMEOUT_US, BUSY_TIMEOUT_US};
use crate::sd::command::Command;
use crate::sd::command_queue;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::CardInfo;
use crate::sd::options::{Cmd23Request, ModeRequest};
use blockdev::{
    check_request, BlockDevice, Completion, DataPath, FlushSupport, Geometry, Operation, Request, SubmitError,
};
use hal::barrier;
use hal::dma::DmaRegion;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

mod queued;

/// Blocks one command moves at most (16-bit Block Count).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 65_535;
/// Time allowed per block for a DMA transfer, on top of one block timeout.
const DMA_PER_BLOCK_US: u64 = 1_000;

/// How data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferMode {
    Pio,
    Adma2(AdmaFormat),
}

impl TransferMode {
    pub fn name(self) -> &'static str {
        match self {
            TransferMode::Pio => "PIO",
            TransferMode::Adma2(format) => format.name(),
        }
    }
}

/// Why a device could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceSetupError {
    #[error("{0}")]
    Dma(hal::platform::DmaAllocationError),
    #[error("ADMA2 descriptor table: {0}")]
    Adma(AdmaError),
}

/// One command's share of a request: its blocks, and whether ADMA2 moves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment<'p> {
    /// First block of this command, relative to the request.
    first_block: u32,
    blocks: u32,
    dma: bool,
    /// The whole request's data, as the CPU reaches it for PIO.
    data: DmaRegion<'p>,
}

/// Where the running command is (SDHCI §3.7.1 command issue, §3.7.2 data transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// CMD23 handed to the controller; waiting for its Command Complete.
    SetBlockCount,
    /// The read or write command handed to the controller; waiting for its Command Complete.
    Command,
    /// Waiting for the data (by PIO, Buffer Read Ready or Buffer Write Ready per block) and
    /// Transfer Complete, which the host raises after its auto-CMD12 when it sends one (SDHCI
    /// §1.15) and, for a write, after the card's busy (SDHCI §2.2.9).
    Data,
}

/// The command in progress.
#[derive(Clone, Copy, Debug)]
struct ActiveCommand<'p> {
    segment: Segment<'p>,
    /// The data command (CMD17, CMD18, CMD24 or CMD25).
    command: Command,
    phase: Phase,
    blocks_done: u32,
    attempt: u32,
    /// When the current phase gives up.
    deadline: Deadline,
}

/// The request: `Queued` once submitted with its first command prepared (descriptors written
/// and cleaned), waiting for `kick()`.
type State<'p> = RequestState<Segment<'p>, ActiveCommand<'p>>;

/// The driver's time limits in timer ticks, converted once (a conversion is a 128-bit
/// division, too dear for every command).
#[derive(Clone, Copy, Debug)]
struct TimeoutTicks {
    command: u64,
    block: u64,
    dma_per_block: u64,
    /// A card's busy after the last block written.
    busy: u64,
}

impl TimeoutTicks {
    fn new<C: blockdev::Clock + ?Sized>(clock: &C) -> TimeoutTicks {
        let ticks = |us: u64| clock.ns_to_ticks(us * 1000);
        TimeoutTicks {
            command: ticks(COMMAND_TIMEOUT_US),
            block: ticks(BLOCK_TIMEOUT_US),
            dma_per_block: ticks(DMA_PER_BLOCK_US),
            busy: ticks(BUSY_TIMEOUT_US),
        }
    }
}

/// The SD card as a block device.
///
/// `submit()` checks the request and prepares its first command (the ADMA2 descriptor table
/// written and cleaned, the data buffer cleaned); `kick()` hands that command to the controller
/// (CMD23 when multi-block reads are announced, else the read command) and returns; `poll()`
/// looks once at the interrupt status and advances the request: Command Complete, the next
/// command after CMD23, data by PIO, Transfer Complete, the next command of a split request,
/// errors with recovery and retries. So `kick()` is the doorbell in the same sense as NVMe's
/// (docs/measurement.md §13).
pub struct SdCard<'p, R: RegisterIo, P: Platform> {
    host: SdhciHost<'p, R, P>,
    card: BlockCard,
    mode: TransferMode,
    adma: Option<DescriptorTable<'p>>,
    state: State<'p>,
    /// The card was removed: requests fail as device-gone and no more are taken.
    gone: bool,
    commands: u64,
    pio_fallbacks: u64,
    timeouts: TimeoutTicks,
    /// The card's command queue, when it is on (`sd.cq=on`; [`queued`]).
    queue: Option<queued::Tasks>,
}

impl<'p, R: RegisterIo, P: Platform> SdCard<'p, R, P> {
    /// Chooses the transfer mode (`ADMA2` needs the capability, a known DMA translation, a
    /// descriptor table the host can reach, and 64-bit support when the table lies above 4 GiB)
    /// and the multi-block ending.
    pub fn new(
        host: SdhciHost<'p, R, P>,
        card: CardInfo,
        name: &str,
        mode: ModeRequest,
        cmd23: Cmd23Request,
    ) -> Result<Self, DeviceSetupError> {
        let capabilities = host.capabilities();
        let translation = match mode {
            ModeRequest::Pio => None,
            ModeRequest::Auto | ModeRequest::Adma2 => host.dma_translation().filter(|_| capabilities.adma2()),
        };
        let mut adma = None;
        if let Some(translation) = translation {
            let limit = host.quirks().adma_descriptor_limit;
            let bytes = DescriptorTable::bytes_for(
                (MAX_BLOCKS_PER_COMMAND * BLOCK_BYTES) as usize,
                AdmaFormat::Adma2Bits64,
                limit,
            );
            let table = DmaRegion::allocate(host.platform(), bytes, 4096).map_err(DeviceSetupError::Dma)?;
            let narrow = DescriptorTable::new(table, AdmaFormat::Adma2Bits32, limit, translation);
            let chosen = match narrow {
                Err(AdmaError::Above4GiB { .. }) if capabilities.system_bus_64_bit() => {
                    DescriptorTable::new(table, AdmaFormat::Adma2Bits64, limit, translation)
                }
                other => other,
            };
            adma = Some(chosen.map_err(DeviceSetupError::Adma)?);
        }
        let mode = match &adma {
            Some(table) => TransferMode::Adma2(table.format()),
            None => TransferMode::Pio,
        };
        Ok(SdCard {
            card: BlockCard::new(card, name, cmd23),
            mode,
            adma,
            state: RequestState::Idle,
            gone: false,
            commands: 0,
            pio_fallbacks: 0,
            queue: None,
            timeouts: TimeoutTicks::new(host.platform()),
            host,
        })
    }

    /// How long a data transfer may go without progress before it fails as a timeout and the
    /// host is recovered (`sd.timeout-ms`; default [`BLOCK_TIMEOUT_US`]).
    pub fn set_data_timeout_ms(&mut self, timeout_ms: u32) {
        self.timeouts.block = self.host.platform().ns_to_ticks(u64::from(timeout_ms) * 1_000_000);
    }

    /// The data timeout in force, ms.
    pub fn data_timeout_ms(&self) -> u64 {
        blockdev::ticks_to_ns(self.timeouts.block, self.host.platform().ticks_per_second()) / 1_000_000
    }

    pub fn host(&self) -> &SdhciHost<'p, R, P> {
        &self.host
    }
    pub fn transfer_mode(&self) -> TransferMode {
        self.mode
    }
    /// What one ADMA2 descriptor carries at most (`None` with PIO).
    pub fn descriptor_limit(&self) -> Option<DescriptorLimit> {
        self.adma.as_ref().map(DescriptorTable::limit)
    }

    /// Prepares the command for the blocks of `request` from `first_block` on (at most
    /// [`MAX_BLOCKS_PER_COMMAND`]): with ADMA2, writes the descriptor table and cleans it and
    /// the data buffer, all before the command that starts the DMA is handed over. A buffer
    /// ADMA2 cannot use (misaligned, outside the window) goes by PIO and is counted.
    fn prepare(&mut self, request: &Request, data: DmaRegion<'p>, first_block: u32) -> Segment<'p> {
        let blocks = (request.block_count - first_block).min(MAX_BLOCKS_PER_COMMAND);
        let mut segment = Segment { first_block, blocks, dma: false, data };
        self.commands += 1;
        let Some(table) = self.adma.as_mut() else {
            return segment;
        };
        let length = (blocks * BLOCK_BYTES) as usize;
        let data = request.buffer.slice((first_block * BLOCK_BYTES) as usize, length);
        let described = data.map(|data| (data, table.describe(&data, length)));
        match described {
            Some((data, Ok(count))) => {
                let platform = self.host.platform();
                platform.clean_for_device(&table.descriptors(count));
                // Nothing of the CPU's may be written back over what the device writes.
                platform.clean_for_device(&data);
                segment.dma = true;
            }
            _ => self.pio_fallbacks += 1,
        }
        segment
    }

    /// Hands `segment`'s first command to the controller and returns without waiting: CMD23
    /// when multi-block transfers are announced, else the data command.
    fn start(
        &mut self,
        request: &Request,
        segment: Segment<'p>,
        attempt: u32,
    ) -> Result<ActiveCommand<'p>, SdError> {
        let lba = request.lba + u64::from(segment.first_block);
        let command = match self.running_task() {
            Some(task) => command_queue::execute_task(request.operation, task, segment.blocks),
            None => self.card.data_command(request.operation, lba, segment.blocks),
        };
        let mut active = ActiveCommand {
            segment,
            command,
            phase: Phase::Command,
            blocks_done: 0,
            attempt,
            deadline: Deadline::after_ticks(self.host.platform(), self.timeouts.command),
        };
        // A task's count is the card's already (CMD44): no CMD23, no CMD12.
        if segment.blocks > 1 && self.card.uses_cmd23 && self.queue.is_none() {
            self.host.issue(&Command::set_block_count(segment.blocks), 0, 0, 0)?;
            active.phase = Phase::SetBlockCount;
        } else {
            self.issue_data_command(&active)?;
        }
        Ok(active)
    }

    /// Programs the DMA (when the segment uses it) and writes the data command, its direction
    /// in the Transfer Mode (SDHCI §2.2.5 Data Transfer Direction Select).
    fn issue_data_command(&mut self, active: &ActiveCommand<'p>) -> Result<(), SdError> {
        use TRANSFER_MODE_COMMAND::*;
        let segment = active.segment;
        let mut mode = BLOCK_COUNT_ENABLE::SET;
        if !active.command.data.is_write() {
            mode += READ::SET;
        }
        if segment.blocks > 1 {
            mode += MULTI_BLOCK::SET;
            if !self.card.uses_cmd23 && self.queue.is_none() {
                mode += AUTO_COMMAND::Cmd12;
            }
        }
        if let (true, Some(table)) = (segment.dma, self.adma.as_ref()) {
            let select = match table.format() {
                AdmaFormat::Adma2Bits32 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_32,
                AdmaFormat::Adma2Bits64 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_64,
            };
            let address = table.bus_address();
            let wide = table.format() == AdmaFormat::Adma2Bits64;
            let control = self.host.read(offsets::HOST_CONTROL_POWER);
            let select_mask = HOST_CONTROL_POWER::DMA_SELECT.mask << HOST_CONTROL_POWER::DMA_SELECT.shift;
            self.host.write(offsets::HOST_CONTROL_POWER, (control & !select_mask) | select.value);
            self.host.write(offsets::ADMA_SYSTEM_ADDRESS, address as u32);
            if wide {
                self.host.write(offsets::ADMA_SYSTEM_ADDRESS_HIGH, (address >> 32) as u32);
            }
            mode += DMA_ENABLE::SET;
            // The descriptors and the cleaned buffer (Normal memory) are observed by the host
            // before the Command register write (Device memory) that starts its DMA.
            barrier::store_before_doorbell();
        }
        self.host.issue(&active.command, mode.value, BLOCK_BYTES, segment.blocks)
    }

    /// Starts a segment, retrying after recoverable errors; the request fails after
    /// `MAX_ATTEMPTS`.
    fn start_with_retries(&mut self, request: Request, segment: Segment<'p>, mut attempt: u32) {
        loop {
            match self.start(&request, segment, attempt) {
                Ok(active) => {
                    self.state = RequestState::Running(request, active);
                    return;
                }
                Err(error) => match self.retry_after(error, attempt) {
                    Ok(()) => attempt += 1,
                    Err(error) => return self.fail(request, error, attempt),
                },
            }
        }
    }

    /// Cleans up after a failed command: `Ok` when another attempt may follow, else the error
    /// the request fails with (the card's removal, when card detect shows it, before anything
    /// else is sent to a card that is not there).
    fn retry_after(&mut self, error: SdError, attempt: u32) -> Result<(), SdError> {
        let interrupt_status = match error {
            SdError::Command(failure) => failure.interrupt_status,
            _ => 0,
        };
        if let Some(removed) = self.removal(interrupt_status) {
            return Err(removed);
        }
        self.host.recover(true);
        block::stop_if_transferring(&mut self.host, self.card.info.rca);
        self.host.recover(true);
        if attempt < MAX_ATTEMPTS && !matches!(error, SdError::NoCard { .. }) {
            Ok(())
        } else {
            Err(error)
        }
    }

    /// The card's removal, if card detect shows it: the host's lines are reset (so that it is
    /// left idle) and the card is marked gone.
    fn removal(&mut self, interrupt_status: u32) -> Option<SdError> {
        let removed = self.host.card_removed(interrupt_status)?;
        self.host.recover(true);
        self.gone = true;
        Some(removed)
    }

    fn fail(&mut self, request: Request, error: SdError, attempts: u32) {
        self.state = RequestState::Done(self.card.fail(&request, error, attempts));
    }

    /// A failure of the running command (already recovered from by the host where it says so):
    /// another attempt of the same segment, or the request fails.
    fn command_failure(&mut self, request: Request, active: ActiveCommand<'p>, error: SdError) {
        if self.queue.is_some() {
            return self.fail_task(request, active, error);
        }
        match self.retry_after(error, active.attempt) {
            Ok(()) => self.start_with_retries(request, active.segment, active.attempt + 1),
            Err(error) => self.fail(request, error, active.attempt),
        }
    }

    /// A data-phase failure of the running command.
    fn data_failure(&mut self, request: Request, active: ActiveCommand<'p>, kind: FailureKind, status: u32) {
        let mut failure = self.host.failure(active.command, kind, status);
        failure.blocks_done = active.blocks_done;
        failure.blocks = active.segment.blocks;
        self.command_failure(request, active, SdError::Command(failure));
    }

    /// Looks once at the running command and moves it on as far as it can; never waits.
    fn advance(&mut self, request: Request, active: ActiveCommand<'p>) {
        match active.phase {
            Phase::SetBlockCount => self.advance_set_block_count(request, active),
            Phase::Command => self.advance_command(request, active),
            Phase::Data => self.advance_data(request, active),
        }
    }

    /// CMD23's Command Complete: its status checked, the data command handed over.
    fn advance_set_block_count(&mut self, request: Request, mut active: ActiveCommand<'p>) {
        let set_block_count = Command::set_block_count(active.segment.blocks);
        let outcome = match self.host.command_outcome(&set_block_count) {
            Ok(None) if !active.deadline.has_passed(self.host.platform()) => {
                self.state = RequestState::Running(request, active);
                return;
            }
            Ok(None) => Err(self.host.command_timed_out(&set_block_count)),
            Ok(Some(response)) => self
                .host
                .check_card_status(&set_block_count, &response)
                .and_then(|()| self.issue_data_command(&active)),
            Err(error) => Err(error),
        };
        match outcome {
            Ok(()) => {
                active.phase = Phase::Command;
                active.deadline = Deadline::after_ticks(self.host.platform(), self.timeouts.command);
                self.state = RequestState::Running(request, active);
            }
            Err(error) => self.command_failure(request, active, error),
        }
    }

    /// The data command's Command Complete; the data phase follows in the same poll.
    fn advance_command(&mut self, request: Request, mut active: ActiveCommand<'p>) {
        match self.host.command_outcome(&active.command) {
            Ok(None) if !active.deadline.has_passed(self.host.platform()) => {
                self.state = RequestState::Running(request, active);
            }
            Ok(None) => {
                let error = self.host.command_timed_out(&active.command);
                self.command_failure(request, active, error);
            }
            // A task the card cannot run says so in its response (crate::sd::command_queue).
            Ok(Some(response))
                if self.queue.is_some() && response.reports_card_status_errors(&active.command) =>
            {
                let error = self.host.check_card_status(&active.command, &response).err();
                self.command_failure(
                    request,
                    active,
                    error.unwrap_or(SdError::UnusableCard { reason: "task refused", value: 0 }),
                );
            }
            Ok(Some(_)) => {
                active.phase = Phase::Data;
                let timeouts = self.timeouts;
                let mut budget_ticks = if active.segment.dma {
                    timeouts.block + u64::from(active.segment.blocks) * timeouts.dma_per_block
                } else {
                    timeouts.block
                };
                if active.command.data.is_write() {
                    budget_ticks += timeouts.busy;
                }
                active.deadline = Deadline::after_ticks(self.host.platform(), budget_ticks);
                self.advance_data(request, active);
            }
            Err(error) => self.command_failure(request, active, error),
        }
    }

    /// Moves whatever PIO data is ready, then looks for Transfer Complete.
    fn advance_data(&mut self, request: Request, mut active: ActiveCommand<'p>) {
        let segment = active.segment;
        let write = active.command.data.is_write();
        if !segment.dma {
            let moved = if write {
                self.write_ready_blocks(&mut active)
            } else {
                self.read_ready_blocks(&mut active)
            };
            if let Err(status) = moved {
                let kind = failure_kind(status);
                return self.data_failure(request, active, kind, status);
            }
        }
        let status = self.host.read(offsets::INTERRUPT_STATUS);
        // A card pulled out mid-transfer: QEMU still finishes the transfer (with whatever an
        // absent card reads as), a real host stalls; neither delivers the card's data.
        if status & interrupt::CARD_REMOVAL != 0 {
            if let Some(removed) = self.removal(status) {
                return self.fail(request, removed, active.attempt);
            }
        }
        if status & interrupt::ALL_ERRORS != 0 {
            let kind = failure_kind(status);
            return self.data_failure(request, active, kind, status);
        }
        let finished = status & interrupt::TRANSFER_COMPLETE != 0
            && (segment.dma || active.blocks_done == segment.blocks);
        if !finished {
            if active.deadline.has_passed(self.host.platform()) {
                return self.data_failure(request, active, FailureKind::NoCompletion, status);
            }
            self.state = RequestState::Running(request, active);
            return;
        }
        self.host.write(offsets::INTERRUPT_STATUS, interrupt::TRANSFER_COMPLETE);
        let offset = (segment.first_block * BLOCK_BYTES) as usize;
        let data = request.buffer.slice(offset, (segment.blocks * BLOCK_BYTES) as usize);
        // A write leaves the buffer as it was: nothing to make visible to the CPU.
        if let Some(data) = data.filter(|_| !write) {
            if segment.dma {
                // No load of the data may be performed before the status load that saw Transfer
                // Complete; then no line the CPU cached while the DMA ran may hide what the
                // device wrote.
                barrier::load_after_completion();
                self.host.platform().invalidate_for_cpu(&data);
            } else {
                // The CPU wrote these bytes (PIO): push them to memory, so that a caller's
                // invalidate-after-read (which it does for every device) cannot discard them.
                self.host.platform().clean_for_device(&data);
            }
        }
        let next_block = segment.first_block + segment.blocks;
        if next_block < request.block_count {
            let next = self.prepare(&request, segment.data, next_block);
            self.start_with_retries(request, next, 1);
        } else {
            self.state = RequestState::Done(Completion { tag: request.tag, result: Ok(()) });
        }
    }

    /// Reads every PIO block the controller has ready; `Err` with the interrupt status on an
    /// error.
    fn read_ready_blocks(&mut self, active: &mut ActiveCommand<'p>) -> Result<(), u32> {
        while active.blocks_done < active.segment.blocks {
            let offset = ((active.segment.first_block + active.blocks_done) * BLOCK_BYTES) as usize;
            let Some(mut block) = active.segment.data.subregion(offset, BLOCK_BYTES as usize) else {
                break;
            };
            if !self.host.read_block_if_ready(&mut block)? {
                break;
            }
            active.blocks_done += 1;
            active.deadline = Deadline::after_ticks(self.host.platform(), self.timeouts.block);
        }
        Ok(())
    }

    /// Writes every PIO block the controller has room for; `Err` with the interrupt status on an
    /// error.
    fn write_ready_blocks(&mut self, active: &mut ActiveCommand<'p>) -> Result<(), u32> {
        while active.blocks_done < active.segment.blocks {
            let offset = ((active.segment.first_block + active.blocks_done) * BLOCK_BYTES) as usize;
            let Some(block) = active.segment.data.subregion(offset, BLOCK_BYTES as usize) else {
                break;
            };
            let mut bytes = [0u8; BLOCK_BYTES as usize];
            block.read_bytes(0, &mut bytes);
            if !self.host.write_block_if_ready(&bytes)? {
                break;
            }
            active.blocks_done += 1;
            active.deadline = Deadline::after_ticks(self.host.platform(), self.timeouts.block);
        }
        Ok(())
    }
}

impl<'p, R: RegisterIo, P: Platform> SdBlockDevice<'p> for SdCard<'p, R, P> {
    type Clock = P;

    fn clock(&self) -> &'p P {
        self.host.platform()
    }
    fn block_card(&self) -> &BlockCard {
        &self.card
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for SdCard<'_, R, P> {
    fn name(&self) -> &str {
        self.card.name()
    }

    fn geometry(&self) -> Geometry {
        match &self.queue {
            Some(queue) => queue.geometry(self.card.geometry()),
            None => self.card.geometry(),
        }
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if self.queue.is_some() {
            return self.submit_task(request);
        }
        if self.gone {
            return Err((request, SubmitError::DeviceUnusable));
        }
        if !matches!(self.state, RequestState::Idle) {
            return Err((request, SubmitError::QueueFull));
        }
        if !matches!(request.operation, Operation::Read | Operation::Write) {
            return Err((request, SubmitError::Unsupported));
        }
        check_request(&self.geometry(), &request).map_err(|error| (request, error))?;
        // The CPU moves the data by PIO, so it must be the platform's DMA memory.
        let Ok(data) = DmaRegion::of_buffer(self.host.platform(), request.buffer) else {
            return Err((request, SubmitError::BadBuffer));
        };
        let segment = self.prepare(&request, data, 0);
        self.state = RequestState::Queued(request, segment);
        Ok(())
    }

    fn kick(&mut self) {
        if self.queue.is_some() {
            return self.kick_tasks();
        }
        if let RequestState::Queued(request, segment) = self.state {
            self.start_with_retries(request, segment, 1);
        }
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if self.queue.is_some() {
            return self.poll_tasks(completions);
        }
        if let RequestState::Running(request, active) = self.state {
            self.advance(request, active);
        }
        self.state.take_completion(completions)
    }

    fn data_path(&self) -> Option<DataPath> {
        Some(DataPath { mode: self.mode.name(), commands: self.commands, pio_fallbacks: self.pio_fallbacks })
    }

    fn flush_support(&self) -> FlushSupport {
        FlushSupport::NoCache(self.card.info.scr.no_flush_reason())
    }
}
