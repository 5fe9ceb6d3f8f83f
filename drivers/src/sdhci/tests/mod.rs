//! Host/card protocol tests against the simulated controller and card (`sim.rs`): bring-up on
//! each quirk set, PIO and ADMA2 reads checked against the test pattern, request splitting,
//! CMD23, error injection with recovery and bounded retries, no card, reads beyond the end.

extern crate std;

mod emmc;
mod queue;
mod uhs;
mod writes;

use super::adma::AdmaFormat;
use super::device::{SdCard, TransferMode, MAX_BLOCKS_PER_COMMAND};
use super::host::SdhciHost;
use super::quirks::{bcm2712_config, HostQuirks, ARASAN_EMMC, BCM2711_EMMC2, BCM2712_SDHCI, GENERIC_PCI};
use super::regs::{interrupt, offsets};
use super::sim::{InjectAt, Injection, SimBoard, SimHost, TestPlatform};
use crate::sd::block::SdBlockDevice;
use crate::sd::card_registers::CapacityClass;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::bring_up;
use crate::sd::options::{AutoCmd23Request, Cmd23Request, ModeRequest};
use crate::sd::signalling::BoardSignalling;
use crate::sd::sim_card::SimCard;
use crate::sd::timing::{BringUpOptions, Timing};
use blockdev::{BlockDevice, Completion, DmaBuffer, IoErrorKind, Operation, Request, SubmitError};
use core::cell::Cell;
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Platform};
use std::boxed::Box;
use std::string::ToString;
use std::vec::Vec;

use super::adma;

/// QEMU's raspi Arasan/EMMC2 whose base clock the mailbox gives as 50 MHz (docs/qemu.md §2).
pub(super) const RASPI: SimBoard = SimBoard { base_clock_hz: 50_000_000, ..SimBoard::QEMU_RASPI };
/// QEMU's sdhci-pci with `sd-spec-version=3`.
const PCI: SimBoard = SimBoard::QEMU_PCI;
/// A v3 host with SDR50/DDR50 and 1.8 V at 200 MHz (for the UHS path).
pub(super) const UHS: SimBoard =
    SimBoard { capabilities: (0x0578_64b4, 0b101), base_clock_hz: 200_000_000, ..SimBoard::QEMU_PCI };

pub(super) fn platform(bytes: usize) -> &'static TestPlatform {
    Box::leak(Box::new(TestPlatform::new(bytes)))
}

pub(super) fn sim(
    platform: &'static TestPlatform,
    board: SimBoard,
    card: SimCard,
) -> &'static SimHost<'static> {
    Box::leak(Box::new(SimHost::new(platform, board, card)))
}

pub(super) type Host = SdhciHost<'static, &'static SimHost<'static>, TestPlatform>;

pub(super) fn host(
    sim: &'static SimHost<'static>,
    platform: &'static TestPlatform,
    quirks: &'static HostQuirks,
    base_clock_hz: Option<u32>,
) -> Host {
    let window = sim.state.borrow().dma_window;
    SdhciHost::new(sim, platform, quirks, base_clock_hz, Some(window)).unwrap()
}

pub(super) fn card_device(
    host: Host,
    mode: ModeRequest,
    cmd23: Cmd23Request,
) -> SdCard<'static, &'static SimHost<'static>, TestPlatform> {
    card_device_announcing(host, mode, cmd23, AutoCmd23Request::On)
}

/// As [`card_device`], with how multi-block ADMA2 transfers announce their count.
pub(super) fn card_device_announcing(
    mut host: Host,
    mode: ModeRequest,
    cmd23: Cmd23Request,
    auto_cmd23: AutoCmd23Request,
) -> SdCard<'static, &'static SimHost<'static>, TestPlatform> {
    let card = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    SdCard::new(host, card, "sd0", mode, cmd23, auto_cmd23).unwrap()
}

pub(super) fn read(
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
pub(super) fn read_into(
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

pub(super) fn assert_pattern(platform: &TestPlatform, buffer: &DmaBuffer, lba: u64) {
    let bytes = platform.cpu_read(buffer);
    assert_eq!(blockdev::pattern::first_mismatch(lba * 512, &bytes), None);
}

#[test]
fn arasan_bring_up_of_qemus_sdsc_card_with_write_spacing() {
    let platform = platform(8 << 20);
    let sim = sim(platform, RASPI, SimCard::qemu_like(1 << 30));
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
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
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
    let sim = sim(platform, RASPI, SimCard::qemu_like(1 << 30));
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
        assert_pattern(platform, &buffer, lba);
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
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert_eq!(device.transfer_mode(), TransferMode::Adma2(AdmaFormat::Adma2Bits32));
    let invalidates_before = platform.invalidate_calls.get();
    let (completion, buffer) = read(&mut device, platform, 5_000_000, 2048);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 5_000_000);
    assert!(platform.invalidate_calls.get() > invalidates_before);
    let (completion, buffer) = read(&mut device, platform, 8_388_607, 1);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 8_388_607);
    assert_eq!(sim.state.borrow().dma_transfers, 2);
    // A buffer ADMA2 cannot use (misaligned) goes by PIO instead of failing.
    let aligned = platform.allocate_dma(4 * 512 + 2, 4096).unwrap();
    let odd = aligned.slice(2, 4 * 512).unwrap();
    assert_eq!(read_into(&mut device, 10, 4, odd).result, Ok(()));
    assert_pattern(platform, &odd, 10);
    assert_eq!(sim.state.borrow().dma_transfers, 2);

    // sd.mode=pio on the same kind of host.
    let platform = self::platform(16 << 20);
    let sim = self::sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = self::host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    assert_eq!(device.transfer_mode(), TransferMode::Pio);
    let (completion, buffer) = read(&mut device, platform, 77, 64);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 77);
    assert_eq!(sim.state.borrow().dma_transfers, 0);
}

#[test]
fn requests_above_65535_blocks_are_split() {
    let platform = platform(48 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert!(device.geometry().max_request_blocks > MAX_BLOCKS_PER_COMMAND);
    assert_eq!(device.geometry().max_in_flight, 1);
    let blocks = MAX_BLOCKS_PER_COMMAND + 4465;
    let (completion, buffer) = read(&mut device, platform, 1000, blocks);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 1000);
    let state = sim.state.borrow();
    let reads: Vec<u32> =
        state.log.iter().filter(|(i, _, _)| *i == 18).map(|(_, argument, _)| *argument).collect();
    assert_eq!(reads, [1000, 1000 + MAX_BLOCKS_PER_COMMAND]);
    // Both commands moved their data by ADMA2, each from its own part of the buffer.
    assert_eq!(state.dma_transfers, 2);
    assert_eq!(device.data_path().map(|path| (path.commands, path.pio_fallbacks)), Some((2, 0)));
}

#[test]
fn cmd23_announces_the_count_instead_of_auto_cmd12() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02; // CMD_SUPPORT: CMD23
    let sim = sim(platform, RASPI, card);
    let host = host(sim, platform, &BCM2711_EMMC2, Some(100_000_000));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    assert!(device.uses_cmd23());
    let (completion, buffer) = read(&mut device, platform, 64, 24);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 64);
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
    let sim = sim(platform, RASPI, SimCard::qemu_like(1 << 30));
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
    assert_pattern(platform, &buffer, 100);
    let state = sim.state.borrow();
    assert!(state.line_resets > resets_before);
    assert_eq!(state.log.iter().filter(|(i, _, _)| *i == 18).count(), 2);
    // The card was in the transfer state: no CMD12 was sent (it would be illegal there).
    assert!(!state.log.iter().any(|(i, _, _)| *i == 12));
}

fn failing_read(error_bits: u32, at: InjectAt) -> (Completion, SdError, u32) {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
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
    assert_pattern(platform, &buffer, 301);
    (completion, error, attempts)
}

#[test]
fn a_persistent_data_crc_error_fails_the_request_after_bounded_retries() {
    let (completion, error, attempts) = failing_read(interrupt::DATA_CRC, InjectAt::Data { after_blocks: 3 });
    assert_eq!(attempts, crate::sd::block::MAX_ATTEMPTS);
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
    // Command Complete is still set: the status is cleared before each command, not bit by bit.
    assert!(text.contains("interrupt status 0x00208001"), "{text}");
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
    let sim = sim(platform, PCI, card.clone());
    let mut host = host(sim, platform, &GENERIC_PCI, None);
    assert!(matches!(bring_up(&mut host, None, BringUpOptions::default()), Err(SdError::NoCard { .. })));
    assert!(sim.state.borrow().log.is_empty());
    // A host with broken card detect (Pi Arasan): the card is looked for and does not answer.
    let sim = self::sim(platform, RASPI, card);
    let mut host = self::host(sim, platform, &ARASAN_EMMC, Some(50_000_000));
    let error = bring_up(&mut host, None, BringUpOptions::default()).unwrap_err();
    assert!(matches!(error, SdError::NoCard { present_state } if present_state & (1 << 16) == 0));
    // SD (CMD0, CMD8, CMD55 of ACMD41), then eMMC (CMD0, CMD1), as Linux's `mmc_rescan` tries.
    assert_eq!(sim.command_indices(), [0, 8, 55, 0, 1]);
}

