//! Why an NVMe controller, one of its queues or a namespace could not be used, each with the
//! register values that explain it (NVMe Base Specification 1.4 §3.1 controller registers, §4.6
//! completion status).
#![forbid(unsafe_code)]

use super::command::admin_opcode_name;
use super::regs::Capabilities;
use super::status::Status;
use hal::dma::DmaRegionError;
use hal::platform::{DmaAllocationError, UnreachableAddress};

/// What a controller state wait was waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyWait {
    /// CSTS.RDY = 1 after CC.EN = 1.
    Enabled,
    /// CSTS.RDY = 0 after CC.EN = 0.
    Disabled,
}

/// Why the controller (or one of its queues) could not be used. Every variant carries the values
/// that explain it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NvmeError {
    /// CAP reads as all ones: nothing answers at BAR0.
    #[error("no controller answers (CAP = {cap:#018x})")]
    NoController { cap: u64 },
    /// CAP.CSS bit 0 clear.
    #[error("the controller does not support the NVM command set (CAP = {cap:#018x}, CSS = {:#x})", command_sets(.cap))]
    NoNvmCommandSet { cap: u64 },
    /// BAR0 is too small for the doorbells needed.
    #[error("BAR0 is {register_bytes} bytes, the doorbells need {needed_bytes}")]
    RegistersTooSmall { register_bytes: usize, needed_bytes: usize },
    /// CSTS.RDY did not follow CC.EN within CAP.TO.
    #[error("controller not {} after {waited_ms} ms (CAP.TO = {} ms): CAP = {cap:#018x}, CC = {cc:#010x}, CSTS = {csts:#010x}", .waiting_for.goal(), ready_timeout_ms(.cap))]
    NotReady { waiting_for: ReadyWait, waited_ms: u64, cap: u64, cc: u32, csts: u32 },
    /// CSTS.CFS set.
    #[error(
        "controller fatal status (CSTS.CFS = 1): CAP = {cap:#018x}, CC = {cc:#010x}, CSTS = {csts:#010x}"
    )]
    FatalStatus { cap: u64, cc: u32, csts: u32 },
    #[error("{0}")]
    Allocation(DmaAllocationError),
    #[error("{0}")]
    Unreachable(UnreachableAddress),
    /// An admin command did not complete.
    #[error("{} (opcode {opcode:#04x}, cid {command_id}) did not complete in {waited_ms} ms (CSTS = {csts:#010x})", opcode_name(.opcode))]
    AdminTimeout { opcode: u8, command_id: u16, waited_ms: u64, csts: u32 },
    /// An admin command completed with an error status.
    #[error("{} (opcode {opcode:#04x}) failed: {status} (cdw0 {command_specific:#x})", opcode_name(.opcode))]
    AdminFailed { opcode: u8, status: Status, command_specific: u32 },
    /// An admin completion could not be trusted (impossible SQ head).
    #[error("{} (cid {command_id}) completed with an impossible SQ head {reported_head}; not trusted", opcode_name(.opcode))]
    AdminProtocol { opcode: u8, command_id: u16, reported_head: u16 },
    /// An earlier admin timeout left the admin queue in an unknown state.
    #[error("the admin queue is unusable after an earlier timeout")]
    AdminQueueUnusable,
    /// The controller needs SQ/CQ entry sizes other than 64/16 bytes.
    #[error(
        "the controller cannot use 64-byte SQ / 16-byte CQ entries (SQES {sqes:#04x}, CQES {cqes:#04x})"
    )]
    UnsupportedEntrySizes { sqes: u8, cqes: u8 },
    /// All granted I/O queues are in use, or Set Features was not issued.
    #[error("no I/O queue left: the controller granted {granted} queue pairs and all are in use")]
    NoQueueLeft { granted: u16 },
    /// The namespace's format cannot be read by this driver.
    #[error("namespace {namespace_id} unusable: {reason}")]
    UnusableNamespace { namespace_id: u32, reason: NamespaceProblem },
    /// The controller's registers read as all ones: it is gone (removed, or its link is down).
    #[error("the controller is gone (its registers read as all ones)")]
    DeviceGone,
    /// CSTS.SHST did not reach "complete" in time.
    #[error("shutdown not complete after {waited_ms} ms: CC = {cc:#010x}, CSTS = {csts:#010x}")]
    ShutdownTimeout { waited_ms: u64, cc: u32, csts: u32 },
}

impl ReadyWait {
    /// What the controller did not become, for messages.
    fn goal(self) -> &'static str {
        match self {
            ReadyWait::Enabled => "ready",
            ReadyWait::Disabled => "disabled",
        }
    }
}

/// CAP.CSS, the command sets supported (bits 44:37).
fn command_sets(cap: &u64) -> u64 {
    (cap >> 37) & 0xff
}

/// CAP.TO in milliseconds.
fn ready_timeout_ms(cap: &u64) -> u64 {
    Capabilities::decode(*cap).ready_timeout_ms()
}

fn opcode_name(opcode: &u8) -> &'static str {
    admin_opcode_name(*opcode)
}

/// Why a namespace is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NamespaceProblem {
    /// The format in use has an invalid LBA data size.
    #[error("LBA format {format_index} has an invalid data size (LBADS {data_shift})")]
    InvalidFormat { format_index: usize, data_shift: u8 },
    /// Metadata per block: not supported (a separate metadata buffer would be written at MPTR).
    #[error("the LBA format carries {metadata_bytes} bytes of metadata per block, which this driver does not read")]
    Metadata { metadata_bytes: u16 },
    /// One LBA is bigger than the largest command.
    #[error("a {block_bytes}-byte block exceeds the largest transfer ({max_transfer_bytes} bytes)")]
    BlockLargerThanTransfer { block_bytes: u32, max_transfer_bytes: u64 },
    /// NSZE = 0.
    #[error("the namespace has no blocks")]
    Empty,
}

impl From<DmaAllocationError> for NvmeError {
    fn from(error: DmaAllocationError) -> Self {
        NvmeError::Allocation(error)
    }
}

impl From<DmaRegionError> for NvmeError {
    fn from(error: DmaRegionError) -> Self {
        match error {
            DmaRegionError::Allocation(error) => NvmeError::Allocation(error),
            DmaRegionError::Unreachable(error) => NvmeError::Unreachable(error),
        }
    }
}

impl From<UnreachableAddress> for NvmeError {
    fn from(error: UnreachableAddress) -> Self {
        NvmeError::Unreachable(error)
    }
}
