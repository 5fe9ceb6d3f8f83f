//! The console the benchmark writes to, and the in-place progress line that never makes a
//! measured I/O wait for the UART (docs/measurement.md).
//!
//! A 115200-baud UART sends about 11.5 bytes per millisecond and its transmit FIFO is small (16
//! bytes on the BCM283x PL011, 32 from PL011 r1p5 on: FreeBSD `sys/dev/uart/uart_dev_pl011.c`),
//! so writing a 70-byte line the usual
//! way spins for several milliseconds while I/Os complete unseen and their latency grows (at
//! queue depth 1 the device idles meanwhile). The progress line is therefore only ever written
//! with [`Console::write_without_waiting`]: what the FIFO takes now goes out, the rest waits in
//! [`ProgressLine`] for the next [`ProgressLine::pump`]. Everything else (run lines, tables, the
//! JSON) is written between runs, when waiting costs nothing.

use core::fmt::{self, Write};

use crate::plan::DevicePlan;
use crate::settings::JobSpec;
use crate::units::{Fixed, SizeText, TextBuffer, NS_PER_S};

/// Where the benchmark's text goes: the serial console in the kernel, a string in tests.
pub trait Console: fmt::Write {
    /// Queues as much of `bytes` as the transmitter takes now, without waiting, and returns how
    /// many bytes it took. Bytes are sent as they are (no newline translation).
    fn write_without_waiting(&mut self, bytes: &[u8]) -> usize;
}

/// A string takes everything at once.
impl Console for alloc::string::String {
    fn write_without_waiting(&mut self, bytes: &[u8]) -> usize {
        self.push_str(&alloc::string::String::from_utf8_lossy(bytes));
        bytes.len()
    }
}

/// Prints a message on its own line and keeps it in `notes` (the run's or the benchmark's).
pub fn say(
    console: &mut dyn fmt::Write,
    notes: &mut alloc::vec::Vec<alloc::string::String>,
    message: alloc::string::String,
) {
    let _ = writeln!(console, "{message}");
    notes.push(message);
}

/// Nanoseconds per tenth of a second (progress shows seconds with one decimal).
const NS_PER_DECISECOND: u64 = NS_PER_S / 10;
/// Longest progress line kept (a longer one is cut; device names are short).
const PROGRESS_LINE_BYTES: usize = 160;

/// The progress line of a run, rewritten in place with `\r`.
pub struct ProgressLine<'a> {
    device_name: &'a str,
    job: &'a JobSpec,
    plan: &'a DevicePlan,
    run: u32,
    runs: u32,
    total_ns: u64,
    enabled: bool,
    text: TextBuffer<PROGRESS_LINE_BYTES>,
    sent_bytes: usize,
    line_open: bool,
}

