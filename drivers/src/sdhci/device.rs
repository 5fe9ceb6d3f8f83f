//! An SD card behind an SDHCI host as a `blockdev::BlockDevice`: one request in flight, split
//! into commands of at most 65535 blocks (SDHCI §2.2.3 16-bit Block Count), each a CMD17 or a
//! CMD18 ended by auto-CMD12 or announced by CMD23 (SD §4.3.3, §4.3.14; SDHCI §3.7.2 data
//! transfer, §1.15 auto CMD12), moved by PIO in `poll()` or by ADMA2 (SDHCI §1.13), with error
//! recovery and bounded retries (SDHCI §3.10).

use super::adma::{AdmaError, AdmaFormat, DescriptorTable};
use super::bringup::CardInfo;
use super::card::{CardState, CardStatus};
use super::command::Command;
use super::error::{CommandFailure, FailureKind, SdError};
use super::host::{SdhciHost, BLOCK_TIMEOUT_US};
use super::regs::{interrupt, offsets, HOST_CONTROL_POWER, TRANSFER_MODE_COMMAND};
use crate::mmio::RegisterIo;
use crate::platform::{Deadline, Platform};
use blockdev::{
    check_request, BlockDevice, Completion, DmaBuffer, Geometry, Operation, Request, SubmitError,
};

/// The logical block size (SD §4.3.2: 512 bytes for SDHC/SDXC; SDSC is set to 512 with CMD16).
pub const BLOCK_BYTES: u32 = 512;
/// Blocks one command moves at most (16-bit Block Count).
pub const MAX_BLOCKS_PER_COMMAND: u32 = 65_535;
/// Largest request the driver accepts; it splits it into commands itself.
pub const MAX_REQUEST_BLOCKS: u32 = 1 << 20;
/// Attempts per command before the request fails (the first one included).
pub const MAX_ATTEMPTS: u32 = 3;
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

/// What the user asked for (`sd.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModeRequest {
    /// ADMA2 when the capabilities advertise it, PIO otherwise.
    #[default]
    Auto,
    Pio,
    Adma2,
}

/// How multi-block reads end (`sd.cmd23`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cmd23Request {
    /// CMD23 when the SCR lists it, auto-CMD12 otherwise.
    #[default]
    Auto,
    /// CMD23 whatever the SCR says (QEMU's v3 card accepts it without listing it: docs/qemu.md §2).
    On,
    Off,
}

/// Why a device could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSetupError {
    Dma(crate::platform::DmaAllocationError),
    Adma(AdmaError),
}

impl core::fmt::Display for DeviceSetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DeviceSetupError::Dma(error) => write!(f, "{error}"),
            DeviceSetupError::Adma(error) => write!(f, "ADMA2 descriptor table: {error}"),
        }
    }
}

/// A name for the console without an allocator.
#[derive(Clone, Copy)]
struct Name {
    bytes: [u8; 16],
    length: usize,
}

impl Name {
    fn new(text: &str) -> Name {
        let mut bytes = [0u8; 16];
        let mut length = text.len().min(16);
        while !text.is_char_boundary(length) {
            length -= 1;
        }
        bytes[..length].copy_from_slice(&text.as_bytes()[..length]);
        Name { bytes, length }
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.length]).unwrap_or("sd?")
    }
}

/// The command in progress.
#[derive(Clone, Copy, Debug)]
struct ActiveCommand {
    command: Command,
    /// First block of this command, relative to the request.
    first_block: u32,
    blocks: u32,
    blocks_done: u32,
    attempt: u32,
    deadline: Deadline,
    dma: bool,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Idle,
    Queued(Request),
    Running(Request, ActiveCommand),
    Done(Completion),
}

