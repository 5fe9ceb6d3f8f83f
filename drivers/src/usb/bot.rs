//! USB Mass Storage Bulk-Only Transport (USB Mass Storage Class Bulk-Only Transport 1.0: CBW
//! §5.1, CSW §5.2, command/data/status flow §5.3, reset recovery §5.3.4, host error handling
//! §6.7; Linux `transport.c` and U-Boot `usb_stor_BBB_transport` for the recovery order, as
//! summarised in docs/usb-storage.md §6): one command at a time, a CBW on bulk OUT, the data
//! on its pipe, a CSW on bulk IN, REQUEST SENSE after a failed command, STALL handling with
//! Reset Endpoint + CLEAR_FEATURE(HALT), and reset recovery for everything else.

use super::controller::{HostController, TransferEvent};
use super::descriptors::{BulkOnlyInterface, SetupPacket};
use super::device::UsbDevice;
use super::error::UsbError;
use super::ring::Placement;
use super::scsi::{Cdb, DataDirection, ScsiStatus, Sense, SENSE_BYTES};
use super::transport::{
    enqueue_bulk, transferred_bytes, write_bytes, BulkPipe, CommandId, Finished, Outcome, ScsiCommand,
    TransferRingFull, TransportError, COMMAND_TIMEOUT_US,
};
use super::trb::CompletionCode;
use hal::dma::DmaAllocation;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

pub const CBW_BYTES: usize = 31;
pub const CSW_BYTES: usize = 13;
/// 'USBC' and 'USBS' little-endian (BOT §5.1, §5.2).
pub const CBW_SIGNATURE: u32 = 0x4342_5355;
pub const CSW_SIGNATURE: u32 = 0x5342_5355;
/// CSW status values (BOT §5.2 Table 5.3).
pub const CSW_PASSED: u8 = 0;
pub const CSW_FAILED: u8 = 1;
pub const CSW_PHASE_ERROR: u8 = 2;

/// Offsets in the transport's small DMA buffer: CBW, CSW and sense data.
const CBW_OFFSET: usize = 0;
const CSW_OFFSET: usize = 64;
const SENSE_OFFSET: usize = 128;
const WRAPPER_BUFFER_BYTES: usize = 256;

/// A Command Block Wrapper (BOT §5.1 Table 5.1).
pub fn command_block_wrapper(
    tag: u32,
    data_bytes: u32,
    direction_in: bool,
    lun: u8,
    cdb: &Cdb,
) -> [u8; CBW_BYTES] {
    let mut cbw = [0u8; CBW_BYTES];
    cbw[0..4].copy_from_slice(&CBW_SIGNATURE.to_le_bytes());
    cbw[4..8].copy_from_slice(&tag.to_le_bytes());
    cbw[8..12].copy_from_slice(&data_bytes.to_le_bytes());
    cbw[12] = if direction_in { 0x80 } else { 0 };
    cbw[13] = lun & 0x0f;
    cbw[14] = cdb.length & 0x1f;
    // All 16 CDB bytes: those past its length are zero (`Cdb` is built so), as BOT §5.1 asks.
    cbw[15..31].copy_from_slice(&cdb.bytes);
    cbw
}

/// A Command Status Wrapper (BOT §5.2 Table 5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandStatusWrapper {
    pub signature: u32,
    pub tag: u32,
    pub residue: u32,
    pub status: u8,
}

impl CommandStatusWrapper {
    pub fn parse(bytes: &[u8; CSW_BYTES]) -> Self {
        let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        CommandStatusWrapper { signature: word(0), tag: word(4), residue: word(8), status: bytes[12] }
    }

    /// Valid and meaningful for the CBW with `tag` (BOT §6.3): 13 bytes, signature, tag, and a
    /// status of 0, 1 or 2.
    pub fn is_valid_for(&self, tag: u32, received_bytes: u32) -> bool {
        received_bytes == CSW_BYTES as u32
            && self.signature == CSW_SIGNATURE
            && self.tag == tag
            && self.status <= CSW_PHASE_ERROR
    }
}

