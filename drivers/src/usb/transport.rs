//! What the two USB mass storage transports share: a SCSI command with its data, its outcome,
//! the transport errors with names, and the bulk pipe (endpoint + ring) a TD goes to (USB Mass
//! Storage Class Bulk-Only Transport 1.0 and USB Attached SCSI 1.0 carry the same SCSI commands;
//! the transfer-length arithmetic is xHCI 1.2 §4.10.1.1 "Short Transfers" and §6.4.2.1).

use super::context::{dci_of, EndpointContext, EndpointType};
use super::controller::{allocate_ring, HostController, TransferEvent};
use super::descriptors::EndpointInfo;
use super::error::UsbError;
use super::regs::Speed;
use super::ring::{Placement, ProducerRing};
use super::scsi::{Cdb, DataDirection, ScsiStatus, Sense};
use super::trb::{self, CompletionCode, Trb};
use super::uas_iu::response_name;
use alloc::vec::Vec;
use core::fmt;
use hal::dma::DmaRegion;
use hal::mmio::RegisterIo;
use hal::platform::Platform;

/// How long a SCSI command may take before the transport recovers (Linux's SCSI default is
/// 30 s; a benchmark read that takes 10 s is already a failure).
pub const COMMAND_TIMEOUT_US: u64 = 10_000_000;
/// Average TRB length for bulk endpoints (xHCI §4.14.1.1: about 3 KiB for bulk).
pub const BULK_AVERAGE_TRB_BYTES: u16 = 3072;

/// A SCSI command and its data buffer (bus address as the controller sees it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScsiCommand {
    pub cdb: Cdb,
    pub direction: DataDirection,
    pub data_bus: u64,
    pub data_bytes: u32,
}

impl ScsiCommand {
    pub fn without_data(cdb: Cdb) -> Self {
        ScsiCommand { cdb, direction: DataDirection::None, data_bus: 0, data_bytes: 0 }
    }

    pub fn reading(cdb: Cdb, data_bus: u64, data_bytes: u32) -> Self {
        ScsiCommand { cdb, direction: DataDirection::In, data_bus, data_bytes }
    }

    pub fn has_data(&self) -> bool {
        self.direction != DataDirection::None && self.data_bytes > 0
    }
}

/// How a command ended at the SCSI level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub status: ScsiStatus,
    /// Sense data of a CHECK CONDITION, when the device gave some.
    pub sense: Option<Sense>,
    pub transferred_bytes: u32,
}

impl Outcome {
    pub fn is_good(&self) -> bool {
        self.status == ScsiStatus::GOOD
    }
}

/// Why a transport could not complete a command. The tag is a whole word, so that every variant's
/// fields start 8-byte aligned and a result moved on every command is copied a word at a time
/// instead of through `memcpy` from odd offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum TransportError {
    /// A transfer ended with an error code (STALL, transaction error, babble, ...).
    Transfer { dci: u8, code: CompletionCode },
    /// No status within the command timeout; the transport recovered (reset or abort).
    Timeout { waited_ms: u64 },
    /// BOT: the CSW reported a phase error (status 2).
    PhaseError,
    /// BOT: the CSW's signature, tag or length was wrong.
    BadStatusWrapper { signature: u32, tag: u32, expected_tag: u32, bytes: u32 },
    /// UAS: an information unit of an unexpected kind or tag.
    BadInformationUnit { id: u8, tag: u16 },
    /// UAS: a RESPONSE IU instead of a SENSE IU (its response code).
    Response { code: u8 },
    /// A read delivered fewer bytes than asked with GOOD status.
    ShortTransfer { expected_bytes: u32, transferred_bytes: u32 },
    /// Recovery itself failed; the transport is out of service.
    RecoveryFailed(UsbError),
    /// An earlier failed recovery left the transport out of service.
    OutOfService,
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Transfer { dci, code } => write!(f, "transfer on endpoint {dci} failed: {code}"),
            TransportError::Timeout { waited_ms } => {
                write!(f, "no status after {waited_ms} ms (command aborted)")
            }
            TransportError::PhaseError => write!(f, "the drive reported a phase error (CSW status 2)"),
            TransportError::BadStatusWrapper { signature, tag, expected_tag, bytes } => write!(
                f,
                "invalid CSW ({bytes} bytes, signature {signature:#010x}, tag {tag:#x} for {expected_tag:#x})"
            ),
            TransportError::BadInformationUnit { id, tag } => {
                write!(f, "unexpected information unit {id:#04x} for tag {tag}")
            }
            TransportError::Response { code } => {
                write!(f, "RESPONSE IU {} ({code:#04x})", response_name(*code))
            }
            TransportError::ShortTransfer { expected_bytes, transferred_bytes } => {
                write!(f, "short transfer: {transferred_bytes} of {expected_bytes} bytes")
            }
            TransportError::RecoveryFailed(error) => {
                write!(f, "recovery failed ({error}); the drive is out of service")
            }
            TransportError::OutOfService => write!(f, "the drive is out of service after a failed recovery"),
        }
    }
}

