//! The PCIe options from the kernel command line: `pcie.gen=1|2|3` (the link speed limit; the Pi 5
//! device tree says 2, Gen 3 "is not certified", docs/pcie-brcmstb.md §1), `pcie.perst-ms=N`
//! (extra time with the reference clock running before PERST# is released, for slow adapters and
//! switches, docs/pcie-brcmstb.md §8) and `pcie.ready-ms=N` (how long the bus walk waits for a
//! function answering configuration retry, on every host: `pci::ready`). A malformed value is
//! named with the accepted forms and the default is kept (docs/architecture.md "Configuration").
#![forbid(unsafe_code)]

use crate::option_parsing::{parse_options, OptionError};
use crate::pci::ready::MAX_READY_MS;
use alloc::vec::Vec;

/// The longest extra PERST# time accepted (reports of slow devices go up to 10 s).
pub const MAX_PERST_EXTRA_MS: u32 = 10_000;

/// What the command line said; `None` = take the device tree's value or the board default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PcieOptions {
    pub gen: Option<u8>,
    pub perst_extra_ms: Option<u32>,
    /// `None`: [`crate::pci::ready::DEFAULT_READY_MS`].
    pub ready_ms: Option<u64>,
}

pub const ACCEPTED_KEYS: &str = "pcie.gen=1|2|3, pcie.perst-ms=0..10000, pcie.ready-ms=0..60000";

impl PcieOptions {
    /// Reads the `pcie.` options (keys without the prefix).
    pub fn parse<'a>(
        options: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> (PcieOptions, Vec<OptionError<'a>>) {
        parse_options("pcie", options, PcieOptions::apply)
    }

    /// One `pcie.` option; `Err` names the accepted forms.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        match key {
            "gen" => match value {
                "1" | "2" | "3" => self.gen = value.parse().ok(),
                _ => return Err("1, 2 or 3 (PCIe generation: 2.5, 5.0 or 8.0 GT/s)"),
            },
            "perst-ms" => match value.parse::<u32>() {
                Ok(ms) if ms <= MAX_PERST_EXTRA_MS => self.perst_extra_ms = Some(ms),
                _ => return Err("milliseconds from 0 to 10000"),
            },
            "ready-ms" => match value.parse::<u64>() {
                Ok(ms) if ms <= MAX_READY_MS => self.ready_ms = Some(ms),
                _ => return Err("milliseconds from 0 to 60000"),
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
    fn good_values_are_taken_and_bad_ones_named() {
        let (options, errors) =
            PcieOptions::parse([("gen", "3"), ("perst-ms", "500"), ("ready-ms", "30000")]);
        assert_eq!(options, PcieOptions { gen: Some(3), perst_extra_ms: Some(500), ready_ms: Some(30_000) });
        assert!(errors.is_empty());
        let (options, errors) = PcieOptions::parse([
            ("gen", "4"),
            ("perst-ms", "-1"),
            ("perst-ms", "10001"),
            ("speed", "fast"),
            ("ready-ms", "60001"),
        ]);
        assert_eq!(options, PcieOptions::default());
        let messages: Vec<_> = errors.iter().map(|e| format!("{e}")).collect();
        assert_eq!(messages[0], "bad driver option pcie.gen=4: expected 1, 2 or 3 (PCIe generation: 2.5, 5.0 or 8.0 GT/s); the default is kept");
        assert!(messages[1].contains("pcie.perst-ms=-1") && messages[1].contains("0 to 10000"));
        assert!(messages[2].contains("pcie.perst-ms=10001"));
        assert!(messages[3].contains("pcie.speed=fast") && messages[3].contains(ACCEPTED_KEYS));
        assert!(messages[4].contains("pcie.ready-ms=60001") && messages[4].contains("0 to 60000"));
        let (options, _) = PcieOptions::parse([("gen", "1"), ("perst-ms", "0"), ("perst-ms", "10000")]);
        assert_eq!(options, PcieOptions { gen: Some(1), perst_extra_ms: Some(10_000), ready_ms: None });
    }
}
