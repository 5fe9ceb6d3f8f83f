//! Write tests against the simulated controller and card (`sim.rs`): CMD24/CMD25 by PIO and
//! ADMA2, with CMD23 or auto-CMD12, the data on the card afterwards, Transfer Complete only after
//! the card's busy, retries after a data error, no flush sent to a card without an enabled
//! cache, and what the simulated host refuses (SD Host Controller Simplified Specification
//! v4.20 §2.2.9, §3.7.2; SD Physical Layer Simplified Specification §4.3.4).

#![forbid(unsafe_code)]

extern crate std;

use super::super::device::SdCard;
use super::super::host::SdhciHost;
use super::super::quirks::GENERIC_PCI;
use super::super::regs::{interrupt, offsets};
use super::super::sim::{InjectAt, Injection, SimBoard, SimHost, TestPlatform};
use crate::sd::block::SdBlockDevice;
use crate::sd::card_registers::{CACHE_NEVER_ENABLED, NO_CACHE_EXTENSION};
use crate::sd::error::SdError;
use crate::sd::identify::bring_up;
use crate::sd::options::{Cmd23Request, ModeRequest};
use crate::sd::sim_card::SimCard;
use crate::sd::timing::BringUpOptions;
use blockdev::{
    BlockDevice, Completion, DmaBuffer, FlushSupport, IoErrorKind, Operation, Request, SubmitError,
};
use hal::mmio::RegisterIo;
use hal::platform::Platform;
use std::boxed::Box;
use std::vec::Vec;

type Device = SdCard<'static, &'static SimHost<'static>, TestPlatform>;

/// Transfer Mode bit 4: Data Transfer Direction Select, 1 = read (SDHCI §2.2.5).
const TRANSFER_MODE_READ: u16 = 1 << 4;
const MAX_POLLS: u32 = 10_000_000;

pub(super) fn setup(
    card: SimCard,
    mode: ModeRequest,
    cmd23: Cmd23Request,
) -> (&'static TestPlatform, &'static SimHost<'static>, Device) {
    let platform: &'static TestPlatform = Box::leak(Box::new(TestPlatform::new(16 << 20)));
    let sim: &'static SimHost<'static> =
        Box::leak(Box::new(SimHost::new(platform, SimBoard::QEMU_PCI, card)));
    let window = sim.state.borrow().dma_window;
    let mut host = SdhciHost::new(sim, platform, &GENERIC_PCI, None, Some(window)).unwrap();
    let info = bring_up(&mut host, None, BringUpOptions::default()).unwrap();
    (platform, sim, SdCard::new(host, info, "sd0", mode, cmd23).unwrap())
}

/// Bytes no pattern sector holds: block `n`'s bytes depend on `n` and `seed`.
fn payload(blocks: u32, seed: u8) -> Vec<u8> {
    (0..blocks as usize * 512)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i / 512) as u8)
        .collect()
}

fn run(
    device: &mut Device,
    operation: Operation,
    lba: u64,
    block_count: u32,
    buffer: DmaBuffer,
) -> Completion {
    device.submit(Request { tag: 5, operation, lba, block_count, buffer }).unwrap();
    device.kick();
    let mut completions = [Completion::default()];
    for _ in 0..MAX_POLLS {
        if device.poll(&mut completions) == 1 {
            return completions[0];
        }
    }
    panic!("{operation:?} of {block_count} blocks at {lba} did not complete");
}

/// Writes `data` at `lba` from a buffer the CPU filled (logged, as the benchmark fills it).
fn write(platform: &TestPlatform, device: &mut Device, lba: u64, data: &[u8]) -> Completion {
    let buffer = platform.allocate_dma(data.len(), 4096).unwrap();
    platform.cpu_write(&buffer, data);
    platform.clean_for_device(&buffer);
    run(device, Operation::Write, lba, (data.len() / 512) as u32, buffer)
}

fn read_back(platform: &TestPlatform, device: &mut Device, lba: u64, blocks: u32) -> Vec<u8> {
    let buffer = platform.allocate_dma(blocks as usize * 512, 4096).unwrap();
    assert_eq!(run(device, Operation::Read, lba, blocks, buffer).result, Ok(()));
    platform.invalidate_for_cpu(&buffer);
    platform.cpu_read(&buffer)
}

fn card_sectors(sim: &SimHost<'_>, lba: u64, blocks: u32) -> Vec<u8> {
    let state = sim.state.borrow();
    (lba..lba + u64::from(blocks))
        .flat_map(|sector| state.written.get(&sector).cloned().unwrap_or_default())
        .collect()
}

