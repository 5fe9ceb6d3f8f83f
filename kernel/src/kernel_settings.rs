//! The kernel's own command-line settings (`exit=`, `test-fault=`, `crc=`, `verify=`, `pcie=`, `regs=`,
//! `led=`, `cooldown=`, `throttle=`, and the `sd.`/`nvme.`/`pcie.` driver options), and the line's tokens. The benchmark's settings (`jobs=`, `runtime=`, …) are
//! parsed by the `bench` crate; the Pi firmware's own additions to `/chosen/bootargs`
//! (`coherent_pool=`, `8250.nr_uarts=`, `bcm2708_fb.*`, …) are recognised and left alone.
#![forbid(unsafe_code)]

use core::fmt;

/// One space-separated token of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    Setting {
        key: &'a str,
        value: &'a str,
    },
    /// A token without `=`.
    Bare(&'a str),
}

pub fn tokens(line: &str) -> impl Iterator<Item = Token<'_>> {
    line.split_ascii_whitespace().map(|token| match token.split_once('=') {
        Some((key, value)) => Token::Setting { key, value },
        None => Token::Bare(token),
    })
}

/// Settings the Pi firmware and Linux put on the command line; the kernel ignores them silently.
/// Dotted keys (`module.parameter`) are treated the same way.
const FIRMWARE_KEYS: &[&str] = &[
    "coherent_pool",
    "console",
    "root",
    "rootfstype",
    "rootwait",
    "fsck.repair",
    "quiet",
    "splash",
    "elevator",
    "cma",
    "video",
    "earlycon",
    "kgdboc",
    "cgroup_enable",
    "cgroup_memory",
    "init",
    "plymouth.ignore-serial-consoles",
    "logo.nologo",
    "loglevel",
    "numa_policy",
    "ip",
];

/// True for a key that belongs to the firmware or Linux rather than to barebench.
pub fn is_firmware_key(key: &str) -> bool {
    FIRMWARE_KEYS.contains(&key) || (key.contains('.') && !is_driver_option(key))
}

/// `sd.`, `nvme.`, `pcie.` and `usb.` options belong to the drivers.
pub fn is_driver_option(key: &str) -> bool {
    key.starts_with("sd.") || key.starts_with("nvme.") || key.starts_with("pcie.") || key.starts_with("usb.")
}

/// How the run ends: semihosting only when asked for, because `hlt #0xf000` is undefined on
/// hardware (docs/ecosystem.md §3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExitMethod {
    /// Report completion and idle with the console alive (real hardware).
    #[default]
    Idle,
    /// QEMU semihosting SYS_EXIT with a status (`-semihosting` must be on).
    Semihosting,
    /// PSCI SYSTEM_OFF (QEMU virt, or a Pi 5's TF-A); no status is passed on.
    Psci,
}

/// A deliberate fault for the end-to-end tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestFault {
    /// A load from an unmapped address.
    DataAbort,
    /// An undefined instruction.
    UndefinedInstruction,
    /// A Rust panic.
    Panic,
    /// No fault: the firmware's throttle flags are reported as under-voltage and throttling
    /// (0x50005) whatever it answers, to test `throttle=` on a machine that never throttles.
    Throttled,
}

/// The throttle flags `test-fault=throttled` reports: under-voltage and throttled, now and since
/// the previous reading (bits 0, 2, 16, 18).
pub const FAKED_THROTTLE_FLAGS: u32 = 0x5_0005;

/// `led=`: whether the activity LED shows the stages (docs/led.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LedSetting {
    /// On a Pi, off under QEMU (nobody sees it, and the stage patterns take seconds).
    #[default]
    Auto,
    On,
    Off,
    /// On, and every change with its time on the kernel's clock printed at the end of the run
    /// (for the end-to-end tests, which decode the patterns in guest time under `-icount`).
    Trace,
}

impl LedSetting {
    pub fn enabled(self, qemu: bool) -> bool {
        match self {
            LedSetting::Auto => !qemu,
            LedSetting::On | LedSetting::Trace => true,
            LedSetting::Off => false,
        }
    }
}

