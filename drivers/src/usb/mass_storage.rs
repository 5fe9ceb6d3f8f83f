//! A USB drive as a block device: enumeration, the choice between UAS and Bulk-Only
//! (`usb.protocol`, bridge quirks from Linux `unusual_uas.h` / `uas-detect.h`), the SCSI bring-up
//! (INQUIRY, TEST UNIT READY while the drive spins up, READ CAPACITY(16) with a fallback to
//! (10): SPC-4 §6.6, §6.47, SBC-3 §5.16-5.17), and reads through the block interface, one SCSI
//! READ per request (docs/usb-storage.md §6 and §10 steps 7-10). Writes are refused until the
//! benchmark has write jobs.

use super::bot::BotTransport;
use super::controller::SharedController;
use super::descriptors::MassStorageOffer;
use super::device::UsbDevice;
use super::error::UsbError;
use super::options::{ProtocolChoice, UsbOptions};
use super::regs::Speed;
use super::scsi::{
    Capacity, Cdb, Inquiry, ScsiStatus, Sense, INQUIRY_BYTES, READ_CAPACITY_10_BYTES, READ_CAPACITY_16_BYTES,
};
use super::transport::{CommandId, Finished, Outcome, ScsiCommand, TransportError};
use super::uas::UasTransport;
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::{
    check_request, BlockDevice, Completion, DmaBuffer, Geometry, IoError, IoErrorKind, Operation, Request,
    SubmitError,
};
use core::fmt;
use hal::dma::DmaAllocation;
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Platform};

/// The largest request: one SCSI READ of 1 MiB (17 TRBs at most).
pub const MAX_REQUEST_BYTES: u32 = 1 << 20;
/// TEST UNIT READY tries while a drive spins up, and the pause between them (10 s in all).
pub const READY_TRIES: u32 = 40;
pub const READY_PAUSE_US: u64 = 250_000;
/// Failure reports per drive before further failures are only counted.
pub const MAX_REPORTS: u32 = 16;
/// The buffer for bring-up answers (INQUIRY, READ CAPACITY).
const SCRATCH_BYTES: usize = 256;

/// Where the driver's messages go (the kernel prints them); `source` names the drive.
pub trait EventSink {
    fn report(&self, source: &str, message: &dyn fmt::Display);
}

/// A sink that drops everything.
pub struct DiscardEvents;

impl EventSink for DiscardEvents {
    fn report(&self, _source: &str, _message: &dyn fmt::Display) {}
}

/// The transport a drive runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    BulkOnly,
    Uas,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::BulkOnly => "BOT",
            Protocol::Uas => "UAS",
        }
    }
}

/// Bridges whose UAS is known broken: Bulk-Only is used unless `usb.protocol=uas` (Linux
/// `unusual_uas.h` IGNORE_UAS entries; `uas-detect.h`: an ASMedia 174c:55aa reporting 32 streams
/// is an ASM1051).
pub fn uas_quirk(vendor_id: u16, product_id: u16, streams: u32) -> Option<&'static str> {
    match (vendor_id, product_id) {
        (0x357d, 0x7788) => Some("JMicron JMS566 (UAS broken: Linux IGNORE_UAS)"),
        (0x2537, 0x1068) => Some("Norelsys NS1068 (UAS broken: Linux IGNORE_UAS)"),
        (0x174c, 0x55aa) if streams == 32 => Some("ASMedia ASM1051 (UAS broken: Linux uas-detect)"),
        _ => None,
    }
}

/// Why a drive could not be attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachError {
    Usb(UsbError),
    /// A bring-up SCSI command failed.
    Scsi {
        command: &'static str,
        reason: ScsiFailure,
    },
    /// The logical unit is not a direct-access disk.
    NotADisk {
        device_type: u8,
        qualifier: u8,
    },
}

/// Why a bring-up SCSI command failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScsiFailure {
    Sense(Sense),
    Status(ScsiStatus),
    Transport(TransportError),
    BadData { bytes: u32 },
    NeverReady { tries: u32, last: Option<Sense> },
    BlockSize { block_bytes: u32 },
    TooLarge,
}

