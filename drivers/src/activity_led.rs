//! The activity LED as a signal lamp for a board whose console shows nothing (docs/led.md): which
//! line drives it on each board, the blink patterns (a count of short blinks per stage reached, a
//! count of long blinks for a fatal error, a slow heartbeat while jobs run), a driver that plays
//! them, and a decoder that reads them back from a list of level changes (the host tests' GPIO
//! model, the QEMU end-to-end test's samples).
//!
//! The pin table is checked against Linux's device trees and circle's `lib/machineinfo.cpp`
//! (`s_ActLEDInfo`, used by `lib/actled.cpp`); each entry names its source.
#![forbid(unsafe_code)]

use crate::gpio::{Bcm2835Gpio, BrcmstbGpioBank, PinFunction};
use crate::mailbox::{set_gpio_state, BoardRevision, PropertyTags};
use alloc::vec::Vec;
use core::cell::Cell;
use hal::mmio::RegisterIo;

/// How the LED is wired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedLine {
    /// A pin of the BCM2835-style GPIO block (Pi 1-4).
    Gpio { pin: u32 },
    /// A line of the firmware's GPIO expander, driven with SET_GPIO_STATE (Pi 3 B).
    FirmwareExpander { gpio: u32 },
    /// A line of BCM2712's always-on GPIO bank 0 (Pi 5).
    AlwaysOnGpio { line: u32 },
}

/// A board's activity LED: its line, its polarity and where that comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActivityLed {
    pub line: LedLine,
    /// The LED lights when the line is low.
    pub active_low: bool,
    /// The public source of the entry.
    pub source: &'static str,
}

impl core::fmt::Display for ActivityLed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.line {
            LedLine::Gpio { pin } => write!(f, "GPIO {pin}")?,
            LedLine::FirmwareExpander { gpio } => {
                write!(f, "firmware expander line {gpio} (SET_GPIO_STATE)")?
            }
            LedLine::AlwaysOnGpio { line } => write!(f, "AON GPIO {line}")?,
        }
        let polarity = if self.active_low { "active low" } else { "active high" };
        write!(f, ", {polarity} [{}]", self.source)
    }
}

const fn gpio(pin: u32, active_low: bool, source: &'static str) -> Option<ActivityLed> {
    Some(ActivityLed { line: LedLine::Gpio { pin }, active_low, source })
}

/// The activity LED of the board the revision code names, or `None` where no public source
/// gives one (Compute Modules 3, 3+ and 4S, whose LED circle drives through the firmware's
/// virtual GPIO buffer, Compute Module 5, Pi 500).
pub fn activity_led(revision: BoardRevision) -> Option<ActivityLed> {
    if !revision.is_new_style() {
        // Old-style codes (Raspberry Pi documentation, "Raspberry Pi revision codes"): 0x2-0xf
        // are the Pi 1 A and B, 0x10-0x15 the B+, A+ and CM1 (circle: 16 active low for A and B,
        // 47 for the others).
        return match revision.0 & 0xffff {
            0x0002..=0x000f => gpio(16, true, "bcm2835-rpi-b.dts, bcm2835-rpi-a.dts; circle machineinfo.cpp"),
            0x0010..=0x0015 => {
                gpio(47, false, "bcm2835-rpi-b-plus.dts, bcm2835-rpi-a-plus.dts; circle machineinfo.cpp")
            }
            _ => None,
        };
    }
    match (revision.0 >> 4) & 0xff {
        0x00 | 0x01 => gpio(16, true, "bcm2835-rpi-a.dts, bcm2835-rpi-b.dts; circle machineinfo.cpp"),
        0x02 | 0x03 => {
            gpio(47, false, "bcm2835-rpi-a-plus.dts, bcm2835-rpi-b-plus.dts; circle machineinfo.cpp")
        }
        0x04 => gpio(47, false, "bcm2836-rpi-2-b.dts; circle machineinfo.cpp"),
        0x06 => gpio(47, false, "circle machineinfo.cpp (Compute Module)"),
        // Linux's bcm2835-rpi-zero.dts says active high, but names the line STATUS_LED_N; circle and
        // the Zero W's tree say active low.
        0x09 => gpio(47, true, "bcm2835-rpi-zero.dts line name STATUS_LED_N; circle machineinfo.cpp"),
        0x0c => gpio(47, true, "bcm2835-rpi-zero-w.dts; circle machineinfo.cpp"),
        0x08 => Some(ActivityLed {
            line: LedLine::FirmwareExpander { gpio: FIRMWARE_EXPANDER_BASE + 2 },
            active_low: false,
            source:
                "bcm2837-rpi-3-b.dts led_act <&expgpio 2 GPIO_ACTIVE_HIGH>; gpio-raspberrypi-exp.c base 128",
        }),
        0x0d | 0x0e => {
            gpio(29, false, "bcm2837-rpi-3-b-plus.dts, bcm2837-rpi-3-a-plus.dts; circle machineinfo.cpp")
        }
        0x12 => gpio(29, true, "bcm2837-rpi-zero-2-w.dts; circle machineinfo.cpp"),
        0x11 | 0x14 => gpio(42, false, "bcm2711-rpi-4-b.dts; circle machineinfo.cpp (4 B, CM4)"),
        // The 400's one status LED: Linux calls it the power LED (bcm2711-rpi-400.dts led_pwr).
        0x13 => gpio(42, false, "bcm2711-rpi-400.dts led_pwr; circle machineinfo.cpp"),
        0x17 => Some(ActivityLed {
            line: LedLine::AlwaysOnGpio { line: 9 },
            active_low: true,
            source: "bcm2712-rpi-5-b.dts led_act <&gio_aon 9 GPIO_ACTIVE_LOW>",
        }),
        _ => None,
    }
}

