//! BCM2835/BCM2711 GPIO function select (BCM2835 ARM Peripherals §6.1: GPFSELn at 0x00–0x14,
//! three bits per pin, ten pins per register) and output levels (GPSETn at 0x1c/0x20, GPCLRn at
//! 0x28/0x2c, GPLEVn at 0x34/0x38, one bit per pin, 32 pins per register). Used to route the
//! PL011 to GPIO 14/15 and the SD pins (GPIO 48–53) to the chosen controller (docs/hardware.md
//! §2.1, docs/qemu.md §2) and to drive the activity LED. [`BrcmstbGpioBank`] is BCM2712's
//! always-on GPIO (the SD slot's power and 1.8 V lines, the Pi 5's LED).
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

/// Output set, output clear and level registers of bank 0 (pins 0-31); bank 1 is 4 bytes on.
const GPSET0: usize = 0x1c;
const GPCLR0: usize = 0x28;
const GPLEV0: usize = 0x34;

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

    /// Drives an output pin high or low: one write to GPSETn or GPCLRn, which touch only the
    /// pins whose bits are set (no read-modify-write, so no other pin can change).
    pub fn set_level(&self, pin: u32, high: bool) {
        if pin >= PIN_COUNT {
            return;
        }
        let register = if high { GPSET0 } else { GPCLR0 };
        self.registers.write32(register + (pin / 32) as usize * 4, 1 << (pin % 32));
    }

    /// The pin's level as GPLEVn reads it.
    pub fn level(&self, pin: u32) -> bool {
        pin < PIN_COUNT && self.registers.read32(GPLEV0 + (pin / 32) as usize * 4) & (1 << (pin % 32)) != 0
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

/// One bank of BCM2712's always-on GPIO (`brcm,brcmstb-gpio`, Linux
/// `drivers/gpio/gpio-brcmstb.c`: DATA at +0x04, IODIR at +0x08 with a set bit meaning input;
/// 32 lines per bank).
pub struct BrcmstbGpioBank<R: RegisterIo> {
    registers: R,
}

/// DATA and IODIR of the bank.
pub const BRCMSTB_DATA: usize = 0x04;
pub const BRCMSTB_IODIR: usize = 0x08;

impl<R: RegisterIo> BrcmstbGpioBank<R> {
    pub fn new(registers: R) -> Self {
        BrcmstbGpioBank { registers }
    }

    /// Drives the lines of `mask` high or low and makes them outputs (level first, so that the
    /// line never drives the old level).
    pub fn set_output(&self, mask: u32, high: bool) {
        let data = self.registers.read32(BRCMSTB_DATA);
        self.registers.write32(BRCMSTB_DATA, if high { data | mask } else { data & !mask });
        let direction = self.registers.read32(BRCMSTB_IODIR);
        if direction & mask != 0 {
            self.registers.write32(BRCMSTB_IODIR, direction & !mask);
        }
    }

    /// Whether the lines of `mask` are all driven high.
    pub fn level(&self, mask: u32) -> bool {
        self.registers.read32(BRCMSTB_DATA) & mask == mask
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
    fn levels_are_set_and_cleared_per_pin_through_the_set_and_clear_registers() {
        let gpio = Bcm2835Gpio::new(crate::activity_led::model::GpioModel::bcm2835());
        gpio.set_functions(42..=42, PinFunction::Output);
        gpio.set_level(42, true);
        assert!(gpio.level(42) && !gpio.level(41));
        gpio.set_level(42, false);
        assert!(!gpio.level(42));
        gpio.set_functions(16..=16, PinFunction::Output);
        gpio.set_level(16, true);
        assert!(gpio.level(16) && !gpio.level(42));
        // A pin beyond the block is ignored.
        gpio.set_level(60, true);
    }

    #[test]
    fn a_brcmstb_line_gets_its_level_before_it_becomes_an_output() {
        let bank = BrcmstbGpioBank::new(crate::activity_led::model::GpioModel::brcmstb());
        bank.set_output(1 << 9, false);
        assert!(!bank.level(1 << 9));
        bank.set_output(1 << 9, true);
        assert!(bank.level(1 << 9));
        assert_eq!(bank.registers.read32(BRCMSTB_IODIR) & (1 << 9), 0, "an output");
        // Other lines keep their levels.
        assert_eq!(bank.registers.read32(BRCMSTB_DATA) & !(1 << 9), 0);
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
