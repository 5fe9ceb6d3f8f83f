//! The board table: what the kernel knows about each supported board without being told, with
//! the addresses from docs/hardware.md §1 (docs/aarch32-pis.md §1, §6 for the 32-bit Pis, and
//! docs/qemu.md §3 for QEMU virt). The device tree, when there
//! is one, refines it (memory, model, device addresses); without one this table is the map.
#![forbid(unsafe_code)]

use boot::cpu::CoreModel;
use drivers::pci::brcmstb::Soc;
use drivers::pci::{HostWindows, Window};
use hal::platform::BusTranslation;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoardFamily {
    /// Pi 1 A/B/A+/B+, Zero, Zero W, CM1 (BCM2835); QEMU raspi0, raspi1ap.
    RaspberryPi1,
    /// Pi 2 B v1.0/1.1 (BCM2836); QEMU raspi2b.
    RaspberryPi2,
    /// Pi 3 B/B+/A+, Zero 2 W, CM3 (BCM2837 / RP3A0); QEMU raspi3b.
    RaspberryPi3,
    /// Pi 4 B, 400, CM4 (BCM2711); QEMU raspi4b.
    RaspberryPi4,
    /// Pi 5, 500, CM5 (BCM2712).
    RaspberryPi5,
    /// QEMU's `virt` machine.
    QemuVirt,
}

/// How the console UART's reference clock is known (docs/hardware.md §4.1-4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartClock {
    /// Ask the firmware (clock 2); use the fixed value if it does not answer.
    FromMailbox { fallback_hz: u32 },
    /// A fixed clock.
    Fixed { hz: u32 },
    /// Keep the divisors the firmware programmed, if any; otherwise use `fallback_hz`.
    KeepFirmware { fallback_hz: u32 },
}

/// The SD host controllers a board has, by register layout and quirks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdHostKind {
    /// The BCM2835 sdhost, Linux's controller for the SD slot of Pi 1-3.
    Bcm2835Sdhost,
    /// The Arasan SDHCI ("EMMC") of BCM2835/2837 and BCM2711's legacy one.
    ArasanEmmc,
    /// BCM2711 EMMC2, the Pi 4 SD slot.
    Bcm2711Emmc2,
    /// BCM2712 sdio1 with its cfg block at +0x400, the Pi 5 SD slot.
    Bcm2712Sdhci,
}

/// How an SD host's DMA sees RAM (docs/hardware.md §2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdDma {
    /// The same on every board of the family.
    Fixed(BusTranslation),
    /// BCM2711 EMMC2: depends on the SoC stepping. The firmware writes it into the device tree's
    /// `emmc2bus` `dma-ranges`; without that the board revision decides (`sd_dma`).
    Bcm2711Emmc2,
}

/// Whether a host of the table may be probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Always,
    /// Only under QEMU, which wires a card to it. BCM2711's legacy Arasan does not reach the SD
    /// slot of a Pi 4 / 400 / CM4, whose GPIO 48-53 are the Ethernet RGMII lines (docs/hardware.md
    /// §2.1, §7): routing them to the Arasan would take the Ethernet PHY's pins.
    QemuOnly,
    /// One of the two controllers GPIO 48-53 can route to the SD slot of a Pi 1-3 (ALT0 the
    /// sdhost, ALT3 the Arasan; docs/aarch32-pis.md §7): only the one `sd.host=` picks is probed.
    SlotChoice,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdHost {
    pub kind: SdHostKind,
    /// The register block (kind `BlockKind::SdHost(kind)`).
    pub block: MmioBlock,
    pub dma: SdDma,
    pub presence: Presence,
}

impl SdHost {
    /// Whether this host may be probed on this machine (`qemu`: the firmware is QEMU's model).
    pub fn may_probe(&self, qemu: bool) -> bool {
        match self.presence {
            Presence::Always | Presence::SlotChoice => true,
            Presence::QemuOnly => qemu,
        }
    }
}

/// The PSCI conduit, i.e. which exception level answers PSCI calls (Arm DEN0022 §5.2: SMC for
/// firmware at EL3, HVC for a hypervisor at EL2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciConduit {
    Hvc,
    Smc,
}

/// The clock the kernel times with (docs/aarch32-pis.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoardTimer {
    /// The ARM generic timer at CNTFRQ.
    Generic,
    /// The generic timer of a BCM2836, whose ARM-local prescaler (local block + 0x08) decides
    /// the counter's real rate: set to 0x8000_0000 (divide by one) with the crystal selected
    /// (local block + 0x00 = 0), as the Raspberry Pi's armstub8 does, so that the counter runs at
    /// the 19.2 MHz CNTFRQ says.
    /// The block is the board's [`BlockKind::ArmLocal`].
    GenericWithLocalPrescaler,
    /// The BCM2835 system timer's 1 MHz counter (no generic timer on the ARM1176).
    SystemTimer,
}

/// BCM2712's bridge reset: a line of the SoC reset controller, and the RESCAL block in pcie1's
/// page (docs/hardware.md §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeReset {
    /// The SoC reset controller (`BlockKind::BridgeResetController`).
    pub controller: MmioBlock,
    pub line: u32,
    /// RESCAL (`BlockKind::Rescal`).
    pub rescal: MmioBlock,
}

/// The Broadcom STB PCIe root complex the kernel brings up, as the board's device tree describes
/// it (docs/hardware.md §1.4); a device tree that has the node overrides the windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcieHost {
    /// The device tree label: `pcie0` (BCM2711), `pcie1` (BCM2712's external connector).
    pub name: &'static str,
    pub compatible: &'static str,
    pub soc: Soc,
    /// The root complex's registers (`BlockKind::PcieRootComplex`).
    pub registers: MmioBlock,
    pub bridge_reset: Option<BridgeReset>,
    /// Outbound windows (`ranges`).
    pub windows: HostWindows,
    /// How devices see memory (`dma-ranges`).
    pub dma: BusTranslation,
    /// The link generation when neither the command line nor the device tree (`max-link-speed`)
    /// says.
    pub default_gen: u8,
    /// The link width when the device tree has no `num-lanes` (`None`: what the root port
    /// advertises).
    pub num_lanes: Option<u8>,
}

/// A physical address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub base: u64,
    pub size_bytes: u64,
}

impl Span {
    pub const fn new(base: u64, size_bytes: u64) -> Self {
        Span { base, size_bytes }
    }
    pub fn end(&self) -> u64 {
        self.base + self.size_bytes
    }
}

