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
use super::retune::Retuning;
use crate::sd::block::{self, BlockCard, ReadError, RequestState, SdBlockDevice, BLOCK_BYTES, MAX_ATTEMPTS};
use crate::sd::bus::{BLOCK_TIMEOUT_US, BUSY_TIMEOUT_US};
use crate::sd::command::Command;
use crate::sd::command_queue;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::CardInfo;
use crate::sd::options::{AutoCmd23Request, Cmd23Request, ModeRequest};
use blockdev::{
    check_request, BlockDevice, Completion, DataPath, DmaBuffer, FlushSupport, Geometry, Operation, Request,
    SubmitError,
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

/// How Auto CMD23 failed its probe: commands that failed during it, and the probe read's own
/// failure when retries did not save it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoCmd23Refused {
    pub failed_commands: u64,
    pub read: Option<ReadError>,
}

impl core::fmt::Display for AutoCmd23Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} command(s) failed in two probe reads", self.failed_commands)?;
        if let Some(read) = self.read {
            write!(f, " ({read})")?;
        }
        Ok(())
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

/// One command's share of a request: its blocks, and whether ADMA2 moves them. Twelve bytes:
/// on the strict-alignment kernel targets LLVM copies a value of more than 32 bytes with a call
/// to `memcpy` (`barebench qemu --profile` showed one per request when the request's data
/// travelled in here too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    /// First block of this command, relative to the request.
    first_block: u32,
    blocks: u32,
    dma: bool,
    /// The request's buffer needs cleaning before and invalidating after the transfer (it does
    /// not in the kernel's non-cacheable DMA pool: `Platform::needs_cache_maintenance`).
    cache_maintenance: bool,
}

/// Where the running command is (SDHCI §3.7.1 command issue, §3.7.2 data transfer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Placed by `submit()` (or before a retry), nothing handed to the controller yet.
    Waiting,
    /// CMD23 handed to the controller; waiting for its Command Complete.
    SetBlockCount,
    /// The read or write command handed to the controller; waiting for its Command Complete.
    Command,
    /// Waiting for the data (by PIO, Buffer Read Ready or Buffer Write Ready per block) and
    /// Transfer Complete, which the host raises after its auto-CMD12 when it sends one (SDHCI
    /// §1.15) and, for a write, after the card's busy (SDHCI §2.2.9).
    Data,
}

/// How a command's block count reaches the card ([`SdCard::block_count_ending`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockCountEnding {
    /// One block, or a task the card knows the count of.
    Known,
    /// The host sends CMD12 after the last block (SDHCI §1.15).
    AutoCmd12,
    /// The host sends CMD23 with Argument 2 before the command (SDHCI §1.15, §2.2.5).
    AutoCmd23,
    /// The driver sends CMD23 before the command (SD §4.3.14).
    Cmd23,
}

/// The command in progress.
#[derive(Clone, Copy, Debug)]
struct ActiveCommand<'p> {
    segment: Segment,
    /// The whole request's data, as the CPU reaches it for PIO.
    data: DmaRegion<'p>,
    /// The data command (CMD17, CMD18, CMD24 or CMD25).
    command: Command,
    phase: Phase,
    blocks_done: u32,
    attempt: u32,
    /// When the current phase gives up.
    deadline: Deadline,
}

