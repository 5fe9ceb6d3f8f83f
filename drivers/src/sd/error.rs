//! The SD protocol's typed errors, each carrying the command and the register values that explain
//! it, and their mapping to the block interface's error kinds (SD §4.10.1 card status; each
//! host maps its own status bits to a [`FailureKind`]: SDHCI §2.2.18 Error Interrupt Status,
//! the sdhost's SDHSTS).
#![forbid(unsafe_code)]

use super::command::Command;
use blockdev::{IoError, IoErrorKind};
use core::fmt;

/// What went wrong with one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// Error Interrupt Status: command timeout (no response).
    CommandTimeout,
    /// Command CRC, end-bit or index error.
    CommandLine,
    /// Data timeout error.
    DataTimeout,
    /// Data CRC or end-bit error.
    DataLine,
    /// Current limit, Auto CMD, ADMA, tuning or vendor error bits.
    HostTransfer,
    /// The card answered with error bits in its status (R1).
    CardStatus,
    /// The controller raised nothing within the driver's own time limit.
    NoCompletion,
    /// The response did not make sense (CMD8 echo, an RCA of zero, tuning never finished).
    BadResponse,
}

impl FailureKind {
    pub fn description(self) -> &'static str {
        match self {
            FailureKind::CommandTimeout => "command timeout",
            FailureKind::CommandLine => "command CRC/end-bit/index error",
            FailureKind::DataTimeout => "data timeout",
            FailureKind::DataLine => "data CRC/end-bit error",
            FailureKind::HostTransfer => "host transfer error",
            FailureKind::CardStatus => "card status error",
            FailureKind::NoCompletion => "no completion in time",
            FailureKind::BadResponse => "unexpected response",
        }
    }

    pub fn io_error_kind(self) -> IoErrorKind {
        match self {
            FailureKind::CommandTimeout | FailureKind::DataTimeout | FailureKind::NoCompletion => {
                IoErrorKind::Timeout
            }
            FailureKind::CommandLine | FailureKind::DataLine => IoErrorKind::Crc,
            FailureKind::CardStatus => IoErrorKind::DeviceStatus,
            FailureKind::HostTransfer => IoErrorKind::Transfer,
            FailureKind::BadResponse => IoErrorKind::Protocol,
        }
    }
}

/// A failed command, with what the controller showed when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandFailure {
    pub command: Command,
    pub kind: FailureKind,
    /// The host's interrupt status (SDHCI word 0x30: Normal (15:0) and Error (31:16) Interrupt
    /// Status; the sdhost's SDHSTS).
    pub interrupt_status: u32,
    /// The host's state register (SDHCI Present State; the sdhost's SDEDM).
    pub present_state: u32,
    /// The card status (R1) for `CardStatus`, the response word otherwise.
    pub response: u32,
    /// Auto CMD Error Status (word 0x3C bits 15:0) and ADMA Error Status (0x54).
    pub auto_command_status: u16,
    pub adma_error_status: u32,
    /// For data commands: blocks moved before the failure, of how many.
    pub blocks_done: u32,
    pub blocks: u32,
    /// Which attempt failed (1-based) when the driver retried.
    pub attempts: u32,
}

/// Why no clock divider fits (a host's SDCLK divider cannot go slow enough).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no SD clock divider gives ≤ {target_hz} Hz from a {base_clock_hz} Hz base clock (slowest {slowest_hz} Hz)")]
pub struct ClockError {
    pub base_clock_hz: u32,
    pub target_hz: u32,
    pub slowest_hz: u32,
}

impl CommandFailure {
    /// The block-interface form: kind, and a code of the command index (bits 31:24) and the
    /// Error Interrupt Status (bits 15:0), or the card status error bits (bits 23:0 of their
    /// top-aligned value) for a card status error.
    pub fn io_error(&self) -> IoError {
        let detail = match self.kind {
            FailureKind::CardStatus => self.response >> 8,
            _ => self.interrupt_status >> 16,
        };
        IoError {
            kind: self.kind.io_error_kind(),
            code: (u32::from(self.command.index) << 24) | (detail & 0x00ff_ffff),
        }
    }
}

impl fmt::Display for CommandFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.command, self.kind.description())?;
        match self.kind {
            FailureKind::CardStatus => write!(f, " (card status {:#010x}", self.response)?,
            _ => write!(
                f,
                " (interrupt status {:#010x}, present state {:#010x}",
                self.interrupt_status, self.present_state
            )?,
        }
        if self.auto_command_status != 0 {
            write!(f, ", auto-CMD status {:#06x}", self.auto_command_status)?;
        }
        if self.adma_error_status != 0 {
            write!(f, ", ADMA error status {:#x}", self.adma_error_status)?;
        }
        write!(f, ")")?;
        if self.blocks > 0 {
            write!(f, " after {} of {} blocks", self.blocks_done, self.blocks)?;
        }
        if self.attempts > 1 {
            write!(f, ", {} attempts", self.attempts)?;
        }
        Ok(())
    }
}

/// Everything that can stop the host or the card from being used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SdError {
    #[error("{0}")]
    Command(CommandFailure),
    /// A controller bit did not reach its state in time (reset, clock stable, inhibit).
    #[error("controller: {waiting_for} not seen after {waited_us} µs (register {register_offset:#04x} = {value:#010x})")]
    Controller { waiting_for: &'static str, register_offset: usize, value: u32, waited_us: u64 },
    /// No card answered (or card detect says none is inserted).
    #[error("no card (present state {present_state:#010x})")]
    NoCard { present_state: u32 },
    /// The card was pulled out: Card Removal raised, or Card Inserted clear while Card State
    /// Stable is set (SDHCI 3.00 §2.2.9, §2.2.17). Its requests fail as device-gone.
    #[error("card removed (present state {present_state:#010x}, interrupt status {interrupt_status:#010x}): the device is gone, its reads fail as device-gone")]
    CardRemoved { present_state: u32, interrupt_status: u32 },
    /// The card answered but cannot be used.
    #[error("card unusable: {reason} ({value:#x})")]
    UnusableCard { reason: &'static str, value: u32 },
    /// The controller cannot do what is needed.
    #[error("host unusable: {reason} ({value:#x})")]
    UnusableHost { reason: &'static str, value: u32 },
    #[error("{0}")]
    Clock(ClockError),
    /// The board's 1.8 V or card-power hook failed.
    #[error("board hook failed: {what} (code {code:#x})")]
    BoardHook { what: &'static str, code: u32 },
}

impl SdError {
    pub fn io_error(&self) -> IoError {
        match self {
            SdError::Command(failure) => failure.io_error(),
            SdError::Controller { value, .. } => IoError { kind: IoErrorKind::Timeout, code: *value },
            SdError::NoCard { present_state } => IoError { kind: IoErrorKind::Timeout, code: *present_state },
            SdError::CardRemoved { present_state, .. } => {
                IoError { kind: IoErrorKind::DeviceGone, code: *present_state }
            }
            SdError::UnusableCard { value, .. } | SdError::UnusableHost { value, .. } => {
                IoError { kind: IoErrorKind::Protocol, code: *value }
            }
            SdError::Clock(error) => IoError { kind: IoErrorKind::Protocol, code: error.target_hz },
            SdError::BoardHook { code, .. } => IoError { kind: IoErrorKind::Transfer, code: *code },
        }
    }
}

impl From<CommandFailure> for SdError {
    fn from(failure: CommandFailure) -> Self {
        SdError::Command(failure)
    }
}

impl From<ClockError> for SdError {
    fn from(error: ClockError) -> Self {
        SdError::Clock(error)
    }
}