impl fmt::Display for ScsiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScsiFailure::Sense(sense) => write!(f, "CHECK CONDITION, {sense}"),
            ScsiFailure::Status(status) => write!(f, "status {status}"),
            ScsiFailure::Transport(error) => write!(f, "{error}"),
            ScsiFailure::BadData { bytes } => write!(f, "{bytes} bytes of answer could not be decoded"),
            ScsiFailure::NeverReady { tries, last } => {
                write!(f, "not ready after {tries} tries")?;
                match last {
                    Some(sense) => write!(f, " ({sense})"),
                    None => Ok(()),
                }
            }
            ScsiFailure::BlockSize { block_bytes } => {
                write!(f, "{block_bytes}-byte blocks (a power of two from 512 to 65536 is needed)")
            }
            ScsiFailure::TooLarge => {
                write!(f, "READ CAPACITY(10) says 2^32 blocks or more and READ CAPACITY(16) failed")
            }
        }
    }
}

impl fmt::Display for AttachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttachError::Usb(error) => write!(f, "{error}"),
            AttachError::Scsi { command, reason } => write!(f, "{command}: {reason}"),
            AttachError::NotADisk { device_type, qualifier } => write!(
                f,
                "SCSI peripheral device type {device_type:#04x} (qualifier {qualifier}) is not a direct-access disk"
            ),
        }
    }
}

impl From<UsbError> for AttachError {
    fn from(error: UsbError) -> Self {
        AttachError::Usb(error)
    }
}

/// What the console says about a drive.
#[derive(Clone, Debug)]
pub struct DriveIdentity {
    pub port: u8,
    pub speed: Speed,
    pub slot_id: u8,
    pub vendor_id: u16,
    pub product_id: u16,
    pub usb_version: u16,
    pub manufacturer: String,
    pub product: String,
    pub serial: String,
    pub inquiry: Inquiry,
    pub capacity: Capacity,
    pub protocol: Protocol,
    /// UAS: tags (streams at SuperSpeed); 0 for Bulk-Only.
    pub tags: u16,
    pub streams: bool,
    pub commands_in_flight: u32,
    /// Bulk-Only: Get Max LUN + 1.
    pub logical_units: u8,
    pub offered: (bool, bool),
    /// Why the transport differs from the one asked for, if it does.
    pub protocol_note: Option<String>,
    pub read_capacity_16: bool,
}

/// Counters of one drive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DriveStatistics {
    pub requests: u64,
    pub failed: u64,
    pub by_kind: [u64; IoErrorKind::ALL.len()],
}

// One per drive, made once and never moved: boxing the larger transport would add a pointer
// chase to every command for nothing.
#[allow(clippy::large_enum_variant)]
enum Transport<'p> {
    Bot(BotTransport<'p>),
    Uas(UasTransport<'p>),
}

impl Transport<'_> {
    fn start<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut super::controller::HostController<'_, R, P>,
        command: ScsiCommand,
    ) -> Result<CommandId, TransportError> {
        match self {
            Transport::Bot(bot) => bot.start(hc, command),
            Transport::Uas(uas) => uas.start(hc, command),
        }
    }

    fn kick<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut super::controller::HostController<'_, R, P>,
        slot_id: u8,
    ) {
        match self {
            Transport::Bot(bot) => bot.kick(hc, slot_id),
            Transport::Uas(uas) => uas.kick(hc, slot_id),
        }
    }

    fn poll<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut super::controller::HostController<'_, R, P>,
        device: &mut UsbDevice,
        finished: &mut Finished,
    ) {
        match self {
            Transport::Bot(bot) => bot.poll(hc, device, finished),
            Transport::Uas(uas) => uas.poll(hc, device, finished),
        }
    }

    fn slots(&self) -> u32 {
        match self {
            Transport::Bot(_) => 1,
            Transport::Uas(uas) => u32::from(uas.command_slots()),
        }
    }
}