#[test]
fn reads_beyond_the_card_are_refused_before_any_command() {
    let platform = platform(8 << 20);
    let sim = sim(platform, RASPI, SimCard::qemu_like(64 << 20));
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
    let write = Request { tag: 1, operation: Operation::Write, lba: blocks - 4, block_count: 8, buffer };
    assert_eq!(device.submit(write).unwrap_err().1, SubmitError::OutOfRange);
    let flush = Request { tag: 1, operation: Operation::Flush, lba: 0, block_count: 0, buffer };
    assert_eq!(device.submit(flush).unwrap_err().1, SubmitError::Unsupported);
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

fn recording_board() -> RecordingBoard {
    RecordingBoard { io_1v8: Cell::new(None), power_cycles: Cell::new(0) }
}

/// A UHS-I card that accepts 1.8 V and supports the access modes in `switch_support` (CMD6
/// group 1: bit 0 SDR12 .. bit 4 DDR50; bit 15 is always set).
pub(super) fn uhs_card(switch_support: u16) -> SimCard {
    let mut card = SimCard::qemu_like(32 << 30);
    card.accepts_1v8 = true;
    card.switch_support = switch_support;
    card
}

/// Brings a UHS card up on `board` with the `quirks` of that host and the hooks that switch to
/// 1.8 V; checks the driver broke none of the simulator's rules.
fn uhs_bring_up(
    board: SimBoard,
    quirks: &'static HostQuirks,
    card: SimCard,
) -> (&'static SimHost<'static>, crate::sd::identify::CardInfo) {
    let platform = platform(8 << 20);
    let sim = sim(platform, board, card);
    let mut host = host(sim, platform, quirks, Some(board.base_clock_hz));
    let signalling = recording_board();
    let info = bring_up(&mut host, Some(&signalling), BringUpOptions::default()).unwrap();
    assert_eq!(signalling.io_1v8.get(), Some(true));
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
    (sim, info)
}

#[test]
fn a_card_accepting_1v8_switches_and_runs_uhs() {
    // SDR12..DDR50 on both sides: DDR50 is preferred over SDR50 (Linux's order; what a Pi 4 runs).
    let (sim, info) = uhs_bring_up(UHS, &BCM2711_EMMC2, uhs_card(0x801f));
    assert!(info.signalling_1v8);
    assert_eq!(info.timing, Timing::Ddr50);
    assert_eq!(info.sd_clock_hz, 50_000_000);
    assert_eq!(info.fallback, None);
    let state = sim.state.borrow();
    assert!(state.signal_1v8_requested);
    // ACMD41 carried S18R; CMD11 followed.
    assert_ne!(state.log[3].1 & (1 << 24), 0);
    assert!(state.log.iter().any(|(i, _, _)| *i == 11));
    // Host Control 2 UHS mode = DDR50 (4), 1.8 V enable set; High Speed Enable too.
    assert_eq!((state.registers[0x3c / 4] >> 16) & 0b1111, 0b1100);
    assert_ne!(state.registers[0x28 / 4] & (1 << 2), 0);
    // DDR50 is tuned as Linux tunes it, and it found a sampling point.
    assert_eq!(state.tuning_log.len() as u32, super::sim::TUNING_PASSES);
    assert_eq!(state.tunings_completed, 1);
}

#[test]
fn uhs_modes_are_preferred_sdr104_then_ddr50_then_sdr50() {
    // The Pi 5 host offers all three (board modes); the card decides.
    let pi5 = |support| uhs_bring_up(SimBoard::PI5_SDHCI, &BCM2712_SDHCI, uhs_card(support)).1.timing;
    assert_eq!(pi5(0x801f), Timing::Sdr104);
    assert_eq!(pi5(0x8017), Timing::Ddr50);
    assert_eq!(pi5(0x8007), Timing::Sdr50);
    assert_eq!(pi5(0x8003), Timing::Sdr25);
}

#[test]
fn uhs_mode_select_changes_only_while_the_sd_clock_is_stopped() {
    // Every UHS bring-up above asserts the simulator saw no violation; this shows it would.
    let platform = platform(1 << 20);
    let sim = sim(platform, UHS, SimCard::qemu_like(1 << 30));
    sim.write32(0x34, interrupt::ENABLED);
    sim.write32(0x2c, 0b111); // internal clock on, SD clock on
    sim.write32(0x3c, 4 << 16);
    assert_eq!(sim.state.borrow().violations, ["UHS Mode Select changed while the SD clock ran"]);
    // The glitch garbles the next command.
    sim.write32(0x28, 0xf00);
    sim.write32(0x0c, 0);
    // The command's outcome shows after the controller's latency.
    let status = (0..super::sim::COMMAND_LATENCY_READS).map(|_| sim.read32(0x30)).last().unwrap();
    assert_ne!(status & interrupt::COMMAND_CRC, 0);
    // With the clock stopped the same change is fine.
    let sim = self::sim(platform, UHS, SimCard::qemu_like(1 << 30));
    sim.write32(0x2c, 0b011);
    sim.write32(0x3c, 4 << 16);
    assert!(sim.state.borrow().violations.is_empty());
}

#[test]
fn pi5_tunes_sdr104_on_buffer_read_ready_alone_through_the_delay_line_phy() {
    let (sim, info) = uhs_bring_up(SimBoard::PI5_SDHCI, &BCM2712_SDHCI, uhs_card(0x801f));
    assert_eq!(info.timing, Timing::Sdr104);
    assert_eq!(info.sd_clock_hz, 200_000_000);
    assert_eq!(info.fallback, None);
    let state = sim.state.borrow();
    // The controller found its sampling point after the CMD19s it needs, and the driver read
    // nothing but Buffer Read Ready for them.
    assert_eq!(state.tuning_log.len() as u32, super::sim::TUNING_PASSES);
    assert_eq!(state.registers[0x3c / 4] >> 22 & 0b11, 0b10, "Sampling Clock Select, tuning done");
    // The cfg block: delay-line PHY selected (MAX_50MHZ_MODE ENABLE clear, STRAP_OVERRIDE set),
    // SD pin function and forced card presence.
    let config = state.config_block.as_ref().unwrap();
    assert_eq!(config[bcm2712_config::MAX_50MHZ_MODE / 4], bcm2712_config::MAX_50MHZ_MODE_STRAP_OVERRIDE);
    assert_eq!(config[bcm2712_config::SD_PIN_SEL / 4], bcm2712_config::SD_PIN_SEL_SD);
    assert_eq!(config[bcm2712_config::CTRL / 4], bcm2712_config::CTRL_CARD_DETECT_TEST_ENABLE);
    // SDR104 data arrives intact: every command after tuning went out at 200 MHz.
    let after_tuning = state.log.iter().rposition(|(i, _, _)| *i == 19).unwrap() + 1;
    assert!(state.command_clocks_hz[after_tuning..].iter().all(|hz| *hz == 200_000_000));
}

#[test]
fn failed_tuning_drops_the_clock_before_the_next_command_and_says_why() {
    let mut card = uhs_card(0x801f);
    card.tunable = false;
    let (sim, info) = uhs_bring_up(SimBoard::PI5_SDHCI, &BCM2712_SDHCI, card);
    // DDR50 needs no tuning and both sides have it.
    assert_eq!(info.timing, Timing::Ddr50);
    assert_eq!(info.sd_clock_hz, 50_000_000);
    assert!(info.signalling_1v8);
    let fallback = info.fallback.expect("the fallback is reported");
    assert_eq!(fallback.wanted, Timing::Sdr104);
    assert_eq!(fallback.reason, crate::sd::timing::TuningFailure::NotTuned { commands: 4 });
    assert_eq!(
        fallback.reason.to_string(),
        "the controller ended tuning after 4 CMD19 without selecting the tuned clock"
    );
    let state = sim.state.borrow();
    // Every command after the last CMD19 (the CMD6 switching to DDR50 first) ran at ≤ 50 MHz.
    let after_tuning = state.log.iter().rposition(|(i, _, _)| *i == 19).unwrap() + 1;
    assert_eq!(state.log[after_tuning].0, 6);
    assert_eq!(state.log[after_tuning].1 & 0xf, 4, "CMD6 to DDR50");
    assert!(state.command_clocks_hz[after_tuning..].iter().all(|hz| *hz <= 50_000_000));
    // Tuning was abandoned: fixed sampling clock, UHS mode DDR50.
    assert_eq!((state.registers[0x3c / 4] >> 16) & 0xc7, 0x04);
}

#[test]
fn without_ddr50_failed_tuning_falls_back_to_sdr25_with_one_switch() {
    let mut card = uhs_card(0x800f); // SDR12, SDR25, SDR50, SDR104: no DDR50
    card.tunable = false;
    let (sim, info) = uhs_bring_up(SimBoard::PI5_SDHCI, &BCM2712_SDHCI, card);
    assert_eq!((info.timing, info.sd_clock_hz), (Timing::Sdr25, 50_000_000));
    assert_eq!(info.fallback.map(|fallback| fallback.wanted), Some(Timing::Sdr104));
    let state = sim.state.borrow();
    let after_tuning = state.log.iter().rposition(|(i, _, _)| *i == 19).unwrap() + 1;
    let switches: Vec<u32> =
        state.log[after_tuning..].iter().filter(|(i, _, _)| *i == 6).map(|(_, a, _)| a & 0xf).collect();
    assert_eq!(switches, [1], "one CMD6, to SDR25");
}

#[test]
fn a_tuning_error_ends_tuning_and_is_reported() {
    let platform = platform(8 << 20);
    let board = SimBoard::PI5_SDHCI;
    let sim = sim(platform, board, uhs_card(0x801f));
    sim.inject(Injection {
        command_index: 19,
        error_bits: interrupt::TUNING,
        at: InjectAt::Command,
        times: 1,
    });
    let mut host = host(sim, platform, &BCM2712_SDHCI, Some(board.base_clock_hz));
    let info = bring_up(&mut host, Some(&recording_board()), BringUpOptions::default()).unwrap();
    assert_eq!(info.timing, Timing::Ddr50);
    let reason = info.fallback.unwrap().reason;
    // Only Buffer Read Ready is enabled while tuning: the error bit never shows, the block's
    // Buffer Read Ready does not come either, and tuning stops at its 50 ms wait.
    let crate::sd::timing::TuningFailure::NoBufferReadReady { commands: 0, interrupt_status } = reason else {
        panic!("{reason:?}");
    };
    assert_eq!(interrupt_status & interrupt::ALL_ERRORS, 0);
    assert!(reason.to_string().starts_with("no Buffer Read Ready for CMD19 number 1"), "{reason}");
}

#[test]
fn tuning_finds_a_sampling_point_only_in_sdr50_or_sdr104() {
    let platform = platform(1 << 20);
    // CMD19s by hand: 1.8 V, SD clock on, delay-line PHY, then Execute Tuning in `uhs_mode`.
    let tune = |uhs_mode: u32| {
        let sim = sim(platform, SimBoard::PI5_SDHCI, uhs_card(0x801f));
        sim.write32(0x34, interrupt::BUFFER_READ_READY);
        sim.write32(0x400 + bcm2712_config::MAX_50MHZ_MODE, bcm2712_config::MAX_50MHZ_MODE_STRAP_OVERRIDE);
        sim.write32(0x3c, (1 << 19) | (uhs_mode << 16));
        sim.write32(0x2c, 0b111);
        sim.write32(0x28, 0xf00);
        sim.write32(0x3c, (1 << 22) | (1 << 19) | (uhs_mode << 16));
        for _ in 0..super::sim::TUNING_PASSES {
            sim.write32(0x04, (1 << 16) | 64);
            sim.write32(0x0c, (19 << 24) | (1 << 21) | 0x1a_0000 | 0x10);
            // Buffer Read Ready only, once the block is in: no Command Complete, no Transfer
            // Complete.
            let status = (0..4).map(|_| sim.read32(0x30)).find(|status| *status != 0);
            assert_eq!(status, Some(interrupt::BUFFER_READ_READY));
            sim.write32(0x30, interrupt::BUFFER_READ_READY);
            platform.delay_us(1_000);
        }
        // Execute Tuning cleared; Sampling Clock Select says whether a point was found.
        sim.read32(0x3c) >> 22 & 0b11
    };
    assert_eq!(tune(3), 0b10, "SDR104");
    assert_eq!(tune(1), 0b00, "SDR25 is out of sequence");
}

#[test]
fn a_tuning_command_the_controller_cannot_sample_is_a_violation() {
    let platform = platform(1 << 20);
    // One tuning command by hand in SDR104 (as above) with Block Size `block_bytes` and the
    // command word `command_word`: the violations it brought, and whether Buffer Read Ready came.
    let tune_once = |block_bytes: u32, command_word: u32| {
        let sim = sim(platform, SimBoard::PI5_SDHCI, uhs_card(0x801f));
        sim.write32(0x34, interrupt::BUFFER_READ_READY);
        sim.write32(0x3c, (1 << 19) | (3 << 16));
        sim.write32(0x2c, 0b111);
        sim.write32(0x28, 0xf00);
        sim.write32(0x3c, (1 << 22) | (1 << 19) | (3 << 16));
        sim.write32(0x04, (1 << 16) | block_bytes);
        sim.write32(0x0c, command_word);
        let status = (0..4).map(|_| sim.read32(0x30)).find(|status| *status != 0);
        let violations = sim.state.borrow().violations.clone();
        (violations, status == Some(interrupt::BUFFER_READ_READY))
    };
    // CMD19, R1 with index and CRC checks, Data Present Select; Transfer Mode: read.
    let cmd19 = (19 << 24) | (1 << 21) | 0x1a_0000 | 0x10;
    assert_eq!(tune_once(64, cmd19), (Vec::new(), true));
    let fault = |block_bytes, command_word| tune_once(block_bytes, command_word).0;
    assert_eq!(fault(128, cmd19), ["tuning block size is not 64 bytes (CMD19, or CMD21 on a 4-bit bus)"]);
    assert_eq!(
        fault(64, cmd19 & !(1 << 21)),
        ["tuning command without Data Present Select: the controller expects no block"]
    );
    assert_eq!(
        fault(64, cmd19 & !0x10),
        ["tuning command with Transfer Mode direction write: the block is read"]
    );
    for transfer_mode in [0x30, 0x11] {
        assert_eq!(
            fault(64, cmd19 | transfer_mode),
            ["tuning command with Multi Block Select or DMA Enable set"]
        );
    }
    // An SD card does not know CMD21: no tuning block comes.
    let cmd21 = (21 << 24) | (cmd19 & 0x00ff_ffff);
    assert_eq!(
        tune_once(64, cmd21),
        (std::vec!["CMD21 sent to tune an SD card: its tuning command is CMD19"], false)
    );
}

#[test]
fn the_bcm2712_phy_is_switched_only_for_tuned_modes_and_other_cfg_bits_stay() {
    use super::quirks::{CapabilitySource, UHS_DDR50, UHS_SDR104, UHS_SDR50};
    static SDR50_ONLY: HostQuirks = HostQuirks {
        capabilities: CapabilitySource::RegisterWithBoardUhs { uhs_bits: UHS_SDR50 },
        ..BCM2712_SDHCI
    };
    static SDR104_ONLY: HostQuirks = HostQuirks {
        capabilities: CapabilitySource::RegisterWithBoardUhs { uhs_bits: UHS_SDR104 },
        ..BCM2712_SDHCI
    };
    static DDR50_ONLY: HostQuirks = HostQuirks {
        capabilities: CapabilitySource::RegisterWithBoardUhs { uhs_bits: UHS_DDR50 },
        ..BCM2712_SDHCI
    };
    let platform = platform(1 << 20);
    let max_50mhz_mode = |quirks: &'static HostQuirks| {
        let sim = sim(platform, SimBoard::PI5_SDHCI, SimCard::qemu_like(1 << 30));
        // The firmware may have left the test enable already set: it stays set.
        sim.write32(0x400 + bcm2712_config::CTRL, bcm2712_config::CTRL_CARD_DETECT_TEST_ENABLE);
        let mut host = host(sim, platform, quirks, Some(200_000_000));
        host.initialize().unwrap();
        let control = sim.read32(0x400 + bcm2712_config::CTRL);
        assert_eq!(control, bcm2712_config::CTRL_CARD_DETECT_TEST_ENABLE);
        sim.read32(0x400 + bcm2712_config::MAX_50MHZ_MODE)
    };
    let delay_line = bcm2712_config::MAX_50MHZ_MODE_STRAP_OVERRIDE;
    assert_eq!(max_50mhz_mode(&SDR50_ONLY), delay_line);
    assert_eq!(max_50mhz_mode(&SDR104_ONLY), delay_line);
    // DDR50 runs at 50 MHz: the strap stays as it was (Linux does the same).
    assert_eq!(max_50mhz_mode(&DDR50_ONLY), bcm2712_config::MAX_50MHZ_MODE_ENABLE);
}

