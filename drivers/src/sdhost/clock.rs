//! Who sets the sdhost's SD clock. The sdhost divides the VPU core clock (SDCLK = core /
//! (SDCDIV + 2)), and on a Pi Zero, Zero W, Pi 3, 3+, Zero 2 W and CM3 the core clock moves
//! between 250 and 400 MHz with load, throttling and `core_freq` (raspberrypi/documentation
//! `config_txt/overclocking.adoc`): a divider computed once for 250 MHz gives 80 MHz instead of
//! 50 MHz when the core runs at 400. So, as Linux's `bcm2835-sdhost.c` (`bcm2835_sdhost_probe`,
//! `bcm2835_sdhost_set_clock`) and circle's `addon/SDCard/sdhost.cpp` do:
//!
//! 1. Ask the firmware with SET_SDHOST_CLOCK {0, ~0, ~0}. A firmware that changes the last two
//!    words owns the divider: every clock change is SET_SDHOST_CLOCK {Hz, 0, 0}, the clock
//!    running is the larger of the two SD clocks it answers, and SDCDIV is never written (the
//!    firmware reprograms it when it moves the core clock).
//! 2. Otherwise the driver divides a core clock it was told: the fastest the core may run,
//!    GET_MAX_CLOCK_RATE, when the firmware answers it, so that the SD clock is never above the
//!    one asked for even when the core speeds up later (a slower core gives a slower, still
//!    correct, clock); else GET_CLOCK_RATE_MEASURED rounded to whole MHz (circle's
//!    `lib/machineinfo.cpp` `GetClockRate`), else GET_CLOCK_RATE (the rate requested, not
//!    necessarily running: raspberrypi/firmware #1521, #1619), else 250 MHz.
#![forbid(unsafe_code)]

use crate::mailbox::{
    clock_rate_hz, clocks, measured_clock_rate_hz, round_to_mhz, tags, MailboxError, PropertyTags,
};
use core::fmt;

/// The VPU core clock of a Pi 1-3 when the firmware does not answer (250 MHz: docs/aarch32-pis.md §7).
pub const CORE_CLOCK_FALLBACK_HZ: u32 = 250_000_000;

/// How the driver learned the core clock it divides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreClockOrigin {
    /// GET_MAX_CLOCK_RATE of the core clock: the fastest it may run.
    Maximum,
    /// GET_CLOCK_RATE_MEASURED, rounded to whole MHz.
    Measured,
    /// GET_CLOCK_RATE (the rate requested).
    Requested,
    /// Nothing answered: [`CORE_CLOCK_FALLBACK_HZ`].
    Fallback,
}

/// Who sets the SD clock.
#[derive(Clone, Copy)]
pub enum SdhostClock<'p> {
    /// The firmware (SET_SDHOST_CLOCK answered): the driver never writes SDCDIV.
    Firmware(&'p dyn PropertyTags),
    /// The driver, dividing `core_hz`.
    Divider { core_hz: u32, origin: CoreClockOrigin },
}

impl fmt::Debug for SdhostClock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdhostClock::Firmware(_) => write!(f, "Firmware"),
            SdhostClock::Divider { core_hz, origin } => write!(f, "Divider({core_hz} Hz, {origin:?})"),
        }
    }
}

