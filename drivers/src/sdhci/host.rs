//! The SDHCI host controller: reset, bus power, SD clock, command issue with error recovery, and
//! PIO register reads (SD Host Controller Simplified Specification v4.20: §3.2 SD clock control,
//! §3.3 power, §3.7.1 command issue, §3.7.2 data transfer without DMA, §3.10 error recovery).
#![forbid(unsafe_code)]

use super::clock::{divider_for, ClockSetting};
use super::command::command_field;
use super::quirks::{bcm2712_config, CapabilitySource, HostQuirks};
use super::regs::TRANSFER_MODE_COMMAND;
use super::regs::{interrupt, offsets, SpecVersion, CAPABILITIES, CAPABILITIES_HIGH, SLOT_STATUS_VERSION};
use super::regs::{CLOCK_TIMEOUT_RESET, HOST_CONTROL2, HOST_CONTROL_POWER, PRESENT_STATE};
use crate::sd::bus::{
    prefix_application_command, BusMode, BusWidth, Response, BLOCK_TIMEOUT_US, BUSY_TIMEOUT_US,
    IDENTIFICATION_CLOCK_HZ,
};
use crate::sd::command::{Command, DataPhase, ResponseKind};
use crate::sd::error::{CommandFailure, FailureKind, SdError};
use core::fmt;
use hal::dma::PioTarget;
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Deadline, Platform};
use tock_registers::fields::FieldValue;
use tock_registers::LocalRegisterCopy;

/// How long the controller may take to leave reset or stabilise its clock (SDHCI gives no
/// figure; Linux waits 100 ms for reset, 150 ms for the clock: read for facts only).
pub const CONTROLLER_TIMEOUT_US: u64 = 150_000;
/// How long a command may take to complete (the card answers within 64 clocks; at 100 kHz
/// that is 640 µs: this leaves room for slow emulation).
pub const COMMAND_TIMEOUT_US: u64 = 100_000;
/// Power ramp-up after switching bus power on (SD §6.4.1: 1 ms + 74 clocks at 400 kHz).
pub const POWER_RAMP_US: u64 = 2_000;

/// What the controller can do (Capabilities §2.2.26, Version §2.2.34), after the quirks'
/// corrections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostCapabilities {
    pub low: u32,
    pub high: u32,
    pub version: SpecVersion,
    /// What the register itself reads, when the quirks replaced some of it.
    pub register: Option<(u32, u32)>,
}

/// Bits 2:0 of the high word: SDR50, SDR104, DDR50.
const UHS_MODE_BITS: u32 = 0b111;

impl HostCapabilities {
    /// Reads the Version and Capabilities registers and applies `source`.
    pub fn read<R: RegisterIo>(registers: &R, source: CapabilitySource) -> Self {
        let version = registers.read(SLOT_STATUS_VERSION).read(SLOT_STATUS_VERSION::SPECIFICATION_VERSION);
        let version = SpecVersion(version as u8);
        let register = (registers.read(CAPABILITIES).get(), registers.read(CAPABILITIES_HIGH).get());
        let (low, high) = match source {
            CapabilitySource::Register => register,
            CapabilitySource::Supplied { low, high } => (low, high),
            CapabilitySource::RegisterWithBoardUhs { uhs_bits } => {
                (register.0, (register.1 & !UHS_MODE_BITS) | (uhs_bits & UHS_MODE_BITS))
            }
        };
        let register = ((low, high) != register).then_some(register);
        HostCapabilities { low, high, version, register }
    }

    /// The capabilities' base clock when it differs from the firmware's figure by 1 MHz or more
    /// (the field counts whole MHz); `None` when they agree or the field is empty.
    pub fn base_clock_disagreement(&self, firmware_hz: u32) -> Option<u32> {
        let capabilities_hz = self.base_clock_hz()?;
        (capabilities_hz.abs_diff(firmware_hz) >= 1_000_000).then_some(capabilities_hz)
    }

    fn low(&self) -> LocalRegisterCopy<u32, CAPABILITIES::Register> {
        LocalRegisterCopy::new(self.low)
    }
    fn high(&self) -> LocalRegisterCopy<u32, CAPABILITIES_HIGH::Register> {
        LocalRegisterCopy::new(self.high)
    }

