//! Host tests of the USB driver against the simulated xHCI and drives (`sim`): bring-up,
//! enumeration, both transports, protocol choice, error recovery and the block interface.
#![forbid(unsafe_code)]

mod pcie;

extern crate std;

use super::context::dci_of;
use super::controller::{HostController, PortList, PortWait, DEFAULT_CONNECT_WAIT_MS};
use super::dwc3;
use super::error::UsbError;
use super::mass_storage::{AttachError, EventSink, MassStorageDevice, Protocol, ScsiFailure};
use super::options::{ProtocolChoice, UsbOptions};
use super::regs::Speed;
use super::sim::device::{DeviceKind, SimUsbDevice, BOT_IN, BOT_OUT};
use super::sim::disk::SimDisk;
use super::sim::dwc3::{self as sim_dwc3, SimDwc3};
use super::sim::{NvmeArena, SimConfig, SimPlatform, SimXhci, REGISTER_BYTES};
use super::SharedController;
use blockdev::{BlockDevice, Completion, DmaBuffer, IoErrorKind, Operation, Request, SubmitError};
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use hal::platform::Platform;
use std::format;
use std::rc::Rc;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

const ARENA: usize = 48 << 20;
const DISK_BLOCKS: u64 = 1 << 17;

#[derive(Default)]
struct Recorded {
    messages: RefCell<Vec<String>>,
}

impl EventSink for Recorded {
    fn report(&self, source: &str, message: &dyn core::fmt::Display) {
        self.messages.borrow_mut().push(format!("{source}: {message}"));
    }
}

impl Recorded {
    fn any(&self, text: &str) -> bool {
        self.messages.borrow().iter().any(|m| m.contains(text))
    }
}

fn platform() -> SimPlatform {
    let platform = SimPlatform::new(ARENA);
    platform.set_step_ticks(20_000);
    platform
}

fn disk() -> SimDisk {
    SimDisk::new(DISK_BLOCKS, 512)
}

fn drive(speed: Speed, kind: DeviceKind) -> SimUsbDevice {
    SimUsbDevice::new(speed, kind, disk())
}

type Shared<'a> = SharedController<'a, &'a SimXhci<'a>, SimPlatform>;
type Drive<'a> = MassStorageDevice<'a, &'a SimXhci<'a>, SimPlatform>;

fn controller<'a>(sim: &'a SimXhci<'a>, platform: &'a SimPlatform) -> Result<Shared<'a>, UsbError> {
    let hc = HostController::bring_up(
        sim,
        REGISTER_BYTES,
        platform,
        platform.translation(),
        "xhci test".to_string(),
    )?;
    Ok(Rc::new(RefCell::new(hc)))
}

fn attach<'a>(
    shared: &Shared<'a>,
    port: u8,
    choice: ProtocolChoice,
    events: &'a dyn EventSink,
) -> Result<Drive<'a>, AttachError> {
    let speed = shared.borrow().enable_port(port)?.expect("a device on the port");
    let options = UsbOptions { protocol: choice, ..UsbOptions::default() };
    MassStorageDevice::attach(shared.clone(), port, speed, &options, "usb0".to_string(), events)
}

fn read(tag: u32, lba: u64, block_count: u32, buffer: DmaBuffer) -> Request {
    Request { tag, operation: Operation::Read, lba, block_count, buffer }
}

/// Polls until `count` completions came (bounded).
fn wait_for(device: &mut dyn BlockDevice, count: usize) -> Vec<Completion> {
    let mut all = Vec::new();
    let mut out = [Completion::default(); 8];
    for _ in 0..200_000 {
        let n = device.poll(&mut out);
        all.extend_from_slice(&out[..n]);
        if all.len() >= count {
            return all;
        }
    }
    panic!("only {} of {count} completions", all.len());
}

fn read_one(device: &mut dyn BlockDevice, tag: u32, lba: u64, blocks: u32, buffer: DmaBuffer) -> Completion {
    device.submit(read(tag, lba, blocks, buffer)).expect("accepted");
    device.kick();
    wait_for(device, 1)[0]
}

fn check_pattern(platform: &SimPlatform, buffer: &DmaBuffer, lba: u64, bytes: usize) {
    let data = platform.bytes_of(buffer);
    let expected = SimDisk::new(DISK_BLOCKS, 512).contents(lba, (bytes / 512) as u32);
    assert!(data[..bytes] == expected[..], "data at LBA {lba} ({bytes} bytes) differs");
}

#[test]
fn a_qemu_like_controller_comes_up_polled() {
    let platform = platform();
    let sim = SimXhci::new(&platform, SimConfig::default(), vec![]);
    let shared = controller(&sim, &platform).expect("bring-up");
    let hc = shared.borrow();
    assert_eq!(hc.capabilities().max_ports, 8);
    assert_eq!(hc.slots_enabled(), 32);
    assert_eq!(hc.protocols().len(), 2);
    assert_eq!(hc.protocol_of(1).unwrap().major_revision, 3);
    assert_eq!(hc.protocol_of(5).unwrap().major_revision, 2);
    assert_eq!(hc.enable_port(1).unwrap(), None, "nothing connected");
    assert_eq!(sim.statistics().commands, vec![super::trb::trb_type::NO_OP_COMMAND]);
    sim.assert_no_violations();
}

