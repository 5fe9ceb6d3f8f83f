//! sdhost tests against the simulated controller and card (`sim.rs`): reset and bring-up with
//! the shared card protocol, reads checked against the test pattern across the 511-block split
//! with CMD12 and with CMD23, the whole divider in data mode, error injection with recovery and
//! bounded retries, and an empty slot.
#![forbid(unsafe_code)]

extern crate std;

use super::device::SdhostCard;
use super::host::{divider_for, SdhostHost};
use super::sim::{config, debug_mode, status, DataInjection, SimSdhost};
use crate::sd::block::{ReadError, SdBlockDevice};
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::bring_up_at_3v3;
use crate::sd::options::Cmd23Request;
use crate::sd::sim_card::SimCard;
use crate::sd::timing::{BringUpOptions, Timing};
use blockdev::{BlockDevice, DmaBuffer};
use hal::platform::Platform;
use hal::testing::ArenaPlatform as TestPlatform;
use std::boxed::Box;
use std::vec::Vec;

/// The VPU core clock of a real Pi 1-3 (docs/aarch32-pis.md §7).
const CORE_HZ: u32 = 250_000_000;
const MIB: u64 = 1 << 20;

type Host = SdhostHost<'static, &'static SimSdhost, TestPlatform>;

fn platform() -> &'static TestPlatform {
    Box::leak(Box::new(TestPlatform::new(8 << 20)))
}

fn sim(card: SimCard) -> &'static SimSdhost {
    Box::leak(Box::new(SimSdhost::new(CORE_HZ, card)))
}

fn host(sim: &'static SimSdhost, platform: &'static TestPlatform) -> Host {
    let mut host = SdhostHost::new(sim, platform, CORE_HZ);
    host.initialize().unwrap();
    host
}

fn device(
    sim: &'static SimSdhost,
    options: BringUpOptions,
    cmd23: Cmd23Request,
) -> SdhostCard<'static, &'static SimSdhost, TestPlatform> {
    let platform = platform();
    let mut host = host(sim, platform);
    let card = bring_up_at_3v3(&mut host, options).unwrap();
    SdhostCard::new(host, card, "sd0", cmd23)
}

fn read(
    device: &mut SdhostCard<'static, &'static SimSdhost, TestPlatform>,
    lba: u64,
    blocks: u32,
) -> Result<Vec<u8>, ReadError> {
    let platform: &TestPlatform = device.clock();
    let buffer: DmaBuffer = platform.allocate_dma(blocks as usize * 512, 64).unwrap();
    device.read_blocking(lba, blocks, buffer, 10_000_000)?;
    Ok(platform.cpu_read(&buffer))
}

fn assert_pattern(bytes: &[u8], first_lba: u64) {
    for (index, sector) in bytes.chunks(512).enumerate() {
        let mut expected = [0u8; 512];
        blockdev::pattern::fill_sector(first_lba + index as u64, &mut expected);
        assert!(sector == expected, "sector {} differs from the pattern", first_lba + index as u64);
    }
}

#[test]
fn reset_sets_linuxs_thresholds_power_and_the_identification_clock() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let host = host(sim, platform());
    assert_eq!(host.core_clock_hz(), CORE_HZ);
    let state = sim.state.borrow();
    let threshold = |shift: u32| (state.debug_mode >> shift) & debug_mode::THRESHOLD_MASK;
    assert_eq!(threshold(debug_mode::READ_THRESHOLD_SHIFT), 4);
    assert_eq!(threshold(debug_mode::WRITE_THRESHOLD_SHIFT), 4);
    assert_eq!(state.power, 1);
    // 250 MHz / (623 + 2) = 400 kHz (docs/aarch32-pis.md §7).
    assert_eq!(state.divider, 623);
    assert_ne!(state.host_config & config::SLOW_CARD, 0);
    assert_ne!(state.host_config & config::BUSY_INTERRUPT_ENABLE, 0);
}

#[test]
fn dividers_follow_linuxs_formula() {
    assert_eq!(divider_for(250_000_000, 400_000), (623, 400_000));
    assert_eq!(divider_for(250_000_000, 50_000_000), (3, 50_000_000));
    assert_eq!(divider_for(250_000_000, 25_000_000), (8, 25_000_000));
    // QEMU's core clock: 350 MHz / 7 = 50 MHz.
    assert_eq!(divider_for(350_000_000, 50_000_000), (5, 50_000_000));
    // Never faster than asked, never below a divisor of 2, capped at 11 bits.
    assert_eq!(divider_for(250_000_000, 300_000_000), (0, 125_000_000));
    assert_eq!(divider_for(250_000_000, 10_000).0, 0x7ff);
}