    /// Base Clock Frequency in Hz (6 bits before v3, 8 bits from v3), `None` when 0.
    pub fn base_clock_hz(&self) -> Option<u32> {
        let mut mhz = self.low().read(CAPABILITIES::BASE_CLOCK_MHZ);
        if !self.version.at_least_v3() {
            mhz &= 0x3f;
        }
        (mhz > 0).then_some(mhz * 1_000_000)
    }
    pub fn max_block_bytes(&self) -> u32 {
        512 << self.low().read(CAPABILITIES::MAX_BLOCK_LENGTH).min(2)
    }
    pub fn adma2(&self) -> bool {
        self.low().is_set(CAPABILITIES::ADMA2)
    }
    pub fn eight_bit_bus(&self) -> bool {
        self.low().is_set(CAPABILITIES::EIGHT_BIT_BUS)
    }
    pub fn sdma(&self) -> bool {
        self.low().is_set(CAPABILITIES::SDMA)
    }
    pub fn system_bus_64_bit(&self) -> bool {
        self.low().is_set(CAPABILITIES::SYSTEM_BUS_64_BIT)
    }
    pub fn high_speed(&self) -> bool {
        self.low().is_set(CAPABILITIES::HIGH_SPEED)
    }
    pub fn voltage_3v3(&self) -> bool {
        self.low().is_set(CAPABILITIES::VOLTAGE_3V3)
    }
    pub fn voltage_3v0(&self) -> bool {
        self.low().is_set(CAPABILITIES::VOLTAGE_3V0)
    }
    pub fn voltage_1v8(&self) -> bool {
        self.low().is_set(CAPABILITIES::VOLTAGE_1V8)
    }
    pub fn sdr50(&self) -> bool {
        self.version.at_least_v3() && self.high().is_set(CAPABILITIES_HIGH::SDR50)
    }
    pub fn sdr104(&self) -> bool {
        self.version.at_least_v3() && self.high().is_set(CAPABILITIES_HIGH::SDR104)
    }
    pub fn ddr50(&self) -> bool {
        self.version.at_least_v3() && self.high().is_set(CAPABILITIES_HIGH::DDR50)
    }
    pub fn sdr50_needs_tuning(&self) -> bool {
        self.high().is_set(CAPABILITIES_HIGH::SDR50_NEEDS_TUNING)
    }
    /// The re-tuning period the Timer Count for Re-Tuning field asks for, in seconds: 2^(n-1)
    /// for n = 1 to 11 (SDHCI §2.2.26); `None` when 0 (no timer) or 0xF (from elsewhere).
    pub fn retuning_period_s(&self) -> Option<u32> {
        match self.high().read(CAPABILITIES_HIGH::RETUNING_TIMER_COUNT) {
            count @ 1..=11 => Some(1 << (count - 1)),
            _ => None,
        }
    }
}

impl fmt::Display for HostCapabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SDHCI {}, caps {:#010x}/{:#010x}", self.version.name(), self.low, self.high)?;
        if let Some((low, high)) = self.register {
            write!(f, " (register reads {low:#010x}/{high:#010x})")?;
        }
        write!(f, ": ")?;
        match self.base_clock_hz() {
            Some(hz) => write!(f, "base clock {} MHz", hz / 1_000_000)?,
            None => write!(f, "base clock not given")?,
        }
        write!(f, ", max block {} B", self.max_block_bytes())?;
        if self.high_speed() {
            write!(f, ", high speed")?;
        }
        for (present, name) in [
            (self.sdr50(), ", SDR50"),
            (self.sdr104(), ", SDR104"),
            (self.ddr50(), ", DDR50"),
            (self.voltage_3v3(), ", 3.3 V"),
            (self.voltage_3v0(), ", 3.0 V"),
            (self.voltage_1v8(), ", 1.8 V"),
        ] {
            if present {
                write!(f, "{name}")?;
            }
        }
        match (self.sdma(), self.adma2(), self.system_bus_64_bit()) {
            (false, false, _) => write!(f, ", no DMA"),
            (sdma, adma2, wide) => {
                if sdma {
                    write!(f, ", SDMA")?;
                }
                if adma2 {
                    write!(f, ", ADMA2")?;
                }
                if wide {
                    write!(f, ", 64-bit DMA")?;
                }
                Ok(())
            }
        }
    }
}

/// One SDHCI controller.
pub struct SdhciHost<'p, R: RegisterIo, P: Platform> {
    registers: R,
    platform: &'p P,
    quirks: &'static HostQuirks,
    capabilities: HostCapabilities,
    base_clock_hz: u32,
    dma: Option<BusTranslation>,
    sd_clock_hz: u32,
    /// The pause after every register write but the data port's at the present SD clock, from
    /// the quirks' slow-clock spacing (0: none), worked out when the clock changes rather than
    /// on every write.
    write_spacing_us: u64,
    /// Host Control 1 DMA Select as last written, `None` until then and after Software Reset
    /// For All, which clears it (§2.2.10, §2.2.17: nothing else changes it).
    dma_select: Option<u32>,
    bus_width_bits: u8,
}

impl<'p, R: RegisterIo, P: Platform> SdhciHost<'p, R, P> {
    /// Reads the capabilities; `base_clock_hz` overrides the capabilities' base clock (the
    /// firmware's figure on the Pi: docs/hardware.md §2.2). `dma` is how the host's DMA sees RAM;
    /// `None` when nobody knows, and then data moves by PIO.
    pub fn new(
        registers: R,
        platform: &'p P,
        quirks: &'static HostQuirks,
        base_clock_hz: Option<u32>,
        dma: Option<BusTranslation>,
    ) -> Result<Self, SdError> {
        let capabilities = HostCapabilities::read(&registers, quirks.capabilities);
        let base_clock_hz = base_clock_hz.or(capabilities.base_clock_hz()).ok_or(SdError::UnusableHost {
            reason: "no base clock: capabilities give none and no other source",
            value: capabilities.low,
        })?;
        Ok(SdhciHost {
            registers,
            platform,
            quirks,
            capabilities,
            base_clock_hz,
            dma,
            sd_clock_hz: 0,
            write_spacing_us: write_spacing_us(quirks, 0),
            dma_select: None,
            bus_width_bits: 1,
        })
    }

