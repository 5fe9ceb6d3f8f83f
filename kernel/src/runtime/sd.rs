//! SD cards on the running machine: every SD host of the board table (docs/hardware.md §2:
//! pins, firmware power, base clock from the VideoCore mailbox, DMA window, 1.8 V hooks) that
//! may be probed here, and every PCI function of class 08:05:01 (`sdhci-pci` on QEMU virt),
//! brought up with `drivers::sd` on `drivers::sdhci`, described on the console, timed once, and registered as
//! `sd0`, `sd1`, … in discovery order. On the Pi 1-3 the slot goes to the BCM2835 sdhost
//! (`drivers::sdhost`, GPIO 48-53 on ALT0) or to the Arasan (ALT3) as `sd.host=` says
//! (docs/aarch32-pis.md §7).
#![forbid(unsafe_code)]

use super::firmware::Firmware;
use super::pci_topology::PciTopology;
use super::platform::KernelPlatform;
use super::storage::{print_registers, DeviceClass, Storage};
use super::{windows, Machine};
use crate::board::{BlockKind, MmioBlock, Presence, SdHost, SdHostKind};
use crate::bring_up::{DeviceDeadline, SD_HOST_BUDGET_MS};
use crate::kernel_settings::KernelSettings;
use crate::println;
use crate::sd_dma::{self, DmaDecision};
use alloc::boxed::Box;
use blockdev::{BlockDevice, Clock, Completion, DataPath, Geometry, Request, SubmitError};
use drivers::mailbox::{tags, PropertyTags};
use drivers::sd::{
    bring_up, bring_up_at_3v3, BoardSignalling, CardInfo, ModeRequest, SdBlockDevice, SdError, SdOptions,
};
use drivers::sdhci::host::HostCapabilities;
use drivers::sdhci::quirks::{self, bcm2712_config, HostQuirks};
use drivers::sdhci::{SdCard, SdhciHost};
use drivers::sdhost::clock::SdhostClock;
use drivers::sdhost::{SdhostCard, SdhostHost};
use hal::mmio::Mmio;
use hal::platform::Platform;

/// Bytes of one SDHCI register block (SDHCI §2.1.2: up to the version register at 0xFC).
const REGISTER_BLOCK_BYTES: usize = 0x100;
/// PCI class of a standard SD host controller: base 08 (system peripheral), sub 05 (SD host),
/// interface 01 (standard SDHCI with DMA).
const SDHCI_PCI_CLASS: (u8, u8, u8) = (0x08, 0x05, 0x01);
/// Time allowed for the bring-up measurement reads.
const MEASUREMENT_TIMEOUT_US: u64 = 30_000_000;
const MIB: usize = 1 << 20;

/// The host's register window: the SDHCI block, or up to the end of the BCM2712 cfg block.
fn register_window_bytes(quirks: &HostQuirks) -> usize {
    quirks.config_block_offset.map_or(REGISTER_BLOCK_BYTES, |offset| offset + bcm2712_config::BLOCK_BYTES)
}

type KernelSdCard = SdCard<'static, Mmio, KernelPlatform>;

/// The `sd.*` options without repeating the warnings the board hosts' pass printed.
fn parse_options_quietly(settings: &KernelSettings) -> SdOptions {
    let mut options = SdOptions::default();
    for (key, value) in settings.driver_options_for("sd.") {
        let _ = options.apply(key, value);
    }
    options
}

fn parse_options(settings: &KernelSettings) -> SdOptions {
    let mut options = SdOptions::default();
    for (key, value) in settings.driver_options_for("sd.") {
        if options.apply(key, value).is_err() {
            println!(
                "warning: bad setting sd.{key}={value}: expected {}; ignored",
                drivers::sd::options::ACCEPTED
            );
        }
    }
    options
}

/// The driver options and the kernel settings that concern SD hosts (`regs=`).
struct SdSettings<'s> {
    options: SdOptions,
    settings: &'s KernelSettings,
}

/// One SD host to look at.
struct HostSite {
    block: MmioBlock,
    quirks: &'static HostQuirks,
    dma: DmaDecision,
    origin: &'static str,
}

