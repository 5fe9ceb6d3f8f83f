//! PL011 UART transmit/receive, 8N1 with FIFOs (Arm PrimeCell UART (PL011) TRM DDI 0183, §3.3
//! register summary; baud divisor §3.3.6).
#![forbid(unsafe_code)]

use hal::mmio::{Reg, RegisterIo};
use tock_registers::{register_bitfields, LocalRegisterCopy};

/// Register offsets (PL011 TRM §3.3).
pub mod offsets {
    pub const DATA: usize = 0x00;
    pub const FLAG: usize = 0x18;
    pub const INTEGER_BAUD_RATE: usize = 0x24;
    pub const FRACTIONAL_BAUD_RATE: usize = 0x28;
    pub const LINE_CONTROL: usize = 0x2c;
    pub const CONTROL: usize = 0x30;
    pub const INTERRUPT_MASK: usize = 0x38;
    pub const INTERRUPT_CLEAR: usize = 0x44;
}

register_bitfields![u32,
    pub FLAG [
        BUSY OFFSET(3) NUMBITS(1) [],
        RX_FIFO_EMPTY OFFSET(4) NUMBITS(1) [],
        TX_FIFO_FULL OFFSET(5) NUMBITS(1) [],
        TX_FIFO_EMPTY OFFSET(7) NUMBITS(1) []
    ],
    pub LINE_CONTROL [
        FIFO_ENABLE OFFSET(4) NUMBITS(1) [],
        WORD_LENGTH OFFSET(5) NUMBITS(2) [EightBits = 0b11]
    ],
    pub CONTROL [
        UART_ENABLE OFFSET(0) NUMBITS(1) [],
        TRANSMIT_ENABLE OFFSET(8) NUMBITS(1) [],
        RECEIVE_ENABLE OFFSET(9) NUMBITS(1) []
    ]
];

/// The registers with fields.
pub const FLAG: Reg<FLAG::Register> = Reg::new(offsets::FLAG);
pub const LINE_CONTROL: Reg<LINE_CONTROL::Register> = Reg::new(offsets::LINE_CONTROL);
pub const CONTROL: Reg<CONTROL::Register> = Reg::new(offsets::CONTROL);

/// IBRD and FBRD for a baud rate: divisor = clock / (16 × baud), FBRD = round(fraction × 64).
pub fn baud_divisors(uart_clock_hz: u32, baud: u32) -> Option<(u32, u32)> {
    if baud == 0 {
        return None;
    }
    // Divisor × 64, rounded to nearest: (clock × 4 / baud + 1) / 2 keeps it in integers.
    let divisor_times_64 = (u64::from(uart_clock_hz) * 8 / u64::from(baud)).div_ceil(2);
    let integer = (divisor_times_64 >> 6) as u32;
    let fraction = (divisor_times_64 & 0x3f) as u32;
    // IBRD is 16 bits and must be non-zero (TRM §3.3.6).
    if integer == 0 || integer > 0xffff {
        return None;
    }
    Some((integer, fraction))
}

/// A PL011 in polled mode.
pub struct Pl011<R: RegisterIo> {
    registers: R,
}

/// How many flag-register reads a byte may wait for the transmit FIFO before it is dropped, so a
/// stuck UART (clock off, flow control asserted) never hangs the kernel.
const TRANSMIT_SPIN_LIMIT: u32 = 1_000_000;

impl<R: RegisterIo> Pl011<R> {
    pub fn new(registers: R) -> Self {
        Pl011 { registers }
    }

    /// Programs 8N1 with FIFOs at `baud` from `uart_clock_hz`, interrupts masked. With
    /// `uart_clock_hz` = `None` the divisors the firmware set are kept (Pi 5 debug UART, whose
    /// real clock disagrees with its device tree: docs/hardware.md §4.3).
    pub fn configure(&self, uart_clock_hz: Option<u32>, baud: u32) {
        self.drain_transmitter();
        self.registers.write32(offsets::CONTROL, 0);
        self.registers.write32(offsets::INTERRUPT_MASK, 0);
        self.registers.write32(offsets::INTERRUPT_CLEAR, 0x7ff);
        if let Some((integer, fraction)) = uart_clock_hz.and_then(|clock| baud_divisors(clock, baud)) {
            self.registers.write32(offsets::INTEGER_BAUD_RATE, integer);
            self.registers.write32(offsets::FRACTIONAL_BAUD_RATE, fraction);
        }
        // LCRH must be written after the divisors for them to take effect (TRM §3.3.7).
        self.registers
            .write(LINE_CONTROL, LINE_CONTROL::WORD_LENGTH::EightBits + LINE_CONTROL::FIFO_ENABLE::SET);
        let control =
            CONTROL::UART_ENABLE::SET + CONTROL::TRANSMIT_ENABLE::SET + CONTROL::RECEIVE_ENABLE::SET;
        self.registers.write(CONTROL, control);
    }

