//! The activity LED on the running board (docs/led.md): the line from the board revision
//! (`drivers::activity_led`), a stage pattern when a stage is reached, the heartbeat while jobs
//! run and the repeating code of a fatal error, the exception handlers' included. Stage patterns
//! wait (they are counted as the kernel's part of the boot time); inside a measured window the
//! heartbeat is one posted GPIO write between I/Os where the LED is on a GPIO line, and nothing
//! where it is behind the firmware (a mailbox call waits for the VideoCore): then it changes
//! between runs only.
#![forbid(unsafe_code)]

use super::firmware::Firmware;
use super::sync::SingleCoreCell;
use super::timer::KernelTimer;
use super::windows;
use crate::board::{BlockKind, BoardFamily};
use crate::discovery::BoardInfo;
use crate::println;
use blockdev::Clock;
use core::fmt::Write;
use drivers::activity_led::{
    activity_led, error_steps, stage_steps, ActivityLed, AlwaysOnLine, ExpanderLine, GpioPin, Led, LedLine,
    LedOutput, Stage, Step, ERROR_LEAD_MS, TAKEOVER_DARK_MS,
};
use drivers::gpio::BrcmstbGpioBank;
use drivers::mailbox::BoardRevision;
use embedded_hal::delay::DelayNs;
use hal::mmio::Mmio;

/// The line the LED is on, as the kernel drives it.
enum Output {
    Gpio(GpioPin<Mmio>),
    AlwaysOn(AlwaysOnLine<Mmio>),
    Expander { firmware: Firmware, gpio: u32 },
}

impl LedOutput for Output {
    fn configure(&self) {
        match self {
            Output::Gpio(pin) => pin.configure(),
            Output::AlwaysOn(line) => line.configure(),
            Output::Expander { firmware, gpio } => ExpanderLine { firmware, gpio: *gpio }.configure(),
        }
    }
    fn drive(&self, high: bool) {
        match self {
            Output::Gpio(pin) => pin.drive(high),
            Output::AlwaysOn(line) => line.drive(high),
            Output::Expander { firmware, gpio } => ExpanderLine { firmware, gpio: *gpio }.drive(high),
        }
    }
    fn is_posted_write(&self) -> bool {
        !matches!(self, Output::Expander { .. })
    }
}

struct KernelLed {
    led: Led<Output>,
    description: ActivityLed,
    timer: KernelTimer,
    /// Time spent playing patterns so far.
    pattern_ns: u64,
    /// The longest single change measured, and how many were measured.
    slowest_change_ns: u64,
    changes: u32,
    /// `led=trace`: the changes so far with their times.
    trace: Option<ChangeTrace>,
}

/// The first changes of the LED, each with its time on the kernel's timer (ticks), for
/// `led=trace`: a fixed array, as the exception path prints it too.
struct ChangeTrace {
    changes: [(u64, bool); TRACED_CHANGES],
    count: usize,
}

/// Changes `led=trace` keeps: every stage, and an error code of up to 9, with room to spare.
const TRACED_CHANGES: usize = 96;

impl ChangeTrace {
    fn record(&mut self, ticks: u64, lit: bool) {
        if let Some(slot) = self.changes.get_mut(self.count) {
            *slot = (ticks, lit);
            self.count += 1;
        }
    }

    /// `led        trace (ms on the kernel's timer, 1 lit, 0 dark): 0:0 400:1 …`: the line the
    /// end-to-end tests decode.
    fn print(&self, timer: &KernelTimer, out: &mut impl Write) {
        let first = self.changes.first().map_or(0, |(ticks, _)| *ticks);
        let _ = write!(out, "led        trace (ms on the kernel's timer, 1 lit, 0 dark):");
        for &(ticks, lit) in &self.changes[..self.count] {
            let _ = write!(out, " {}:{}", timer.ticks_to_ns(ticks - first) / 1_000_000, u8::from(lit));
        }
        let _ = writeln!(out);
    }
}

impl KernelLed {
    /// Sets the LED, timing the write when it is a change.
    fn set(&mut self, on: bool) {
        if self.led.is_lit() == on {
            return;
        }
        let before = self.timer.now_ticks();
        if let Some(trace) = &mut self.trace {
            trace.record(before, on);
        }
        self.led.set(on);
        let took_ns = self.timer.ticks_to_ns(self.timer.now_ticks() - before);
        self.slowest_change_ns = self.slowest_change_ns.max(took_ns);
        self.changes += 1;
    }

    fn play(&mut self, steps: impl Iterator<Item = Step>) {
        let started = self.timer.now_ticks();
        let mut timer = self.timer;
        for step in steps {
            self.set(step.on);
            timer.delay_ms(step.ms);
        }
        self.pattern_ns += self.timer.ticks_to_ns(self.timer.now_ticks() - started);
    }
}

static LED: SingleCoreCell<Option<KernelLed>> = SingleCoreCell::new(None);

/// Why there is no LED to drive, when there is none.
static NO_LED_REASON: SingleCoreCell<&'static str> = SingleCoreCell::new("not set up");