#[test]
fn bring_up_identifies_the_card_at_400_khz_and_runs_high_speed_on_4_bits() {
    let sim = sim(SimCard::qemu_like(1 << 30));
    let platform = platform();
    let mut host = host(sim, platform);
    let card = bring_up_at_3v3(&mut host, BringUpOptions::default()).unwrap();
    assert_eq!(card.timing, Timing::HighSpeed);
    assert_eq!((card.bus_width_bits, card.sd_clock_hz), (4, 50_000_000));
    assert_eq!(card.capacity_bytes(), 1 << 30);
    assert_eq!(card.rca, 0x4567);
    // The CID as the card holds it, without its CRC byte.
    assert_eq!(card.cid.raw, SimCard::qemu_like(1 << 30).cid & !0xff);
    assert_eq!(card.cid.manufacturer_id(), 0xaa);
    let state = sim.state.borrow();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    let indices: Vec<u8> = state.log.iter().map(|entry| entry.0).collect();
    assert_eq!(&indices[..4], &[0, 8, 55, 41]);
    for &(index, _, clock_hz) in &state.log {
        if matches!(index, 0 | 2 | 8 | 41) {
            assert!(clock_hz <= 400_000, "CMD{index} at {clock_hz} Hz");
        }
    }
    assert_ne!(state.host_config & config::WIDE_EXTERNAL_BUS, 0);
}

#[test]
fn multi_block_reads_split_at_511_blocks_and_end_with_cmd12() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    assert!(!card.uses_cmd23());
    let bytes = read(&mut card, 1000, 1100).unwrap();
    assert_pattern(&bytes, 1000);
    let bytes = read(&mut card, 7, 1).unwrap();
    assert_pattern(&bytes, 7);
    let state = sim.state.borrow();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    let reads: Vec<(u8, u32)> =
        state.log.iter().filter(|e| matches!(e.0, 12 | 17 | 18)).map(|e| (e.0, e.1)).collect();
    // SDSC: byte addresses. 511 + 511 + 78 blocks, each CMD18 stopped by CMD12.
    assert_eq!(
        reads,
        [(18, 1000 * 512), (12, 0), (18, 1511 * 512), (12, 0), (18, 2022 * 512), (12, 0), (17, 7 * 512)]
    );
}

#[test]
fn cmd23_announces_the_count_and_no_cmd12_follows() {
    let sim = sim(SimCard::qemu_like(4 << 30));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::On);
    assert!(card.uses_cmd23());
    let bytes = read(&mut card, 5_000_000, 600).unwrap();
    assert_pattern(&bytes, 5_000_000);
    // A single block is a CMD17, which CMD23 does not announce (SD Physical Layer
    // Specification, CMD23 SET_BLOCK_COUNT: the count is for the next CMD18 or CMD25).
    assert_pattern(&read(&mut card, 9, 1).unwrap(), 9);
    let state = sim.state.borrow();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    let sequence: Vec<(u8, u32)> =
        state.log.iter().filter(|e| matches!(e.0, 12 | 17 | 18 | 23)).map(|e| (e.0, e.1)).collect();
    // SDHC: block addresses.
    assert_eq!(sequence, [(23, 511), (18, 5_000_000), (23, 89), (18, 5_000_511), (17, 9)]);
}

#[test]
fn default_speed_keeps_the_whole_divider_in_data_mode() {
    // 25 MHz from 250 MHz is divider 8; its low 3 bits alone would clock the card at 125 MHz.
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let options = BringUpOptions { allow_speed_switch: false, max_clock_hz: None };
    let mut card = device(sim, options, Cmd23Request::Off);
    assert_eq!((card.card().timing, card.card().sd_clock_hz), (Timing::DefaultSpeed, 25_000_000));
    assert_eq!(sim.state.borrow().divider, 8);
    // Half a second of SD clocks, as Linux sets it.
    assert_eq!(sim.state.borrow().data_timeout_clocks, 12_500_000);
    let bytes = read(&mut card, 0, 16).unwrap();
    assert_pattern(&bytes, 0);
}

#[test]
fn a_crc_error_is_recovered_and_retried() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    sim.state.borrow_mut().data_injection = Some(DataInjection {
        command_index: 18,
        after_words: 300,
        status_bits: status::CRC16_ERROR,
        times: 1,
    });
    let bytes = read(&mut card, 64, 8).unwrap();
    assert_pattern(&bytes, 64);
    let state = sim.state.borrow();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    // The failed CMD18, CMD13 (the card still sending), CMD12, then the retry.
    let tail: Vec<u8> = state.log.iter().rev().take(5).map(|e| e.0).collect();
    assert_eq!(tail, [12, 18, 12, 13, 18]);
}

#[test]
fn errors_that_persist_fail_the_request_after_bounded_attempts() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    sim.state.borrow_mut().data_injection = Some(DataInjection {
        command_index: 17,
        after_words: 0,
        status_bits: status::CRC16_ERROR,
        times: 10,
    });
    let error = read(&mut card, 3, 1).unwrap_err();
    let ReadError::Failed(SdError::Command(failure)) = error else { panic!("{error:?}") };
    assert_eq!((failure.kind, failure.attempts), (FailureKind::DataLine, 3));
    assert_eq!(failure.command.index, 17);
    assert_eq!(card.last_error(), Some(SdError::Command(failure)));
    // The device takes the next request after the failure.
    sim.state.borrow_mut().data_injection = None;
    assert_pattern(&read(&mut card, 3, 1).unwrap(), 3);
}

