//! eMMC over the same hosts as SD cards ([`CardBus`]): the Compute Modules' on-board eMMC answers
//! CMD1, not ACMD41. Identification and bus set-up in the order of JEDEC JESD84-B51 (eMMC 5.1)
//! §6.4 (device identification), §6.6 (data transfer mode) and Linux
//! `drivers/mmc/core/mmc.c` (`mmc_init_card`, `mmc_select_timing`):
//!
//! 1. CMD1 with the sector-mode access bit and both voltage windows until the OCR's busy bit
//!    (bit 31) is set, within 1 s (§6.4.2, §7.1 OCR).
//! 2. CMD2 (CID), CMD3 assigning the RCA (the host chooses it, §6.4.4), CMD9 (CSD), CMD7.
//! 3. CMD8 SEND_EXT_CSD: the 512-byte EXT_CSD by PIO (§7.4).
//! 4. HS200 when the host can tune it and the board's I/O voltage is 1.8 V: widest bus first,
//!    HS_TIMING = 2, then CMD21 tuning; if that fails, HS52 (§6.6.5).
//! 5. Otherwise High Speed (HS_TIMING = 1, 52 MHz), then the widest bus the bus test passes
//!    (CMD19 BUS_TEST_W / CMD14 BUS_TEST_R, §6.4.5; or, on a host that cannot write a block,
//!    EXT_CSD read again at the new width and compared, as Linux does without
//!    `MMC_CAP_BUS_WIDTH_TEST`), then DDR52 where card and host have it (BUS_WIDTH 5 or 6).
//!
//! Every SWITCH (CMD6) is an R1b command whose busy the host waits out, followed by CMD13,
//! whose SWITCH_ERROR bit says whether the device took the value (§6.6.1).
#![forbid(unsafe_code)]

use super::bus::{BusWidth, CardBus};
use super::card_registers::{Cid, Csd};
use super::command::Command;
use super::error::{FailureKind, SdError};
use super::timing::{mmc_hs200_tuning_block_bytes, BringUpOptions, Timing, TimingFallback};
use core::fmt;
use hal::platform::{Deadline, Platform};

/// How long the device may stay busy in CMD1 (JESD84-B51 §6.4.2: 1 s).
pub const INITIALIZATION_TIMEOUT_US: u64 = 1_000_000;
/// Pause between CMD1 polls.
const OPERATING_CONDITION_POLL_US: u64 = 5_000;
/// The RCA the host assigns (any value but 0; Linux assigns 1 to the first device).
pub const RELATIVE_ADDRESS: u16 = 1;

/// OCR bits of an eMMC (JESD84-B51 §7.1).
pub mod ocr {
    /// Set when the device has finished powering up.
    pub const POWER_UP_DONE: u32 = 1 << 31;
    /// Access mode: sector addressing (devices above 2 GB), as argument and as answer.
    pub const SECTOR_MODE: u32 = 1 << 30;
    /// 2.7-3.6 V (bits 23:15) and 1.70-1.95 V (bit 7).
    pub const VOLTAGES: u32 = 0x00ff_8080;
}

/// EXT_CSD byte offsets and values (JESD84-B51 §7.4).
pub mod ext_csd {
    pub const SEC_COUNT: usize = 212;
    pub const DEVICE_TYPE: usize = 196;
    pub const EXT_CSD_REV: usize = 192;
    pub const HS_TIMING: usize = 185;
    pub const BUS_WIDTH: usize = 183;
    /// Longest SWITCH busy, in units of 10 ms (0: not given).
    pub const GENERIC_CMD6_TIME: usize = 248;
    /// DEVICE_TYPE bits.
    pub const TYPE_HS26: u8 = 1 << 0;
    pub const TYPE_HS52: u8 = 1 << 1;
    pub const TYPE_DDR52_1V8_3V3: u8 = 1 << 2;
    pub const TYPE_HS200_1V8: u8 = 1 << 4;
    /// HS_TIMING values.
    pub const TIMING_HIGH_SPEED: u8 = 1;
    pub const TIMING_HS200: u8 = 2;
    /// BUS_WIDTH values.
    pub const WIDTH_1: u8 = 0;
    pub const WIDTH_4: u8 = 1;
    pub const WIDTH_8: u8 = 2;
    pub const WIDTH_4_DDR: u8 = 5;
    pub const WIDTH_8_DDR: u8 = 6;
}

/// CMD13's SWITCH_ERROR: the device did not take the last SWITCH (JESD84-B51 §6.13).
pub const SWITCH_ERROR: u32 = 1 << 7;