impl From<UsbError> for TransportError {
    fn from(error: UsbError) -> Self {
        TransportError::RecoveryFailed(error)
    }
}

/// The transport's handle for a command in flight (the UAS tag; a counter for BOT).
pub type CommandId = u16;

/// Where finished commands go. A success is kept as its outcome (three words, stored without a
/// `memcpy` call); a failure, with the room its error needs (56 bytes: a recovery's
/// [`UsbError`]), in a list of its own. One list of whole results made every command's
/// completion a `memcpy` call of that room on the kernel targets.
#[derive(Debug, Default)]
pub struct Finished {
    succeeded: Vec<(CommandId, Outcome)>,
    failed: Vec<(CommandId, TransportError)>,
}

impl Finished {
    pub fn push(&mut self, id: CommandId, result: Result<Outcome, TransportError>) {
        match result {
            Ok(outcome) => self.succeeded.push((id, outcome)),
            Err(error) => self.failed.push((id, error)),
        }
    }

    pub fn clear(&mut self) {
        self.succeeded.clear();
        self.failed.clear();
    }

    /// Takes the result of command `id` if it finished.
    pub fn take(&mut self, id: CommandId) -> Option<Result<Outcome, TransportError>> {
        if let Some(position) = self.succeeded.iter().position(|(done, _)| *done == id) {
            return Some(Ok(self.succeeded.remove(position).1));
        }
        let position = self.failed.iter().position(|(done, _)| *done == id)?;
        Some(Err(self.failed.remove(position).1))
    }

    /// The commands that ended with an outcome (any SCSI status).
    pub fn succeeded(&self) -> &[(CommandId, Outcome)] {
        &self.succeeded
    }

    /// The commands the transport could not complete, with why.
    pub fn failed(&self) -> &[(CommandId, TransportError)] {
        &self.failed
    }
}

/// A bulk endpoint with its transfer ring (or, with streams, the rings are elsewhere).
pub struct BulkPipe<'p> {
    pub endpoint: EndpointInfo,
    pub dci: u8,
    pub max_packet_bytes: u16,
    pub ring: ProducerRing<'p>,
}

impl<'p> BulkPipe<'p> {
    pub fn new<R: RegisterIo, P: Platform>(
        hc: &HostController<'p, R, P>,
        endpoint: EndpointInfo,
        speed: Speed,
    ) -> Result<BulkPipe<'p>, UsbError> {
        Ok(BulkPipe {
            endpoint,
            dci: dci_of(endpoint.address),
            max_packet_bytes: endpoint.max_packet_bytes.clamp(8, speed.max_bulk_packet_bytes()),
            ring: allocate_ring(hc.platform(), &hc.dma())?,
        })
    }

    /// The endpoint context: bulk, its packet size and burst, the ring's dequeue or (with
    /// `stream_array`) the stream context array.
    pub fn context(&self, stream_array: Option<(u64, u8)>) -> EndpointContext {
        let (dequeue, max_primary_streams) = match stream_array {
            Some((array_bus, max_primary_streams)) => (array_bus, max_primary_streams),
            None => (self.ring.enqueue_position().0 | u64::from(self.ring.enqueue_position().1), 0),
        };
        EndpointContext {
            endpoint_type: if self.endpoint.is_in() { EndpointType::BulkIn } else { EndpointType::BulkOut },
            max_packet_bytes: self.max_packet_bytes,
            max_burst: self.endpoint.max_burst.min(15),
            dequeue,
            average_trb_bytes: BULK_AVERAGE_TRB_BYTES,
            max_primary_streams,
        }
    }
}