    /// Whether someone (the firmware) left the UART able to send: enabled with its transmitter
    /// on, a 16-bit integer divisor other than 0 and a 6-bit fraction (PL011 TRM §3.3.6-3.3.8).
    /// A block that does not answer (all ones, or the 0xDEADDEAD of an unreachable RP1) fails.
    pub fn is_set_up(&self) -> bool {
        let control =
            LocalRegisterCopy::<u32, CONTROL::Register>::new(self.registers.read32(offsets::CONTROL));
        let (integer, fraction) = self.divisors();
        control.is_set(CONTROL::UART_ENABLE)
            && control.is_set(CONTROL::TRANSMIT_ENABLE)
            && (1..=0xffff).contains(&integer)
            && fraction < 64
            && control.get() >> 16 == 0
    }

    /// The divisors currently programmed (IBRD, FBRD).
    pub fn divisors(&self) -> (u32, u32) {
        (
            self.registers.read32(offsets::INTEGER_BAUD_RATE),
            self.registers.read32(offsets::FRACTIONAL_BAUD_RATE),
        )
    }

    fn flags(&self) -> LocalRegisterCopy<u32, FLAG::Register> {
        self.registers.read(FLAG)
    }

    /// Queues one byte; returns false if the FIFO stayed full (the byte is dropped).
    pub fn write_byte(&self, byte: u8) -> bool {
        let mut spins = 0;
        while self.flags().is_set(FLAG::TX_FIFO_FULL) {
            spins += 1;
            if spins == TRANSMIT_SPIN_LIMIT {
                return false;
            }
            core::hint::spin_loop();
        }
        self.registers.write32(offsets::DATA, u32::from(byte));
        true
    }

    /// Queues bytes while the transmit FIFO has room, without waiting, and returns how many it
    /// took (for output that must never hold up the caller, such as the benchmark's progress
    /// line). Bytes are sent as they are.
    pub fn write_available(&self, bytes: &[u8]) -> usize {
        let mut taken = 0;
        for &byte in bytes {
            if self.flags().is_set(FLAG::TX_FIFO_FULL) {
                break;
            }
            self.registers.write32(offsets::DATA, u32::from(byte));
            taken += 1;
        }
        taken
    }

    /// Writes text, turning "\n" into "\r\n" for terminals.
    pub fn write_text(&self, text: &str) {
        for byte in text.bytes() {
            if byte == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(byte);
        }
    }

    /// A received byte, if one is waiting.
    pub fn read_byte(&self) -> Option<u8> {
        if self.flags().is_set(FLAG::RX_FIFO_EMPTY) {
            None
        } else {
            Some(self.registers.read32(offsets::DATA) as u8)
        }
    }