/// The SDHCI quirks of a board-table host; `None` for the sdhost, which is no SDHCI.
fn quirks_for(kind: SdHostKind) -> Option<&'static HostQuirks> {
    match kind {
        SdHostKind::ArasanEmmc => Some(&quirks::ARASAN_EMMC),
        SdHostKind::Bcm2711Emmc2 => Some(&quirks::BCM2711_EMMC2),
        SdHostKind::Bcm2712Sdhci => Some(&quirks::BCM2712_SDHCI),
        SdHostKind::Bcm2835Sdhost => None,
    }
}

/// An SD controller to look at.
enum Site {
    Sdhci(HostSite),
    Sdhost { block: MmioBlock },
}

/// Whether a slot-choice host is the one `sd.host=` gives the slot to; says so when it is not.
fn chosen_for_slot(host: &SdHost, options: &SdOptions) -> bool {
    if host.presence != Presence::SlotChoice {
        return true;
    }
    let wanted =
        if options.slot_host.is_sdhost() { SdHostKind::Bcm2835Sdhost } else { SdHostKind::ArasanEmmc };
    if host.kind != wanted {
        let (name, other) = if host.kind == SdHostKind::Bcm2835Sdhost {
            ("sdhost", "Arasan (sd.host=arasan)")
        } else {
            ("sdhci", "sdhost (sd.host=auto|sdhost)")
        };
        println!("{name} at {:#x}: not probed: GPIO 48-53 give the SD slot to the {other}", host.block.base);
    }
    host.kind == wanted
}

/// The SD hosts of the board table, in its order, each card registered (before PCIe is
/// touched: `crate::bring_up`).
pub fn attach_board_hosts(machine: &Machine, settings: &KernelSettings, storage: &mut Storage) {
    let options = parse_options(settings);
    let sd_settings = SdSettings { options, settings };
    let info = &machine.info;
    let qemu = info.is_qemu();
    let sites: alloc::vec::Vec<Site> = info
        .profile
        .sd_hosts
        .iter()
        .filter(|host| allowed_here(host, qemu) && chosen_for_slot(host, &sd_settings.options))
        .map(|host| match quirks_for(host.kind) {
            None => Site::Sdhost { block: host.block },
            Some(quirks) => Site::Sdhci(HostSite {
                block: host.block,
                quirks,
                dma: sd_dma::decide(host.dma, info.device_tree.as_ref(), info.board_revision),
                origin: "board table",
            }),
        })
        .collect();
    attach_sites(machine, &sd_settings, sites, storage);
}

/// The SDHCI functions (class 08:05:01) on PCIe (`sdhci-pci` on QEMU virt).
pub fn attach_pci_hosts(
    machine: &Machine,
    settings: &KernelSettings,
    pci: Option<&PciTopology>,
    storage: &mut Storage,
) {
    let Some(topology) = pci else {
        return;
    };
    let sd_settings = SdSettings { options: parse_options_quietly(settings), settings };
    let (base, sub, prog_if) = SDHCI_PCI_CLASS;
    let sites = topology
        .with_class(base, sub, prog_if)
        .filter_map(|function| match function.bar(0) {
            Some(bar) => Some(Site::Sdhci(HostSite {
                block: MmioBlock::new(BlockKind::PciBar, bar.cpu_address, bar.size_bytes),
                quirks: &quirks::GENERIC_PCI,
                dma: DmaDecision::fixed(topology.dma),
                origin: "PCI",
            })),
            None => {
                println!("sdhci      PCI {}: SD host without an assigned BAR 0; skipped", function.address);
                None
            }
        })
        .collect();
    attach_sites(machine, &sd_settings, sites, storage);
}

fn attach_sites(
    machine: &Machine,
    sd_settings: &SdSettings,
    sites: alloc::vec::Vec<Site>,
    storage: &mut Storage,
) {
    for site in sites {
        let deadline = DeviceDeadline::start(machine.platform, SD_HOST_BUDGET_MS);
        match site {
            Site::Sdhci(site) => attach_host(machine, sd_settings, &site, &deadline, storage),
            Site::Sdhost { block } => attach_sdhost(machine, &sd_settings.options, block, &deadline, storage),
        }
    }
}

