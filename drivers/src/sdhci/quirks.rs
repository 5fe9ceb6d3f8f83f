//! The board differences between SDHCI hosts as data (docs/hardware.md §2.1-2.7, docs/qemu.md §2): one
//! table entry per controller kind, read by the one host driver instead of branches on the kind.
#![forbid(unsafe_code)]

use super::adma::DescriptorLimit;
use crate::gpio::{Bcm2835Gpio, PinFunction};
use hal::mmio::RegisterIo;

/// Where the host's base clock (the SDCLK divider's input) comes from (docs/hardware.md §2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseClockSource {
    /// VideoCore mailbox GET_CLOCK_RATE for this clock ID; `fallback_hz` if the firmware does
    /// not answer.
    Mailbox { clock_id: u32, fallback_hz: u32 },
    /// The Capabilities register's Base Clock Frequency field (SDHCI §2.2.26).
    Capabilities,
}

/// Where the capability values the driver decides by come from (SDHCI §2.2.26).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapabilitySource {
    /// The Capabilities register as the controller reads it.
    Register,
    /// The register is missing or cannot be trusted: these values replace it (Linux
    /// `sdhci-iproc.c`, `bcm2835_data` with `missing_caps`).
    Supplied { low: u32, high: u32 },
    /// The register, with its UHS-I mode bits (SDR50, SDR104, DDR50: bits 2:0 of the high word)
    /// replaced by the board's: Linux `sdhci-brcmstb.c` clears them and takes the device tree's
    /// `sd-uhs-*` properties instead.
    RegisterWithBoardUhs { uhs_bits: u32 },
}

/// The UHS-I mode bits of the Capabilities high word (SDHCI §2.2.26 bits 34:32).
pub const UHS_SDR50: u32 = 1 << 0;
pub const UHS_SDR104: u32 = 1 << 1;
pub const UHS_DDR50: u32 = 1 << 2;

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
    /// Pins that may still carry this controller and are set to INPUT before the others are
    /// routed: after a warm reboot the Wi-Fi pins GPIO 34-39 can still be on ALT3, and two pin
    /// groups on one controller fight (circle `addon/SDCard/emmc.cpp` does the same).
    pub release_first: Option<(u32, u32)>,
}

impl PinRouting {
    /// Routes the pins: the released group to INPUT, then (for QEMU) the SD pins to INPUT, then
    /// the SD pins to their function.
    pub fn apply<R: RegisterIo>(&self, gpio: &Bcm2835Gpio<R>) {
        if let Some((first, last)) = self.release_first {
            gpio.set_functions(first..=last, PinFunction::Input);
        }
        let pins = self.first_pin..=self.last_pin;
        if self.input_first {
            gpio.set_functions(pins.clone(), PinFunction::Input);
        }
        gpio.set_functions(pins, PinFunction::from_bits(self.function_bits));
    }
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
    pub capabilities: CapabilitySource,
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
    /// Offset of the BCM2712 "cfg" block from the host registers (docs/hardware.md §2.7). The
    /// host's register window must then reach `offset + bcm2712_config::BLOCK_BYTES`.
    pub config_block_offset: Option<usize>,
    /// What one ADMA2 descriptor may carry: 64 KiB (length 0) unless Linux marks the host
    /// `SDHCI_QUIRK_BROKEN_ADMA_ZEROLEN_DESC` (none of these hosts: `sdhci-iproc.c`,
    /// `sdhci-brcmstb.c`, `sdhci-pci-core.c`'s generic entry; QEMU's `sdhci.c` reads 0 as 64 KiB).
    pub adma_descriptor_limit: DescriptorLimit,
}

/// The capabilities Linux supplies for the BCM2835/2837 Arasan, whose register cannot be trusted
/// (`sdhci-iproc.c` `bcm2835_data`): 1 KiB blocks, 3.3 V, high speed; driver types A and C. No
/// DMA, no 1.8 V, no base clock (it comes from the firmware).
pub const BCM2835_SUPPLIED_CAPABILITIES: (u32, u32) =
    ((1 << 16) | (1 << 24) | (1 << 21), (1 << 4) | (1 << 5));