#[test]
fn firmware_state_is_taken_over_or_named() {
    // Left running, with a legacy capability the firmware releases: halted, reset, handed over.
    let platform = platform();
    let config = SimConfig {
        start_running: true,
        legacy_bios_owned: Some(true),
        scratchpads: 3,
        ..SimConfig::default()
    };
    let sim = SimXhci::new(&platform, config, vec![]);
    controller(&sim, &platform).expect("bring-up");
    sim.assert_no_violations();
    // A firmware that never lets go.
    let platform = self::platform();
    let config = SimConfig { legacy_bios_owned: Some(false), ..SimConfig::default() };
    let sim = SimXhci::new(&platform, config, vec![]);
    let error = controller(&sim, &platform).err().expect("refused");
    assert!(matches!(error, UsbError::FirmwareOwned { .. }), "{error:?}");
    assert!(format!("{error}").contains("did not hand the controller over within 1 s"));
    // Nothing at the address: all ones.
    #[derive(Clone)]
    struct Absent;
    impl RegisterIo for Absent {
        fn read32(&self, _offset_bytes: usize) -> u32 {
            u32::MAX
        }
        fn write32(&self, _offset_bytes: usize, _value: u32) {
            panic!("nothing may be written to an absent controller");
        }
    }
    let error =
        HostController::bring_up(Absent, 0x4000, &platform, platform.translation(), String::new()).err();
    assert_eq!(
        error.map(|e| format!("{e}")),
        Some(String::from("no xHCI answers (CAPLENGTH/HCIVERSION = 0xffffffff)"))
    );
    // What RP1 answers when its PCIe link is down, and other words no xHCI has.
    #[derive(Clone)]
    struct Reads(u32);
    impl RegisterIo for Reads {
        fn read32(&self, _offset_bytes: usize) -> u32 {
            self.0
        }
        fn write32(&self, _offset_bytes: usize, _value: u32) {
            panic!("nothing may be written before the capabilities make sense");
        }
    }
    for word in [0xdead_dead, 0x0100_0000, 0x0100_001c, 0x0100_0042, 0x0080_0040, 0x0200_0040, 0] {
        let error =
            HostController::bring_up(Reads(word), 0x4000, &platform, platform.translation(), String::new())
                .err();
        assert_eq!(error, Some(UsbError::NoController { first_word: word }), "{word:#x}");
    }
}

#[test]
fn a_bot_drive_is_identified_and_reads_every_shape() {
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let events = Recorded::default();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).expect("attach");
    let identity = device.identity().clone();
    assert_eq!((identity.vendor_id, identity.product_id, identity.speed), (0x46f4, 0x0001, Speed::Super));
    assert_eq!(
        (identity.manufacturer.as_str(), identity.product.as_str(), identity.serial.as_str()),
        ("BAREBENCH", "SIM USB DISK", "SIM0001")
    );
    assert_eq!(
        (identity.inquiry.vendor_text(), identity.inquiry.product_text()),
        ("BAREBNCH", "SIM USB DISK")
    );
    assert_eq!(identity.protocol, Protocol::BulkOnly);
    assert_eq!(identity.logical_units, 1);
    assert!(identity.read_capacity_16);
    let geometry = device.geometry();
    assert_eq!(
        (geometry.block_count, geometry.logical_block_bytes, geometry.max_in_flight),
        (DISK_BLOCKS, 512, 1)
    );
    assert_eq!(geometry.max_request_blocks, 2048, "1 MiB per request");
    let buffer = platform.allocate_dma((1 << 20) + 0x2_0000, 0x1_0000).unwrap();
    let mut tag = 0;
    for bytes in [512usize, 4096, 64 << 10, 1 << 20] {
        // Page-aligned, inside a page, and straddling a 64 KiB boundary.
        for offset in [0usize, 512, 0x1_0000 - 512] {
            for lba in [0, DISK_BLOCKS / 3, DISK_BLOCKS - (bytes / 512) as u64] {
                tag += 1;
                let data = buffer.slice(offset, bytes).unwrap();
                let done = read_one(&mut device, tag, lba, (bytes / 512) as u32, data);
                assert_eq!(done, Completion { tag, result: Ok(()) });
                check_pattern(&platform, &data, lba, bytes);
            }
        }
    }
    assert!(events.messages.borrow().is_empty(), "{:?}", events.messages.borrow());
    sim.assert_no_violations();
}

/// How a test lets the three events of a Bulk-Only command come. Each pipe's events keep their
/// order (a ring's TDs complete in order); the two pipes' interleave as a controller may
/// interleave them (xHCI 1.2 §4.10.1: nothing orders the events of different endpoints).
#[derive(Clone, Copy, Debug)]
enum BulkOnlyEventOrder {
    /// The CBW's event while the drive still NAKs the data (QEMU's `usb-storage` answers a
    /// READ's data asynchronously), then the data's and the CSW's.
    CommandWhileDataWaits,
    /// The data's and the CSW's events on bulk IN before the CBW's on bulk OUT.
    InBeforeOut,
    /// The data's event, the CBW's, then the CSW's.
    OutBetweenDataAndStatus,
}

/// One 4 KiB read whose events come in `order`; polls between the steps and checks that the
/// command ends only once all three events are in.
fn read_with_events_in_order(
    sim: &SimXhci<'_>,
    device: &mut dyn BlockDevice,
    order: BulkOnlyEventOrder,
    tag: u32,
    lba: u64,
    buffer: DmaBuffer,
) -> Completion {
    let (bulk_in, bulk_out) = (dci_of(BOT_IN), dci_of(BOT_OUT));
    let mut out = [Completion::default(); 2];
    let mut poll_expecting_nothing = |device: &mut dyn BlockDevice, step: &str| {
        assert_eq!(device.poll(&mut out), 0, "read {tag} ({order:?}) ended after {step}");
    };
    device.submit(read(tag, lba, 8, buffer)).expect("accepted");
    match order {
        BulkOnlyEventOrder::CommandWhileDataWaits => {
            sim.with_device(1, |d| d.faults.hold_bot_data_in = true);
            device.kick();
            poll_expecting_nothing(device, "the CBW's event");
            sim.with_device(1, |d| d.faults.hold_bot_data_in = false);
            sim.rerun();
        }
        BulkOnlyEventOrder::InBeforeOut | BulkOnlyEventOrder::OutBetweenDataAndStatus => {
            sim.hold_transfer_events(true);
            device.kick();
            sim.release_held_of(bulk_in, 1);
            poll_expecting_nothing(device, "the data's event");
            let (second, third) = match order {
                BulkOnlyEventOrder::InBeforeOut => (bulk_in, bulk_out),
                _ => (bulk_out, bulk_in),
            };
            sim.release_held_of(second, 1);
            poll_expecting_nothing(device, "two of three events");
            sim.hold_transfer_events(false);
            sim.release_held_of(third, 1);
            assert_eq!(sim.held_count(), 0, "read {tag} ({order:?}): three events");
        }
    }
    wait_for(device, 1)[0]
}