/// Whether a board-table host may be probed here; says why not when it may not.
fn allowed_here(host: &SdHost, qemu: bool) -> bool {
    let allowed = host.may_probe(qemu);
    if !allowed {
        println!(
            "sdhci at {:#x}: not probed: on a Pi 4 / 400 / CM4 this legacy Arasan does not reach the SD slot, \
             and its pins GPIO 48-53 are the Ethernet RGMII lines (only QEMU's raspi4b wires a card to it)",
            host.block.base
        );
    }
    allowed
}

fn attach_host(
    machine: &Machine,
    sd_settings: &SdSettings,
    site: &HostSite,
    deadline: &DeviceDeadline<'_, KernelPlatform>,
    storage: &mut Storage,
) {
    let options = &sd_settings.options;
    let quirks = site.quirks;
    let base = site.block.base;
    if site.block.size_bytes < register_window_bytes(quirks) as u64 {
        println!(
            "sdhci at {base:#x}: its register block has {:#x} bytes, fewer than the {:#x} the driver uses; skipped",
            site.block.size_bytes,
            register_window_bytes(quirks)
        );
        return;
    }
    super::stage(format_args!("sd bring-up (sdhci at {base:#x})"));
    let mut notes: heapless::String<192> = heapless::String::new();
    if let (Some(pins), Some(gpio)) = (quirks.pins, windows::gpio(machine.info.profile)) {
        let release = quirks::arasan_shares_pins_with_wifi(machine.info.board_revision);
        pins.apply(&gpio, release);
        let released = pins
            .release_first
            .filter(|_| release)
            .map(|(first, last)| alloc::format!("GPIO {first}-{last} to input, "));
        let _ = core::fmt::Write::write_fmt(
            &mut notes,
            format_args!(
                "; pins: {}SD pins GPIO {}-{} routed to this SDHCI (input, then ALT3), not to sdhost",
                released.unwrap_or_default(),
                pins.first_pin,
                pins.last_pin
            ),
        );
    }
    if let (Some(device), Some(firmware)) = (quirks.firmware_power_device, machine.firmware.as_ref()) {
        if let Err(message) = power_on(firmware, device) {
            println!("sdhci at {base:#x}: {message}; trying anyway");
        }
    }
    // The board table or a PCI BAR gives this SDHCI register block (with the BCM2712 cfg block
    // behind it, docs/hardware.md §2.7).
    let registers = match windows::open(site.block) {
        Ok(registers) => registers,
        Err(error) => {
            println!("sdhci at {base:#x}: {error}; skipped");
            return;
        }
    };
    let as_found = drivers::sdhci::snapshot::snapshot(&registers);
    let firmware = machine.firmware.as_ref().map(|firmware| firmware as &dyn PropertyTags);
    let capabilities = HostCapabilities::read(&registers, quirks.capabilities);
    let base_clock = drivers::sdhci::base_clock::choose(firmware, quirks.base_clock, &capabilities);
    let base_clock_hz = base_clock.map(|clock| clock.hz);
    let mut host =
        match SdhciHost::new(registers, machine.platform, quirks, base_clock_hz, site.dma.translation) {
            Ok(host) => host,
            Err(error) => {
                println!("sdhci at {base:#x}: {error}; skipped");
                return;
            }
        };
    println!("sdhci at {base:#x}: {} ({}), {}", quirks.name, site.origin, site.dma);
    println!("sdhci        {}", host.capabilities());
    let detect = if quirks.broken_card_detect { "card detect not wired (probing)" } else { "card detect" };
    let width = if quirks.access_32_bit_only { "32-bit register access only" } else { "any access width" };
    match base_clock {
        Some(clock) => println!("sdhci        base clock {clock}; {width}; {detect}{notes}"),
        None => println!(
            "sdhci        base clock {} Hz (capabilities); {width}; {detect}{notes}",
            host.base_clock_hz()
        ),
    }
    if let (Some(clock), Some(capabilities_hz)) =
        (base_clock, base_clock.and_then(|clock| host.capabilities().base_clock_disagreement(clock.hz)))
    {
        println!(
            "sdhci        warning: the base clock used ({} Hz) and the capabilities' ({capabilities_hz} Hz) disagree",
            clock.hz
        );
    }
    let hook = board_hook(machine, quirks);
    let info = match bring_up(&mut host, hook.as_ref().map(|h| h as &dyn BoardSignalling), options.bring_up) {
        Ok(info) => info,
        Err(SdError::NoCard { .. }) => {
            println!("sdhci at {base:#x}: no card in the slot");
            return;
        }
        Err(error) => {
            println!("sdhci at {base:#x}: card unusable: {error}");
            return;
        }
    };
    let name = storage.next_name(DeviceClass::Sd);
    let mut device = match SdCard::new(host, info, &name, options.mode, options.cmd23, options.auto_cmd23) {
        Ok(device) => device,
        Err(error) => {
            println!("{name}: cannot set up transfers: {error}");
            return;
        }
    };
    if let Some(timeout_ms) = options.data_timeout_ms {
        device.set_data_timeout_ms(timeout_ms);
    }
    let auto_cmd23_refused = confirm_auto_cmd23(&mut device, machine.platform);
    describe(&name, &device, options.mode);
    if let Some(refused) = auto_cmd23_refused {
        println!(
            "{name}        Auto CMD23 refused by this host ({refused}): CMD23 sent by the driver instead"
        );
    }
    set_up_command_queue(&name, &mut device, options.command_queue);
    if sd_settings.settings.wants_registers(&name) {
        print_registers(
            &name,
            &alloc::format!("as found (SDHCI at {base:#x}, before the driver's first write)"),
            &as_found,
        );
        print_registers(&name, "after bring-up", &drivers::sdhci::snapshot::snapshot(&registers));
        storage.watch_registers(&name, Box::new(move || drivers::sdhci::snapshot::snapshot(&registers)));
    }
    storage.set_controller(&name, alloc::format!("{} at {base:#x}", quirks.name));
    let mut device = ReportingSdCard { card: device, errors_reported: 0 };
    measure(&name, &mut device.card, machine.platform, deadline);
    storage.add(DeviceClass::Sd, Box::new(device));
}