impl<'a> ProgressLine<'a> {
    pub fn new(
        device_name: &'a str,
        job: &'a JobSpec,
        plan: &'a DevicePlan,
        (run, runs): (u32, u32),
        total_ns: u64,
        enabled: bool,
    ) -> ProgressLine<'a> {
        ProgressLine {
            device_name,
            job,
            plan,
            run,
            runs,
            total_ns,
            enabled,
            text: TextBuffer::new(),
            sent_bytes: 0,
            line_open: false,
        }
    }

    /// Replaces the line with elapsed of total seconds and I/Os completed so far (ramp
    /// included); nothing is written yet (see [`ProgressLine::pump`]). What was left of the
    /// previous text is dropped: the new one starts with `\r`.
    pub fn update(&mut self, elapsed_ns: u64, ios: u64) {
        let (device_name, job, plan) = (self.device_name, self.job, self.plan);
        let (run, runs, total_ns) = (self.run, self.runs, self.total_ns);
        self.show(format_args!(
            "{device_name} {} {} qd{} run {run}/{runs}: {} of {} s, {ios} I/Os",
            job.operation.fio_name(),
            SizeText(plan.block_bytes),
            plan.queue_depth,
            Fixed::new(u128::from(elapsed_ns / NS_PER_DECISECOND), 1),
            Fixed::new(u128::from(total_ns / NS_PER_DECISECOND), 1),
        ));
    }

    /// Replaces the line with `text` (the scan's bytes and ETA, the sustained write's MiB/s);
    /// sent as [`ProgressLine::update`]'s is.
    pub fn show(&mut self, text: fmt::Arguments<'_>) {
        if !self.enabled {
            return;
        }
        self.text = TextBuffer::new();
        self.sent_bytes = 0;
        let _ = write!(self.text, "\r  {text} ");
        self.line_open = true;
    }

    /// Whether the line is printed at all (`progress=`).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether part of the line still waits to be sent.
    pub fn has_unsent(&self) -> bool {
        // Checked on every pass of the run loop: no UTF-8 validation here.
        self.sent_bytes < self.text.len()
    }

    /// Sends what the console takes now without waiting.
    pub fn pump(&mut self, console: &mut dyn Console) {
        let unsent = &self.text.as_bytes()[self.sent_bytes..];
        if !unsent.is_empty() {
            self.sent_bytes += console.write_without_waiting(unsent).min(unsent.len());
        }
    }

    /// Sends the rest of the line, waiting if need be, and ends it so that a message can be
    /// printed below it (used when the run has stopped measuring).
    pub fn interrupt(&mut self, console: &mut dyn Console) {
        let text = self.text.as_str();
        if let Some(unsent) = text.get(self.sent_bytes..) {
            let _ = console.write_str(unsent);
        }
        self.sent_bytes = text.len();
        if self.line_open {
            let _ = writeln!(console);
            self.line_open = false;
        }
    }

    /// The last update and the end of the line, after the run.
    pub fn finish(&mut self, console: &mut dyn Console, elapsed_ns: u64, ios: u64) {
        self.update(elapsed_ns, ios);
        self.interrupt(console);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::JobOperation;
    use alloc::string::String;
    use blockdev::testing::SteppingClock;

    /// A UART as slow as the real one: a transmit FIFO of `fifo_bytes` that drains one byte
    /// every `byte_ticks` of the clock. A blocking write waits (moves the clock) until there is
    /// room, as the kernel's PL011 write spins on TXFF.
    pub(crate) struct SlowUart<'c> {
        clock: &'c SteppingClock,
        fifo_bytes: u64,
        byte_ticks: u64,
        /// Bytes in the FIFO at `level_at_ticks`.
        level: u64,
        level_at_ticks: u64,
        pub text: String,
        pub ticks_waited: u64,
    }

    impl<'c> SlowUart<'c> {
        pub(crate) fn new(clock: &'c SteppingClock, fifo_bytes: u64, byte_ticks: u64) -> Self {
            SlowUart {
                clock,
                fifo_bytes,
                byte_ticks,
                level: 0,
                level_at_ticks: 0,
                text: String::new(),
                ticks_waited: 0,
            }
        }

        fn drain(&mut self) {
            let now = self.clock.peek();
            let sent = (now - self.level_at_ticks) / self.byte_ticks;
            if sent >= self.level {
                self.level = 0;
                self.level_at_ticks = now;
            } else {
                self.level -= sent;
                self.level_at_ticks += sent * self.byte_ticks;
            }
        }

        fn room(&mut self) -> u64 {
            self.drain();
            self.fifo_bytes - self.level
        }
    }

    impl fmt::Write for SlowUart<'_> {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            for byte in text.bytes() {
                while self.room() == 0 {
                    let now = self.clock.peek();
                    self.clock.advance_to(now + self.byte_ticks);
                    self.ticks_waited += self.byte_ticks;
                }
                self.level += 1;
                self.text.push(char::from(byte));
            }
            Ok(())
        }
    }

    impl Console for SlowUart<'_> {
        fn write_without_waiting(&mut self, bytes: &[u8]) -> usize {
            let taken = (self.room() as usize).min(bytes.len());
            self.level += taken as u64;
            self.text.push_str(&String::from_utf8_lossy(&bytes[..taken]));
            taken
        }
    }

    fn plan() -> DevicePlan {
        DevicePlan {
            block_bytes: 4096,
            blocks_per_request: 8,
            queue_depth: 1,
            region_offset_bytes: 0,
            region_size_bytes: 1 << 20,
            block_slots: 256,
        }
    }

    #[test]
    fn the_line_goes_out_as_the_fifo_drains_and_never_waits() {
        let clock = SteppingClock::new(1_000_000_000, 0);
        let mut uart = SlowUart::new(&clock, 16, 86_800);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let plan = plan();
        let mut line = ProgressLine::new("nvme0", &job, &plan, (1, 3), 2_500_000_000, true);
        line.update(500_000_000, 1234);
        let expected = "\r  nvme0 randread 4k qd1 run 1/3: 0.5 of 2.5 s, 1234 I/Os ";
        line.pump(&mut uart);
        assert_eq!(uart.text, &expected[..16]);
        assert!(line.has_unsent());
        line.pump(&mut uart);
        assert_eq!(uart.text.len(), 16, "a full FIFO takes nothing");
        clock.advance_to(10 * 86_800);
        line.pump(&mut uart);
        assert_eq!(uart.text, &expected[..26]);
        // An empty FIFO takes 16 bytes at most.
        clock.advance_to(100 * 86_800);
        line.pump(&mut uart);
        assert_eq!(uart.text, &expected[..42]);
        clock.advance_to(200 * 86_800);
        line.pump(&mut uart);
        assert_eq!(uart.text, expected);
        assert!(!line.has_unsent());
        assert_eq!(uart.ticks_waited, 0);

        // A new update replaces what was not sent; interrupt sends the rest and ends the line.
        line.update(1_000_000_000, 2000);
        line.pump(&mut uart);
        line.interrupt(&mut uart);
        assert!(uart.text.ends_with("run 1/3: 1.0 of 2.5 s, 2000 I/Os \n"), "{:?}", uart.text);
        assert!(!line.has_unsent());

        let mut quiet = ProgressLine::new("sd0", &job, &plan, (1, 1), 1, false);
        let mut text = String::new();
        quiet.finish(&mut text, 1, 1);
        assert!(text.is_empty());
    }
}