#[test]
fn pi3_arasan_works_with_a_capabilities_register_that_reads_zero() {
    let platform = platform(8 << 20);
    let sim = sim(platform, SimBoard::PI3_ARASAN, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &ARASAN_EMMC, Some(200_000_000));
    // The driver decides by Linux's supplied values, and says what the register read.
    let capabilities = host.capabilities();
    assert_eq!(capabilities.register, Some((0, 0)));
    assert!(capabilities.voltage_3v3() && capabilities.high_speed());
    assert!(!capabilities.adma2() && !capabilities.sdma() && !capabilities.voltage_1v8());
    assert_eq!(capabilities.max_block_bytes(), 1024);
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    assert_eq!(info.timing, Timing::HighSpeed);
    assert_eq!(info.sd_clock_hz, 50_000_000);
    assert!(!info.signalling_1v8);
    let mut device =
        SdCard::new(host, info, "sd0", ModeRequest::Adma2, Cmd23Request::Auto, AutoCmd23Request::On).unwrap();
    assert_eq!(device.transfer_mode(), TransferMode::Pio);
    let (completion, buffer) = read(&mut device, platform, 4000, 16);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 4000);
    // 3.3 V bus power (Power Control 0b111 << 9 | power on), no HISPD bit.
    let state = sim.state.borrow();
    assert_eq!(state.registers[0x28 / 4] & 0xf04, 0xf00);
}

