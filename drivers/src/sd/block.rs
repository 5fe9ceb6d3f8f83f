//! What every SD host's block device shares (`blockdev::BlockDevice` over an identified card):
//! the block size and limits, the data command for a request's blocks (SD Physical Layer
//! Simplified Specification v9.00 §4.3.3, §4.3.4), the request's life from submission to
//! completion, a failed request's record, the CMD13/CMD12 clean-up after a failed transfer
//! (§4.10.1), and one read waited for. The hosts move the data; how is theirs (SDHCI PIO or
//! ADMA2, the sdhost's FIFO).
#![forbid(unsafe_code)]

use super::bus::CardBus;
use super::card_registers::{CardState, CardStatus};
use super::command::Command;
use super::error::{CommandFailure, FailureKind, SdError};
use super::identify::CardInfo;
use super::options::Cmd23Request;
use blockdev::blocking::{complete_one, WaitError};
use blockdev::{BlockDevice, Completion, DmaBuffer, Geometry, Operation, Request, SubmitError};

/// The logical block size (SD §4.3.2: 512 bytes for SDHC/SDXC; SDSC is set to 512 with CMD16).
pub const BLOCK_BYTES: u32 = 512;
/// Largest request the drivers accept; each host splits it into commands itself.
pub const MAX_REQUEST_BLOCKS: u32 = 1 << 20;
/// Attempts per command before the request fails (the first one included).
pub const MAX_ATTEMPTS: u32 = 3;

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

/// The card behind a block device: what identification found, the device's name, whether
/// multi-block transfers are announced with CMD23, and the last failure in full.
pub struct BlockCard {
    pub info: CardInfo,
    name: Name,
    pub uses_cmd23: bool,
    last_error: Option<SdError>,
    /// The block interface's view of the card, worked out once from the CSD (every request is
    /// checked against it).
    geometry: Geometry,
}

impl BlockCard {
    pub fn new(info: CardInfo, name: &str, cmd23: Cmd23Request) -> BlockCard {
        let uses_cmd23 = cmd23.uses_cmd23(info.supports_cmd23());
        let geometry = Geometry {
            logical_block_bytes: BLOCK_BYTES,
            block_count: info.capacity_bytes() / u64::from(BLOCK_BYTES),
            max_request_blocks: MAX_REQUEST_BLOCKS,
            max_in_flight: 1,
        };
        BlockCard { info, name: Name::new(name), uses_cmd23, last_error: None, geometry }
    }

    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The block interface's view of the card: 512-byte blocks, one request at a time.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The command that moves `blocks` blocks from block `lba` on: CMD17/CMD24 for one block,
    /// CMD18/CMD25 for more, at the card's data address of `lba`.
    pub fn data_command(&self, operation: Operation, lba: u64, blocks: u32) -> Command {
        let address = self.info.data_address(lba);
        match (operation == Operation::Write, blocks > 1) {
            (false, false) => Command::read_single_block(address),
            (false, true) => Command::read_multiple_block(address),
            (true, false) => Command::write_single_block(address),
            (true, true) => Command::write_multiple_block(address),
        }
    }

    /// Records a failed request's error with the attempts it took; its completion.
    pub fn fail(&mut self, request: &Request, error: SdError, attempts: u32) -> Completion {
        let error = match error {
            SdError::Command(failure) => SdError::Command(CommandFailure { attempts, ..failure }),
            other => other,
        };
        self.last_error = Some(error);
        Completion { tag: request.tag, result: Err(error.io_error()) }
    }

    pub fn last_error(&self) -> Option<SdError> {
        self.last_error
    }
}

/// Where the one request a card takes is: `Queued` carries what the host prepared at
/// submission, `Running` the command in progress.
#[derive(Clone, Copy, Debug)]
pub enum RequestState<Prepared, Active> {
    Idle,
    Queued(Request, Prepared),
    Running(Request, Active),
    Done(Completion),
}

impl<Prepared, Active> RequestState<Prepared, Active> {
    /// Hands a finished request's completion over (when there is room for it), leaving the card
    /// idle; how many completions it wrote (0 or 1).
    pub fn take_completion(&mut self, completions: &mut [Completion]) -> usize {
        match self {
            RequestState::Done(completion) if !completions.is_empty() => {
                completions[0] = *completion;
                *self = RequestState::Idle;
                1
            }
            _ => 0,
        }
    }
}

/// After a failed transfer: a card still sending or receiving data is stopped with CMD12. It is
/// only sent in that state: an illegal CMD12 would leave ILLEGAL_COMMAND in the next response
/// (SD §4.10.1, clear condition B). Errors here do not matter; the retry or the failure report
/// follows.
pub fn stop_if_transferring<B: CardBus>(host: &mut B, rca: u16) {
    // The status may carry the failed command's error bits (ILLEGAL_COMMAND is reported in the
    // next response, SD §4.10.1 clear condition B): its state still counts.
    let status = match host.send_command(&Command::send_status(rca), rca) {
        Ok(response) => response.short(),
        Err(SdError::Command(failure)) if failure.kind == FailureKind::CardStatus => failure.response,
        Err(_) => return,
    };
    if matches!(CardStatus(status).state(), CardState::SendingData | CardState::ReceiveData) {
        let _ = host.send_command(&Command::stop_transmission(), rca);
    }
}

/// Why [`SdBlockDevice::read_blocking`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("refused: {}", .0.name())]
    Refused(SubmitError),
    #[error("{0}")]
    Failed(SdError),
    #[error("no completion in time")]
    Timeout,
}

/// A failed read whose device kept no description of why.
const UNKNOWN_FAILURE: SdError = SdError::UnusableCard { reason: "unknown failure", value: 0 };

/// An SD card on either host as a block device, with what its users need beyond the block
/// interface: the card, the last failure in full, and one read waited for.
pub trait SdBlockDevice<'p>: BlockDevice {
    type Clock: blockdev::Clock + 'p;

    /// The clock the device's deadlines run on.
    fn clock(&self) -> &'p Self::Clock;
    fn block_card(&self) -> &BlockCard;

    fn card(&self) -> &CardInfo {
        &self.block_card().info
    }
    /// Whether multi-block transfers are announced with CMD23.
    fn uses_cmd23(&self) -> bool {
        self.block_card().uses_cmd23
    }
    /// The full description of the last failed request (the block interface only carries a
    /// kind and a code).
    fn last_error(&self) -> Option<SdError> {
        self.block_card().last_error
    }

    /// Reads `block_count` blocks at `lba` into `buffer` and waits (bounded) for the result: for
    /// bring-up measurements and tests. A failed read reports the device's last error.
    fn read_blocking(
        &mut self,
        lba: u64,
        block_count: u32,
        buffer: DmaBuffer,
        timeout_us: u64,
    ) -> Result<(), ReadError> {
        let clock = self.clock();
        let request = Request { tag: 0, operation: Operation::Read, lba, block_count, buffer };
        match complete_one(self, clock, request, timeout_us) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(ReadError::Failed(self.last_error().unwrap_or(UNKNOWN_FAILURE))),
            Err(WaitError::Refused(error)) => Err(ReadError::Refused(error)),
            Err(WaitError::Timeout) => Err(ReadError::Timeout),
        }
    }
}