#[test]
fn writes_by_pio_and_adma2_with_cmd23_or_auto_cmd12_land_on_the_card_and_read_back() {
    for mode in [ModeRequest::Pio, ModeRequest::Adma2] {
        for cmd23 in [Cmd23Request::On, Cmd23Request::Off] {
            let (platform, sim, mut device) = setup(SimCard::qemu_like(4 << 30), mode, cmd23);
            for (lba, blocks, seed) in [(2048u64, 1u32, 1u8), (4096, 8, 2), (8192, 130, 3)] {
                let data = payload(blocks, seed);
                assert_eq!(write(platform, &mut device, lba, &data), Completion { tag: 5, result: Ok(()) });
                assert_eq!(card_sectors(sim, lba, blocks), data, "{mode:?} {cmd23:?} {blocks} blocks");
                assert_eq!(read_back(platform, &mut device, lba, blocks), data, "{mode:?} {cmd23:?}");
            }
            // The block before and after a write keep the card's pattern.
            let mut around = read_back(platform, &mut device, 4095, 1);
            around.extend(read_back(platform, &mut device, 4104, 1));
            let (mut before, mut after) = ([0u8; 512], [0u8; 512]);
            blockdev::pattern::fill_sector(4095, &mut before);
            blockdev::pattern::fill_sector(4104, &mut after);
            assert_eq!(around, [before, after].concat());
            assert_eq!(sim.state.borrow().violations, Vec::<&str>::new(), "{mode:?} {cmd23:?}");
            assert_eq!(platform.log().violations(), Vec::<std::string::String>::new(), "{mode:?} {cmd23:?}");
        }
    }
}

#[test]
fn writes_are_cmd24_and_cmd25_with_the_direction_bit_clear() {
    let (platform, sim, mut device) =
        setup(SimCard::qemu_like(4 << 30), ModeRequest::Adma2, Cmd23Request::On);
    write(platform, &mut device, 100, &payload(1, 7));
    write(platform, &mut device, 200, &payload(4, 8));
    let log = sim.state.borrow().log.clone();
    let data_commands: Vec<(u8, u32, bool)> = log
        .iter()
        .filter(|(index, _, _)| matches!(index, 23..=25))
        .map(|&(index, argument, mode)| (index, argument, mode & TRANSFER_MODE_READ != 0))
        .collect();
    // SDHC: block addresses; CMD23 announces the four blocks of the CMD25.
    assert_eq!(data_commands, [(24, 100, false), (23, 4, false), (25, 200, false)]);
}

#[test]
fn a_write_completes_only_after_the_cards_busy_and_the_next_command_waits_for_it() {
    let (platform, sim, mut device) = setup(SimCard::qemu_like(4 << 30), ModeRequest::Pio, Cmd23Request::On);
    let data = payload(3, 9);
    let buffer = platform.allocate_dma(data.len(), 4096).unwrap();
    platform.cpu_write(&buffer, &data);
    device.submit(Request { tag: 1, operation: Operation::Write, lba: 64, block_count: 3, buffer }).unwrap();
    device.kick();
    let mut completions = [Completion::default()];
    let mut polls_while_busy = 0;
    let mut polls = 0;
    while device.poll(&mut completions) == 0 {
        polls += 1;
        assert!(polls < 10_000, "the write never completed");
        // While the card programs, the request is not complete.
        if sim.state.borrow().written.contains_key(&66) {
            polls_while_busy += 1;
        }
    }
    assert!(polls_while_busy > 0, "the request completed as soon as the last block was written");
    assert_eq!(completions[0].result, Ok(()));
    // Immediately after: a read and a write, each starting at once.
    assert_eq!(read_back(platform, &mut device, 64, 3), data);
    write(platform, &mut device, 70, &payload(2, 10));
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
}

#[test]
fn a_data_crc_error_during_a_write_is_retried_and_a_persistent_one_fails() {
    let (platform, sim, mut device) = setup(SimCard::qemu_like(4 << 30), ModeRequest::Pio, Cmd23Request::On);
    let transient = Injection {
        command_index: 25,
        error_bits: interrupt::DATA_CRC,
        at: InjectAt::Data { after_blocks: 1 },
        times: 1,
    };
    sim.inject(transient);
    let data = payload(4, 11);
    assert_eq!(write(platform, &mut device, 300, &data).result, Ok(()));
    assert_eq!(card_sectors(sim, 300, 4), data);
    // The first attempt stopped after a block: CMD13 found the card receiving, CMD12 ended it.
    let sent: Vec<u8> = sim.state.borrow().log.iter().map(|entry| entry.0).rev().take(6).collect();
    assert_eq!(sent, [25, 23, 12, 13, 25, 23]);
    sim.inject(Injection { times: 5, ..transient });
    let failed = write(platform, &mut device, 400, &payload(4, 12));
    assert_eq!(failed.result.map_err(|error| error.kind), Err(IoErrorKind::Crc));
    match device.last_error() {
        Some(SdError::Command(failure)) => assert_eq!((failure.command.index, failure.attempts), (25, 3)),
        other => panic!("unexpected {other:?}"),
    }
    // The card is usable afterwards.
    assert_eq!(read_back(platform, &mut device, 300, 4), data);
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
}