#[test]
fn emmc2_dma_through_the_b0_window_and_a_wrong_offset_fails() {
    let platform = platform(16 << 20);
    let b0 = SimBoard::PI4_EMMC2_B0;
    let card = SimCard::qemu_like(4 << 30);
    // The right translation: the descriptors and the data go through the window.
    let sim = sim(platform, b0, card.clone());
    let host = host(sim, platform, &BCM2711_EMMC2, Some(b0.base_clock_hz));
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert_eq!(device.transfer_mode(), TransferMode::Adma2(AdmaFormat::Adma2Bits32));
    let (completion, buffer) = read(&mut device, platform, 2_000_000, 256);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 2_000_000);
    assert_eq!(sim.state.borrow().dma_transfers, 1);
    // Bus = physical (the C0 rule) on a B0 window: the ADMA engine fetches outside it.
    let sim = self::sim(platform, b0, card.clone());
    let identity = Some(BusTranslation::IDENTITY);
    let mut host = SdhciHost::new(sim, platform, &BCM2711_EMMC2, Some(b0.base_clock_hz), identity).unwrap();
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    let mut device =
        SdCard::new(host, info, "sd0", ModeRequest::Auto, Cmd23Request::Off, AutoCmd23Request::On).unwrap();
    let (completion, _) = read(&mut device, platform, 2_000_000, 256);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Transfer);
    let error = device.last_error().unwrap().to_string();
    assert!(error.contains("ADMA error status"), "{error}");
    // No translation known at all: PIO, and the data still arrives.
    let sim = self::sim(platform, b0, card);
    let mut host = SdhciHost::new(sim, platform, &BCM2711_EMMC2, Some(b0.base_clock_hz), None).unwrap();
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    let mut device =
        SdCard::new(host, info, "sd0", ModeRequest::Adma2, Cmd23Request::Off, AutoCmd23Request::On).unwrap();
    assert_eq!(device.transfer_mode(), TransferMode::Pio);
    let (completion, buffer) = read(&mut device, platform, 77, 8);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 77);
    assert_eq!(sim.state.borrow().dma_transfers, 0);
}

#[test]
fn a_card_without_s18a_stays_at_3v3_even_with_the_hook() {
    let platform = platform(8 << 20);
    let sim = sim(platform, UHS, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &BCM2711_EMMC2, Some(200_000_000));
    let board = recording_board();
    let info = bring_up(&mut host, Some(&board), BringUpOptions::default()).unwrap();
    assert!(!info.signalling_1v8);
    assert_eq!(board.io_1v8.get(), Some(false));
    assert_eq!(info.timing, Timing::HighSpeed);
    assert!(!sim.state.borrow().log.iter().any(|(i, _, _)| *i == 11));
    // The one power cycle before identification (a card may have been left at 1.8 V).
    assert_eq!(board.power_cycles.get(), 1);
}

#[test]
fn options_cap_the_clock_and_keep_default_speed() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let mut host = host(sim, platform, &GENERIC_PCI, Some(100_000_000));
    let options = BringUpOptions {
        allow_speed_switch: false,
        max_clock_hz: Some(10_000_000),
        ..BringUpOptions::default()
    };
    let info = bring_up(&mut host, None, options).unwrap();
    assert_eq!(info.timing, Timing::DefaultSpeed);
    assert_eq!(info.sd_clock_hz, 10_000_000);
    // ACMD6 (bus width, argument 2) but no CMD6 (switch).
    assert!(!sim.state.borrow().log.iter().any(|(i, a, _)| *i == 6 && *a != 2));
}

#[test]
fn a_card_without_command_class_10_stays_at_default_speed() {
    // The SCR allows CMD6 (SD_SPEC 2) but the CSD lacks class 10 (switch): no CMD6 at all.
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.csd &= !(1u128 << (84 + 10));
    let sim = sim(platform, PCI, card);
    let mut host = host(sim, platform, &GENERIC_PCI, None);
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    assert_eq!(info.timing, Timing::DefaultSpeed);
    assert!(!sim.state.borrow().log.iter().any(|(i, a, _)| *i == 6 && *a != 2));
}

#[test]
fn sdr50_is_tuned_only_when_the_host_asks_and_only_if_the_host_has_it() {
    // "Use Tuning for SDR50" (capabilities bit 45) set, SDR50 and DDR50 offered.
    let asks = SimBoard { capabilities: (UHS.capabilities.0, 0b101 | (1 << 13)), ..UHS };
    let (sim, info) = uhs_bring_up(asks, &BCM2711_EMMC2, uhs_card(0x8007));
    assert_eq!((info.timing, info.sd_clock_hz, info.fallback), (Timing::Sdr50, 100_000_000, None));
    assert_eq!(sim.state.borrow().tuning_log.len() as u32, super::sim::TUNING_PASSES);
    // DDR50 is tuned whatever the bit says (Linux `mmc_sd_init_uhs_card`).
    let (sim, info) = uhs_bring_up(asks, &BCM2711_EMMC2, uhs_card(0x8017));
    assert_eq!(info.timing, Timing::Ddr50);
    assert_eq!(sim.state.borrow().tuning_log.len() as u32, super::sim::TUNING_PASSES);
    // Without the bit SDR50 runs untuned.
    let (sim, info) = uhs_bring_up(UHS, &BCM2711_EMMC2, uhs_card(0x8007));
    assert_eq!(info.timing, Timing::Sdr50);
    assert_eq!(sim.state.borrow().tuning_log.len(), 0);
    // A host without SDR50 does not use it, however fast its base clock: SDR25.
    let no_sdr50 = SimBoard { capabilities: (UHS.capabilities.0, 0b100), ..UHS };
    let (_, info) = uhs_bring_up(no_sdr50, &BCM2711_EMMC2, uhs_card(0x8007));
    assert_eq!(info.timing, Timing::Sdr25);
}

#[test]
fn descriptor_table_lives_where_the_host_can_reach_it() {
    let platform = platform(1 << 20);
    let table = hal::dma::DmaRegion::allocate(platform, 4096, 4096).unwrap();
    // A translation that excludes the test memory makes ADMA2 set-up fail cleanly.
    let narrow = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0x1000 };
    let limit = adma::DescriptorLimit::ZeroLengthMeans64KiB;
    let refused = adma::DescriptorTable::new(table, AdmaFormat::Adma2Bits32, limit, narrow);
    assert!(matches!(refused, Err(adma::AdmaError::Unreachable(_))));
}

/// Commands the simulator has seen so far.
fn commands_seen(sim: &SimHost<'_>) -> usize {
    sim.state.borrow().log.len()
}

#[test]
fn submit_prepares_and_kick_hands_the_command_over_without_waiting() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let buffer = platform.allocate_dma(2048 * 512, 4096).unwrap();
    let request = Request { tag: 9, operation: Operation::Read, lba: 4096, block_count: 2048, buffer };
    let before = commands_seen(sim);
    let cleans_before = platform.clean_calls.get();
    device.submit(request).unwrap();
    // submit() wrote and cleaned the descriptors and cleaned the buffer; nothing was sent.
    assert_eq!(commands_seen(sim), before);
    assert_eq!(platform.clean_calls.get(), cleans_before + 2);
    device.kick();
    // kick() wrote the command register and returned without looking at the controller again.
    assert_eq!(
        sim.state.borrow().log.last().map(|(index, argument, _)| (*index, *argument)),
        Some((18, 4096))
    );
    assert_eq!(sim.state.borrow().reads_since_command, 0, "kick() read the controller after the command");
    assert!(sim.state.borrow().command_in_flight());
    // Each poll looks once: the first polls find the command still running.
    let mut completions = [Completion::default()];
    assert_eq!(device.poll(&mut completions), 0);
    assert!(sim.state.borrow().reads_since_command <= 2, "one poll waited");
    let mut polls = 1;
    while device.poll(&mut completions) == 0 {
        polls += 1;
        assert!(polls < 100, "no completion");
    }
    assert_eq!(completions[0], Completion { tag: 9, result: Ok(()) });
    assert!(polls >= 2, "the command phase and the DMA took more than one look");
    assert_pattern(platform, &buffer, 4096);
}

