//! USB Attached SCSI (T10 UAS-2 / USB-IF UAS 1.0: information units §6.2-6.4, pipe usage
//! §4.3, the SuperSpeed stream protocol §4.4.2 and the high-speed Read/Write Ready protocol
//! §4.4.1; Linux `uas.c` and QEMU `dev-uas.c` as summarised in docs/usb-storage.md §5-6). A
//! command is a Command IU on the command pipe; its data and its Sense IU come back on the data
//! and status pipes, at SuperSpeed on the bulk stream whose ID is the command's tag, below it
//! after a Read Ready / Write Ready IU. Commands in flight = tags; one tag is kept for task
//! management (ABORT TASK when a command times out).

use super::context::stream_array_for;
use super::controller::{allocate_ring, HostController, TransferEvent, PAGE_BYTES};
use super::descriptors::{EndpointInfo, SetupPacket, UasInterface};
use super::device::UsbDevice;
use super::error::UsbError;
use super::regs::Speed;
use super::ring::{Placement, ProducerRing};
use super::scsi::DataDirection;
use super::transport::{
    enqueue_bulk, transferred_bytes, write_bytes, BulkPipe, CommandId, Finished, Outcome, ScsiCommand,
    TransferRingFull, TransportError, COMMAND_TIMEOUT_US,
};
use super::uas_iu::{command_iu, iu, response_code, task_function, task_management_iu, StatusIu};
use super::uas_iu::{COMMAND_IU_BYTES, TASK_MANAGEMENT_IU_BYTES};
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use hal::dma::DmaAllocation;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// A status read: a Sense IU's 16 bytes and up to 96 bytes of sense (Linux `uas.c` sizes it so).
pub const STATUS_IU_BYTES: u32 = 112;
/// The most tags (streams) the driver uses.
pub const DRIVER_MAX_TAGS: u16 = 32;
/// Tags below SuperSpeed, where commands are matched by tag without streams (Linux: 32).
pub const HIGH_SPEED_TAGS: u16 = 32;
/// How long a task management function may take.
pub const TASK_MANAGEMENT_TIMEOUT_US: u64 = 2_000_000;

/// Per tag: the Command (or Task Management) IU at 0, the status IU at 128.
const IU_SLOT_BYTES: usize = 256;
const STATUS_OFFSET: usize = 128;

/// A pipe that is streamed at SuperSpeed (one ring per tag, behind a stream context array) or
/// not (one ring).
struct StreamedPipe<'p> {
    endpoint: EndpointInfo,
    dci: u8,
    max_packet_bytes: u16,
    rings: Vec<ProducerRing<'p>>,
    /// The stream context array and the MaxPStreams it needs.
    stream_array: Option<(DmaAllocation<'p>, u8)>,
}

