//! The kernel's clock: the ARM generic timer (CNTPCT ticks at CNTFRQ, read at run time: 19.2 MHz
//! on Pi 2/3, 54 MHz on Pi 4/5, 62.5 MHz under QEMU: docs/hardware.md §1.5, docs/qemu.md §1), or
//! on the ARM1176 Pis, which have no generic timer, the BCM2835 system timer's 1 MHz counter
//! (docs/aarch32-pis.md §5), with an `embedded-hal` delay.
#![forbid(unsafe_code)]

use super::windows;
use crate::board::{BlockKind, BoardProfile, BoardTimer};
use blockdev::Clock;
use boot::cpu::registers;
use drivers::system_timer::SystemTimer;
use drivers::timebase::{TimebaseCheck, TimebaseSources};
use hal::mmio::Mmio;

/// Where the ticks come from.
#[derive(Clone, Copy, Debug)]
enum Source {
    Generic,
    /// The system timer block's window.
    SystemTimer {
        window: Mmio,
    },
}

/// The kernel's timer. Copyable; every copy reads the same counter.
#[derive(Clone, Copy, Debug)]
pub struct KernelTimer {
    source: Source,
    ticks_per_second: u64,
}

impl KernelTimer {
    /// The generic timer at CNTFRQ. A zero frequency (firmware that never set it) is reported by
    /// the caller.
    pub fn generic() -> Self {
        KernelTimer { source: Source::Generic, ticks_per_second: registers::counter_frequency_hz() }
    }

    /// The board's timer. For the BCM2836 and BCM2837 the ARM-local prescaler is first set to divide by
    /// one from the crystal, so that CNTPCT counts at the CNTFRQ the firmware wrote.
    pub fn for_board(profile: &BoardProfile) -> Self {
        match profile.timer {
            BoardTimer::SystemTimer => match windows::open_kind(profile, BlockKind::SystemTimer) {
                Ok(window) => KernelTimer {
                    source: Source::SystemTimer { window },
                    ticks_per_second: drivers::system_timer::TICKS_PER_SECOND,
                },
                Err(_) => Self::generic(),
            },
            BoardTimer::GenericWithLocalPrescaler => {
                // Control = 0 selects the crystal with increment 1, prescaler 0x8000_0000 divides
                // by one (armstub8).
                if let Ok(local) = windows::open_kind(profile, BlockKind::ArmLocal) {
                    hal::mmio::RegisterIo::write32(&local, 0x00, 0);
                    hal::mmio::RegisterIo::write32(&local, 0x08, 0x8000_0000);
                }
                Self::generic()
            }
            BoardTimer::Generic => Self::generic(),
        }
    }

    /// Checks the generic counter against the board's 1 MHz system timer
    /// (`drivers::timebase`): a counter that strays more than 1 % from CNTFRQ would scale every
    /// figure, so the system timer becomes the kernel's clock instead, which the caller says.
    /// `None` where there is nothing to check (the system timer already is the clock) or
    /// nothing to check against (QEMU virt).
    pub fn checked_against_system_timer(self, profile: &BoardProfile) -> (Self, Option<TimebaseCheck>) {
        if !matches!(self.source, Source::Generic) {
            return (self, None);
        }
        let Ok(window) = windows::open_kind(profile, BlockKind::SystemTimer) else {
            return (self, None);
        };
        let mut sources = GenericAgainstSystemTimer { system_timer: SystemTimer::new(window) };
        let check = drivers::timebase::check_counter(&mut sources, self.ticks_per_second);
        let timer = if check.disagrees() {
            KernelTimer {
                source: Source::SystemTimer { window },
                ticks_per_second: drivers::system_timer::TICKS_PER_SECOND,
            }
        } else {
            self
        };
        (timer, Some(check))
    }

    /// The source and its rate for the banner (no allocation: printed before the heap exists).
    pub fn describe(&self) -> TimerDescription {
        TimerDescription(*self)
    }
}

/// The generic counter and the system timer, for the boot-time check.
struct GenericAgainstSystemTimer {
    system_timer: SystemTimer<Mmio>,
}

impl TimebaseSources for GenericAgainstSystemTimer {
    fn counter_ticks(&mut self) -> u64 {
        hal::counter::generic_counter_ticks()
    }
    fn reference_us(&mut self) -> u64 {
        self.system_timer.ticks()
    }
}

/// `62.500 MHz (CNTFRQ = 62500000)`, or `1.000 MHz (BCM2835 system timer at 0x20003000;
/// latency resolution 1000 ns)`.
pub struct TimerDescription(KernelTimer);

impl core::fmt::Display for TimerDescription {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let hz = self.0.ticks_per_second;
        write!(f, "{}.{:03} MHz ", hz / 1_000_000, (hz % 1_000_000) / 1000)?;
        match self.0.source {
            Source::Generic if cfg!(target_arch = "aarch64") => write!(f, "(CNTFRQ_EL0 = {hz})"),
            Source::Generic => write!(f, "(CNTFRQ = {hz})"),
            Source::SystemTimer { window } => write!(
                f,
                "(BCM2835 system timer at {:#x}; latency resolution {} ns)",
                window.base_address(),
                1_000_000_000 / hz.max(1)
            ),
        }
    }
}

impl Clock for KernelTimer {
    #[inline(always)]
    fn now_ticks(&self) -> u64 {
        match self.source {
            Source::Generic => hal::counter::generic_counter_ticks(),
            Source::SystemTimer { window } => SystemTimer::new(window).ticks(),
        }
    }

    fn ticks_per_second(&self) -> u64 {
        self.ticks_per_second
    }

    fn is_generic_counter(&self) -> bool {
        matches!(self.source, Source::Generic)
    }
}

impl embedded_hal::delay::DelayNs for KernelTimer {
    fn delay_ns(&mut self, ns: u32) {
        // Rounded up, plus the tick in progress: at least `ns` even on a 1 MHz counter.
        let ticks = (u64::from(ns) * self.ticks_per_second).div_ceil(1_000_000_000) + 1;
        let end = self.now_ticks() + ticks;
        while self.now_ticks() < end {
            core::hint::spin_loop();
        }
    }
}

/// The kernel's timer at its first instruction, before it knows the board: CNTPCT on every core
/// with a generic timer; on the ARM1176, which has none, the system timer of the only SoC it
/// comes in (BCM2835, whose table gives it at 0x2000_3000), read with the MMU off.
pub fn ticks_at_entry(main_id: boot::cpu::MainId) -> u64 {
    #[cfg(target_arch = "arm")]
    if let Some(window) = windows::bcm2835_system_timer_at_entry(main_id) {
        return SystemTimer::new(window).ticks();
    }
    let _ = main_id;
    hal::counter::generic_counter_ticks()
}

/// The firmware's part of the boot (docs/hardware.md §4.7): where the board has a system timer,
/// its reading at the kernel's entry (worked back from now); on QEMU virt, CNTPCT at entry.
pub fn firmware_part_ns(
    info: &crate::discovery::BoardInfo,
    timer: &KernelTimer,
    entry_ticks: u64,
) -> Option<u64> {
    let since_entry_ns = timer.ticks_to_ns(timer.now_ticks().saturating_sub(entry_ticks));
    match windows::open_kind(info.profile, BlockKind::SystemTimer) {
        Ok(window) => {
            let now_us = SystemTimer::new(window).ticks();
            Some(crate::boot_time::system_timer_at_entry_ns(now_us, since_entry_ns))
        }
        Err(_) => Some(timer.ticks_to_ns(entry_ticks)),
    }
}