impl<'p> SdhostClock<'p> {
    /// Asks `firmware` (when there is one) who sets the clock, as the module documentation says.
    pub fn probe(firmware: Option<&'p dyn PropertyTags>) -> SdhostClock<'p> {
        let Some(firmware) = firmware else {
            return SdhostClock::Divider {
                core_hz: CORE_CLOCK_FALLBACK_HZ,
                origin: CoreClockOrigin::Fallback,
            };
        };
        let mut answer = [!0u32; 3];
        let probed = firmware.call_tag(tags::SET_SDHOST_CLOCK, &[0, !0, !0], &mut answer);
        if matches!(probed, Ok(2..)) && answer[1] != !0 {
            return SdhostClock::Firmware(firmware);
        }
        let maximum = clock_rate_hz(&firmware, tags::GET_MAX_CLOCK_RATE, clocks::CORE);
        let measured = measured_clock_rate_hz(&firmware, clocks::CORE).map(round_to_mhz);
        let requested = clock_rate_hz(&firmware, tags::GET_CLOCK_RATE, clocks::CORE);
        let known = [
            (maximum, CoreClockOrigin::Maximum),
            (measured, CoreClockOrigin::Measured),
            (requested, CoreClockOrigin::Requested),
        ];
        let (core_hz, origin) = known
            .into_iter()
            .find_map(|(hz, origin)| hz.ok().filter(|hz| *hz > 0).map(|hz| (hz, origin)))
            .unwrap_or((CORE_CLOCK_FALLBACK_HZ, CoreClockOrigin::Fallback));
        // The maximum is only an upper bound; a measured rate above it is what runs.
        let core_hz = match (origin, measured) {
            (CoreClockOrigin::Maximum, Ok(measured)) if measured > core_hz => measured,
            _ => core_hz,
        };
        SdhostClock::Divider { core_hz, origin }
    }

    /// Asks the firmware for an SD clock of `target_hz`; the clock it gives.
    pub fn set_by_firmware(firmware: &dyn PropertyTags, target_hz: u32) -> Result<u32, MailboxError> {
        let mut answer = [0u32; 3];
        match firmware.call_tag(tags::SET_SDHOST_CLOCK, &[target_hz, 0, 0], &mut answer)? {
            3.. if answer[1].max(answer[2]) > 0 => Ok(answer[1].max(answer[2])),
            _ => Err(MailboxError::TagNotAnswered { tag: tags::SET_SDHOST_CLOCK }),
        }
    }
}

/// `firmware sets the divider (SET_SDHOST_CLOCK)`, or `core clock 400 MHz (GET_MAX_CLOCK_RATE),
/// divided by the driver`.
impl fmt::Display for SdhostClock<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SdhostClock::Firmware(_) => {
                write!(f, "the firmware sets the divider and keeps it right when the core clock moves (SET_SDHOST_CLOCK)")
            }
            SdhostClock::Divider { core_hz, origin } => {
                let origin = match origin {
                    CoreClockOrigin::Maximum => "the fastest the core may run, GET_MAX_CLOCK_RATE",
                    CoreClockOrigin::Measured => "GET_CLOCK_RATE_MEASURED, rounded",
                    CoreClockOrigin::Requested => "GET_CLOCK_RATE: the rate requested, not measured",
                    CoreClockOrigin::Fallback => "the firmware did not answer: assumed",
                };
                write!(
                    f,
                    "core clock {core_hz} Hz ({origin}), divided by the driver (SET_SDHOST_CLOCK not answered)"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::firmware_model::FirmwareModel;
    use std::string::ToString;

    #[test]
    fn a_firmware_that_answers_set_sdhost_clock_owns_the_divider() {
        let firmware = FirmwareModel::pi3_core_unlocked();
        let clock = SdhostClock::probe(Some(&firmware));
        assert!(matches!(clock, SdhostClock::Firmware(_)), "{clock:?}");
        // The probe is {0, ~0, ~0}, as Linux sends it.
        assert_eq!(firmware.calls.borrow()[0].request, [0, !0, !0]);
        assert_eq!(SdhostClock::set_by_firmware(&firmware, 50_000_000), Ok(50_000_000));
        // 250 MHz / 5 = 50 MHz idle; 400 MHz / 8 = 50 MHz under load.
        assert_eq!(firmware.sdhost_card_clock_hz(), Some(50_000_000));
        firmware.put_core_under_load();
        assert_eq!(firmware.sdhost_card_clock_hz(), Some(50_000_000));
        assert!(clock.to_string().contains("SET_SDHOST_CLOCK"));
    }

    #[test]
    fn without_it_the_driver_divides_the_fastest_core_clock() {
        let mut firmware = FirmwareModel::pi3_core_unlocked().not_answering(&[tags::SET_SDHOST_CLOCK]);
        firmware.measurement_error_hz = 2_345;
        // Idle: GET_CLOCK_RATE and the measurement say 250 MHz; the core may run at 400.
        assert_eq!(
            SdhostClock::probe(Some(&firmware)).to_string(),
            "core clock 400000000 Hz (the fastest the core may run, GET_MAX_CLOCK_RATE), divided by the driver \
             (SET_SDHOST_CLOCK not answered)"
        );
        // Without a maximum: the measurement, rounded to whole MHz.
        firmware.unanswered.push(tags::GET_MAX_CLOCK_RATE);
        assert!(matches!(
            SdhostClock::probe(Some(&firmware)),
            SdhostClock::Divider { core_hz: 250_000_000, origin: CoreClockOrigin::Measured }
        ));
        // QEMU's firmware answers only GET_CLOCK_RATE (and GET_MAX_CLOCK_RATE with the same rate).
        let qemu = FirmwareModel::qemu_like();
        qemu.set_requested(clocks::CORE, 350_000_000);
        assert!(matches!(
            SdhostClock::probe(Some(&qemu)),
            SdhostClock::Divider { core_hz: 350_000_000, origin: CoreClockOrigin::Maximum }
        ));
        assert!(matches!(
            SdhostClock::probe(None),
            SdhostClock::Divider { core_hz: CORE_CLOCK_FALLBACK_HZ, origin: CoreClockOrigin::Fallback }
        ));
        assert_eq!(round_to_mhz(399_997_655), 400_000_000);
        assert_eq!(round_to_mhz(250_400_000), 250_000_000);
    }
}