/// The firmware numbers its expander's lines from 128 (Linux `gpio-raspberrypi-exp.c`).
pub const FIRMWARE_EXPANDER_BASE: u32 = 128;

/// The stages the LED tells (docs/led.md): the stage's number is the count of short blinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    /// The kernel runs and knows the board.
    Boot = 1,
    /// The console UART is set up.
    ConsoleUp = 2,
    /// An SD card answered.
    SdFound = 3,
    /// A PCIe link came up.
    PcieLink = 4,
    /// The benchmark is over.
    BenchmarkDone = 5,
}

/// One step of a pattern: the LED on or off for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub on: bool,
    pub ms: u32,
}

/// A short blink: long enough to see, short enough to count (about four a second).
pub const SHORT_ON_MS: u32 = 100;
pub const SHORT_OFF_MS: u32 = 150;
/// The dark pause after a stage's blinks, longer than any pause inside a pattern, so that
/// whatever follows (the next stage, the heartbeat) starts a new burst.
pub const STAGE_TAIL_MS: u32 = 400;
/// A long blink (an error code) and the dark pause before each repetition of the code.
pub const LONG_ON_MS: u32 = 600;
pub const LONG_OFF_MS: u32 = 200;
pub const ERROR_LEAD_MS: u32 = 1500;
/// The heartbeat while jobs run: the LED changes every 500 ms.
pub const HEARTBEAT_HALF_PERIOD_MS: u32 = 500;

fn blinks(count: u32, on_ms: u32, off_ms: u32) -> impl Iterator<Item = Step> {
    (0..count).flat_map(move |_| [Step { on: true, ms: on_ms }, Step { on: false, ms: off_ms }])
}

/// A stage: as many short blinks as the stage's number, then a dark pause.
pub fn stage_steps(stage: Stage) -> impl Iterator<Item = Step> {
    blinks(stage as u32, SHORT_ON_MS, SHORT_OFF_MS)
        .chain(core::iter::once(Step { on: false, ms: STAGE_TAIL_MS }))
}

/// A fatal error: a long dark pause, then `code` long blinks (the exit status); repeated.
pub fn error_steps(code: u32) -> impl Iterator<Item = Step> {
    core::iter::once(Step { on: false, ms: ERROR_LEAD_MS }).chain(blinks(code, LONG_ON_MS, LONG_OFF_MS))
}

/// The dark pause when the kernel takes the LED over, so that its first stage stands apart from
/// what the firmware showed.
pub const TAKEOVER_DARK_MS: u32 = STAGE_TAIL_MS;

/// How long a pattern lasts.
pub fn duration_ms(steps: impl Iterator<Item = Step>) -> u32 {
    steps.map(|step| step.ms).sum()
}

/// Something that drives the LED's line to a level.
pub trait LedOutput {
    /// Makes the line an output, if it has a direction to set.
    fn configure(&self);
    /// Drives the line high or low.
    fn drive(&self, high: bool);
    /// Whether driving the line is a posted register write that waits for nothing (so it may
    /// run between the I/Os of a measured window), unlike a firmware call.
    fn is_posted_write(&self) -> bool;
}