/// Which command the transport is running for the current request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The caller's command.
    Command,
    /// The REQUEST SENSE after it failed (CSW status 1), with what the command moved.
    Sense { transferred_bytes: u32 },
}

/// The three stages of a Bulk-Only command (BOT §5.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Command,
    Data,
    Status,
}

#[derive(Clone, Copy, Debug)]
struct Active {
    id: CommandId,
    command: ScsiCommand,
    phase: Phase,
    cbw_tag: u32,
    cbw: Option<Placement>,
    data: Option<Placement>,
    csw: Option<Placement>,
    csw_bytes: u32,
    transferred_bytes: u32,
    csw_retried: bool,
    deadline: Deadline,
}

/// Counters of one Bulk-Only transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BotStatistics {
    pub commands: u64,
    pub sense_requests: u64,
    pub stalls_cleared: u64,
    pub reset_recoveries: u64,
}

/// The Bulk-Only transport of one drive.
pub struct BotTransport<'p> {
    interface: BulkOnlyInterface,
    lun: u8,
    bulk_in: BulkPipe<'p>,
    bulk_out: BulkPipe<'p>,
    /// The CBW and CSW buffers.
    wrappers: DmaAllocation<'p>,
    next_tag: u32,
    next_id: CommandId,
    active: Option<Active>,
    pending_doorbells: (bool, bool),
    /// [`COMMAND_TIMEOUT_US`] in the controller's clock ticks, converted once.
    command_timeout_ticks: u64,
    out_of_service: bool,
    statistics: BotStatistics,
}

impl<'p> BotTransport<'p> {
    /// Configures the two bulk endpoints (Configure Endpoint, SET_CONFIGURATION, SET_INTERFACE
    /// for a non-zero alternate) and reads the LUN count (Get Max LUN; a STALL means one LUN).
    pub fn new<R: RegisterIo, P: Platform>(
        hc: &mut HostController<'p, R, P>,
        device: &mut UsbDevice<'p>,
        interface: BulkOnlyInterface,
    ) -> Result<(BotTransport<'p>, u8), UsbError> {
        let bulk_in = BulkPipe::new(hc, interface.bulk_in, device.speed)?;
        let bulk_out = BulkPipe::new(hc, interface.bulk_out, device.speed)?;
        let wrappers = DmaAllocation::new(hc.platform(), &hc.dma(), WRAPPER_BUFFER_BYTES, 64)?;
        device.configure_endpoints(
            hc,
            &[],
            &[(bulk_in.dci, bulk_in.context(None)), (bulk_out.dci, bulk_out.context(None))],
        )?;
        device.set_configuration(hc)?;
        if interface.alternate != 0 {
            device
                .control_no_data(hc, SetupPacket::set_interface(interface.interface, interface.alternate))?;
        }
        let max_lun = match device.control_in(hc, SetupPacket::get_max_lun(interface.interface)) {
            Ok(bytes) => bytes.first().copied().unwrap_or(0) & 0x0f,
            Err(UsbError::TransferFailed { code: CompletionCode::STALL_ERROR, .. }) => 0,
            Err(error) => return Err(error),
        };
        let transport = BotTransport {
            interface,
            lun: 0,
            bulk_in,
            bulk_out,
            wrappers,
            next_tag: 1,
            next_id: 1,
            active: None,
            pending_doorbells: (false, false),
            command_timeout_ticks: hc.platform().ns_to_ticks(COMMAND_TIMEOUT_US * 1000),
            out_of_service: false,
            statistics: BotStatistics::default(),
        };
        Ok((transport, max_lun))
    }

    pub fn statistics(&self) -> BotStatistics {
        self.statistics
    }