/// A read from its submission to its completion, kept in its slot and worked on through
/// references: moving a whole request (48 bytes) from queue to queue and out to be completed
/// cost a `memcpy` call per move on the kernel targets. Filled field by field from the request.
#[derive(Clone, Copy, Debug)]
struct Read {
    state: ReadState,
    /// The transport's handle while running.
    id: CommandId,
    tag: u32,
    block_count: u32,
    bytes: u32,
    lba: u64,
    /// Where the data goes: the request's buffer cut to `bytes`, and its bus address.
    data: DmaBuffer,
    bus: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadState {
    Free,
    /// Submitted, started at the next kick.
    Waiting,
    Running,
}

impl Read {
    const FREE: Read = Read {
        state: ReadState::Free,
        id: 0,
        tag: 0,
        block_count: 0,
        bytes: 0,
        lba: 0,
        data: DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 0 },
        bus: 0,
    };
}

/// A USB mass storage drive (LUN 0) as a block device.
pub struct MassStorageDevice<'p, R: RegisterIo, P: Platform> {
    name: String,
    controller: SharedController<'p, R, P>,
    device: UsbDevice<'p>,
    transport: Transport<'p>,
    identity: DriveIdentity,
    geometry: Geometry,
    dma: BusTranslation,
    long_cdbs: bool,
    scratch: DmaAllocation<'p>,
    /// One slot per command the transport carries at once.
    reads: Vec<Read>,
    /// Slots of submitted reads in the order they came.
    waiting: VecDeque<usize>,
    ready: VecDeque<Completion>,
    finished: Finished,
    statistics: DriveStatistics,
    reports: u32,
    events: &'p dyn EventSink,
}

impl<'p, R: RegisterIo, P: Platform> MassStorageDevice<'p, R, P> {
    /// Enumerates the device on `port` (enabled at `speed`), chooses its transport, and brings
    /// its logical unit 0 up as a disk.
    pub fn attach(
        controller: SharedController<'p, R, P>,
        port: u8,
        speed: Speed,
        options: &UsbOptions,
        name: String,
        events: &'p dyn EventSink,
    ) -> Result<Self, AttachError> {
        let (mut device, transport, protocol_note, logical_units) = {
            let mut hc = controller.borrow_mut();
            let mut device = UsbDevice::enumerate(&mut hc, port, speed)?;
            let offer = MassStorageOffer::find(&device.configuration);
            let (protocol, note) = choose_protocol(
                options.protocol,
                &offer,
                &device,
                hc.capabilities().max_stream_array_entries(),
            )?;
            let (transport, logical_units) = match protocol {
                Protocol::Uas => {
                    (Transport::Uas(UasTransport::new(&mut hc, &mut device, offer.uas.expect("chosen"))?), 1)
                }
                Protocol::BulkOnly => {
                    let (bot, max_lun) =
                        BotTransport::new(&mut hc, &mut device, offer.bulk_only.expect("chosen"))?;
                    (Transport::Bot(bot), max_lun + 1)
                }
            };
            (device, transport, note, logical_units)
        };
        let (dma, scratch) = {
            let hc = controller.borrow();
            (
                hc.dma(),
                DmaAllocation::new(hc.platform(), &hc.dma(), SCRATCH_BYTES, 64).map_err(UsbError::from)?,
            )
        };
        let offer = MassStorageOffer::find(&device.configuration);
        let (tags, streams) = match &transport {
            Transport::Uas(uas) => (uas.tags(), uas.uses_streams()),
            Transport::Bot(_) => (0, false),
        };
        let identity = DriveIdentity {
            port,
            speed,
            slot_id: device.slot_id,
            vendor_id: device.descriptor.vendor_id,
            product_id: device.descriptor.product_id,
            usb_version: device.descriptor.usb_version,
            manufacturer: core::mem::take(&mut device.manufacturer),
            product: core::mem::take(&mut device.product),
            serial: core::mem::take(&mut device.serial),
            inquiry: Inquiry::parse(&[0; 36]).expect("36 bytes"),
            capacity: Capacity { last_lba: 0, block_bytes: 512 },
            protocol: if matches!(transport, Transport::Uas(_)) { Protocol::Uas } else { Protocol::BulkOnly },
            tags,
            streams,
            commands_in_flight: transport.slots(),
            logical_units,
            offered: (offer.uas.is_some(), offer.bulk_only.is_some()),
            protocol_note,
            read_capacity_16: true,
        };
        let mut drive = MassStorageDevice {
            name,
            controller,
            device,
            transport,
            identity,
            geometry: Geometry {
                logical_block_bytes: 512,
                block_count: 0,
                max_request_blocks: 1,
                max_in_flight: 1,
            },
            dma,
            long_cdbs: false,
            scratch,
            reads: Vec::new(),
            waiting: VecDeque::new(),
            ready: VecDeque::new(),
            finished: Finished::default(),
            statistics: DriveStatistics::default(),
            reports: 0,
            events,
        };
        drive.bring_up_disk()?;
        Ok(drive)
    }