#[test]
fn with_cmd23_kick_sends_the_count_and_a_poll_sends_the_read() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02; // CMD_SUPPORT: CMD23
    let sim = sim(platform, PCI, card);
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device =
        card_device_announcing(host, ModeRequest::Auto, Cmd23Request::Auto, AutoCmd23Request::Off);
    let buffer = platform.allocate_dma(64 * 512, 4096).unwrap();
    device.submit(Request { tag: 3, operation: Operation::Read, lba: 640, block_count: 64, buffer }).unwrap();
    device.kick();
    assert_eq!(sim.state.borrow().log.last().map(|(index, argument, _)| (*index, *argument)), Some((23, 64)));
    assert_eq!(sim.state.borrow().reads_since_command, 0);
    let mut completions = [Completion::default()];
    // CMD18 goes out only once a poll has seen CMD23 complete.
    while sim.state.borrow().log.last().map(|(index, _, _)| *index) == Some(23) {
        assert_eq!(device.poll(&mut completions), 0);
    }
    assert_eq!(
        sim.state.borrow().log.last().map(|(index, argument, mode)| (*index, *argument, *mode)),
        Some((18, 640, 0x0033))
    );
    for _ in 0..100 {
        if device.poll(&mut completions) == 1 {
            break;
        }
    }
    assert_eq!(completions[0], Completion { tag: 3, result: Ok(()) });
    assert_pattern(platform, &buffer, 640);
}

#[test]
fn a_cmd23_the_card_rejects_is_retried_then_fails_the_request() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    // The card does not list CMD23 but it is forced on; it times out every time.
    let mut device = card_device_announcing(host, ModeRequest::Auto, Cmd23Request::On, AutoCmd23Request::Off);
    sim.inject(Injection {
        command_index: 23,
        error_bits: interrupt::COMMAND_TIMEOUT,
        at: InjectAt::Command,
        times: 100,
    });
    let (completion, _) = read(&mut device, platform, 100, 8);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Timeout);
    let state = sim.state.borrow();
    assert_eq!(state.log.iter().filter(|(i, _, _)| *i == 23).count() as u32, crate::sd::block::MAX_ATTEMPTS);
    assert!(!state.log.iter().any(|(i, _, _)| *i == 18), "no read without its count");
}

#[test]
fn a_one_mib_read_moves_in_sixteen_descriptors_of_64_kib() {
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    assert_eq!(device.descriptor_limit(), Some(adma::DescriptorLimit::ZeroLengthMeans64KiB));
    let (completion, buffer) = read(&mut device, platform, 2048, 2048);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 2048);
    assert_eq!(sim.state.borrow().descriptor_lengths, [65_536; 16]);
    // 1 MiB + 4 KiB: a 17th descriptor of 4 KiB.
    let (completion, buffer) = read(&mut device, platform, 99, 2056);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 99);
    let lengths = sim.state.borrow().descriptor_lengths.clone();
    assert_eq!((lengths.len(), lengths[15], lengths[16]), (17, 65_536, 4096));
}

#[test]
fn a_host_that_misreads_length_zero_gets_32_kib_descriptors_from_its_quirks() {
    static NO_ZERO_LENGTH: HostQuirks =
        HostQuirks { adma_descriptor_limit: adma::DescriptorLimit::NoZeroLength32KiB, ..GENERIC_PCI };
    let board = SimBoard { zero_length_descriptor_is_64k: false, ..PCI };
    let platform = platform(8 << 20);
    let sim = sim(platform, board, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &NO_ZERO_LENGTH, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let (completion, buffer) = read(&mut device, platform, 2048, 2048);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 2048);
    assert_eq!(sim.state.borrow().descriptor_lengths, [32_768; 32]);
    // The same host given 64 KiB descriptors fails with an ADMA error: the model is strict.
    let sim = self::sim(platform, board, SimCard::qemu_like(4 << 30));
    let host = self::host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let (completion, _) = read(&mut device, platform, 2048, 2048);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::Transfer);
}