/// Blocks the Auto CMD23 probe reads (SdCard::confirm_auto_cmd23).
const AUTO_CMD23_PROBE_BLOCKS: usize = 8;
/// How long each probe read may take.
const AUTO_CMD23_PROBE_TIMEOUT_US: u64 = 2_000_000;

/// Two reads with Auto CMD23 where the device would use it; how it failed when it did (the device
/// then sends CMD23 itself).
fn confirm_auto_cmd23(
    device: &mut KernelSdCard,
    platform: &'static KernelPlatform,
) -> Option<drivers::sdhci::device::AutoCmd23Refused> {
    if !device.uses_auto_cmd23() {
        return None;
    }
    let probe = platform.allocate_dma(AUTO_CMD23_PROBE_BLOCKS * 512, 4096).ok()?;
    device.confirm_auto_cmd23(probe, AUTO_CMD23_PROBE_TIMEOUT_US)
}

/// SET_POWER_STATE {device, on | wait} (docs/hardware.md §2.9 step 1).
fn power_on(firmware: &Firmware, device: u32) -> Result<(), alloc::string::String> {
    const ON: u32 = 1;
    const WAIT: u32 = 2;
    const NO_DEVICE: u32 = 2;
    let answer = firmware
        .property(tags::SET_POWER_STATE, &[device, ON | WAIT], 2)
        .map_err(|error| alloc::format!("firmware power-on of device {device} failed: {error}"))?;
    match answer.as_slice() {
        [_, state, ..] if state & NO_DEVICE != 0 => {
            Err(alloc::format!("firmware says power device {device} does not exist"))
        }
        [_, state, ..] if state & ON == 0 => Err(alloc::format!("firmware left power device {device} off")),
        _ => Ok(()),
    }
}