/// What a register block is: the key the kernel looks blocks up by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// The PL011 the console uses.
    ConsoleUart,
    /// GPIO function select (BCM2835 ARM Peripherals §6.1).
    Gpio,
    /// The VideoCore mailbox.
    Mailbox,
    /// The BCM2835 system timer (1 MHz counter).
    SystemTimer,
    /// BCM2836's ARM-local block (timer prescaler, core mailboxes).
    ArmLocal,
    /// An SD host of the board table (for BCM2712 sdio1: host and cfg block in one window).
    SdHost(SdHostKind),
    /// BCM2712's always-on GPIO (the SD slot's power and 1.8 V lines).
    AlwaysOnGpio,
    /// The Broadcom STB PCIe root complex the kernel brings up.
    PcieRootComplex,
    /// BCM2712's SoC reset controller (the bridge reset line).
    BridgeResetController,
    /// BCM2712's PCIe RESCAL block.
    Rescal,
    /// BCM2712's pcie2 root complex in front of RP1 (only its link status is read).
    Rp1PcieBridge,
    /// One of RP1's two xHCI controllers.
    Rp1Xhci(u8),
    /// RP1's UART0, the Pi 5's header pins GPIO 14/15 (a PL011).
    Rp1Uart0,
    /// A generic PCIe host's ECAM (QEMU virt).
    PciEcam,
    /// A BAR that PCI enumeration assigned (never in a board table).
    PciBar,
}

/// One register block: what it is, where and how big.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioBlock {
    pub kind: BlockKind,
    pub base: u64,
    pub size_bytes: u64,
}

impl MmioBlock {
    pub const fn new(kind: BlockKind, base: u64, size_bytes: u64) -> Self {
        MmioBlock { kind, base, size_bytes }
    }

    pub fn end(&self) -> u64 {
        self.base + self.size_bytes
    }

    /// Whether the two blocks share a byte.
    pub fn overlaps(&self, other: &MmioBlock) -> bool {
        self.base < other.end() && other.base < self.end()
    }
}

/// A board table lookup of a block the board does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {board} has no {kind:?} register block")]
pub struct MissingBlock {
    pub board: &'static str,
    pub kind: BlockKind,
}

/// Everything fixed about one board family.
#[derive(Clone, Copy, Debug)]
pub struct BoardProfile {
    pub family: BoardFamily,
    pub name: &'static str,
    pub soc: &'static str,
    pub core: CoreModel,
    pub core_count: u32,
    /// Register ranges mapped as device memory.
    pub device_spans: &'static [Span],
    /// The register blocks the kernel opens, besides those of `sd_hosts` and `pcie` (see
    /// [`BoardProfile::blocks`] for all of them).
    pub blocks: &'static [MmioBlock],
    pub uart_clock: UartClock,
    /// SD hosts in the order the kernel names cards (the SD slot first).
    pub sd_hosts: &'static [SdHost],
    /// RAM assumed when nobody says otherwise.
    pub default_ram: Span,
    /// DMA buffers must sit below this address (the VideoCore and EMMC2 B0 see only 1 GiB).
    pub dma_limit: u64,
    /// RAM the kernel must not use below its image (firmware stubs, spin tables, TF-A).
    pub low_reserved_bytes: u64,
    /// The PSCI conduit when the device tree names none: TF-A at EL3 on the Pi 5 (docs/hardware.md
    /// §4.3), QEMU virt's HVC; `None` where the firmware has no PSCI (Pi 3/4 spin tables).
    pub default_psci: Option<PsciConduit>,
    /// How the VideoCore sees the ARM's RAM, for mailbox buffers: the uncached alias 0xC000_0000
    /// on Pi 2-4, the L2-coherent alias 0x4000_0000 on Pi 1, whose firmware runs the VideoCore
    /// L2 cache (docs/aarch32-pis.md §6).
    pub videocore_bus: BusTranslation,
    pub timer: BoardTimer,
    /// The PCIe root complex brought up for NVMe (QEMU virt's generic host comes from its tree).
    pub pcie: Option<PcieHost>,
    /// Where the firmware (or QEMU's stub) holds cores 1-3, waiting in WFE for an address: the
    /// armstub spin slots of Pi 3/4 (docs/hardware.md §4.1, docs/qemu.md §1). Empty where cores are held by
    /// PSCI (Pi 5, QEMU virt).
    pub spin_table: &'static [u64],
}

impl BoardProfile {
    /// Every register block of the board: the table's, the SD hosts' and the root complex's.
    pub fn blocks(&self) -> impl Iterator<Item = MmioBlock> + '_ {
        let pcie = self.pcie.iter().flat_map(|host| {
            let reset = host.bridge_reset.map(|reset| [reset.controller, reset.rescal]);
            core::iter::once(host.registers).chain(reset.into_iter().flatten())
        });
        self.blocks.iter().copied().chain(self.sd_hosts.iter().map(|host| host.block)).chain(pcie)
    }

    /// The block of `kind`, or a typed error naming the board when it has none.
    pub fn block(&self, kind: BlockKind) -> Result<MmioBlock, MissingBlock> {
        self.blocks().find(|block| block.kind == kind).ok_or(MissingBlock { board: self.name, kind })
    }
}

const ONE_GIB: u64 = 1 << 30;

/// The VideoCore bus sees the first GiB of RAM at 0xC000_0000 (docs/hardware.md §2.4, §4.6).
pub const VIDEOCORE_UNCACHED_ALIAS: BusTranslation =
    BusTranslation { cpu_base: 0, bus_base: 0xc000_0000, size_bytes: ONE_GIB };
/// The VideoCore's L2-coherent view of the first GiB (Pi 1: docs/aarch32-pis.md §6).
pub const VIDEOCORE_L2_ALIAS: BusTranslation =
    BusTranslation { cpu_base: 0, bus_base: 0x4000_0000, size_bytes: ONE_GIB };
/// BCM2711 EMMC2 on the B0 stepping: bus 0xC000_0000 -> CPU 0, 1 GiB (docs/hardware.md §1.4).
pub const EMMC2_B0_DMA: BusTranslation = VIDEOCORE_UNCACHED_ALIAS;
/// BCM2711 EMMC2 on the C0 stepping: bus = CPU below the peripherals, 0xFC00_0000 bytes
/// (docs/hardware.md §1.4).
pub const EMMC2_C0_DMA: BusTranslation = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0xfc00_0000 };