    pub fn identity(&self) -> &DriveIdentity {
        &self.identity
    }

    /// Names the drive (the kernel names it once it is known to work).
    pub fn set_name(&mut self, name: String) {
        self.name = name;
    }

    pub fn statistics(&self) -> DriveStatistics {
        self.statistics
    }

    /// The transport's own counters, as text for the end-of-run line.
    pub fn transport_counters(&self) -> String {
        match &self.transport {
            Transport::Bot(bot) => {
                let s = bot.statistics();
                alloc::format!(
                    "{} commands, {} REQUEST SENSE, {} STALLs cleared, {} reset recoveries",
                    s.commands,
                    s.sense_requests,
                    s.stalls_cleared,
                    s.reset_recoveries
                )
            }
            Transport::Uas(uas) => {
                let s = uas.statistics();
                alloc::format!(
                    "{} commands, up to {} in flight, {} aborts, {} pipe resets, {} unexpected IUs",
                    s.commands,
                    s.max_in_flight,
                    s.aborts,
                    s.pipe_resets,
                    s.unexpected_ius
                )
            }
        }
    }

    /// Runs one SCSI command to its end (bring-up and checks; the transport's timeout bounds it).
    pub fn execute(&mut self, command: ScsiCommand) -> Result<Outcome, TransportError> {
        let mut hc = self.controller.borrow_mut();
        let id = self.transport.start(&mut hc, command)?;
        self.transport.kick(&mut hc, self.device.slot_id);
        loop {
            self.finished.clear();
            self.transport.poll(&mut hc, &mut self.device, &mut self.finished);
            if let Some(result) = self.finished.take(id) {
                return result;
            }
            core::hint::spin_loop();
        }
    }

    /// A command with `bytes` of data in into a scratch buffer; the data comes back.
    fn execute_reading(&mut self, cdb: Cdb, bytes: u32) -> Result<Vec<u8>, ScsiFailure> {
        let bytes = bytes.min(SCRATCH_BYTES as u32);
        let DmaAllocation { region: scratch, bus_address: bus } = self.scratch;
        scratch.zero(0, SCRATCH_BYTES);
        let outcome = self.execute(ScsiCommand::reading(cdb, bus, bytes)).map_err(ScsiFailure::Transport)?;
        check_outcome(&outcome)?;
        self.controller.borrow().platform().invalidate_for_cpu(&scratch.buffer());
        let mut data = alloc::vec![0u8; outcome.transferred_bytes.min(bytes) as usize];
        scratch.read_bytes(0, &mut data);
        Ok(data)
    }

    fn bring_up_disk(&mut self) -> Result<(), AttachError> {
        let scsi = |command: &'static str| move |reason| AttachError::Scsi { command, reason };
        let bytes = self
            .execute_reading(Cdb::inquiry(INQUIRY_BYTES), u32::from(INQUIRY_BYTES))
            .map_err(scsi("INQUIRY"))?;
        let inquiry = Inquiry::parse(&bytes).ok_or(AttachError::Scsi {
            command: "INQUIRY",
            reason: ScsiFailure::BadData { bytes: bytes.len() as u32 },
        })?;
        self.identity.inquiry = inquiry;
        if !inquiry.is_direct_access() {
            return Err(AttachError::NotADisk {
                device_type: inquiry.device_type,
                qualifier: inquiry.qualifier,
            });
        }
        self.wait_until_ready().map_err(scsi("TEST UNIT READY"))?;
        let capacity = self.read_capacity()?;
        self.identity.capacity = capacity;
        self.long_cdbs = capacity.blocks() > 1 << 32;
        let mut max_request_blocks = MAX_REQUEST_BYTES / capacity.block_bytes;
        if !self.long_cdbs {
            max_request_blocks = max_request_blocks.min(0xffff);
        }
        self.geometry = Geometry {
            logical_block_bytes: capacity.block_bytes,
            block_count: capacity.blocks(),
            max_request_blocks: max_request_blocks.max(1),
            max_in_flight: self.transport.slots(),
        };
        self.reads = alloc::vec![Read::FREE; self.geometry.max_in_flight as usize];
        Ok(())
    }

