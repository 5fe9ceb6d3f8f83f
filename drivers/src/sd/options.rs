//! The `sd.*` driver options of the kernel command line (docs/architecture.md "Configuration"): transfer
//! mode, how multi-block reads end, whether CMD6 may raise the bus speed, a clock ceiling, and
//! which controller gets the SD slot on the Pi 1-3 (docs/aarch32-pis.md §7), and how long a data
//! transfer may go without progress before it is abandoned and the host recovered (SDHCI
//! §3.10.1).
#![forbid(unsafe_code)]

use super::card_registers::Scr;
use super::timing::BringUpOptions;

/// What the user asked for as the data path (`sd.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModeRequest {
    /// ADMA2 when the host has it, PIO otherwise.
    #[default]
    Auto,
    Pio,
    Adma2,
}

/// How multi-block reads end (`sd.cmd23`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Cmd23Request {
    /// CMD23 when the SCR lists it, CMD12 (or auto-CMD12) otherwise.
    #[default]
    Auto,
    /// CMD23 whatever the SCR says (QEMU's v3 card accepts it without listing it: docs/qemu.md §2).
    On,
    Off,
}

impl Cmd23Request {
    /// Whether multi-block transfers are announced with CMD23 on a card with `scr`.
    pub fn uses_cmd23(self, scr: &Scr) -> bool {
        match self {
            Cmd23Request::Auto => scr.supports_cmd23(),
            Cmd23Request::On => true,
            Cmd23Request::Off => false,
        }
    }
}

/// The accepted forms, for messages.
pub const ACCEPTED: &str = "sd.mode=auto|pio|adma2, sd.cmd23=auto|on|off, sd.speed=auto|default, \
     sd.max-clock-hz=N (N >= 400000), sd.host=auto|sdhost|arasan, sd.timeout-ms=N (1 to 60000), sd.cq=on|off";

/// `sd.timeout-ms` bounds.
pub const MAX_DATA_TIMEOUT_MS: u32 = 60_000;

/// Which controller GPIO 48-53 route to the SD slot of a Pi 1-3 (`sd.host`): ALT0 the sdhost,
/// ALT3 the Arasan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlotHost {
    /// The sdhost, as Linux uses it for the slot.
    #[default]
    Auto,
    Sdhost,
    Arasan,
}

impl SlotHost {
    /// Whether the slot goes to the sdhost.
    pub fn is_sdhost(self) -> bool {
        !matches!(self, SlotHost::Arasan)
    }
}

/// Everything the `sd.*` options choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SdOptions {
    pub mode: ModeRequest,
    pub cmd23: Cmd23Request,
    pub bring_up: BringUpOptions,
    pub slot_host: SlotHost,
    /// `sd.timeout-ms`: how long a data transfer may go without progress (a PIO block, or the
    /// base of a DMA transfer's budget), `None` for the driver's default
    /// ([`super::bus::BLOCK_TIMEOUT_US`]).
    pub data_timeout_ms: Option<u32>,
    /// `sd.cq`: run requests as tasks of the card's command queue, on SDHCI hosts and cards that
    /// have one (crate::sd::command_queue). Off by default, so that the published Pi 5 SD
    /// figures, measured without it, stay comparable.
    pub command_queue: bool,
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
            ("host", "auto") => self.slot_host = SlotHost::Auto,
            ("host", "sdhost") => self.slot_host = SlotHost::Sdhost,
            ("host", "arasan") => self.slot_host = SlotHost::Arasan,
            ("cq", "on") => self.command_queue = true,
            ("cq", "off") => self.command_queue = false,
            ("timeout-ms", text) => {
                let ms = text.parse::<u32>().ok().filter(|ms| (1..=MAX_DATA_TIMEOUT_MS).contains(ms));
                self.data_timeout_ms = Some(ms.ok_or(UnknownOption)?);
            }
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
        // The slot goes to the sdhost unless the Arasan is asked for.
        assert!(options.slot_host.is_sdhost());
        options.apply("host", "arasan").unwrap();
        assert_eq!(options.slot_host, SlotHost::Arasan);
        assert!(!options.slot_host.is_sdhost());
        options.apply("host", "sdhost").unwrap();
        assert!(options.slot_host.is_sdhost());
        assert_eq!(options.apply("host", "emmc2"), Err(UnknownOption));
        assert_eq!(options.data_timeout_ms, None);
        options.apply("timeout-ms", "250").unwrap();
        assert_eq!(options.data_timeout_ms, Some(250));
        for bad in ["0", "60001", "1s", "-5", ""] {
            assert_eq!(options.apply("timeout-ms", bad), Err(UnknownOption), "{bad}");
        }
        assert_eq!(options.data_timeout_ms, Some(250));
        assert!(ACCEPTED.contains("sd.timeout-ms=N (1 to 60000)"));
        assert!(!SdOptions::default().command_queue, "off unless asked for");
        options.apply("cq", "on").unwrap();
        assert!(options.command_queue);
        assert_eq!(options.apply("cq", "yes"), Err(UnknownOption));
        options.apply("cq", "off").unwrap();
        assert!(!options.command_queue);
    }
}
