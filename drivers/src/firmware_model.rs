//! A model of the VideoCore firmware's property tags for host tests: the tags the conditions of a
//! run and the activity LED use (GET_THROTTLED, GET_TEMPERATURE, GET_MAX_TEMPERATURE,
//! GET_CLOCK_RATE, GET_CLOCK_RATE_MEASURED, GET_MAX_CLOCK_RATE, SET_CLOCK_RATE, SET_GPIO_STATE),
//! as strict as the firmware where it is documented (the firmware wiki's tag list; Linux
//! `drivers/hwmon/raspberrypi-hwmon.c` for the sticky bits; `gpio-raspberrypi-exp.c` for the
//! expander lines 128-135) and configurable into the boards the tests need: a throttled board, an
//! under-voltage board, a SoC that cools down after some polls, a firmware that does not know a
//! tag (QEMU leaves GET_CLOCK_RATE_MEASURED unanswered) and one that answers nothing.
#![forbid(unsafe_code)]

extern crate std;

use crate::mailbox::{clocks, tags, MailboxError, PropertyTags};
use core::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::vec::Vec;

/// The firmware's GPIO expander: lines 128 to 135.
pub const EXPANDER_LINES: core::ops::RangeInclusive<u32> = 128..=135;
/// The "has occurred" bits: bit n + 16 records that "now" bit n was set since the last clear.
const STICKY_SHIFT: u32 = 16;
const NOW_BITS: u32 = 0xf;
/// The request word with which Linux's `raspberrypi-hwmon.c` asks the firmware to clear the
/// sticky bits once answered (the model's own copy, so that a driver sending anything else is
/// caught).
const CLEAR_REQUEST: u32 = 0xffff;

/// One property call the model saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub tag: u32,
    pub request: Vec<u32>,
}

/// A firmware answering property tags like a Pi's (see the module documentation).
pub struct FirmwareModel {
    /// Answers nothing at all: every call times out, as with a firmware that never started.
    pub silent: bool,
    /// Tags left unanswered (the response bit stays clear, as QEMU does for tags it lacks).
    pub unanswered: Vec<u32>,
    /// The "now" throttle bits (0-3) the board has while it runs.
    pub throttled_now: Cell<u32>,
    sticky: Cell<u32>,
    /// Successive answers of GET_TEMPERATURE in m°C; the last one repeats.
    temperatures_millic: RefCell<VecDeque<u32>>,
    pub max_temperature_millic: u32,
    /// GET_CLOCK_RATE per clock id (what was requested), and what SET_CLOCK_RATE sets.
    requested_hz: RefCell<Vec<(u32, u32)>>,
    /// GET_CLOCK_RATE_MEASURED per clock id, as a fraction of the requested rate (per mille),
    /// e.g. 1000 for a clock that runs at its request, 800 for one held lower.
    pub measured_per_mille: u32,
    pub max_arm_hz: u32,
    /// The expander lines' levels as SET_GPIO_STATE left them.
    expander: RefCell<[Option<bool>; 8]>,
    /// Every call, in order.
    pub calls: RefCell<Vec<Call>>,
}

impl Default for FirmwareModel {
    fn default() -> Self {
        FirmwareModel {
            silent: false,
            unanswered: Vec::new(),
            throttled_now: Cell::new(0),
            sticky: Cell::new(0),
            temperatures_millic: RefCell::new(VecDeque::from([48_500])),
            max_temperature_millic: 85_000,
            requested_hz: RefCell::new(std::vec![
                (clocks::ARM, 600_000_000),
                (clocks::CORE, 500_000_000),
                (clocks::EMMC, 200_000_000),
                (clocks::EMMC2, 100_000_000),
                (clocks::UART, 48_000_000),
            ]),
            measured_per_mille: 1000,
            max_arm_hz: 1_500_000_000,
            expander: RefCell::new([None; 8]),
            calls: RefCell::new(Vec::new()),
        }
    }
}

impl FirmwareModel {
    /// A Pi 4 at rest, 48.5 °C, nothing throttled.
    pub fn pi4() -> Self {
        FirmwareModel::default()
    }

    /// A board on a weak supply: under-voltage now and since boot (bits 0 and 16).
    pub fn under_voltage() -> Self {
        let model = FirmwareModel::default();
        model.throttled_now.set(1 << 0);
        model.sticky.set(1 << STICKY_SHIFT);
        model
    }

    /// A hot board: ARM frequency capped, throttled and at the soft limit now (bits 1-3) and
    /// since boot (17-19).
    pub fn throttled() -> Self {
        let model =
            FirmwareModel { temperatures_millic: RefCell::new(VecDeque::from([82_000])), ..Self::default() };
        model.throttled_now.set(0b1110);
        model.sticky.set(0b1110 << STICKY_SHIFT);
        model
    }

