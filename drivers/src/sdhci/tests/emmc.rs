//! eMMC on the SDHCI hosts against the simulated host and a strict eMMC 5.1 device
//! (`sd::sim_card::SimEmmc`: CMD1 busy loop, eMMC CID and CSD, a realistic EXT_CSD read with
//! CMD8, SWITCH with busy and SWITCH_ERROR, the CMD19/CMD14 bus test over the lines the board
//! wires, data that fails its CRC at a width, DDR setting or clock the device was not switched
//! to), read back exactly through the same block path as SD cards (JEDEC JESD84-B51; Linux
//! `drivers/mmc/core/mmc.c`).

#![forbid(unsafe_code)]

extern crate std;

use super::super::quirks::{HostQuirks, BCM2711_EMMC2, BCM2712_SDHCI, GENERIC_PCI};
use super::super::sim::{SimBoard, SimHost, TestPlatform};
use super::super::SdCard;
use super::{assert_pattern, host, platform, read, sim};
use crate::sd::identify::{bring_up, CardInfo};
use crate::sd::options::{Cmd23Request, ModeRequest};
use crate::sd::sim_card::SimCard;
use crate::sd::timing::{BringUpOptions, Timing};
use std::string::ToString;
use std::vec::Vec;

const CAPACITY: u64 = 32 << 30;

/// An eMMC of `CAPACITY` wired with `wired_width_bits` lines to `board`, brought up with
/// `quirks` and `options`; then read by `mode` at the start, across 64 KiB and at the end.
fn emmc_on(
    board: SimBoard,
    quirks: &'static HostQuirks,
    wired_width_bits: u8,
    options: BringUpOptions,
    mode: ModeRequest,
) -> (&'static SimHost<'static>, CardInfo) {
    let platform: &'static TestPlatform = platform(16 << 20);
    let mut card = SimCard::emmc(CAPACITY);
    card.emmc.as_mut().unwrap().wired_width_bits = wired_width_bits;
    let sim = sim(platform, board, card);
    let mut host = host(sim, platform, quirks, Some(board.base_clock_hz));
    let info = bring_up(&mut host, None, options).unwrap();
    let mut device =
        SdCard::new(host, info, "sd0", mode, Cmd23Request::Auto, crate::sd::options::AutoCmd23Request::On)
            .unwrap();
    for (lba, blocks) in [(0, 1), (1, 128), (CAPACITY / 512 - 8, 8)] {
        let (completion, buffer) = read(&mut device, platform, lba, blocks);
        assert_eq!(completion.result, Ok(()), "read of {blocks} blocks at {lba}");
        assert_pattern(platform, &buffer, lba);
    }
    assert_eq!(sim.state.borrow().violations, Vec::<&str>::new());
    (sim, info)
}

#[test]
fn a_cm4_emmc_answers_cmd1_and_runs_8_bit_ddr52_read_back_exactly() {
    let (sim, info) =
        emmc_on(SimBoard::PI4_EMMC2_B0, &BCM2711_EMMC2, 8, BringUpOptions::default(), ModeRequest::Auto);
    assert_eq!(info.emmc_mode().unwrap().to_string(), "eMMC 5.1, 8-bit DDR52");
    let emmc = info.emmc.unwrap();
    assert_eq!(emmc.capacity_bytes(), CAPACITY);
    assert!(emmc.sector_addressed);
    assert_eq!((info.bus_width_bits, info.sd_clock_hz), (8, 50_000_000));
    assert!(info.supports_cmd23());
    // SD identification first (CMD0, CMD8, CMD55 unanswered), then CMD0 and CMD1 polled until
    // the device is ready, CMD2, CMD3 with the host's RCA, CMD9, CMD7, CMD8 = SEND_EXT_CSD.
    let indices = sim.command_indices();
    assert_eq!(&indices[..4], &[0, 8, 55, 0]);
    let first_after_cmd1 = indices.iter().rposition(|index| *index == 1).unwrap() + 1;
    assert_eq!(&indices[first_after_cmd1..first_after_cmd1 + 5], &[2, 3, 9, 7, 8]);
    assert!(indices.iter().filter(|index| **index == 1).count() > 1, "CMD1 polled while busy");
    // The bus test ran (CMD19 then CMD14) before DDR was switched on.
    assert!(indices.windows(2).any(|pair| pair == [19, 14]));
}

#[test]
fn an_emmc_with_four_lines_wired_fails_the_8_bit_bus_test_and_runs_4_bit() {
    let (_, info) =
        emmc_on(SimBoard::PI4_EMMC2_B0, &BCM2711_EMMC2, 4, BringUpOptions::default(), ModeRequest::Pio);
    assert_eq!(info.emmc_mode().unwrap().to_string(), "eMMC 5.1, 4-bit DDR52");
}

#[test]
fn without_ddr_at_3v3_an_emmc_runs_hs52() {
    // QEMU's sdhci-pci: no 8-bit bus, no DDR52 for the board.
    let board = SimBoard { base_clock_hz: 52_000_000, ..SimBoard::QEMU_PCI };
    let (_, info) = emmc_on(board, &GENERIC_PCI, 8, BringUpOptions::default(), ModeRequest::Adma2);
    assert_eq!(info.emmc_mode().unwrap().to_string(), "eMMC 5.1, 4-bit HS52");
    assert_eq!(info.timing, Timing::MmcHighSpeed);
}

#[test]
fn hs200_where_the_host_tunes_it_and_the_board_runs_the_emmc_at_1v8() {
    // A BCM2712-like host with an 8-bit bus (Pi 5 capabilities plus bit 18).
    let board =
        SimBoard { capabilities: (SimBoard::PI5_SDHCI.capabilities.0 | (1 << 18), 0), ..SimBoard::PI5_SDHCI };
    let options = BringUpOptions { emmc_hs200: true, ..BringUpOptions::default() };
    let (sim, info) = emmc_on(board, &BCM2712_SDHCI, 8, options, ModeRequest::Auto);
    assert_eq!(info.emmc_mode().unwrap().to_string(), "eMMC 5.1, 8-bit HS200");
    assert_eq!((info.sd_clock_hz, info.fallback), (200_000_000, None));
    assert!(info.signalling_1v8);
    assert_eq!(sim.state.borrow().tunings_completed, 1);
    // Not where the board's eMMC I/O voltage is unknown: HS52 with DDR is not offered by this
    // host either, so 8-bit HS52.
    let (_, info) = emmc_on(board, &BCM2712_SDHCI, 8, BringUpOptions::default(), ModeRequest::Auto);
    assert_eq!(info.emmc_mode().unwrap().to_string(), "eMMC 5.1, 8-bit HS52");
}
