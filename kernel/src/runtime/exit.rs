//! How a run ends: QEMU semihosting exit with a status (only when the command line asks,
//! because the semihosting trap is undefined or a supervisor call on real hardware), PSCI SYSTEM_OFF through the
//! conduit `board::choose_psci_conduit` picked (Arm DEN0022 §5.2), or a report and an idle loop
//! with the console alive.
#![forbid(unsafe_code)]

use super::console;
use crate::kernel_settings::ExitMethod;
use core::sync::atomic::{AtomicU8, Ordering};

/// Exit statuses the kernel reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ExitStatus {
    /// Everything asked for ran.
    Success = 0,
    /// The run finished, but some device failed, some check did not match, or (with
    /// `throttle=fail`) the SoC was throttled or under-voltage during the benchmark.
    DeviceErrors = 2,
    /// A CPU exception was taken.
    Exception = 3,
    /// The kernel panicked.
    Panic = 4,
    /// The board is not one the kernel knows; nothing was touched.
    UnknownBoard = 5,
}

pub use crate::board::PsciConduit;

static EXIT_METHOD: AtomicU8 = AtomicU8::new(0);
static PSCI_CONDUIT: AtomicU8 = AtomicU8::new(0);

pub fn set_method(method: ExitMethod, conduit: PsciConduit) {
    let method_code = match method {
        ExitMethod::Idle => 0,
        ExitMethod::Semihosting => 1,
        ExitMethod::Psci => 2,
    };
    EXIT_METHOD.store(method_code, Ordering::Release);
    PSCI_CONDUIT.store(matches!(conduit, PsciConduit::Smc) as u8, Ordering::Release);
}

fn method() -> ExitMethod {
    match EXIT_METHOD.load(Ordering::Acquire) {
        1 => ExitMethod::Semihosting,
        2 => ExitMethod::Psci,
        _ => ExitMethod::Idle,
    }
}

/// Semihosting exit with `code` (docs/qemu.md §4); idles if nobody answers.
fn semihosting_exit(code: u32) -> ! {
    super::arch::semihosting_exit(code);
    idle()
}

/// PSCI SYSTEM_OFF (function 0x8400_0008).
fn psci_system_off() -> ! {
    super::arch::psci_call(0x8400_0008, PSCI_CONDUIT.load(Ordering::Acquire) == 1);
    idle()
}

/// Waits for interrupts forever (none are enabled, so this is a low-power stop).
pub fn idle() -> ! {
    loop {
        super::arch::wait_for_interrupt();
    }
}

/// Ends the run with `status` the way the command line asked.
pub fn finish(status: ExitStatus) -> ! {
    match method() {
        ExitMethod::Semihosting => {
            console::flush();
            super::led::show_ending_once(led_ending(status));
            semihosting_exit(status as u32)
        }
        ExitMethod::Psci => {
            crate::println!("barebench: finished with status {} ({:?}); powering off", status as u32, status);
            console::flush();
            super::led::show_ending_once(led_ending(status));
            psci_system_off()
        }
        ExitMethod::Idle => {
            crate::print!("barebench: finished with status {} ({:?}); idling", status as u32, status);
            if super::led::is_driven() {
                crate::print!(" (the activity LED repeats {})", ending_pattern(status));
            }
            crate::println!();
            console::flush();
            super::led::repeat_ending(led_ending(status));
            idle()
        }
    }
}

/// How the activity LED shows `status` (docs/led.md).
fn led_ending(status: ExitStatus) -> super::led::Ending {
    match status {
        ExitStatus::Success => super::led::Ending::BenchmarkDone,
        failed => super::led::Ending::Failed { exit_status: failed as u32 },
    }
}

/// What the LED repeats at the end (docs/led.md).
fn ending_pattern(status: ExitStatus) -> &'static str {
    match status {
        ExitStatus::Success => "5 short blinks: benchmark done",
        _ => "the exit status as long blinks",
    }
}

/// The exception and panic paths: same choice, without the console lock.
pub fn finish_after_fault(status: ExitStatus) -> ! {
    match method() {
        ExitMethod::Semihosting => {
            super::led::show_ending_once(led_ending(status));
            semihosting_exit(status as u32)
        }
        ExitMethod::Psci => {
            super::led::show_ending_once(led_ending(status));
            psci_system_off()
        }
        ExitMethod::Idle => {
            super::led::repeat_ending(led_ending(status));
            idle()
        }
    }
}
