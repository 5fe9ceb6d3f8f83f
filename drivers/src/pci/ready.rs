//! Waiting for functions that are still starting. After a reset a PCI Express function may answer
//! configuration requests with Configuration Request Retry Status (CRS) until it is ready (PCIe
//! Base Specification 4.0 §2.3.1, §6.6.1: up to 1 s after a conventional reset is normal, and
//! devices may take longer). With CRS Software Visibility enabled in the root port (Root Control,
//! §7.5.3.12), a read of the Vendor ID then returns the reserved value 0x0001 instead of stalling
//! the CPU, and software decides how long to wait. Linux waits up to 60 s per function, on every
//! bus (`drivers/pci/probe.c`, `pci_bus_read_dev_vendor_id(.., 60 * 1000)`); barebench waits up to
//! `pcie.ready-ms` (default [`DEFAULT_READY_MS`]) and says so once a second.
#![forbid(unsafe_code)]

use super::{offsets, ConfigAccess, FunctionAddress};
use blockdev::Clock;
use core::fmt;
use hal::platform::Deadline;

/// The Vendor ID a function answering "retry" reads as when CRS Software Visibility is on.
pub const CRS_VENDOR_ID: u16 = 0x0001;
/// How long a function answering "retry" is waited for unless `pcie.ready-ms=` says otherwise:
/// ten times what the specification calls normal, well inside Linux's 60 s.
pub const DEFAULT_READY_MS: u64 = 10_000;
/// The longest wait `pcie.ready-ms=` accepts (Linux's).
pub const MAX_READY_MS: u64 = 60_000;
/// A progress line this often while a function keeps answering "retry".
pub const PROGRESS_EVERY_MS: u64 = 1000;
/// Between two reads of a retrying function (Linux starts at 1 ms and doubles).
const POLL_INTERVAL_US: u64 = 1000;

/// Whether a Vendor ID / Device ID read says "not ready yet".
pub fn is_retry(vendor_device: u32) -> bool {
    vendor_device as u16 == CRS_VENDOR_ID
}

/// What the wait for one function says on the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadyEvent {
    /// Still answering "retry" after `waited_ms` (once per [`PROGRESS_EVERY_MS`]).
    Waiting { address: FunctionAddress, waited_ms: u64, limit_ms: u64 },
    /// Answered with a real Vendor ID after `waited_ms`.
    Ready { address: FunctionAddress, waited_ms: u64 },
    /// Still "retry" when the limit passed: the function is left out.
    GaveUp { address: FunctionAddress, waited_ms: u64 },
}

impl fmt::Display for ReadyEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ReadyEvent::Waiting { address, waited_ms, limit_ms } => write!(
                f,
                "{address} answers configuration retry (not ready) after {waited_ms} ms; waiting up to {limit_ms} ms (pcie.ready-ms)"
            ),
            ReadyEvent::Ready { address, waited_ms } => {
                write!(f, "{address} ready after {waited_ms} ms of configuration retries")
            }
            ReadyEvent::GaveUp { address, waited_ms } => write!(
                f,
                "{address} still answers configuration retry after {waited_ms} ms: left out (raise pcie.ready-ms=)"
            ),
        }
    }
}

/// How the bus walk waits for retrying functions: a clock, a limit, and where progress goes.
#[derive(Clone, Copy)]
pub struct ReadyWait<'a> {
    pub clock: &'a dyn Clock,
    pub limit_ms: u64,
    pub report: &'a dyn Fn(&ReadyEvent),
}

impl ReadyWait<'_> {
    /// Reads the Vendor ID / Device ID of `address` until it stops answering "retry" or the
    /// limit passes; the first other value, or `None` with the time waited.
    pub fn wait<C: ConfigAccess + ?Sized>(&self, config: &C, address: FunctionAddress) -> Result<u32, u64> {
        let started = Deadline::after_us(self.clock, self.limit_ms.saturating_mul(1000));
        let mut next_report_ms = PROGRESS_EVERY_MS;
        loop {
            let id = config.read32(address, offsets::VENDOR_DEVICE);
            let waited_ms = started.elapsed_us(self.clock) / 1000;
            if !is_retry(id) {
                (self.report)(&ReadyEvent::Ready { address, waited_ms });
                return Ok(id);
            }
            if started.has_passed(self.clock) {
                (self.report)(&ReadyEvent::GaveUp { address, waited_ms });
                return Err(waited_ms);
            }
            if waited_ms >= next_report_ms {
                (self.report)(&ReadyEvent::Waiting { address, waited_ms, limit_ms: self.limit_ms });
                next_report_ms = waited_ms - waited_ms % PROGRESS_EVERY_MS + PROGRESS_EVERY_MS;
            }
            let pause = Deadline::after_us(self.clock, POLL_INTERVAL_US);
            while !pause.has_passed(self.clock) {
                core::hint::spin_loop();
            }
        }
    }
}
