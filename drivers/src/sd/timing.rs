//! Bus timings (SD Physical Layer Simplified Specification v9.00 §3.9 bus speed modes), the
//! user's limits on them (`sd.speed`, `sd.max-clock-hz`), and what a failed tuning procedure
//! reports (SD §4.2.4.5; SDHCI §2.2.24).
#![forbid(unsafe_code)]

use super::card_registers::BusSpeedFunction;

/// CMD19 repetitions before tuning is declared failed (SD §4.2.4.5 and SDHCI §2.2.24: 40).
pub const TUNING_ATTEMPTS: u32 = 40;
/// The tuning block on a 4-bit bus (SD §4.2.4.5: 64 bytes).
pub const TUNING_BLOCK_BYTES: u32 = 64;

/// The tuning block an eMMC in HS200 sends for CMD21 on a bus of `bus_width_bits` lines
/// (JESD84-B51 §6.6.5: 128 bytes on 8 lines, 64 on 4; Linux `mmc_send_tuning`).
pub const fn mmc_hs200_tuning_block_bytes(bus_width_bits: u8) -> u32 {
    if bus_width_bits == 8 {
        128
    } else {
        64
    }
}

/// The bus timing in use (SD §3.9; SDHCI Host Control 2 UHS Mode Select).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    DefaultSpeed,
    HighSpeed,
    Sdr25,
    Sdr50,
    Sdr104,
    Ddr50,
    /// eMMC backward-compatible timing, up to 26 MHz (JESD84-B51 §5.3.2).
    MmcLegacy,
    /// eMMC High Speed SDR, up to 52 MHz (HS_TIMING 1).
    MmcHighSpeed,
    /// eMMC High Speed DDR, 52 MHz with data on both edges (HS_TIMING 1, DDR BUS_WIDTH).
    MmcDdr52,
    /// eMMC HS200, up to 200 MHz SDR at 1.8 V, tuned with CMD21 (HS_TIMING 2).
    MmcHs200,
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::DefaultSpeed => "Default Speed (DS)",
            Timing::HighSpeed => "High Speed (HS)",
            Timing::Sdr25 => "UHS-I SDR25",
            Timing::Sdr50 => "UHS-I SDR50",
            Timing::Sdr104 => "UHS-I SDR104",
            Timing::Ddr50 => "UHS-I DDR50",
            Timing::MmcLegacy => "legacy",
            Timing::MmcHighSpeed => "HS52",
            Timing::MmcDdr52 => "DDR52",
            Timing::MmcHs200 => "HS200",
        }
    }

    /// The fastest SDCLK the timing allows (SD §3.9.1; JESD84-B51 §5.3.2).
    pub fn max_clock_hz(self) -> u32 {
        match self {
            Timing::DefaultSpeed => 25_000_000,
            Timing::HighSpeed | Timing::Sdr25 | Timing::Ddr50 => 50_000_000,
            Timing::Sdr50 => 100_000_000,
            Timing::Sdr104 => 208_000_000,
            Timing::MmcLegacy => 26_000_000,
            Timing::MmcHighSpeed | Timing::MmcDdr52 => 52_000_000,
            Timing::MmcHs200 => 200_000_000,
        }
    }

    /// Whether this is an eMMC timing.
    pub fn is_mmc(self) -> bool {
        matches!(self, Timing::MmcLegacy | Timing::MmcHighSpeed | Timing::MmcDdr52 | Timing::MmcHs200)
    }

    /// The CMD6 function group 1 access mode that selects this SD timing (SD §4.3.10.3); eMMC
    /// timings are set through EXT_CSD, not CMD6 functions, and answer Default Speed.
    pub fn function(self) -> BusSpeedFunction {
        match self {
            Timing::DefaultSpeed
            | Timing::MmcLegacy
            | Timing::MmcHighSpeed
            | Timing::MmcDdr52
            | Timing::MmcHs200 => BusSpeedFunction::DefaultSpeed,
            Timing::HighSpeed | Timing::Sdr25 => BusSpeedFunction::HighSpeed,
            Timing::Sdr50 => BusSpeedFunction::Sdr50,
            Timing::Sdr104 => BusSpeedFunction::Sdr104,
            Timing::Ddr50 => BusSpeedFunction::Ddr50,
        }
    }

    /// Whether the host must run the tuning procedure before using this timing (SD §4.2.4.5;
    /// SDHCI §2.2.26 "Use Tuning for SDR50"; JESD84-B51 §6.6.5 for HS200).
    pub fn needs_tuning(self, sdr50_needs_tuning: bool) -> bool {
        matches!(self, Timing::Sdr104 | Timing::MmcHs200) || (self == Timing::Sdr50 && sdr50_needs_tuning)
    }

    /// Whether data moves on both clock edges.
    pub fn is_ddr(self) -> bool {
        matches!(self, Timing::Ddr50 | Timing::MmcDdr52)
    }
}

/// Choices the user can make (`sd.*` options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BringUpOptions {
    /// Allow CMD6 to leave Default Speed.
    pub allow_speed_switch: bool,
    /// Upper bound on the SD clock.
    pub max_clock_hz: Option<u32>,
    /// An eMMC may be run at HS200: its I/O voltage (VCCQ) is known to be 1.8 V on this board
    /// (HS200 is a 1.8 V or 1.2 V timing, JESD84-B51 §5.3.2; the host cannot tell).
    pub emmc_hs200: bool,
}

impl Default for BringUpOptions {
    fn default() -> Self {
        BringUpOptions { allow_speed_switch: true, max_clock_hz: None, emmc_hs200: false }
    }
}

impl BringUpOptions {
    /// The SD clock to ask for with `timing`: its ceiling, capped by `sd.max-clock-hz`.
    pub fn clock_for(&self, timing: Timing) -> u32 {
        self.max_clock_hz.map_or(timing.max_clock_hz(), |cap| cap.min(timing.max_clock_hz()))
    }
}

/// Why the tuning procedure gave no tuned sampling clock (SD §4.2.4.5; SDHCI §2.2.24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TuningFailure {
    /// CMD19 could not be issued (command or data inhibit stayed set).
    #[error("CMD19 number {} could not be issued", .commands + 1)]
    NotIssued { commands: u32 },
    /// Buffer Read Ready did not come, or an error bit came instead.
    #[error("no Buffer Read Ready for CMD19 number {} (interrupt status {interrupt_status:#010x})", .commands + 1)]
    NoBufferReadReady { commands: u32, interrupt_status: u32 },
    /// The controller ended tuning without selecting the tuned sampling clock.
    #[error("the controller ended tuning after {commands} CMD19 without selecting the tuned clock")]
    NotTuned { commands: u32 },
    /// Execute Tuning was still set after the specification's 40 CMD19s.
    #[error("Execute Tuning still set after {TUNING_ATTEMPTS} CMD19")]
    StillExecuting,
}

/// A faster timing that was switched to and then given up, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingFallback {
    pub wanted: Timing,
    pub reason: TuningFailure,
}