/// The request: `Running` from `submit()` on, its first command prepared (descriptors written
/// and cleaned) and in [`Phase::Waiting`] until `kick()`, so that it is never moved between
/// states (`Queued` is not used here).
type State<'p> = RequestState<Segment, ActiveCommand<'p>>;

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
    /// Tuning again, for a card run at a tuned timing.
    retuning: Option<Retuning>,
    /// Multi-block ADMA2 transfers announce their count by Auto CMD23 (Auto CMD Enable = 10b,
    /// the count in Argument 2 at 0x00: SDHCI §1.15, §2.2.5) instead of a CMD23 of their own.
    auto_cmd23: bool,
    /// Commands that failed and were cleaned up after (each before a retry or a failure).
    failed_commands: u64,
    /// The card's command queue, when it is on (`sd.cq=on`; [`queued`]).
    queue: Option<queued::Tasks>,
    /// The ADMA2 descriptor table's memory needs cleaning after it is written (asked once: it
    /// is the same table for good).
    descriptors_need_cleaning: bool,
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
        auto_cmd23: AutoCmd23Request,
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
        let auto_cmd23 = auto_cmd23 == AutoCmd23Request::On
            && capabilities.version.at_least_v3()
            && adma.is_some()
            && cmd23.uses_cmd23(card.supports_cmd23());
        let descriptors_need_cleaning =
            adma.as_ref().is_some_and(|table| host.platform().needs_cache_maintenance(&table.buffer()));
        Ok(SdCard {
            descriptors_need_cleaning,
            auto_cmd23,
            failed_commands: 0,
            retuning: Retuning::for_card(&host, &card),
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
    /// Whether multi-block ADMA2 transfers announce their count by Auto CMD23.
    pub fn uses_auto_cmd23(&self) -> bool {
        self.auto_cmd23
    }

    /// Confirms Auto CMD23 with two reads into `probe` (at least 2 blocks, from block 0): a host
    /// that drops it (QEMU 10.0's `sdhci.c` masks Transfer Mode with 0x37; Linux marks such hosts
    /// `SDHCI_QUIRK2_ACMD23_BROKEN`) fails the read, and the device goes on with a CMD23 of its
    /// own. The failure, when there was one.
    pub fn confirm_auto_cmd23(&mut self, probe: DmaBuffer, timeout_us: u64) -> Option<AutoCmd23Refused> {
        if !self.auto_cmd23 {
            return None;
        }
        // Two reads: a host that drops it may still deliver the first one's blocks, leaving the
        // card sending (an open-ended read); the second read's command then fails, even when a
        // retry (after CMD12) brings its data.
        let failed_before = self.failed_commands;
        let blocks = (probe.length_bytes / BLOCK_BYTES as usize) as u32;
        let outcome = (0..2).find_map(|_| self.read_blocking(0, blocks.max(2), probe, timeout_us).err());
        if outcome.is_none() && self.failed_commands == failed_before {
            return None;
        }
        self.auto_cmd23 = false;
        Some(AutoCmd23Refused { failed_commands: self.failed_commands - failed_before, read: outcome })
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
    fn prepare(&mut self, request: &Request, first_block: u32) -> Segment {
        let blocks = (request.block_count - first_block).min(MAX_BLOCKS_PER_COMMAND);
        let platform = self.host.platform();
        let cache_maintenance = platform.needs_cache_maintenance(&request.buffer);
        let mut segment = Segment { first_block, blocks, dma: false, cache_maintenance };
        self.commands += 1;
        let Some(table) = self.adma.as_mut() else {
            return segment;
        };
        let length = (blocks * BLOCK_BYTES) as usize;
        let data = request.buffer.slice((first_block * BLOCK_BYTES) as usize, length);
        let described = data.map(|data| (data, table.describe(&data, length)));
        match described {
            Some((data, Ok(count))) => {
                if self.descriptors_need_cleaning {
                    platform.clean_for_device(&table.descriptors(count));
                }
                if cache_maintenance {
                    // Nothing of the CPU's may be written back over what the device writes.
                    platform.clean_for_device(&data);
                }
                segment.dma = true;
            }
            _ => self.pio_fallbacks += 1,
        }
        segment
    }

    /// The checks every request passes, with the command queue on or off: the card is still
    /// there, the request is a read or a write within the geometry, and its buffer is the
    /// platform's DMA memory (the CPU moves PIO data through it); the buffer as a region.
    fn accept(&self, request: &Request) -> Result<DmaRegion<'p>, SubmitError> {
        if self.gone {
            return Err(SubmitError::DeviceUnusable);
        }
        if !matches!(request.operation, Operation::Read | Operation::Write) {
            return Err(SubmitError::Unsupported);
        }
        check_request(&self.geometry(), request)?;
        DmaRegion::of_buffer(self.host.platform(), request.buffer).map_err(|_| SubmitError::BadBuffer)
    }

    /// `segment`'s data command: the task's CMD46/CMD47 with the queue on, else CMD17, CMD18,
    /// CMD24 or CMD25 at the card's address of its first block.
    fn segment_command(&self, request: &Request, segment: &Segment) -> Command {
        match self.running_task() {
            Some(task) => command_queue::execute_task(request.operation, task, segment.blocks),
            None => {
                let lba = request.lba + u64::from(segment.first_block);
                self.card.data_command(request.operation, lba, segment.blocks)
            }
        }
    }

    /// Makes `segment` of `request` (whose data is `data`) the running request, its command not
    /// yet handed to the controller ([`Phase::Waiting`]).
    fn place(&mut self, request: Request, data: DmaRegion<'p>, segment: Segment, attempt: u32) {
        let command = self.segment_command(&request, &segment);
        // Set when the command is handed over.
        let deadline = Deadline { start_ticks: 0, end_ticks: 0 };
        let active = ActiveCommand {
            segment,
            data,
            command,
            phase: Phase::Waiting,
            blocks_done: 0,
            attempt,
            deadline,
        };
        // Moved field by field: as one 48-byte value the strict-alignment kernel targets copy a
        // request with a call to `memcpy` (LLVM inlines at most four stores there).
        let Request { tag, operation, lba, block_count, buffer } = request;
        self.state = RequestState::Running(Request { tag, operation, lba, block_count, buffer }, active);
    }

    /// Hands the running segment's first command to the controller and returns without waiting:
    /// CMD23 when multi-block transfers are announced, else the data command. Works on the
    /// request where it is, in `self.state`.
    fn start(&mut self) -> Result<(), SdError> {
        if let Some(retuning) =
            self.retuning.as_mut().filter(|retuning| retuning.timer_ran_out(self.host.platform()))
        {
            retuning.retune(&mut self.host);
        }
        let RequestState::Running(_, active) = &self.state else { return Ok(()) };
        let (blocks, dma) = (active.segment.blocks, active.segment.dma);
        let set_block_count = self.block_count_ending(dma, blocks) == BlockCountEnding::Cmd23;
        let deadline = Deadline::after_ticks(self.host.platform(), self.timeouts.command);
        let RequestState::Running(_, active) = &mut self.state else { return Ok(()) };
        active.blocks_done = 0;
        active.deadline = deadline;
        if set_block_count {
            active.phase = Phase::SetBlockCount;
            self.host.issue(&Command::set_block_count(blocks), 0, 0, 0)
        } else {
            active.phase = Phase::Command;
            let command = active.command;
            self.issue_data_command(&command, dma, blocks)
        }
    }

    /// How the card learns where a segment of `blocks` blocks ends: a single block or a task
    /// (whose count the card has from CMD44) needs nothing; a multi-block transfer is ended by
    /// auto-CMD12 unless the card takes CMD23, which goes out as Auto CMD23 for an ADMA2
    /// transfer when the host does that (Argument 2 is the SDMA address register, so never with
    /// SDMA; QEMU's `sdhci.c` starts an SDMA transfer when it is written with SDMA selected),
    /// else as a command of the driver's own.
    fn block_count_ending(&self, dma: bool, blocks: u32) -> BlockCountEnding {
        if blocks <= 1 || self.queue.is_some() {
            BlockCountEnding::Known
        } else if !self.card.uses_cmd23 {
            BlockCountEnding::AutoCmd12
        } else if self.auto_cmd23 && dma {
            BlockCountEnding::AutoCmd23
        } else {
            BlockCountEnding::Cmd23
        }
    }

    /// Programs the DMA (when the segment uses it) and writes the data command, its direction
    /// in the Transfer Mode (SDHCI §2.2.5 Data Transfer Direction Select).
    fn issue_data_command(&mut self, command: &Command, dma: bool, blocks: u32) -> Result<(), SdError> {
        use TRANSFER_MODE_COMMAND::*;
        let mut mode = BLOCK_COUNT_ENABLE::SET;
        if !command.data.is_write() {
            mode += READ::SET;
        }
        let ending = self.block_count_ending(dma, blocks);
        if blocks > 1 {
            mode += MULTI_BLOCK::SET;
        }
        if ending == BlockCountEnding::AutoCmd12 {
            mode += AUTO_COMMAND::Cmd12;
        }
        if let (true, Some(table)) = (dma, self.adma.as_ref()) {
            let select = match table.format() {
                AdmaFormat::Adma2Bits32 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_32,
                AdmaFormat::Adma2Bits64 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_64,
            };
            let address = table.bus_address();
            let wide = table.format() == AdmaFormat::Adma2Bits64;
            self.host.select_dma(select);
            self.host.write(offsets::ADMA_SYSTEM_ADDRESS, address as u32);
            if wide {
                self.host.write(offsets::ADMA_SYSTEM_ADDRESS_HIGH, (address >> 32) as u32);
            }
            mode += DMA_ENABLE::SET;
            if ending == BlockCountEnding::AutoCmd23 {
                // CMD23's argument: the block count (SD §4.3.14; bit 31 reliable write clear).
                self.host.write(offsets::SDMA_ADDRESS, blocks);
                mode += AUTO_COMMAND::Cmd23;
            }
            // The descriptors and the cleaned buffer (Normal memory) are observed by the host
            // before the Command register write (Device memory) that starts its DMA.
            barrier::store_before_doorbell();
        }
        self.host.issue(command, mode.value, BLOCK_BYTES, blocks)
    }

    /// Starts a segment, retrying after recoverable errors; the request fails after
    /// `MAX_ATTEMPTS`.
    fn start_with_retries(&mut self, request: Request, data: DmaRegion<'p>, segment: Segment, attempt: u32) {
        self.place(request, data, segment, attempt);
        self.start_placed();
    }

    /// Starts the running request's placed segment, retrying after recoverable errors; the
    /// request fails after `MAX_ATTEMPTS`.
    fn start_placed(&mut self) {
        while let Err(error) = self.start() {
            let Some((request, active)) = self.running() else { return };
            match self.retry_after(error, active.attempt) {
                Ok(()) => {
                    if let RequestState::Running(_, active) = &mut self.state {
                        active.attempt += 1;
                    }
                }
                Err(error) => return self.fail(request, error, active.attempt),
            }
        }
    }

    /// Cleans up after a failed command: `Ok` when another attempt may follow, else the error
    /// the request fails with (the card's removal, when card detect shows it, before anything
    /// else is sent to a card that is not there).
    fn retry_after(&mut self, error: SdError, attempt: u32) -> Result<(), SdError> {
        if let Some(removed) = self.clean_up_after(&error) {
            return Err(removed);
        }
        if let Some(retuning) = self.retuning.as_mut().filter(|_| Retuning::needed_after(&error)) {
            retuning.retune(&mut self.host);
        }
        if attempt < MAX_ATTEMPTS && !matches!(error, SdError::NoCard { .. }) {
            Ok(())
        } else {
            Err(error)
        }
    }

    /// Cleans up after the running command failed with `error`: the card's removal when card
    /// detect shows it; else the host's lines are reset, a card still sending or receiving is
    /// stopped (CMD12), the running task (with the command queue on) is dropped with CMD43 so
    /// that it fails alone, and the lines are reset again.
    fn clean_up_after(&mut self, error: &SdError) -> Option<SdError> {
        self.failed_commands += 1;
        let interrupt_status = match error {
            SdError::Command(failure) => failure.interrupt_status,
            _ => 0,
        };
        if let Some(removed) = self.removal(interrupt_status) {
            return Some(removed);
        }
        self.host.recover(true);
        block::stop_if_transferring(&mut self.host, self.card.info.rca);
        if let Some(task) = self.running_task() {
            let _ = self.host.send_command(&command_queue::abort_task(task), self.card.info.rca);
        }
        self.host.recover(true);
        None
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
            Ok(()) => self.start_with_retries(request, active.data, active.segment, active.attempt + 1),
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

    /// Looks once at the running command and moves it on as far as it can; never waits. The
    /// request and its command stay where they are in `self.state` while nothing happens, so a
    /// poll that finds the command still running copies nothing (on the strict-alignment kernel
    /// targets a copy of either is a `memcpy` call, `barebench qemu --profile` shows them).
    fn advance(&mut self) {
        let RequestState::Running(_, active) = &self.state else { return };
        match active.phase {
            // Not handed over until `kick()`.
            Phase::Waiting => {}
            Phase::SetBlockCount => self.advance_set_block_count(),
            Phase::Command => self.advance_command(),
            Phase::Data => self.advance_data(None),
        }
    }

    /// The running request and command, copied out: for the paths that leave the running state
    /// (failures, the next command of a split request).
    fn running(&self) -> Option<(Request, ActiveCommand<'p>)> {
        match self.state {
            RequestState::Running(request, active) => Some((request, active)),
            _ => None,
        }
    }

    /// [`Self::command_failure`] of the running command.
    fn running_command_failure(&mut self, error: SdError) {
        if let Some((request, active)) = self.running() {
            self.command_failure(request, active, error);
        }
    }

    /// [`Self::data_failure`] of the running command.
    fn running_data_failure(&mut self, kind: FailureKind, status: u32) {
        if let Some((request, active)) = self.running() {
            self.data_failure(request, active, kind, status);
        }
    }

    /// CMD23's Command Complete: its status checked, the data command handed over.
    fn advance_set_block_count(&mut self) {
        let RequestState::Running(_, active) = &mut self.state else { return };
        let (command, dma, blocks) = (active.command, active.segment.dma, active.segment.blocks);
        let set_block_count = Command::set_block_count(blocks);
        let outcome = match self.host.command_outcome(&set_block_count) {
            Ok(None) if !active.deadline.has_passed(self.host.platform()) => return,
            Ok(None) => Err(self.host.command_timed_out(&set_block_count)),
            Ok(Some(response)) => self
                .host
                .check_card_status(&set_block_count, &response)
                .and_then(|()| self.issue_data_command(&command, dma, blocks)),
            Err(error) => Err(error),
        };
        match (outcome, &mut self.state) {
            (Ok(()), RequestState::Running(_, active)) => {
                active.phase = Phase::Command;
                active.deadline = Deadline::after_ticks(self.host.platform(), self.timeouts.command);
            }
            (Ok(()), _) => {}
            (Err(error), _) => self.running_command_failure(error),
        }
    }

    /// The data command's Command Complete; the data phase follows in the same poll, from the
    /// same read of the interrupt status (an ADMA2 transfer may be complete already). Only a
    /// task's response is read: the card reports a task it cannot run there
    /// (crate::sd::command_queue); a read or write command's status errors end its transfer
    /// with a data error instead.
    fn advance_command(&mut self) {
        let RequestState::Running(_, active) = &self.state else { return };
        let command = active.command;
        let status = match self.host.command_completion(&command) {
            Ok(Some(status)) => status,
            Ok(None) if !active.deadline.has_passed(self.host.platform()) => return,
            Ok(None) => {
                let error = self.host.command_timed_out(&command);
                return self.running_command_failure(error);
            }
            Err(error) => return self.running_command_failure(error),
        };
        if let Some(refusal) = self.queue.is_some().then(|| self.task_refused(&command)).flatten() {
            return self.running_command_failure(refusal);
        }
        let RequestState::Running(_, active) = &mut self.state else { return };
        active.phase = Phase::Data;
        let timeouts = &self.timeouts;
        let mut budget_ticks = if active.segment.dma {
            timeouts.block + u64::from(active.segment.blocks) * timeouts.dma_per_block
        } else {
            timeouts.block
        };
        if command.data.is_write() {
            budget_ticks += timeouts.busy;
        }
        active.deadline = Deadline::after_ticks(self.host.platform(), budget_ticks);
        self.advance_data(Some(status));
    }

    /// Why the card refused the task `command` runs, when its response says it did.
    fn task_refused(&mut self, command: &Command) -> Option<SdError> {
        let response = self.host.response(command);
        if !response.reports_card_status_errors(command) {
            return None;
        }
        let error = self.host.check_card_status(command, &response).err();
        Some(error.unwrap_or(SdError::UnusableCard { reason: "task refused", value: 0 }))
    }

    /// Moves whatever PIO data is ready, then looks for Transfer Complete: in `seen`, the
    /// interrupt status read in this poll already (when no PIO block moved since), else in a
    /// new read. Transfer Complete stays set; the next command's [`SdhciHost::issue`] clears it.
    fn advance_data(&mut self, seen: Option<u32>) {
        let RequestState::Running(_, active) = &mut self.state else { return };
        let dma = active.segment.dma;
        let write = active.command.data.is_write();
        if !dma {
            if let Err(status) = move_ready_blocks(&mut self.host, self.timeouts.block, active, write) {
                return self.running_data_failure(failure_kind(status), status);
            }
        }
        let status = match seen.filter(|_| dma) {
            Some(status) => status,
            None => self.host.read(offsets::INTERRUPT_STATUS),
        };
        // A card pulled out mid-transfer: QEMU still finishes the transfer (with whatever an
        // absent card reads as), a real host stalls; neither delivers the card's data.
        if status & interrupt::CARD_REMOVAL != 0 {
            let attempt = active.attempt;
            if let Some(removed) = self.removal(status) {
                if let Some((request, _)) = self.running() {
                    self.fail(request, removed, attempt);
                }
                return;
            }
        }
        let RequestState::Running(request, active) = &mut self.state else { return };
        if status & interrupt::ALL_ERRORS != 0 {
            return self.running_data_failure(failure_kind(status), status);
        }
        let (first_block, blocks) = (active.segment.first_block, active.segment.blocks);
        let finished = status & interrupt::TRANSFER_COMPLETE != 0 && (dma || active.blocks_done == blocks);
        if !finished {
            if active.deadline.has_passed(self.host.platform()) {
                self.running_data_failure(FailureKind::NoCompletion, status);
            }
            return;
        }
        if dma && !write {
            // No load of the data may be performed before the status load that saw Transfer
            // Complete.
            barrier::load_after_completion();
        }
        let offset = (first_block * BLOCK_BYTES) as usize;
        let data = active
            .segment
            .cache_maintenance
            .then(|| request.buffer.slice(offset, (blocks * BLOCK_BYTES) as usize))
            .flatten();
        // A write leaves the buffer as it was: nothing to make visible to the CPU.
        if let Some(data) = data.filter(|_| !write) {
            if dma {
                // No line the CPU cached while the DMA ran may hide what the device wrote.
                self.host.platform().invalidate_for_cpu(&data);
            } else {
                // The CPU wrote these bytes (PIO): push them to memory, so that a caller's
                // invalidate-after-read (which it does for every device) cannot discard them.
                self.host.platform().clean_for_device(&data);
            }
        }
        let next_block = first_block + blocks;
        if next_block < request.block_count {
            let Some((request, active)) = self.running() else { return };
            let next = self.prepare(&request, next_block);
            self.start_with_retries(request, active.data, next, 1);
        } else {
            let tag = request.tag;
            self.state = RequestState::Done(Completion { tag, result: Ok(()) });
        }
    }
}

/// Moves every PIO block the controller is ready for (has data for a read, room for a write),
/// each block renewing the deadline by `block_ticks`; `Err` with the interrupt status on an
/// error.
fn move_ready_blocks<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    block_ticks: u64,
    active: &mut ActiveCommand<'_>,
    write: bool,
) -> Result<(), u32> {
    while active.blocks_done < active.segment.blocks {
        let offset = ((active.segment.first_block + active.blocks_done) * BLOCK_BYTES) as usize;
        let Some(mut block) = active.data.subregion(offset, BLOCK_BYTES as usize) else {
            break;
        };
        let moved = if write {
            let mut bytes = [0u8; BLOCK_BYTES as usize];
            block.read_bytes(0, &mut bytes);
            host.write_block_if_ready(&bytes)?
        } else {
            host.read_block_if_ready(&mut block)?
        };
        if !moved {
            break;
        }
        active.blocks_done += 1;
        active.deadline = Deadline::after_ticks(host.platform(), block_ticks);
    }
    Ok(())
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
        if !self.gone && !matches!(self.state, RequestState::Idle) {
            return Err((request, SubmitError::QueueFull));
        }
        let data = self.accept(&request).map_err(|error| (request, error))?;
        let segment = self.prepare(&request, 0);
        self.place(request, data, segment, 1);
        Ok(())
    }

    fn kick(&mut self) {
        if self.queue.is_some() {
            return self.kick_tasks();
        }
        if let RequestState::Running(_, ActiveCommand { phase: Phase::Waiting, .. }) = self.state {
            self.start_placed();
        }
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if self.queue.is_some() {
            return self.poll_tasks(completions);
        }
        self.advance();
        self.state.take_completion(completions)
    }

    fn data_path(&self) -> Option<DataPath> {
        Some(DataPath { mode: self.mode.name(), commands: self.commands, pio_fallbacks: self.pio_fallbacks })
    }

    fn flush_support(&self) -> FlushSupport {
        FlushSupport::NoCache(self.card.info.scr.no_flush_reason())
    }
}
