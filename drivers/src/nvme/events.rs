//! Things the NVMe driver reports while it runs (failed commands by status name, completions
//! that cannot be trusted: NVMe Base Specification 1.4 §4.6 completion entry fields) through a
//! sink the kernel prints from; the driver itself has no console.

use super::command::{admin_opcode_name, io_opcode_name};
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
