//! The SDHCI base clock (the SDCLK divider's input) on each host, in the order of what can be
//! trusted (docs/hardware.md §2.2):
//!
//! 1. The firmware's measurement, GET_CLOCK_RATE_MEASURED, rounded to whole MHz (circle
//!    `lib/machineinfo.cpp` `GetClockRate` asks for it first and rounds it).
//! 2. GET_CLOCK_RATE, which answers the rate *requested*, or 0 for EMMC, UART and EMMC2 on some
//!    firmware versions (raspberrypi/firmware #1521, #1619, #1624): a figure, not a fact.
//! 3. The Capabilities register's Base Clock Frequency (SDHCI §2.2.26), where it has one (BCM2711
//!    EMMC2 reads 100 MHz; the BCM2835 Arasan's register is not used).
//! 4. The quirks' fallback: 200 MHz for the Arasan (the firmware has run the EMMC clock at
//!    200 MHz since 2018; a 100 MHz guess would double every SD clock), 100 MHz for EMMC2.
//!
//! On BCM2712 the capabilities come first: Linux's `sdhci-brcmstb.c` has no `get_max_clock`, so
//! SDHCI's core takes the register's base clock, and what the firmware answers for clock 1 on a
//! Pi 5 is not known to be the host's.
#![forbid(unsafe_code)]

use super::host::HostCapabilities;
use super::quirks::BaseClockSource;
use crate::mailbox::{clock_rate_hz, measured_clock_rate_hz, round_to_mhz, tags, MailboxError, PropertyTags};
use core::fmt;

/// Where the chosen figure came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseClockOrigin {
    Measured { clock_id: u32 },
    Requested { clock_id: u32 },
    Capabilities,
    Fallback { clock_id: u32 },
}

/// The base clock to program dividers from, with what else was known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseClock {
    pub hz: u32,
    pub origin: BaseClockOrigin,
    /// The firmware's figure, when the capabilities' was preferred over a different one.
    pub firmware_disagreed_hz: Option<u32>,
    /// Why the firmware gave nothing usable, when it did not.
    pub firmware_error: Option<MailboxError>,
}

/// The firmware's figure for `clock_id`: measured (rounded), else requested.
fn firmware_figure(
    firmware: &dyn PropertyTags,
    clock_id: u32,
) -> Result<(u32, BaseClockOrigin), MailboxError> {
    match measured_clock_rate_hz(&firmware, clock_id) {
        Ok(hz) => Ok((round_to_mhz(hz), BaseClockOrigin::Measured { clock_id })),
        Err(_) => clock_rate_hz(&firmware, tags::GET_CLOCK_RATE, clock_id)
            .map(|hz| (hz, BaseClockOrigin::Requested { clock_id })),
    }
}

/// Chooses the base clock for a host whose quirks say `source` and whose capabilities read
/// `capabilities`; `None` when the capabilities alone decide and have nothing (a host that cannot
/// be clocked).
pub fn choose(
    firmware: Option<&dyn PropertyTags>,
    source: BaseClockSource,
    capabilities: &HostCapabilities,
) -> Option<BaseClock> {
    let from_capabilities = capabilities.base_clock_hz().map(|hz| BaseClock {
        hz,
        origin: BaseClockOrigin::Capabilities,
        firmware_disagreed_hz: None,
        firmware_error: None,
    });
    let (clock_id, fallback_hz, capabilities_first) = match source {
        BaseClockSource::Capabilities => return from_capabilities,
        BaseClockSource::Firmware { clock_id, fallback_hz } => (clock_id, fallback_hz, false),
        BaseClockSource::CapabilitiesThenFirmware { clock_id, fallback_hz } => (clock_id, fallback_hz, true),
    };
    let figure = firmware
        .ok_or(MailboxError::TagNotAnswered { tag: tags::GET_CLOCK_RATE })
        .and_then(|firmware| firmware_figure(firmware, clock_id));
    match (figure, from_capabilities) {
        (Ok((hz, _)), Some(capabilities)) if capabilities_first => Some(BaseClock {
            firmware_disagreed_hz: (hz.abs_diff(capabilities.hz) >= 1_000_000).then_some(hz),
            ..capabilities
        }),
        (Ok((hz, origin)), _) => {
            Some(BaseClock { hz, origin, firmware_disagreed_hz: None, firmware_error: None })
        }
        (Err(error), Some(capabilities)) => Some(BaseClock { firmware_error: Some(error), ..capabilities }),
        (Err(error), None) => Some(BaseClock {
            hz: fallback_hz,
            origin: BaseClockOrigin::Fallback { clock_id },
            firmware_disagreed_hz: None,
            firmware_error: Some(error),
        }),
    }
}