#[test]
fn a_buffer_adma2_cannot_use_goes_by_pio_and_is_counted() {
    let platform = platform(48 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let path = device.data_path().unwrap();
    assert_eq!((path.mode, path.commands, path.pio_fallbacks), ("ADMA2 (32-bit)", 0, 0));
    let (completion, _) = read(&mut device, platform, 10, 8);
    assert_eq!(completion.result, Ok(()));
    let aligned = platform.allocate_dma(8 * 512 + 2, 4096).unwrap();
    let odd = aligned.slice(2, 8 * 512).unwrap();
    assert_eq!(read_into(&mut device, 10, 8, odd).result, Ok(()));
    assert_pattern(platform, &odd, 10);
    let path = device.data_path().unwrap();
    assert_eq!((path.commands, path.pio_fallbacks), (2, 1));
    assert_eq!(sim.state.borrow().dma_transfers, 1);
    // A split request counts each of its commands.
    let blocks = MAX_BLOCKS_PER_COMMAND + 1;
    let big = platform.allocate_dma(blocks as usize * 512 + 2, 4096).unwrap().slice(2, blocks as usize * 512);
    assert_eq!(read_into(&mut device, 0, blocks, big.unwrap()).result, Ok(()));
    let path = device.data_path().unwrap();
    assert_eq!((path.commands, path.pio_fallbacks), (4, 3));
    // With PIO chosen nothing falls back.
    let sim = self::sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = self::host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    assert_eq!(read_into(&mut device, 10, 8, odd).result, Ok(()));
    let path = device.data_path().unwrap();
    assert_eq!((path.mode, path.commands, path.pio_fallbacks), ("PIO", 1, 0));
}

#[test]
fn adma2_descriptors_are_ordered_before_the_command_and_data_read_after_completion() {
    use super::regs::offsets;
    use hal::barrier::BarrierKind;
    use hal::testing::{LoggedRegisters, PlatformEvent};
    let platform = platform(16 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let window = sim.state.borrow().dma_window;
    let registers = LoggedRegisters { block: "sdhci", inner: sim };
    let mut host = SdhciHost::new(registers, platform, &GENERIC_PCI, None, Some(window)).unwrap();
    let card = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    let mut device =
        SdCard::new(host, card, "sd0", ModeRequest::Auto, Cmd23Request::Off, AutoCmd23Request::On).unwrap();
    let buffer = platform.allocate_dma(8 * 512, 4096).unwrap();
    let start = platform.log().len();
    device.submit(Request { tag: 1, operation: Operation::Read, lba: 64, block_count: 8, buffer }).unwrap();
    device.kick();
    let mut completions = [Completion::default(); 1];
    let mut polls = 0;
    while device.poll(&mut completions) == 0 {
        polls += 1;
        assert!(polls < MAX_POLLS, "the read never completed");
    }
    assert_eq!(completions[0].result, Ok(()));
    let mut trace: Vec<&str> = platform
        .log()
        .since(start)
        .iter()
        .filter_map(|event| match *event {
            PlatformEvent::Clean(_) => Some("clean"),
            PlatformEvent::Barrier(BarrierKind::Store) => Some("store barrier"),
            PlatformEvent::MmioWrite { offset_bytes, .. }
                if offset_bytes == offsets::TRANSFER_MODE_COMMAND =>
            {
                Some("command")
            }
            PlatformEvent::Barrier(BarrierKind::Load) => Some("load barrier"),
            PlatformEvent::Invalidate(range) if range.start == buffer.physical_address => {
                Some("invalidate data")
            }
            _ => None,
        })
        .collect();
    trace.dedup();
    assert_eq!(trace, ["clean", "store barrier", "command", "load barrier", "invalidate data"]);
}

/// In non-cacheable DMA memory (the kernel's pool) an ADMA2 read makes no clean or invalidate
/// call for its descriptors or its data, and keeps its barriers: the store barrier before the
/// command, the load barrier after the completion.
#[test]
fn adma2_reads_in_uncached_memory_leave_out_the_cache_maintenance_but_keep_the_barriers() {
    use hal::barrier::BarrierKind;
    use hal::testing::PlatformEvent;
    let platform = platform(16 << 20);
    platform.uncached.set(true);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let buffer = platform.allocate_dma(8 * 512, 4096).unwrap();
    let (cleans, invalidates) = (platform.clean_calls.get(), platform.invalidate_calls.get());
    let start = platform.log().len();
    assert_eq!(read_into(&mut device, 64, 8, buffer).result, Ok(()));
    assert_pattern(platform, &buffer, 64);
    assert_eq!((platform.clean_calls.get() - cleans, platform.invalidate_calls.get() - invalidates), (0, 0));
    let barriers: Vec<BarrierKind> = platform
        .log()
        .since(start)
        .iter()
        .filter_map(|event| match *event {
            PlatformEvent::Barrier(kind) => Some(kind),
            _ => None,
        })
        .collect();
    // (The log's own ordering check assumes cacheable memory, so it is not asked here.)
    assert_eq!(barriers, [BarrierKind::Store, BarrierKind::Load]);
}

/// ADMA2 reads of every shape the driver issues: one block, a multi-block command, CMD23
/// first, a request split into two commands.
fn adma2_reads_of_every_shape(platform: &'static TestPlatform, cmd23: Cmd23Request) -> u32 {
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, cmd23);
    for (lba, blocks) in [(7, 1), (4096, 2048), (100, MAX_BLOCKS_PER_COMMAND + 8)] {
        let (completion, buffer) = read(&mut device, platform, lba, blocks);
        assert_eq!(completion.result, Ok(()));
        assert_pattern(platform, &buffer, lba);
    }
    sim.state.borrow().dma_transfers
}

#[test]
fn adma2_descriptors_and_buffers_are_written_cleaned_and_fenced_before_the_command() {
    use hal::testing::PlatformEvent;
    for cmd23 in [Cmd23Request::Off, Cmd23Request::On] {
        let platform = platform(48 << 20);
        let start = platform.log().len();
        assert_eq!(adma2_reads_of_every_shape(platform, cmd23), 4);
        // The simulated host checked every descriptor fetch and every data write against the
        // log: written, cleaned, store barrier, then the command (docs/measurement.md §13).
        assert_eq!(platform.log().violations(), Vec::<std::string::String>::new(), "{cmd23:?}");
        let events = platform.log().since(start);
        let fetches = events.iter().filter(|e| matches!(e, PlatformEvent::DeviceRead(_))).count();
        let writes = events.iter().filter(|e| matches!(e, PlatformEvent::DeviceWrite(_))).count();
        // Descriptors of up to 64 KiB: 1, 16, then 512 and 1 for the split request.
        assert_eq!((fetches, writes), (1 + 16 + 512 + 1, 1 + 16 + 512 + 1), "{cmd23:?}");
    }
}

#[test]
fn adma2_data_is_read_by_the_cpu_after_a_load_barrier_and_an_invalidate() {
    use hal::barrier::BarrierKind;
    use hal::testing::{ByteRange, PlatformEvent};
    let platform = platform(16 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let buffer = platform.allocate_dma(256 * 512, 4096).unwrap();
    // The benchmark's checks poison their buffer before the read (CPU writes).
    platform.cpu_fill(&buffer, 0xa5);
    let start = platform.log().len();
    assert_eq!(read_into(&mut device, 300, 256, buffer).result, Ok(()));
    platform.cpu_read(&buffer);
    assert_eq!(platform.log().violations(), Vec::<std::string::String>::new());
    let data = ByteRange::of(&buffer);
    let order: Vec<&str> = platform
        .log()
        .since(start)
        .iter()
        .filter_map(|event| match *event {
            PlatformEvent::DeviceWrite(range) if range.overlap(&data).is_some() => Some("device writes data"),
            PlatformEvent::Barrier(BarrierKind::Load | BarrierKind::Full) => Some("load barrier"),
            PlatformEvent::Invalidate(range) if range == data => Some("invalidate data"),
            PlatformEvent::CpuRead(range) if range == data => Some("cpu reads data"),
            _ => None,
        })
        .collect();
    let last_write = order.iter().rposition(|step| *step == "device writes data").expect("DMA happened");
    assert_eq!(order[last_write + 1..], ["load barrier", "invalidate data", "cpu reads data"]);
    assert_pattern(platform, &buffer, 300);
}

#[test]
fn pio_data_is_cleaned_after_the_cpu_copied_it() {
    use hal::testing::{ByteRange, PlatformEvent};
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    let buffer = platform.allocate_dma(16 * 512, 4096).unwrap();
    let start = platform.log().len();
    assert_eq!(read_into(&mut device, 40, 16, buffer).result, Ok(()));
    assert_pattern(platform, &buffer, 40);
    // The CPU wrote the blocks from the data port; a clean pushes them to memory before the
    // completion, so that the caller's invalidate-after-read cannot discard them.
    let cleaned = platform
        .log()
        .since(start)
        .iter()
        .any(|event| matches!(event, PlatformEvent::Clean(range) if *range == ByteRange::of(&buffer)));
    assert!(cleaned, "the PIO data was never cleaned");
}

#[test]
fn a_data_timeout_is_recovered_by_a_cmd_then_a_dat_line_reset_and_the_next_read_works() {
    // The card stops sending after 2 blocks, once: the host holds Command Inhibit (DAT) until
    // the DAT line is reset. The driver's data timeout (sd.timeout-ms=20) ends the attempt, it
    // resets the CMD line, then the DAT line (SDHCI §3.10.1), and the retry reads everything.
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    device.set_data_timeout_ms(20);
    assert_eq!(device.data_timeout_ms(), 20);
    sim.state.borrow_mut().line_reset_log.clear();
    sim.inject(Injection {
        command_index: 18,
        error_bits: 0,
        at: InjectAt::Stall { after_blocks: 2 },
        times: 1,
    });
    let started = blockdev::Clock::now_ticks(platform);
    let (completion, buffer) = read(&mut device, platform, 300, 16);
    let elapsed_ms = (blockdev::Clock::now_ticks(platform) - started) / 1_000_000;
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 300);
    let state = sim.state.borrow();
    assert_eq!(
        &state.line_reset_log[..2],
        &[0b010, 0b100],
        "CMD line first, then DAT: {:?}",
        state.line_reset_log
    );
    assert_eq!(state.violations, Vec::<&str>::new());
    assert_eq!(state.log.iter().filter(|(i, _, _)| *i == 18).count(), 2, "one retry");
    // The attempt waited for the 20 ms data timeout, not the 500 ms default.
    assert!((20..200).contains(&elapsed_ms), "{elapsed_ms} ms");
    std::eprintln!(
        "stalled read with sd.timeout-ms=20: recovered and completed in {elapsed_ms} ms (simulated clock)"
    );
}

#[test]
fn the_model_refuses_both_line_resets_in_one_write_and_keeps_a_stalled_transfer_until_the_dat_reset() {
    use super::regs::offsets;
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Off);
    device.set_data_timeout_ms(5);
    sim.inject(Injection {
        command_index: 18,
        error_bits: 0,
        at: InjectAt::Stall { after_blocks: 1 },
        times: 1,
    });
    let request = Request {
        tag: 1,
        operation: Operation::Read,
        lba: 0,
        block_count: 4,
        buffer: platform.allocate_dma(4096, 4096).unwrap(),
    };
    device.submit(request).unwrap();
    device.kick();
    let mut completions = [Completion::default(); 1];
    // Let the card stall (one block is read), then look at the host without the driver.
    for _ in 0..50 {
        device.poll(&mut completions);
    }
    let control = sim.read32(offsets::CLOCK_TIMEOUT_RESET);
    let present = sim.read32(offsets::PRESENT_STATE);
    assert_ne!(present & 0b10, 0, "Command Inhibit (DAT) held by the stalled transfer");
    sim.write32(offsets::CLOCK_TIMEOUT_RESET, control | 0b010 << 24);
    assert_ne!(sim.read32(offsets::PRESENT_STATE) & 0b10, 0, "a CMD line reset alone does not release it");
    sim.write32(offsets::CLOCK_TIMEOUT_RESET, control | 0b110 << 24);
    assert_eq!(sim.read32(offsets::PRESENT_STATE) & 0b10, 0, "the DAT line reset does");
    assert_eq!(
        sim.state.borrow().violations,
        ["CMD and DAT line resets in one write (SDHCI §3.10.1: CMD line first, then DAT)"]
    );
}

/// Submits a read of `blocks` at LBA 0, kicks it, polls `polls_before` times, pulls the card out
/// and polls until the request ends (bounded); returns the completion, the simulated time from
/// the removal to the verdict (ns) and the commands sent after the removal.
fn read_with_card_removed(
    device: &mut SdCard<'static, &'static SimHost<'static>, TestPlatform>,
    sim: &SimHost<'_>,
    platform: &TestPlatform,
    blocks: u32,
    polls_before: u32,
) -> (Completion, u64, usize) {
    let buffer = platform.allocate_dma(blocks as usize * 512, 4096).unwrap();
    device
        .submit(Request { tag: 5, operation: Operation::Read, lba: 0, block_count: blocks, buffer })
        .unwrap();
    device.kick();
    let mut completions = [Completion::default(); 1];
    for _ in 0..polls_before {
        assert_eq!(device.poll(&mut completions), 0, "the read ended before the card was pulled out");
    }
    sim.remove_card();
    let removed_at = blockdev::Clock::now_ticks(platform);
    let commands_before = commands_seen(sim);
    for _ in 0..MAX_POLLS {
        if device.poll(&mut completions) == 1 {
            let verdict_ns = blockdev::Clock::now_ticks(platform) - removed_at;
            return (completions[0], verdict_ns, commands_seen(sim) - commands_before);
        }
    }
    panic!("no verdict after the card was removed");
}

