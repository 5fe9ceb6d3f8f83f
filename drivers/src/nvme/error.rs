//! Why an NVMe controller, one of its queues or a namespace could not be used, each with the
//! register values that explain it (NVMe Base Specification 1.4 §3.1 controller registers, §4.6
//! completion status).
#![forbid(unsafe_code)]

use super::command::admin_opcode_name;
use super::regs::Capabilities;
use super::status::Status;
use core::fmt;
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmeError {
    /// CAP reads as all ones: nothing answers at BAR0.
    NoController {
        cap: u64,
    },
    /// CAP.CSS bit 0 clear.
    NoNvmCommandSet {
        cap: u64,
    },
    /// BAR0 is too small for the doorbells needed.
    RegistersTooSmall {
        register_bytes: usize,
        needed_bytes: usize,
    },
    /// CSTS.RDY did not follow CC.EN within CAP.TO.
    NotReady {
        waiting_for: ReadyWait,
        waited_ms: u64,
        cap: u64,
        cc: u32,
        csts: u32,
    },
    /// CSTS.CFS set.
    FatalStatus {
        cap: u64,
        cc: u32,
        csts: u32,
    },
    Allocation(DmaAllocationError),
    Unreachable(UnreachableAddress),
    /// An admin command did not complete.
    AdminTimeout {
        opcode: u8,
        command_id: u16,
        waited_ms: u64,
        csts: u32,
    },
    /// An admin command completed with an error status.
    AdminFailed {
        opcode: u8,
        status: Status,
        command_specific: u32,
    },
    /// An admin completion could not be trusted (impossible SQ head).
    AdminProtocol {
        opcode: u8,
        command_id: u16,
        reported_head: u16,
    },
    /// An earlier admin timeout left the admin queue in an unknown state.
    AdminQueueUnusable,
    /// The controller needs SQ/CQ entry sizes other than 64/16 bytes.
    UnsupportedEntrySizes {
        sqes: u8,
        cqes: u8,
    },
    /// All granted I/O queues are in use, or Set Features was not issued.
    NoQueueLeft {
        granted: u16,
    },
    /// The namespace's format cannot be read by this driver.
    UnusableNamespace {
        namespace_id: u32,
        reason: NamespaceProblem,
    },
    /// The controller's registers read as all ones: it is gone (removed, or its link is down).
    DeviceGone,
    /// CSTS.SHST did not reach "complete" in time.
    ShutdownTimeout {
        waited_ms: u64,
        cc: u32,
        csts: u32,
    },
}

/// Why a namespace is not usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceProblem {
    /// The format in use has an invalid LBA data size.
    InvalidFormat { format_index: usize, data_shift: u8 },
    /// Metadata per block: not supported (a separate metadata buffer would be written at MPTR).
    Metadata { metadata_bytes: u16 },
    /// One LBA is bigger than the largest command.
    BlockLargerThanTransfer { block_bytes: u32, max_transfer_bytes: u64 },
    /// NSZE = 0.
    Empty,
}

impl fmt::Display for NamespaceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NamespaceProblem::InvalidFormat {
                format_index,
                data_shift,
            } => write!(
                f,
                "LBA format {format_index} has an invalid data size (LBADS {data_shift})"
            ),
            NamespaceProblem::Metadata { metadata_bytes } => write!(
                f,
                "the LBA format carries {metadata_bytes} bytes of metadata per block, which this driver does not read"
            ),
            NamespaceProblem::BlockLargerThanTransfer {
                block_bytes,
                max_transfer_bytes,
            } => write!(
                f,
                "a {block_bytes}-byte block exceeds the largest transfer ({max_transfer_bytes} bytes)"
            ),
            NamespaceProblem::Empty => write!(f, "the namespace has no blocks"),
        }
    }
}

impl fmt::Display for NvmeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            NvmeError::NoController { cap } => {
                write!(f, "no controller answers (CAP = {cap:#018x})")
            }
            NvmeError::NoNvmCommandSet { cap } => write!(
                f,
                "the controller does not support the NVM command set (CAP = {cap:#018x}, CSS = {:#x})",
                (cap >> 37) & 0xff
            ),
            NvmeError::RegistersTooSmall {
                register_bytes,
                needed_bytes,
            } => write!(
                f,
                "BAR0 is {register_bytes} bytes, the doorbells need {needed_bytes}"
            ),
            NvmeError::NotReady {
                waiting_for,
                waited_ms,
                cap,
                cc,
                csts,
            } => write!(
                f,
                "controller not {} after {waited_ms} ms (CAP.TO = {} ms): CAP = {cap:#018x}, CC = {cc:#010x}, CSTS = {csts:#010x}",
                match waiting_for {
                    ReadyWait::Enabled => "ready",
                    ReadyWait::Disabled => "disabled",
                },
                Capabilities::decode(cap).ready_timeout_ms()
            ),
            NvmeError::FatalStatus { cap, cc, csts } => write!(
                f,
                "controller fatal status (CSTS.CFS = 1): CAP = {cap:#018x}, CC = {cc:#010x}, CSTS = {csts:#010x}"
            ),
            NvmeError::Allocation(error) => write!(f, "{error}"),
            NvmeError::Unreachable(error) => write!(f, "{error}"),
            NvmeError::AdminTimeout {
                opcode,
                command_id,
                waited_ms,
                csts,
            } => write!(
                f,
                "{} (opcode {opcode:#04x}, cid {command_id}) did not complete in {waited_ms} ms (CSTS = {csts:#010x})",
                admin_opcode_name(opcode)
            ),
            NvmeError::AdminFailed {
                opcode,
                status,
                command_specific,
            } => write!(
                f,
                "{} (opcode {opcode:#04x}) failed: {status} (cdw0 {command_specific:#x})",
                admin_opcode_name(opcode)
            ),
            NvmeError::AdminProtocol {
                opcode,
                command_id,
                reported_head,
            } => write!(
                f,
                "{} (cid {command_id}) completed with an impossible SQ head {reported_head}; not trusted",
                admin_opcode_name(opcode)
            ),
            NvmeError::AdminQueueUnusable => {
                write!(f, "the admin queue is unusable after an earlier timeout")
            }
            NvmeError::UnsupportedEntrySizes { sqes, cqes } => write!(
                f,
                "the controller cannot use 64-byte SQ / 16-byte CQ entries (SQES {sqes:#04x}, CQES {cqes:#04x})"
            ),
            NvmeError::NoQueueLeft { granted } => write!(
                f,
                "no I/O queue left: the controller granted {granted} queue pairs and all are in use"
            ),
            NvmeError::UnusableNamespace {
                namespace_id,
                reason,
            } => write!(f, "namespace {namespace_id} unusable: {reason}"),
            NvmeError::DeviceGone => {
                write!(f, "the controller is gone (its registers read as all ones)")
            }
            NvmeError::ShutdownTimeout { waited_ms, cc, csts } => write!(
                f,
                "shutdown not complete after {waited_ms} ms: CC = {cc:#010x}, CSTS = {csts:#010x}"
            ),
        }
    }
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