// Block sizes from the Linux device trees (bcm283x.dtsi, bcm2711.dtsi, bcm2712.dtsi `reg`) and
// the BCM2835 / BCM2711 ARM Peripherals datasheets (docs/hardware.md §9).
/// PL011: bcm283x.dtsi uart0 and bcm2712.dtsi uart10 `reg` size 0x200.
pub const PL011_BYTES: u64 = 0x200;
/// GPIO: bcm283x.dtsi `reg` <0x7e200000 0xb4> (GPFSEL0 to GPPUDCLK1, BCM2835 ARM Peripherals §6.1).
pub const BCM2835_GPIO_BYTES: u64 = 0xb4;
/// GPIO on BCM2711: up to GPIO_PUP_PDN_CNTRL_REG3 at 0xf0 (BCM2711 ARM Peripherals §5.2).
pub const BCM2711_GPIO_BYTES: u64 = 0xf4;
/// Mailbox: bcm283x.dtsi and bcm2712.dtsi `reg` size 0x40.
pub const MAILBOX_BYTES: u64 = 0x40;
/// System timer: bcm283x.dtsi and bcm2712.dtsi `reg` size 0x1000.
pub const SYSTEM_TIMER_BYTES: u64 = 0x1000;
/// BCM2836 ARM-local block: bcm2836.dtsi local_intc `reg` <0x40000000 0x100>.
pub const ARM_LOCAL_BYTES: u64 = 0x100;
/// sdhost: bcm283x.dtsi `reg` <0x7e202000 0x100>.
pub const SDHOST_BYTES: u64 = 0x100;
/// Arasan SDHCI and BCM2711 EMMC2: bcm283x.dtsi and bcm2711.dtsi `reg` size 0x100.
pub const SDHCI_BYTES: u64 = 0x100;
/// Broadcom STB PCIe root complex: bcm2711.dtsi and bcm2712.dtsi `reg` size 0x9310.
pub const BRCMSTB_PCIE_BYTES: u64 = 0x9310;

/// The slot's two controllers on BCM2836/2837 (peripherals at 0x3F00_0000); `sd.host=` picks
/// one (docs/aarch32-pis.md §7).
const BCM2836_SD_HOSTS: &[SdHost] = &[
    SdHost {
        kind: SdHostKind::Bcm2835Sdhost,
        block: MmioBlock::new(BlockKind::SdHost(SdHostKind::Bcm2835Sdhost), 0x3f20_2000, SDHOST_BYTES),
        dma: SdDma::Fixed(VIDEOCORE_UNCACHED_ALIAS),
        presence: Presence::SlotChoice,
    },
    SdHost {
        kind: SdHostKind::ArasanEmmc,
        block: MmioBlock::new(BlockKind::SdHost(SdHostKind::ArasanEmmc), 0x3f30_0000, SDHCI_BYTES),
        dma: SdDma::Fixed(VIDEOCORE_UNCACHED_ALIAS),
        presence: Presence::SlotChoice,
    },
];

pub static RASPBERRY_PI_1: BoardProfile = BoardProfile {
    family: BoardFamily::RaspberryPi1,
    name: "Raspberry Pi 1 / Zero / Zero W / CM1",
    soc: "BCM2835",
    core: CoreModel::Arm1176,
    core_count: 1,
    device_spans: &[Span::new(0x2000_0000, 0x0100_0000)],
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0x2020_1000, PL011_BYTES),
        MmioBlock::new(BlockKind::Gpio, 0x2020_0000, BCM2835_GPIO_BYTES),
        MmioBlock::new(BlockKind::Mailbox, 0x2000_b880, MAILBOX_BYTES),
        MmioBlock::new(BlockKind::SystemTimer, 0x2000_3000, SYSTEM_TIMER_BYTES),
    ],
    uart_clock: UartClock::FromMailbox { fallback_hz: 48_000_000 },
    // The slot's two controllers; `sd.host=` picks one (docs/aarch32-pis.md §7).
    sd_hosts: &[
        SdHost {
            kind: SdHostKind::Bcm2835Sdhost,
            block: MmioBlock::new(BlockKind::SdHost(SdHostKind::Bcm2835Sdhost), 0x2020_2000, SDHOST_BYTES),
            dma: SdDma::Fixed(VIDEOCORE_L2_ALIAS),
            presence: Presence::SlotChoice,
        },
        SdHost {
            kind: SdHostKind::ArasanEmmc,
            block: MmioBlock::new(BlockKind::SdHost(SdHostKind::ArasanEmmc), 0x2030_0000, SDHCI_BYTES),
            dma: SdDma::Fixed(VIDEOCORE_L2_ALIAS),
            presence: Presence::SlotChoice,
        },
    ],
    // The smallest split of the smallest board (256 MiB, 64 MiB for the VideoCore); the
    // firmware's answer replaces it.
    default_ram: Span::new(0, 0x0c00_0000),
    dma_limit: ONE_GIB,
    low_reserved_bytes: 0x1000,
    default_psci: None,
    videocore_bus: VIDEOCORE_L2_ALIAS,
    timer: BoardTimer::SystemTimer,
    pcie: None,
    spin_table: &[],
};

pub static RASPBERRY_PI_2: BoardProfile = BoardProfile {
    family: BoardFamily::RaspberryPi2,
    name: "Raspberry Pi 2 B",
    soc: "BCM2836",
    core: CoreModel::CortexA7,
    core_count: 4,
    device_spans: &[Span::new(0x3f00_0000, 0x0100_0000), Span::new(0x4000_0000, 0x0020_0000)],
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0x3f20_1000, PL011_BYTES),
        MmioBlock::new(BlockKind::Gpio, 0x3f20_0000, BCM2835_GPIO_BYTES),
        MmioBlock::new(BlockKind::Mailbox, 0x3f00_b880, MAILBOX_BYTES),
        MmioBlock::new(BlockKind::SystemTimer, 0x3f00_3000, SYSTEM_TIMER_BYTES),
        MmioBlock::new(BlockKind::ArmLocal, 0x4000_0000, ARM_LOCAL_BYTES),
    ],
    uart_clock: UartClock::FromMailbox { fallback_hz: 48_000_000 },
    sd_hosts: BCM2836_SD_HOSTS,
    default_ram: Span::new(0, 0x3c00_0000),
    dma_limit: ONE_GIB,
    low_reserved_bytes: 0x1000,
    default_psci: None,
    videocore_bus: VIDEOCORE_UNCACHED_ALIAS,
    timer: BoardTimer::GenericWithLocalPrescaler,
    pcie: None,
    // Cores 1-3 wait in armstub7 (or QEMU's stub) for an address in their ARM-local mailbox 3,
    // written through its set register at 0x4000_008C + 0x10 × core (docs/aarch32-pis.md §2).
    spin_table: &[0x4000_009c, 0x4000_00ac, 0x4000_00bc],
};