    /// Waits (bounded) until everything queued has left the shift register.
    pub fn drain_transmitter(&self) {
        let mut spins = 0;
        while self.flags().is_set(FLAG::BUSY) && spins < TRANSMIT_SPIN_LIMIT {
            spins += 1;
            core::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

    #[test]
    fn divisors_for_each_board_clock() {
        // Pi 3/4 PL011 at 48 MHz: IBRD 26, FBRD 3 (docs/hardware.md §4.1).
        assert_eq!(baud_divisors(48_000_000, 115_200), Some((26, 3)));
        // Pi 5 debug UART at 44.2368 MHz: IBRD 24, FBRD 0 (docs/hardware.md §4.3).
        assert_eq!(baud_divisors(44_236_800, 115_200), Some((24, 0)));
        // The Pi 5 device tree's 9.216 MHz: IBRD 5, FBRD 0 (docs/ecosystem.md §4.1).
        assert_eq!(baud_divisors(9_216_000, 115_200), Some((5, 0)));
        // QEMU virt's 24 MHz APB clock: 13.0208 -> 13, 1.
        assert_eq!(baud_divisors(24_000_000, 115_200), Some((13, 1)));
        // QEMU raspi's mailbox answers 3 MHz for the UART: 1.6276 -> 1, 40.
        assert_eq!(baud_divisors(3_000_000, 115_200), Some((1, 40)));
        assert_eq!(baud_divisors(1_000_000, 115_200), None);
        assert_eq!(baud_divisors(48_000_000, 0), None);
    }

    struct FakeUart {
        written: RefCell<Vec<(usize, u32)>>,
        flag: u32,
    }
    impl RegisterIo for FakeUart {
        fn read32(&self, offset_bytes: usize) -> u32 {
            if offset_bytes == offsets::FLAG {
                self.flag
            } else {
                0
            }
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            self.written.borrow_mut().push((offset_bytes, value));
        }
    }

    #[test]
    fn configure_writes_divisors_before_line_control_and_enables_last() {
        let uart = Pl011::new(FakeUart { written: RefCell::new(Vec::new()), flag: 0 });
        uart.configure(Some(48_000_000), 115_200);
        let writes = uart.registers.written.borrow().clone();
        let position = |offset| writes.iter().position(|w| w.0 == offset).unwrap();
        assert!(position(offsets::INTEGER_BAUD_RATE) < position(offsets::LINE_CONTROL));
        assert_eq!(writes.last().unwrap(), &(offsets::CONTROL, 0x301));
        assert!(writes.contains(&(offsets::INTEGER_BAUD_RATE, 26)));
        assert!(writes.contains(&(offsets::LINE_CONTROL, 0x70)));
    }

    /// Registers that read as the given (CR, IBRD, FBRD) and refuse writes.
    struct Programmed(u32, u32, u32);
    impl RegisterIo for Programmed {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match offset_bytes {
                offsets::CONTROL => self.0,
                offsets::INTEGER_BAUD_RATE => self.1,
                offsets::FRACTIONAL_BAUD_RATE => self.2,
                other => panic!("read of {other:#x}"),
            }
        }
        fn write32(&self, offset_bytes: usize, _: u32) {
            panic!("the check writes nothing ({offset_bytes:#x})");
        }
    }

    #[test]
    fn a_uart_the_firmware_set_up_is_told_from_one_nobody_answers_for() {
        // RP1 UART0 at 115200 from its 50 MHz clock (IBRD 27, FBRD 8), enabled (docs/hardware.md §4.3).
        assert!(Pl011::new(Programmed(0x301, 27, 8)).is_set_up());
        assert!(!Pl011::new(Programmed(0, 27, 8)).is_set_up(), "disabled");
        assert!(!Pl011::new(Programmed(0x201, 27, 8)).is_set_up(), "transmitter off");
        assert!(!Pl011::new(Programmed(0x301, 0, 0)).is_set_up(), "no divisor");
        assert!(!Pl011::new(Programmed(0xdead_dead, 0xdead_dead, 0xdead_dead)).is_set_up());
        assert!(!Pl011::new(Programmed(u32::MAX, u32::MAX, u32::MAX)).is_set_up());
    }

    /// A transmit FIFO that holds `capacity` bytes and sends nothing until the test says so.
    struct FifoUart {
        capacity: usize,
        sent: RefCell<Vec<u8>>,
        queued: core::cell::Cell<usize>,
        flag_reads: core::cell::Cell<usize>,
    }
    impl RegisterIo for FifoUart {
        fn read32(&self, offset_bytes: usize) -> u32 {
            assert_eq!(offset_bytes, offsets::FLAG);
            self.flag_reads.set(self.flag_reads.get() + 1);
            if self.queued.get() == self.capacity {
                1 << 5
            } else {
                0
            }
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            assert_eq!(offset_bytes, offsets::DATA);
            assert!(self.queued.get() < self.capacity, "written while TXFF was set");
            self.queued.set(self.queued.get() + 1);
            self.sent.borrow_mut().push(value as u8);
        }
    }

    #[test]
    fn write_available_fills_the_fifo_and_never_waits() {
        let uart = Pl011::new(FifoUart {
            capacity: 16,
            sent: RefCell::new(Vec::new()),
            queued: core::cell::Cell::new(10),
            flag_reads: core::cell::Cell::new(0),
        });
        assert_eq!(uart.write_available(b"0123456789abcdef"), 6);
        assert_eq!(uart.registers.sent.borrow().as_slice(), b"012345");
        // Full: one flag read, nothing taken.
        assert_eq!(uart.write_available(b"6789"), 0);
        assert_eq!(uart.registers.flag_reads.get(), 8);
        uart.registers.queued.set(14);
        assert_eq!(uart.write_available(b"6789"), 2);
        assert_eq!(uart.write_available(b""), 0);
    }

    #[test]
    fn newlines_become_crlf_and_a_full_fifo_drops_bytes() {
        let uart = Pl011::new(FakeUart { written: RefCell::new(Vec::new()), flag: 0 });
        uart.write_text("a\n");
        let data: Vec<u32> = uart.registers.written.borrow().iter().map(|w| w.1).collect();
        assert_eq!(data, [b'a' as u32, b'\r' as u32, b'\n' as u32]);
        let stuck = Pl011::new(FakeUart { written: RefCell::new(Vec::new()), flag: 1 << 5 });
        assert!(!stuck.write_byte(b'x'));
        assert!(stuck.registers.written.borrow().is_empty());
    }
}
