//! The board differences between SDHCI hosts as data (docs/hardware.md §2.1-2.7, docs/qemu.md §2): one
//! table entry per controller kind, read by the one host driver instead of branches on the kind.

/// Where the host's base clock (the SDCLK divider's input) comes from (docs/hardware.md §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseClockSource {
    /// VideoCore mailbox GET_CLOCK_RATE for this clock ID; `fallback_hz` if the firmware does
    /// not answer.
    Mailbox { clock_id: u32, fallback_hz: u32 },
    /// The Capabilities register's Base Clock Frequency field (SDHCI §2.2.26).
    Capabilities,
}

/// GPIO pins that must be routed to this host before it sees the card (docs/hardware.md §2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinRouting {
    pub first_pin: u32,
    pub last_pin: u32,
    /// The function select value that routes them here on real hardware (ALT3 = 0b111).
    pub function_bits: u32,
    /// Set the pins to INPUT first: QEMU moves the card to the Arasan only when all six are
    /// inputs and ignores ALT3 (docs/qemu.md §2), so "input, then ALT3" works on both.
    pub input_first: bool,
}

/// Everything about one controller kind that the driver must treat differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostQuirks {
    /// A short name for the console.
    pub name: &'static str,
    /// Registers accept 32-bit accesses only (BCM2835/7 Arasan, BCM2711 EMMC2: docs/hardware.md
    /// §2.3). The driver only ever makes 32-bit accesses (`RegisterIo`), writing Transfer Mode
    /// and Command as one word, so this is satisfied for every host; it is listed for the report.
    pub access_32_bit_only: bool,
    /// While SDCLK ≤ 400 kHz, wait this many SD clock periods after every register write
    /// (Arasan clock-domain crossing loses back-to-back writes: docs/hardware.md §2.3; 0 = none).
    pub slow_clock_write_spacing_clocks: u32,
    pub base_clock: BaseClockSource,
    /// VideoCore power domain to switch on with SET_POWER_STATE before use (device 0 = SD card,
    /// docs/hardware.md §2.9 step 1), for Pi ≤ 4.
    pub firmware_power_device: Option<u32>,
    /// PRESENT_STATE.CARD_INSERTED is not wired (Pi 4 EMMC2 `broken-cd`, BCM2835 Arasan
    /// "broken card detection"): find out whether a card is there by talking to it.
    pub broken_card_detect: bool,
    /// Host Control 1 HIGH_SPEED_ENABLE must not be set (BCM2835 Arasan: docs/hardware.md §2.3).
    pub no_high_speed_bit: bool,
    /// The SD I/O rail can switch to 1.8 V through a board hook (Pi 4 EMMC2: firmware expander
    /// line 4; Pi 5: AON GPIO 3; docs/hardware.md §2.5). Without it ACMD41 never asks for S18R.
    pub can_switch_to_1v8: bool,
    /// Pins to route before use (BCM2835/7 and BCM2711's legacy Arasan on GPIO 48-53).
    pub pins: Option<PinRouting>,
    /// Offset of the BCM2712 "cfg" block from the host registers (docs/hardware.md §2.7).
    pub config_block_offset: Option<usize>,
}

/// The Arasan "EMMC" of BCM2835/2837 (Pi 3, Zero 2 W) and BCM2711's legacy copy: clock ID 1,
/// 32-bit access, write spacing, broken card detect, no HISPD bit, 3.3 V only, GPIO 48-53 ALT3.
pub const ARASAN_EMMC: HostQuirks = HostQuirks {
    name: "Arasan EMMC (BCM2835/2837/2711 legacy)",
    access_32_bit_only: true,
    slow_clock_write_spacing_clocks: 4,
    base_clock: BaseClockSource::Mailbox { clock_id: 1, fallback_hz: 100_000_000 },
    firmware_power_device: Some(0),
    broken_card_detect: true,
    no_high_speed_bit: true,
    can_switch_to_1v8: false,
    pins: Some(PinRouting { first_pin: 48, last_pin: 53, function_bits: 0b111, input_first: true }),
    config_block_offset: None,
};