impl<'p> StreamedPipe<'p> {
    fn new<R: RegisterIo, P: Platform>(
        hc: &HostController<'p, R, P>,
        endpoint: EndpointInfo,
        speed: Speed,
        streams: Option<u16>,
    ) -> Result<StreamedPipe<'p>, UsbError> {
        let pipe = BulkPipe::new(hc, endpoint, speed)?;
        let mut rings = alloc::vec![pipe.ring];
        let mut stream_array = None;
        if let Some(tags) = streams {
            for _ in 1..tags {
                rings.push(allocate_ring(hc.platform(), &hc.dma())?);
            }
            let (entries, max_primary_streams) = stream_array_for(u32::from(tags));
            let array_bytes = (entries as usize * 16).max(PAGE_BYTES);
            let array = DmaAllocation::new(hc.platform(), &hc.dma(), array_bytes, PAGE_BYTES)?;
            stream_array = Some((array, max_primary_streams));
        }
        let mut pipe = StreamedPipe {
            endpoint,
            dci: pipe.dci,
            max_packet_bytes: pipe.max_packet_bytes,
            rings,
            stream_array,
        };
        pipe.write_stream_contexts(hc);
        Ok(pipe)
    }

    /// Stream context n (tag n) points at ring n − 1 at its enqueue position (§4.12.2);
    /// entry 0 and unused entries stay 0 so that a bad stream ID errors instead of hanging.
    fn write_stream_contexts<R: RegisterIo, P: Platform>(&mut self, hc: &HostController<'_, R, P>) {
        if let Some((DmaAllocation { region: array, .. }, _)) = &self.stream_array {
            for (index, ring) in self.rings.iter().enumerate() {
                let (dequeue, cycle) = ring.enqueue_position();
                let words = super::context::stream_context(dequeue | u64::from(cycle));
                for (word, value) in words.iter().enumerate() {
                    array.write_words((index + 1) * 16 + 4 * word, &[*value]);
                }
            }
            hc.platform().clean_for_device(&array.buffer());
        }
    }

    fn context(&self) -> super::context::EndpointContext {
        let pipe_view = BulkPipeView { endpoint: self.endpoint, max_packet_bytes: self.max_packet_bytes };
        let stream_array = self.stream_array.as_ref().map(|(array, max)| (array.bus_address, *max));
        let (dequeue, cycle) = self.rings[0].enqueue_position();
        pipe_view.context(stream_array, dequeue | u64::from(cycle))
    }

    fn ring_index(&self, tag: u16) -> usize {
        if self.stream_array.is_some() {
            usize::from(tag) - 1
        } else {
            0
        }
    }

    /// One TD of `bytes` at `bus` on the ring of `tag` (the only ring without streams).
    fn enqueue<P: Platform>(
        &mut self,
        platform: &P,
        tag: u16,
        bus: u64,
        bytes: u32,
    ) -> Result<Placement, TransferRingFull> {
        let index = self.ring_index(tag);
        let direction_in = self.endpoint.is_in();
        enqueue_bulk(
            platform,
            &mut self.rings[index],
            self.dci,
            self.max_packet_bytes,
            direction_in,
            bus,
            bytes,
        )
    }

    /// The ring (index) holding the TRB at `pointer`, among the rings of the `busy` tags (only
    /// they have TDs out; without streams the one ring).
    fn ring_holding(&self, pointer: u64, busy: TagSet) -> Option<usize> {
        if self.stream_array.is_none() {
            return self.rings[0].index_of(pointer).map(|_| 0);
        }
        busy.iter()
            .map(|tag| usize::from(tag) - 1)
            .find(|&index| self.rings.get(index).is_some_and(|ring| ring.index_of(pointer).is_some()))
    }

    fn stream_of(&self, tag: u16) -> u16 {
        if self.stream_array.is_some() {
            tag
        } else {
            0
        }
    }

    fn retire_all(&mut self) {
        for ring in &mut self.rings {
            ring.retire_all();
        }
    }
}

/// The endpoint context of a pipe without needing its ring.
struct BulkPipeView {
    endpoint: EndpointInfo,
    max_packet_bytes: u16,
}

impl BulkPipeView {
    fn context(&self, stream_array: Option<(u64, u8)>, ring_dequeue: u64) -> super::context::EndpointContext {
        use super::context::{EndpointContext, EndpointType};
        let (dequeue, max_primary_streams) = stream_array.unwrap_or((ring_dequeue, 0));
        EndpointContext {
            endpoint_type: if self.endpoint.is_in() { EndpointType::BulkIn } else { EndpointType::BulkOut },
            max_packet_bytes: self.max_packet_bytes,
            max_burst: self.endpoint.max_burst.min(15),
            dequeue,
            average_trb_bytes: super::transport::BULK_AVERAGE_TRB_BYTES,
            max_primary_streams,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct TagState {
    /// The data stage: where it goes, how many bytes, and whether it comes in (the rest of the
    /// command went into its Command IU and is not kept: each copy of it was a `memcpy` call).
    data_bus: u64,
    data_bytes: u32,
    data_in: bool,
    command_td: Option<Placement>,
    status_td: Option<Placement>,
    data_td: Option<Placement>,
    awaiting_data: bool,
    transferred_bytes: u32,
    result: Option<Result<Outcome, TransportError>>,
    deadline: Deadline,
}

/// A set of tags (1 to [`DRIVER_MAX_TAGS`]) as bits, walked in ascending order: the poll looks
/// at the tags in use only, not at every tag the drive has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct TagSet(u64);

impl TagSet {
    fn insert(&mut self, tag: u16) {
        self.0 |= 1 << tag;
    }

    fn remove(&mut self, tag: u16) {
        self.0 &= !(1 << tag);
    }

    fn without(self, tag: u16) -> TagSet {
        TagSet(self.0 & !(1 << tag))
    }

    fn is_empty(self) -> bool {
        self.0 == 0
    }

    fn iter(self) -> impl Iterator<Item = u16> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let tag = bits.trailing_zeros() as u16;
            bits &= bits - 1;
            Some(tag)
        })
    }
}