/// A bulk TD did not fit its ring (or could not be built). A small error of its own, word
/// aligned, so that `?` hands the placement of a queued TD on with word loads, not with `memcpy`
/// from an odd offset (as it did through [`UsbError`] and through a byte-aligned error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(align(4))]
pub struct TransferRingFull {
    pub dci: u8,
}

impl From<TransferRingFull> for UsbError {
    fn from(full: TransferRingFull) -> Self {
        UsbError::TransferRingFull { dci: full.dci }
    }
}

impl From<TransferRingFull> for TransportError {
    fn from(full: TransferRingFull) -> Self {
        TransportError::RecoveryFailed(full.into())
    }
}

/// Writes one bulk TD for `bytes` at `buffer` to `ring`.
pub fn enqueue_bulk<P: Platform>(
    platform: &P,
    ring: &mut ProducerRing<'_>,
    dci: u8,
    max_packet_bytes: u16,
    direction_in: bool,
    buffer: u64,
    bytes: u32,
) -> Result<Placement, TransferRingFull> {
    if trb::fits_one_trb(buffer, bytes as usize) {
        // One piece (every command, status and 4 KiB read): the TD's one Normal TRB, built as
        // `trb::bulk_td` builds it, without the list.
        let isp = if direction_in { trb::flags::ISP } else { 0 };
        let only = Trb::normal(buffer, bytes, 0, trb::flags::IOC | isp);
        return ring.enqueue_td(platform, &[only]).map_err(|_| TransferRingFull { dci });
    }
    let mut trbs: heapless::Vec<Trb, 64> = heapless::Vec::new();
    let mut overflow = false;
    trb::bulk_td(buffer, bytes as usize, max_packet_bytes, direction_in, |trb| {
        overflow |= trbs.push(trb).is_err();
    });
    if overflow || trbs.is_empty() {
        return Err(TransferRingFull { dci });
    }
    ring.enqueue_td(platform, &trbs).map_err(|_| TransferRingFull { dci })
}

/// Copies `bytes` (a wrapper or an information unit, at most 64 bytes) into `region` at a 4-byte
/// aligned `offset` as little-endian words, the last padded with zeros, as the controller will
/// read them: one region write, and no copy of a length the compiler does not know.
pub fn write_bytes<const N: usize>(region: &DmaRegion, offset: usize, bytes: &[u8; N]) {
    const MAX_WORDS: usize = 16;
    let mut words = [0u32; MAX_WORDS];
    for (index, byte) in bytes.iter().enumerate() {
        words[index / 4] |= u32::from(*byte) << (8 * (index % 4));
    }
    region.write_words(offset, &words[..N.div_ceil(4)]);
}