/// BCM2711 EMMC2, the Pi 4 SD slot: clock ID 12, 32-bit access, write spacing, broken card
/// detect, 1.8 V through the firmware GPIO expander.
pub const BCM2711_EMMC2: HostQuirks = HostQuirks {
    name: "BCM2711 EMMC2",
    access_32_bit_only: true,
    slow_clock_write_spacing_clocks: 4,
    base_clock: BaseClockSource::Mailbox { clock_id: 12, fallback_hz: 100_000_000 },
    firmware_power_device: Some(0),
    broken_card_detect: true,
    no_high_speed_bit: false,
    can_switch_to_1v8: true,
    pins: None,
    config_block_offset: None,
};

/// BCM2712 sdio1, the Pi 5 SD slot: standard access widths, clock ID 1 (200 MHz fallback),
/// card detect through the cfg block, 1.8 V through AON GPIO 3.
pub const BCM2712_SDHCI: HostQuirks = HostQuirks {
    name: "BCM2712 SDHCI",
    access_32_bit_only: false,
    slow_clock_write_spacing_clocks: 0,
    base_clock: BaseClockSource::Mailbox { clock_id: 1, fallback_hz: 200_000_000 },
    firmware_power_device: None,
    broken_card_detect: false,
    no_high_speed_bit: false,
    can_switch_to_1v8: true,
    pins: None,
    config_block_offset: Some(0x400),
};

/// A standard SDHCI on PCI (class 08:05:01; QEMU's `sdhci-pci`): everything from the
/// capabilities register.
pub const GENERIC_PCI: HostQuirks = HostQuirks {
    name: "SDHCI on PCI",
    access_32_bit_only: false,
    slow_clock_write_spacing_clocks: 0,
    base_clock: BaseClockSource::Capabilities,
    firmware_power_device: None,
    broken_card_detect: false,
    no_high_speed_bit: false,
    can_switch_to_1v8: false,
    pins: None,
    config_block_offset: None,
};

/// BCM2712 cfg-block registers (docs/hardware.md §2.7; rpi-linux sdhci-brcmstb.c, u-boot
/// bcmstb_sdhci.c).
pub mod bcm2712_config {
    pub const CTRL: usize = 0x00;
    /// Force "card present": set SDCD_N_TEST_EN (bit 31), clear SDCD_N_TEST_LEV (bit 30).
    pub const CTRL_CARD_DETECT_TEST_ENABLE: u32 = 1 << 31;
    pub const CTRL_CARD_DETECT_TEST_LEVEL: u32 = 1 << 30;
    pub const SD_PIN_SEL: usize = 0x44;
    /// Bit 1 selects the SD card function of the pins.
    pub const SD_PIN_SEL_SD: u32 = 0b10;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_the_documents_say() {
        // Clock IDs: EMMC = 1, EMMC2 = 12 (docs/hardware.md §2.2).
        assert_eq!(
            ARASAN_EMMC.base_clock,
            BaseClockSource::Mailbox { clock_id: 1, fallback_hz: 100_000_000 }
        );
        assert!(matches!(BCM2711_EMMC2.base_clock, BaseClockSource::Mailbox { clock_id: 12, .. }));
        assert_eq!(GENERIC_PCI.base_clock, BaseClockSource::Capabilities);
        // Only Pi ≤ 4 hosts are powered through the firmware.
        assert_eq!(ARASAN_EMMC.firmware_power_device, Some(0));
        assert_eq!(BCM2712_SDHCI.firmware_power_device, None);
        // Only the hosts with a switchable rail may ask for 1.8 V (Pi 3 cannot: §2.5).
        const { assert!(!ARASAN_EMMC.can_switch_to_1v8) };
        const { assert!(BCM2711_EMMC2.can_switch_to_1v8 && BCM2712_SDHCI.can_switch_to_1v8) };
        const { assert!(!GENERIC_PCI.can_switch_to_1v8) };
        // The Arasan is the one behind the GPIO 48-53 mux, ALT3, inputs first for QEMU.
        let pins = ARASAN_EMMC.pins.unwrap();
        assert_eq!((pins.first_pin, pins.last_pin, pins.function_bits), (48, 53, 0b111));
        assert!(pins.input_first);
        assert!(BCM2711_EMMC2.pins.is_none());
        assert_eq!(BCM2712_SDHCI.config_block_offset, Some(0x400));
        const { assert!(ARASAN_EMMC.no_high_speed_bit && !BCM2711_EMMC2.no_high_speed_bit) };
    }
}