#[test]
fn bulk_only_matches_each_event_only_against_the_tds_of_its_own_pipe() {
    // Bulk OUT carries one TD per read (the CBW), bulk IN two (data, CSW): on the 256-TRB rings
    // a CBW and a data TD come to sit at the same index with the same cycle (here first at read
    // 508 after attach). An event matched against the other pipe's TDs there took the CBW's
    // event for the data's and queued the CSW read behind a data-in still under way (QEMU never
    // answers it: the command waited for its 10 s timeout).
    for order in [
        BulkOnlyEventOrder::CommandWhileDataWaits,
        BulkOnlyEventOrder::InBeforeOut,
        BulkOnlyEventOrder::OutBetweenDataAndStatus,
    ] {
        let platform = platform();
        let sim = super_speed_bot(&platform);
        let shared = controller(&sim, &platform).unwrap();
        let events = Recorded::default();
        let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        for tag in 0..READS_TO_MEET_EVERY_RING_POSITION {
            let lba = u64::from(tag) * 3;
            let done = read_with_events_in_order(&sim, &mut device, order, tag, lba, buffer);
            assert_eq!(done, Completion { tag, result: Ok(()) }, "{order:?}");
            check_pattern(&platform, &buffer, lba, 4096);
            let violations = sim.violations();
            assert!(violations.is_empty(), "read {tag} ({order:?}): {violations:#?}");
        }
        assert!(events.messages.borrow().is_empty(), "{order:?}: {:?}", events.messages.borrow());
    }
}

/// Reads enough for bulk OUT's enqueue index to pass every slot of its 256-TRB ring twice, with
/// either cycle state.
const READS_TO_MEET_EVERY_RING_POSITION: u32 = 600;

#[test]
fn many_commands_wrap_every_ring() {
    // 400 BOT commands: 3 TDs each on 256-TRB rings and ~3 events each on a 256-entry event ring.
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).unwrap();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    for tag in 0..400u32 {
        let lba = u64::from(tag) * 7;
        assert_eq!(read_one(&mut device, tag, lba, 8, buffer).result, Ok(()));
        check_pattern(&platform, &buffer, lba, 4096);
    }
    assert!(sim.statistics().events > 1200);
    assert!(shared.borrow().statistics().erdp_writes > 0);
    sim.assert_no_violations();
}

#[test]
fn uas_at_super_speed_keeps_its_streams_busy_out_of_order() {
    let platform = platform();
    let sim = super_speed_uas(&platform);
    let shared = controller(&sim, &platform).unwrap();
    let (mut device, buffer) = uas_with_fifteen_held_reads(&sim, &platform, &shared);
    sim.hold_transfer_events(true);
    let identity = device.identity().clone();
    assert_eq!(identity.protocol, Protocol::Uas);
    assert!(identity.streams);
    assert_eq!(
        (identity.tags, identity.commands_in_flight),
        (16, 15),
        "QEMU's 16 streams, one kept for task management"
    );
    assert_eq!(device.geometry().max_in_flight, 15);
    let extra = buffer.slice(0, 512).unwrap();
    assert_eq!(device.submit(read(99, 0, 1, extra)).unwrap_err().1, SubmitError::QueueFull);
    device.kick();
    let mut waiting = sim.with_device(2, |d| d.uas_tags_in_progress());
    assert_eq!(waiting.len(), 15, "the drive holds all 15 commands at once");
    let mut done = Vec::new();
    let mut out = [Completion::default(); 4];
    for _ in 0..10_000 {
        // The drive answers the newest command first; the controller's events come newest first.
        if let Some(tag) = waiting.pop() {
            sim.with_device(2, |d| d.release_uas_task(tag));
            sim.rerun();
        }
        sim.release_held(5, true);
        let n = device.poll(&mut out);
        done.extend_from_slice(&out[..n]);
        if done.len() == 15 {
            break;
        }
    }
    assert_eq!(
        done.len(),
        15,
        "{done:?} {:?} held {} in progress {:?}",
        sim.violations(),
        sim.held_count(),
        sim.with_device(2, |d| d.uas_tags_in_progress())
    );
    for completion in &done {
        assert_eq!(completion.result, Ok(()), "tag {}", completion.tag);
        let data = buffer.slice(completion.tag as usize * 65536, 65536).unwrap();
        check_pattern(&platform, &data, u64::from(completion.tag) * 1000, 65536);
    }
    assert_eq!(sim.with_device(2, |d| d.statistics.max_uas_tasks), 15);
    assert_eq!(sim.statistics().stream_doorbells.len(), 15, "every tag's streams rung");
    sim.assert_no_violations();
}

/// A controller with a Bulk-Only drive at SuperSpeed on port 1.
fn super_speed_bot(platform: &SimPlatform) -> SimXhci<'_> {
    SimXhci::new(platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))])
}

/// A controller with a UAS drive at SuperSpeed (QEMU's 16 streams) on port 2.
fn super_speed_uas(platform: &SimPlatform) -> SimXhci<'_> {
    SimXhci::new(
        platform,
        SimConfig::default(),
        vec![(2, drive(Speed::Super, DeviceKind::Uas { streams_exponent: 4 }))],
    )
}

/// A UAS drive at SuperSpeed with 15 reads of 64 KiB submitted (not kicked), the drive set to
/// hold them all.
fn uas_with_fifteen_held_reads<'a>(
    sim: &'a SimXhci<'a>,
    platform: &'a SimPlatform,
    shared: &Shared<'a>,
) -> (Drive<'a>, DmaBuffer) {
    let mut device = attach(shared, 2, ProtocolChoice::Auto, &super::DiscardEvents).expect("attach");
    let buffer = platform.allocate_dma(15 * 65536, 65536).unwrap();
    sim.with_device(2, |d| d.faults.hold_uas_tasks = true);
    for tag in 0..15u32 {
        let data = buffer.slice(tag as usize * 65536, 65536).unwrap();
        device.submit(read(tag, u64::from(tag) * 1000, 128, data)).unwrap();
    }
    (device, buffer)
}

