//! The drivers' `key=value` settings (`nvme.`, `usb.`, `pcie.` on the kernel command line): a
//! setting that cannot be used is reported with the forms it accepts, and the default is kept
//! (docs/architecture.md, "Configuration").
#![forbid(unsafe_code)]

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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::ToString;

    #[test]
    fn the_message_names_the_setting_and_what_it_accepts() {
        let error = OptionError { prefix: "usb", key: "rp1", value: "maybe", accepted: "on or off" };
        assert_eq!(
            error.to_string(),
            "bad driver option usb.rp1=maybe: expected on or off; the default is kept"
        );
    }
}
