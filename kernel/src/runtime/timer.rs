//! The ARM generic timer as the kernel's clock: CNTPCT_EL0 ticks, CNTFRQ_EL0 read at run time
//! (19.2 MHz on Pi 3, 54 MHz on Pi 4/5, 62.5 MHz under QEMU: docs/hardware.md §1.5, docs/qemu.md §1), with
//! an `embedded-hal` delay.

use blockdev::Clock;
use boot::cpu::registers;

/// The generic timer. Copyable; every copy reads the same counter.
#[derive(Clone, Copy, Debug)]
pub struct GenericTimer {
    ticks_per_second: u64,
}

impl GenericTimer {
    /// Reads CNTFRQ_EL0. A zero frequency (firmware that never set it) is reported by the caller.
    pub fn new() -> Self {
        GenericTimer { ticks_per_second: registers::counter_frequency_hz() }
    }
}

impl Default for GenericTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for GenericTimer {
    #[inline(always)]
    fn now_ticks(&self) -> u64 {
        registers::counter_ticks()
    }

    fn ticks_per_second(&self) -> u64 {
        self.ticks_per_second
    }
}

impl embedded_hal::delay::DelayNs for GenericTimer {
    fn delay_ns(&mut self, ns: u32) {
        let end = self.now_ticks() + self.ns_to_ticks(u64::from(ns));
        while self.now_ticks() < end {
            core::hint::spin_loop();
        }
    }
}