#[test]
fn an_empty_slot_is_no_card() {
    let mut card = SimCard::qemu_like(64 * MIB);
    card.present = false;
    let sim = sim(card);
    let platform = platform();
    let mut host = host(sim, platform);
    let error = bring_up_at_3v3(&mut host, BringUpOptions::default()).unwrap_err();
    assert!(matches!(error, SdError::NoCard { .. }), "{error:?}");
}

#[test]
fn reads_beyond_the_end_are_refused_before_any_command() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    let commands_before = sim.command_indices().len();
    assert_eq!(card.name(), "sd0");
    let geometry = card.geometry();
    assert_eq!(
        (geometry.logical_block_bytes, geometry.block_count, geometry.max_in_flight),
        (512, 131_072, 1)
    );
    let blocks = geometry.block_count;
    assert!(matches!(read(&mut card, blocks, 1), Err(ReadError::Refused(_))));
    assert_eq!(sim.command_indices().len(), commands_before);
}

#[test]
fn a_failure_part_way_says_how_many_blocks_came_first() {
    // A CMD18 of 8 blocks that fails on every attempt after 300 words (1200 bytes): two whole
    // blocks had arrived each time.
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    sim.state.borrow_mut().data_injection = Some(DataInjection {
        command_index: 18,
        after_words: 300,
        status_bits: status::CRC16_ERROR,
        times: 10,
    });
    let error = read(&mut card, 64, 8).unwrap_err();
    let ReadError::Failed(SdError::Command(failure)) = error else { panic!("{error:?}") };
    assert_eq!((failure.command.index, failure.blocks_done, failure.blocks), (18, 2, 8));
    // Each failure during the data was retried, up to the bound.
    assert_eq!(failure.attempts, 3);
    assert_eq!(sim.command_indices().iter().filter(|&&index| index == 18).count(), 3);
}

#[test]
fn data_that_stops_coming_times_out_per_block() {
    // The card sends 64 words of a block and then nothing, with no error bit: each attempt ends
    // when no word has arrived for the block timeout, not at the caller's much longer limit.
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    sim.state.borrow_mut().data_injection =
        Some(DataInjection { command_index: 17, after_words: 64, status_bits: 0, times: 10 });
    let error = read(&mut card, 5, 1).unwrap_err();
    let ReadError::Failed(SdError::Command(failure)) = error else { panic!("{error:?}") };
    assert_eq!((failure.kind, failure.attempts, failure.blocks_done), (FailureKind::NoCompletion, 3, 0));
}

#[test]
fn a_completion_waits_for_a_poll_with_room_for_it() {
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    let platform: &TestPlatform = card.clock();
    let buffer: DmaBuffer = platform.allocate_dma(512, 64).unwrap();
    let request =
        blockdev::Request { tag: 7, operation: blockdev::Operation::Read, lba: 2, block_count: 1, buffer };
    card.submit(request).unwrap();
    card.kick();
    for _ in 0..1000 {
        assert_eq!(card.poll(&mut []), 0, "no room: nothing is handed over");
    }
    let mut completions = [blockdev::Completion::default()];
    assert_eq!(card.poll(&mut completions), 1);
    assert_eq!((completions[0].tag, completions[0].result), (7, Ok(())));
    assert_pattern(&platform.cpu_read(&buffer), 2);
}

#[test]
fn one_poll_drains_the_fifo_for_as_long_as_data_keeps_coming() {
    // QEMU's FIFO refills as soon as a word is read: a 4 KiB read completes in the first poll
    // instead of one poll per 16-word FIFO fill (64 of them).
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut card = device(sim, BringUpOptions::default(), Cmd23Request::Off);
    let platform: &TestPlatform = card.clock();
    let buffer: DmaBuffer = platform.allocate_dma(4096, 64).unwrap();
    let request =
        blockdev::Request { tag: 3, operation: blockdev::Operation::Read, lba: 40, block_count: 8, buffer };
    card.submit(request).unwrap();
    card.kick();
    let mut completions = [blockdev::Completion::default()];
    assert_eq!(card.poll(&mut completions), 1);
    assert_eq!((completions[0].tag, completions[0].result), (3, Ok(())));
    assert_pattern(&platform.cpu_read(&buffer), 40);
    assert!(sim.state.borrow().violations.is_empty(), "{:?}", sim.state.borrow().violations);
}

#[test]
fn the_card_bus_is_one_or_four_bits_wide() {
    use crate::sd::bus::{BusWidth, CardBus};
    let sim = sim(SimCard::qemu_like(64 * MIB));
    let mut host = host(sim, platform());
    host.set_bus_width(BusWidth::Four).unwrap();
    assert_ne!(sim.state.borrow().host_config & config::WIDE_EXTERNAL_BUS, 0);
    let refused = host.set_bus_width(BusWidth::Eight).unwrap_err();
    assert!(matches!(refused, SdError::UnusableHost { .. }), "{refused:?}");
    assert_eq!(host.bus_mode().width_bits, 4);
    host.set_bus_width(BusWidth::One).unwrap();
    assert_eq!(sim.state.borrow().host_config & config::WIDE_EXTERNAL_BUS, 0);
    assert_eq!(host.bus_mode().width_bits, 1);
}
