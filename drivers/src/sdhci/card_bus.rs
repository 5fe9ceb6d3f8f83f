//! The SDHCI host as the SD protocol's bus (`sd::bus`): commands, register reads, bus width and
//! 3.3 V timings for [`CardBus`]; the 1.8 V switch's host steps (SDHCI §3.6.1), UHS-I modes in
//! Host Control 2 and the tuning procedure (§2.2.24) for [`UhsBus`].
#![forbid(unsafe_code)]

use super::host::{failure_kind, SdhciHost};
use super::regs::{offsets, HOST_CONTROL2, PRESENT_STATE};
use super::tuning::execute_tuning;
use crate::sd::bus::{
    BusMode, BusWidth, CardBus, DataLines, Response, UhsBus, BLOCK_TIMEOUT_US, BUSY_TIMEOUT_US,
};
use crate::sd::command::Command;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::timing::{Timing, TuningFailure};
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// The slowest base clock that reaches SDR50's and SDR104's 100 MHz and more.
const UHS_FAST_BASE_CLOCK_HZ: u32 = 100_000_000;

impl<R: RegisterIo, P: Platform> CardBus for SdhciHost<'_, R, P> {
    type Platform = P;

    fn platform(&self) -> &P {
        SdhciHost::platform(self)
    }
    fn send_command(&mut self, command: &Command, rca: u16) -> Result<Response, SdError> {
        SdhciHost::send_command(self, command, rca)
    }
    fn read_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        out: &mut [u8],
    ) -> Result<Response, SdError> {
        SdhciHost::read_register_data(self, command, rca, out)
    }
    /// One block by PIO on Buffer Write Ready, then Transfer Complete, which the host raises
    /// once the card has released its busy (§2.2.9), and the card status of the response.
    fn write_register_data(
        &mut self,
        command: &Command,
        _rca: u16,
        data: &[u8],
    ) -> Result<Response, SdError> {
        self.issue(command, 0, data.len() as u32, 1)?;
        let response = self.wait_command_complete(command)?;
        let deadline = Deadline::after_us(self.platform(), BLOCK_TIMEOUT_US);
        loop {
            match self.write_block_if_ready(data) {
                Ok(true) => break,
                Ok(false) if !deadline.has_passed(self.platform()) => core::hint::spin_loop(),
                Ok(false) => {
                    let status = self.read(offsets::INTERRUPT_STATUS);
                    let failure = self.failure(*command, FailureKind::NoCompletion, status);
                    self.recover(true);
                    return Err(failure.into());
                }
                Err(status) => {
                    let failure = self.failure(*command, failure_kind(status), status);
                    self.recover(true);
                    return Err(failure.into());
                }
            }
        }
        self.wait_transfer_complete(command, BUSY_TIMEOUT_US, 1, 1)?;
        self.check_card_status(command, &response)?;
        Ok(response)
    }
    fn set_bus_width(&mut self, width: BusWidth) -> Result<(), SdError> {
        SdhciHost::set_bus_width(self, width)
    }
    fn bus_mode(&self) -> BusMode {
        SdhciHost::bus_mode(self)
    }
    fn supports_high_speed(&self) -> bool {
        self.capabilities().high_speed()
    }
    fn set_timing_3v3(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError> {
        if timing != Timing::DefaultSpeed {
            self.set_high_speed();
        }
        self.set_clock(target_hz)
    }
}

impl<R: RegisterIo, P: Platform> UhsBus for SdhciHost<'_, R, P> {
    fn initialize(&mut self) -> Result<(), SdError> {
        SdhciHost::initialize(self)
    }
    fn check_card_present(&self) -> Result<(), SdError> {
        if !self.card_detected() {
            return Err(SdError::NoCard { present_state: self.present_state() });
        }
        Ok(())
    }
    fn power_off(&mut self) {
        SdhciHost::power_off(self)
    }
    /// The board's quirks allow it, the capabilities list 1.8 V, and Host Control 2 exists (v3).
    fn can_signal_at_1v8(&self) -> bool {
        let capabilities = self.capabilities();
        self.quirks().can_switch_to_1v8 && capabilities.voltage_1v8() && capabilities.version.at_least_v3()
    }
    fn stop_sd_clock(&mut self) {
        SdhciHost::stop_sd_clock(self)
    }
    fn start_sd_clock(&mut self) {
        SdhciHost::start_sd_clock(self)
    }
    /// Present State's DAT[3:0] Line Signal Level (§2.2.9).
    fn data_lines(&self) -> DataLines {
        let state = self.present();
        DataLines { levels: state.read(PRESENT_STATE::DAT_LEVEL) as u8, register: state.get() }
    }
    fn enable_1v8_signalling(&mut self) {
        self.modify_host_control2(0, HOST_CONTROL2::SIGNALING_1V8::SET.value);
    }
    fn confirm_1v8_signalling(&self) -> Result<(), SdError> {
        if !self.host_control2().is_set(HOST_CONTROL2::SIGNALING_1V8) {
            return Err(SdError::UnusableHost {
                reason: "1.8 V signalling enable did not stay set",
                value: self.read(offsets::AUTO_CMD_ERROR_HOST_CONTROL2),
            });
        }
        Ok(())
    }
    /// What the capabilities list, SDR50 and SDR104 only from a base clock of 100 MHz or more.
    fn supports_uhs_timing(&self, timing: Timing) -> bool {
        let capabilities = self.capabilities();
        let fast_base_clock = self.base_clock_hz() >= UHS_FAST_BASE_CLOCK_HZ;
        match timing {
            Timing::Sdr104 => capabilities.sdr104() && fast_base_clock,
            Timing::Ddr50 => capabilities.ddr50(),
            Timing::Sdr50 => capabilities.sdr50() && fast_base_clock,
            Timing::Sdr25 => true,
            Timing::DefaultSpeed | Timing::HighSpeed => false,
        }
    }
    fn sdr50_needs_tuning(&self) -> bool {
        self.capabilities().sdr50_needs_tuning()
    }
    fn set_uhs_timing(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError> {
        self.switch_uhs_mode(uhs_mode(timing), target_hz)
    }
    fn execute_tuning(&mut self, command: &Command, block_bytes: u32) -> Result<(), TuningFailure> {
        execute_tuning(self, command, block_bytes)
    }
    fn reset_tuning(&mut self) {
        SdhciHost::reset_tuning(self)
    }
}

/// Host Control 2's UHS Mode Select value for `timing` (§2.2.24: SDR12 0, SDR25 1, SDR50 2,
/// SDR104 3, DDR50 4).
fn uhs_mode(timing: Timing) -> u32 {
    match timing {
        Timing::DefaultSpeed => 0,
        Timing::HighSpeed | Timing::Sdr25 => 1,
        Timing::Sdr50 => 2,
        Timing::Sdr104 => 3,
        Timing::Ddr50 => 4,
    }
}
