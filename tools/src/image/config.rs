//! `config.txt` and `cmdline.txt` for the one SD card that boots every Pi from Pi 1 to Pi 5
//! (docs/hardware.md §4.1–4.4, docs/ecosystem.md §1.5–1.7, §4.1, docs/aarch32-pis.md §2;
//! Raspberry Pi config.txt documentation, `boot.adoc` and `conditional.adoc`).
#![forbid(unsafe_code)]

use std::fmt::Write;

/// What the generated `config.txt` depends on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigOptions {
    /// `overlays/disable-bt.dtbo` is on the card, so `dtoverlay=disable-bt` can give the PL011
    /// back to GPIO14/15 on Pi 3/4 (docs/hardware.md §4.1).
    pub has_disable_bt_overlay: bool,
    /// The DTBs carry upstream Linux names (`bcm2837-rpi-3-b.dtb`, as in Debian's kernel
    /// package): `upstream_kernel=1` makes the firmware look for those names (docs/ecosystem.md §1.3).
    pub upstream_dtb_names: bool,
    /// `uart_2ndstage=1`: the firmware prints its own boot log on the UART (docs/ecosystem.md §4.1),
    /// useful when nothing appears; off by default so benchmark logs stay clean.
    pub firmware_boot_log: bool,
    /// Where the Pi 5's console appears (docs/console.md).
    pub pi5_console: Pi5Console,
}

/// The Pi 5's console: the 3-pin debug connector (UART10), or the header pins GPIO 14/15, which
/// are RP1's UART0 and reachable only when the firmware leaves pcie2 up (docs/console.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pi5Console {
    /// The debug connector only; the firmware resets pcie2 before the kernel (its default).
    #[default]
    Debug,
    /// The header pins too: `enable_rp1_uart=1` and `pciex4_reset=0`; the kernel mirrors the
    /// debug UART's output to RP1 UART0 (it writes the debug UART in every case).
    Header,
    /// The same lines as `Header`: both connectors carry the console.
    Both,
}

impl Pi5Console {
    /// The `[pi5]` lines that make the header pins work.
    pub fn config_lines(self) -> &'static [&'static str] {
        match self {
            Pi5Console::Debug => &[],
            Pi5Console::Header | Pi5Console::Both => &[
                "# Console on the header pins GPIO 14/15 too (RP1 UART0, pins 8/10): the firmware sets",
                "# the UART up and leaves pcie2 (RP1's link) up for the kernel, which mirrors its console",
                "# there (docs/console.md).",
                "enable_rp1_uart=1",
                "pciex4_reset=0",
            ],
        }
    }
}

/// The kernel file name Pi 3 and Pi 4 load (the default for 64-bit kernels).
pub const KERNEL_PI3_PI4: &str = "kernel8.img";
/// The kernel file name the Pi 5 firmware prefers (docs/hardware.md §4.3).
pub const KERNEL_PI5: &str = "kernel_2712.img";
/// The 32-bit kernel of Pi 1, Zero, Zero W and CM1 (docs/aarch32-pis.md §2).
pub const KERNEL_PI1: &str = "kernel.img";
/// The 32-bit kernel of Pi 2 (the same bytes as [`KERNEL_PI1`]).
pub const KERNEL_PI2: &str = "kernel7.img";
/// Where the 64-bit kernel is linked and must be loaded (docs/hardware.md §4.1: set it explicitly).
pub const KERNEL_LOAD_ADDRESS: u32 = 0x8_0000;
/// Where the 32-bit kernel is linked: the firmware's default for 32-bit kernels.
pub const KERNEL32_LOAD_ADDRESS: u32 = 0x8000;
/// PL011 reference clock on Pi 3/4; 115200 baud is IBRD 26, FBRD 3 (docs/hardware.md §4.1).
pub const PL011_CLOCK_HZ: u32 = 48_000_000;

/// One board section: its filter, kernel, 32 or 64 bits, and the boards it is for.
struct BoardSection {
    filter: &'static str,
    boards: &'static str,
    kernel: &'static str,
    arm_64bit: bool,
}