#[test]
fn uas_rings_each_stream_once_and_the_command_pipe_once_per_kick() {
    let platform = platform();
    let sim = super_speed_uas(&platform);
    let shared = controller(&sim, &platform).unwrap();
    let (mut device, _buffer) = uas_with_fifteen_held_reads(&sim, &platform, &shared);
    let before = sim.statistics().doorbells;
    device.kick();
    assert_eq!(
        sim.statistics().doorbells - before,
        15 + 15 + 1,
        "a status and a data stream per tag, then the command pipe once for the 15 Command IUs"
    );
    let before = sim.statistics().doorbells;
    device.kick();
    let mut out = [Completion::default(); 4];
    device.poll(&mut out);
    assert_eq!(sim.statistics().doorbells - before, 0, "nothing queued, nothing rung");
    sim.assert_no_violations();
}

#[test]
fn a_uas_poll_reads_the_clock_once_for_all_its_commands() {
    let platform = platform();
    let sim = super_speed_uas(&platform);
    let shared = controller(&sim, &platform).unwrap();
    let (mut device, _buffer) = uas_with_fifteen_held_reads(&sim, &platform, &shared);
    device.kick();
    assert_eq!(sim.with_device(2, |d| d.uas_tags_in_progress()).len(), 15);
    let start_ns = platform.peek_ns();
    blockdev::Clock::now_ticks(&platform);
    let one_reading_ns = platform.peek_ns() - start_ns;
    let mut out = [Completion::default(); 4];
    let before_poll_ns = platform.peek_ns();
    assert_eq!(device.poll(&mut out), 0);
    assert_eq!(
        platform.peek_ns() - before_poll_ns,
        one_reading_ns,
        "one clock reading checks the timeouts of all 15 commands"
    );
    sim.assert_no_violations();
}

#[test]
fn uas_below_super_speed_follows_read_ready() {
    let platform = platform();
    let sim = SimXhci::new(
        &platform,
        SimConfig::default(),
        vec![(5, drive(Speed::High, DeviceKind::Uas { streams_exponent: 4 }))],
    );
    let shared = controller(&sim, &platform).unwrap();
    let mut device = attach(&shared, 5, ProtocolChoice::Auto, &super::DiscardEvents).expect("attach");
    let identity = device.identity().clone();
    assert_eq!((identity.speed, identity.protocol, identity.streams), (Speed::High, Protocol::Uas, false));
    assert_eq!(identity.commands_in_flight, 31);
    let buffer = platform.allocate_dma(8 * 8192, 4096).unwrap();
    for round in 0..5u64 {
        for tag in 0..8u32 {
            let data = buffer.slice(tag as usize * 8192, 8192).unwrap();
            device.submit(read(tag, round * 100 + u64::from(tag) * 16, 16, data)).unwrap();
        }
        device.kick();
        let done = wait_for(&mut device, 8);
        for completion in done {
            assert_eq!(completion.result, Ok(()));
            let data = buffer.slice(completion.tag as usize * 8192, 8192).unwrap();
            check_pattern(&platform, &data, round * 100 + u64::from(completion.tag) * 16, 8192);
        }
    }
    assert!(sim.with_device(5, |d| d.statistics.max_uas_tasks) > 1);
    sim.assert_no_violations();
}

#[test]
fn the_protocol_follows_the_setting_the_offer_and_the_quirks() {
    let both = DeviceKind::Both { streams_exponent: 5 };
    /// Drive kind, vendor:product, setting, transport expected, note expected.
    type Case = (DeviceKind, Option<(u16, u16)>, ProtocolChoice, Protocol, Option<&'static str>);
    let cases: [Case; 6] = [
        (both, None, ProtocolChoice::Auto, Protocol::Uas, None),
        (both, None, ProtocolChoice::BulkOnly, Protocol::BulkOnly, None),
        (both, Some((0x357d, 0x7788)), ProtocolChoice::Auto, Protocol::BulkOnly, Some("JMS566")),
        (both, Some((0x357d, 0x7788)), ProtocolChoice::Uas, Protocol::Uas, None),
        (
            DeviceKind::BulkOnly,
            None,
            ProtocolChoice::Uas,
            Protocol::BulkOnly,
            Some("usb.protocol=uas: the drive offers no UAS interface; using BOT"),
        ),
        (
            DeviceKind::Uas { streams_exponent: 4 },
            None,
            ProtocolChoice::BulkOnly,
            Protocol::Uas,
            Some("usb.protocol=bot: the drive offers no Bulk-Only interface; using UAS"),
        ),
    ];
    for (kind, ids, choice, expected, note) in cases {
        let platform = platform();
        let mut sim_drive = drive(Speed::Super, kind);
        if let Some((vendor, product)) = ids {
            sim_drive.vendor_id = vendor;
            sim_drive.product_id = product;
        }
        let sim = SimXhci::new(&platform, SimConfig::default(), vec![(1, sim_drive)]);
        let shared = controller(&sim, &platform).unwrap();
        let mut device = attach(&shared, 1, choice, &super::DiscardEvents).expect("attach");
        let identity = device.identity().clone();
        assert_eq!(identity.protocol, expected, "{kind:?} {choice:?}");
        match note {
            Some(text) => assert!(
                identity.protocol_note.as_deref().unwrap_or("").contains(text),
                "{:?}",
                identity.protocol_note
            ),
            None => assert_eq!(identity.protocol_note, None),
        }
        if kind == both {
            let alternates = sim.with_device(1, |d| d.statistics.set_interface.clone());
            assert_eq!(alternates, if expected == Protocol::Uas { vec![(0, 1)] } else { vec![] });
            if expected == Protocol::Uas {
                assert_eq!(identity.tags, 32);
            }
        }
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        assert_eq!(read_one(&mut device, 1, 77, 8, buffer).result, Ok(()));
        check_pattern(&platform, &buffer, 77, 4096);
        sim.assert_no_violations();
    }
}

#[test]
fn drives_that_cannot_be_used_are_named() {
    // Not mass storage.
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(5, drive(Speed::High, DeviceKind::Keyboard))]);
    let shared = controller(&sim, &platform).unwrap();
    let error = attach(&shared, 5, ProtocolChoice::Auto, &super::DiscardEvents).err().expect("refused");
    assert!(format!("{error}").starts_with("no SCSI mass storage interface"), "{error}");
    // UAS-only at SuperSpeed on a controller without streams.
    let platform = self::platform();
    let config = SimConfig { max_psa_size: 0, ..SimConfig::default() };
    let sim = SimXhci::new(
        &platform,
        config,
        vec![(1, drive(Speed::Super, DeviceKind::Uas { streams_exponent: 4 }))],
    );
    let shared = controller(&sim, &platform).unwrap();
    let error = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).err().expect("refused");
    assert_eq!(error, AttachError::Usb(UsbError::NoStreams));
    assert!(format!("{error}").contains("needs bulk streams"));
    sim.assert_no_violations();
}