    /// TEST UNIT READY until GOOD, repeated while the drive is becoming ready or reports a
    /// unit attention (power on, medium change) (SPC-4 §6.47, docs/usb-storage.md §6).
    fn wait_until_ready(&mut self) -> Result<(), ScsiFailure> {
        let mut last = None;
        for _ in 0..READY_TRIES {
            let outcome = self
                .execute(ScsiCommand::without_data(Cdb::test_unit_ready()))
                .map_err(ScsiFailure::Transport)?;
            match check_outcome(&outcome) {
                Ok(()) => return Ok(()),
                Err(ScsiFailure::Sense(sense)) if sense.worth_retrying() => last = Some(sense),
                Err(failure) => return Err(failure),
            }
            let platform = self.controller.borrow().platform();
            platform.delay_us(READY_PAUSE_US);
        }
        Err(ScsiFailure::NeverReady { tries: READY_TRIES, last })
    }

    /// READ CAPACITY(16), and READ CAPACITY(10) when (16) fails (some bridges refuse it).
    fn read_capacity(&mut self) -> Result<Capacity, AttachError> {
        let long = self
            .execute_reading(Cdb::read_capacity_16(), READ_CAPACITY_16_BYTES)
            .ok()
            .and_then(|bytes| Capacity::parse_16(&bytes));
        let capacity = match long {
            Some(capacity) => capacity,
            None => {
                self.identity.read_capacity_16 = false;
                let command = "READ CAPACITY(10)";
                let bytes = self
                    .execute_reading(Cdb::read_capacity_10(), READ_CAPACITY_10_BYTES as u32)
                    .map_err(|reason| AttachError::Scsi { command, reason })?;
                let capacity = Capacity::parse_10(&bytes).ok_or(AttachError::Scsi {
                    command,
                    reason: ScsiFailure::BadData { bytes: bytes.len() as u32 },
                })?;
                if capacity.needs_16() {
                    return Err(AttachError::Scsi { command, reason: ScsiFailure::TooLarge });
                }
                capacity
            }
        };
        if !capacity.block_size_is_usable() {
            return Err(AttachError::Scsi {
                command: "READ CAPACITY",
                reason: ScsiFailure::BlockSize { block_bytes: capacity.block_bytes },
            });
        }
        Ok(capacity)
    }

    fn report(&mut self, message: &dyn fmt::Display) {
        if self.reports < MAX_REPORTS {
            self.events.report(&self.name, message);
            self.reports += 1;
            if self.reports == MAX_REPORTS {
                self.events.report(&self.name, &"further failures are only counted");
            }
        }
    }

    /// Completes the read the transport ran as command `id`.
    fn complete_command(&mut self, id: CommandId, result: Result<Outcome, &TransportError>) {
        let running = |read: &Read| read.state == ReadState::Running && read.id == id;
        if let Some(index) = self.reads.iter().position(running) {
            let completion = self.complete(index, result);
            self.ready.push_back(completion);
        }
    }

