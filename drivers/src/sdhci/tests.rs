//! Host/card protocol tests against the simulated controller and card (`sim.rs`): bring-up on
//! each quirk set, PIO and ADMA2 reads checked against the test pattern, request splitting,
//! CMD23, error injection with recovery and bounded retries, no card, reads beyond the end.

extern crate std;

use super::adma::AdmaFormat;
use super::bringup::{bring_up, BoardSignalling, BringUpOptions, Timing};
use super::card::CapacityClass;
use super::device::{Cmd23Request, ModeRequest, SdCard, TransferMode, MAX_BLOCKS_PER_COMMAND};
use super::error::{FailureKind, SdError};
use super::host::SdhciHost;
use super::quirks::{HostQuirks, ARASAN_EMMC, BCM2711_EMMC2, GENERIC_PCI};
use super::regs::interrupt;
use super::sim::{InjectAt, Injection, SimCard, SimHost, TestPlatform};
use crate::platform::{BusTranslation, Platform};
use blockdev::{BlockDevice, Completion, DmaBuffer, IoErrorKind, Operation, Request, SubmitError};
use core::cell::Cell;
use std::boxed::Box;
use std::string::ToString;
use std::vec::Vec;

use super::adma;

/// QEMU's raspi Arasan/EMMC2 capabilities and version word (docs/qemu.md §2).
const RASPI_CAPS: (u32, u32) = (0x0521_34b4, 0);
const RASPI_VERSION: u32 = 0x2402_0000;
/// QEMU's sdhci-pci with `sd-spec-version=3`.
const PCI_CAPS: (u32, u32) = (0x0578_34b4, 0);
/// A v3 host with SDR50/DDR50 and 1.8 V (for the UHS path).
const UHS_CAPS: (u32, u32) = (0x0578_64b4, 0b101);

fn platform(bytes: usize) -> &'static TestPlatform {
    Box::leak(Box::new(TestPlatform::new(bytes)))
}

fn sim(platform: &'static TestPlatform, caps: (u32, u32), card: SimCard) -> &'static SimHost<'static> {
    Box::leak(Box::new(SimHost::new(platform, caps, RASPI_VERSION, card)))
}

type Host = SdhciHost<'static, &'static SimHost<'static>, TestPlatform>;

fn host(
    sim: &'static SimHost<'static>,
    platform: &'static TestPlatform,
    quirks: &'static HostQuirks,
    base_clock_hz: Option<u32>,
) -> Host {
    SdhciHost::new(sim, platform, quirks, base_clock_hz, BusTranslation::IDENTITY).unwrap()
}

fn card_device(
    mut host: Host,
    mode: ModeRequest,
    cmd23: Cmd23Request,
) -> SdCard<'static, &'static SimHost<'static>, TestPlatform> {
    let card = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    SdCard::new(host, card, "sd0", mode, cmd23).unwrap()
}

fn read(
    device: &mut SdCard<'static, &'static SimHost<'static>, TestPlatform>,
    platform: &TestPlatform,
    lba: u64,
    blocks: u32,
) -> (Completion, DmaBuffer) {
    let buffer = platform.allocate_dma(blocks as usize * 512, 4096).unwrap();
    (read_into(device, lba, blocks, buffer), buffer)
}

/// Polls this many times at most before a test gives up on a request (the simulated card
/// completes within a few thousand polls).
const MAX_POLLS: u32 = 10_000_000;

/// Reads `blocks` blocks at `lba` into `buffer`, polling a bounded number of times.
fn read_into(
    device: &mut SdCard<'static, &'static SimHost<'static>, TestPlatform>,
    lba: u64,
    blocks: u32,
    buffer: DmaBuffer,
) -> Completion {
    let request = Request { tag: 42, operation: Operation::Read, lba, block_count: blocks, buffer };
    device.submit(request).unwrap();
    device.kick();
    let mut completions = [Completion::default(); 2];
    for _ in 0..MAX_POLLS {
        if device.poll(&mut completions) == 1 {
            return completions[0];
        }
    }
    panic!("the read of {blocks} blocks at LBA {lba} did not complete within {MAX_POLLS} polls");
}

fn assert_pattern(buffer: &DmaBuffer, lba: u64) {
    // SAFETY: the read completed; the test owns the buffer.
    let bytes = unsafe { buffer.as_bytes() };
    assert_eq!(blockdev::pattern::first_mismatch(lba * 512, bytes), None);
}