#[test]
fn test_unit_ready_waits_for_spin_up_and_gives_up_by_name() {
    let platform = platform();
    let mut slow = drive(Speed::Super, DeviceKind::BulkOnly);
    slow.disk.not_ready_tries = 3;
    let sim = SimXhci::new(&platform, SimConfig::default(), vec![(1, slow)]);
    let shared = controller(&sim, &platform).unwrap();
    attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).expect("ready after three tries");
    let turs = sim.with_device(1, |d| d.disk.commands.iter().filter(|c| **c == 0).count());
    assert_eq!(turs, 4);
    let sense_requests = sim.with_device(1, |d| d.disk.commands.iter().filter(|c| **c == 0x03).count());
    assert_eq!(sense_requests, 3, "BOT asks for the sense of every failed TEST UNIT READY");
    sim.assert_no_violations();
    let platform = self::platform();
    let mut dead = drive(Speed::Super, DeviceKind::Uas { streams_exponent: 4 });
    dead.disk.not_ready_tries = 1000;
    let sim = SimXhci::new(&platform, SimConfig::default(), vec![(1, dead)]);
    let shared = controller(&sim, &platform).unwrap();
    let error = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).err().expect("gives up");
    assert!(
        matches!(
            error,
            AttachError::Scsi {
                command: "TEST UNIT READY",
                reason: ScsiFailure::NeverReady { tries: 40, .. }
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        format!("{error}"),
        "TEST UNIT READY: not ready after 40 tries (NOT READY: logical unit is in process of becoming ready (02/04/01))"
    );
}

#[test]
fn read_capacity_16_falls_back_to_10() {
    for kind in [DeviceKind::BulkOnly, DeviceKind::Uas { streams_exponent: 4 }] {
        let platform = platform();
        let mut old = drive(Speed::Super, kind);
        old.disk.no_read_capacity_16 = true;
        let sim = SimXhci::new(&platform, SimConfig::default(), vec![(1, old)]);
        let shared = controller(&sim, &platform).unwrap();
        let device = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).expect("attach");
        assert!(!device.identity().read_capacity_16);
        assert_eq!(device.geometry().block_count, DISK_BLOCKS);
        let commands = sim.with_device(1, |d| d.disk.commands.clone());
        assert!(
            commands.ends_with(&[0x9e, 0x25]) || commands.ends_with(&[0x9e, 0x03, 0x25]),
            "{commands:x?}"
        );
        sim.assert_no_violations();
    }
}

#[test]
fn a_media_error_is_named_and_the_drive_goes_on() {
    let uas = DeviceKind::Uas { streams_exponent: 4 };
    for (speed, kind, port) in
        [(Speed::Super, DeviceKind::BulkOnly, 1), (Speed::Super, uas, 1), (Speed::High, uas, 5)]
    {
        let platform = platform();
        let mut bad = drive(speed, kind);
        bad.disk.media_errors.push((2048, 8));
        let sim = SimXhci::new(&platform, SimConfig::default(), vec![(port, bad)]);
        let shared = controller(&sim, &platform).unwrap();
        let events = Recorded::default();
        let mut device = attach(&shared, port, ProtocolChoice::Auto, &events).expect("attach");
        let buffer = platform.allocate_dma(8192, 4096).unwrap();
        let failed = read_one(&mut device, 7, 2044, 16, buffer);
        let error = failed.result.expect_err("a media error");
        assert_eq!((error.kind, error.code), (IoErrorKind::DeviceStatus, 0x03_11_00));
        assert!(
            events.any("usb0: READ(10) of 16 blocks at LBA 2044 failed: CHECK CONDITION (0x02), MEDIUM ERROR: unrecovered read error (03/11/00)"),
            "{kind:?}: {:?}",
            events.messages.borrow()
        );
        assert_eq!(read_one(&mut device, 8, 0, 16, buffer).result, Ok(()));
        check_pattern(&platform, &buffer, 0, 8192);
        assert_eq!(device.statistics().failed, 1);
        assert_eq!(device.statistics().by_kind[IoErrorKind::DeviceStatus.index()], 1);
        sim.assert_no_violations();
    }
}