    pub fn capabilities(&self) -> HostCapabilities {
        self.capabilities
    }
    pub fn quirks(&self) -> &'static HostQuirks {
        self.quirks
    }
    pub fn base_clock_hz(&self) -> u32 {
        self.base_clock_hz
    }
    pub fn dma_translation(&self) -> Option<BusTranslation> {
        self.dma
    }
    pub fn platform(&self) -> &'p P {
        self.platform
    }
    pub fn bus_mode(&self) -> BusMode {
        BusMode { width_bits: self.bus_width_bits, sd_clock_hz: self.sd_clock_hz }
    }

    pub fn read(&self, offset: usize) -> u32 {
        self.registers.read32(offset)
    }

    /// A register write, followed by the slow-clock spacing the quirks ask for.
    pub fn write(&self, offset: usize, value: u32) {
        self.registers.write32(offset, value);
        if self.write_spacing_us > 0 && offset != offsets::BUFFER_DATA_PORT {
            self.platform.delay_us(self.write_spacing_us);
        }
    }

    /// Records the SD clock now running (0: stopped by a reset) and the write spacing it needs.
    fn set_sd_clock_hz(&mut self, sd_clock_hz: u32) {
        self.sd_clock_hz = sd_clock_hz;
        self.write_spacing_us = write_spacing_us(self.quirks, sd_clock_hz);
    }

    fn modify(&self, offset: usize, clear: u32, set: u32) {
        let value = self.read(offset);
        self.write(offset, (value & !clear) | set);
    }

    pub fn present_state(&self) -> u32 {
        self.present().get()
    }

    /// Waits until `(register & mask) == expected`, or fails naming what it waited for.
    fn wait_for(
        &self,
        offset: usize,
        mask: u32,
        expected: u32,
        timeout_us: u64,
        waiting_for: &'static str,
    ) -> Result<u32, SdError> {
        // Usually true at once (an idle controller before a command): no deadline to compute.
        let value = self.read(offset);
        if value & mask == expected {
            return Ok(value);
        }
        let deadline = Deadline::after_us(self.platform, timeout_us);
        loop {
            let value = self.read(offset);
            if value & mask == expected {
                return Ok(value);
            }
            if deadline.has_passed(self.platform) {
                let value = self.read(offset);
                if value & mask == expected {
                    return Ok(value);
                }
                return Err(SdError::Controller {
                    waiting_for,
                    register_offset: offset,
                    value,
                    waited_us: deadline.elapsed_us(self.platform),
                });
            }
            core::hint::spin_loop();
        }
    }

    /// Software Reset (§2.2.16): `lines` is a mask of RESET_ALL / RESET_COMMAND_LINE /
    /// RESET_DATA_LINE; waits for the bits to clear.
    pub fn reset(&mut self, lines: u32) -> Result<(), SdError> {
        self.modify(offsets::CLOCK_TIMEOUT_RESET, 0, lines);
        self.wait_for(
            offsets::CLOCK_TIMEOUT_RESET,
            lines,
            0,
            CONTROLLER_TIMEOUT_US,
            "software reset to finish",
        )?;
        if lines & CLOCK_TIMEOUT_RESET::RESET_ALL::SET.value != 0 {
            self.set_sd_clock_hz(0);
            self.dma_select = None;
            self.bus_width_bits = 1;
        }
        Ok(())
    }

    /// Reset all, bus power at the highest voltage the capabilities list, status bits enabled
    /// for polling (signals off), data timeout at its maximum, identification clock
    /// (docs/hardware.md §2.9 steps 2-5).
    pub fn initialize(&mut self) -> Result<(), SdError> {
        self.prepare_config_block();
        self.reset(CLOCK_TIMEOUT_RESET::RESET_ALL::SET.value)?;
        self.power_on()?;
        self.write(offsets::INTERRUPT_SIGNAL_ENABLE, 0);
        self.write(offsets::INTERRUPT_STATUS_ENABLE, interrupt::ENABLED);
        self.write(offsets::INTERRUPT_STATUS, interrupt::CLEAR_ALL);
        self.set_clock(IDENTIFICATION_CLOCK_HZ)?;
        // 74 clocks before the first command (SD §6.4.1); the power ramp covers them.
        self.platform.delay_us(POWER_RAMP_US);
        Ok(())
    }

    /// Power Control (§2.2.11): select a supported voltage, then switch bus power on.
    pub fn power_on(&mut self) -> Result<(), SdError> {
        use HOST_CONTROL_POWER::*;
        let voltage = if self.capabilities.voltage_3v3() {
            BUS_VOLTAGE::V3_3
        } else if self.capabilities.voltage_3v0() {
            BUS_VOLTAGE::V3_0
        } else {
            return Err(SdError::UnusableHost {
                reason: "neither 3.3 V nor 3.0 V in the capabilities",
                value: self.capabilities.low,
            });
        };
        // Power Control is bits 15:8 of the word: voltage first, then power (§3.3 steps 2-3).
        self.modify(offsets::HOST_CONTROL_POWER, 0xff00, voltage.value);
        self.modify(offsets::HOST_CONTROL_POWER, 0xff00, (voltage + BUS_POWER::SET).value);
        self.platform.delay_us(POWER_RAMP_US);
        Ok(())
    }

    /// Switches bus power off (before a card power cycle).
    pub fn power_off(&mut self) {
        self.modify(offsets::HOST_CONTROL_POWER, HOST_CONTROL_POWER::BUS_POWER::SET.value, 0);
    }

    /// Sets SDCLK to the fastest frequency not above `target_hz` (§3.2.1, §3.2.3): clocks off,
    /// divider with the internal clock on, wait for stable, SD clock on. Returns the frequency.
    pub fn set_clock(&mut self, target_hz: u32) -> Result<u32, SdError> {
        use CLOCK_TIMEOUT_RESET::*;
        let ClockSetting { divider_field, sd_clock_hz } =
            divider_for(self.base_clock_hz, target_hz, self.capabilities.version.at_least_v3())?;
        // Clock Control to 0 first (SD clock and internal clock off), then the new divider with
        // the internal clock on (Linux `sdhci_set_clock`, `sdhci_bcm2712_set_clock`): a divider
        // changed under a running internal clock can glitch it. The reset bits stay 0 (a one
        // would reset); the data timeout stays at its maximum.
        let timeout = DATA_TIMEOUT.val(0xe);
        self.write(offsets::CLOCK_TIMEOUT_RESET, timeout.value);
        let divider = u32::from(divider_field);
        let clock = DIVIDER_LOW.val(divider & 0xff)
            + DIVIDER_HIGH.val(divider >> 8)
            + INTERNAL_CLOCK_ENABLE::SET
            + timeout;
        self.write(offsets::CLOCK_TIMEOUT_RESET, clock.value);
        self.wait_for(
            offsets::CLOCK_TIMEOUT_RESET,
            INTERNAL_CLOCK_STABLE::SET.value,
            INTERNAL_CLOCK_STABLE::SET.value,
            CONTROLLER_TIMEOUT_US,
            "internal clock stable",
        )?;
        self.set_sd_clock_hz(sd_clock_hz);
        self.start_sd_clock();
        Ok(sd_clock_hz)
    }

    pub fn stop_sd_clock(&mut self) {
        self.modify(
            offsets::CLOCK_TIMEOUT_RESET,
            CLOCK_TIMEOUT_RESET::SD_CLOCK_ENABLE::SET.value
                | CLOCK_TIMEOUT_RESET::RESET_ALL::SET.value
                | CLOCK_TIMEOUT_RESET::RESET_COMMAND_LINE::SET.value
                | CLOCK_TIMEOUT_RESET::RESET_DATA_LINE::SET.value,
            0,
        );
    }

    pub fn start_sd_clock(&mut self) {
        self.modify(
            offsets::CLOCK_TIMEOUT_RESET,
            CLOCK_TIMEOUT_RESET::RESET_ALL::SET.value
                | CLOCK_TIMEOUT_RESET::RESET_COMMAND_LINE::SET.value
                | CLOCK_TIMEOUT_RESET::RESET_DATA_LINE::SET.value,
            CLOCK_TIMEOUT_RESET::SD_CLOCK_ENABLE::SET.value,
        );
    }

    /// The BCM2712 cfg block, when this host has one (docs/hardware.md §2.7): the pins carry the
    /// SD function, card detect is forced to "present" (a missing card then shows as a command
    /// timeout), and when the host offers SDR50 or SDR104 the delay-line PHY is selected, without
    /// which nothing above 50 MHz works (Linux `sdhci-brcmstb.c` `sdhci_brcmstb_cfginit_2712`).
    fn prepare_config_block(&mut self) {
        use bcm2712_config::*;
        let Some(base) = self.quirks.config_block_offset else {
            return;
        };
        let modify = |register: usize, clear: u32, set: u32| {
            let value = self.registers.read32(base + register);
            self.registers.write32(base + register, (value & !clear) | set);
        };
        modify(SD_PIN_SEL, 0b11, SD_PIN_SEL_SD);
        modify(CTRL, CTRL_CARD_DETECT_TEST_LEVEL, CTRL_CARD_DETECT_TEST_ENABLE);
        if self.capabilities.sdr50() || self.capabilities.sdr104() {
            modify(MAX_50MHZ_MODE, MAX_50MHZ_MODE_ENABLE, MAX_50MHZ_MODE_STRAP_OVERRIDE);
        }
    }

    /// Sets Host Control 2's UHS Mode Select with the SD clock stopped (SDHCI §2.2.24: changing
    /// it while SDCLK runs can glitch the clock; Linux `sdhci_set_ios` does the same), then runs
    /// SDCLK at the fastest frequency not above `target_hz`. Returns that frequency.
    pub fn switch_uhs_mode(&mut self, uhs_mode: u32, target_hz: u32) -> Result<u32, SdError> {
        self.stop_sd_clock();
        self.modify_host_control2(
            HOST_CONTROL2::UHS_MODE.mask << HOST_CONTROL2::UHS_MODE.shift,
            HOST_CONTROL2::UHS_MODE.val(uhs_mode).value,
        );
        self.set_clock(target_hz)
    }

    /// Ends an unsuccessful tuning: Execute Tuning and Sampling Clock Select cleared (the fixed
    /// sampling clock again), CMD and DAT lines reset (Linux `sdhci_abort_tuning`).
    pub fn reset_tuning(&mut self) {
        self.modify_host_control2(
            HOST_CONTROL2::EXECUTE_TUNING::SET.value | HOST_CONTROL2::SAMPLING_CLOCK_SELECT::SET.value,
            0,
        );
        self.recover(true);
    }

    /// Host Control 1 Data Transfer Width and Extended Data Transfer Width (§2.2.10); 8 bits
    /// only where the capabilities list an 8-bit bus (§2.2.26).
    pub fn set_bus_width(&mut self, width: BusWidth) -> Result<(), SdError> {
        let four = HOST_CONTROL_POWER::DATA_WIDTH_4_BIT::SET.value;
        let eight = HOST_CONTROL_POWER::DATA_WIDTH_8_BIT::SET.value;
        let set = match width {
            BusWidth::One => 0,
            BusWidth::Four => four,
            BusWidth::Eight if self.capabilities.eight_bit_bus() => eight,
            BusWidth::Eight => {
                return Err(SdError::UnusableHost {
                    reason: "no 8-bit bus in the capabilities",
                    value: self.capabilities.low,
                })
            }
        };
        self.modify(offsets::HOST_CONTROL_POWER, four | eight, set);
        self.bus_width_bits = width.bits();
        Ok(())
    }

    /// Host Control 1 DMA Select (§2.2.10), written only when it changes: the field keeps its
    /// value through commands, transfers and CMD/DAT line resets, so a read-modify-write per
    /// transfer (as Linux's `sdhci_config_dma` does) would re-write what is there already.
    pub fn select_dma(&mut self, select: FieldValue<u32, HOST_CONTROL_POWER::Register>) {
        if self.dma_select == Some(select.value) {
            return;
        }
        let select_mask = HOST_CONTROL_POWER::DMA_SELECT.mask << HOST_CONTROL_POWER::DMA_SELECT.shift;
        self.modify(offsets::HOST_CONTROL_POWER, select_mask, select.value);
        self.dma_select = Some(select.value);
    }

    /// Host Control 1 High Speed Enable, unless the quirks forbid the bit (BCM2835 Arasan).
    pub fn set_high_speed(&mut self) {
        if !self.quirks.no_high_speed_bit {
            self.modify(offsets::HOST_CONTROL_POWER, 0, HOST_CONTROL_POWER::HIGH_SPEED_ENABLE::SET.value);
        }
    }

    /// Host Control 2 (§2.2.24), bits 31:16 of word 0x3C; the low half (Auto CMD Error
    /// Status) is read-only, so it is written back as zero.
    pub fn modify_host_control2(&mut self, clear: u32, set: u32) {
        let value = self.read(offsets::AUTO_CMD_ERROR_HOST_CONTROL2) & 0xffff_0000;
        self.write(offsets::AUTO_CMD_ERROR_HOST_CONTROL2, (value & !clear) | set);
    }

    pub fn host_control2(&self) -> LocalRegisterCopy<u32, HOST_CONTROL2::Register> {
        self.registers.read(HOST_CONTROL2)
    }

    /// Present State (§2.2.9).
    pub fn present(&self) -> LocalRegisterCopy<u32, PRESENT_STATE::Register> {
        self.registers.read(PRESENT_STATE)
    }

    /// Whether card detect says a card is there (always true with broken card detect).
    pub fn card_detected(&self) -> bool {
        if self.quirks.broken_card_detect {
            return true;
        }
        self.present().is_set(PRESENT_STATE::CARD_INSERTED)
    }

    /// The card's removal, if card detect shows it: Card Removal in `interrupt_status`, or Card
    /// Inserted clear with Card State Stable set (Card Inserted is only valid while the state
    /// is stable: SDHCI 3.00 §2.2.9, §2.2.17). Never with broken card detect.
    pub fn card_removed(&self, interrupt_status: u32) -> Option<SdError> {
        if self.quirks.broken_card_detect {
            return None;
        }
        let state = self.present();
        let present_state = state.get();
        let pulled =
            state.is_set(PRESENT_STATE::CARD_STATE_STABLE) && !state.is_set(PRESENT_STATE::CARD_INSERTED);
        (pulled || interrupt_status & interrupt::CARD_REMOVAL != 0)
            .then_some(SdError::CardRemoved { present_state, interrupt_status })
    }

    /// A failure record for `command` with the registers as they are now.
    pub fn failure(&self, command: Command, kind: FailureKind, status: u32) -> CommandFailure {
        CommandFailure {
            command,
            kind,
            interrupt_status: status,
            present_state: self.present_state(),
            response: self.read(offsets::RESPONSE0),
            auto_command_status: (self.read(offsets::AUTO_CMD_ERROR_HOST_CONTROL2) & 0xffff) as u16,
            adma_error_status: self.read(offsets::ADMA_ERROR_STATUS),
            blocks_done: 0,
            blocks: 0,
            attempts: 1,
        }
    }

    /// Error recovery (§3.10.1, docs/hardware.md §10): reset the CMD line and
    /// wait for it, then, when a data phase or busy was involved, reset the DAT line and wait
    /// for it (the DAT line reset is what ends a transfer the card abandoned: until then the
    /// host keeps Command Inhibit (DAT) set); then clear every status bit.
    pub fn recover(&mut self, data_involved: bool) {
        // A reset that does not finish shows up as a timeout on the next command.
        let _ = self.reset(CLOCK_TIMEOUT_RESET::RESET_COMMAND_LINE::SET.value);
        if data_involved {
            let _ = self.reset(CLOCK_TIMEOUT_RESET::RESET_DATA_LINE::SET.value);
        }
        self.write(offsets::INTERRUPT_STATUS, interrupt::CLEAR_ALL);
    }

    /// Waits until the controller may accept `command` (§3.7.1.1 steps 1-4). Usually idle at
    /// once: that look is inlined into every command, the wait is not.
    #[inline(always)]
    fn wait_until_idle(&self, uses_data_line: bool) -> Result<(), SdError> {
        let mut mask = PRESENT_STATE::COMMAND_INHIBIT::SET.value;
        if uses_data_line {
            mask |= PRESENT_STATE::DATA_INHIBIT::SET.value;
        }
        if self.read(offsets::PRESENT_STATE) & mask == 0 {
            return Ok(());
        }
        self.wait_for(offsets::PRESENT_STATE, mask, 0, COMMAND_TIMEOUT_US, "command/data inhibit to clear")
            .map(|_| ())
    }

    /// Writes block size/count, argument, then transfer mode and command as one word (the
    /// 0x00 register is never written: docs/qemu.md §2). The interrupt status is cleared in one
    /// write before the command, the only clear a command needs: what the last command left set
    /// (its Command Complete, Transfer Complete) cannot be taken for this one's, and nothing
    /// clears them one by one as they are seen. Buffer Read Ready and Buffer Write Ready, which
    /// come once per block, are the exception ([`Self::read_block_if_ready`]).
    pub fn issue(
        &mut self,
        command: &Command,
        transfer_mode: u32,
        block_bytes: u32,
        blocks: u32,
    ) -> Result<(), SdError> {
        let uses_data_line = command.data != DataPhase::None || command.response == ResponseKind::R1b;
        self.wait_until_idle(uses_data_line)?;
        self.write(offsets::INTERRUPT_STATUS, interrupt::CLEAR_ALL);
        if command.data != DataPhase::None {
            self.write(offsets::BLOCK_SIZE_COUNT, (blocks << 16) | (block_bytes & 0xfff));
        }
        self.write(offsets::ARGUMENT, command.argument);
        self.write(
            offsets::TRANSFER_MODE_COMMAND,
            (command_field(command).value & 0xffff_0000) | (transfer_mode & 0xffff),
        );
        Ok(())
    }

    /// Looks once for the end of `command`'s command phase, without waiting: `Ok(None)` while
    /// neither Command Complete nor an error is set; on Command Complete the interrupt status it
    /// read (left set: [`Self::issue`] clears it before the next command), so that a caller can
    /// see a Transfer Complete that came with it; on an error recovers (§3.10.1) and reports it.
    pub fn command_completion(&mut self, command: &Command) -> Result<Option<u32>, SdError> {
        let status = self.read(offsets::INTERRUPT_STATUS);
        if status & interrupt::ALL_ERRORS != 0 {
            let failure = self.failure(*command, failure_kind(status), status);
            self.recover(command.data != DataPhase::None || command.response == ResponseKind::R1b);
            return Err(failure.into());
        }
        Ok((status & interrupt::COMMAND_COMPLETE != 0).then_some(status))
    }

    /// The response of `command` once it completed (all four words of an R2).
    pub fn response(&self, command: &Command) -> Response {
        let mut words = [self.read(offsets::RESPONSE0), 0, 0, 0];
        if command.response == ResponseKind::R2 {
            for (index, word) in words.iter_mut().enumerate().skip(1) {
                *word = self.read(offsets::RESPONSE0 + 4 * index);
            }
        }
        Response { words }
    }

    /// [`Self::command_completion`] with the response read once the command completed.
    pub fn command_outcome(&mut self, command: &Command) -> Result<Option<Response>, SdError> {
        Ok(self.command_completion(command)?.map(|_| self.response(command)))
    }

    /// The command phase of `command` took longer than [`COMMAND_TIMEOUT_US`]: recovers and
    /// reports it.
    pub fn command_timed_out(&mut self, command: &Command) -> SdError {
        let status = self.read(offsets::INTERRUPT_STATUS);
        let failure = self.failure(*command, FailureKind::NoCompletion, status);
        self.recover(command.data != DataPhase::None);
        failure.into()
    }

    /// Waits for Command Complete or an error; on error recovers and reports it.
    pub fn wait_command_complete(&mut self, command: &Command) -> Result<Response, SdError> {
        let deadline = Deadline::after_us(self.platform, COMMAND_TIMEOUT_US);
        loop {
            if let Some(response) = self.command_outcome(command)? {
                return Ok(response);
            }
            if deadline.has_passed(self.platform) {
                // Once more after the deadline, so that a slow host is not a timeout.
                return match self.command_outcome(command)? {
                    Some(response) => Ok(response),
                    None => Err(self.command_timed_out(command)),
                };
            }
            core::hint::spin_loop();
        }
    }

    /// Checks the card status of an R1/R1b answer (R6 and R7 carry no full status).
    pub fn check_card_status(&mut self, command: &Command, response: &Response) -> Result<(), SdError> {
        if response.reports_card_status_errors(command) {
            let mut failure = self.failure(*command, FailureKind::CardStatus, 0);
            failure.response = response.short();
            return Err(failure.into());
        }
        Ok(())
    }

    /// Sends a command without data (CMD55 first for an ACMD) and returns its response.
    pub fn send_command(&mut self, command: &Command, rca: u16) -> Result<Response, SdError> {
        prefix_application_command(self, command, rca)?;
        self.issue(command, 0, 0, 0)?;
        let response = self.wait_command_complete(command)?;
        if command.response == ResponseKind::R1b {
            self.wait_transfer_complete(command, BUSY_TIMEOUT_US, 0, 0)?;
        }
        self.check_card_status(command, &response)?;
        Ok(response)
    }

    /// Waits for Transfer Complete (end of busy, or end of a data transfer).
    pub fn wait_transfer_complete(
        &mut self,
        command: &Command,
        timeout_us: u64,
        blocks_done: u32,
        blocks: u32,
    ) -> Result<(), SdError> {
        let deadline = Deadline::after_us(self.platform, timeout_us);
        loop {
            let status = self.read(offsets::INTERRUPT_STATUS);
            if status & interrupt::ALL_ERRORS != 0 {
                let mut failure = self.failure(*command, failure_kind(status), status);
                failure.blocks_done = blocks_done;
                failure.blocks = blocks;
                self.recover(true);
                return Err(failure.into());
            }
            if status & interrupt::TRANSFER_COMPLETE != 0 {
                return Ok(());
            }
            if deadline.has_passed(self.platform) {
                let mut failure = self.failure(*command, FailureKind::NoCompletion, status);
                failure.blocks_done = blocks_done;
                failure.blocks = blocks;
                self.recover(true);
                return Err(failure.into());
            }
            core::hint::spin_loop();
        }
    }

    /// Reads one block of `out.length_bytes()` (a multiple of 4) from the buffer data port once
    /// Buffer Read Ready is set (§3.7.2.2 steps 5-8). `Ok(false)` if not ready yet.
    pub fn read_block_if_ready(&mut self, out: &mut (impl PioTarget + ?Sized)) -> Result<bool, u32> {
        let status = self.read(offsets::INTERRUPT_STATUS);
        if status & interrupt::ALL_ERRORS != 0 {
            return Err(status);
        }
        if status & interrupt::BUFFER_READ_READY == 0 {
            return Ok(false);
        }
        self.write(offsets::INTERRUPT_STATUS, interrupt::BUFFER_READ_READY);
        for offset_bytes in (0..out.length_bytes() / 4).map(|word| word * 4) {
            out.store_word(offset_bytes, self.registers.read32(offsets::BUFFER_DATA_PORT));
        }
        Ok(true)
    }

    /// Writes one block of `data.len()` bytes (a multiple of 4) to the buffer data port once
    /// Buffer Write Ready is set (§3.7.2.2 steps 5-8 for writes). `Ok(false)` if not ready yet.
    pub fn write_block_if_ready(&mut self, data: &[u8]) -> Result<bool, u32> {
        let status = self.read(offsets::INTERRUPT_STATUS);
        if status & interrupt::ALL_ERRORS != 0 {
            return Err(status);
        }
        if status & interrupt::BUFFER_WRITE_READY == 0 {
            return Ok(false);
        }
        self.write(offsets::INTERRUPT_STATUS, interrupt::BUFFER_WRITE_READY);
        for chunk in data.chunks_exact(4) {
            let word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            self.registers.write32(offsets::BUFFER_DATA_PORT, word);
        }
        Ok(true)
    }

    /// A command with a small data phase read by PIO (SCR, SD Status, switch status, tuning):
    /// one block of `out.len()` bytes.
    pub fn read_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        out: &mut [u8],
    ) -> Result<Response, SdError> {
        prefix_application_command(self, command, rca)?;
        let mode = TRANSFER_MODE_COMMAND::READ::SET.value;
        self.issue(command, mode, out.len() as u32, 1)?;
        self.finish_single_pio_block(command, BLOCK_TIMEOUT_US, |host| host.read_block_if_ready(out))
    }

    /// After a one-block PIO command was issued: its response, its block moved by `step` (true
    /// once done, the error status on failure) within the block timeout, Transfer Complete within
    /// `complete_timeout_us` and the card status (a failure recovers the lines first).
    fn finish_single_pio_block(
        &mut self,
        command: &Command,
        complete_timeout_us: u64,
        mut step: impl FnMut(&mut Self) -> Result<bool, u32>,
    ) -> Result<Response, SdError> {
        let response = self.wait_command_complete(command)?;
        let deadline = Deadline::after_us(self.platform, BLOCK_TIMEOUT_US);
        loop {
            let mut failure = match step(self) {
                Ok(true) => break,
                Ok(false) if deadline.has_passed(self.platform) => {
                    let status = self.read(offsets::INTERRUPT_STATUS);
                    self.failure(*command, FailureKind::NoCompletion, status)
                }
                Ok(false) => {
                    core::hint::spin_loop();
                    continue;
                }
                Err(status) => self.failure(*command, failure_kind(status), status),
            };
            failure.blocks = 1;
            self.recover(true);
            return Err(failure.into());
        }
        self.wait_transfer_complete(command, complete_timeout_us, 1, 1)?;
        self.check_card_status(command, &response)?;
        Ok(response)
    }
}