pub static RASPBERRY_PI_3: BoardProfile = BoardProfile {
    family: BoardFamily::RaspberryPi3,
    name: "Raspberry Pi 3 / Zero 2 W",
    soc: "BCM2837",
    core: CoreModel::CortexA53,
    core_count: 4,
    device_spans: &[Span::new(0x3f00_0000, 0x0100_0000), Span::new(0x4000_0000, 0x0020_0000)],
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0x3f20_1000, PL011_BYTES),
        MmioBlock::new(BlockKind::Gpio, 0x3f20_0000, BCM2835_GPIO_BYTES),
        MmioBlock::new(BlockKind::Mailbox, 0x3f00_b880, MAILBOX_BYTES),
        MmioBlock::new(BlockKind::SystemTimer, 0x3f00_3000, SYSTEM_TIMER_BYTES),
    ],
    uart_clock: UartClock::FromMailbox { fallback_hz: 48_000_000 },
    sd_hosts: BCM2836_SD_HOSTS,
    default_ram: Span::new(0, 0x3c00_0000),
    dma_limit: ONE_GIB,
    low_reserved_bytes: 0x1000,
    default_psci: None,
    videocore_bus: VIDEOCORE_UNCACHED_ALIAS,
    timer: BoardTimer::Generic,
    pcie: None,
    spin_table: &[0xe0, 0xe8, 0xf0],
};

pub static RASPBERRY_PI_4: BoardProfile = BoardProfile {
    family: BoardFamily::RaspberryPi4,
    name: "Raspberry Pi 4 / 400 / CM4",
    soc: "BCM2711",
    core: CoreModel::CortexA72,
    core_count: 4,
    // 0xFC00_0000-0xFFFF_FFFF holds PCIe, the peripherals, ARM-local and the GIC; the CM4's PCIe
    // outbound window is at 0x6_0000_0000 (docs/hardware.md §1.2, §1.4).
    device_spans: &[Span::new(0xfc00_0000, 0x0400_0000), Span::new(0x6_0000_0000, ONE_GIB)],
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0xfe20_1000, PL011_BYTES),
        MmioBlock::new(BlockKind::Gpio, 0xfe20_0000, BCM2711_GPIO_BYTES),
        MmioBlock::new(BlockKind::Mailbox, 0xfe00_b880, MAILBOX_BYTES),
        MmioBlock::new(BlockKind::SystemTimer, 0xfe00_3000, SYSTEM_TIMER_BYTES),
    ],
    uart_clock: UartClock::FromMailbox { fallback_hz: 48_000_000 },
    sd_hosts: &[
        SdHost {
            kind: SdHostKind::Bcm2711Emmc2,
            block: MmioBlock::new(BlockKind::SdHost(SdHostKind::Bcm2711Emmc2), 0xfe34_0000, SDHCI_BYTES),
            dma: SdDma::Bcm2711Emmc2,
            presence: Presence::Always,
        },
        SdHost {
            kind: SdHostKind::ArasanEmmc,
            block: MmioBlock::new(BlockKind::SdHost(SdHostKind::ArasanEmmc), 0xfe30_0000, SDHCI_BYTES),
            dma: SdDma::Fixed(VIDEOCORE_UNCACHED_ALIAS),
            presence: Presence::QemuOnly,
        },
    ],
    default_ram: Span::new(0, 0x3c00_0000),
    dma_limit: ONE_GIB,
    low_reserved_bytes: 0x1000,
    default_psci: None,
    videocore_bus: VIDEOCORE_UNCACHED_ALIAS,
    timer: BoardTimer::Generic,
    pcie: Some(PcieHost {
        name: "pcie0",
        compatible: "brcm,bcm2711-pcie",
        soc: Soc::Bcm2711,
        registers: MmioBlock::new(BlockKind::PcieRootComplex, 0xfd50_0000, BRCMSTB_PCIE_BYTES),
        bridge_reset: None,
        // Upstream bcm2711.dtsi: 64 MiB at PCI 0xF800_0000; memory at PCI 0 for the first 3 GiB
        // (the B0 stepping's limit; C0 firmware rewrites dma-ranges: docs/hardware.md §1.4).
        windows: HostWindows {
            memory32: Some(Window {
                cpu_base: 0x6_0000_0000,
                pci_base: 0xf800_0000,
                size_bytes: 64 << 20,
                prefetchable: false,
            }),
            memory64: None,
        },
        dma: BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 3 * ONE_GIB },
        default_gen: 2,
        num_lanes: None,
    }),
    spin_table: &[0xe0, 0xe8, 0xf0],
};