/// The 1.8 V and card-power controls of the board, where it has them.
enum BoardHook {
    /// Pi 4: firmware GPIO expander lines 4 (VDD_SD_IO_SEL) and 6 (SD_PWR_ON), i.e. GPIO 132 and
    /// 134 for SET_GPIO_STATE (docs/hardware.md §2.5).
    Pi4Expander { firmware: Firmware, platform: &'static KernelPlatform },
    /// Pi 5: AON GPIO 3 (SD_IOVDD_SEL) and 4 (SD_PWR_ON), brcmstb GPIO bank 0 at 0x10_7D51_7C00:
    /// DATA +0x04, IODIR +0x08 (set = input) (docs/hardware.md §2.5).
    Pi5Aon { bank: Mmio, platform: &'static KernelPlatform },
}

const PI4_IO_1V8_GPIO: u32 = 128 + 4;
const PI4_CARD_POWER_GPIO: u32 = 128 + 6;
const PI5_IO_1V8_BIT: u32 = 1 << 3;
const PI5_CARD_POWER_BIT: u32 = 1 << 4;
/// AON GPIO 5: the Pi 5's card detect, low when a card is in (`cd-gpios = <&gio_aon 5
/// GPIO_ACTIVE_LOW>` in Linux's `bcm2712-rpi-5-b.dts`).
const PI5_CARD_DETECT_BIT: u32 = 1 << 5;
/// Card power off time for a power cycle (SD §6.4.1.2: at least 1 ms below 0.5 V; generous).
const CARD_POWER_OFF_US: u64 = 100_000;
const CARD_POWER_ON_US: u64 = 10_000;
/// Settling of the 1.8 V regulator (docs/hardware.md §2.5: 5 ms).
const REGULATOR_SETTLE_US: u64 = 5_000;

fn board_hook(machine: &Machine, quirks: &'static HostQuirks) -> Option<BoardHook> {
    if !quirks.can_switch_to_1v8 {
        return None;
    }
    match machine.info.profile.family {
        crate::board::BoardFamily::RaspberryPi4 => {
            machine.firmware.map(|firmware| BoardHook::Pi4Expander { firmware, platform: machine.platform })
        }
        crate::board::BoardFamily::RaspberryPi5 => {
            let bank = windows::open_kind(machine.info.profile, BlockKind::AlwaysOnGpio).ok()?;
            Some(BoardHook::Pi5Aon { bank, platform: machine.platform })
        }
        _ => None,
    }
}

impl BoardHook {
    fn set_line(&self, line: u32, high: bool) -> Result<(), SdError> {
        match self {
            BoardHook::Pi4Expander { firmware, .. } => drivers::mailbox::set_gpio_state(firmware, line, high)
                .map_err(|_| SdError::BoardHook { what: "firmware SET_GPIO_STATE", code: line }),
            BoardHook::Pi5Aon { bank, .. } => {
                drivers::gpio::BrcmstbGpioBank::new(*bank).set_output(line, high);
                Ok(())
            }
        }
    }

    fn platform(&self) -> &'static KernelPlatform {
        match self {
            BoardHook::Pi4Expander { platform, .. } | BoardHook::Pi5Aon { platform, .. } => platform,
        }
    }

    fn lines(&self) -> (u32, u32) {
        match self {
            BoardHook::Pi4Expander { .. } => (PI4_IO_1V8_GPIO, PI4_CARD_POWER_GPIO),
            BoardHook::Pi5Aon { .. } => (PI5_IO_1V8_BIT, PI5_CARD_POWER_BIT),
        }
    }
}

impl BoardSignalling for BoardHook {
    fn set_io_1v8(&self, enable: bool) -> Result<(), SdError> {
        self.set_line(self.lines().0, enable)?;
        self.platform().delay_us(REGULATOR_SETTLE_US);
        Ok(())
    }

    fn power_cycle_card(&self) -> Result<(), SdError> {
        let power = self.lines().1;
        self.set_line(power, false)?;
        self.platform().delay_us(CARD_POWER_OFF_US);
        self.set_line(power, true)?;
        self.platform().delay_us(CARD_POWER_ON_US);
        Ok(())
    }