/// The bus test pattern for each width and how many of its bytes the device returns inverted
/// (JESD84-B51 §6.4.5 and Annex A.8.3: 0x55 0xAA on 8 lines, 0x5A on 4).
fn bus_test_pattern(width: BusWidth) -> (&'static [u8], usize) {
    match width {
        BusWidth::Eight => (&[0x55, 0xaa, 0, 0, 0, 0, 0, 0], 2),
        BusWidth::Four => (&[0x5a, 0, 0, 0], 1),
        BusWidth::One => (&[0x80, 0, 0, 0], 1),
    }
}

/// What identification learned from an eMMC's EXT_CSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmmcInfo {
    /// EXT_CSD_REV: 8 = eMMC 5.1, 7 = 5.0, 6 = 4.5, 5 = 4.41 ...
    pub ext_csd_revision: u8,
    /// SEC_COUNT: 512-byte sectors of the user area.
    pub sector_count: u32,
    pub device_type: u8,
    /// The OCR's access mode: block numbers (not byte offsets) as data addresses.
    pub sector_addressed: bool,
}

impl EmmcInfo {
    fn from_ext_csd(bytes: &[u8; 512], ocr_value: u32) -> EmmcInfo {
        let sec = &bytes[ext_csd::SEC_COUNT..ext_csd::SEC_COUNT + 4];
        EmmcInfo {
            ext_csd_revision: bytes[ext_csd::EXT_CSD_REV],
            sector_count: u32::from_le_bytes([sec[0], sec[1], sec[2], sec[3]]),
            device_type: bytes[ext_csd::DEVICE_TYPE],
            sector_addressed: ocr_value & ocr::SECTOR_MODE != 0,
        }
    }

    /// The JEDEC version EXT_CSD_REV names.
    pub fn version_name(&self) -> &'static str {
        match self.ext_csd_revision {
            8 => "eMMC 5.1",
            7 => "eMMC 5.0",
            6 => "eMMC 4.5",
            5 => "eMMC 4.41",
            4 => "eMMC 4.4",
            0..=3 => "eMMC 4.3 or older",
            _ => "eMMC (newer than 5.1)",
        }
    }

    /// The user area (SEC_COUNT × 512; JESD84-B51 §7.4.99).
    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.sector_count) * 512
    }
}

/// `eMMC 5.1, 8-bit DDR52`: the identity line's first words.
pub struct EmmcModeText<'a> {
    pub info: &'a EmmcInfo,
    pub bus_width_bits: u8,
    pub timing: Timing,
}

impl fmt::Display for EmmcModeText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}-bit {}", self.info.version_name(), self.bus_width_bits, self.timing.name())
    }
}

/// An identified eMMC in the transfer state at its best timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmmcBringUp {
    pub ocr: u32,
    pub rca: u16,
    pub cid: Cid,
    pub csd: Csd,
    pub info: EmmcInfo,
    pub timing: Timing,
    pub fallback: Option<TimingFallback>,
}

/// Whether the device answers CMD1 (sent after CMD0): `Ok(None)` when nothing answers (no
/// eMMC), else its OCR once it has powered up.
pub fn wait_until_ready<B: CardBus>(host: &mut B) -> Result<Option<u32>, SdError> {
    let deadline = Deadline::after_us(host.platform(), INITIALIZATION_TIMEOUT_US);
    let argument = ocr::SECTOR_MODE | ocr::VOLTAGES;
    let mut first = true;
    loop {
        match host.send_command(&Command::mmc_send_operating_condition(argument), 0) {
            Ok(response) => {
                let value = response.short();
                // A zero OCR is an empty slot on a host that reports no timeout for R3
                // (Linux `bcm2835-sdhost.c`: "faking timeout due to zero OCR").
                if first && value & ocr::VOLTAGES == 0 {
                    return Ok(None);
                }
                if value & ocr::POWER_UP_DONE != 0 {
                    return Ok(Some(value));
                }
                if deadline.has_passed(host.platform()) {
                    return Err(SdError::UnusableCard {
                        reason: "the eMMC stayed busy in CMD1 for 1 s",
                        value,
                    });
                }
            }
            Err(SdError::Command(failure)) if first && failure.kind == FailureKind::CommandTimeout => {
                return Ok(None)
            }
            Err(error) => return Err(error),
        }
        first = false;
        host.platform().delay_us(OPERATING_CONDITION_POLL_US);
    }
}