/// The doorbells the queued TDs need, each (endpoint, stream) once: per pipe the streams
/// (stream 0 without streams) as bits.
#[derive(Clone, Copy, Debug, Default)]
struct PendingDoorbells {
    status: TagSet,
    data_in: TagSet,
    data_out: TagSet,
    command: bool,
}

/// Counters of one UAS transport.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UasStatistics {
    pub commands: u64,
    pub max_in_flight: u32,
    pub aborts: u64,
    pub pipe_resets: u64,
    pub unexpected_ius: u64,
}

/// The UAS transport of one drive.
pub struct UasTransport<'p> {
    interface: UasInterface,
    lun: u8,
    command: BulkPipe<'p>,
    status: StreamedPipe<'p>,
    data_in: StreamedPipe<'p>,
    data_out: StreamedPipe<'p>,
    /// Per tag: the Command (or Task Management) IU and the status IU.
    ius: DmaAllocation<'p>,
    /// Tags 1..=`tags`; the last is kept for task management.
    tags: u16,
    streams: bool,
    states: Vec<Option<TagState>>,
    /// The tags whose state is `Some` (the task management tag too while it is used).
    busy: TagSet,
    free_tags: Vec<u16>,
    /// The tags of the IUs on the command pipe, oldest first (the ring's TDs, in order).
    command_tags: VecDeque<u16>,
    doorbells: PendingDoorbells,
    /// [`COMMAND_TIMEOUT_US`] in the controller's clock ticks, converted once.
    command_timeout_ticks: u64,
    /// Below SuperSpeed: the one status read kept posted, and the tags whose data may move.
    status_read: Option<Placement>,
    task_response: Option<(u16, u8)>,
    out_of_service: bool,
    statistics: UasStatistics,
}

