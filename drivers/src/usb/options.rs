//! The `usb.` driver options of the kernel command line (docs/settings.md): which mass storage
//! transport to use, to compare UAS and Bulk-Only on the same drive; whether to use the Pi 5's
//! RP1 controllers; how long root ports are watched for devices after power.
#![forbid(unsafe_code)]

use crate::option_parsing::{on_off, parse_options, OptionError};

/// `usb.protocol=`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProtocolChoice {
    /// UAS when the drive offers it (and it is usable here), else Bulk-Only.
    #[default]
    Auto,
    Uas,
    BulkOnly,
}

impl ProtocolChoice {
    pub fn name(self) -> &'static str {
        match self {
            ProtocolChoice::Auto => "auto",
            ProtocolChoice::Uas => "uas",
            ProtocolChoice::BulkOnly => "bot",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsbOptions {
    pub protocol: ProtocolChoice,
    /// `usb.rp1=on`: on a Pi 5, use RP1's xHCIs when the firmware left pcie2 up
    /// (`pciex4_reset=0`). Off by default: the kernel does not touch pcie2 unless asked.
    pub pi5_rp1: bool,
    /// `usb.connect-ms=N`: how long root ports are watched for devices after power.
    pub connect_wait_ms: u64,
}

impl Default for UsbOptions {
    fn default() -> Self {
        UsbOptions {
            protocol: ProtocolChoice::default(),
            pi5_rp1: false,
            connect_wait_ms: super::controller::DEFAULT_CONNECT_WAIT_MS,
        }
    }
}

const ACCEPTED_KEYS: &str = "usb.protocol=auto|uas|bot, usb.rp1=on|off or usb.connect-ms=0..10000";

impl UsbOptions {
    /// Options from `(key, value)` pairs with the `usb.` prefix removed; unknown keys and bad
    /// values come back as errors and leave the default.
    pub fn parse<'a>(
        pairs: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> (UsbOptions, alloc::vec::Vec<OptionError<'a>>) {
        parse_options("usb", pairs, UsbOptions::apply)
    }

    /// One `usb.` option; `Err` names the accepted forms.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), &'static str> {
        match key {
            "protocol" => match value {
                "auto" => self.protocol = ProtocolChoice::Auto,
                "uas" => self.protocol = ProtocolChoice::Uas,
                "bot" => self.protocol = ProtocolChoice::BulkOnly,
                _ => return Err("auto, uas or bot"),
            },
            "rp1" => self.pi5_rp1 = on_off(value)?,
            "connect-ms" => match value.parse::<u64>() {
                Ok(ms) if ms <= super::controller::MAX_CONNECT_WAIT_MS => self.connect_wait_ms = ms,
                _ => return Err("milliseconds from 0 to 10000"),
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
    fn protocol_choices_parse_and_bad_ones_are_named() {
        let (options, errors) = UsbOptions::parse([("protocol", "bot")].into_iter());
        assert_eq!(options.protocol, ProtocolChoice::BulkOnly);
        assert!(errors.is_empty());
        let (options, _) = UsbOptions::parse([("protocol", "uas")].into_iter());
        assert_eq!(options.protocol.name(), "uas");
        let (options, errors) = UsbOptions::parse([("protocol", "fast"), ("speed", "5")].into_iter());
        assert_eq!(options.protocol, ProtocolChoice::Auto);
        assert_eq!(errors.len(), 2);
        assert_eq!(
            format!("{}", errors[0]),
            "bad driver option usb.protocol=fast: expected auto, uas or bot; the default is kept"
        );
        assert!(format!("{}", errors[1]).contains("usb.speed=5"));
        let (options, errors) = UsbOptions::parse([("rp1", "on")].into_iter());
        assert!(options.pi5_rp1 && errors.is_empty());
        let (options, errors) = UsbOptions::parse([("rp1", "on"), ("rp1", "maybe")].into_iter());
        assert!(options.pi5_rp1, "a bad value keeps what was set");
        assert_eq!(
            format!("{}", errors[0]),
            "bad driver option usb.rp1=maybe: expected on or off; the default is kept"
        );
        assert!(!UsbOptions::default().pi5_rp1);
        let (options, errors) =
            UsbOptions::parse([("connect-ms", "3000"), ("connect-ms", "10001")].into_iter());
        assert_eq!(options.connect_wait_ms, 3000);
        assert_eq!(
            format!("{}", errors[0]),
            "bad driver option usb.connect-ms=10001: expected milliseconds from 0 to 10000; the default is kept"
        );
        assert_eq!(UsbOptions::default().connect_wait_ms, 1500);
    }
}