    /// The Pi 5 reads its card-detect line (the controller's own is forced to "present" in the
    /// cfg block, so that commands go out whatever the pin mux; presence is judged here).
    fn card_present(&self) -> Option<bool> {
        match self {
            BoardHook::Pi4Expander { .. } => None,
            BoardHook::Pi5Aon { bank, .. } => {
                drivers::gpio::BrcmstbGpioBank::new(*bank).active_low_input(PI5_CARD_DETECT_BIT)
            }
        }
    }
}

/// An SD card on either host, for the timing reads and the error reports.
type KernelSdDevice = dyn SdBlockDevice<'static, Clock = KernelPlatform>;

/// The card's identity, capacity, classes and negotiated mode: `transfer` names how data moves,
/// `ending` how multi-block reads end.
fn describe_card(name: &str, card: &CardInfo, transfer: &str, ending: &str) {
    if let Some(mode) = card.emmc_mode() {
        return describe_emmc(name, card, &mode, transfer, ending);
    }
    println!("{name}        card {}", card.cid.describe());
    let bytes = card.capacity_bytes();
    let hundredths_gib = bytes * 100 / (1 << 30);
    println!(
        "{name}        capacity {bytes} bytes ({}.{:02} GiB), CSD {}, {}, SD spec {}, OCR {:#010x}, RCA {:#06x}",
        hundredths_gib / 100,
        hundredths_gib % 100,
        card.csd.version.name(),
        card.capacity_class().name(),
        card.scr.spec_version(),
        card.ocr,
        card.rca
    );
    match card.sd_status {
        Some(status) => println!("{name}        {}", status.describe()),
        None => println!("{name}        SD Status (ACMD13) unavailable: classes unknown"),
    }
    print_mode_line(name, card, transfer, ending);
    if let Some(report) = card.voltage_switch {
        println!("{name}        {report}");
    }
}

/// The negotiated mode: bus width, clock, timing, signalling, how data moves and how
/// multi-block reads end.
fn print_mode_line(name: &str, card: &CardInfo, transfer: &str, ending: &str) {
    let signalling = if card.signalling_1v8 { "1.8 V" } else { "3.3 V" };
    println!(
        "{name}        mode {}-bit bus, {} Hz, {}, {signalling} signalling, {transfer}, multi-block reads end by {ending}",
        card.bus_width_bits,
        card.sd_clock_hz,
        card.timing.name(),
    );
}

/// An eMMC's identity line (`eMMC 5.1, 8-bit DDR52`), its CID, capacity and mode.
fn describe_emmc(
    name: &str,
    card: &CardInfo,
    mode: &drivers::sd::mmc::EmmcModeText<'_>,
    transfer: &str,
    ending: &str,
) {
    let revision = card.emmc.map_or(0, |emmc| emmc.ext_csd_revision);
    println!("{name}        card {mode}: {}", card.cid.describe_mmc(revision));
    let bytes = card.capacity_bytes();
    let hundredths_gib = bytes * 100 / (1 << 30);
    let addressing = if card.block_addressed() { "sector" } else { "byte" };
    println!(
        "{name}        capacity {bytes} bytes ({}.{:02} GiB), {addressing} addressed, OCR {:#010x}, RCA {:#06x}",
        hundredths_gib / 100,
        hundredths_gib % 100,
        card.ocr,
        card.rca
    );
    print_mode_line(name, card, transfer, ending);
}

fn describe(name: &str, device: &KernelSdCard, mode_request: ModeRequest) {
    let card = device.card();
    let ending = match (device.uses_auto_cmd23(), device.uses_cmd23()) {
        (true, _) => "Auto CMD23 (ADMA2; sd.auto-cmd23=off for a CMD23 of the driver's own)",
        (false, true) => "CMD23",
        (false, false) => "auto-CMD12",
    };
    let descriptors = device.descriptor_limit().map(|limit| alloc::format!(" with {}", limit.name()));
    let transfer = alloc::format!("{}{}", device.transfer_mode().name(), descriptors.unwrap_or_default());
    describe_card(name, card, &transfer, ending);
    println!(
        "{name}        timeouts: command {} ms, data {} ms without progress (sd.timeout-ms); then CMD and DAT line reset and retry",
        drivers::sdhci::host::COMMAND_TIMEOUT_US / 1000,
        device.data_timeout_ms()
    );
    if let Some(fallback) = card.fallback {
        println!(
            "{name}        {} given up: tuning failed ({}); the clock was lowered before the next command",
            fallback.wanted.name(),
            fallback.reason
        );
    }
    if mode_request == ModeRequest::Adma2 && device.transfer_mode() == drivers::sdhci::TransferMode::Pio {
        let why = if device.host().dma_translation().is_none() {
            "the host's DMA window is unknown"
        } else {
            "this host advertises no ADMA2"
        };
        println!("{name}        sd.mode=adma2 asked for, but {why}: using PIO");
    }
}

/// What the card advertises about command queueing, said either way, and with `sd.cq=on` the
/// queue switched on: then the device takes as many requests as the card has tasks
/// (drivers::sd::command_queue).
fn set_up_command_queue(name: &str, device: &mut KernelSdCard, wanted: bool) {
    let support = device.command_queue_support();
    println!("{name}        {support}");
    match (wanted, support.depth()) {
        (false, 0) => {}
        (false, depth) => println!(
            "{name}        command queueing: off (sd.cq=off; sd.cq=on would run up to {depth} requests at once)"
        ),
        (true, 0) => println!("{name}        sd.cq=on asked for, but the card has no command queue: one request at a time"),
        (true, _) => match device.enable_command_queue(support) {
            Ok(depth) => println!("{name}        command queueing: depth {depth} (sd.cq=on)"),
            Err(error) => println!("{name}        sd.cq=on asked for, but switching the queue on failed ({error}): one request at a time"),
        },
    }
}

/// Times a 1 MiB and a single 4 KiB read through the block interface, unless the host's
/// bring-up has used its deadline.
fn measure(
    name: &str,
    device: &mut KernelSdDevice,
    platform: &'static KernelPlatform,
    deadline: &DeviceDeadline<'_, KernelPlatform>,
) {
    if deadline.has_passed() {
        println!(
            "{name}: bring-up took {} ms, past its {} ms deadline; no timing read (the card is still measured)",
            deadline.elapsed_ms(),
            deadline.budget_ms()
        );
        return;
    }
    let geometry = device.geometry();
    if geometry.capacity_bytes() < MIB as u64 {
        println!("{name}: smaller than 1 MiB; no timing read");
        return;
    }
    let buffer = match platform.allocate_dma(MIB, 4096) {
        Ok(buffer) => buffer,
        Err(error) => {
            println!("{name}: no buffer for the timing read: {error}");
            return;
        }
    };
    let blocks_per_mib = (MIB as u64 / u64::from(geometry.logical_block_bytes)) as u32;
    let mut timed = |blocks: u32| -> Result<u64, alloc::string::String> {
        let slice = buffer
            .slice(0, blocks as usize * geometry.logical_block_bytes as usize)
            .ok_or_else(|| alloc::string::String::from("buffer too small"))?;
        let start = platform.now_ticks();
        device
            .read_blocking(0, blocks, slice, MEASUREMENT_TIMEOUT_US)
            .map_err(|error| alloc::format!("{error}"))?;
        Ok(platform.ticks_to_ns(platform.now_ticks() - start) / 1000)
    };
    match (timed(blocks_per_mib), timed(blocks_per_mib / 256)) {
        (Ok(mib_us), Ok(small_us)) => {
            println!("{name}: 1 MiB read in {mib_us} µs, 4 KiB read in {small_us} µs")
        }
        (Err(error), _) | (_, Err(error)) => println!("{name}: timing read failed: {error}"),
    }
}

/// The SD card as registered: the block interface, plus a console line naming the command and
/// status bits whenever a request fails (the interface itself only carries a kind and a code).
struct ReportingSdCard<D: SdBlockDevice<'static>> {
    card: D,
    errors_reported: u32,
}