#[test]
fn arasan_bring_up_of_qemus_sdsc_card_with_write_spacing() {
    let platform = platform(8 << 20);
    let sim = sim(platform, RASPI_CAPS, SimCard::qemu_like(1 << 30));
    // QEMU's mailbox says 50 MHz for the EMMC clock (docs/hardware.md §1.6).
    let mut host = host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let card = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    assert_eq!(card.capacity_class(), CapacityClass::Sdsc);
    assert_eq!(card.capacity_bytes(), 1 << 30);
    assert_eq!(&card.cid.product_name(), b"QEMU!");
    assert_eq!(card.rca, 0x4567);
    assert_eq!(card.ocr & 0xc000_0000, 0x8000_0000);
    assert_eq!(card.timing, Timing::HighSpeed);
    assert_eq!(card.bus_width_bits, 4);
    assert_eq!(card.sd_clock_hz, 50_000_000);
    assert!(card.interface_v2);
    assert!(!card.signalling_1v8);
    let state = sim.state.borrow();
    // Identification order (SD §4.2): CMD0, CMD8, CMD55+ACMD41 (busy once), CMD2, CMD3, CMD9,
    // CMD7, CMD16 (SDSC), ACMD51, ACMD6, ACMD13, CMD6 check, CMD6 switch.
    let indices: Vec<u8> = state.log.iter().map(|(i, _, _)| *i).collect();
    assert_eq!(indices, [0, 8, 55, 41, 55, 41, 2, 3, 9, 7, 16, 55, 51, 55, 6, 55, 13, 6, 6]);
    // ACMD41 asked for SDHC support but not 1.8 V (the Arasan cannot switch).
    assert_eq!(state.log[3].1, 0x50ff_8000);
    // Quirk: at ≤ 400 kHz every register write is followed by ≥ 4 SD clocks (≈ 10 µs).
    assert!(state.min_slow_write_gap_ns >= 10_000, "gap {} ns", state.min_slow_write_gap_ns);
    assert!(!state.sdma_address_written);
    // No HISPD bit on the BCM2835 Arasan; 4-bit bus set.
    assert_eq!(state.registers[0x28 / 4] & 0b110, 0b010);
}

#[test]
fn generic_host_does_not_space_writes_and_sets_high_speed() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &GENERIC_PCI, None);
    assert_eq!(host.base_clock_hz(), 52_000_000);
    let card = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    assert_eq!(card.capacity_class(), CapacityClass::Sdhc);
    assert_eq!(card.capacity_bytes(), 4 << 30);
    // 52 MHz base: High Speed runs at 26 MHz, never above 50.
    assert_eq!(card.sd_clock_hz, 26_000_000);
    let state = sim.state.borrow();
    assert!(state.min_slow_write_gap_ns < 10_000);
    assert_eq!(state.registers[0x28 / 4] & 0b110, 0b110);
}

#[test]
fn pio_reads_single_and_multi_block_at_start_end_and_middle() {
    let platform = platform(16 << 20);
    let sim = sim(platform, RASPI_CAPS, SimCard::qemu_like(1 << 30));
    let host = host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    // QEMU's raspi hosts advertise no DMA: PIO whatever was asked.
    assert_eq!(device.transfer_mode(), TransferMode::Pio);
    let last = device.geometry().block_count - 1;
    assert_eq!(device.geometry().block_count, 2 * 1024 * 1024);
    for (lba, blocks) in [(0, 1), (0, 8), (last, 1), (last - 15, 16), (123_457, 2048)] {
        let (completion, buffer) = read(&mut device, platform, lba, blocks);
        assert_eq!(completion.tag, 42);
        assert_eq!(completion.result, Ok(()));
        assert_pattern(&buffer, lba);
    }
    // PIO data is written by the CPU: it is cleaned to memory when the command completes.
    let cleans_before = platform.clean_calls.get();
    read(&mut device, platform, 0, 1);
    assert_eq!(platform.clean_calls.get(), cleans_before + 1);
    let state = sim.state.borrow();
    // SDSC cards take byte addresses; single blocks use CMD17, several CMD18 with auto-CMD12.
    let reads: Vec<(u8, u32, u16)> =
        state.log.iter().copied().filter(|(i, _, _)| matches!(i, 17 | 18)).collect();
    assert_eq!(reads[0], (17, 0, 0x0012));
    assert_eq!(reads[1], (18, 0, 0x0036));
    assert_eq!(reads[2].1 as u64, last * 512);
    assert_eq!(state.dma_transfers, 0);
}

