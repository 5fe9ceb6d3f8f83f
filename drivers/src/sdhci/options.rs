//! The `sd.*` driver options of the kernel command line (docs/architecture.md "Configuration"): transfer
//! mode, how multi-block reads end, whether CMD6 may raise the bus speed, and a clock ceiling.

use super::bringup::BringUpOptions;
use super::device::{Cmd23Request, ModeRequest};

/// The accepted forms, for messages.
pub const ACCEPTED: &str =
    "sd.mode=auto|pio|adma2, sd.cmd23=auto|on|off, sd.speed=auto|default, sd.max-clock-hz=N (N >= 400000)";

/// Everything the `sd.*` options choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SdOptions {
    pub mode: ModeRequest,
    pub cmd23: Cmd23Request,
    pub bring_up: BringUpOptions,
}

/// An option that was not understood; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownOption;

impl SdOptions {
    /// Applies one option (`key` without the `sd.` prefix).
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), UnknownOption> {
        match (key, value) {
            ("mode", "auto") => self.mode = ModeRequest::Auto,
            ("mode", "pio") => self.mode = ModeRequest::Pio,
            ("mode", "adma2") => self.mode = ModeRequest::Adma2,
            ("cmd23", "auto") => self.cmd23 = Cmd23Request::Auto,
            ("cmd23", "on") => self.cmd23 = Cmd23Request::On,
            ("cmd23", "off") => self.cmd23 = Cmd23Request::Off,
            ("speed", "auto") => self.bring_up.allow_speed_switch = true,
            ("speed", "default") => self.bring_up.allow_speed_switch = false,
            ("max-clock-hz", text) => {
                let hz = text.parse::<u32>().ok().filter(|hz| *hz >= 400_000).ok_or(UnknownOption)?;
                self.bring_up.max_clock_hz = Some(hz);
            }
            _ => return Err(UnknownOption),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_set_what_they_name_and_refuse_the_rest() {
        let mut options = SdOptions::default();
        assert_eq!(options.mode, ModeRequest::Auto);
        options.apply("mode", "pio").unwrap();
        options.apply("cmd23", "on").unwrap();
        options.apply("speed", "default").unwrap();
        options.apply("max-clock-hz", "10000000").unwrap();
        assert_eq!(options.mode, ModeRequest::Pio);
        assert_eq!(options.cmd23, Cmd23Request::On);
        assert!(!options.bring_up.allow_speed_switch);
        assert_eq!(options.bring_up.max_clock_hz, Some(10_000_000));
        let before = options;
        assert_eq!(options.apply("mode", "dma"), Err(UnknownOption));
        assert_eq!(options.apply("max-clock-hz", "100"), Err(UnknownOption));
        assert_eq!(options.apply("max-clock-hz", "fast"), Err(UnknownOption));
        assert_eq!(options.apply("colour", "blue"), Err(UnknownOption));
        assert_eq!(options, before);
        options.apply("mode", "adma2").unwrap();
        assert_eq!(options.mode, ModeRequest::Adma2);
    }
}