#[test]
fn a_stalled_data_stage_is_cleared_and_the_status_read() {
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let events = Recorded::default();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    sim.with_device(1, |d| d.faults.stall_next_data = true);
    let failed = read_one(&mut device, 1, 10, 8, buffer);
    assert_eq!(failed.result.unwrap_err().kind, IoErrorKind::DeviceStatus, "CSW status 1 after the STALL");
    assert!(events.any("ABORTED COMMAND"), "{:?}", events.messages.borrow());
    assert_eq!(
        sim.with_device(1, |d| d.statistics.clear_halts.clone()),
        vec![0x81],
        "CLEAR_FEATURE(HALT) on bulk IN"
    );
    assert_eq!(read_one(&mut device, 2, 10, 8, buffer).result, Ok(()));
    check_pattern(&platform, &buffer, 10, 4096);
    assert!(device.transport_counters().contains("1 STALLs cleared, 0 reset recoveries"));
    sim.assert_no_violations();
}

#[test]
fn a_stalled_status_is_read_once_more() {
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).unwrap();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    sim.with_device(1, |d| d.faults.stall_csws = 1);
    assert_eq!(read_one(&mut device, 1, 10, 8, buffer).result, Ok(()), "the CSW read again after the STALL");
    check_pattern(&platform, &buffer, 10, 4096);
    assert_eq!(sim.with_device(1, |d| d.statistics.clear_halts.clone()), vec![0x81]);
    assert_eq!(sim.with_device(1, |d| d.statistics.bulk_only_resets), 0, "no reset recovery needed");
    assert_eq!(read_one(&mut device, 2, 20, 8, buffer).result, Ok(()));
    // INQUIRY, TEST UNIT READY, READ CAPACITY(16) at bring-up, then the two reads.
    assert_eq!(
        device.transport_counters(),
        "5 commands, 0 REQUEST SENSE, 1 STALLs cleared, 0 reset recoveries"
    );
    sim.assert_no_violations();
}

/// The wait a timeout message names (`no status after N ms`).
fn waited_ms(events: &Recorded) -> u64 {
    let messages = events.messages.borrow();
    let message = messages.iter().find(|m| m.contains("no status after ")).expect("a timeout message");
    let after = message.split("no status after ").nth(1).expect("a number");
    after.split(' ').next().and_then(|n| n.parse().ok()).expect("milliseconds")
}

#[test]
fn a_status_stalled_twice_or_a_bus_error_ends_in_reset_recovery() {
    for fault in ["two CSW stalls", "transaction error"] {
        let platform = platform();
        let sim = super_speed_bot(&platform);
        let shared = controller(&sim, &platform).unwrap();
        let events = Recorded::default();
        let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        sim.with_device(1, |d| match fault {
            "two CSW stalls" => d.faults.stall_csws = 2,
            _ => d.faults.transaction_error_next_data = true,
        });
        let error = read_one(&mut device, 1, 10, 8, buffer).result.unwrap_err();
        let (code, clear_halts, stalls) = match fault {
            "two CSW stalls" => (6, vec![0x81, 0x81, 0x02], 1),
            _ => (4, vec![0x81, 0x02], 0),
        };
        assert_eq!((error.kind, error.code), (IoErrorKind::Transfer, code), "{fault}");
        assert_eq!(sim.with_device(1, |d| d.statistics.bulk_only_resets), 1, "{fault}");
        assert_eq!(sim.with_device(1, |d| d.statistics.clear_halts.clone()), clear_halts, "{fault}");
        assert_eq!(
            device.transport_counters(),
            format!("4 commands, 0 REQUEST SENSE, {stalls} STALLs cleared, 1 reset recoveries"),
            "{fault}"
        );
        assert_eq!(read_one(&mut device, 2, 10, 8, buffer).result, Ok(()), "{fault}");
        check_pattern(&platform, &buffer, 10, 4096);
        sim.assert_no_violations();
    }
}

#[test]
fn a_failing_request_sense_still_fails_the_command_by_status() {
    let platform = platform();
    let mut bad = drive(Speed::Super, DeviceKind::BulkOnly);
    bad.disk.media_errors.push((100, 1));
    let sim = SimXhci::new(&platform, SimConfig::default(), vec![(1, bad)]);
    let shared = controller(&sim, &platform).unwrap();
    let events = Recorded::default();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
    sim.with_device(1, |d| d.faults.fail_request_sense = true);
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    let error = read_one(&mut device, 1, 96, 8, buffer).result.unwrap_err();
    assert_eq!((error.kind, error.code), (IoErrorKind::DeviceStatus, 2), "CHECK CONDITION without sense");
    assert!(
        events.any("READ(10) of 8 blocks at LBA 96 failed: CHECK CONDITION (0x02)"),
        "{:?}",
        events.messages.borrow()
    );
    assert_eq!(
        sim.with_device(1, |d| d.statistics.bulk_only_resets),
        0,
        "no reset for a failed REQUEST SENSE"
    );
    assert!(device.transport_counters().contains(", 1 REQUEST SENSE, 0 STALLs cleared, 0 reset recoveries"));
    assert_eq!(read_one(&mut device, 2, 0, 8, buffer).result, Ok(()));
    sim.assert_no_violations();
}

#[test]
fn phase_errors_and_bad_csws_end_in_reset_recovery() {
    for fault in ["phase", "signature"] {
        let platform = platform();
        let sim = super_speed_bot(&platform);
        let shared = controller(&sim, &platform).unwrap();
        let events = Recorded::default();
        let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        sim.with_device(1, |d| match fault {
            "phase" => d.faults.phase_error_next = true,
            _ => d.faults.bad_csw_next = true,
        });
        let failed = read_one(&mut device, 1, 10, 8, buffer);
        assert_eq!(failed.result.unwrap_err().kind, IoErrorKind::Protocol, "{fault}");
        let expected = if fault == "phase" {
            "phase error (CSW status 2)"
        } else {
            "invalid CSW (13 bytes, signature 0x53425356"
        };
        assert!(events.any(expected), "{:?}", events.messages.borrow());
        assert_eq!(sim.with_device(1, |d| d.statistics.bulk_only_resets), 1);
        assert_eq!(sim.with_device(1, |d| d.statistics.clear_halts.clone()), vec![0x81, 0x02], "IN then OUT");
        assert_eq!(read_one(&mut device, 2, 10, 8, buffer).result, Ok(()));
        check_pattern(&platform, &buffer, 10, 4096);
        sim.assert_no_violations();
    }
}