#[test]
fn adma2_reads_walk_descriptors_and_pio_can_be_forced() {
    let platform = platform(16 << 20);
    let sim = sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert_eq!(device.transfer_mode(), TransferMode::Adma2(AdmaFormat::Adma2Bits32));
    let invalidates_before = platform.invalidate_calls.get();
    let (completion, buffer) = read(&mut device, platform, 5_000_000, 2048);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 5_000_000);
    assert!(platform.invalidate_calls.get() > invalidates_before);
    let (completion, buffer) = read(&mut device, platform, 8_388_607, 1);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 8_388_607);
    assert_eq!(sim.state.borrow().dma_transfers, 2);
    // A buffer ADMA2 cannot use (misaligned) goes by PIO instead of failing.
    let aligned = platform.allocate_dma(4 * 512 + 2, 4096).unwrap();
    let odd = aligned.slice(2, 4 * 512).unwrap();
    assert_eq!(read_into(&mut device, 10, 4, odd).result, Ok(()));
    assert_pattern(&odd, 10);
    assert_eq!(sim.state.borrow().dma_transfers, 2);

    // sd.mode=pio on the same kind of host.
    let platform = self::platform(16 << 20);
    let sim = self::sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let host = self::host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    assert_eq!(device.transfer_mode(), TransferMode::Pio);
    let (completion, buffer) = read(&mut device, platform, 77, 64);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 77);
    assert_eq!(sim.state.borrow().dma_transfers, 0);
}

#[test]
fn requests_above_65535_blocks_are_split() {
    let platform = platform(48 << 20);
    let sim = sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert!(device.geometry().max_request_blocks > MAX_BLOCKS_PER_COMMAND);
    assert_eq!(device.geometry().max_in_flight, 1);
    let blocks = MAX_BLOCKS_PER_COMMAND + 4465;
    let (completion, buffer) = read(&mut device, platform, 1000, blocks);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 1000);
    let state = sim.state.borrow();
    let reads: Vec<u32> =
        state.log.iter().filter(|(i, _, _)| *i == 18).map(|(_, argument, _)| *argument).collect();
    assert_eq!(reads, [1000, 1000 + MAX_BLOCKS_PER_COMMAND]);
}

#[test]
fn cmd23_announces_the_count_instead_of_auto_cmd12() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02; // CMD_SUPPORT: CMD23
    let sim = sim(platform, RASPI_CAPS, card);
    let host = host(sim, platform, &BCM2711_EMMC2, Some(100_000_000));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    assert!(device.uses_cmd23());
    let (completion, buffer) = read(&mut device, platform, 64, 24);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 64);
    let state = sim.state.borrow();
    let tail: Vec<(u8, u32, u16)> = state.log[state.log.len() - 2..].to_vec();
    // CMD23 with the count, then CMD18 multi-block, count enabled, read, no auto-CMD12.
    assert_eq!(tail[0].0, 23);
    assert_eq!(tail[0].1, 24);
    assert_eq!(tail[1], (18, 64, 0x0032));
}

#[test]
fn a_transient_command_timeout_is_retried_after_a_line_reset() {
    let platform = platform(8 << 20);
    let sim = sim(platform, RASPI_CAPS, SimCard::qemu_like(1 << 30));
    let host = host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    let resets_before = sim.state.borrow().line_resets;
    sim.inject(Injection {
        command_index: 18,
        error_bits: interrupt::COMMAND_TIMEOUT,
        at: InjectAt::Command,
        times: 1,
    });
    let (completion, buffer) = read(&mut device, platform, 100, 8);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(&buffer, 100);
    let state = sim.state.borrow();
    assert!(state.line_resets > resets_before);
    assert_eq!(state.log.iter().filter(|(i, _, _)| *i == 18).count(), 2);
    // The card was in the transfer state: no CMD12 was sent (it would be illegal there).
    assert!(!state.log.iter().any(|(i, _, _)| *i == 12));
}