    /// Queues CBW, data and CSW TDs for `command`; nothing moves until [`Self::kick`].
    pub fn start<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        command: ScsiCommand,
    ) -> Result<CommandId, TransportError> {
        if self.out_of_service {
            return Err(TransportError::OutOfService);
        }
        assert!(self.active.is_none(), "Bulk-Only carries one command at a time");
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.statistics.commands += 1;
        let deadline = Deadline::after_ticks(hc.platform(), self.command_timeout_ticks);
        self.queue(hc, id, command, Phase::Command, deadline)?;
        Ok(id)
    }

    fn queue<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        id: CommandId,
        command: ScsiCommand,
        phase: Phase,
        deadline: Deadline,
    ) -> Result<(), TransportError> {
        let platform = hc.platform();
        let cbw_tag = self.next_tag;
        self.next_tag = self.next_tag.wrapping_add(1);
        let direction_in = command.direction == DataDirection::In;
        let cbw = command_block_wrapper(cbw_tag, command.data_bytes, direction_in, self.lun, &command.cdb);
        write_bytes(&self.wrappers.region, CBW_OFFSET, &cbw);
        self.wrappers.region.zero(CSW_OFFSET, 16);
        platform.clean_for_device(&self.wrappers.region.buffer());
        let out = &mut self.bulk_out;
        let cbw_td = enqueue_bulk(
            platform,
            &mut out.ring,
            out.dci,
            out.max_packet_bytes,
            false,
            self.wrappers.bus_address,
            CBW_BYTES as u32,
        )?;
        let data = if command.has_data() {
            let pipe = if direction_in { &mut self.bulk_in } else { &mut self.bulk_out };
            Some(enqueue_bulk(
                platform,
                &mut pipe.ring,
                pipe.dci,
                pipe.max_packet_bytes,
                direction_in,
                command.data_bus,
                command.data_bytes,
            )?)
        } else {
            None
        };
        // The CSW read waits for the data stage: QEMU's usb-storage never answers a CSW read
        // queued behind a data-in that went asynchronous (docs/usb-storage.md §12); Linux also
        // submits it after the data.
        let csw = if data.is_none() { Some(self.queue_csw(platform)?) } else { None };
        self.active = Some(Active {
            id,
            command,
            phase,
            cbw_tag,
            cbw: Some(cbw_td),
            data,
            csw,
            csw_bytes: 0,
            transferred_bytes: 0,
            csw_retried: false,
            deadline,
        });
        self.pending_doorbells = (true, true);
        Ok(())
    }

    /// The 13-byte CSW read on bulk IN.
    fn queue_csw<P: Platform>(&mut self, platform: &P) -> Result<Placement, TransferRingFull> {
        let pipe = &mut self.bulk_in;
        let bus = self.wrappers.bus_address + CSW_OFFSET as u64;
        self.pending_doorbells.1 = true;
        enqueue_bulk(platform, &mut pipe.ring, pipe.dci, pipe.max_packet_bytes, true, bus, CSW_BYTES as u32)
    }

    /// Queues the CSW read now that the data stage is over.
    fn after_data<P: Platform>(&mut self, platform: &P) -> Result<(), TransportError> {
        let csw = self.queue_csw(platform)?;
        self.update(|a| a.csw = Some(csw));
        Ok(())
    }

    /// Rings bulk OUT (the CBW and any data out) first, then bulk IN: a device answers an IN
    /// before its CBW with NAK on hardware, but QEMU's STALLs it (docs/usb-storage.md §8).
    pub fn kick<R: RegisterIo, P: Platform>(&mut self, hc: &mut HostController<'_, R, P>, slot_id: u8) {
        let (out, inward) = core::mem::take(&mut self.pending_doorbells);
        if out {
            hc.ring_doorbell(slot_id, self.bulk_out.dci, 0);
        }
        if inward {
            hc.ring_doorbell(slot_id, self.bulk_in.dci, 0);
        }
    }

    /// Takes this drive's events and finishes the command when its CSW is in; recovers from
    /// STALLs, bad CSWs and timeouts. Finished commands go to `finished`.
    pub fn poll<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        finished: &mut Finished,
    ) {
        hc.process_events();
        while let Some(event) = hc.pop_transfer_event(device.slot_id) {
            if let Some(result) = self.handle(hc, device, event) {
                self.finish(result, finished);
            }
        }
        if let Some(deadline) = self.active.as_ref().map(|active| active.deadline) {
            if deadline.has_passed(hc.platform()) {
                let waited_ms = deadline.elapsed_us(hc.platform()) / 1000;
                let result = match self.reset_recovery(hc, device) {
                    Ok(()) => Err(TransportError::Timeout { waited_ms }),
                    Err(error) => Err(error),
                };
                self.finish(result, finished);
            }
        }
        self.kick(hc, device.slot_id);
    }

    /// Hands the command's result on and forgets the command (its identifier read, not the
    /// whole record moved out: that was a `memcpy` call per command on the kernel targets).
    fn finish(&mut self, result: Result<Outcome, TransportError>, finished: &mut Finished) {
        if let Some(id) = self.active.as_ref().map(|active| active.id) {
            self.active = None;
            finished.push(id, result);
        }
    }

    /// One transfer event; `Some` when the command is over.
    fn handle<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        event: TransferEvent,
    ) -> Option<Result<Outcome, TransportError>> {
        // What the event is matched against, not a copy of the whole command.
        let (cbw, data, csw, data_bus, data_bytes, data_in) = self.active.as_ref().map(|a| {
            let data_in = a.command.direction == DataDirection::In;
            (a.cbw, a.data, a.csw, a.command.data_bus, a.command.data_bytes, data_in)
        })?;
        let is_in = event.dci == self.bulk_in.dci;
        if !is_in && event.dci != self.bulk_out.dci {
            return None;
        }
        // A placement names TRBs of one ring: only those of the event's pipe can match (the
        // CBW is on bulk OUT, the CSW on bulk IN, the data on its direction's pipe).
        let (cbw, csw) = if is_in { (None, csw) } else { (cbw, None) };
        let data = if is_in == data_in { data } else { None };
        let ring = if is_in { &mut self.bulk_in.ring } else { &mut self.bulk_out.ring };
        let (placement, _) = ring.retire(event.trb_pointer)?;
        let is_data = Some(placement) == data;
        let stage = if is_data {
            Stage::Data
        } else if Some(placement) == csw {
            Stage::Status
        } else {
            Stage::Command
        };
        if is_data {
            let moved = transferred_bytes(ring, &placement, data_bus, data_bytes, &event);
            self.update(|a| {
                a.data = None;
                a.transferred_bytes = moved;
            });
        } else if Some(placement) == cbw {
            self.update(|a| a.cbw = None);
        } else if Some(placement) == csw {
            self.update(|a| {
                a.csw = None;
                a.csw_bytes = (CSW_BYTES as u32).saturating_sub(event.residual_bytes);
            });
        } else {
            return None;
        }
        if !event.code.is_success() {
            return self.transfer_error(hc, device, event, placement, stage);
        }
        if stage == Stage::Data {
            if let Err(error) = self.after_data(hc.platform()) {
                return Some(Err(error));
            }
        }
        let done =
            self.active.as_ref().is_some_and(|a| a.cbw.is_none() && a.data.is_none() && a.csw.is_none());
        if done {
            return self.status(hc, device);
        }
        None
    }

    fn update(&mut self, change: impl FnOnce(&mut Active)) {
        if let Some(active) = self.active.as_mut() {
            change(active);
        }
    }

    /// A failed transfer: a STALL of the data stage is cleared and the CSW read (BOT §6.7.2,
    /// §6.7.3); a stalled CSW is read once more; anything else ends in reset recovery.
    fn transfer_error<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        event: TransferEvent,
        placement: Placement,
        stage: Stage,
    ) -> Option<Result<Outcome, TransportError>> {
        let active = self.active?;
        let stall = event.code == CompletionCode::STALL_ERROR;
        let is_csw_retry = stage == Stage::Status && !active.csw_retried;
        let failure = TransportError::Transfer { dci: event.dci, code: event.code };
        if stall && (stage == Stage::Data || is_csw_retry) {
            let result = self
                .clear_stall(hc, device, event.dci, placement)
                .and_then(|()| self.after_data(hc.platform()));
            self.update(|a| a.csw_retried |= stage == Stage::Status);
            return result.err().map(Err);
        }
        Some(self.reset_recovery(hc, device).and(Err(failure)))
    }

    /// Reset Endpoint (the xHC side), dequeue moved past the stalled TD, CLEAR_FEATURE(HALT)
    /// (the device side), and the endpoint rung again for what follows.
    fn clear_stall<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        dci: u8,
        stalled: Placement,
    ) -> Result<(), TransportError> {
        self.statistics.stalls_cleared += 1;
        let pipe = if dci == self.bulk_in.dci { &self.bulk_in } else { &self.bulk_out };
        let address = pipe.endpoint.address;
        device.reset_endpoint(hc, dci)?;
        device.set_dequeue(hc, dci, 0, (pipe.ring.bus_of(stalled.next_index()), stalled.next_cycle()))?;
        // The CSW read queued next rings bulk IN; nothing else waits on a stalled bulk OUT.
        device.clear_halt(hc, address)?;
        Ok(())
    }

    /// Everything is in: read the CSW and decide (BOT §6.3, §6.7).
    fn status<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
    ) -> Option<Result<Outcome, TransportError>> {
        // The four fields the status needs, not a copy of the whole command.
        let (cbw_tag, csw_bytes, phase, moved_bytes) =
            self.active.as_ref().map(|a| (a.cbw_tag, a.csw_bytes, a.phase, a.transferred_bytes))?;
        hc.platform().invalidate_for_cpu(&self.wrappers.region.buffer());
        let mut bytes = [0u8; CSW_BYTES];
        self.wrappers.region.read_bytes(CSW_OFFSET, &mut bytes);
        let csw = CommandStatusWrapper::parse(&bytes);
        if !csw.is_valid_for(cbw_tag, csw_bytes) {
            let error = TransportError::BadStatusWrapper {
                signature: csw.signature,
                tag: csw.tag,
                expected_tag: cbw_tag,
                bytes: csw_bytes,
            };
            return Some(self.reset_recovery(hc, device).and(Err(error)));
        }
        match (csw.status, phase) {
            (CSW_PASSED, Phase::Command) => {
                Some(Ok(Outcome { status: ScsiStatus::GOOD, sense: None, transferred_bytes: moved_bytes }))
            }
            (CSW_PASSED, Phase::Sense { transferred_bytes }) => {
                let mut sense = [0u8; SENSE_BYTES as usize];
                self.wrappers.region.read_bytes(SENSE_OFFSET, &mut sense);
                Some(Ok(Outcome {
                    status: ScsiStatus::CHECK_CONDITION,
                    sense: Sense::parse(&sense[..moved_bytes as usize]),
                    transferred_bytes,
                }))
            }
            (CSW_FAILED, Phase::Command) => self.request_sense(hc, moved_bytes),
            (CSW_FAILED, Phase::Sense { transferred_bytes }) => {
                Some(Ok(Outcome { status: ScsiStatus::CHECK_CONDITION, sense: None, transferred_bytes }))
            }
            _ => Some(self.reset_recovery(hc, device).and(Err(TransportError::PhaseError))),
        }
    }

    /// REQUEST SENSE for the command that just failed, which moved `failed_bytes` (BOT has no
    /// autosense).
    fn request_sense<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        failed_bytes: u32,
    ) -> Option<Result<Outcome, TransportError>> {
        let (id, deadline) = self.active.as_ref().map(|failed| (failed.id, failed.deadline))?;
        self.statistics.sense_requests += 1;
        self.wrappers.region.zero(SENSE_OFFSET, 32);
        let command = ScsiCommand::reading(
            Cdb::request_sense(SENSE_BYTES),
            self.wrappers.bus_address + SENSE_OFFSET as u64,
            u32::from(SENSE_BYTES),
        );
        let phase = Phase::Sense { transferred_bytes: failed_bytes };
        match self.queue(hc, id, command, phase, deadline) {
            Ok(()) => None,
            Err(error) => Some(Err(error)),
        }
    }

    /// Reset recovery (BOT §5.3.4): the xHC's two bulk endpoints dropped and added again (fresh
    /// rings, sequence numbers reset), Bulk-Only Mass Storage Reset, CLEAR_FEATURE(HALT) on
    /// bulk IN, then bulk OUT. A failure puts the transport out of service.
    fn reset_recovery<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
    ) -> Result<(), TransportError> {
        self.statistics.reset_recoveries += 1;
        self.bulk_in.ring.retire_all();
        self.bulk_out.ring.retire_all();
        self.pending_doorbells = (false, false);
        let (in_dci, out_dci) = (self.bulk_in.dci, self.bulk_out.dci);
        let endpoints = [(in_dci, self.bulk_in.context(None)), (out_dci, self.bulk_out.context(None))];
        let result = device
            .configure_endpoints(hc, &[in_dci, out_dci], &endpoints)
            .and_then(|()| device.control_no_data(hc, SetupPacket::bulk_only_reset(self.interface.interface)))
            .and_then(|()| device.clear_halt(hc, self.bulk_in.endpoint.address))
            .and_then(|()| device.clear_halt(hc, self.bulk_out.endpoint.address));
        if let Err(error) = result {
            self.out_of_service = true;
            return Err(TransportError::RecoveryFailed(error));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cbws_carry_signature_tag_length_direction_and_cdb() {
        let cbw = command_block_wrapper(0x1234_5678, 4096, true, 0, &Cdb::read_10(0x10, 8));
        assert_eq!(&cbw[0..4], b"USBC");
        assert_eq!(&cbw[4..8], &[0x78, 0x56, 0x34, 0x12]);
        assert_eq!(&cbw[8..12], &[0, 0x10, 0, 0]);
        assert_eq!((cbw[12], cbw[13], cbw[14]), (0x80, 0, 10));
        assert_eq!(&cbw[15..25], &[0x28, 0, 0, 0, 0, 0x10, 0, 0, 8, 0]);
        assert!(cbw[25..].iter().all(|b| *b == 0));
        let out = command_block_wrapper(1, 0, false, 3, &Cdb::test_unit_ready());
        assert_eq!((out[12], out[13], out[14]), (0, 3, 6));
    }

    #[test]
    fn csws_are_checked_for_length_signature_tag_and_status() {
        let mut bytes = [0u8; CSW_BYTES];
        bytes[0..4].copy_from_slice(b"USBS");
        bytes[4..8].copy_from_slice(&7u32.to_le_bytes());
        bytes[8..12].copy_from_slice(&512u32.to_le_bytes());
        bytes[12] = CSW_FAILED;
        let csw = CommandStatusWrapper::parse(&bytes);
        assert_eq!(csw, CommandStatusWrapper { signature: CSW_SIGNATURE, tag: 7, residue: 512, status: 1 });
        assert!(csw.is_valid_for(7, 13));
        assert!(!csw.is_valid_for(8, 13), "wrong tag");
        assert!(!csw.is_valid_for(7, 12), "short CSW");
        assert!(!CommandStatusWrapper { status: 3, ..csw }.is_valid_for(7, 13), "status beyond phase error");
        assert!(!CommandStatusWrapper { signature: 0x5342_5356, ..csw }.is_valid_for(7, 13));
    }
}