pub static RASPBERRY_PI_5: BoardProfile = BoardProfile {
    family: BoardFamily::RaspberryPi5,
    name: "Raspberry Pi 5",
    soc: "BCM2712",
    core: CoreModel::CortexA76,
    core_count: 4,
    // SoC and AXI peripherals 0x10_0000_0000-0x10_7FFF_FFFF; PCIe outbound windows and RP1
    // 0x18_0000_0000-0x1F_FFFF_FFFF (docs/hardware.md §1.3, §1.4).
    device_spans: &[Span::new(0x10_0000_0000, 2 * ONE_GIB), Span::new(0x18_0000_0000, 32 * ONE_GIB)],
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0x10_7d00_1000, PL011_BYTES),
        MmioBlock::new(BlockKind::Mailbox, 0x10_7c01_3880, MAILBOX_BYTES),
        MmioBlock::new(BlockKind::SystemTimer, 0x10_7c00_3000, SYSTEM_TIMER_BYTES),
        // bcm2712.dtsi gio_aon: reg <0x7d517c00 0x40>.
        MmioBlock::new(BlockKind::AlwaysOnGpio, 0x10_7d51_7c00, 0x40),
        // pcie2, in front of RP1 (bcm2712.dtsi pcie@1000120000); never brought up here.
        MmioBlock::new(BlockKind::Rp1PcieBridge, 0x10_0012_0000, BRCMSTB_PCIE_BYTES),
        // RP1's xHCIs (DWC3, xHCI at offset 0 of 1 MiB each) through pcie2's BAR1 window, as
        // the firmware leaves them with `pciex4_reset=0` (docs/usb-storage.md §7: Linux
        // `rp1.dtsi` usb@200000 and usb@300000, circle `ARM_XHCI0/1_BASE`).
        MmioBlock::new(BlockKind::Rp1Xhci(0), 0x1f_0020_0000, 1 << 20),
        MmioBlock::new(BlockKind::Rp1Xhci(1), 0x1f_0030_0000, 1 << 20),
        // RP1's UART0 through the same window (Linux `rp1.dtsi` serial@30000, `reg` size 0x100;
        // circle `bcm2712.h`; docs/hardware.md §4.3).
        MmioBlock::new(BlockKind::Rp1Uart0, 0x1f_0003_0000, 0x100),
    ],
    uart_clock: UartClock::KeepFirmware { fallback_hz: 44_236_800 },
    // AXI dma-ranges are the identity for the first 64 GiB (docs/hardware.md §2.4).
    sd_hosts: &[SdHost {
        kind: SdHostKind::Bcm2712Sdhci,
        // bcm2712.dtsi sdio1: host <0x00fff000 0x260>, cfg <0x00fff400 0x200>: one window
        // that reaches the cfg block at +0x400.
        block: MmioBlock::new(BlockKind::SdHost(SdHostKind::Bcm2712Sdhci), 0x10_00ff_f000, 0x600),
        dma: SdDma::Fixed(BusTranslation::IDENTITY),
        presence: Presence::Always,
    }],
    default_ram: Span::new(0, 0x3f80_0000),
    dma_limit: u64::MAX,
    // TF-A BL31 sits at 0x1000-0x80000 (docs/hardware.md §4.3).
    low_reserved_bytes: 0x8_0000,
    default_psci: Some(PsciConduit::Smc),
    videocore_bus: VIDEOCORE_UNCACHED_ALIAS,
    timer: BoardTimer::Generic,
    pcie: Some(PcieHost {
        name: "pcie1",
        compatible: "brcm,bcm2712-pcie",
        soc: Soc::Bcm2712,
        registers: MmioBlock::new(BlockKind::PcieRootComplex, 0x10_0011_0000, BRCMSTB_PCIE_BYTES),
        // Never pcie2 (0x10_0012_0000, line 44): it carries RP1 (docs/pcie-brcmstb.md §7).
        // bcm2712.dtsi bcm_reset <0x01504318 0x30>, pcie_rescal <0x00119500 0x10>.
        bridge_reset: Some(BridgeReset {
            controller: MmioBlock::new(BlockKind::BridgeResetController, 0x10_0150_4318, 0x30),
            line: 43,
            rescal: MmioBlock::new(BlockKind::Rescal, 0x10_0011_9500, 0x10),
        }),
        // bcm2712.dtsi: ~4 GiB at PCI 0, 12 GiB prefetchable at PCI 0x4_0000_0000; memory at
        // PCI 0x10_0000_0000 (docs/hardware.md §1.4).
        windows: HostWindows {
            memory32: Some(Window {
                cpu_base: 0x1b_0000_0000,
                pci_base: 0,
                size_bytes: 0xffff_fffc,
                prefetchable: false,
            }),
            memory64: Some(Window {
                cpu_base: 0x18_0000_0000,
                pci_base: 0x4_0000_0000,
                size_bytes: 12 * ONE_GIB,
                prefetchable: true,
            }),
        },
        dma: BusTranslation { cpu_base: 0, bus_base: 0x10_0000_0000, size_bytes: 64 * ONE_GIB },
        default_gen: 2,
        // bcm2712.dtsi pcie1: num-lanes = <1> (the root port itself advertises x4).
        num_lanes: Some(1),
    }),
    spin_table: &[],
};

/// How RP1 sees RAM through pcie2: PCI 0x10_0000_0000 is CPU 0, 64 GiB (pcie2 `dma-ranges`,
/// docs/pcie-brcmstb.md §1, docs/usb-storage.md §2).
pub const RP1_DMA: BusTranslation =
    BusTranslation { cpu_base: 0, bus_base: 0x10_0000_0000, size_bytes: 64 * ONE_GIB };

pub static QEMU_VIRT: BoardProfile = BoardProfile {
    family: BoardFamily::QemuVirt,
    name: "QEMU virt",
    soc: "none (emulated machine)",
    core: CoreModel::CortexA53,
    core_count: 1,
    // Everything below RAM (UART, GIC, PCIe MMIO, low ECAM), the high ECAM and the 64-bit PCIe
    // window (docs/qemu.md §3); replaced by the device tree's nodes when there is one.
    device_spans: &[
        Span::new(0, ONE_GIB),
        Span::new(0x40_1000_0000, 0x1000_0000),
        Span::new(0x80_0000_0000, 0x80_0000_0000),
    ],
    // QEMU hw/arm/virt.c base_memmap: VIRT_UART 0x0900_0000 + 0x1000, VIRT_HIGH_PCIE_ECAM
    // 0x40_1000_0000 + 256 MiB (the device tree's ECAM replaces it when there is one).
    blocks: &[
        MmioBlock::new(BlockKind::ConsoleUart, 0x0900_0000, 0x1000),
        MmioBlock::new(BlockKind::PciEcam, 0x40_1000_0000, 0x1000_0000),
    ],
    uart_clock: UartClock::Fixed { hz: 24_000_000 },
    sd_hosts: &[],
    default_ram: Span::new(0x4000_0000, 0x2000_0000),
    dma_limit: u64::MAX,
    low_reserved_bytes: 0,
    default_psci: Some(PsciConduit::Hvc),
    videocore_bus: VIDEOCORE_UNCACHED_ALIAS,
    timer: BoardTimer::Generic,
    pcie: None,
    spin_table: &[],
};

/// The board family a root `compatible` names (Linux's and QEMU's device trees).
pub fn family_from_compatible(compatible: &str) -> Option<BoardFamily> {
    match compatible {
        "brcm,bcm2835"
        | "raspberrypi,model-a"
        | "raspberrypi,model-a-plus"
        | "raspberrypi,model-b"
        | "raspberrypi,model-b-plus"
        | "raspberrypi,model-b-rev2"
        | "raspberrypi,model-zero"
        | "raspberrypi,model-zero-w"
        | "raspberrypi,compute-module" => Some(BoardFamily::RaspberryPi1),
        "brcm,bcm2836" | "raspberrypi,2-model-b" => Some(BoardFamily::RaspberryPi2),
        "brcm,bcm2837"
        | "brcm,bcm2710"
        | "raspberrypi,3-model-b"
        | "raspberrypi,3-model-b-plus"
        | "raspberrypi,3-model-a-plus"
        | "raspberrypi,model-zero-2-w"
        | "raspberrypi,3-compute-module" => Some(BoardFamily::RaspberryPi3),
        "brcm,bcm2711" | "raspberrypi,4-model-b" | "raspberrypi,400" | "raspberrypi,4-compute-module" => {
            Some(BoardFamily::RaspberryPi4)
        }
        "brcm,bcm2712" | "raspberrypi,5-model-b" | "raspberrypi,500" | "raspberrypi,5-compute-module" => {
            Some(BoardFamily::RaspberryPi5)
        }
        "linux,dummy-virt" => Some(BoardFamily::QemuVirt),
        _ => None,
    }
}