#[test]
fn the_model_shows_a_removed_card_as_the_sdhci_spec_does() {
    use super::regs::offsets;
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let _device = card_device(host, ModeRequest::Auto, Cmd23Request::Off);
    let present = sim.read32(offsets::PRESENT_STATE);
    assert_eq!(present & 0b111 << 16, 0b111 << 16, "inserted, stable, pin level high: {present:#x}");
    sim.remove_card();
    let present = sim.read32(offsets::PRESENT_STATE);
    assert_eq!(present & 0b111 << 16, 0b010 << 16, "not inserted, stable, pin level low: {present:#x}");
    assert_ne!(sim.read32(offsets::INTERRUPT_STATUS) & super::regs::interrupt::CARD_REMOVAL, 0);
}

#[test]
fn a_card_removed_mid_transfer_fails_the_read_as_device_gone_at_once_and_refuses_the_rest() {
    for mode in [ModeRequest::Adma2, ModeRequest::Pio] {
        let platform = platform(8 << 20);
        let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
        let host = host(sim, platform, &GENERIC_PCI, None);
        let mut device = card_device(host, mode, Cmd23Request::Off);
        let (completion, verdict_ns, commands_after) =
            read_with_card_removed(&mut device, sim, platform, 256, 1);
        assert_eq!(completion.tag, 5);
        assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::DeviceGone, "{mode:?}");
        assert!(
            matches!(device.last_error(), Some(SdError::CardRemoved { .. })),
            "{:?}",
            device.last_error()
        );
        let said = device.last_error().unwrap().to_string();
        assert!(said.starts_with("card removed (present state 0x"), "{said}");
        // Found from the Card Removal status at the next look: no data timeout waited, no
        // retry and no CMD13/CMD12 sent to a card that is not there.
        assert_eq!(commands_after, 0, "{mode:?}");
        assert!(verdict_ns < 1_000_000, "{mode:?}: {verdict_ns} ns (simulated clock)");
        // The host is left idle (the stalled transfer's DAT line reset, CMD line first).
        assert_eq!(sim.read32(super::regs::offsets::PRESENT_STATE) & 0b11, 0);
        assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
        // Later requests are refused without touching the host.
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        let request = Request { tag: 6, operation: Operation::Read, lba: 8, block_count: 8, buffer };
        assert_eq!(device.submit(request).unwrap_err().1, SubmitError::DeviceUnusable);
        std::eprintln!(
            "{mode:?}: card removed mid-transfer, verdict after {verdict_ns} ns (simulated clock)"
        );
    }
}

#[test]
fn a_card_removed_between_reads_is_found_by_the_command_timeout_and_card_detect() {
    use super::regs::offsets;
    let platform = platform(8 << 20);
    let sim = sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Adma2, Cmd23Request::Off);
    let (completion, _) = read(&mut device, platform, 0, 8);
    assert_eq!(completion.result, Ok(()));
    sim.remove_card();
    // The Card Removal status is gone (cleared as `issue` clears every status before a
    // command): only Present State and the unanswered command tell.
    sim.write32(offsets::INTERRUPT_STATUS, 0xffff_ffff);
    let reads_before = sim.command_indices().iter().filter(|&&index| index == 18).count();
    let (completion, _) = read(&mut device, platform, 0, 16);
    assert_eq!(completion.result.unwrap_err().kind, IoErrorKind::DeviceGone);
    let reads_after = sim.command_indices().iter().filter(|&&index| index == 18).count();
    assert_eq!(reads_after - reads_before, 1, "one attempt, no retries against an absent card");
    assert_eq!(*sim.command_indices().last().unwrap(), 18, "nothing sent after the failed read");
    let buffer = platform.allocate_dma(4096, 4096).unwrap();
    let request = Request { tag: 7, operation: Operation::Read, lba: 8, block_count: 8, buffer };
    assert_eq!(device.submit(request).unwrap_err().1, SubmitError::DeviceUnusable);
}

#[test]
fn bus_widths_set_host_control_1_and_8_bits_need_the_capability() {
    use crate::sd::bus::BusWidth;
    let width_bits = |sim: &SimHost| (sim.read32(super::regs::offsets::HOST_CONTROL_POWER) >> 1) & 0b1_0001;
    let platform = platform(1 << 20);
    let four_bit_only = sim(platform, PCI, SimCard::qemu_like(1 << 30));
    let mut narrow = host(four_bit_only, platform, &GENERIC_PCI, None);
    narrow.set_bus_width(BusWidth::Four).unwrap();
    assert_eq!((width_bits(four_bit_only), narrow.bus_mode().width_bits), (0b0_0001, 4));
    // PCI's capabilities list no 8-bit bus (bit 18): refused, nothing written.
    let refused = narrow.set_bus_width(BusWidth::Eight).unwrap_err();
    assert!(matches!(refused, SdError::UnusableHost { .. }), "{refused:?}");
    assert_eq!((width_bits(four_bit_only), narrow.bus_mode().width_bits), (0b0_0001, 4));
    narrow.set_bus_width(BusWidth::One).unwrap();
    assert_eq!((width_bits(four_bit_only), narrow.bus_mode().width_bits), (0, 1));
    // A host with an 8-bit bus (an eMMC slot): Extended Data Transfer Width replaces the 4-bit bit.
    let wide_board = SimBoard { capabilities: (PCI.capabilities.0 | 1 << 18, PCI.capabilities.1), ..PCI };
    let eight_bit = sim(platform, wide_board, SimCard::qemu_like(1 << 30));
    let mut wide = host(eight_bit, platform, &GENERIC_PCI, None);
    wide.set_bus_width(BusWidth::Four).unwrap();
    wide.set_bus_width(BusWidth::Eight).unwrap();
    assert_eq!((width_bits(eight_bit), wide.bus_mode().width_bits), (0b1_0000, 8));
}

/// Brings up QEMU's SDHC card on `board` with the base clock [`super::base_clock::choose`] picks
/// from `firmware` for `quirks`, reads across it, and returns what the simulator saw.
fn bring_up_on_the_firmware_base_clock(
    board: SimBoard,
    quirks: &'static HostQuirks,
    firmware: &crate::firmware_model::FirmwareModel,
) -> (&'static SimHost<'static>, super::base_clock::BaseClock, Timing) {
    let platform = platform(8 << 20);
    let sim = sim(platform, board, SimCard::qemu_like(8 << 30));
    let capabilities = super::host::HostCapabilities::read(&sim, quirks.capabilities);
    let base = super::base_clock::choose(Some(firmware), quirks.base_clock, &capabilities).unwrap();
    let host = host(sim, platform, quirks, Some(base.hz));
    let mut device = card_device(host, ModeRequest::Pio, Cmd23Request::Auto);
    let timing = device.card().timing;
    let (completion, buffer) = read(&mut device, platform, 1000, 16);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 1000);
    (sim, base, timing)
}

#[test]
fn an_arasan_whose_firmware_answers_zero_is_clocked_from_200_mhz_not_100() {
    use crate::mailbox::{clocks, tags};
    // raspberrypi/firmware #1619: GET_CLOCK_RATE answers 0 for EMMC; no measurement.
    let mut firmware =
        crate::firmware_model::FirmwareModel::pi4().not_answering(&[tags::GET_CLOCK_RATE_MEASURED]);
    firmware.zero_rate_clocks.push(clocks::EMMC);
    let (sim, base, timing) =
        bring_up_on_the_firmware_base_clock(SimBoard::PI3_ARASAN, &ARASAN_EMMC, &firmware);
    assert_eq!(base.hz, 200_000_000);
    assert_eq!(timing, Timing::HighSpeed);
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
}

#[test]
fn an_emmc2_clock_the_firmware_measures_above_its_request_is_divided_as_measured() {
    use crate::mailbox::clocks;
    // GET_CLOCK_RATE answers the 100 MHz requested; the clock runs (and measures) at 200 MHz.
    let mut firmware = crate::firmware_model::FirmwareModel::pi4();
    firmware.set_requested(clocks::EMMC2, 100_000_000);
    firmware.set_actual_clock_hz(clocks::EMMC2, 200_000_000);
    firmware.measurement_error_hz = 4_321;
    let board = SimBoard { base_clock_hz: 200_000_000, ..SimBoard::PI4_EMMC2_B0 };
    let (sim, base, _) = bring_up_on_the_firmware_base_clock(board, &BCM2711_EMMC2, &firmware);
    assert_eq!(base.hz, 200_000_000);
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
}

#[test]
fn a_bcm2712_is_clocked_from_its_capabilities_when_the_firmware_disagrees() {
    use crate::mailbox::clocks;
    let firmware = crate::firmware_model::FirmwareModel::pi4();
    firmware.set_requested(clocks::EMMC, 100_000_000);
    let (sim, base, _) = bring_up_on_the_firmware_base_clock(SimBoard::PI5_SDHCI, &BCM2712_SDHCI, &firmware);
    assert_eq!((base.hz, base.firmware_disagreed_hz), (200_000_000, Some(100_000_000)));
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
}