impl<D: SdBlockDevice<'static>> ReportingSdCard<D> {
    /// The console lines for `finished` completions, of which at least one failed.
    #[cold]
    #[inline(never)]
    fn describe_failures(&mut self, finished: &[Completion]) {
        for completion in finished {
            if completion.result.is_err() && self.errors_reported < ERRORS_DESCRIBED {
                self.errors_reported += 1;
                if let Some(error) = self.card.last_error() {
                    println!("{}: read failed: {error}", self.card.name());
                }
                if self.errors_reported == ERRORS_DESCRIBED {
                    println!("{}: further failures are counted, not described", self.card.name());
                }
            }
        }
    }
}

/// Failed requests described on the console before the rest are only counted by the caller.
const ERRORS_DESCRIBED: u32 = 8;

impl<D: SdBlockDevice<'static>> BlockDevice for ReportingSdCard<D> {
    fn name(&self) -> &str {
        self.card.name()
    }
    fn geometry(&self) -> Geometry {
        self.card.geometry()
    }
    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        self.card.submit(request)
    }
    fn kick(&mut self) {
        self.card.kick()
    }
    fn flush_support(&self) -> blockdev::FlushSupport {
        self.card.flush_support()
    }
    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        let finished = self.card.poll(completions);
        // The description out of line: a successful poll only looks at its results.
        let finished_completions = completions.get(..finished).unwrap_or_default();
        if finished_completions.iter().any(|completion| completion.result.is_err()) {
            self.describe_failures(finished_completions);
        }
        finished
    }
    fn data_path(&self) -> Option<DataPath> {
        self.card.data_path()
    }
}