#[test]
fn a_hung_bot_read_times_out_and_recovers() {
    let platform = platform();
    platform.set_step_ticks(2_000_000);
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let events = Recorded::default();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    sim.with_device(1, |d| d.faults.hang_reads = 1);
    let failed = read_one(&mut device, 1, 10, 8, buffer);
    assert_eq!(failed.result.unwrap_err().kind, IoErrorKind::Timeout);
    let waited = waited_ms(&events);
    assert!((10_000..10_100).contains(&waited), "the 10 s command timeout, {waited} ms");
    assert_eq!(sim.with_device(1, |d| d.statistics.bulk_only_resets), 1);
    assert_eq!(read_one(&mut device, 2, 10, 8, buffer).result, Ok(()));
    sim.assert_no_violations();
}

#[test]
fn a_hung_uas_command_is_aborted_and_its_tag_used_again() {
    let platform = platform();
    platform.set_step_ticks(2_000_000);
    let sim = SimXhci::new(
        &platform,
        SimConfig::default(),
        vec![(1, drive(Speed::Super, DeviceKind::Uas { streams_exponent: 4 }))],
    );
    let shared = controller(&sim, &platform).unwrap();
    let events = Recorded::default();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &events).unwrap();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    sim.with_device(1, |d| d.faults.hang_reads = 1);
    let failed = read_one(&mut device, 1, 10, 8, buffer);
    assert_eq!(failed.result.unwrap_err().kind, IoErrorKind::Timeout);
    let waited = waited_ms(&events);
    assert!((10_000..10_100).contains(&waited), "the 10 s command timeout, {waited} ms");
    let task_management = sim.with_device(1, |d| d.statistics.task_management.clone());
    assert_eq!(task_management.first().map(|t| t.0), Some(super::uas_iu::task_function::ABORT_TASK));
    for tag in 2..40 {
        assert_eq!(read_one(&mut device, tag, u64::from(tag), 8, buffer).result, Ok(()), "tag {tag}");
    }
    check_pattern(&platform, &buffer, 39, 4096);
    assert!(
        device.transport_counters().contains("1 aborts, 1 pipe resets"),
        "{}",
        device.transport_counters()
    );
    sim.assert_no_violations();
}

#[test]
fn writes_and_bad_requests_never_reach_the_drive() {
    let platform = platform();
    let sim =
        SimXhci::new(&platform, SimConfig::default(), vec![(1, drive(Speed::Super, DeviceKind::BulkOnly))]);
    let shared = controller(&sim, &platform).unwrap();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).unwrap();
    let buffer = platform.allocate_dma(8192, 4096).unwrap();
    let commands_before = sim.with_device(1, |d| d.disk.commands.len());
    let cases = [
        (Request { operation: Operation::Write, ..read(1, 0, 1, buffer) }, SubmitError::Unsupported),
        (read(2, DISK_BLOCKS, 1, buffer), SubmitError::OutOfRange),
        (read(3, 0, 0, buffer), SubmitError::BadLength),
        (read(4, 0, 17, buffer), SubmitError::BadBuffer),
        (
            read(5, 0, 1, DmaBuffer { cpu_address: 0x1000, physical_address: 0x1000, length_bytes: 512 }),
            SubmitError::BadBuffer,
        ),
    ];
    for (request, expected) in cases {
        assert_eq!(device.submit(request).unwrap_err().1, expected, "request {}", request.tag);
    }
    device.kick();
    assert_eq!(sim.with_device(1, |d| d.disk.commands.len()), commands_before);
    device.submit(read(6, 0, 1, buffer)).unwrap();
    assert_eq!(
        device.submit(read(7, 0, 1, buffer)).unwrap_err().1,
        SubmitError::QueueFull,
        "BOT: one at a time"
    );
    sim.assert_no_violations();
}

#[test]
fn sixty_four_byte_contexts_and_high_speed_bot_work() {
    let platform = platform();
    let config =
        SimConfig { context_bytes: 64, scratchpads: 2, port_power_control: true, ..SimConfig::default() };
    let mut stalling = drive(Speed::High, DeviceKind::BulkOnly);
    stalling.faults.stall_get_max_lun = true;
    let sim = SimXhci::new(&platform, config, vec![(6, stalling)]);
    let shared = controller(&sim, &platform).unwrap();
    shared.borrow().power_ports();
    let mut device = attach(&shared, 6, ProtocolChoice::Auto, &super::DiscardEvents).expect("attach");
    assert_eq!(device.identity().speed, Speed::High);
    assert_eq!(device.identity().logical_units, 1, "Get Max LUN STALL means one LUN");
    let buffer = platform.allocate_dma(1 << 20, 4096).unwrap();
    assert_eq!(read_one(&mut device, 1, 4096, 2048, buffer).result, Ok(()));
    check_pattern(&platform, &buffer, 4096, 1 << 20);
    sim.assert_no_violations();
}

#[test]
fn disks_past_two_terabytes_are_read_with_16_byte_commands() {
    let platform = platform();
    let blocks = (1u64 << 32) + 4096;
    let sim = SimXhci::new(
        &platform,
        SimConfig::default(),
        vec![(1, SimUsbDevice::new(Speed::Super, DeviceKind::BulkOnly, SimDisk::new(blocks, 512)))],
    );
    let shared = controller(&sim, &platform).unwrap();
    let mut device = attach(&shared, 1, ProtocolChoice::Auto, &super::DiscardEvents).expect("attach");
    assert_eq!(device.geometry().block_count, blocks);
    assert_eq!(device.geometry().max_request_blocks, 2048);
    let buffer = platform.allocate_dma(1 << 20, 4096).unwrap();
    for lba in [0, (1 << 32) - 8, blocks - 2048] {
        assert_eq!(read_one(&mut device, 1, lba, 2048, buffer).result, Ok(()));
        let data = platform.bytes_of(&buffer);
        let expected = SimDisk::new(blocks, 512).contents(lba, 2048);
        assert!(data == expected, "LBA {lba}");
    }
    let reads = sim
        .with_device(1, |d| (d.disk.commands.iter().filter(|c| **c == 0x88).count(), d.disk.reads.clone()));
    assert_eq!(reads.0, 3, "READ(16) for every read of a disk this large");
    assert_eq!(reads.1.last(), Some(&(blocks - 2048, 2048)));
    sim.assert_no_violations();
}