/// Bytes a finished TD moved: whole TRBs before the one the event names, plus that TRB's
/// length less the residue (§4.10.1.1: on a short packet the event names the TRB it ended in).
pub fn transferred_bytes(
    ring: &ProducerRing<'_>,
    placement: &Placement,
    buffer: u64,
    bytes: u32,
    event: &TransferEvent,
) -> u32 {
    let Some(position) = ring.position_in(placement, event.trb_pointer) else {
        return 0;
    };
    let mut done = 0u32;
    let mut index = 0u32;
    trb::split_at_64k(buffer, bytes as usize, |_, piece| {
        if index < position {
            done += piece;
        } else if index == position {
            done += piece.saturating_sub(event.residual_bytes);
        }
        index += 1;
    });
    done
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use hal::dma::{DmaAllocation, DmaRegion};
    use hal::testing::ArenaPlatform;
    use std::vec::Vec;

    #[test]
    fn only_commands_with_bytes_to_move_have_a_data_stage() {
        assert!(!ScsiCommand::without_data(Cdb::test_unit_ready()).has_data());
        assert!(!ScsiCommand::reading(Cdb::inquiry(0), 0x1000, 0).has_data(), "allocation length 0");
        assert!(ScsiCommand::reading(Cdb::inquiry(36), 0x1000, 36).has_data());
        let odd = ScsiCommand {
            direction: DataDirection::None,
            ..ScsiCommand::reading(Cdb::read_10(0, 1), 0, 512)
        };
        assert!(!odd.has_data(), "no direction, no data stage");
    }

    #[test]
    fn a_one_piece_td_is_the_trb_the_general_builder_makes() {
        let platform = ArenaPlatform::new(1 << 20);
        for (buffer, bytes, direction_in) in [
            (0x1_0000u64, 4096u32, true),
            (0x1_f000, 4096, false),
            (0x2_0040, 31, false),
            (0x3_0000, 65536, true),
        ] {
            assert!(trb::fits_one_trb(buffer, bytes as usize));
            let mut built = Vec::new();
            trb::bulk_td(buffer, bytes as usize, 1024, direction_in, |trb| built.push(trb));
            let region = DmaRegion::allocate(&platform, 8192, 4096).unwrap();
            let mut ring = ProducerRing::new(DmaAllocation { region, bus_address: 0x8000_0000 }, 256);
            let placement = enqueue_bulk(&platform, &mut ring, 3, 1024, direction_in, buffer, bytes).unwrap();
            assert_eq!(placement.trb_count, 1);
            let mut written = Trb::default();
            ring.read_trb_for_test(placement.first_index, &mut written);
            written.set_cycle(false);
            assert_eq!(std::vec![written], built, "{buffer:#x}+{bytes}");
        }
        assert!(!trb::fits_one_trb(0x1_f000, 8192), "crosses 64 KiB");
        assert!(!trb::fits_one_trb(0x1_0000, 0));
    }

    #[test]
    fn transferred_bytes_count_whole_trbs_before_the_short_one() {
        let platform = ArenaPlatform::new(1 << 20);
        let region = DmaRegion::allocate(&platform, 8192, 4096).unwrap();
        let mut ring = ProducerRing::new(DmaAllocation { region, bus_address: 0x8000_0000 }, 256);
        // 150 KiB from 0x1_8000: pieces of 32, 64 and 54 KiB.
        let buffer = 0x1_8000u64;
        let bytes = 150 << 10;
        let placement = enqueue_bulk(&platform, &mut ring, 3, 1024, true, buffer, bytes).unwrap();
        assert_eq!(placement.trb_count, 3);
        let event = |position: u32, residual_bytes: u32| TransferEvent {
            trb_pointer: ring.bus_of(placement.first_index + position),
            residual_bytes,
            code: CompletionCode::SHORT_PACKET,
            dci: 3,
        };
        assert_eq!(transferred_bytes(&ring, &placement, buffer, bytes, &event(2, 0)), bytes);
        assert_eq!(transferred_bytes(&ring, &placement, buffer, bytes, &event(1, 1000)), (96 << 10) - 1000);
        assert_eq!(transferred_bytes(&ring, &placement, buffer, bytes, &event(0, 32 << 10)), 0);
        let elsewhere = TransferEvent { trb_pointer: 0x1234, ..event(0, 0) };
        assert_eq!(transferred_bytes(&ring, &placement, buffer, bytes, &elsewhere), 0);
        // A TD longer than the TRB budget is refused, not split across calls.
        assert!(enqueue_bulk(&platform, &mut ring, 3, 1024, true, 0, 65 << 16).is_err());
        assert!(enqueue_bulk(&platform, &mut ring, 3, 1024, true, 0, 0).is_err());
    }
}