    /// The completion of the read in slot `index`, with its failure reported by name; frees the
    /// slot.
    fn complete(&mut self, index: usize, result: Result<Outcome, &TransportError>) -> Completion {
        let read = &mut self.reads[index];
        read.state = ReadState::Free;
        let (tag, lba, block_count, bytes, data) =
            (read.tag, read.lba, read.block_count, read.bytes, read.data);
        let error = match result {
            Ok(outcome) if outcome.is_good() && outcome.transferred_bytes >= bytes => None,
            Ok(outcome) if outcome.is_good() => Some((
                IoErrorKind::Transfer,
                outcome.transferred_bytes,
                alloc::format!(
                    "{}",
                    TransportError::ShortTransfer {
                        expected_bytes: bytes,
                        transferred_bytes: outcome.transferred_bytes
                    }
                ),
            )),
            Ok(outcome) => {
                let code = outcome.sense.map_or(u32::from(outcome.status.0), |sense| sense.code24());
                let text = match outcome.sense {
                    Some(sense) => alloc::format!("{}, {sense}", outcome.status),
                    None => alloc::format!("{}", outcome.status),
                };
                Some((IoErrorKind::DeviceStatus, code, text))
            }
            Err(error) => {
                Some((transport_error_kind(error), transport_error_code(error), alloc::format!("{error}")))
            }
        };
        self.controller.borrow().platform().invalidate_for_cpu(&data);
        let result = match error {
            None => Ok(()),
            Some((kind, code, text)) => {
                self.statistics.failed += 1;
                self.statistics.by_kind[kind.index()] += 1;
                let cdb = Cdb::transfer(false, lba, block_count, self.long_cdbs);
                let message =
                    alloc::format!("{} of {block_count} blocks at LBA {lba} failed: {text}", cdb.name());
                self.report(&message);
                Err(IoError { kind, code })
            }
        };
        Completion { tag, result }
    }
}

/// A bring-up command's outcome as a failure, if it is one.
fn check_outcome(outcome: &Outcome) -> Result<(), ScsiFailure> {
    match (outcome.status, outcome.sense) {
        (ScsiStatus::GOOD, _) => Ok(()),
        (ScsiStatus::CHECK_CONDITION, Some(sense)) => Err(ScsiFailure::Sense(sense)),
        (status, _) => Err(ScsiFailure::Status(status)),
    }
}

fn transport_error_kind(error: &TransportError) -> IoErrorKind {
    match error {
        TransportError::Timeout { .. } => IoErrorKind::Timeout,
        TransportError::PhaseError
        | TransportError::BadStatusWrapper { .. }
        | TransportError::BadInformationUnit { .. }
        | TransportError::Response { .. } => IoErrorKind::Protocol,
        TransportError::Transfer { .. }
        | TransportError::ShortTransfer { .. }
        | TransportError::RecoveryFailed(_)
        | TransportError::OutOfService => IoErrorKind::Transfer,
    }
}

fn transport_error_code(error: &TransportError) -> u32 {
    match error {
        TransportError::Transfer { code, .. } => u32::from(code.0),
        TransportError::Response { code } => u32::from(*code),
        TransportError::BadInformationUnit { id, .. } => u32::from(*id),
        _ => 0,
    }
}

/// Picks the transport (docs/usb-storage.md §5-6): UAS when offered and usable (streams at
/// SuperSpeed, not a known-broken bridge), Bulk-Only otherwise; `usb.protocol` overrides, and
/// a choice the drive cannot honour falls back with a note.
pub fn choose_protocol(
    choice: ProtocolChoice,
    offer: &MassStorageOffer,
    device: &UsbDevice,
    controller_stream_entries: u32,
) -> Result<(Protocol, Option<String>), UsbError> {
    let descriptor = &device.descriptor;
    let uas_streams = offer.uas.map_or(0, |uas| uas.streams());
    let needs_streams = device.speed.is_super_speed();
    let uas_blocker = if offer.uas.is_none() {
        Some("the drive offers no UAS interface")
    } else if needs_streams && (controller_stream_entries < 2 || uas_streams == 0) {
        Some("UAS at SuperSpeed needs bulk streams, which the controller or drive lacks")
    } else {
        None
    };
    let quirk = uas_quirk(descriptor.vendor_id, descriptor.product_id, uas_streams);
    let (first, second) = match choice {
        ProtocolChoice::BulkOnly => (Protocol::BulkOnly, Protocol::Uas),
        _ => (Protocol::Uas, Protocol::BulkOnly),
    };
    let usable = |protocol: Protocol| match protocol {
        Protocol::Uas => uas_blocker.is_none() && (choice == ProtocolChoice::Uas || quirk.is_none()),
        Protocol::BulkOnly => offer.bulk_only.is_some(),
    };
    if usable(first) {
        return Ok((first, None));
    }
    let why = match first {
        Protocol::Uas => match uas_blocker {
            Some(blocker) => String::from(blocker),
            None => alloc::format!("{} is on the bridge quirk list", quirk.unwrap_or("the bridge")),
        },
        Protocol::BulkOnly => String::from("the drive offers no Bulk-Only interface"),
    };
    if usable(second) {
        let note = match choice {
            // A Bulk-Only drive chosen by default needs no explanation.
            ProtocolChoice::Auto if offer.uas.is_none() => None,
            ProtocolChoice::Auto => Some(alloc::format!("{why}; using {}", second.name())),
            _ => Some(alloc::format!("usb.protocol={}: {why}; using {}", choice.name(), second.name())),
        };
        return Ok((second, note));
    }
    if offer.uas.is_some() && uas_blocker.is_some() && offer.bulk_only.is_none() {
        return Err(UsbError::NoStreams);
    }
    Err(UsbError::NotMassStorage {
        class: descriptor.class,
        subclass: descriptor.subclass,
        protocol: descriptor.protocol,
    })
}