/// The SD card as a block device.
pub struct SdCard<'p, R: RegisterIo, P: Platform> {
    host: SdhciHost<'p, R, P>,
    card: CardInfo,
    name: Name,
    mode: TransferMode,
    use_cmd23: bool,
    adma: Option<DescriptorTable>,
    state: State,
    last_error: Option<SdError>,
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
            let format = AdmaFormat::Adma2Bits32;
            let bytes = DescriptorTable::bytes_for(
                (MAX_BLOCKS_PER_COMMAND * BLOCK_BYTES) as usize,
                AdmaFormat::Adma2Bits64,
            );
            let table = host.platform().allocate_dma(bytes, 4096).map_err(DeviceSetupError::Dma)?;
            adma = Some(
                match DescriptorTable::new(table, format, translation) {
                    Err(AdmaError::Above4GiB { .. }) if capabilities.system_bus_64_bit() => {
                        DescriptorTable::new(table, AdmaFormat::Adma2Bits64, translation)
                    }
                    other => other,
                }
                .map_err(DeviceSetupError::Adma)?,
            );
        }
        let mode = match &adma {
            Some(table) => TransferMode::Adma2(table.format()),
            None => TransferMode::Pio,
        };
        let use_cmd23 = match cmd23 {
            Cmd23Request::Auto => card.scr.supports_cmd23(),
            Cmd23Request::On => true,
            Cmd23Request::Off => false,
        };
        Ok(SdCard {
            host,
            card,
            name: Name::new(name),
            mode,
            use_cmd23,
            adma,
            state: State::Idle,
            last_error: None,
        })
    }

    pub fn card(&self) -> &CardInfo {
        &self.card
    }
    pub fn host(&self) -> &SdhciHost<'p, R, P> {
        &self.host
    }
    pub fn transfer_mode(&self) -> TransferMode {
        self.mode
    }
    pub fn uses_cmd23(&self) -> bool {
        self.use_cmd23
    }
    /// The full description of the last failed request (the block interface only carries a
    /// kind and a code).
    pub fn last_error(&self) -> Option<SdError> {
        self.last_error
    }

    fn data_address(&self, lba: u64) -> u32 {
        if self.card.capacity_class().block_addressed() {
            lba as u32
        } else {
            (lba * u64::from(BLOCK_BYTES)) as u32
        }
    }

    /// Issues the command for `first_block..first_block + blocks` of `request`.
    fn start_command(
        &mut self,
        request: &Request,
        first_block: u32,
        attempt: u32,
    ) -> Result<ActiveCommand, SdError> {
        let blocks = (request.block_count - first_block).min(MAX_BLOCKS_PER_COMMAND);
        let address = self.data_address(request.lba + u64::from(first_block));
        let multi = blocks > 1;
        let command =
            if multi { Command::read_multiple_block(address) } else { Command::read_single_block(address) };
        if multi && self.use_cmd23 {
            self.host.send_command(&Command::set_block_count(blocks), self.card.rca)?;
        }
        use TRANSFER_MODE_COMMAND::*;
        let mut mode = READ::SET + BLOCK_COUNT_ENABLE::SET;
        if multi {
            mode += MULTI_BLOCK::SET;
            if !self.use_cmd23 {
                mode += AUTO_COMMAND::Cmd12;
            }
        }
        let mut dma = false;
        if let Some(table) = self.adma.as_mut() {
            let offset = (first_block * BLOCK_BYTES) as usize;
            let length = (blocks * BLOCK_BYTES) as usize;
            let slice = request.buffer.slice(offset, length);
            // A buffer ADMA2 cannot use (misaligned, out of the window) goes by PIO.
            if slice.is_some_and(|s| table.describe(&s, length).is_ok()) {
                self.host.platform().clean_for_device(table.buffer());
                let address = table.bus_address();
                let select = match table.format() {
                    AdmaFormat::Adma2Bits32 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_32,
                    AdmaFormat::Adma2Bits64 => HOST_CONTROL_POWER::DMA_SELECT::Adma2_64,
                };
                let control = self.host.read(offsets::HOST_CONTROL_POWER);
                let select_mask = HOST_CONTROL_POWER::DMA_SELECT.mask << HOST_CONTROL_POWER::DMA_SELECT.shift;
                self.host.write(offsets::HOST_CONTROL_POWER, (control & !select_mask) | select.value);
                self.host.write(offsets::ADMA_SYSTEM_ADDRESS, address as u32);
                if table.format() == AdmaFormat::Adma2Bits64 {
                    self.host.write(offsets::ADMA_SYSTEM_ADDRESS_HIGH, (address >> 32) as u32);
                }
                if let Some(data) = slice {
                    // Nothing of the CPU's may be written back over what the device writes.
                    self.host.platform().clean_for_device(&data);
                }
                mode += DMA_ENABLE::SET;
                dma = true;
            }
        }
        if dma {
            // The descriptors (Normal memory) before the command write that starts the DMA
            // (Device memory): cache maintenance does not order them.
            crate::barrier::store_before_doorbell();
        }
        self.host.issue(&command, mode.value, BLOCK_BYTES, blocks)?;
        self.host.wait_command_complete(&command)?;
        let budget_us =
            if dma { BLOCK_TIMEOUT_US + u64::from(blocks) * DMA_PER_BLOCK_US } else { BLOCK_TIMEOUT_US };
        Ok(ActiveCommand {
            command,
            first_block,
            blocks,
            blocks_done: 0,
            attempt,
            deadline: Deadline::after_us(self.host.platform(), budget_us),
            dma,
        })
    }

    /// Starts a command, retrying after recoverable errors; the request fails after
    /// `MAX_ATTEMPTS`.
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

    /// Cleans up after a failed command; returns whether another attempt may follow.
    fn retry_after(&mut self, error: &SdError, attempt: u32) -> bool {
        self.host.recover(true);
        // A card still sending data is stopped with CMD12. It is only sent in that state: an
        // illegal CMD12 would leave ILLEGAL_COMMAND in the next response (SD §4.10.1, clear
        // condition B). Errors here do not matter; the retry or the failure report follows.
        let rca = self.card.rca;
        if let Ok(response) = self.host.send_command(&Command::send_status(rca), rca) {
            if matches!(CardStatus(response.short()).state(), CardState::SendingData | CardState::ReceiveData)
            {
                let _ = self.host.send_command(&Command::stop_transmission(), rca);
            }
        }
        self.host.recover(true);
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

    /// A data-phase failure of the running command.
    fn data_failure(&mut self, request: Request, active: ActiveCommand, kind: FailureKind, status: u32) {
        let mut failure = self.host.failure(active.command, kind, status);
        failure.blocks_done = active.blocks_done;
        failure.blocks = active.blocks;
        let error = SdError::Command(failure);
        if self.retry_after(&error, active.attempt) {
            self.start_with_retries(request, active.first_block, active.attempt + 1);
        } else {
            self.fail(request, error, active.attempt);
        }
    }

    /// Moves whatever data is ready and advances the request; never waits.
    fn advance(&mut self, request: Request, mut active: ActiveCommand) {
        if !active.dma {
            while active.blocks_done < active.blocks {
                let offset = ((active.first_block + active.blocks_done) * BLOCK_BYTES) as usize;
                let Some(block) = request.buffer.slice(offset, BLOCK_BYTES as usize) else {
                    break;
                };
                // SAFETY: the buffer belongs to the submitted request, which the caller may
                // not touch until it completes, and no DMA is programmed for it (PIO).
                let bytes = unsafe { block.as_bytes_mut() };
                match self.host.read_block_if_ready(bytes) {
                    Ok(true) => {
                        active.blocks_done += 1;
                        active.deadline = Deadline::after_us(self.host.platform(), BLOCK_TIMEOUT_US);
                    }
                    Ok(false) => break,
                    Err(status) => {
                        let kind = FailureKind::from_interrupt_status(status);
                        return self.data_failure(request, active, kind, status);
                    }
                }
            }
        }
        let status = self.host.read(offsets::INTERRUPT_STATUS);
        if status & interrupt::ALL_ERRORS != 0 {
            let kind = FailureKind::from_interrupt_status(status);
            return self.data_failure(request, active, kind, status);
        }
        let finished =
            status & interrupt::TRANSFER_COMPLETE != 0 && (active.dma || active.blocks_done == active.blocks);
        if !finished {
            if active.deadline.has_passed(self.host.platform()) {
                return self.data_failure(request, active, FailureKind::NoCompletion, status);
            }
            self.state = State::Running(request, active);
            return;
        }
        self.host.write(offsets::INTERRUPT_STATUS, interrupt::TRANSFER_COMPLETE);
        let offset = (active.first_block * BLOCK_BYTES) as usize;
        if let Some(data) = request.buffer.slice(offset, (active.blocks * BLOCK_BYTES) as usize) {
            if active.dma {
                active.blocks_done = active.blocks;
                // Reads of the data only after the status read that showed Transfer Complete.
                crate::barrier::load_after_completion();
                self.host.platform().invalidate_for_cpu(&data);
            } else {
                // The CPU wrote these bytes (PIO): push them to memory, so that a caller's
                // invalidate-after-read (which it does for every device) cannot discard them.
                self.host.platform().clean_for_device(&data);
            }
        }
        let next_block = active.first_block + active.blocks;
        if next_block < request.block_count {
            self.start_with_retries(request, next_block, 1);
        } else {
            self.state = State::Done(Completion { tag: request.tag, result: Ok(()) });
        }
    }

    /// Reads `block_count` blocks at `lba` into `buffer` and waits (bounded) for the result:
    /// for bring-up measurements and tests.
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

/// Why [`SdCard::read_blocking`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    Refused(SubmitError),
    Failed(SdError),
    Timeout,
}

impl core::fmt::Display for ReadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ReadError::Refused(error) => write!(f, "refused: {}", error.name()),
            ReadError::Failed(error) => write!(f, "{error}"),
            ReadError::Timeout => write!(f, "no completion in time"),
        }
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for SdCard<'_, R, P> {
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