fn failing_read(error_bits: u32, at: InjectAt) -> (Completion, SdError, u32) {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    sim.inject(Injection { command_index: 18, error_bits, at, times: 100 });
    let (completion, _) = read(&mut device, platform, 300, 16);
    let error = device.last_error().expect("the failure is kept");
    let attempts = sim.state.borrow().log.iter().filter(|(i, _, _)| *i == 18).count() as u32;
    // The device is usable again after the failure.
    sim.state.borrow_mut().injections.clear();
    let (after, buffer) = read(&mut device, platform, 301, 3);
    assert_eq!(after.result, Ok(()));
    assert_pattern(&buffer, 301);
    (completion, error, attempts)
}

#[test]
fn a_persistent_data_crc_error_fails_the_request_after_bounded_retries() {
    let (completion, error, attempts) = failing_read(interrupt::DATA_CRC, InjectAt::Data { after_blocks: 3 });
    assert_eq!(attempts, super::device::MAX_ATTEMPTS);
    let io = completion.result.unwrap_err();
    assert_eq!(io.kind, IoErrorKind::Crc);
    assert_eq!(io.code >> 24, 18);
    assert_eq!(io.code & 0xffff, 0x0020);
    let SdError::Command(failure) = error else {
        panic!("{error:?}");
    };
    assert_eq!(failure.kind, FailureKind::DataLine);
    assert_eq!((failure.blocks_done, failure.blocks), (3, 16));
    assert_eq!(failure.attempts, 3);
    let text = error.to_string();
    assert!(text.starts_with("CMD18 (READ_MULTIPLE_BLOCK) arg 0x0000012c: data CRC/end-bit error"), "{text}");
    assert!(text.contains("interrupt status 0x00208000"), "{text}");
    assert!(text.contains("after 3 of 16 blocks, 3 attempts"), "{text}");
}

#[test]
fn end_bit_command_timeout_adma_and_silence_map_to_their_kinds() {
    let (completion, error, _) = failing_read(interrupt::DATA_END_BIT, InjectAt::Data { after_blocks: 0 });
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Crc);
    assert!(error.to_string().contains("interrupt status 0x00408"), "{error}");
    let (completion, error, attempts) = failing_read(interrupt::COMMAND_END_BIT, InjectAt::Command);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Crc);
    assert_eq!(attempts, 3);
    assert!(error.to_string().contains("command CRC/end-bit/index error"));
    let (completion, _, _) = failing_read(interrupt::COMMAND_TIMEOUT, InjectAt::Command);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Timeout);
    let (completion, _, _) = failing_read(interrupt::ADMA, InjectAt::Data { after_blocks: 1 });
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Transfer);
    // A card that stops sending without any status: the driver's own deadline ends it.
    let (completion, error, _) = failing_read(0, InjectAt::Stall { after_blocks: 2 });
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Timeout);
    assert!(error.to_string().contains("no completion in time"), "{error}");
}

#[test]
fn no_card_is_reported_as_such() {
    // A host with working card detect and an empty slot.
    let platform = platform(1 << 20);
    let mut card = SimCard::qemu_like(1 << 30);
    card.present = false;
    let sim = sim(platform, PCI_CAPS, card.clone());
    let mut host = host(sim, platform, &GENERIC_PCI, None);
    assert!(matches!(bring_up(&mut host, None, BringUpOptions::default()), Err(SdError::NoCard { .. })));
    assert!(sim.state.borrow().log.is_empty());
    // A host with broken card detect (Pi Arasan): the card is looked for and does not answer.
    let sim = self::sim(platform, RASPI_CAPS, card);
    let mut host = self::host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let error = bring_up(&mut host, None, BringUpOptions::default()).unwrap_err();
    assert!(matches!(error, SdError::NoCard { present_state } if present_state & (1 << 16) == 0));
    assert_eq!(sim.command_indices(), [0, 8, 55]);
}

