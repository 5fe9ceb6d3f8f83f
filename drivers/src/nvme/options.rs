//! The NVMe driver options from the kernel command line (`nvme.queues=N`, `nvme.depth=N`,
//! `nvme.selftest=qdN|off`, `nvme.measure=on|off`, `nvme.timeout-ms=N`, `nvme.hmb=MiB|off`;
//! docs/architecture.md "Configuration": a malformed value is reported with the accepted forms
//! and the default is kept).
#![forbid(unsafe_code)]

use crate::option_parsing::{on_off, parse_options, OptionError};
use alloc::vec::Vec;

/// Queue pairs per namespace unless `nvme.queues=` says otherwise.
pub const DEFAULT_QUEUE_PAIRS: u16 = 1;
/// Entries per I/O queue unless `nvme.depth=` says otherwise: enough that QD 32 of 1 MiB
/// requests split at a 32 KiB MDTS (1024 commands) nearly all fit in the SQ at once, and far
/// more than QD 32 of 1 MiB at QEMU's default 512 KiB (64 commands). Clamped to CAP.MQES + 1.
pub const DEFAULT_QUEUE_ENTRIES: u32 = 1024;
/// Largest queue an NVMe controller can have (CAP.MQES is 16 bits, 0-based).
pub const MAX_QUEUE_ENTRIES: u32 = 65536;
/// Most queue pairs one namespace may ask for.
pub const MAX_QUEUE_PAIRS: u16 = 64;
/// Most requests a self-test may keep in flight.
pub const MAX_SELF_TEST_DEPTH: u32 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverOptions {
    pub queue_pairs: u16,
    pub queue_entries: u32,
    /// `nvme.selftest=qdN`: keep N verified reads in flight at bring-up.
    pub self_test_depth: Option<u32>,
    /// `nvme.measure=on`: time a few reads at bring-up (on by default).
    pub measure: bool,
    /// `nvme.timeout-ms=N`: how long an I/O command may take before it is aborted.
    pub io_timeout_ms: u64,
    /// `nvme.hmb=MiB`: the most host memory buffer a controller asking for one gets; `None`
    /// (`nvme.hmb=off`, the default, as Raspberry Pi OS) gives none (`hmb`).
    pub host_memory_buffer_mib: Option<u64>,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            queue_pairs: DEFAULT_QUEUE_PAIRS,
            queue_entries: DEFAULT_QUEUE_ENTRIES,
            self_test_depth: None,
            measure: true,
            io_timeout_ms: super::controller::DEFAULT_IO_TIMEOUT_MS,
            host_memory_buffer_mib: None,
        }
    }
}

const ACCEPTED_KEYS: &str = "nvme.queues=1..64, nvme.depth=2..65536, nvme.selftest=qd1..qd256|off, \
     nvme.measure=on|off, nvme.timeout-ms=1..600000, nvme.hmb=1..1024|off";
/// The largest host memory buffer `nvme.hmb=` gives (MiB); the DMA pool limits it further.
pub const MAX_HOST_MEMORY_BUFFER_MIB: u64 = 1024;
/// The longest command timeout `nvme.timeout-ms=` takes (10 minutes).
pub const MAX_IO_TIMEOUT_MS: u64 = 600_000;

fn number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

impl DriverOptions {
    /// Reads the `nvme.` options (keys without the prefix); unusable ones come back as errors
    /// and leave the default in place.
    pub fn parse<'a>(
        options: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> (DriverOptions, Vec<OptionError<'a>>) {
        parse_options("nvme", options, DriverOptions::apply)
    }

    /// One `nvme.` option; `Err` names the accepted forms.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        match key {
            "queues" => match number(value) {
                Some(count @ 1..=64) => self.queue_pairs = count as u16,
                _ => return Err("a queue pair count from 1 to 64"),
            },
            "depth" => match number(value) {
                Some(entries @ 2..=65536) => self.queue_entries = entries as u32,
                _ => return Err("a queue size from 2 to 65536 entries"),
            },
            "selftest" => match value {
                "off" => self.self_test_depth = None,
                _ => match value.strip_prefix("qd").and_then(number) {
                    Some(depth @ 1..=256) => self.self_test_depth = Some(depth as u32),
                    _ => return Err("qdN with N from 1 to 256 (e.g. qd32), or off"),
                },
            },
            "timeout-ms" => match number(value) {
                Some(timeout_ms @ 1..=MAX_IO_TIMEOUT_MS) => self.io_timeout_ms = timeout_ms,
                _ => return Err("a command timeout from 1 to 600000 ms"),
            },
            "measure" => self.measure = on_off(value)?,
            "hmb" => match (value, number(value)) {
                ("off", _) => self.host_memory_buffer_mib = None,
                (_, Some(mib @ 1..=MAX_HOST_MEMORY_BUFFER_MIB)) => self.host_memory_buffer_mib = Some(mib),
                _ => return Err("a host memory buffer limit from 1 to 1024 MiB, or off"),
            },
            _ => return Err(ACCEPTED_KEYS),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn defaults_and_good_values() {
        let (options, errors) = DriverOptions::parse([]);
        assert!(errors.is_empty());
        assert_eq!(options, DriverOptions::default());
        assert_eq!(options.queue_entries, 1024);
        let (options, errors) = DriverOptions::parse([
            ("queues", "2"),
            ("depth", "0x100"),
            ("selftest", "qd32"),
            ("measure", "off"),
            ("timeout-ms", "750"),
            ("hmb", "64"),
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(
            options,
            DriverOptions {
                queue_pairs: 2,
                queue_entries: 256,
                self_test_depth: Some(32),
                measure: false,
                io_timeout_ms: 750,
                host_memory_buffer_mib: Some(64),
            }
        );
        assert_eq!(DriverOptions::default().io_timeout_ms, 5000);
        assert_eq!(DriverOptions::default().host_memory_buffer_mib, None, "off, as Raspberry Pi OS");
        let (options, errors) =
            DriverOptions::parse([("hmb", "64"), ("hmb", "off"), ("hmb", "2048"), ("hmb", "lots")]);
        assert_eq!(options.host_memory_buffer_mib, None);
        assert_eq!(errors.len(), 2);
        assert_eq!(
            format!("{}", errors[0]),
            "bad driver option nvme.hmb=2048: expected a host memory buffer limit from 1 to 1024 MiB, or off; the default is kept"
        );
    }

    #[test]
    fn bad_values_keep_the_default_and_say_what_is_accepted() {
        let (options, errors) = DriverOptions::parse([
            ("queues", "0"),
            ("depth", "1"),
            ("depth", "70000"),
            ("selftest", "qd0"),
            ("selftest", "yes"),
            ("measure", "maybe"),
            ("timeout-ms", "0"),
            ("timeout-ms", "600001"),
            ("timeout-ms", "5s"),
            ("speed", "max"),
        ]);
        assert_eq!(options, DriverOptions::default());
        assert_eq!(errors.len(), 10);
        assert_eq!(
            format!("{}", errors[8]),
            "bad driver option nvme.timeout-ms=5s: expected a command timeout from 1 to 600000 ms; the default is kept"
        );
        assert_eq!(
            format!("{}", errors[0]),
            "bad driver option nvme.queues=0: expected a queue pair count from 1 to 64; the default is kept"
        );
        assert!(format!("{}", errors[9])
            .contains("nvme.selftest=qd1..qd256|off, nvme.measure=on|off, nvme.timeout-ms=1..600000, nvme.hmb=1..1024|off"));
    }
}