    /// QEMU's model (`hw/misc/bcm2835_property.c`): 25.0 °C, limit 99.0 °C, GET_THROTTLED 0,
    /// GET_CLOCK_RATE_MEASURED not handled.
    pub fn qemu_like() -> Self {
        FirmwareModel {
            temperatures_millic: RefCell::new(VecDeque::from([25_000])),
            max_temperature_millic: 99_000,
            unanswered: std::vec![tags::GET_CLOCK_RATE_MEASURED],
            ..Self::default()
        }
    }

    /// A firmware that answers nothing.
    pub fn silent() -> Self {
        FirmwareModel { silent: true, ..Self::default() }
    }

    /// GET_TEMPERATURE answers `temperatures` in turn, then keeps the last.
    pub fn with_temperatures(self, temperatures: &[u32]) -> Self {
        *self.temperatures_millic.borrow_mut() = temperatures.iter().copied().collect();
        self
    }

    /// Something happens on the board: `bits` (0-3) are set now and recorded as occurred.
    pub fn raise(&self, bits: u32) {
        self.throttled_now.set(self.throttled_now.get() | (bits & NOW_BITS));
        self.sticky.set(self.sticky.get() | ((bits & NOW_BITS) << STICKY_SHIFT));
    }

    /// It is over: the "now" bits clear, the sticky ones stay until read with a clear request.
    pub fn settle(&self) {
        self.throttled_now.set(0);
    }

    /// The level SET_GPIO_STATE left on expander line `gpio`.
    pub fn expander_level(&self, gpio: u32) -> Option<bool> {
        let index = gpio.checked_sub(*EXPANDER_LINES.start())? as usize;
        self.expander.borrow().get(index).copied().flatten()
    }

    /// The SET_GPIO_STATE calls, as (gpio, high).
    pub fn gpio_writes(&self) -> Vec<(u32, bool)> {
        self.calls
            .borrow()
            .iter()
            .filter(|call| call.tag == tags::SET_GPIO_STATE)
            .map(|call| (call.request[0], call.request[1] != 0))
            .collect()
    }

    /// How many calls of `tag` the model saw.
    pub fn count(&self, tag: u32) -> usize {
        self.calls.borrow().iter().filter(|call| call.tag == tag).count()
    }

    fn requested(&self, clock_id: u32) -> u32 {
        self.requested_hz.borrow().iter().find(|(id, _)| *id == clock_id).map_or(0, |&(_, hz)| hz)
    }

    fn next_temperature(&self) -> u32 {
        let mut queue = self.temperatures_millic.borrow_mut();
        if queue.len() > 1 {
            queue.pop_front().unwrap_or(0)
        } else {
            queue.front().copied().unwrap_or(0)
        }
    }

    /// The answer words of `tag`, or `None` when the firmware would not answer it.
    fn answer(&self, tag: u32, request: &[u32]) -> Option<Vec<u32>> {
        let first = request.first().copied();
        match tag {
            tags::GET_THROTTLED => {
                let flags = self.throttled_now.get() | self.sticky.get();
                // Linux asks with 0xffff to clear the sticky bits once they have been reported.
                if first == Some(CLEAR_REQUEST) {
                    self.sticky.set(self.throttled_now.get() << STICKY_SHIFT);
                }
                Some(std::vec![flags])
            }
            // Sensor 0 is the only one; another id is not answered.
            tags::GET_TEMPERATURE if first == Some(0) => Some(std::vec![0, self.next_temperature()]),
            tags::GET_MAX_TEMPERATURE if first == Some(0) => Some(std::vec![0, self.max_temperature_millic]),
            tags::GET_CLOCK_RATE => first.map(|id| std::vec![id, self.requested(id)]),
            tags::GET_CLOCK_RATE_MEASURED => first.map(|id| {
                let measured = u64::from(self.requested(id)) * u64::from(self.measured_per_mille) / 1000;
                std::vec![id, measured as u32]
            }),
            tags::GET_MAX_CLOCK_RATE => first.map(|id| {
                let max = if id == clocks::ARM { self.max_arm_hz } else { self.requested(id) };
                std::vec![id, max]
            }),
            tags::SET_CLOCK_RATE => {
                let (&id, &hz) = (request.first()?, request.get(1)?);
                let limit = if id == clocks::ARM { self.max_arm_hz } else { self.requested(id) };
                let set = hz.min(limit);
                let mut rates = self.requested_hz.borrow_mut();
                if let Some(entry) = rates.iter_mut().find(|(clock, _)| *clock == id) {
                    entry.1 = set;
                }
                Some(std::vec![id, set])
            }
            tags::SET_GPIO_STATE => {
                let (&gpio, &state) = (request.first()?, request.get(1)?);
                // Only the expander's lines exist behind this tag.
                if !EXPANDER_LINES.contains(&gpio) {
                    return None;
                }
                self.expander.borrow_mut()[(gpio - EXPANDER_LINES.start()) as usize] = Some(state != 0);
                Some(std::vec![gpio, 0])
            }
            _ => None,
        }
    }
}