#[test]
fn reads_beyond_the_card_are_refused_before_any_command() {
    let platform = platform(8 << 20);
    let sim = sim(platform, RASPI_CAPS, SimCard::qemu_like(64 << 20));
    let host = host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    let commands_before = sim.state.borrow().log.len();
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    let blocks = device.geometry().block_count;
    for (lba, count) in [(blocks, 1), (blocks - 4, 8), (u64::MAX - 1, 4)] {
        let request = Request { tag: 1, operation: Operation::Read, lba, block_count: count, buffer };
        let (_, error) = device.submit(request).unwrap_err();
        assert_eq!(error, SubmitError::OutOfRange);
    }
    let write = Request { tag: 1, operation: Operation::Write, lba: 0, block_count: 1, buffer };
    assert_eq!(device.submit(write).unwrap_err().1, SubmitError::Unsupported);
    assert_eq!(sim.state.borrow().log.len(), commands_before);
    // One request in flight.
    let ok = Request { tag: 2, operation: Operation::Read, lba: 0, block_count: 1, buffer };
    device.submit(ok).unwrap();
    assert_eq!(device.submit(ok).unwrap_err().1, SubmitError::QueueFull);
}

struct RecordingBoard {
    io_1v8: Cell<Option<bool>>,
    power_cycles: Cell<u32>,
}

impl BoardSignalling for RecordingBoard {
    fn set_io_1v8(&self, enable: bool) -> Result<(), SdError> {
        self.io_1v8.set(Some(enable));
        Ok(())
    }
    fn power_cycle_card(&self) -> Result<(), SdError> {
        self.power_cycles.set(self.power_cycles.get() + 1);
        Ok(())
    }
}

#[test]
fn a_card_accepting_1v8_switches_and_runs_uhs() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(32 << 30);
    card.accepts_1v8 = true;
    card.switch_support = 0x801f; // SDR12..DDR50
    let sim = sim(platform, UHS_CAPS, card);
    let mut host = host(sim, platform, &BCM2711_EMMC2, Some(200_000_000));
    let board = RecordingBoard { io_1v8: Cell::new(None), power_cycles: Cell::new(0) };
    let info = bring_up(&mut host, Some(&board), BringUpOptions::default()).unwrap();
    assert!(info.signalling_1v8);
    assert_eq!(board.io_1v8.get(), Some(true));
    assert_eq!(info.timing, Timing::Sdr50);
    assert_eq!(info.sd_clock_hz, 100_000_000);
    let state = sim.state.borrow();
    assert!(state.signal_1v8_requested);
    // ACMD41 carried S18R; CMD11 followed.
    assert_ne!(state.log[3].1 & (1 << 24), 0);
    assert!(state.log.iter().any(|(i, _, _)| *i == 11));
    // Host Control 2 UHS mode = SDR50 (2), 1.8 V enable set.
    assert_eq!((state.registers[0x3c / 4] >> 16) & 0b1111, 0b1010);
}

#[test]
fn a_card_without_s18a_stays_at_3v3_even_with_the_hook() {
    let platform = platform(8 << 20);
    let sim = sim(platform, UHS_CAPS, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &BCM2711_EMMC2, Some(200_000_000));
    let board = RecordingBoard { io_1v8: Cell::new(None), power_cycles: Cell::new(0) };
    let info = bring_up(&mut host, Some(&board), BringUpOptions::default()).unwrap();
    assert!(!info.signalling_1v8);
    assert_eq!(board.io_1v8.get(), Some(false));
    assert_eq!(info.timing, Timing::HighSpeed);
    assert!(!sim.state.borrow().log.iter().any(|(i, _, _)| *i == 11));
    assert_eq!(board.power_cycles.get(), 0);
}

#[test]
fn options_cap_the_clock_and_keep_default_speed() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI_CAPS, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &GENERIC_PCI, Some(100_000_000));
    let options = BringUpOptions { allow_speed_switch: false, max_clock_hz: Some(10_000_000) };
    let info = bring_up(&mut host, None, options).unwrap();
    assert_eq!(info.timing, Timing::DefaultSpeed);
    assert_eq!(info.sd_clock_hz, 10_000_000);
    // ACMD6 (bus width, argument 2) but no CMD6 (switch).
    assert!(!sim.state.borrow().log.iter().any(|(i, a, _)| *i == 6 && *a != 2));
}

#[test]
fn descriptor_table_lives_where_the_host_can_reach_it() {
    let platform = platform(1 << 20);
    let table = platform.allocate_dma(4096, 4096).unwrap();
    // A translation that excludes the test memory makes ADMA2 set-up fail cleanly.
    let narrow = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0x1000 };
    assert!(matches!(
        adma::DescriptorTable::new(table, AdmaFormat::Adma2Bits32, narrow),
        Err(adma::AdmaError::Unreachable(_))
    ));
}