/// The Arasan "EMMC" of BCM2835/2837 (Pi 3, Zero 2 W) and BCM2711's legacy copy: clock ID 1,
/// capabilities supplied by the driver, 32-bit access, write spacing, broken card detect, no
/// HISPD bit, 3.3 V only, GPIO 34-39 released and GPIO 48-53 on ALT3.
pub const ARASAN_EMMC: HostQuirks = HostQuirks {
    name: "Arasan EMMC (BCM2835/2837/2711 legacy)",
    access_32_bit_only: true,
    slow_clock_write_spacing_clocks: 4,
    base_clock: BaseClockSource::Mailbox { clock_id: 1, fallback_hz: 100_000_000 },
    capabilities: CapabilitySource::Supplied {
        low: BCM2835_SUPPLIED_CAPABILITIES.0,
        high: BCM2835_SUPPLIED_CAPABILITIES.1,
    },
    firmware_power_device: Some(0),
    broken_card_detect: true,
    no_high_speed_bit: true,
    can_switch_to_1v8: false,
    pins: Some(PinRouting {
        first_pin: 48,
        last_pin: 53,
        function_bits: 0b111,
        input_first: true,
        release_first: Some((34, 39)),
    }),
    config_block_offset: None,
    adma_descriptor_limit: DescriptorLimit::ZeroLengthMeans64KiB,
};

/// BCM2711 EMMC2, the Pi 4 SD slot: clock ID 12, 32-bit access, write spacing, broken card
/// detect, 1.8 V through the firmware GPIO expander.
pub const BCM2711_EMMC2: HostQuirks = HostQuirks {
    name: "BCM2711 EMMC2",
    access_32_bit_only: true,
    slow_clock_write_spacing_clocks: 4,
    base_clock: BaseClockSource::Mailbox { clock_id: 12, fallback_hz: 100_000_000 },
    capabilities: CapabilitySource::Register,
    firmware_power_device: Some(0),
    broken_card_detect: true,
    no_high_speed_bit: false,
    can_switch_to_1v8: true,
    pins: None,
    config_block_offset: None,
    adma_descriptor_limit: DescriptorLimit::ZeroLengthMeans64KiB,
};

/// BCM2712 sdio1, the Pi 5 SD slot: standard access widths, clock ID 1 (200 MHz fallback),
/// card detect through the cfg block, 1.8 V through AON GPIO 3, and the UHS-I modes of the Pi 5
/// device tree (`sd-uhs-sdr50; sd-uhs-ddr50; sd-uhs-sdr104`, docs/hardware.md §2.6).
pub const BCM2712_SDHCI: HostQuirks = HostQuirks {
    name: "BCM2712 SDHCI",
    access_32_bit_only: false,
    slow_clock_write_spacing_clocks: 0,
    base_clock: BaseClockSource::Mailbox { clock_id: 1, fallback_hz: 200_000_000 },
    capabilities: CapabilitySource::RegisterWithBoardUhs { uhs_bits: UHS_SDR50 | UHS_SDR104 | UHS_DDR50 },
    firmware_power_device: None,
    broken_card_detect: false,
    no_high_speed_bit: false,
    can_switch_to_1v8: true,
    pins: None,
    config_block_offset: Some(0x400),
    adma_descriptor_limit: DescriptorLimit::ZeroLengthMeans64KiB,
};

/// A standard SDHCI on PCI (class 08:05:01; QEMU's `sdhci-pci`): everything from the
/// capabilities register.
pub const GENERIC_PCI: HostQuirks = HostQuirks {
    name: "SDHCI on PCI",
    access_32_bit_only: false,
    slow_clock_write_spacing_clocks: 0,
    base_clock: BaseClockSource::Capabilities,
    capabilities: CapabilitySource::Register,
    firmware_power_device: None,
    broken_card_detect: false,
    no_high_speed_bit: false,
    can_switch_to_1v8: false,
    pins: None,
    config_block_offset: None,
    adma_descriptor_limit: DescriptorLimit::ZeroLengthMeans64KiB,
};