impl PropertyTags for FirmwareModel {
    fn call_tag(&self, tag: u32, request: &[u32], response: &mut [u32]) -> Result<usize, MailboxError> {
        self.calls.borrow_mut().push(Call { tag, request: request.to_vec() });
        if self.silent {
            return Err(MailboxError::ReadTimeout { status: 1 << 30 });
        }
        if self.unanswered.contains(&tag) {
            return Err(MailboxError::TagNotAnswered { tag });
        }
        let answer = self.answer(tag, request).ok_or(MailboxError::TagNotAnswered { tag })?;
        // The caller's buffer must have room for the whole answer (the firmware would report
        // the length it needed and write nothing).
        if response.len() < answer.len() {
            return Err(MailboxError::BufferTooSmall);
        }
        response[..answer.len()].copy_from_slice(&answer);
        Ok(answer.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::{
        measured_clock_rate_hz, set_gpio_state, temperature_millicelsius, throttled_flags, ClockReading,
        CpuClock,
    };
    use std::string::ToString;

    #[test]
    fn sticky_bits_are_reported_once_then_cleared() {
        let board = FirmwareModel::pi4();
        assert_eq!(throttled_flags(&board), Ok(0));
        board.raise(1 << 0);
        board.settle();
        // Under-voltage happened and is over: only the sticky bit, then nothing.
        assert_eq!(throttled_flags(&board), Ok(1 << 16));
        assert_eq!(throttled_flags(&board), Ok(0));
        // The request asks for the clear.
        assert_eq!(board.calls.borrow()[0].request, [0xffff]);
    }

    #[test]
    fn the_boards_the_tests_need_answer_as_configured() {
        assert_eq!(throttled_flags(&FirmwareModel::under_voltage()), Ok(0x1_0001));
        let hot = FirmwareModel::throttled();
        assert_eq!(throttled_flags(&hot), Ok(0xe_000e));
        // Still hot: the "now" bits set the sticky ones again.
        assert_eq!(throttled_flags(&hot), Ok(0xe_000e));
        assert_eq!(temperature_millicelsius(&hot, tags::GET_TEMPERATURE), Ok(82_000));
        let qemu = FirmwareModel::qemu_like();
        assert_eq!(temperature_millicelsius(&qemu, tags::GET_TEMPERATURE), Ok(25_000));
        assert_eq!(temperature_millicelsius(&qemu, tags::GET_MAX_TEMPERATURE), Ok(99_000));
        assert_eq!(
            measured_clock_rate_hz(&qemu, clocks::ARM),
            Err(MailboxError::TagNotAnswered { tag: tags::GET_CLOCK_RATE_MEASURED })
        );
        let silent = FirmwareModel::silent();
        assert!(matches!(throttled_flags(&silent), Err(MailboxError::ReadTimeout { .. })));
    }

    #[test]
    fn the_temperature_falls_as_scripted_and_then_stays() {
        let board = FirmwareModel::pi4().with_temperatures(&[62_000, 57_000, 49_000]);
        let read = || temperature_millicelsius(&board, tags::GET_TEMPERATURE).unwrap();
        assert_eq!([read(), read(), read(), read()], [62_000, 57_000, 49_000, 49_000]);
        // Only sensor 0 exists.
        let mut answer = [0u32; 2];
        assert!(board.call_tag(tags::GET_TEMPERATURE, &[1], &mut answer).is_err());
    }

    #[test]
    fn measured_and_requested_clocks_differ_when_the_firmware_holds_one_lower() {
        let board = FirmwareModel { measured_per_mille: 800, ..FirmwareModel::pi4() };
        let arm = ClockReading::read(&board, clocks::ARM);
        assert_eq!((arm.requested_hz, arm.measured_hz), (Ok(600_000_000), Ok(480_000_000)));
        let raised = CpuClock::raise_to_maximum(&board, || {});
        assert_eq!(raised.current_hz, Ok(1_500_000_000));
        assert_eq!(raised.measured_hz, Ok(1_200_000_000));
        assert_eq!(raised.to_string(), "cpu clock 1500 MHz (measured 1200.0 MHz; max 1500 MHz)");
        let qemu = CpuClock::raise_to_maximum(&FirmwareModel::qemu_like(), || {});
        assert_eq!(
            qemu.to_string(),
            "cpu clock 1500 MHz (measured: firmware did not answer GET_CLOCK_RATE_MEASURED (0x00030047); max 1500 MHz)"
        );
    }

    #[test]
    fn only_expander_lines_take_set_gpio_state() {
        let board = FirmwareModel::pi4();
        assert_eq!(set_gpio_state(&board, 130, true), Ok(()));
        assert_eq!(board.expander_level(130), Some(true));
        assert_eq!(
            set_gpio_state(&board, 42, true),
            Err(MailboxError::TagNotAnswered { tag: tags::SET_GPIO_STATE })
        );
        assert_eq!(board.gpio_writes(), [(130, true), (42, true)]);
        // A response buffer too small for the answer is refused, as the firmware writes nothing.
        let mut one = [0u32; 1];
        assert_eq!(board.call_tag(tags::GET_TEMPERATURE, &[0], &mut one), Err(MailboxError::BufferTooSmall));
    }
}