#[test]
fn a_base_clock_half_the_real_one_overclocks_the_card_and_the_model_says_so() {
    // What the old 100 MHz Arasan fallback did on a 200 MHz EMMC clock.
    let platform = platform(8 << 20);
    let sim = sim(platform, SimBoard::PI3_ARASAN, SimCard::qemu_like(8 << 30));
    let mut device = card_device(
        host(sim, platform, &ARASAN_EMMC, Some(100_000_000)),
        ModeRequest::Pio,
        Cmd23Request::Auto,
    );
    let (completion, _) = read(&mut device, platform, 1000, 16);
    assert!(completion.result.is_err());
    assert!(sim
        .state
        .borrow()
        .violations
        .contains(&"data clocked faster than the card's timing allows (SD §3.9.1)"));
}

#[test]
fn with_auto_cmd23_the_host_sends_the_count_from_argument_2_and_the_read_follows_at_once() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02; // CMD_SUPPORT: CMD23
    let sim = sim(platform, PCI, card);
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    assert!(device.uses_auto_cmd23());
    let buffer = platform.allocate_dma(64 * 512, 4096).unwrap();
    device.submit(Request { tag: 3, operation: Operation::Read, lba: 640, block_count: 64, buffer }).unwrap();
    device.kick();
    // kick() wrote CMD18 with Auto CMD Enable = 10b; the host sent CMD23 (64) first.
    let log: Vec<(u8, u32, u16)> = sim.state.borrow().log.clone();
    let last_two = &log[log.len() - 2..];
    assert_eq!((last_two[0].0, last_two[0].1), (23, 64));
    assert_eq!((last_two[1].0, last_two[1].1, last_two[1].2 & 0b1100), (18, 640, 0b1000));
    let mut completions = [Completion::default()];
    for _ in 0..100 {
        if device.poll(&mut completions) == 1 {
            break;
        }
    }
    assert_eq!(completions[0], Completion { tag: 3, result: Ok(()) });
    assert_pattern(platform, &buffer, 640);
    assert_eq!(sim.state.borrow().auto_cmd23s, 1);
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
    // A single block goes without it; PIO (no ADMA2) announces by CMD23 of its own.
    let (completion, _) = read(&mut device, platform, 7, 1);
    assert_eq!(completion.result, Ok(()));
    assert_eq!(sim.state.borrow().auto_cmd23s, 1);
}

#[test]
fn an_auto_cmd23_the_card_refuses_is_an_auto_command_error_retried_then_failed() {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.accepts_cmd23 = false;
    let sim = sim(platform, PCI, card);
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::On);
    let (completion, _) = read(&mut device, platform, 100, 8);
    assert!(completion.result.is_err());
    let SdError::Command(failure) = device.last_error().unwrap() else { panic!() };
    assert_ne!(failure.interrupt_status & interrupt::AUTO_COMMAND, 0);
    assert_eq!(failure.attempts, crate::sd::block::MAX_ATTEMPTS);
}

#[test]
fn a_host_that_drops_auto_cmd23_is_found_out_by_the_probe_and_cmd23_is_sent_instead() {
    // QEMU 10.0's sdhci: Auto CMD Enable = 10b is dropped, the read runs open-ended and the card
    // refuses the next read command.
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02;
    let sim = sim(platform, PCI, card);
    sim.state.borrow_mut().ignores_auto_cmd23 = true;
    let host = host(sim, platform, &GENERIC_PCI, None);
    let mut device = card_device(host, ModeRequest::Auto, Cmd23Request::Auto);
    assert!(device.uses_auto_cmd23());
    let probe = platform.allocate_dma(8 * 512, 4096).unwrap();
    assert!(device.confirm_auto_cmd23(probe, 10_000_000).is_some());
    assert!(!device.uses_auto_cmd23());
    let (completion, buffer) = read(&mut device, platform, 640, 64);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 640);
    // And a host that has it keeps it.
    let sim = self::sim(platform, PCI, SimCard::qemu_like(4 << 30));
    let mut device =
        card_device(self::host(sim, platform, &GENERIC_PCI, None), ModeRequest::Auto, Cmd23Request::On);
    let probe = platform.allocate_dma(8 * 512, 4096).unwrap();
    assert_eq!(device.confirm_auto_cmd23(probe, 10_000_000), None);
    assert!(device.uses_auto_cmd23());
}

/// Register accesses of one read, counted at the register interface: reads of the interrupt
/// status (one per poll), reads of any other register, writes.
struct CountingRegisters<R> {
    inner: R,
    status_reads: Cell<u64>,
    other_reads: Cell<u64>,
    writes: Cell<u64>,
}

impl<R: RegisterIo> RegisterIo for CountingRegisters<R> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let counter =
            if offset_bytes == offsets::INTERRUPT_STATUS { &self.status_reads } else { &self.other_reads };
        counter.set(counter.get() + 1);
        self.inner.read32(offset_bytes)
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        self.writes.set(self.writes.get() + 1);
        self.inner.write32(offset_bytes, value);
    }
}

/// What one read cost at the register interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReadCost {
    status_reads: u64,
    other_reads: u64,
    writes: u64,
    polls: u32,
}

impl ReadCost {
    fn reads_and_writes(&self) -> u64 {
        self.status_reads + self.other_reads + self.writes
    }
}

/// The cost of the second of two 8-block ADMA2 reads at an SDHCI 3.00 host (the first one
/// selects the DMA), the count announced by Auto CMD23 or by the driver's CMD23.
fn one_announced_read(auto_cmd23: AutoCmd23Request) -> ReadCost {
    let platform = platform(8 << 20);
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0x02; // CMD_SUPPORT: CMD23
    let sim = sim(platform, PCI, card);
    let window = sim.state.borrow().dma_window;
    let counting = CountingRegisters {
        inner: sim,
        status_reads: Default::default(),
        other_reads: Default::default(),
        writes: Default::default(),
    };
    let counting: &'static CountingRegisters<_> = Box::leak(Box::new(counting));
    let mut host = SdhciHost::new(counting, platform, &GENERIC_PCI, None, Some(window)).unwrap();
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    let mut device =
        SdCard::new(host, info, "sd0", ModeRequest::Adma2, Cmd23Request::On, auto_cmd23).unwrap();
    let buffer = platform.allocate_dma(8 * 512, 4096).unwrap();
    let mut cost = ReadCost { status_reads: 0, other_reads: 0, writes: 0, polls: 0 };
    for lba in [32, 64] {
        let before = (counting.status_reads.get(), counting.other_reads.get(), counting.writes.get());
        device.submit(Request { tag: 1, operation: Operation::Read, lba, block_count: 8, buffer }).unwrap();
        device.kick();
        let mut completions = [Completion::default(); 1];
        let mut polls = 1;
        while device.poll(&mut completions) == 0 {
            polls += 1;
            assert!(polls < MAX_POLLS, "the read never completed");
        }
        assert_eq!(completions[0].result, Ok(()));
        assert_pattern(platform, &buffer, lba);
        cost = ReadCost {
            status_reads: counting.status_reads.get() - before.0,
            other_reads: counting.other_reads.get() - before.1,
            writes: counting.writes.get() - before.2,
            polls,
        };
    }
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
    cost
}

#[test]
fn auto_cmd23_costs_fewer_register_accesses_and_polls_per_read_than_a_cmd23_of_the_drivers_own() {
    let with_auto = one_announced_read(AutoCmd23Request::On);
    let with_own = one_announced_read(AutoCmd23Request::Off);
    std::println!("8-block ADMA2 read: Auto CMD23 {with_auto:?}, CMD23 {with_own:?}");
    assert!(with_auto.reads_and_writes() < with_own.reads_and_writes(), "{with_auto:?} vs {with_own:?}");
    assert!(with_auto.polls <= with_own.polls);
}

/// Every register access but the polls of the interrupt status, for an ADMA2 read with CMD23:
/// per command a look at Present State (SDHCI §3.7.1.1), one write clearing the interrupt
/// status, the argument and the command (plus, for CMD18, the block size and count and the
/// descriptor table's address); CMD23's response, whose card status is checked; nothing else.
/// The DMA Select is not written again (it holds until a reset for all), Command Complete and
/// Transfer Complete are not cleared one by one, and CMD18's response is not read.
#[test]
fn an_adma2_read_clears_the_status_once_per_command_and_reads_only_the_response_it_checks() {
    let own = one_announced_read(AutoCmd23Request::Off);
    assert_eq!((own.other_reads, own.writes), (2 + 1, 3 + 5), "{own:?}");
    // Auto CMD23: one command, Argument 2 written as well.
    let auto = one_announced_read(AutoCmd23Request::On);
    assert_eq!((auto.other_reads, auto.writes), (1, 6), "{auto:?}");
}
