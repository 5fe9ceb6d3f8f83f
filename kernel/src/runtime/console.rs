//! The serial console on the board's PL011, 115200 8N1, and the `print!`/`println!`
//! macros. The exception and panic paths write through [`emergency_writer`], which needs no lock.
#![forbid(unsafe_code)]

use super::sync::SingleCoreCell;
use super::windows;
use crate::board::{BlockKind, MmioBlock};
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};
use drivers::pl011::Pl011;
use hal::mmio::Mmio;

pub const BAUD: u32 = 115_200;

static CONSOLE: SingleCoreCell<Option<Pl011<Mmio>>> = SingleCoreCell::new(None);
static CONSOLE_BASE: AtomicUsize = AtomicUsize::new(0);
static CONSOLE_BYTES: AtomicUsize = AtomicUsize::new(0);
/// A second UART that gets the same text (the Pi 5's header pins, RP1 UART0), as the firmware
/// set it up; the in-place progress line stays on the first.
static MIRROR: SingleCoreCell<Option<Pl011<Mmio>>> = SingleCoreCell::new(None);
static MIRROR_BASE: AtomicUsize = AtomicUsize::new(0);
static MIRROR_BYTES: AtomicUsize = AtomicUsize::new(0);

/// Takes over the PL011 `block` (the board's, or one the device tree names). `uart_clock_hz` =
/// None keeps the firmware's divisors. Without a window on it there is no console.
pub fn init(block: MmioBlock, uart_clock_hz: Option<u32>) {
    let Ok(window) = windows::open(block) else {
        return;
    };
    let uart = Pl011::new(window);
    uart.configure(uart_clock_hz, BAUD);
    CONSOLE_BYTES.store(block.size_bytes as usize, Ordering::Release);
    CONSOLE_BASE.store(block.base as usize, Ordering::Release);
    CONSOLE.with(|console| *console = Some(uart));
}

/// Sends the console's text to the PL011 `block` too, with the settings it has (the caller has
/// checked that it answers and is set up). Without a window on it nothing changes.
pub fn add_mirror(block: MmioBlock) -> Result<(), windows::OutsideDevices> {
    let uart = Pl011::new(windows::open(block)?);
    MIRROR_BYTES.store(block.size_bytes as usize, Ordering::Release);
    MIRROR_BASE.store(block.base as usize, Ordering::Release);
    MIRROR.with(|mirror| *mirror = Some(uart));
    Ok(())
}

/// The PL011's divisors as programmed (IBRD, FBRD).
pub fn divisors() -> Option<(u32, u32)> {
    CONSOLE.with(|console| console.as_ref().map(|uart| uart.divisors())).flatten()
}

/// Writes formatted text; silently drops it before `init`.
pub fn write_fmt(args: fmt::Arguments<'_>) {
    CONSOLE.with(|console| {
        MIRROR.with(|mirror| {
            let mut both = Both { first: console.as_ref(), mirror: mirror.as_ref() };
            let _ = fmt::Write::write_fmt(&mut both, args);
        })
    });
}

/// The console and its mirror, when there is one.
struct Both<'a> {
    first: Option<&'a Pl011<Mmio>>,
    mirror: Option<&'a Pl011<Mmio>>,
}

impl fmt::Write for Both<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for uart in self.first.iter().chain(self.mirror.iter()) {
            uart.write_text(text);
        }
        Ok(())
    }
}

/// A received byte, if any.
pub fn read_byte() -> Option<u8> {
    CONSOLE.with(|console| console.as_ref().and_then(|uart| uart.read_byte())).flatten()
}

/// `core::fmt::Write` onto the console, for code that takes a writer (the benchmark).
pub struct ConsoleWriter;

impl fmt::Write for ConsoleWriter {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_fmt(format_args!("{text}"));
        Ok(())
    }
}

impl bench::console::Console for ConsoleWriter {
    /// What the PL011's transmit FIFO takes now; the benchmark's progress line never waits.
    fn write_without_waiting(&mut self, bytes: &[u8]) -> usize {
        CONSOLE
            .with(|console| console.as_ref().map(|uart| uart.write_available(bytes)))
            .flatten()
            .unwrap_or(0)
    }
}

impl embedded_io::ErrorType for ConsoleWriter {
    type Error = core::convert::Infallible;
}

impl embedded_io::Write for ConsoleWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<usize, Self::Error> {
        for cell in [&CONSOLE, &MIRROR] {
            cell.with(|uart| {
                if let Some(uart) = uart {
                    for &byte in bytes {
                        uart.write_byte(byte);
                    }
                }
            });
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> Result<(), Self::Error> {
        flush();
        Ok(())
    }
}

/// A writer for the exception and panic paths: no lock, usable even inside a console call; it
/// writes the mirror too.
pub fn emergency_writer() -> Option<impl fmt::Write> {
    let open = |base: &AtomicUsize, bytes: &AtomicUsize| {
        let base = base.load(Ordering::Acquire);
        if base == 0 {
            return None;
        }
        let block = MmioBlock::new(BlockKind::ConsoleUart, base as u64, bytes.load(Ordering::Acquire) as u64);
        // The block was stored by `init` or `add_mirror`, which opened it.
        windows::open(block).ok().map(Pl011::new)
    };
    let first = open(&CONSOLE_BASE, &CONSOLE_BYTES)?;
    struct Emergency(Pl011<Mmio>, Option<Pl011<Mmio>>);
    impl fmt::Write for Emergency {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            self.0.write_text(text);
            if let Some(mirror) = &self.1 {
                mirror.write_text(text);
            }
            Ok(())
        }
    }
    Some(Emergency(first, open(&MIRROR_BASE, &MIRROR_BYTES)))
}

/// Waits until everything written has left the UARTs (before exiting QEMU or resetting).
pub fn flush() {
    for cell in [&CONSOLE, &MIRROR] {
        cell.with(|uart| uart.as_ref().map(|uart| uart.drain_transmitter()));
    }
}

#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::runtime::console::write_fmt(format_args!($($arg)*)) };
}

#[macro_export]
macro_rules! println {
    () => { $crate::runtime::console::write_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::runtime::console::write_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}