impl<R: RegisterIo, P: Platform> BlockDevice for MassStorageDevice<'_, R, P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Checks the request (range, length, buffer reachable, reads only) and queues it.
    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if let Err(error) = check_request(&self.geometry, &request) {
            return Err((request, error));
        }
        if request.operation != Operation::Read {
            return Err((request, SubmitError::Unsupported));
        }
        let Some(index) = self.reads.iter().position(|read| read.state == ReadState::Free) else {
            return Err((request, SubmitError::QueueFull));
        };
        // check_request made sure the buffer holds the request's blocks.
        let bytes = request.block_count * self.geometry.logical_block_bytes;
        let (Ok(bus), Some(data)) = (
            self.dma.to_bus(request.buffer.physical_address, u64::from(bytes)),
            request.buffer.slice(0, bytes as usize),
        ) else {
            return Err((request, SubmitError::BadBuffer));
        };
        // Nothing dirty in the cache may later be written back over what the device writes.
        self.controller.borrow().platform().clean_for_device(&data);
        self.statistics.requests += 1;
        let read = &mut self.reads[index];
        read.state = ReadState::Waiting;
        read.tag = request.tag;
        read.lba = request.lba;
        read.block_count = request.block_count;
        read.bytes = bytes;
        read.data = data;
        read.bus = bus;
        self.waiting.push_back(index);
        Ok(())
    }

    /// Starts every submitted request as a SCSI READ and rings the doorbells once.
    fn kick(&mut self) {
        let mut hc = self.controller.borrow_mut();
        while let Some(index) = self.waiting.pop_front() {
            let read = &self.reads[index];
            let cdb = Cdb::transfer(false, read.lba, read.block_count, self.long_cdbs);
            match self.transport.start(&mut hc, ScsiCommand::reading(cdb, read.bus, read.bytes)) {
                Ok(id) => {
                    let read = &mut self.reads[index];
                    read.id = id;
                    read.state = ReadState::Running;
                }
                Err(error) => {
                    drop(hc);
                    let completion = self.complete(index, Err(&error));
                    self.ready.push_back(completion);
                    hc = self.controller.borrow_mut();
                }
            }
        }
        self.transport.kick(&mut hc, self.device.slot_id);
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if self.reads.iter().any(|read| read.state == ReadState::Running) {
            self.finished.clear();
            {
                let mut hc = self.controller.borrow_mut();
                self.transport.poll(&mut hc, &mut self.device, &mut self.finished);
            }
            // By index: the lists stay where they are (moving them out and back was a `memcpy`
            // call per poll), and a success is its three words.
            for index in 0..self.finished.succeeded().len() {
                let (id, outcome) = self.finished.succeeded()[index];
                self.complete_command(id, Ok(outcome));
            }
            for index in 0..self.finished.failed().len() {
                let (id, error) = self.finished.failed()[index];
                self.complete_command(id, Err(&error));
            }
        }
        let mut produced = 0;
        while produced < completions.len() {
            let Some(completion) = self.ready.pop_front() else {
                break;
            };
            completions[produced] = completion;
            produced += 1;
        }
        produced
    }
}