impl<'p> UasTransport<'p> {
    /// Configures the four pipes (streams at SuperSpeed), SET_CONFIGURATION and SET_INTERFACE.
    /// `max_tags` caps the tags (the device's streams, the controller's stream array).
    pub fn new<R: RegisterIo, P: Platform>(
        hc: &mut HostController<'p, R, P>,
        device: &mut UsbDevice<'p>,
        interface: UasInterface,
    ) -> Result<UasTransport<'p>, UsbError> {
        let streams = device.speed.is_super_speed();
        let tags = if streams {
            let controller_streams = hc.capabilities().max_stream_array_entries().saturating_sub(1);
            if controller_streams == 0 {
                return Err(UsbError::NoStreams);
            }
            interface.streams().min(controller_streams).min(u32::from(DRIVER_MAX_TAGS)) as u16
        } else {
            HIGH_SPEED_TAGS
        };
        if tags < 2 {
            return Err(UsbError::NoStreams);
        }
        let stream_tags = streams.then_some(tags);
        let command = BulkPipe::new(hc, interface.command, device.speed)?;
        let status = StreamedPipe::new(hc, interface.status, device.speed, stream_tags)?;
        let data_in = StreamedPipe::new(hc, interface.data_in, device.speed, stream_tags)?;
        let data_out = StreamedPipe::new(hc, interface.data_out, device.speed, stream_tags)?;
        let ius = DmaAllocation::new(
            hc.platform(),
            &hc.dma(),
            IU_SLOT_BYTES * (usize::from(tags) + 1),
            PAGE_BYTES,
        )?;
        let mut transport = UasTransport {
            interface,
            lun: 0,
            command,
            status,
            data_in,
            data_out,
            ius,
            tags,
            streams,
            states: alloc::vec![None; usize::from(tags) + 1],
            busy: TagSet::default(),
            free_tags: (1..tags).rev().collect(),
            command_tags: VecDeque::new(),
            doorbells: PendingDoorbells::default(),
            command_timeout_ticks: hc.platform().ns_to_ticks(COMMAND_TIMEOUT_US * 1000),
            status_read: None,
            task_response: None,
            out_of_service: false,
            statistics: UasStatistics::default(),
        };
        device.configure_endpoints(hc, &[], &transport.endpoint_contexts())?;
        device.set_configuration(hc)?;
        if interface.alternate != 0 {
            device
                .control_no_data(hc, SetupPacket::set_interface(interface.interface, interface.alternate))?;
        }
        transport.post_status_read(hc)?;
        transport.kick(hc, device.slot_id);
        Ok(transport)
    }

    fn endpoint_contexts(&self) -> [(u8, super::context::EndpointContext); 4] {
        [
            (self.command.dci, self.command.context(None)),
            (self.status.dci, self.status.context()),
            (self.data_in.dci, self.data_in.context()),
            (self.data_out.dci, self.data_out.context()),
        ]
    }

    /// Commands that may be in flight (tags less the task management one).
    pub fn command_slots(&self) -> u16 {
        self.tags - 1
    }

    pub fn tags(&self) -> u16 {
        self.tags
    }

    pub fn uses_streams(&self) -> bool {
        self.streams
    }

    pub fn statistics(&self) -> UasStatistics {
        self.statistics
    }

    pub fn in_flight(&self) -> u32 {
        u32::from(self.command_slots()) - self.free_tags.len() as u32
    }

    fn iu_offset(tag: u16) -> usize {
        usize::from(tag) * IU_SLOT_BYTES
    }

    /// Below SuperSpeed the status pipe always has one read posted (UAS §4.4.1).
    fn post_status_read<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &HostController<'_, R, P>,
    ) -> Result<(), UsbError> {
        if self.streams || self.status_read.is_some() {
            return Ok(());
        }
        let bus = self.ius.bus_address + STATUS_OFFSET as u64;
        let placement = self.status.enqueue(hc.platform(), 0, bus, STATUS_IU_BYTES)?;
        self.status_read = Some(placement);
        self.doorbells.status.insert(0);
        Ok(())
    }

    /// Queues `command` under a free tag: at SuperSpeed its status read and data TD go on the
    /// tag's streams first, then the Command IU (UAS §4.4.2).
    pub fn start<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        command: ScsiCommand,
    ) -> Result<CommandId, TransportError> {
        if self.out_of_service {
            return Err(TransportError::OutOfService);
        }
        let tag = self.free_tags.pop().expect("the caller keeps to command_slots()");
        let state = TagState {
            data_bus: command.data_bus,
            data_bytes: command.data_bytes,
            data_in: command.direction == DataDirection::In,
            command_td: None,
            status_td: None,
            data_td: None,
            awaiting_data: command.has_data(),
            transferred_bytes: 0,
            result: None,
            deadline: Deadline::after_ticks(hc.platform(), self.command_timeout_ticks),
        };
        self.occupy(tag, state);
        self.statistics.commands += 1;
        self.statistics.max_in_flight = self.statistics.max_in_flight.max(self.in_flight());
        if let Err(error) = self.queue_command(hc, tag, &command) {
            self.vacate(tag);
            self.free_tags.push(tag);
            return Err(TransportError::RecoveryFailed(error));
        }
        Ok(tag)
    }

    fn queue_command<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &HostController<'_, R, P>,
        tag: u16,
        command: &ScsiCommand,
    ) -> Result<(), UsbError> {
        let platform = hc.platform();
        let base = Self::iu_offset(tag);
        if self.streams {
            let bus = self.ius.bus_address + (base + STATUS_OFFSET) as u64;
            let status = self.status.enqueue(platform, tag, bus, STATUS_IU_BYTES)?;
            self.set(tag, |s| s.status_td = Some(status));
            self.doorbells.status.insert(tag);
            if command.has_data() {
                self.queue_data(hc, tag)?;
            }
        }
        write_bytes(&self.ius.region, base, &command_iu(tag, self.lun, &command.cdb));
        platform.clean_for_device(&self.ius.region.slice(base, COMMAND_IU_BYTES));
        self.queue_command_pipe(hc, tag, COMMAND_IU_BYTES as u32)
    }

    fn queue_command_pipe<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &HostController<'_, R, P>,
        tag: u16,
        bytes: u32,
    ) -> Result<(), UsbError> {
        let bus = self.ius.bus_address + Self::iu_offset(tag) as u64;
        let pipe = &mut self.command;
        let placement =
            enqueue_bulk(hc.platform(), &mut pipe.ring, pipe.dci, pipe.max_packet_bytes, false, bus, bytes)?;
        self.set(tag, |s| s.command_td = Some(placement));
        self.command_tags.push_back(tag);
        self.doorbells.command = true;
        Ok(())
    }

    /// The data TD of `tag` on its data pipe (its stream at SuperSpeed).
    fn queue_data<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &HostController<'_, R, P>,
        tag: u16,
    ) -> Result<(), UsbError> {
        let Some((bus, bytes, direction_in)) = self.states[usize::from(tag)]
            .as_ref()
            .map(|state| (state.data_bus, state.data_bytes, state.data_in))
        else {
            return Ok(());
        };
        let pipe = if direction_in { &mut self.data_in } else { &mut self.data_out };
        let stream = pipe.stream_of(tag);
        let placement = pipe.enqueue(hc.platform(), tag, bus, bytes)?;
        self.set(tag, |s| s.data_td = Some(placement));
        if direction_in {
            self.doorbells.data_in.insert(stream);
        } else {
            self.doorbells.data_out.insert(stream);
        }
        Ok(())
    }

    /// Gives `tag` its state.
    fn occupy(&mut self, tag: u16, state: TagState) {
        self.states[usize::from(tag)] = Some(state);
        self.busy.insert(tag);
    }

    /// Leaves `tag` unused (its state dropped where it is, not moved out).
    fn vacate(&mut self, tag: u16) {
        self.busy.remove(tag);
        self.states[usize::from(tag)] = None;
    }

    /// The tags of commands in flight (the task management tag left out).
    fn busy_commands(&self) -> TagSet {
        self.busy.without(self.tags)
    }

    fn set(&mut self, tag: u16, change: impl FnOnce(&mut TagState)) {
        if let Some(Some(state)) = self.states.get_mut(usize::from(tag)) {
            change(state);
        }
    }

    /// Rings every doorbell the queued TDs need, each (endpoint, stream) once: the status and
    /// data streams before the command pipe, so that a drive answering the Command IU at once
    /// finds its status and data TDs armed (UAS §4.4.2).
    pub fn kick<R: RegisterIo, P: Platform>(&mut self, hc: &mut HostController<'_, R, P>, slot_id: u8) {
        let pending = core::mem::take(&mut self.doorbells);
        for (dci, streams) in [
            (self.status.dci, pending.status),
            (self.data_in.dci, pending.data_in),
            (self.data_out.dci, pending.data_out),
        ] {
            for stream in streams.iter() {
                hc.ring_doorbell(slot_id, dci, stream);
            }
        }
        if pending.command {
            hc.ring_doorbell(slot_id, self.command.dci, 0);
        }
    }

    /// Takes this drive's events, finishes commands whose status and data are in, and aborts
    /// commands past their timeout.
    pub fn poll<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        finished: &mut Finished,
    ) {
        self.take_events(hc, device, finished);
        let waiting = self.busy_commands();
        if !waiting.is_empty() {
            // One clock reading for every command in flight.
            let now_ticks = hc.platform().now_ticks();
            for tag in waiting.iter() {
                let expired = self.states[usize::from(tag)]
                    .as_ref()
                    .is_some_and(|s| s.result.is_none() && s.deadline.has_passed_at(now_ticks));
                if expired {
                    self.abort(hc, device, tag, finished);
                }
            }
        }
        self.kick(hc, device.slot_id);
    }

    fn take_events<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        finished: &mut Finished,
    ) {
        hc.process_events();
        while let Some(event) = hc.pop_transfer_event(device.slot_id) {
            if let Err(error) = self.handle(hc, event) {
                self.recover_all(hc, device, error, finished);
            }
        }
        for tag in self.busy_commands().iter() {
            self.finish_if_done(tag, finished);
        }
    }

    /// Hands the result of `tag` on once its status and (on success) its data and Command IU
    /// are in. Reads the state in place: a copy of the whole result, most of it the room of a
    /// recovery error, was a `memcpy` call per command on the kernel targets.
    fn finish_if_done(&mut self, tag: u16, finished: &mut Finished) {
        let Some(state) = &self.states[usize::from(tag)] else {
            return;
        };
        let result = match &state.result {
            None => return,
            Some(Ok(_)) if state.awaiting_data || state.command_td.is_some() => return,
            Some(Ok(outcome)) => Ok(Outcome { transferred_bytes: state.transferred_bytes, ..*outcome }),
            Some(Err(error)) => Err(*error),
        };
        self.vacate(tag);
        self.free_tags.push(tag);
        finished.push(tag, result);
    }

    /// One transfer event. An `Err` means a pipe failed and everything must be recovered.
    fn handle<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        event: TransferEvent,
    ) -> Result<(), TransportError> {
        let failure = TransportError::Transfer { dci: event.dci, code: event.code };
        if event.dci == self.command.dci {
            let Some((_, older)) = self.command.ring.retire(event.trb_pointer) else {
                return Ok(());
            };
            // This IU and every older one on the pipe went out (a ring completes in order).
            for _ in 0..=older {
                if let Some(tag) = self.command_tags.pop_front() {
                    self.set(tag, |s| s.command_td = None);
                }
            }
            return if event.code.is_success() { Ok(()) } else { Err(failure) };
        }
        if event.dci == self.status.dci {
            return self.status_event(hc, event, failure);
        }
        let direction_in = event.dci == self.data_in.dci;
        if !direction_in && event.dci != self.data_out.dci {
            return Ok(());
        }
        let busy = self.busy;
        let pipe = if direction_in { &mut self.data_in } else { &mut self.data_out };
        let Some(ring_index) = pipe.ring_holding(event.trb_pointer, busy) else {
            return Ok(());
        };
        let Some((placement, _)) = pipe.rings[ring_index].retire(event.trb_pointer) else {
            return Ok(());
        };
        let tag = if self.streams {
            Some(ring_index as u16 + 1)
        } else {
            self.tag_where(|s| s.data_td == Some(placement))
        };
        let Some(tag) = tag else {
            return Ok(());
        };
        if let Some((bus, bytes)) = self.states[usize::from(tag)].as_ref().map(|s| (s.data_bus, s.data_bytes))
        {
            let pipe = if direction_in { &self.data_in } else { &self.data_out };
            let ring = &pipe.rings[ring_index];
            let moved = transferred_bytes(ring, &placement, bus, bytes, &event);
            self.set(tag, |s| {
                s.data_td = None;
                s.awaiting_data = false;
                s.transferred_bytes = moved;
            });
        }
        if event.code.is_success() {
            Ok(())
        } else {
            Err(failure)
        }
    }

    fn tag_where(&self, condition: impl Fn(&TagState) -> bool) -> Option<u16> {
        (1..=self.tags).find(|&tag| self.states[usize::from(tag)].as_ref().is_some_and(&condition))
    }

    fn status_event<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        event: TransferEvent,
        failure: TransportError,
    ) -> Result<(), TransportError> {
        let Some(ring_index) = self.status.ring_holding(event.trb_pointer, self.busy) else {
            return Ok(());
        };
        let Some((placement, _)) = self.status.rings[ring_index].retire(event.trb_pointer) else {
            return Ok(());
        };
        if !event.code.is_success() {
            return Err(failure);
        }
        let received = (STATUS_IU_BYTES as usize)
            .saturating_sub(event.residual_bytes as usize)
            .min(IU_SLOT_BYTES - STATUS_OFFSET);
        let offset = if self.streams { Self::iu_offset(ring_index as u16 + 1) } else { 0 } + STATUS_OFFSET;
        hc.platform().invalidate_for_cpu(&self.ius.region.slice(offset, received.max(1)));
        let mut bytes = [0u8; IU_SLOT_BYTES - STATUS_OFFSET];
        self.ius.region.read_bytes(offset, &mut bytes[..received]);
        if self.streams {
            let tag = ring_index as u16 + 1;
            self.set(tag, |s| s.status_td = None);
        } else if self.status_read == Some(placement) {
            self.status_read = None;
        }
        self.status_iu(hc, StatusIu::parse(&bytes[..received]))?;
        self.post_status_read(hc)?;
        Ok(())
    }

    fn status_iu<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        iu: StatusIu,
    ) -> Result<(), TransportError> {
        let known = |tag: u16| tag >= 1 && tag <= self.tags && self.states[usize::from(tag)].is_some();
        match iu {
            StatusIu::Sense { tag, status, sense } if known(tag) => {
                let outcome = Outcome { status, sense, transferred_bytes: 0 };
                let streams = self.streams;
                self.set(tag, |s| {
                    s.result = Some(Ok(outcome));
                    // Below SuperSpeed a command that failed before its data phase never got a
                    // Read/Write Ready, so no data TD will come.
                    if !streams && s.data_td.is_none() {
                        s.awaiting_data = false;
                    }
                });
            }
            StatusIu::Response { tag, code } if tag == self.tags => self.task_response = Some((tag, code)),
            StatusIu::Response { tag, code } if known(tag) => {
                self.set(tag, |s| {
                    s.result = Some(Err(TransportError::Response { code }));
                    s.awaiting_data = false;
                });
            }
            StatusIu::ReadReady { tag } | StatusIu::WriteReady { tag } if !self.streams && known(tag) => {
                self.queue_data(hc, tag)?;
            }
            StatusIu::Sense { tag, .. }
            | StatusIu::Response { tag, .. }
            | StatusIu::ReadReady { tag }
            | StatusIu::WriteReady { tag } => {
                self.statistics.unexpected_ius += 1;
                let id = match iu {
                    StatusIu::Sense { .. } => iu::SENSE,
                    StatusIu::Response { .. } => iu::RESPONSE,
                    StatusIu::ReadReady { .. } => iu::READ_READY,
                    _ => iu::WRITE_READY,
                };
                if known(tag) {
                    self.set(tag, |s| s.result = Some(Err(TransportError::BadInformationUnit { id, tag })));
                }
            }
            StatusIu::Unknown { id, tag } => {
                self.statistics.unexpected_ius += 1;
                if known(tag) {
                    self.set(tag, |s| s.result = Some(Err(TransportError::BadInformationUnit { id, tag })));
                }
            }
        }
        Ok(())
    }

    /// A command past its timeout: ABORT TASK under the task management tag (UAS §6.2.3), then
    /// the streamed pipes are reset (their rings hold the dead command's TDs) and every
    /// command still waiting fails with it.
    fn abort<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        tag: u16,
        finished: &mut Finished,
    ) {
        self.statistics.aborts += 1;
        let waited_ms =
            self.states[usize::from(tag)].map_or(0, |s| s.deadline.elapsed_us(hc.platform()) / 1000);
        let answered = self.task_management(hc, device, task_function::ABORT_TASK, tag, finished);
        let error = match answered {
            Ok(()) => TransportError::Timeout { waited_ms },
            Err(error) => error,
        };
        self.recover_all(hc, device, error, finished);
    }

    /// Sends one task management function and waits for its RESPONSE IU.
    fn task_management<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        function: u8,
        task_tag: u16,
        finished: &mut Finished,
    ) -> Result<(), TransportError> {
        let tag = self.tags;
        let base = Self::iu_offset(tag);
        self.task_response = None;
        self.occupy(
            tag,
            TagState {
                data_bus: 0,
                data_bytes: 0,
                data_in: false,
                command_td: None,
                status_td: None,
                data_td: None,
                awaiting_data: false,
                transferred_bytes: 0,
                result: None,
                deadline: Deadline::after_us(hc.platform(), TASK_MANAGEMENT_TIMEOUT_US),
            },
        );
        write_bytes(&self.ius.region, base, &task_management_iu(tag, function, task_tag, self.lun));
        hc.platform().clean_for_device(&self.ius.region.slice(base, TASK_MANAGEMENT_IU_BYTES));
        let queued = (|| -> Result<(), UsbError> {
            if self.streams {
                let bus = self.ius.bus_address + (base + STATUS_OFFSET) as u64;
                let status = self.status.enqueue(hc.platform(), tag, bus, STATUS_IU_BYTES)?;
                self.set(tag, |s| s.status_td = Some(status));
                self.doorbells.status.insert(tag);
            }
            self.queue_command_pipe(hc, tag, TASK_MANAGEMENT_IU_BYTES as u32)
        })();
        queued?;
        self.kick(hc, device.slot_id);
        let deadline = Deadline::after_us(hc.platform(), TASK_MANAGEMENT_TIMEOUT_US);
        let answer = loop {
            self.take_events(hc, device, finished);
            if let Some((_, code)) = self.task_response {
                break Ok(code);
            }
            if deadline.has_passed(hc.platform()) {
                break Err(TransportError::Timeout { waited_ms: deadline.elapsed_us(hc.platform()) / 1000 });
            }
            core::hint::spin_loop();
        };
        self.vacate(tag);
        match answer? {
            response_code::COMPLETE | response_code::SUCCEEDED => Ok(()),
            code => Err(TransportError::Response { code }),
        }
    }

    /// Fails every command still in flight with `error` and resets the pipes: the status and
    /// data endpoints (and the command pipe) are dropped and added again with fresh stream
    /// contexts (§4.6.6), and CLEAR_FEATURE(HALT) resets the device's side. If that fails the
    /// transport is out of service.
    fn recover_all<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        device: &mut UsbDevice,
        error: TransportError,
        finished: &mut Finished,
    ) {
        self.statistics.pipe_resets += 1;
        for tag in self.busy_commands().iter() {
            if let Some(state) = &self.states[usize::from(tag)] {
                let result = match state.result {
                    Some(Ok(outcome)) if !state.awaiting_data => Ok(outcome),
                    _ => Err(error),
                };
                self.vacate(tag);
                self.free_tags.push(tag);
                finished.push(tag, result);
            }
        }
        self.vacate(self.tags);
        self.command.ring.retire_all();
        self.command_tags.clear();
        for pipe in [&mut self.status, &mut self.data_in, &mut self.data_out] {
            pipe.retire_all();
        }
        self.status_read = None;
        self.doorbells = PendingDoorbells::default();
        for pipe in [&mut self.status, &mut self.data_in, &mut self.data_out] {
            pipe.write_stream_contexts(hc);
        }
        let contexts = self.endpoint_contexts();
        let dcis: Vec<u8> = contexts.iter().map(|(dci, _)| *dci).collect();
        let addresses = [
            self.command.endpoint.address,
            self.status.endpoint.address,
            self.data_in.endpoint.address,
            self.data_out.endpoint.address,
        ];
        let mut result = device.configure_endpoints(hc, &dcis, &contexts);
        for address in addresses {
            result = result.and_then(|()| device.clear_halt(hc, address));
        }
        if result.is_ok() {
            result = self.post_status_read(hc);
        }
        if result.is_err() {
            self.out_of_service = true;
        }
    }

    /// The interface this transport drives.
    pub fn interface(&self) -> UasInterface {
        self.interface
    }
}