impl<R: RegisterIo, P: Platform> SdhciHost<'_, R, P> {
    /// A command with one small block written by PIO (an eMMC's CMD19 bus test): `data.len()`
    /// bytes, a multiple of 4, once Buffer Write Ready allows (SDHCI §3.7.2.2 for writes).
    pub fn write_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        data: &[u8],
    ) -> Result<Response, SdError> {
        prefix_application_command(self, command, rca)?;
        self.issue(command, 0, data.len() as u32, 1)?;
        // Transfer Complete comes once the card has released its busy (§2.2.9).
        self.finish_single_pio_block(command, BUSY_TIMEOUT_US, |host| host.write_block_if_ready(data))
    }
}

/// The pause `quirks` ask for after a register write while SDCLK runs at `sd_clock_hz` (0: not
/// set yet, counted as the identification clock): their spacing in SD clock periods at or below
/// the identification clock, none above it.
fn write_spacing_us(quirks: &HostQuirks, sd_clock_hz: u32) -> u64 {
    let clocks = quirks.slow_clock_write_spacing_clocks;
    let clock_hz = if sd_clock_hz == 0 { IDENTIFICATION_CLOCK_HZ } else { sd_clock_hz };
    if clocks == 0 || clock_hz > IDENTIFICATION_CLOCK_HZ {
        return 0;
    }
    (u64::from(clocks) * 1_000_000).div_ceil(u64::from(clock_hz))
}