/// Finds the board's LED and turns it off; with `enabled` false nothing is touched. `trace`
/// (`led=trace`) keeps the changes to print at the end.
pub fn init(info: &BoardInfo, firmware: Option<Firmware>, timer: KernelTimer, enabled: bool, trace: bool) {
    let reason = match (pick(info, firmware), enabled) {
        (Err(reason), _) => reason,
        (Ok(_), false) => "off (led=off, or under QEMU without led=on)",
        (Ok((description, output)), true) => {
            let led = Led::new(output, description.active_low);
            let trace = trace.then_some(ChangeTrace { changes: [(0, false); TRACED_CHANGES], count: 0 });
            let mut state =
                KernelLed { led, description, timer, pattern_ns: 0, slowest_change_ns: 0, changes: 0, trace };
            state.play(core::iter::once(Step { on: false, ms: TAKEOVER_DARK_MS }));
            LED.with(|slot| *slot = Some(state));
            return;
        }
    };
    NO_LED_REASON.with(|slot| *slot = reason);
}

/// The board's LED line and a driver for it.
fn pick(info: &BoardInfo, firmware: Option<Firmware>) -> Result<(ActivityLed, Output), &'static str> {
    if info.profile.family == BoardFamily::QemuVirt {
        return Err("none (QEMU virt has no LED)");
    }
    let revision = info.board_revision.ok_or("unknown (no board revision from the firmware)")?;
    let description = activity_led(BoardRevision(revision))
        .ok_or("unknown for this board (no public source gives its line)")?;
    let output = match description.line {
        LedLine::Gpio { pin } => {
            Output::Gpio(GpioPin { gpio: windows::gpio(info.profile).ok_or("no GPIO block")?, pin })
        }
        LedLine::AlwaysOnGpio { line } => {
            // The Pi 5's always-on GPIO block; the LED's line is its own (the SD hook drives
            // lines 3 and 4, read-modify-write).
            let bank =
                windows::open_kind(info.profile, BlockKind::AlwaysOnGpio).map_err(|_| "no AON GPIO block")?;
            Output::AlwaysOn(AlwaysOnLine { bank: BrcmstbGpioBank::new(bank), line })
        }
        LedLine::FirmwareExpander { gpio } => {
            Output::Expander { firmware: firmware.ok_or("no firmware mailbox")?, gpio }
        }
    };
    Ok((description, output))
}

/// Shows that `stage` was reached (a dark pause, then the stage's number of short blinks).
pub fn stage(stage: Stage) {
    LED.with(|led| {
        if let Some(led) = led {
            led.play(stage_steps(stage));
        }
    });
}

/// The `led` line of the banner: the line, its source, and what a change costs.
pub fn describe() {
    let described = LED.with(|led| {
        led.as_ref().map(|led| {
            let place = if led.led.output.is_posted_write() {
                "a posted GPIO write: the heartbeat changes between I/Os"
            } else {
                "a firmware mailbox call that waits for the VideoCore: the heartbeat changes between runs only"
            };
            println!(
                "led        activity LED on {}; a change took at most {}.{:03} µs over the {} changes so far ({place})",
                led.description,
                led.slowest_change_ns / 1000,
                led.slowest_change_ns % 1000,
                led.changes
            );
        })
    });
    if described.flatten().is_none() {
        let reason = NO_LED_REASON.with(|reason| *reason).unwrap_or("busy");
        println!("led        activity LED {reason}");
    }
}

/// Whether the kernel drives the LED.
pub fn is_driven() -> bool {
    LED.with(|led| led.is_some()).unwrap_or(false)
}

/// Time spent on LED patterns so far (part of the kernel's boot time).
pub fn pattern_ns() -> u64 {
    LED.with(|led| led.as_ref().map_or(0, |led| led.pattern_ns)).unwrap_or(0)
}

/// The heartbeat inside a measured window: one posted write, or nothing.
pub fn heartbeat_in_window() {
    LED.with(|led| {
        if let Some(led) = led.as_mut().filter(|led| led.led.output.is_posted_write()) {
            let lit = led.led.is_lit();
            led.set(!lit);
        }
    });
}

/// The heartbeat between runs, for an LED the firmware drives.
pub fn heartbeat_between_runs() {
    LED.with(|led| {
        if let Some(led) = led.as_mut().filter(|led| !led.led.output.is_posted_write()) {
            let lit = led.led.is_lit();
            led.set(!lit);
        }
    });
}

/// How a run ends, as the LED shows it (the exit path says which).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Everything ran: the benchmark-done stage.
    BenchmarkDone,
    /// The run failed with this exit status: its number as long blinks.
    Failed { exit_status: u32 },
}

/// The pattern that ends a run: the benchmark-done stage for success (with a long dark pause
/// when it repeats), else the exit status as a count of long blinks.
fn play_ending(led: &mut KernelLed, ending: Ending, repeating: bool) {
    match ending {
        Ending::BenchmarkDone => {
            led.play(stage_steps(Stage::BenchmarkDone));
            if repeating {
                led.play(core::iter::once(Step { on: false, ms: ERROR_LEAD_MS }));
            }
        }
        Ending::Failed { exit_status } => led.play(error_steps(exit_status)),
    }
}

/// Shows the ending once (before QEMU exits or the board powers off), then prints the changes
/// with `led=trace` (through the console's lock-free writer: this is the exception path too).
pub fn show_ending_once(ending: Ending) {
    LED.with(|led| {
        if let Some(led) = led {
            play_ending(led, ending, false);
            if let (Some(trace), Some(mut out)) = (&led.trace, super::console::emergency_writer()) {
                trace.print(&led.timer, &mut out);
            }
        }
    });
}

/// Repeats the ending for ever; returns at once when there is no LED (or it is in use: an
/// exception taken while it was being driven).
pub fn repeat_ending(ending: Ending) {
    LED.with(|led| {
        if let Some(led) = led {
            loop {
                play_ending(led, ending, true);
            }
        }
    });
}
