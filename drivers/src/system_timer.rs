//! The BCM2835 system timer's free-running counter (BCM2835 ARM Peripherals ch. 12 p.172: CLO
//! at +0x04 and CHI at +0x08 hold a 64-bit count of a 1 MHz clock; docs/aarch32-pis.md §5): the
//! only timer of the ARM1176 Pis, and so the latency clock of Pi 1 and Zero, with 1 µs
//! resolution.
#![forbid(unsafe_code)]

use hal::mmio::RegisterIo;

/// The counter's rate.
pub const TICKS_PER_SECOND: u64 = 1_000_000;
const COUNTER_LOW: usize = 0x04;
const COUNTER_HIGH: usize = 0x08;

pub struct SystemTimer<R: RegisterIo> {
    registers: R,
}

impl<R: RegisterIo> SystemTimer<R> {
    pub fn new(registers: R) -> Self {
        SystemTimer { registers }
    }

    /// The 64-bit count, consistent across a carry from CLO into CHI: CHI, CLO, CHI again, and
    /// CLO once more when CHI moved in between.
    pub fn ticks(&self) -> u64 {
        let high = self.registers.read32(COUNTER_HIGH);
        let low = self.registers.read32(COUNTER_LOW);
        let high_again = self.registers.read32(COUNTER_HIGH);
        if high == high_again {
            return (u64::from(high) << 32) | u64::from(low);
        }
        (u64::from(high_again) << 32) | u64::from(self.registers.read32(COUNTER_LOW))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// A counter that advances `step` on every CLO read, as a 1 MHz counter read slowly would.
    struct Counter {
        value: Cell<u64>,
        step: u64,
    }
    impl RegisterIo for Counter {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match offset_bytes {
                COUNTER_LOW => {
                    let value = self.value.get();
                    self.value.set(value + self.step);
                    value as u32
                }
                COUNTER_HIGH => (self.value.get() >> 32) as u32,
                _ => panic!("unexpected register {offset_bytes:#x}"),
            }
        }
        fn write32(&self, offset_bytes: usize, _: u32) {
            panic!("the counter is never written ({offset_bytes:#x})");
        }
    }

    #[test]
    fn a_carry_between_the_halves_is_never_torn() {
        // CLO wraps between the first CHI and CLO reads: a naive read would give 0x1_0000_0000
        // + 0xffff_fffe... or 0x0_0000_0002; the consistent read gives the later value.
        let timer = SystemTimer::new(Counter { value: Cell::new(0xffff_fffe), step: 4 });
        let first = timer.ticks();
        assert_eq!(first, 0x1_0000_0002);
        let second = timer.ticks();
        assert!(second > first);
        // Without a carry the first CLO read stands.
        let timer = SystemTimer::new(Counter { value: Cell::new(0x5_0000_1000), step: 1 });
        assert_eq!(timer.ticks(), 0x5_0000_1000);
    }

    #[test]
    fn successive_reads_never_go_backwards() {
        let timer = SystemTimer::new(Counter { value: Cell::new(0xffff_ff00), step: 3 });
        let mut last = 0;
        for _ in 0..200 {
            let now = timer.ticks();
            assert!(now >= last, "{now:#x} after {last:#x}");
            last = now;
        }
    }
}
