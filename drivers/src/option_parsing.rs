//! The drivers' `key=value` settings (`nvme.`, `usb.`, `pcie.` on the kernel command line): a
//! setting that cannot be used is reported with the forms it accepts, and the default is kept
//! (docs/architecture.md, "Configuration").
#![forbid(unsafe_code)]

use alloc::vec::Vec;
use core::fmt;

/// A driver setting that could not be used; `Display` names the accepted forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionError<'a> {
    /// The driver's prefix without its dot: `nvme`, `usb`, `pcie`.
    pub prefix: &'static str,
    pub key: &'a str,
    pub value: &'a str,
    pub accepted: &'static str,
}

impl fmt::Display for OptionError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad driver option {}.{}={}: expected {}; the default is kept",
            self.prefix, self.key, self.value, self.accepted
        )
    }
}

/// Applies every `(key, value)` setting to `T::default()` with `apply`, which names the accepted
/// forms when it cannot use a setting: those come back as errors and leave the default.
pub fn parse_options<'a, T: Default>(
    prefix: &'static str,
    settings: impl IntoIterator<Item = (&'a str, &'a str)>,
    mut apply: impl FnMut(&mut T, &'a str, &'a str) -> Result<(), &'static str>,
) -> (T, Vec<OptionError<'a>>) {
    let mut parsed = T::default();
    let mut errors = Vec::new();
    for (key, value) in settings {
        if let Err(accepted) = apply(&mut parsed, key, value) {
            errors.push(OptionError { prefix, key, value, accepted });
        }
    }
    (parsed, errors)
}

/// `on` or `off`.
pub fn on_off(value: &str) -> Result<bool, &'static str> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("on or off"),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn settings_apply_in_order_and_the_unusable_ones_are_named() {
        #[derive(Default)]
        struct Switch {
            on: bool,
        }
        let apply = |switch: &mut Switch, key: &str, value: &str| match key {
            "power" => on_off(value).map(|on| switch.on = on),
            _ => Err("power=on|off"),
        };
        let (switch, errors) =
            parse_options("lamp", [("power", "on"), ("power", "maybe"), ("colour", "red")], apply);
        assert!(switch.on, "a bad value keeps what was set before");
        let messages: std::vec::Vec<_> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "bad driver option lamp.power=maybe: expected on or off; the default is kept",
                "bad driver option lamp.colour=red: expected power=on|off; the default is kept",
            ]
        );
    }

    #[test]
    fn the_message_names_the_setting_and_what_it_accepts() {
        let error = OptionError { prefix: "usb", key: "rp1", value: "maybe", accepted: "on or off" };
        assert_eq!(
            error.to_string(),
            "bad driver option usb.rp1=maybe: expected on or off; the default is kept"
        );
    }
}