/// The rest of an eMMC's bring-up once CMD1 has answered `ocr_value`: registers, EXT_CSD and the
/// fastest timing both sides have ([`Timing::MmcHs200`] only with `options.emmc_hs200`, where
/// the board's eMMC I/O voltage is known to be 1.8 V).
pub fn bring_up_emmc<B: CardBus>(
    host: &mut B,
    ocr_value: u32,
    options: BringUpOptions,
) -> Result<EmmcBringUp, SdError> {
    let cid = Cid { raw: host.send_command(&Command::all_send_cid(), 0)?.long_register() };
    let rca = RELATIVE_ADDRESS;
    host.send_command(&Command::mmc_set_relative_address(rca), rca)?;
    let csd = Csd::decode_mmc(host.send_command(&Command::send_csd(rca), rca)?.long_register());
    host.send_command(&Command::select_card(rca), rca)?;
    host.set_mmc_timing(Timing::MmcLegacy, options.clock_for(Timing::MmcLegacy))?;
    let mut bytes = [0u8; 512];
    host.read_register_data(&Command::mmc_send_ext_csd(), rca, &mut bytes)?;
    let info = EmmcInfo::from_ext_csd(&bytes, ocr_value);
    if !info.sector_addressed {
        host.send_command(&Command::set_block_length(512), rca)?;
    }
    let (timing, fallback) = select_timing(host, rca, &info, &bytes, options)?;
    Ok(EmmcBringUp { ocr: ocr_value, rca, cid, csd, info, timing, fallback })
}

/// HS200, else HS52 with the widest bus and DDR52, else the legacy timing with the widest bus.
fn select_timing<B: CardBus>(
    host: &mut B,
    rca: u16,
    info: &EmmcInfo,
    ext_csd_at_1_bit: &[u8; 512],
    options: BringUpOptions,
) -> Result<(Timing, Option<TimingFallback>), SdError> {
    let card_has = |bit: u8| info.device_type & bit != 0;
    let mut fallback = None;
    if options.allow_speed_switch
        && options.emmc_hs200
        && card_has(ext_csd::TYPE_HS200_1V8)
        && host.supports_mmc_timing(Timing::MmcHs200)
    {
        let width = select_bus_width(host, rca, ext_csd_at_1_bit)?;
        if width != BusWidth::One {
            switch(host, rca, ext_csd::HS_TIMING, ext_csd::TIMING_HS200)?;
            host.set_mmc_timing(Timing::MmcHs200, options.clock_for(Timing::MmcHs200))?;
            match host.tune_mmc_hs200(mmc_hs200_tuning_block_bytes(width.bits())) {
                Ok(()) => return Ok((Timing::MmcHs200, None)),
                Err(reason) => {
                    // Back to HS52 before any further data (an untuned 200 MHz garbles it).
                    host.set_mmc_timing(Timing::MmcHighSpeed, options.clock_for(Timing::MmcHighSpeed))?;
                    switch(host, rca, ext_csd::HS_TIMING, ext_csd::TIMING_HIGH_SPEED)?;
                    fallback = Some(TimingFallback { wanted: Timing::MmcHs200, reason });
                    return Ok((Timing::MmcHighSpeed, fallback));
                }
            }
        }
    }
    let high_speed = options.allow_speed_switch
        && card_has(ext_csd::TYPE_HS52)
        && host.supports_mmc_timing(Timing::MmcHighSpeed);
    if !high_speed {
        select_bus_width(host, rca, ext_csd_at_1_bit)?;
        return Ok((Timing::MmcLegacy, fallback));
    }
    switch(host, rca, ext_csd::HS_TIMING, ext_csd::TIMING_HIGH_SPEED)?;
    host.set_mmc_timing(Timing::MmcHighSpeed, options.clock_for(Timing::MmcHighSpeed))?;
    let width = select_bus_width(host, rca, ext_csd_at_1_bit)?;
    if width != BusWidth::One
        && card_has(ext_csd::TYPE_DDR52_1V8_3V3)
        && host.supports_mmc_timing(Timing::MmcDdr52)
    {
        let value = if width == BusWidth::Eight { ext_csd::WIDTH_8_DDR } else { ext_csd::WIDTH_4_DDR };
        switch(host, rca, ext_csd::BUS_WIDTH, value)?;
        host.set_mmc_timing(Timing::MmcDdr52, options.clock_for(Timing::MmcDdr52))?;
        return Ok((Timing::MmcDdr52, fallback));
    }
    Ok((Timing::MmcHighSpeed, fallback))
}