#[test]
fn no_flush_goes_to_a_card_whose_cache_is_not_enabled_and_the_reason_says_why() {
    // QEMU's SCR lists neither CMD48/49 nor anything else in CMD_SUPPORT.
    let (platform, _, mut device) = setup(SimCard::qemu_like(4 << 30), ModeRequest::Auto, Cmd23Request::Auto);
    assert_eq!(device.flush_support(), FlushSupport::NoCache(NO_CACHE_EXTENSION));
    let buffer = platform.allocate_dma(512, 4096).unwrap();
    let flush = Request { tag: 2, operation: Operation::Flush, lba: 0, block_count: 0, buffer };
    assert_eq!(device.submit(flush).map_err(|(_, error)| error), Err(SubmitError::Unsupported));
    // A card with extension registers (CMD_SUPPORT bit 34): its cache is off from power-up.
    let mut card = SimCard::qemu_like(4 << 30);
    card.scr[3] = 0b0110;
    let (_, _, device) = setup(card, ModeRequest::Auto, Cmd23Request::Auto);
    assert_eq!(device.flush_support(), FlushSupport::NoCache(CACHE_NEVER_ENABLED));
}

#[test]
fn the_simulated_host_refuses_data_without_room_a_command_during_busy_and_a_read_direction_write() {
    let (_, sim, _device) = setup(SimCard::qemu_like(4 << 30), ModeRequest::Pio, Cmd23Request::Off);
    let registers: &SimHost<'_> = sim;
    // A data port write with no write running.
    registers.write32(offsets::BUFFER_DATA_PORT, 0x1234_5678);
    // CMD24 (R1, data present) with the direction bit set to read.
    let command_word = |index: u32, mode: u32| (index << 24) | (0b11_1010 << 16) | mode;
    registers.write32(offsets::BLOCK_SIZE_COUNT, (1 << 16) | 512);
    registers.write32(offsets::ARGUMENT, 10);
    registers.write32(offsets::TRANSFER_MODE_COMMAND, command_word(24, u32::from(TRANSFER_MODE_READ) | 0b10));
    for _ in 0..8 {
        registers.read32(offsets::INTERRUPT_STATUS);
    }
    registers.write32(offsets::INTERRUPT_STATUS, 0xffff_ffff);
    // Reset the CMD line, then the DAT line (§3.10.1: one at a time, each waited for), then a
    // proper CMD24 by PIO: one block, then at once CMD17.
    for line_reset in [0b010 << 24, 0b100 << 24] {
        registers.write32(
            offsets::CLOCK_TIMEOUT_RESET,
            registers.read32(offsets::CLOCK_TIMEOUT_RESET) | line_reset,
        );
        let cleared = (0..1000).any(|_| registers.read32(offsets::CLOCK_TIMEOUT_RESET) & line_reset == 0);
        assert!(cleared, "the line reset {line_reset:#x} never cleared");
    }
    registers.write32(offsets::BLOCK_SIZE_COUNT, (1 << 16) | 512);
    registers.write32(offsets::ARGUMENT, 20);
    registers.write32(offsets::TRANSFER_MODE_COMMAND, command_word(24, 0b10));
    for _ in 0..8 {
        registers.read32(offsets::INTERRUPT_STATUS);
    }
    assert_ne!(registers.read32(offsets::INTERRUPT_STATUS) & interrupt::BUFFER_WRITE_READY, 0);
    for _ in 0..128 {
        registers.write32(offsets::BUFFER_DATA_PORT, 0xdada_dada);
    }
    // The card programs: Command Inhibit (DAT) and DAT Line Active set, DAT0 low.
    let present = registers.read32(offsets::PRESENT_STATE);
    assert_eq!((present & 0b110, present & (1 << 20)), (0b110, 0));
    registers.write32(offsets::TRANSFER_MODE_COMMAND, command_word(17, u32::from(TRANSFER_MODE_READ) | 0b10));
    assert_eq!(
        sim.state.borrow().violations,
        [
            "data port written without Buffer Write Ready (no room for a block)",
            "Transfer Mode direction does not match the command (read vs write)",
            "command issued while the card was busy programming a write",
        ]
    );
    // The block written properly is on the card.
    assert_eq!(sim.state.borrow().written.get(&20).map(|sector| sector[0]), Some(0xda));
}