/// `led=` as the line says it, read before the rest of the settings (the LED shows the first
/// stages before the console is up); a bad value is reported with the other settings.
pub fn led_setting(line: &str) -> LedSetting {
    tokens(line)
        .filter_map(|token| match token {
            Token::Setting { key: "led", value } => parse_led(value),
            _ => None,
        })
        .last()
        .unwrap_or_default()
}

fn parse_led(value: &str) -> Option<LedSetting> {
    match value {
        "auto" => Some(LedSetting::Auto),
        "on" => Some(LedSetting::On),
        "off" => Some(LedSetting::Off),
        "trace" => Some(LedSetting::Trace),
        _ => None,
    }
}

/// `cooldown=TEMP`: °C as a whole number or with one decimal (`cooldown=52.5`), 20 to 100; in m°C.
pub fn parse_celsius_millic(value: &str) -> Option<u32> {
    let (whole, tenths) = match value.split_once('.') {
        Some((whole, tenth)) if tenth.len() == 1 => (whole, tenth.parse::<u32>().ok()?),
        Some(_) => return None,
        None => (value, 0),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let millic = whole.parse::<u32>().ok()?.checked_mul(1000)? + tenths * 100;
    (20_000..=100_000).contains(&millic).then_some(millic)
}

/// `crc=DEV:LBA:COUNT` (the CRC-32 of COUNT logical blocks from LBA on DEV) or
/// `verify=DEV:LBA:COUNT` (compare them with the test pattern, `blockdev::pattern`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRange {
    pub device: heapless::String<16>,
    pub lba: u64,
    pub block_count: u64,
}

/// The most `crc=` (and `verify=`) settings one command line may carry.
pub const MAX_CRC_REQUESTS: usize = 32;
/// The most `sd.`/`nvme.` options one command line may carry.
pub const MAX_DRIVER_OPTIONS: usize = 16;

/// A driver option (`sd.mode=pio`), kept for the driver to interpret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverOption {
    pub key: heapless::String<32>,
    pub value: heapless::String<64>,
}

#[derive(Clone, Debug, Default)]
pub struct KernelSettings {
    pub exit: ExitMethod,
    pub test_fault: Option<TestFault>,
    pub crc_requests: heapless::Vec<BlockRange, MAX_CRC_REQUESTS>,
    pub verify_requests: heapless::Vec<BlockRange, MAX_CRC_REQUESTS>,
    pub driver_options: heapless::Vec<DriverOption, MAX_DRIVER_OPTIONS>,
    /// `pcie=off`: leave the Pi's PCIe root complex as the firmware left it.
    pub pcie_off: bool,
    /// `regs=DEV` (repeatable) or `regs=all`: the devices whose controller registers are printed.
    pub register_requests: heapless::Vec<heapless::String<16>, MAX_REGISTER_REQUESTS>,
    /// `led=`.
    pub led: LedSetting,
    /// `cooldown=TEMP`: before each run, wait until the SoC is below this (m°C).
    pub cooldown_below_millic: Option<u32>,
    /// `throttle=fail`: throttling or under-voltage during the benchmark ends it with exit
    /// status 2 (`throttle=warn`, the default, only says so).
    pub throttle_fails: bool,
}

/// The most `regs=` settings one command line may carry.
pub const MAX_REGISTER_REQUESTS: usize = 8;

impl KernelSettings {
    /// Whether `regs=` asked for the device called `name` (or for all).
    pub fn wants_registers(&self, name: &str) -> bool {
        self.register_requests.iter().any(|wanted| wanted == name || wanted == "all")
    }
}

impl KernelSettings {
    /// Keeps a driver option (`is_driver_option(key)` must hold) for the driver to read.
    pub fn add_driver_option<'a>(&mut self, key: &'a str, value: &'a str) -> Result<(), SettingError<'a>> {
        let too_long = SettingError {
            key,
            value,
            accepted: "a key under 32 bytes and a value under 64",
            consequence: "ignored",
        };
        let option = DriverOption {
            key: heapless::String::try_from(key).map_err(|_| too_long)?,
            value: heapless::String::try_from(value).map_err(|_| too_long)?,
        };
        self.driver_options.push(option).map_err(|_| SettingError {
            key,
            value,
            accepted: "at most 16 driver options",
            consequence: "ignored",
        })
    }