/// Switches device and host to the widest SDR bus that passes the bus test, 8 bits first where
/// the host has them, then 4; stays at 1 bit when neither passes.
fn select_bus_width<B: CardBus>(
    host: &mut B,
    rca: u16,
    ext_csd_at_1_bit: &[u8; 512],
) -> Result<BusWidth, SdError> {
    let widths: &[(BusWidth, u8)] = match host.max_bus_width() {
        BusWidth::Eight => &[(BusWidth::Eight, ext_csd::WIDTH_8), (BusWidth::Four, ext_csd::WIDTH_4)],
        BusWidth::Four => &[(BusWidth::Four, ext_csd::WIDTH_4)],
        BusWidth::One => &[],
    };
    for &(width, value) in widths {
        switch(host, rca, ext_csd::BUS_WIDTH, value)?;
        host.set_bus_width(width)?;
        if bus_works(host, rca, width, ext_csd_at_1_bit)? {
            return Ok(width);
        }
    }
    switch(host, rca, ext_csd::BUS_WIDTH, ext_csd::WIDTH_1)?;
    host.set_bus_width(BusWidth::One)?;
    Ok(BusWidth::One)
}

/// Whether data moves intact at `width`: the bus test where the host can write a block, else
/// EXT_CSD read again and compared with the 1-bit copy (Linux `mmc_compare_ext_csds`).
fn bus_works<B: CardBus>(
    host: &mut B,
    rca: u16,
    width: BusWidth,
    ext_csd_at_1_bit: &[u8; 512],
) -> Result<bool, SdError> {
    let (pattern, checked) = bus_test_pattern(width);
    match host.write_register_data(&Command::mmc_bus_test_write(), rca, pattern) {
        Ok(_) => {
            let mut echoed = [0u8; 8];
            let echoed = &mut echoed[..pattern.len()];
            if host.read_register_data(&Command::mmc_bus_test_read(), rca, echoed).is_err() {
                return Ok(false);
            }
            Ok(pattern.iter().zip(echoed.iter()).take(checked).all(|(sent, back)| sent ^ back == 0xff))
        }
        Err(SdError::UnusableHost { .. }) => {
            let mut again = [0u8; 512];
            if host.read_register_data(&Command::mmc_send_ext_csd(), rca, &mut again).is_err() {
                return Ok(false);
            }
            // The read-only identity part must match; the modes just switched may not.
            Ok(again[ext_csd::SEC_COUNT..] == ext_csd_at_1_bit[ext_csd::SEC_COUNT..]
                && again[..ext_csd::BUS_WIDTH] == ext_csd_at_1_bit[..ext_csd::BUS_WIDTH])
        }
        Err(_) => Ok(false),
    }
}

/// SWITCH (CMD6, R1b: the host waits out the busy) and CMD13: `Err` when the device reports
/// SWITCH_ERROR (it did not take the value).
fn switch<B: CardBus>(host: &mut B, rca: u16, index: usize, value: u8) -> Result<(), SdError> {
    let command = Command::mmc_switch(index as u8, value);
    host.send_command(&command, rca)?;
    let status = host.send_command(&Command::send_status(rca), rca)?;
    if status.short() & SWITCH_ERROR != 0 {
        return Err(SdError::UnusableCard {
            reason: "the eMMC refused a SWITCH (SWITCH_ERROR)",
            value: (index as u32) << 8 | u32::from(value),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;

    #[test]
    fn switch_arguments_and_patterns_follow_jedec() {
        // Write Byte (0b11) to HS_TIMING (185) = 1: 0x03B9_0100.
        assert_eq!(Command::mmc_switch(185, 1).argument, 0x03b9_0100);
        assert_eq!(Command::mmc_switch(183, 6).argument, 0x03b7_0600);
        assert_eq!(bus_test_pattern(BusWidth::Eight), (&[0x55u8, 0xaa, 0, 0, 0, 0, 0, 0][..], 2));
        assert_eq!(bus_test_pattern(BusWidth::Four).0, &[0x5a, 0, 0, 0]);
        let mut bytes = [0u8; 512];
        bytes[ext_csd::EXT_CSD_REV] = 8;
        bytes[ext_csd::SEC_COUNT..ext_csd::SEC_COUNT + 4].copy_from_slice(&0x0074_7000u32.to_le_bytes());
        let info = EmmcInfo::from_ext_csd(&bytes, ocr::POWER_UP_DONE | ocr::SECTOR_MODE);
        assert_eq!(info.version_name(), "eMMC 5.1");
        assert_eq!(info.capacity_bytes(), 0x0074_7000 * 512);
        assert!(info.sector_addressed);
        let text = EmmcModeText { info: &info, bus_width_bits: 8, timing: Timing::MmcDdr52 };
        assert_eq!(std::format!("{text}"), "eMMC 5.1, 8-bit DDR52");
    }
}