/// The sections in the order the firmware must read them: filters of one kind replace each
/// other, and `[pi0]` also matches the Zero 2 W, so `[pi02]` follows it (docs/aarch32-pis.md §2).
/// `[pi2]` also matches the Pi 2 v1.2 (BCM2837), which then boots the 32-bit image.
const BOARD_SECTIONS: [BoardSection; 6] = [
    BoardSection { filter: "pi1", boards: "Pi 1 A/B/A+/B+, CM1", kernel: KERNEL_PI1, arm_64bit: false },
    BoardSection { filter: "pi0", boards: "Zero, Zero W", kernel: KERNEL_PI1, arm_64bit: false },
    BoardSection { filter: "pi2", boards: "Pi 2 B", kernel: KERNEL_PI2, arm_64bit: false },
    BoardSection {
        filter: "pi02",
        boards: "Zero 2 W (after [pi0], which matches it too)",
        kernel: KERNEL_PI3_PI4,
        arm_64bit: true,
    },
    BoardSection { filter: "pi3", boards: "Pi 3 / 3+ / CM3", kernel: KERNEL_PI3_PI4, arm_64bit: true },
    BoardSection { filter: "pi4", boards: "Pi 4 / 400 / CM4", kernel: KERNEL_PI3_PI4, arm_64bit: true },
];

/// `config.txt` with an `[all]` part and per-board sections.
pub fn config_txt(options: &ConfigOptions) -> String {
    let mut text = String::new();
    let mut line = |content: &str| {
        text.push_str(content);
        text.push('\n');
    };
    line("# barebench boot configuration, written by `barebench image`.");
    line("# One card for every Raspberry Pi: Pi 1 / Zero / Zero W / CM1 and Pi 2 (32-bit kernel.img,");
    line("# kernel7.img), Pi 3 / 3+ / Zero 2 W, Pi 4 / 400 / CM4 and Pi 5 (64-bit kernel8.img, kernel_2712.img).");
    line("# Serial console: 115200 8N1, e.g. picocom -b 115200 /dev/ttyUSB0");
    line("");
    line("[all]");
    line("enable_uart=1");
    if options.upstream_dtb_names {
        line("# The device trees come from Debian's Linux packages and use upstream names");
        line("# (bcm2837-rpi-3-b.dtb); this makes the firmware look for them.");
        line("upstream_kernel=1");
    }
    if options.firmware_boot_log {
        line("# The firmware prints its own boot log on the same UART.");
        line("uart_2ndstage=1");
    }
    for section in BOARD_SECTIONS {
        line("");
        line(&format!("[{}]", section.filter));
        line(&format!("# {}", section.boards));
        line(&format!("kernel={}", section.kernel));
        if section.arm_64bit {
            line("arm_64bit=1");
            line(&format!("kernel_address={KERNEL_LOAD_ADDRESS:#x}"));
        } else {
            line("arm_64bit=0");
            line(&format!("kernel_address={KERNEL32_LOAD_ADDRESS:#x}"));
        }
        line("# PL011 (UART0) clock: 115200 baud = IBRD 26, FBRD 3.");
        line(&format!("init_uart_clock={PL011_CLOCK_HZ}"));
        if options.has_disable_bt_overlay {
            line("# Bluetooth (Pi 3, 4, Zero W) gives up the PL011, which moves to GPIO14/15 (pins 8/10).");
            line("dtoverlay=disable-bt");
        } else if section.filter != "pi1" && section.filter != "pi2" {
            line("# No overlays/disable-bt.dtbo on this card (Debian ships none): Bluetooth keeps");
            line("# the PL011 pins and the mini UART sits on GPIO14/15 until the barebench kernel");
            line("# switches GPIO14/15 to ALT0 (PL011) and GPIO32/33 away from it at start.");
        }
    }
    line("");
    line("[pi5]");
    line(&format!("kernel={KERNEL_PI5}"));
    line("arm_64bit=1");
    line(&format!("kernel_address={KERNEL_LOAD_ADDRESS:#x}"));
    line("# Bare-metal kernel: do not require an OS-compatible device tree.");
    line("os_check=0");
    line("# Console on the 3-pin debug UART (UART10) between the HDMI ports, 115200 8N1.");
    for pi5_line in options.pi5_console.config_lines() {
        line(pi5_line);
    }
    if options.pi5_console == Pi5Console::Debug {
        line("# For the header pins GPIO 14/15 as well: barebench image --pi5-console header.");
    }
    line("# NVMe on the external PCIe connector (pcie1): the kernel brings the link up itself. The");
    line("# connector is off unless a HAT+ is detected; dtparam=pciex1 enables it for other adapters");
    line("# (Raspberry Pi documentation, pcie.adoc). PCIE_PROBE=1 in the bootloader's EEPROM");
    line("# configuration (rpi-eeprom-config) is a different thing: it makes the bootloader enumerate");
    line("# the connector at boot (eeprom-bootloader.adoc), which some non-HAT+ adapters need to be");
    line("# powered. Link speed and reset timing: pcie.gen= and pcie.perst-ms= in cmdline.txt.");
    line("dtparam=pciex1");
    if options.pi5_console == Pi5Console::Debug {
        line("# USB drives on the Pi 5's own ports (RP1, behind pcie2) need usb.rp1=on in cmdline.txt");
        line("# and the firmware to leave RP1's link up:");
        line("#pciex4_reset=0");
    }
    line("# Bus-powered USB SSDs: with a supply that does not announce 5 A, the firmware limits the");
    line("# USB ports to 600 mA; this lifts the limit (the supply must still deliver it):");
    line("#usb_max_current_enable=1");
    line("");
    line("[all]");
    text
}

