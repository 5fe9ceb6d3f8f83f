//! Things the NVMe driver reports while it runs (failed commands by status name, completions
//! that cannot be trusted: NVMe Base Specification 1.4 §4.6 completion entry fields) through a
//! sink the kernel prints from; the driver itself has no console.
#![forbid(unsafe_code)]

use super::command::{admin_opcode_name, io_opcode_name};
use super::error::NvmeError;
use super::status::Status;
use core::fmt;

/// Where the driver's reports go. `source` names the reporter (`nvme0`, `nvme 00:02.0`).
pub trait EventSink {
    fn report(&self, source: &str, event: &Event);
}

/// A sink that drops everything.
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn report(&self, _source: &str, _event: &Event) {}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A command completed with an error status; the request fails with it.
    CommandFailed {
        queue_id: u16,
        command_id: u16,
        opcode: u8,
        namespace_id: u32,
        lba: u64,
        block_count: u32,
        status: Status,
        command_specific: u32,
        sq_head: u16,
    },
    /// A completion named a command identifier that is not outstanding; it was ignored.
    UnknownCommandId { queue_id: u16, command_id: u16, sq_head: u16, status: Status },
    /// A completion reported an SQ head the queue cannot have; the head was not taken and the
    /// command it completes fails with a protocol error.
    ImpossibleSqHead {
        queue_id: u16,
        command_id: u16,
        reported_head: u16,
        known_head: u32,
        tail: u32,
        entries: u32,
    },
    /// A completion on this queue named another submission queue; it was ignored.
    WrongSubmissionQueue { queue_id: u16, reported_queue_id: u16, command_id: u16 },
    /// A completion carried a status code type the specification reserves; its request fails.
    ReservedStatus { queue_id: u16, command_id: u16, status: Status },
    /// A command took longer than the command timeout; its request fails and it is aborted.
    CommandTimedOut { queue_id: u16, command_id: u16, lba: u64, block_count: u32, waited_ms: u64 },
    /// The controller answered the Abort of a timed-out command.
    AbortAnswered { queue_id: u16, command_id: u16, aborted: bool },
    /// A timed-out (aborted) command completed after all; it ends that command only.
    LateCompletion { queue_id: u16, command_id: u16, status: Status },
    /// The controller was reset because a timed-out command could not be aborted.
    ControllerReset { queue_id: u16, command_id: u16, took_ms: u64, result: Result<(), NvmeError> },
    /// The device's registers read as all ones: it is gone; `outstanding` requests fail.
    DeviceGone { queue_id: u16, outstanding: u32 },
    /// The controller could not be recovered; `outstanding` requests fail and the queue is
    /// not used again.
    QueueAbandoned { queue_id: u16, outstanding: u32 },
    /// A wait for CSTS.RDY (to become `ready`) goes on; CAP.TO allows `timeout_ms`.
    StillWaiting { ready: bool, waited_ms: u64, timeout_ms: u64 },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Event::CommandFailed {
                queue_id,
                command_id,
                opcode,
                namespace_id,
                lba,
                block_count,
                status,
                command_specific,
                sq_head,
            } => {
                let name = if queue_id == 0 {
                    admin_opcode_name(opcode)
                } else {
                    io_opcode_name(opcode)
                };
                write!(f, "{name} failed: {status}; sqid:{queue_id} cid:{command_id}")?;
                if queue_id != 0 {
                    write!(f, " nsid:{namespace_id} lba:{lba} blocks:{block_count}")?;
                }
                write!(f, " cdw0:{command_specific:#x} sqhd:{sq_head}")
            }
            Event::UnknownCommandId {
                queue_id,
                command_id,
                sq_head,
                status,
            } => write!(
                f,
                "completion for unknown command identifier {command_id} on queue {queue_id} (sqhd:{sq_head}, status {status}); ignored"
            ),
            Event::ImpossibleSqHead {
                queue_id,
                command_id,
                reported_head,
                known_head,
                tail,
                entries,
            } => write!(
                f,
                "completion for cid {command_id} on queue {queue_id} reports SQ head {reported_head}, impossible with head {known_head}, tail {tail} in {entries} entries; not trusted, the command fails"
            ),
            Event::WrongSubmissionQueue {
                queue_id,
                reported_queue_id,
                command_id,
            } => write!(
                f,
                "completion on queue {queue_id} names submission queue {reported_queue_id} (cid {command_id}); ignored"
            ),
            Event::ReservedStatus { queue_id, command_id, status } => write!(
                f,
                "completion for sqid:{queue_id} cid:{command_id} has a reserved status code type ({status}); not trusted, the command fails"
            ),
            Event::CommandTimedOut { queue_id, command_id, lba, block_count, waited_ms } => write!(
                f,
                "Read timed out: no completion after {waited_ms} ms; sqid:{queue_id} cid:{command_id} lba:{lba} blocks:{block_count}; aborting it"
            ),
            Event::AbortAnswered { queue_id, command_id, aborted } => write!(
                f,
                "Abort of sqid:{queue_id} cid:{command_id}: {}",
                if aborted {
                    "aborted"
                } else {
                    "not aborted (the controller may still complete it; reset if it does not)"
                }
            ),
            Event::LateCompletion { queue_id, command_id, status } => write!(
                f,
                "late completion of timed-out sqid:{queue_id} cid:{command_id} ({status}); it ends that command only"
            ),
            Event::ControllerReset { queue_id, command_id, took_ms, result } => match result {
                Ok(()) => write!(
                    f,
                    "controller reset (sqid:{queue_id} cid:{command_id} could not be aborted) in {took_ms} ms: queues re-created, commands in flight failed"
                ),
                Err(error) => write!(
                    f,
                    "controller reset after sqid:{queue_id} cid:{command_id} timed out failed after {took_ms} ms: {error}"
                ),
            },
            Event::DeviceGone { queue_id, outstanding } => write!(
                f,
                "device gone (CSTS reads 0xffffffff): {outstanding} requests in flight on queue {queue_id} fail, nothing more is sent"
            ),
            Event::QueueAbandoned { queue_id, outstanding } => write!(
                f,
                "queue {queue_id} abandoned (controller not recovered): {outstanding} requests in flight fail, nothing more is sent"
            ),
            Event::StillWaiting { ready, waited_ms, timeout_ms } => write!(
                f,
                "still waiting for CSTS.RDY = {} after {waited_ms} ms (CAP.TO allows {timeout_ms} ms)",
                u8::from(ready)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn failed_reads_are_described_by_status_name() {
        let event = Event::CommandFailed {
            queue_id: 1,
            command_id: 9,
            opcode: 0x02,
            namespace_id: 1,
            lba: 2048,
            block_count: 8,
            status: Status::new(2, 0x81, true),
            command_specific: 0,
            sq_head: 10,
        };
        assert_eq!(
            format!("{event}"),
            "Read failed: Unrecovered Read Error (02/81) dnr; sqid:1 cid:9 nsid:1 lba:2048 blocks:8 cdw0:0x0 sqhd:10"
        );
        let admin = Event::CommandFailed {
            queue_id: 0,
            command_id: 3,
            opcode: 0x05,
            namespace_id: 0,
            lba: 0,
            block_count: 0,
            status: Status::new(1, 0x02, true),
            command_specific: 0,
            sq_head: 4,
        };
        assert_eq!(
            format!("{admin}"),
            "Create I/O Completion Queue failed: Invalid Queue Size (01/02) dnr; sqid:0 cid:3 cdw0:0x0 sqhd:4"
        );
    }
}