/// A pin of the BCM2835-style GPIO block.
pub struct GpioPin<R: RegisterIo> {
    pub gpio: Bcm2835Gpio<R>,
    pub pin: u32,
}

impl<R: RegisterIo> LedOutput for GpioPin<R> {
    fn configure(&self) {
        self.gpio.set_functions(self.pin..=self.pin, PinFunction::Output);
    }
    fn drive(&self, high: bool) {
        self.gpio.set_level(self.pin, high);
    }
    fn is_posted_write(&self) -> bool {
        true
    }
}

/// A line of BCM2712's always-on GPIO.
pub struct AlwaysOnLine<R: RegisterIo> {
    pub bank: BrcmstbGpioBank<R>,
    pub line: u32,
}

impl<R: RegisterIo> LedOutput for AlwaysOnLine<R> {
    fn configure(&self) {}
    fn drive(&self, high: bool) {
        self.bank.set_output(1 << self.line, high);
    }
    fn is_posted_write(&self) -> bool {
        true
    }
}

/// A line of the firmware's expander: every change is a mailbox call that waits for the
/// VideoCore, so it never runs inside a measured window.
pub struct ExpanderLine<'f, F: PropertyTags> {
    pub firmware: &'f F,
    pub gpio: u32,
}

impl<F: PropertyTags> LedOutput for ExpanderLine<'_, F> {
    fn configure(&self) {}
    fn drive(&self, high: bool) {
        // A firmware that refuses leaves the LED as it was; there is nobody to tell.
        let _ = set_gpio_state(self.firmware, self.gpio, high);
    }
    fn is_posted_write(&self) -> bool {
        false
    }
}

/// The LED: polarity applied, and a level written only when it changes (so that each write a
/// trace shows is a change).
pub struct Led<O: LedOutput> {
    pub output: O,
    pub active_low: bool,
    lit: Cell<Option<bool>>,
}

impl<O: LedOutput> Led<O> {
    /// Configures the line and turns the LED off (a known state to count changes from).
    pub fn new(output: O, active_low: bool) -> Self {
        output.configure();
        let led = Led { output, active_low, lit: Cell::new(None) };
        led.set(false);
        led
    }

    /// Lights the LED or puts it out; nothing is written when it already is.
    pub fn set(&self, on: bool) {
        if self.lit.get() == Some(on) {
            return;
        }
        self.output.drive(on != self.active_low);
        self.lit.set(Some(on));
    }

    pub fn is_lit(&self) -> bool {
        self.lit.get() == Some(true)
    }

    /// The heartbeat's change: the LED to the other state.
    pub fn toggle(&self) {
        self.set(!self.is_lit());
    }

    /// Plays `steps`, waiting with `delay_ms` after each change.
    pub fn play(&self, steps: impl Iterator<Item = Step>, delay_ms: &mut dyn FnMut(u32)) {
        for step in steps {
            self.set(step.on);
            delay_ms(step.ms);
        }
    }
}

/// What a run of level changes says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A burst of this many short blinks: the stage with this number.
    Stage(u32),
    /// A burst of this many (at least two) long blinks: a fatal error's exit status.
    Error(u32),
    /// One long blink on its own: a heartbeat beat.
    Heartbeat,
}

/// Pulses shorter than this are glitches (a write timed back to back), not blinks.
pub const GLITCH_MS: u64 = 20;
/// Blinks longer than this are long blinks.
const LONG_BLINK_MS: u64 = 300;
/// Dark pauses at least this long separate bursts (the pause inside a burst is 150 or 200 ms, the
/// one after a stage 400 ms, the heartbeat's 500 ms).
const BURST_GAP_MS: u64 = 275;

/// Reads the signals in level changes `(time in ms, lit)`, in time order, the LED dark before the
/// first. A pulse still lit at the end is not counted.
pub fn decode(changes: &[(u64, bool)]) -> Vec<Signal> {
    let mut pulses: Vec<(u64, u64)> = Vec::new();
    let mut lit_since = None;
    for &(at_ms, lit) in changes {
        match (lit, lit_since) {
            (true, None) => lit_since = Some(at_ms),
            (false, Some(start)) => {
                if at_ms - start >= GLITCH_MS {
                    pulses.push((start, at_ms));
                }
                lit_since = None;
            }
            _ => {}
        }
    }
    fn flush(burst: &mut Vec<(u64, u64)>, signals: &mut Vec<Signal>) {
        let long = burst.iter().filter(|(start, end)| end - start >= LONG_BLINK_MS).count() as u32;
        let count = burst.len() as u32;
        match (count, long) {
            (0, _) => {}
            (1, 1) => signals.push(Signal::Heartbeat),
            (_, 0) => signals.push(Signal::Stage(count)),
            _ => signals.push(Signal::Error(count)),
        }
        burst.clear();
    }
    let mut signals = Vec::new();
    let mut burst: Vec<(u64, u64)> = Vec::new();
    for pulse in pulses {
        if burst.last().is_some_and(|&(_, end)| pulse.0 - end >= BURST_GAP_MS) {
            flush(&mut burst, &mut signals);
        }
        burst.push(pulse);
    }
    flush(&mut burst, &mut signals);
    signals
}