/// BCM2712 cfg-block registers (docs/hardware.md §2.7; rpi-linux sdhci-brcmstb.c, u-boot
/// bcmstb_sdhci.c).
pub mod bcm2712_config {
    /// Bytes of the block (docs/hardware.md §1.3: 0x200 at host + 0x400).
    pub const BLOCK_BYTES: usize = 0x200;
    pub const CTRL: usize = 0x00;
    /// Force "card present": set SDCD_N_TEST_EN (bit 31), clear SDCD_N_TEST_LEV (bit 30).
    pub const CTRL_CARD_DETECT_TEST_ENABLE: u32 = 1 << 31;
    pub const CTRL_CARD_DETECT_TEST_LEVEL: u32 = 1 << 30;
    pub const SD_PIN_SEL: usize = 0x44;
    /// Bit 1 selects the SD card function of the pins.
    pub const SD_PIN_SEL_SD: u32 = 0b10;
    /// SDIO_CFG_MAX_50MHZ_MODE: with ENABLE set the PHY runs without its delay line and cannot
    /// go above 50 MHz; clearing ENABLE and setting STRAP_OVERRIDE selects the delay-line PHY that
    /// SDR50/SDR104 need (Linux `sdhci-brcmstb.c` `sdhci_brcmstb_cfginit_2712`).
    pub const MAX_50MHZ_MODE: usize = 0x1ac;
    pub const MAX_50MHZ_MODE_ENABLE: u32 = 1 << 0;
    pub const MAX_50MHZ_MODE_STRAP_OVERRIDE: u32 = 1 << 31;
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use core::cell::RefCell;
    use std::vec::Vec;

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
        assert_eq!(pins.release_first, Some((34, 39)));
        // Linux's supplied capabilities for the BCM2835 Arasan; the board's UHS modes on the Pi 5.
        assert_eq!(ARASAN_EMMC.capabilities, CapabilitySource::Supplied { low: 0x0121_0000, high: 0x30 });
        assert_eq!(BCM2712_SDHCI.capabilities, CapabilitySource::RegisterWithBoardUhs { uhs_bits: 0b111 });
        assert_eq!(BCM2711_EMMC2.capabilities, CapabilitySource::Register);
        assert!(BCM2711_EMMC2.pins.is_none());
        assert_eq!(BCM2712_SDHCI.config_block_offset, Some(0x400));
        const { assert!(ARASAN_EMMC.no_high_speed_bit && !BCM2711_EMMC2.no_high_speed_bit) };
        // Every DMA-capable host here takes 64 KiB descriptors (length 0), as Linux gives them.
        for quirks in [BCM2711_EMMC2, BCM2712_SDHCI, GENERIC_PCI] {
            assert_eq!(
                quirks.adma_descriptor_limit,
                DescriptorLimit::ZeroLengthMeans64KiB,
                "{}",
                quirks.name
            );
        }
    }

    /// Records every GPFSEL write as (register, pin functions of that register).
    struct RecordingGpio {
        select: RefCell<[u32; 6]>,
        writes: RefCell<Vec<(usize, u32)>>,
    }
    impl RegisterIo for &RecordingGpio {
        fn read32(&self, offset_bytes: usize) -> u32 {
            self.select.borrow()[offset_bytes / 4]
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            self.select.borrow_mut()[offset_bytes / 4] = value;
            self.writes.borrow_mut().push((offset_bytes, value));
        }
    }

    #[test]
    fn the_arasan_takes_the_wifi_pins_off_before_it_takes_the_sd_pins() {
        // After a warm reboot GPIO 34-39 may still be on ALT3 (the Arasan, Wi-Fi).
        let alt3_everywhere = 0x3fff_ffff;
        let gpio_state =
            RecordingGpio { select: RefCell::new([alt3_everywhere; 6]), writes: RefCell::new(Vec::new()) };
        let gpio = Bcm2835Gpio::new(&gpio_state);
        ARASAN_EMMC.pins.unwrap().apply(&gpio);
        let writes = gpio_state.writes.borrow();
        // First GPFSEL3 (pins 30-39) with 34-39 input and 30-33 kept, then the SD pins.
        assert_eq!(writes[0], (0x0c, 0x0000_0fff));
        assert!(writes[1..].iter().all(|(offset, _)| *offset == 0x10 || *offset == 0x14), "{writes:?}");
        for pin in 34..=39 {
            assert_eq!(gpio.function(pin), PinFunction::Input);
        }
        for pin in 48..=53 {
            assert_eq!(gpio.function(pin), PinFunction::Alt3);
        }
        // QEMU's condition: the SD pins passed through INPUT before ALT3 (docs/qemu.md §2).
        assert!(writes.iter().any(|(offset, value)| *offset == 0x14 && value & 0xfff == 0));
    }
}