/// The BCM2835 sdhost in the SD slot of a Pi 1-3 (docs/aarch32-pis.md §7): GPIO 48-53 on ALT0
/// (which is also what moves QEMU's card to it), the card powered through the firmware, the
/// divider fed by the VPU core clock (mailbox clock 4), the card brought up at 3.3 V.
fn attach_sdhost(
    machine: &Machine,
    options: &SdOptions,
    block: MmioBlock,
    deadline: &DeviceDeadline<'_, KernelPlatform>,
    storage: &mut Storage,
) {
    let base = block.base;
    super::stage(format_args!("sd bring-up (sdhost at {base:#x})"));
    if let Some(gpio) = windows::gpio(machine.info.profile) {
        gpio.set_functions(SD_SLOT_PINS, drivers::gpio::PinFunction::Alt0);
    }
    if let Some(firmware) = machine.firmware.as_ref() {
        if let Err(message) = power_on(firmware, SD_CARD_POWER_DEVICE) {
            println!("sdhost at {base:#x}: {message}; trying anyway");
        }
    }
    let clock = SdhostClock::probe(static_firmware(machine));
    let registers = match windows::open(block) {
        Ok(registers) => registers,
        Err(error) => {
            println!("sdhost at {base:#x}: {error}; skipped");
            return;
        }
    };
    let mut host = SdhostHost::new(registers, machine.platform, clock);
    println!("sdhost at {base:#x}: BCM2835 sdhost (board table), PIO");
    println!("sdhost       SD clock: {clock}");
    println!(
        "sdhost       SD pins GPIO {}-{} routed to the sdhost (ALT0), not to the Arasan",
        SD_SLOT_PINS.start(),
        SD_SLOT_PINS.end()
    );
    if let Err(error) = host.initialize() {
        println!("sdhost at {base:#x}: {error}; skipped");
        return;
    }
    let info = match bring_up_at_3v3(&mut host, options.bring_up) {
        Ok(info) => info,
        Err(SdError::NoCard { .. }) => {
            println!("sdhost at {base:#x}: no card in the slot");
            return;
        }
        Err(error) => {
            println!("sdhost at {base:#x}: card unusable: {error}");
            return;
        }
    };
    let name = storage.next_name(DeviceClass::Sd);
    let device = SdhostCard::new(host, info, &name, options.cmd23);
    let ending = if device.uses_cmd23() { "CMD23" } else { "CMD12" };
    describe_card(&name, device.card(), "PIO", ending);
    if options.mode == ModeRequest::Adma2 {
        println!("{name}        sd.mode=adma2 asked for, but the sdhost has no ADMA2: using PIO");
    }
    storage.set_controller(&name, alloc::format!("BCM2835 sdhost at {base:#x}"));
    let mut device = ReportingSdCard { card: device, errors_reported: 0 };
    measure(&name, &mut device.card, machine.platform, deadline);
    storage.add(DeviceClass::Sd, Box::new(device));
}

/// The SD slot's pins on the Pi 1-3 (docs/aarch32-pis.md §7).
const SD_SLOT_PINS: core::ops::RangeInclusive<u32> = 48..=53;
/// SET_POWER_STATE device 0: the SD card (docs/hardware.md §2.9 step 1).
const SD_CARD_POWER_DEVICE: u32 = 0;
/// The board's firmware for the rest of the run, for drivers that keep asking it (the sdhost's
/// SET_SDHOST_CLOCK on every clock change).
fn static_firmware(machine: &Machine) -> Option<&'static dyn PropertyTags> {
    machine.firmware.map(|firmware| &*Box::leak(Box::new(firmware)) as &'static dyn PropertyTags)
}