/// Register models of the GPIO blocks for the host tests, as strict as the datasheets: GPSETn and
/// GPCLRn are write-only, GPLEVn read-only, a pin drives its latch only as an output, and BCM2712's
/// lines reset as inputs.
#[cfg(test)]
pub mod model {
    extern crate std;
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Bcm2835,
        Brcmstb,
    }

    pub struct GpioModel {
        kind: Kind,
        registers: RefCell<[u32; 16]>,
        latch: Cell<u64>,
        /// The model's clock in ms, moved by the test's delay.
        pub now_ms: Cell<u64>,
        /// Every change of a driven level: (ms, pin, high).
        pub changes: RefCell<Vec<(u64, u32, bool)>>,
        /// Accesses the hardware does not allow.
        pub violations: RefCell<Vec<std::string::String>>,
    }

    impl GpioModel {
        pub fn bcm2835() -> Self {
            Self::new(Kind::Bcm2835)
        }

        pub fn brcmstb() -> Self {
            let model = Self::new(Kind::Brcmstb);
            // Every line an input after reset.
            model.registers.borrow_mut()[2] = u32::MAX;
            model
        }

        fn new(kind: Kind) -> Self {
            GpioModel {
                kind,
                registers: RefCell::new([0; 16]),
                latch: Cell::new(0),
                now_ms: Cell::new(0),
                changes: RefCell::new(Vec::new()),
                violations: RefCell::new(Vec::new()),
            }
        }

        fn is_output(&self, pin: u32) -> bool {
            match self.kind {
                Kind::Bcm2835 => {
                    let select = self.registers.borrow()[(pin / 10) as usize];
                    PinFunction::from_bits(select >> ((pin % 10) * 3)) == PinFunction::Output
                }
                Kind::Brcmstb => self.registers.borrow()[2] & (1 << pin) == 0,
            }
        }

        /// The level a pin drives (false for an input).
        pub fn driven(&self, pin: u32) -> bool {
            self.is_output(pin) && self.latch.get() & (1 << pin) != 0
        }

        /// Whether the LED on `line` is lit.
        pub fn lit(&self, led: &ActivityLed) -> bool {
            let pin = match led.line {
                LedLine::Gpio { pin } => pin,
                LedLine::AlwaysOnGpio { line } => line,
                LedLine::FirmwareExpander { .. } => return false,
            };
            self.is_output(pin) && (self.driven(pin) != led.active_low)
        }

        /// The LED's changes as the decoder takes them.
        pub fn lit_changes(&self, led: &ActivityLed) -> Vec<(u64, bool)> {
            let pin = match led.line {
                LedLine::Gpio { pin } => pin,
                LedLine::AlwaysOnGpio { line } => line,
                LedLine::FirmwareExpander { .. } => return Vec::new(),
            };
            self.changes
                .borrow()
                .iter()
                .filter(|(_, changed, _)| *changed == pin)
                .map(|&(at, _, high)| (at, high != led.active_low))
                .collect()
        }

        fn update_latch(&self, latch: u64) {
            let before = self.latch.get();
            self.latch.set(latch);
            for pin in 0..64 {
                let was = before & (1 << pin) != 0;
                let is = latch & (1 << pin) != 0;
                if was != is && self.is_output(pin) {
                    self.changes.borrow_mut().push((self.now_ms.get(), pin, is));
                }
            }
        }

        fn violation(&self, text: std::string::String) {
            self.violations.borrow_mut().push(text);
        }
    }

    impl RegisterIo for GpioModel {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match (self.kind, offset_bytes) {
                (Kind::Bcm2835, 0x00..=0x14) => self.registers.borrow()[offset_bytes / 4],
                (Kind::Bcm2835, 0x34 | 0x38) => {
                    let shift = if offset_bytes == 0x34 { 0 } else { 32 };
                    let outputs: u64 =
                        (0..58u32).filter(|&pin| self.is_output(pin)).map(|pin| 1u64 << pin).sum();
                    ((self.latch.get() & outputs) >> shift) as u32
                }
                (Kind::Bcm2835, 0x1c | 0x20 | 0x28 | 0x2c) => 0,
                (Kind::Brcmstb, 0x04) => self.latch.get() as u32,
                (Kind::Brcmstb, 0x00 | 0x08) => self.registers.borrow()[offset_bytes / 4],
                _ => {
                    self.violation(std::format!("read of {offset_bytes:#x}"));
                    0
                }
            }
        }

        fn write32(&self, offset_bytes: usize, value: u32) {
            let latch = self.latch.get();
            match (self.kind, offset_bytes) {
                (Kind::Bcm2835, 0x00..=0x14) => self.registers.borrow_mut()[offset_bytes / 4] = value,
                (Kind::Bcm2835, 0x1c) => self.update_latch(latch | u64::from(value)),
                (Kind::Bcm2835, 0x20) => self.update_latch(latch | (u64::from(value) << 32)),
                (Kind::Bcm2835, 0x28) => self.update_latch(latch & !u64::from(value)),
                (Kind::Bcm2835, 0x2c) => self.update_latch(latch & !(u64::from(value) << 32)),
                (Kind::Brcmstb, 0x04) => self.update_latch(u64::from(value)),
                (Kind::Brcmstb, 0x00 | 0x08) => self.registers.borrow_mut()[offset_bytes / 4] = value,
                _ => self.violation(std::format!("write of {value:#x} to {offset_bytes:#x}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::model::GpioModel;
    use super::*;
    use crate::firmware_model::FirmwareModel;
    use std::vec;

    /// A revision code of the new style for board type `board_type`.
    fn revision(board_type: u32) -> BoardRevision {
        BoardRevision((1 << 23) | (board_type << 4))
    }

    #[test]
    fn every_board_has_the_pin_its_device_tree_gives() {
        let expect = |board_type, line, active_low| {
            let led = activity_led(revision(board_type)).unwrap_or_else(|| panic!("type {board_type:#x}"));
            assert_eq!((led.line, led.active_low), (line, active_low), "type {board_type:#x}");
        };
        expect(0x00, LedLine::Gpio { pin: 16 }, true); // A
        expect(0x01, LedLine::Gpio { pin: 16 }, true); // B
        expect(0x02, LedLine::Gpio { pin: 47 }, false); // A+
        expect(0x03, LedLine::Gpio { pin: 47 }, false); // B+
        expect(0x04, LedLine::Gpio { pin: 47 }, false); // 2 B
        expect(0x09, LedLine::Gpio { pin: 47 }, true); // Zero
        expect(0x0c, LedLine::Gpio { pin: 47 }, true); // Zero W
        expect(0x08, LedLine::FirmwareExpander { gpio: 130 }, false); // 3 B
        expect(0x0d, LedLine::Gpio { pin: 29 }, false); // 3 B+
        expect(0x0e, LedLine::Gpio { pin: 29 }, false); // 3 A+
        expect(0x12, LedLine::Gpio { pin: 29 }, true); // Zero 2 W
        expect(0x11, LedLine::Gpio { pin: 42 }, false); // 4 B
        expect(0x13, LedLine::Gpio { pin: 42 }, false); // 400
        expect(0x14, LedLine::Gpio { pin: 42 }, false); // CM4
        expect(0x17, LedLine::AlwaysOnGpio { line: 9 }, true); // 5
                                                               // No public source: nothing is driven.
        for board_type in [0x0a, 0x10, 0x15, 0x18, 0x19] {
            assert_eq!(activity_led(revision(board_type)), None, "type {board_type:#x}");
        }
        // Old-style codes: the first B (0x0002) and a B+ (0x0010).
        assert_eq!(activity_led(BoardRevision(0x0002)).unwrap().line, LedLine::Gpio { pin: 16 });
        assert_eq!(activity_led(BoardRevision(0x0010)).unwrap().line, LedLine::Gpio { pin: 47 });
        assert_eq!(activity_led(BoardRevision(0x0001)), None);
        // QEMU's raspi machines (docs/qemu.md §1).
        assert_eq!(
            activity_led(BoardRevision(0x00a0_2082)).unwrap().line,
            LedLine::FirmwareExpander { gpio: 130 }
        );
        assert_eq!(activity_led(BoardRevision(0x00b0_3115)).unwrap().line, LedLine::Gpio { pin: 42 });
        assert!(activity_led(BoardRevision(0x0092_0092)).unwrap().active_low, "QEMU raspi0 is a Zero");
    }

    /// Plays `play` on the board's LED through the GPIO model and returns what the LED showed.
    fn shown_on(
        board_type: u32,
        play: impl FnOnce(&Led<GpioPin<&GpioModel>>, &mut dyn FnMut(u32)),
    ) -> Vec<Signal> {
        let led_info = activity_led(revision(board_type)).unwrap();
        let LedLine::Gpio { pin } = led_info.line else { panic!("not a GPIO pin") };
        let model = GpioModel::bcm2835();
        let led = Led::new(GpioPin { gpio: Bcm2835Gpio::new(&model), pin }, led_info.active_low);
        assert!(!model.lit(&led_info), "off after set-up");
        let mut delay = |ms: u32| model.now_ms.set(model.now_ms.get() + u64::from(ms));
        play(&led, &mut delay);
        assert!(model.violations.borrow().is_empty(), "{:?}", model.violations.borrow());
        decode(&model.lit_changes(&led_info))
    }

    #[test]
    fn each_stage_reads_back_as_its_number_on_either_polarity() {
        for board_type in [0x11, 0x09] {
            let signals = shown_on(board_type, |led, delay| {
                for stage in
                    [Stage::Boot, Stage::ConsoleUp, Stage::SdFound, Stage::PcieLink, Stage::BenchmarkDone]
                {
                    led.play(stage_steps(stage), delay);
                    // Work between stages, the LED dark: any length.
                    delay(3);
                }
            });
            assert_eq!(
                signals,
                [Signal::Stage(1), Signal::Stage(2), Signal::Stage(3), Signal::Stage(4), Signal::Stage(5)],
                "type {board_type:#x}"
            );
        }
    }

    #[test]
    fn an_error_code_and_the_heartbeat_are_told_apart_from_stages() {
        let signals = shown_on(0x03, |led, delay| {
            led.play(stage_steps(Stage::Boot), delay);
            for _ in 0..4 {
                led.toggle();
                delay(HEARTBEAT_HALF_PERIOD_MS);
            }
            led.play(error_steps(3), delay);
            led.play(error_steps(3), delay);
            delay(ERROR_LEAD_MS);
        });
        assert_eq!(
            signals,
            [Signal::Stage(1), Signal::Heartbeat, Signal::Heartbeat, Signal::Error(3), Signal::Error(3)]
        );
        // Glitches (back-to-back writes) are not blinks.
        assert_eq!(decode(&[(0, true), (1, false), (500, true), (600, false)]), [Signal::Stage(1)]);
    }

    #[test]
    fn patterns_last_what_the_documentation_says() {
        assert_eq!(duration_ms(stage_steps(Stage::Boot)), 650);
        assert_eq!(duration_ms(stage_steps(Stage::BenchmarkDone)), 1650);
        assert_eq!(duration_ms(error_steps(2)), 3100);
        assert_eq!(stage_steps(Stage::SdFound).filter(|step| step.on).count(), 3);
        assert!(stage_steps(Stage::PcieLink).last().is_some_and(|step| !step.on), "ends dark");
    }

    #[test]
    fn the_pi5_line_is_driven_low_to_light() {
        let led_info = activity_led(revision(0x17)).unwrap();
        let model = GpioModel::brcmstb();
        let led = Led::new(AlwaysOnLine { bank: BrcmstbGpioBank::new(&model), line: 9 }, led_info.active_low);
        assert!(!model.lit(&led_info));
        led.set(true);
        assert!(model.lit(&led_info) && !model.driven(9));
        led.set(false);
        assert!(!model.lit(&led_info) && model.driven(9));
        assert!(model.violations.borrow().is_empty());
    }

    #[test]
    fn the_expander_led_writes_only_changes_through_the_firmware() {
        let firmware = FirmwareModel::pi4();
        let led = Led::new(ExpanderLine { firmware: &firmware, gpio: 130 }, false);
        assert!(!led.output.is_posted_write());
        led.set(false);
        led.set(true);
        led.set(true);
        led.toggle();
        assert_eq!(firmware.gpio_writes(), vec![(130, false), (130, true), (130, false)]);
        assert_eq!(firmware.expander_level(130), Some(false));
    }
}