    /// The driver options under `prefix` (`"sd."`), with the prefix removed.
    pub fn driver_options_for<'s>(
        &'s self,
        prefix: &'s str,
    ) -> impl Iterator<Item = (&'s str, &'s str)> + 's {
        self.driver_options
            .iter()
            .filter_map(move |o| o.key.strip_prefix(prefix).map(|k| (k, o.value.as_str())))
    }
}

/// A kernel setting that could not be used; `Display` names it and the accepted forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingError<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub accepted: &'static str,
    pub consequence: &'static str,
}

impl fmt::Display for SettingError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad setting {}={}: expected {}; {}", self.key, self.value, self.accepted, self.consequence)
    }
}

/// Whether a key is one of the kernel's own.
pub fn is_kernel_key(key: &str) -> bool {
    matches!(
        key,
        "exit" | "test-fault" | "crc" | "verify" | "pcie" | "regs" | "led" | "cooldown" | "throttle"
    )
}

/// The kernel's keys with their accepted forms, for the "unknown setting" message.
pub const KERNEL_KEYS_HELP: &str =
    "exit=semihosting|psci|idle, crc=DEV:LBA:COUNT and verify=DEV:LBA:COUNT (repeatable), \
     pcie=on|off, regs=DEV or regs=all (repeatable), led=auto|on|off|trace, cooldown=TEMP (°C), throttle=warn|fail, \
     sd.*, nvme.*, pcie.* and usb.* driver options, test-fault=data-abort|undefined-instruction|panic|throttled";

impl KernelSettings {
    /// Applies one of the kernel's own settings (`is_kernel_key(key)` must hold).
    pub fn apply<'a>(&mut self, key: &'a str, value: &'a str) -> Result<(), SettingError<'a>> {
        match key {
            "exit" => {
                self.exit = match value {
                    "semihosting" => ExitMethod::Semihosting,
                    "psci" => ExitMethod::Psci,
                    "idle" => ExitMethod::Idle,
                    _ => {
                        return Err(SettingError {
                            key,
                            value,
                            accepted: "semihosting, psci or idle",
                            consequence: "the kernel will idle when done",
                        })
                    }
                };
            }
            "test-fault" => {
                self.test_fault = Some(match value {
                    "data-abort" => TestFault::DataAbort,
                    "undefined-instruction" => TestFault::UndefinedInstruction,
                    "panic" => TestFault::Panic,
                    "throttled" => TestFault::Throttled,
                    _ => {
                        return Err(SettingError {
                            key,
                            value,
                            accepted: "data-abort, undefined-instruction, panic or throttled",
                            consequence: "no fault is raised",
                        })
                    }
                });
            }
            "pcie" => {
                self.pcie_off = match value {
                    "on" => false,
                    "off" => true,
                    _ => {
                        self.pcie_off = false;
                        return Err(SettingError {
                            key,
                            value,
                            accepted: "on or off",
                            consequence: "the PCIe root complex is brought up (pcie=on)",
                        });
                    }
                };
            }
            "led" => {
                self.led = parse_led(value).ok_or(SettingError {
                    key,
                    value,
                    accepted: "auto, on, off or trace",
                    consequence: "the LED shows the stages on a Pi and stays off under QEMU (led=auto)",
                })?;
            }
            "cooldown" => {
                self.cooldown_below_millic = Some(parse_celsius_millic(value).ok_or(SettingError {
                    key,
                    value,
                    accepted: "a temperature in °C from 20 to 100, like 55 or 52.5",
                    consequence: "runs start without waiting for the SoC to cool",
                })?);
            }
            "throttle" => {
                self.throttle_fails =
                    match value {
                        "warn" => false,
                        "fail" => true,
                        _ => return Err(SettingError {
                            key,
                            value,
                            accepted: "warn or fail",
                            consequence:
                                "throttling is reported but does not change the exit status (throttle=warn)",
                        }),
                    };
            }
            "regs" => {
                let name = heapless::String::try_from(value)
                    .ok()
                    .filter(|name: &heapless::String<16>| {
                        !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric())
                    })
                    .ok_or(SettingError {
                        key,
                        value,
                        accepted: "a device name such as sd0 or nvme0, or all",
                        consequence: "no registers are printed for it",
                    })?;
                self.register_requests.push(name).map_err(|_| SettingError {
                    key,
                    value,
                    accepted: "at most 8 regs= settings",
                    consequence: "no registers are printed for it",
                })?;
            }
            "crc" | "verify" => {
                let request = parse_block_range(value).ok_or(SettingError {
                    key,
                    value,
                    accepted: "DEV:LBA:COUNT such as sd0:0:8 or nvme0:0x100:64 (LBA and COUNT in logical blocks, COUNT > 0)",
                    consequence: "this check is skipped",
                })?;
                let list = if key == "crc" { &mut self.crc_requests } else { &mut self.verify_requests };
                list.push(request).map_err(|_| SettingError {
                    key,
                    value,
                    accepted: "at most 32 of these settings",
                    consequence: "this check is skipped",
                })?;
            }
            _ => {
                return Err(SettingError { key, value, accepted: KERNEL_KEYS_HELP, consequence: "ignored" });
            }
        }
        Ok(())
    }
}