#[test]
fn a_drive_connecting_600_ms_after_port_power_is_found_and_the_empty_ports_named() {
    for port_power_control in [false, true] {
        let platform = platform();
        let config =
            SimConfig { connect_delay_us: vec![(2, 600_000)], port_power_control, ..SimConfig::default() };
        let devices = vec![
            (2, drive(Speed::Super, DeviceKind::BulkOnly)),
            (5, drive(Speed::High, DeviceKind::BulkOnly)),
        ];
        let sim = SimXhci::new(&platform, config, devices);
        let shared = controller(&sim, &platform).unwrap();
        let reports = RefCell::new(Vec::new());
        let scan = shared
            .borrow()
            .scan_ports(DEFAULT_CONNECT_WAIT_MS, &|wait: &PortWait| reports.borrow_mut().push(wait.clone()));
        let mut enabled = scan.enabled.clone();
        enabled.sort();
        assert_eq!(enabled, [(2, Speed::Super), (5, Speed::High)], "PPC {port_power_control}");
        assert!(scan.failed.is_empty(), "{:?}", scan.failed);
        assert_eq!(scan.empty, [1, 3, 4, 6, 7, 8]);
        assert!((1500..=1600).contains(&scan.waited_ms), "{}", scan.waited_ms);
        let reports = reports.borrow();
        let first = reports.first().expect("a progress line while ports are empty");
        assert!((500..600).contains(&first.waited_ms), "{first:?}");
        assert!(first.empty.contains(&2), "the late drive's port is still empty at 500 ms: {first:?}");
        assert!(reports.iter().any(|wait| !wait.empty.contains(&2)), "then it is enabled: {reports:?}");
        assert_eq!(
            format!("{first}"),
            format!("waiting for devices on ports 1-4, 6-8 ({} of 1500 ms, usb.connect-ms)", first.waited_ms)
        );
        // The late drive works.
        let events = Recorded::default();
        let options = UsbOptions::default();
        let mut device =
            MassStorageDevice::attach(shared.clone(), 2, Speed::Super, &options, "usb0".to_string(), &events)
                .expect("attach");
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        assert_eq!(read_one(&mut device, 1, 8, 8, buffer), Completion { tag: 1, result: Ok(()) });
        check_pattern(&platform, &buffer, 8, 4096);
        sim.assert_no_violations();
    }
}

#[test]
fn port_lists_are_written_as_ranges() {
    assert_eq!(format!("{}", PortList(&[1, 2, 3, 5, 7, 8])), "1-3, 5, 7-8");
    assert_eq!(format!("{}", PortList(&[4])), "4");
    assert_eq!(format!("{}", PortList(&[])), "");
}

#[test]
fn rp1s_dwc3_gets_linuxs_settings_in_host_mode_before_the_xhci_reset() {
    for (snpsid, threshold) in [
        // DWC_usb3: select bit 29, 2 packets in 27:24, burst 8 in 23:16.
        (0x5533_330a, (1 << 29) | (2 << 24) | (8 << 16)),
        // DWC_usb31: select bit 26, 2 packets in 25:21, burst 8 in 20:16.
        (0x3331_0000, (1 << 26) | (2 << 21) | (8 << 16)),
    ] {
        let platform = platform();
        let sim = SimXhci::new(&platform, SimConfig { context_bytes: 64, ..SimConfig::default() }, vec![]);
        let core = SimDwc3::new(&sim, SimConfig::default().capability_length, snpsid);
        let (controller, report) = super::rp1::bring_up_rp1_controller(
            &core,
            sim_dwc3::BLOCK_BYTES,
            &platform,
            platform.translation(),
            "rp1 xhci0".to_string(),
        )
        .expect("bring-up");
        assert_eq!((report.snpsid, report.mode_before), (snpsid, 2));
        assert_eq!(core.register(dwc3::offsets::GCTL) & (0b11 << 12), 1 << 12, "host mode");
        assert_eq!(core.register(dwc3::offsets::GUSB3PIPECTL0), 0x0100_0002 | (1 << 28), "DISRXDETINP3");
        assert_eq!(
            core.register(dwc3::offsets::GUCTL1),
            0x0004_0000 | (0b111 << 15),
            "park mode off, HS/SS/FS-LS"
        );
        assert_eq!(
            core.register(dwc3::offsets::GSBUSCFG1),
            0x0000_1700,
            "pipe limit 8 (7 + 1), EN1KPAGE kept"
        );
        assert_eq!(core.register(dwc3::offsets::GTXTHRCFG), threshold, "{snpsid:#x}");
        assert!(format!("{report}").contains("in host mode (was device); AXI pipe limit 8"), "{report}");
        assert_eq!(controller.capabilities().max_ports, 8);
        assert!(core.violations().is_empty(), "{:?}", core.violations());
    }
}

#[test]
fn a_dwc3_that_does_not_answer_is_named_before_anything_is_written() {
    let platform = platform();
    let sim = SimXhci::new(&platform, SimConfig::default(), vec![]);
    let core = SimDwc3::new(&sim, SimConfig::default().capability_length, 0xdead_dead);
    let error = super::rp1::bring_up_rp1_controller(
        &core,
        sim_dwc3::BLOCK_BYTES,
        &platform,
        platform.translation(),
        "rp1".to_string(),
    )
    .err()
    .expect("refused");
    assert_eq!(format!("{error}"), "DWC3 core: GSNPSID 0xdeaddead is not a DWC3 core's");
    assert_eq!(core.register(dwc3::offsets::GCTL), 0x30c1_2004);
}