/// Errors in the benchmark settings for `cmdline.txt`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmdlineError {
    #[error("setting {setting:?} contains a line break; cmdline.txt is one line")]
    LineBreak { setting: String },
}

/// `cmdline.txt`: the settings joined by single spaces on one line (the firmware passes it to
/// the kernel as `/chosen/bootargs`, docs/architecture.md "Configuration"). Returns the text and warnings
/// for settings that are not `key=value`.
pub fn cmdline_txt(settings: &[String]) -> Result<(String, Vec<String>), CmdlineError> {
    let mut tokens = Vec::new();
    let mut warnings = Vec::new();
    for setting in settings {
        if setting.contains(['\n', '\r']) {
            return Err(CmdlineError::LineBreak { setting: setting.clone() });
        }
        for token in setting.split_whitespace() {
            if !token.contains('=') {
                warnings.push(format!(
                    "setting {token:?} is not key=value; the kernel will report it and ignore it"
                ));
            }
            tokens.push(token);
        }
    }
    let mut text = tokens.join(" ");
    let _ = writeln!(text);
    Ok((text, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        let header = format!("[{name}]");
        text.lines()
            .skip_while(|line| *line != header)
            .skip(1)
            .take_while(|line| !line.starts_with('['))
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .collect()
    }

    #[test]
    fn all_section_sets_the_uart_and_the_boards_set_their_kernels() {
        let text = config_txt(&ConfigOptions::default());
        assert_eq!(section(&text, "all"), ["enable_uart=1"]);
        assert!(text.ends_with("[all]\n"), "settings after the board sections apply to all");
    }

    #[test]
    fn every_pi_from_1_to_4_gets_its_kernel_width_address_and_uart_clock() {
        let text = config_txt(&ConfigOptions::default());
        for (board, kernel, bits) in [
            ("pi1", "kernel.img", "arm_64bit=0"),
            ("pi0", "kernel.img", "arm_64bit=0"),
            ("pi2", "kernel7.img", "arm_64bit=0"),
            ("pi02", "kernel8.img", "arm_64bit=1"),
            ("pi3", "kernel8.img", "arm_64bit=1"),
            ("pi4", "kernel8.img", "arm_64bit=1"),
        ] {
            let address =
                if bits.ends_with('1') { "kernel_address=0x80000" } else { "kernel_address=0x8000" };
            assert_eq!(
                section(&text, board),
                [format!("kernel={kernel}").as_str(), bits, address, "init_uart_clock=48000000"],
                "{board}"
            );
        }
        assert!(!text.contains("dtoverlay"));
    }

    #[test]
    fn the_zero_2_w_override_follows_the_zero_section_that_also_matches_it() {
        let text = config_txt(&ConfigOptions::default());
        let position = |header: &str| text.find(header).unwrap();
        assert!(position("[pi0]") < position("[pi02]"));
        assert!(position("[pi02]") < position("[pi5]"));
    }

    #[test]
    fn disable_bt_only_when_the_overlay_is_on_the_card() {
        let options = ConfigOptions { has_disable_bt_overlay: true, ..Default::default() };
        let text = config_txt(&options);
        assert!(section(&text, "pi3").contains(&"dtoverlay=disable-bt"));
        assert!(section(&text, "pi4").contains(&"dtoverlay=disable-bt"));
        assert!(!section(&text, "pi5").contains(&"dtoverlay=disable-bt"));
    }

    #[test]
    fn pi5_section_skips_the_os_check_and_enables_the_pcie_connector() {
        let text = config_txt(&ConfigOptions::default());
        assert_eq!(
            section(&text, "pi5"),
            [
                "kernel=kernel_2712.img",
                "arm_64bit=1",
                "kernel_address=0x80000",
                "os_check=0",
                "dtparam=pciex1"
            ]
        );
    }

    #[test]
    fn the_pi5_header_console_keeps_rp1_up_and_the_debug_one_does_not() {
        let debug = config_txt(&ConfigOptions::default());
        let debug_pi5 = section(&debug, "pi5");
        assert!(
            !debug_pi5.contains(&"pciex4_reset=0") && !debug.contains("enable_rp1_uart"),
            "{debug_pi5:?}"
        );
        for choice in [Pi5Console::Header, Pi5Console::Both] {
            let text = config_txt(&ConfigOptions { pi5_console: choice, ..Default::default() });
            let pi5 = section(&text, "pi5");
            assert!(pi5.contains(&"enable_rp1_uart=1") && pi5.contains(&"pciex4_reset=0"), "{pi5:?}");
            // Only the Pi 5 gets them.
            assert!(!section(&text, "pi4").contains(&"pciex4_reset=0"));
        }
    }

    #[test]
    fn pi5_section_says_how_an_nvme_adapter_gets_power() {
        let text = config_txt(&ConfigOptions::default());
        let pi5: Vec<&str> =
            text.lines().skip_while(|l| *l != "[pi5]").take_while(|l| *l != "[all]").collect();
        assert!(pi5.iter().any(|l| l.contains("PCIE_PROBE=1")), "{pi5:?}");
        assert!(pi5.iter().any(|l| l.contains("pcie.gen=")), "{pi5:?}");
        // What usb.rp1=on and bus-powered drives need, written but commented out.
        assert!(pi5.contains(&"#pciex4_reset=0"), "{pi5:?}");
        assert!(pi5.contains(&"#usb_max_current_enable=1"), "{pi5:?}");
    }

    #[test]
    fn optional_settings_follow_the_options() {
        let text = config_txt(&ConfigOptions {
            upstream_dtb_names: true,
            firmware_boot_log: true,
            ..Default::default()
        });
        let all = section(&text, "all");
        assert!(all.contains(&"upstream_kernel=1"));
        assert!(all.contains(&"uart_2ndstage=1"));
    }

    #[test]
    fn cmdline_is_one_line_of_settings() {
        let settings = vec!["preset=quick".to_string(), "devices=sd0  runs=3".to_string()];
        let (text, warnings) = cmdline_txt(&settings).unwrap();
        assert_eq!(text, "preset=quick devices=sd0 runs=3\n");
        assert!(warnings.is_empty());
        assert_eq!(cmdline_txt(&[]).unwrap().0, "\n");
    }

    #[test]
    fn cmdline_warns_about_bare_words_and_refuses_line_breaks() {
        let (text, warnings) = cmdline_txt(&["quick".to_string()]).unwrap();
        assert_eq!(text, "quick\n");
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("\"quick\""));
        assert!(matches!(cmdline_txt(&["a=1\nb=2".to_string()]), Err(CmdlineError::LineBreak { .. })));
    }
}