/// A decimal or 0x-prefixed hexadecimal number.
pub fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

fn parse_block_range(value: &str) -> Option<BlockRange> {
    let mut parts = value.split(':');
    let device = parts.next().filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_alphanumeric()))?;
    let lba = parse_number(parts.next()?)?;
    let block_count = parse_number(parts.next()?).filter(|&count| count > 0)?;
    if parts.next().is_some() {
        return None;
    }
    Some(BlockRange { device: heapless::String::try_from(device).ok()?, lba, block_count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_settings_and_bare_words() {
        let all: std::vec::Vec<Token> = tokens("  exit=semihosting  quiet crc=sd0:0:8 a=b=c").collect();
        assert_eq!(
            all,
            [
                Token::Setting { key: "exit", value: "semihosting" },
                Token::Bare("quiet"),
                Token::Setting { key: "crc", value: "sd0:0:8" },
                Token::Setting { key: "a", value: "b=c" },
            ]
        );
    }

    #[test]
    fn kernel_settings_apply_and_explain_errors() {
        let mut settings = KernelSettings::default();
        assert_eq!(settings.exit, ExitMethod::Idle);
        settings.apply("exit", "semihosting").unwrap();
        assert_eq!(settings.exit, ExitMethod::Semihosting);
        let error = settings.apply("exit", "now").unwrap_err();
        assert_eq!(settings.exit, ExitMethod::Semihosting);
        let message = std::format!("{error}");
        assert!(message.contains("exit=now") && message.contains("semihosting, psci or idle"), "{message}");
        settings.apply("test-fault", "data-abort").unwrap();
        assert_eq!(settings.test_fault, Some(TestFault::DataAbort));
        assert!(settings.apply("test-fault", "sideways").is_err());
    }

    #[test]
    fn crc_requests_parse_and_refuse_nonsense() {
        let mut settings = KernelSettings::default();
        settings.apply("crc", "nvme0:0x100:64").unwrap();
        settings.apply("crc", "sd0:2047:1").unwrap();
        assert_eq!(settings.crc_requests[0].device.as_str(), "nvme0");
        assert_eq!((settings.crc_requests[0].lba, settings.crc_requests[0].block_count), (0x100, 64));
        assert_eq!(settings.crc_requests[1].lba, 2047);
        for bad in ["sd0:1", "sd0:1:0", ":1:2", "sd0:x:2", "sd0:1:2:3", "s d:1:1", "sd0:-1:2"] {
            assert!(settings.apply("crc", bad).is_err(), "{bad} accepted");
        }
        assert_eq!(settings.crc_requests.len(), 2);
        settings.apply("verify", "sd1:0:4").unwrap();
        assert_eq!(settings.verify_requests[0].device.as_str(), "sd1");
    }

    #[test]
    fn driver_options_are_kept_per_prefix() {
        let mut settings = KernelSettings::default();
        settings.add_driver_option("sd.mode", "pio").unwrap();
        settings.add_driver_option("nvme.queues", "2").unwrap();
        let sd: std::vec::Vec<_> = settings.driver_options_for("sd.").collect();
        assert_eq!(sd, [("mode", "pio")]);
        assert!(settings.add_driver_option("nvme.x", &"y".repeat(80)).is_err());
    }

    #[test]
    fn pcie_switch_and_options_are_the_kernels() {
        let mut settings = KernelSettings::default();
        assert!(!settings.pcie_off);
        settings.apply("pcie", "off").unwrap();
        assert!(settings.pcie_off);
        let error = settings.apply("pcie", "maybe").unwrap_err();
        assert!(!settings.pcie_off, "a bad value means the default");
        assert_eq!(
            std::format!("{error}"),
            "bad setting pcie=maybe: expected on or off; the PCIe root complex is brought up (pcie=on)"
        );
        settings.apply("pcie", "off").unwrap();
        settings.apply("pcie", "on").unwrap();
        assert!(!settings.pcie_off);
        assert!(is_kernel_key("pcie"));
        assert!(is_driver_option("pcie.gen") && !is_firmware_key("pcie.perst-ms"));
        assert!(KERNEL_KEYS_HELP.contains("pcie=on|off"));
    }

    #[test]
    fn register_requests_name_devices_or_all() {
        let mut settings = KernelSettings::default();
        assert!(is_kernel_key("regs") && KERNEL_KEYS_HELP.contains("regs=DEV"));
        assert!(!settings.wants_registers("sd0"));
        settings.apply("regs", "sd0").unwrap();
        assert!(settings.wants_registers("sd0") && !settings.wants_registers("nvme0"));
        for bad in ["", "sd 0", "nvme0:1", "a-very-long-device-name"] {
            let error = settings.apply("regs", bad).unwrap_err();
            assert!(std::format!("{error}").contains("a device name such as sd0"), "{bad}");
        }
        settings.apply("regs", "all").unwrap();
        assert!(settings.wants_registers("nvme3"));
    }

    #[test]
    fn led_cooldown_and_throttle_are_the_kernels() {
        let mut settings = KernelSettings::default();
        assert_eq!(settings.led, LedSetting::Auto);
        assert!(LedSetting::Auto.enabled(false) && !LedSetting::Auto.enabled(true));
        settings.apply("led", "on").unwrap();
        assert!(settings.led.enabled(true));
        assert!(settings.apply("led", "blink").is_err());
        assert_eq!(led_setting("exit=semihosting led=off led=on"), LedSetting::On);
        assert_eq!(led_setting("led=sometimes"), LedSetting::Auto);
        assert_eq!(led_setting("led=trace"), LedSetting::Trace);
        assert!(LedSetting::Trace.enabled(true));
        settings.apply("cooldown", "52.5").unwrap();
        assert_eq!(settings.cooldown_below_millic, Some(52_500));
        for bad in ["", "hot", "52.55", "19", "101", "-5", ".5", "55C"] {
            assert!(settings.apply("cooldown", bad).is_err(), "{bad}");
        }
        assert_eq!(parse_celsius_millic("100"), Some(100_000));
        assert!(!settings.throttle_fails);
        settings.apply("throttle", "fail").unwrap();
        assert!(settings.throttle_fails);
        let error = settings.apply("throttle", "maybe").unwrap_err();
        assert!(std::format!("{error}").contains("warn or fail"));
        settings.apply("test-fault", "throttled").unwrap();
        assert_eq!(settings.test_fault, Some(TestFault::Throttled));
        for key in ["led", "cooldown", "throttle"] {
            assert!(is_kernel_key(key) && KERNEL_KEYS_HELP.contains(&std::format!("{key}=")), "{key}");
        }
    }

    #[test]
    fn firmware_keys_are_recognised() {
        assert!(is_firmware_key("coherent_pool"));
        assert!(is_firmware_key("8250.nr_uarts"));
        assert!(is_firmware_key("bcm2708_fb.fbwidth"));
        assert!(!is_firmware_key("nvme.queues"));
        assert!(!is_firmware_key("runtime"));
        assert!(is_driver_option("sd.mode"));
        assert!(is_driver_option("usb.protocol"));
        assert!(!is_firmware_key("usb.protocol"));
    }
}