/// The Pi family a core implies, for a kernel started without a device tree.
pub fn family_from_core(core: CoreModel) -> Option<BoardFamily> {
    match core {
        CoreModel::Arm1176 => Some(BoardFamily::RaspberryPi1),
        CoreModel::CortexA7 => Some(BoardFamily::RaspberryPi2),
        CoreModel::CortexA53 => Some(BoardFamily::RaspberryPi3),
        CoreModel::CortexA72 => Some(BoardFamily::RaspberryPi4),
        CoreModel::CortexA76 => Some(BoardFamily::RaspberryPi5),
        CoreModel::CortexA57 => None,
    }
}

/// The PSCI conduit `exit=psci` uses, and a note when the device tree's choice was overruled:
/// the tree's `method` when it names one; but a kernel that entered at EL2 has no hypervisor
/// above it, so an HVC would trap into its own EL2 and hang, and SMC is used instead; with no
/// `method`, the board's default. `Err` when the board has no PSCI at all.
pub fn choose_psci_conduit(
    profile: &BoardProfile,
    tree_method: Option<&str>,
    entry_level: u64,
) -> Result<(PsciConduit, Option<&'static str>), &'static str> {
    let owns_el2 = entry_level >= 2;
    match tree_method {
        Some("smc") => Ok((PsciConduit::Smc, None)),
        Some("hvc") if owns_el2 => Ok((
            PsciConduit::Smc,
            Some("the device tree names HVC, but the kernel entered at EL2 where nothing answers it: using SMC"),
        )),
        Some("hvc") => Ok((PsciConduit::Hvc, None)),
        _ => match profile.default_psci {
            Some(PsciConduit::Hvc) if owns_el2 => Ok((PsciConduit::Smc, None)),
            Some(conduit) => Ok((conduit, None)),
            None => Err("this board's firmware has no PSCI (cores wait in spin tables)"),
        },
    }
}

pub fn profile(family: BoardFamily) -> &'static BoardProfile {
    match family {
        BoardFamily::RaspberryPi1 => &RASPBERRY_PI_1,
        BoardFamily::RaspberryPi2 => &RASPBERRY_PI_2,
        BoardFamily::RaspberryPi3 => &RASPBERRY_PI_3,
        BoardFamily::RaspberryPi4 => &RASPBERRY_PI_4,
        BoardFamily::RaspberryPi5 => &RASPBERRY_PI_5,
        BoardFamily::QemuVirt => &QEMU_VIRT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILES: [&BoardProfile; 6] =
        [&RASPBERRY_PI_1, &RASPBERRY_PI_2, &RASPBERRY_PI_3, &RASPBERRY_PI_4, &RASPBERRY_PI_5, &QEMU_VIRT];

    #[test]
    fn every_block_lies_in_a_device_span() {
        for profile in PROFILES {
            for block in profile.blocks() {
                assert!(
                    profile.device_spans.iter().any(|s| block.base >= s.base && block.end() <= s.end()),
                    "{}: {block:x?} not in a device span",
                    profile.name
                );
            }
            for span in profile.device_spans {
                assert_eq!(span.base % (2 << 20), 0, "{}: {span:?} not 2 MiB aligned", profile.name);
                assert!(
                    span.end() <= profile.default_ram.base || span.base >= profile.default_ram.end(),
                    "{}: device span overlaps default RAM",
                    profile.name
                );
            }
        }
    }

    #[test]
    fn no_two_blocks_of_a_board_overlap_or_share_a_kind() {
        for profile in PROFILES {
            let blocks: Vec<MmioBlock> = profile.blocks().collect();
            for (index, a) in blocks.iter().enumerate() {
                assert!(a.size_bytes > 0, "{}: {a:x?} is empty", profile.name);
                for b in &blocks[index + 1..] {
                    assert!(
                        a.end() <= b.base || b.end() <= a.base,
                        "{}: {a:x?} overlaps {b:x?}",
                        profile.name
                    );
                    assert_ne!(a.kind, b.kind, "{}: two blocks of one kind", profile.name);
                }
            }
            assert_eq!(profile.block(BlockKind::ConsoleUart).map(|b| b.kind), Ok(BlockKind::ConsoleUart));
        }
    }

    #[test]
    fn blocks_end_where_their_size_says_and_overlap_when_they_share_a_byte() {
        let uart = MmioBlock::new(BlockKind::ConsoleUart, 0x1000, 0x200);
        assert_eq!(uart.end(), 0x1200);
        let next = MmioBlock::new(BlockKind::Gpio, 0x1200, 0x100);
        let inside = MmioBlock::new(BlockKind::Gpio, 0x11ff, 0x10);
        let before = MmioBlock::new(BlockKind::Gpio, 0x0f00, 0x101);
        assert!(!uart.overlaps(&next) && !next.overlaps(&uart), "adjacent blocks share no byte");
        assert!(uart.overlaps(&inside) && inside.overlaps(&uart));
        assert!(uart.overlaps(&before) && before.overlaps(&uart));
        assert!(!uart.overlaps(&MmioBlock::new(BlockKind::Gpio, 0x0f00, 0x100)));
    }

    #[test]
    fn block_sizes_are_the_public_sources() {
        let size = |profile: &BoardProfile, kind| profile.block(kind).unwrap().size_bytes;
        for profile in [&RASPBERRY_PI_1, &RASPBERRY_PI_2, &RASPBERRY_PI_3, &RASPBERRY_PI_4, &RASPBERRY_PI_5] {
            // bcm283x.dtsi / bcm2712.dtsi: uart 0x200, mailbox 0x40, system timer 0x1000.
            assert_eq!(size(profile, BlockKind::ConsoleUart), 0x200, "{}", profile.name);
            assert_eq!(size(profile, BlockKind::Mailbox), 0x40, "{}", profile.name);
            assert_eq!(size(profile, BlockKind::SystemTimer), 0x1000, "{}", profile.name);
        }
        for profile in [&RASPBERRY_PI_1, &RASPBERRY_PI_2, &RASPBERRY_PI_3] {
            // bcm283x.dtsi: gpio 0xb4, sdhost 0x100, sdhci 0x100.
            assert_eq!(size(profile, BlockKind::Gpio), 0xb4);
            assert_eq!(size(profile, BlockKind::SdHost(SdHostKind::Bcm2835Sdhost)), 0x100);
            assert_eq!(size(profile, BlockKind::SdHost(SdHostKind::ArasanEmmc)), 0x100);
        }
        // BCM2711 ARM Peripherals §5.2: GPIO_PUP_PDN_CNTRL_REG3 at 0xf0; bcm2711.dtsi emmc2
        // 0x100, pcie0 0x9310; bcm2836.dtsi local_intc 0x100.
        assert_eq!(size(&RASPBERRY_PI_4, BlockKind::Gpio), 0xf4);
        assert_eq!(size(&RASPBERRY_PI_4, BlockKind::SdHost(SdHostKind::Bcm2711Emmc2)), 0x100);
        assert_eq!(size(&RASPBERRY_PI_4, BlockKind::PcieRootComplex), 0x9310);
        assert_eq!(size(&RASPBERRY_PI_2, BlockKind::ArmLocal), 0x100);
        // bcm2712.dtsi: sdio1 host 0x260 + cfg 0x200 at +0x400, pcie 0x9310, bcm_reset 0x30,
        // pcie_rescal 0x10, gio_aon 0x40; rp1.dtsi usb 1 MiB.
        let pi5 = &RASPBERRY_PI_5;
        assert_eq!(size(pi5, BlockKind::SdHost(SdHostKind::Bcm2712Sdhci)), 0x400 + 0x200);
        assert_eq!(size(pi5, BlockKind::PcieRootComplex), 0x9310);
        assert_eq!(size(pi5, BlockKind::Rp1PcieBridge), 0x9310);
        assert_eq!(size(pi5, BlockKind::BridgeResetController), 0x30);
        assert_eq!(size(pi5, BlockKind::Rescal), 0x10);
        assert_eq!(size(pi5, BlockKind::AlwaysOnGpio), 0x40);
        assert_eq!(size(pi5, BlockKind::Rp1Xhci(0)), 1 << 20);
        assert_eq!(size(pi5, BlockKind::Rp1Xhci(1)), 1 << 20);
        // rp1.dtsi uart0: reg <0xc0 0x40030000 0x0 0x100>; the PL011 driver's registers fit.
        assert_eq!(size(pi5, BlockKind::Rp1Uart0), 0x100);
        assert!(drivers::pl011::offsets::INTERRUPT_CLEAR + 4 <= size(pi5, BlockKind::Rp1Uart0) as usize);
        // The drivers' register maps fit in the blocks the table opens for them.
        use drivers::pci::brcmstb::regs::{offsets, rescal, reset_controller};
        for profile in [&RASPBERRY_PI_4, &RASPBERRY_PI_5] {
            assert!(size(profile, BlockKind::PcieRootComplex) as usize >= offsets::BLOCK_BYTES);
        }
        assert!(size(pi5, BlockKind::BridgeResetController) as usize >= reset_controller::BLOCK_BYTES);
        assert!(size(pi5, BlockKind::Rescal) as usize >= rescal::BLOCK_BYTES);
        assert!(
            size(&RASPBERRY_PI_3, BlockKind::SdHost(SdHostKind::Bcm2835Sdhost)) as usize
                >= drivers::sdhost::regs::BLOCK_BYTES
        );
        let bcm2712_window = 0x400 + drivers::sdhci::quirks::bcm2712_config::BLOCK_BYTES as u64;
        assert_eq!(size(pi5, BlockKind::SdHost(SdHostKind::Bcm2712Sdhci)), bcm2712_window);
        // QEMU hw/arm/virt.c base_memmap: VIRT_UART 0x1000, VIRT_HIGH_PCIE_ECAM 256 MiB.
        assert_eq!(size(&QEMU_VIRT, BlockKind::ConsoleUart), 0x1000);
        assert_eq!(size(&QEMU_VIRT, BlockKind::PciEcam), 0x1000_0000);
    }

    #[test]
    fn a_block_the_board_lacks_is_a_typed_error() {
        let missing = RASPBERRY_PI_5.block(BlockKind::Gpio).unwrap_err();
        assert_eq!(missing, MissingBlock { board: RASPBERRY_PI_5.name, kind: BlockKind::Gpio });
        assert_eq!(missing.to_string(), "the Raspberry Pi 5 has no Gpio register block");
        assert!(QEMU_VIRT.block(BlockKind::Mailbox).is_err());
        assert!(RASPBERRY_PI_3.block(BlockKind::PcieRootComplex).is_err());
        assert!(RASPBERRY_PI_4.block(BlockKind::Rp1Xhci(0)).is_err());
        assert!(RASPBERRY_PI_1.block(BlockKind::PciBar).is_err(), "BARs are never in a table");
    }

    #[test]
    fn the_32_bit_pis_are_known_by_core_and_tree() {
        assert_eq!(family_from_core(CoreModel::Arm1176), Some(BoardFamily::RaspberryPi1));
        assert_eq!(family_from_core(CoreModel::CortexA7), Some(BoardFamily::RaspberryPi2));
        assert_eq!(family_from_compatible("raspberrypi,model-zero-w"), Some(BoardFamily::RaspberryPi1));
        assert_eq!(family_from_compatible("brcm,bcm2836"), Some(BoardFamily::RaspberryPi2));
        // Pi 1: the system timer, the VideoCore's L2-coherent alias; Pi 2: the generic timer
        // behind the ARM-local prescaler, the uncached alias (docs/aarch32-pis.md §5, §6).
        assert_eq!(RASPBERRY_PI_1.timer, BoardTimer::SystemTimer);
        assert_eq!(RASPBERRY_PI_1.videocore_bus.bus_base, 0x4000_0000);
        assert_eq!(RASPBERRY_PI_2.timer, BoardTimer::GenericWithLocalPrescaler);
        assert_eq!(RASPBERRY_PI_2.block(BlockKind::ArmLocal).unwrap().base, 0x4000_0000);
        assert_eq!(RASPBERRY_PI_2.videocore_bus.bus_base, 0xc000_0000);
        // Both slots' controllers, the sdhost first, each a slot choice.
        for profile in [&RASPBERRY_PI_1, &RASPBERRY_PI_2, &RASPBERRY_PI_3] {
            let kinds: Vec<SdHostKind> = profile.sd_hosts.iter().map(|host| host.kind).collect();
            assert_eq!(kinds, [SdHostKind::Bcm2835Sdhost, SdHostKind::ArasanEmmc], "{}", profile.name);
            assert!(profile.sd_hosts.iter().all(|host| host.presence == Presence::SlotChoice));
            assert_eq!(profile.sd_hosts[1].block.base - profile.sd_hosts[0].block.base, 0xf_e000);
            assert!(profile.sd_hosts.iter().all(|host| host.block.kind == BlockKind::SdHost(host.kind)));
        }
        // Pi 2 cores 1-3 are released through ARM-local mailbox 3 of each core.
        assert_eq!(RASPBERRY_PI_2.spin_table, &[0x4000_009c, 0x4000_00ac, 0x4000_00bc]);
    }

    #[test]
    fn pcie_registers_and_windows_lie_in_device_spans() {
        for profile in [&RASPBERRY_PI_4, &RASPBERRY_PI_5] {
            let host = profile.pcie.expect("a root complex");
            let mut ranges = std::vec![(host.registers.base, host.registers.size_bytes)];
            if let Some(reset) = host.bridge_reset {
                assert_eq!(reset.line, 43, "pcie1's line; 44 is pcie2 (RP1)");
            }
            for window in [host.windows.memory32, host.windows.memory64].into_iter().flatten() {
                ranges.push((window.cpu_base, window.size_bytes));
            }
            for (base, bytes) in ranges {
                assert!(
                    profile.device_spans.iter().any(|s| base >= s.base && base + bytes <= s.end()),
                    "{}: {base:#x}+{bytes:#x} not in a device span (BARs must be device memory)",
                    profile.name
                );
            }
        }
        assert!(RASPBERRY_PI_3.pcie.is_none() && QEMU_VIRT.pcie.is_none());
    }

    #[test]
    fn compatibles_and_cores_pick_families() {
        assert_eq!(family_from_compatible("brcm,bcm2711"), Some(BoardFamily::RaspberryPi4));
        assert_eq!(family_from_compatible("raspberrypi,5-model-b"), Some(BoardFamily::RaspberryPi5));
        assert_eq!(family_from_compatible("linux,dummy-virt"), Some(BoardFamily::QemuVirt));
        assert_eq!(family_from_compatible("acme,board"), None);
        assert_eq!(family_from_core(CoreModel::CortexA53), Some(BoardFamily::RaspberryPi3));
        assert_eq!(family_from_core(CoreModel::CortexA57), None);
        // RP1's xHCIs and pcie2 sit in the Pi 5's device spans (mapped as device memory).
        let bridge = RASPBERRY_PI_5.block(BlockKind::Rp1PcieBridge).unwrap();
        // pcie2's link status (MISC_PCIE_STATUS) lies in its block, where `link_access` reads it.
        assert!(drivers::pci::brcmstb::regs::offsets::MISC_PCIE_STATUS + 4 <= bridge.size_bytes as usize);
        assert_eq!(RP1_DMA.to_bus(0x8_0000, 4096), Ok(0x10_0008_0000));
        // The Pi 4 SD slot (EMMC2) is named first.
        assert_eq!(RASPBERRY_PI_4.sd_hosts[0].kind, SdHostKind::Bcm2711Emmc2);
    }

    #[test]
    fn the_pi4_legacy_arasan_is_probed_only_under_qemu() {
        let arasan = RASPBERRY_PI_4.sd_hosts[1];
        assert_eq!(arasan.kind, SdHostKind::ArasanEmmc);
        assert!(arasan.may_probe(true));
        assert!(!arasan.may_probe(false), "GPIO 48-53 are the Pi 4's Ethernet lines");
        assert!(RASPBERRY_PI_4.sd_hosts[0].may_probe(false));
        // The Pi 3's slot goes to the sdhost or the Arasan, both probeable.
        assert!(RASPBERRY_PI_3.sd_hosts.iter().all(|host| host.may_probe(false)));
        assert_eq!(RASPBERRY_PI_4.sd_hosts[0].dma, SdDma::Bcm2711Emmc2);
    }

    #[test]
    fn psci_goes_where_the_firmware_answers() {
        let pi5 = &RASPBERRY_PI_5;
        // The Pi 5 firmware's TF-A: SMC, named by the tree or not; the Pi 5 starts at EL2.
        assert_eq!(choose_psci_conduit(pi5, None, 2), Ok((PsciConduit::Smc, None)));
        assert_eq!(choose_psci_conduit(pi5, Some("smc"), 2), Ok((PsciConduit::Smc, None)));
        let (conduit, note) = choose_psci_conduit(pi5, Some("hvc"), 2).unwrap();
        assert_eq!(conduit, PsciConduit::Smc);
        assert!(note.unwrap().contains("entered at EL2"));
        // A tree naming HVC for a kernel at EL1 is believed (a hypervisor is above it).
        assert_eq!(choose_psci_conduit(pi5, Some("hvc"), 1), Ok((PsciConduit::Hvc, None)));
        assert_eq!(choose_psci_conduit(&RASPBERRY_PI_4, Some("hvc"), 1), Ok((PsciConduit::Hvc, None)));
        // QEMU virt: HVC at EL1, SMC with virtualization=on (the kernel owns EL2).
        assert_eq!(choose_psci_conduit(&QEMU_VIRT, Some("hvc"), 1), Ok((PsciConduit::Hvc, None)));
        assert_eq!(choose_psci_conduit(&QEMU_VIRT, None, 1), Ok((PsciConduit::Hvc, None)));
        assert_eq!(choose_psci_conduit(&QEMU_VIRT, None, 2), Ok((PsciConduit::Smc, None)));
        assert_eq!(choose_psci_conduit(&QEMU_VIRT, Some("smc"), 2), Ok((PsciConduit::Smc, None)));
        // Pi 3/4: spin tables, no PSCI unless a tree says otherwise.
        assert!(choose_psci_conduit(&RASPBERRY_PI_4, None, 2).is_err());
        assert!(choose_psci_conduit(&RASPBERRY_PI_3, Some("bogus"), 2).is_err());
        assert_eq!(choose_psci_conduit(&RASPBERRY_PI_4, Some("smc"), 2), Ok((PsciConduit::Smc, None)));
    }
}