/// The failure kind of Error Interrupt Status bits (bits 31:16 of word 0x30), most specific
/// first: a data CRC error that led to an auto-CMD12 error is a CRC error.
pub fn failure_kind(status: u32) -> FailureKind {
    if status & interrupt::COMMAND_TIMEOUT != 0 {
        FailureKind::CommandTimeout
    } else if status & (interrupt::COMMAND_CRC | interrupt::COMMAND_END_BIT | interrupt::COMMAND_INDEX) != 0 {
        FailureKind::CommandLine
    } else if status & interrupt::DATA_TIMEOUT != 0 {
        FailureKind::DataTimeout
    } else if status & (interrupt::DATA_CRC | interrupt::DATA_END_BIT) != 0 {
        FailureKind::DataLine
    } else {
        FailureKind::HostTransfer
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn qemu_capabilities_decode_as_documented() {
        // docs/qemu.md §2: raspi Arasan/EMMC2 0x052134b4 (v3), sdhci-pci 0x057834b4 (v2 by default).
        let raspi = HostCapabilities { low: 0x0521_34b4, high: 0, version: SpecVersion(2), register: None };
        assert_eq!(raspi.base_clock_hz(), Some(52_000_000));
        assert_eq!(raspi.max_block_bytes(), 1024);
        assert!(raspi.high_speed() && raspi.voltage_3v3() && raspi.voltage_1v8());
        assert!(!raspi.adma2() && !raspi.sdma() && !raspi.system_bus_64_bit());
        assert_eq!(
            raspi.to_string(),
            "SDHCI 3.00, caps 0x052134b4/0x00000000: base clock 52 MHz, max block 1024 B, high speed, \
             3.3 V, 1.8 V, no DMA"
        );
        let pci = HostCapabilities { low: 0x0578_34b4, high: 0, version: SpecVersion(1), register: None };
        assert_eq!(pci.max_block_bytes(), 512);
        assert!(pci.adma2() && pci.sdma());
        assert!(pci.to_string().ends_with("SDMA, ADMA2"));
        // Before v3 the base clock field is 6 bits wide (bits 13:8).
        let v2_wide_field =
            HostCapabilities { low: 0x0000_f200, high: 0, version: SpecVersion(1), register: None };
        assert_eq!(v2_wide_field.base_clock_hz(), Some(50_000_000));
        assert_eq!(
            HostCapabilities { low: 0, high: 0, version: SpecVersion(2), register: None }.base_clock_hz(),
            None
        );
        // UHS bits only count from v3.
        let uhs = HostCapabilities { low: 0, high: 0b111, version: SpecVersion(2), register: None };
        assert!(uhs.sdr50() && uhs.sdr104() && uhs.ddr50());
        assert!(!HostCapabilities { version: SpecVersion(1), ..uhs }.sdr50());
    }

    /// A register block that answers only the Capabilities and Version words.
    struct CapabilityRegisters {
        low: u32,
        high: u32,
    }
    impl RegisterIo for CapabilityRegisters {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match offset_bytes {
                offsets::CAPABILITIES => self.low,
                offsets::CAPABILITIES_HIGH => self.high,
                offsets::SLOT_STATUS_VERSION => 0x0002_0000,
                _ => 0,
            }
        }
        fn write32(&self, _: usize, _: u32) {}
    }

    #[test]
    fn the_quirks_replace_what_the_register_cannot_be_trusted_with() {
        use crate::sdhci::quirks::{ARASAN_EMMC, BCM2711_EMMC2, BCM2712_SDHCI};
        // A Pi 3 Arasan whose register reads 0: Linux's values, and the zero kept for the report.
        let zero = CapabilityRegisters { low: 0, high: 0 };
        let arasan = HostCapabilities::read(&zero, ARASAN_EMMC.capabilities);
        assert_eq!((arasan.low, arasan.high, arasan.register), (0x0121_0000, 0x30, Some((0, 0))));
        assert_eq!(arasan.version, SpecVersion::V3_00);
        assert!(arasan.voltage_3v3() && arasan.high_speed() && !arasan.adma2());
        assert!(arasan
            .to_string()
            .contains("caps 0x01210000/0x00000030 (register reads 0x00000000/0x00000000)"));
        // The Pi 5: whatever UHS bits the register has, the board's modes replace them; the
        // rest of the word (here "SDR50 needs tuning", bit 13) stays.
        let pi5_register = CapabilityRegisters { low: 0x1469_c800, high: (1 << 13) | 0b100 };
        let pi5 = HostCapabilities::read(&pi5_register, BCM2712_SDHCI.capabilities);
        assert_eq!(pi5.high, (1 << 13) | 0b111);
        assert_eq!(pi5.register, Some((0x1469_c800, (1 << 13) | 0b100)));
        assert!(pi5.sdr104() && pi5.ddr50() && pi5.sdr50() && pi5.sdr50_needs_tuning());
        // A board with DDR50 only: SDR50 and SDR104 go, whatever the register said.
        let ddr50_only = crate::sdhci::quirks::CapabilitySource::RegisterWithBoardUhs { uhs_bits: 0b100 };
        let all_uhs = CapabilityRegisters { low: 0, high: 0b011 };
        assert_eq!(HostCapabilities::read(&all_uhs, ddr50_only).high, 0b100);
        // EMMC2: the register as it is.
        let emmc2 = HostCapabilities::read(&pi5_register, BCM2711_EMMC2.capabilities);
        assert_eq!((emmc2.high, emmc2.register), ((1 << 13) | 0b100, None));
        assert!(!emmc2.to_string().contains("register reads"));
    }

    #[test]
    fn base_clocks_from_firmware_and_capabilities_are_compared_in_whole_mhz() {
        let qemu = HostCapabilities { low: 0x0521_34b4, high: 0, version: SpecVersion(2), register: None };
        // QEMU's mailbox says 50 MHz for the EMMC clock, its capabilities 52 MHz.
        assert_eq!(qemu.base_clock_disagreement(50_000_000), Some(52_000_000));
        assert_eq!(qemu.base_clock_disagreement(51_000_000), Some(52_000_000));
        assert_eq!(qemu.base_clock_disagreement(52_000_000), None);
        assert_eq!(qemu.base_clock_disagreement(52_999_999), None);
        // A register without a base clock has nothing to disagree with.
        let none = HostCapabilities { low: 0, high: 0, version: SpecVersion(2), register: None };
        assert_eq!(none.base_clock_disagreement(200_000_000), None);
    }
}
