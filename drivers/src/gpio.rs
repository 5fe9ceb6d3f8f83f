//! BCM2835/BCM2711 GPIO function select (BCM2835 ARM Peripherals §6.1: GPFSELn at 0x00–0x14,
//! three bits per pin, ten pins per register). Used to route the PL011 to GPIO 14/15 and the SD
//! pins (GPIO 48–53) to the chosen controller (docs/hardware.md §2.1, docs/qemu.md §2).
#![forbid(unsafe_code)]

use hal::mmio::RegisterIo;

/// A pin's function-select value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinFunction {
    Input = 0b000,
    Output = 0b001,
    Alt0 = 0b100,
    Alt1 = 0b101,
    Alt2 = 0b110,
    Alt3 = 0b111,
    Alt4 = 0b011,
    Alt5 = 0b010,
}

impl PinFunction {
    pub fn from_bits(bits: u32) -> PinFunction {
        match bits & 0b111 {
            0b000 => PinFunction::Input,
            0b001 => PinFunction::Output,
            0b100 => PinFunction::Alt0,
            0b101 => PinFunction::Alt1,
            0b110 => PinFunction::Alt2,
            0b111 => PinFunction::Alt3,
            0b011 => PinFunction::Alt4,
            _ => PinFunction::Alt5,
        }
    }
}

/// The highest pin of the BCM2835-style GPIO block.
pub const PIN_COUNT: u32 = 58;

pub struct Bcm2835Gpio<R: RegisterIo> {
    registers: R,
}

impl<R: RegisterIo> Bcm2835Gpio<R> {
    pub fn new(registers: R) -> Self {
        Bcm2835Gpio { registers }
    }

    fn select_register(pin: u32) -> (usize, u32) {
        ((pin / 10) as usize * 4, (pin % 10) * 3)
    }

    pub fn function(&self, pin: u32) -> PinFunction {
        let (offset, shift) = Self::select_register(pin);
        PinFunction::from_bits(self.registers.read32(offset) >> shift)
    }

    /// Sets the functions of several pins, one read-modify-write per select register touched.
    pub fn set_functions(&self, pins: core::ops::RangeInclusive<u32>, function: PinFunction) {
        let mut pin = *pins.start();
        while pin <= *pins.end() && pin < PIN_COUNT {
            let (offset, _) = Self::select_register(pin);
            let mut value = self.registers.read32(offset);
            while pin <= *pins.end() && Self::select_register(pin).0 == offset {
                let shift = Self::select_register(pin).1;
                value = (value & !(0b111 << shift)) | ((function as u32) << shift);
                pin += 1;
            }
            self.registers.write32(offset, value);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::RefCell;

    struct FakeGpio(RefCell<[u32; 6]>);
    impl RegisterIo for FakeGpio {
        fn read32(&self, offset_bytes: usize) -> u32 {
            self.0.borrow()[offset_bytes / 4]
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            self.0.borrow_mut()[offset_bytes / 4] = value;
        }
    }

    #[test]
    fn sd_pins_span_two_registers_and_keep_neighbours() {
        let gpio = Bcm2835Gpio::new(FakeGpio(RefCell::new([u32::MAX; 6])));
        gpio.set_functions(48..=53, PinFunction::Alt0);
        // GPFSEL4 holds pins 40-49, GPFSEL5 pins 50-57 (docs/qemu.md §2 gives the ALT0 words).
        assert_eq!((gpio.registers.0.borrow()[4] >> 24) & 0x3f, 0b100_100);
        assert_eq!(gpio.registers.0.borrow()[4] & 0x00ff_ffff, 0x00ff_ffff);
        assert_eq!(gpio.registers.0.borrow()[5] & 0xfff, 0b100_100_100_100);
        assert_eq!(gpio.function(53), PinFunction::Alt0);
        assert_eq!(gpio.function(47), PinFunction::Alt3);
        gpio.set_functions(14..=15, PinFunction::Alt0);
        assert_eq!(gpio.function(14), PinFunction::Alt0);
        assert_eq!(gpio.function(16), PinFunction::Alt3);
    }
}