/// `200000000 Hz (firmware clock 1, measured)` and what else was found.
impl fmt::Display for BaseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} Hz (", self.hz)?;
        match self.origin {
            BaseClockOrigin::Measured { clock_id } => write!(f, "firmware clock {clock_id}, measured")?,
            BaseClockOrigin::Requested { clock_id } => {
                write!(f, "firmware clock {clock_id}: the rate requested, not measured")?
            }
            BaseClockOrigin::Capabilities => write!(f, "capabilities")?,
            BaseClockOrigin::Fallback { clock_id } => write!(f, "fallback for firmware clock {clock_id}")?,
        }
        if let Some(firmware_hz) = self.firmware_disagreed_hz {
            write!(f, "; the firmware says {firmware_hz} Hz")?;
        }
        if let Some(error) = self.firmware_error.filter(|_| self.origin != BaseClockOrigin::Capabilities) {
            write!(f, "; {error}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::firmware_model::FirmwareModel;
    use crate::mailbox::clocks;
    use crate::sdhci::regs::SpecVersion;
    use std::string::ToString;

    fn capabilities(base_mhz: u32) -> HostCapabilities {
        HostCapabilities { low: base_mhz << 8, high: 0, version: SpecVersion::V3_00, register: None }
    }
    const ARASAN: BaseClockSource =
        BaseClockSource::Firmware { clock_id: clocks::EMMC, fallback_hz: 200_000_000 };
    const BCM2712: BaseClockSource =
        BaseClockSource::CapabilitiesThenFirmware { clock_id: clocks::EMMC, fallback_hz: 200_000_000 };

    #[test]
    fn the_measurement_comes_first_rounded_to_whole_mhz() {
        let mut firmware = FirmwareModel::pi4();
        firmware.set_requested(clocks::EMMC2, 100_000_000);
        firmware.set_actual_clock_hz(clocks::EMMC2, 200_000_000);
        firmware.measurement_error_hz = 3_210;
        let emmc2 = BaseClockSource::Firmware { clock_id: clocks::EMMC2, fallback_hz: 100_000_000 };
        let chosen = choose(Some(&firmware), emmc2, &capabilities(100)).unwrap();
        assert_eq!((chosen.hz, chosen.origin), (200_000_000, BaseClockOrigin::Measured { clock_id: 12 }));
        assert_eq!(chosen.to_string(), "200000000 Hz (firmware clock 12, measured)");
    }

    #[test]
    fn a_firmware_answering_zero_leaves_the_arasan_at_200_mhz() {
        // raspberrypi/firmware #1619: GET_CLOCK_RATE answers 0 for EMMC; QEMU-like, no measurement.
        let mut firmware = FirmwareModel::pi4().not_answering(&[tags::GET_CLOCK_RATE_MEASURED]);
        firmware.zero_rate_clocks.push(clocks::EMMC);
        let chosen = choose(Some(&firmware), ARASAN, &capabilities(0)).unwrap();
        assert_eq!((chosen.hz, chosen.origin), (200_000_000, BaseClockOrigin::Fallback { clock_id: 1 }));
        assert!(chosen
            .to_string()
            .starts_with("200000000 Hz (fallback for firmware clock 1; firmware did not answer"));
        // No firmware at all: the capabilities where they have a base clock, else the fallback.
        let from_capabilities = choose(None, ARASAN, &capabilities(52)).unwrap();
        assert_eq!(
            (from_capabilities.hz, from_capabilities.origin),
            (52_000_000, BaseClockOrigin::Capabilities)
        );
        // Why the firmware's figure was not used stays with the choice.
        assert_eq!(
            from_capabilities.firmware_error,
            Some(MailboxError::TagNotAnswered { tag: tags::GET_CLOCK_RATE })
        );
        assert_eq!(choose(None, ARASAN, &capabilities(0)).unwrap().hz, 200_000_000);
        // Without a measurement the requested rate is used, and said to be one.
        let requested = FirmwareModel::pi4().not_answering(&[tags::GET_CLOCK_RATE_MEASURED]);
        let chosen = choose(Some(&requested), ARASAN, &capabilities(0)).unwrap();
        assert_eq!(chosen.origin, BaseClockOrigin::Requested { clock_id: 1 });
    }

    #[test]
    fn on_bcm2712_the_capabilities_win_over_a_different_firmware_figure() {
        let firmware = FirmwareModel::pi4();
        firmware.set_requested(clocks::EMMC, 100_000_000);
        let chosen = choose(Some(&firmware), BCM2712, &capabilities(200)).unwrap();
        assert_eq!((chosen.hz, chosen.origin), (200_000_000, BaseClockOrigin::Capabilities));
        assert_eq!(chosen.firmware_disagreed_hz, Some(100_000_000));
        assert_eq!(chosen.to_string(), "200000000 Hz (capabilities; the firmware says 100000000 Hz)");
        // PCI: the capabilities only.
        assert_eq!(choose(None, BaseClockSource::Capabilities, &capabilities(0)), None);
    }
}
