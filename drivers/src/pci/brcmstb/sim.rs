//! A register model of the Broadcom STB PCIe root complex for host tests, at least as strict as
//! the silicon as far as the public sources describe it (docs/pcie-brcmstb.md, docs/hardware.md §3):
//!
//! - a root complex register access while the bridge is in reset is an error (an SError or a hang
//!   on the hardware); on BCM2711 only RGR1_SW_INIT_1 answers then, on BCM2712 nothing in pcie1's
//!   page, RESCAL included, answers while reset line 43 is asserted;
//! - the reset controller refuses any line but pcie1's (44 is pcie2, which carries RP1);
//! - pcie2's registers (`Block::Pcie2`) raise an SError while its bridge (line 44) is in reset,
//!   the firmware's default; RESCAL re-run while RP1's link on pcie2 is live is a violation
//!   (whether it disturbs that link is unknown: the model takes the strict side);
//! - MDIO reads return the SSC block of BCM2711's SerDes (SSC and PLL lock once the override is
//!   set); SSC turned on before the link is up, or on BCM2712 (which has none), is a violation;
//! - the root port advertises x4 on BCM2712 (what lspci shows on a Pi 5's pcie1 before Linux
//!   limits it) and x1 on BCM2711;
//! - L23_REQUEST (PCIE_CTRL bit 0) and HARD_DEBUG's PERST_ASSERT the firmware left set survive the
//!   bridge reset (which bits that reset clears is not documented: again the strict side) and keep
//!   the link from training;
//! - a configuration access below the root port while the link is down is an error (CPU abort);
//! - the link trains only if, when PERST# is released, the SerDes is powered, (BCM2712) the PLL
//!   has the 54 MHz settings, the speed limit is written, CLKREQ# debug/L1SS are off and the
//!   reference clock ran as long as the device needs; it is reported up 100 ms after the release;
//! - the outbound windows, the root port's forwarding windows and the device's BAR are decoded
//!   from the registers the driver wrote and route CPU accesses to the attached device (the NVMe
//!   simulator); a 64-bit access is an error on BCM2711;
//! - the inbound windows decoded from the registers route the device's DMA back to memory (as
//!   the arena's [`BusView`]), only with bus mastering on in the device and the root port, a
//!   little-endian window and (BCM2711) a memory controller window that covers it.
//!
//! Unknown registers are errors. Every register write is logged in order. Values nobody documents
//! (the endianness register's reset value) are chosen so that forgetting to set them fails.
#![forbid(unsafe_code)]

extern crate std;

use super::regs::{self, offsets, rescal, reset_controller};
use super::Soc;
use crate::pci::sim::SimulatedFunction;
use blockdev::Clock;
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use hal::testing::BusView;
use std::collections::BTreeMap;
use std::format;
use std::rc::Rc;
use std::string::String;
use std::vec::Vec;

/// The root port's Device Control / Device Status (PCI Express capability + 8).
const ROOT_PORT_DEVICE_CONTROL: usize = offsets::PCIE_CAPABILITY + 8;

/// The reset controller line of pcie1's bridge, and the lines the model guards.
pub const PCIE1_BRIDGE_LINE: u32 = 43;
const LINE_NAMES: [(u32, &str); 3] = [(42, "pcie0"), (43, "pcie1"), (44, "pcie2 (RP1)")];
const MS: u64 = 1_000_000;

/// How the simulated board starts and what the device needs.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    pub soc: Soc,
    /// RESCAL already ran (the firmware calibrated since power-on).
    pub rescal_calibrated: bool,
    /// STATUS reads after START before the calibration is done.
    pub rescal_polls: u32,
    /// The fastest generation the device trains to.
    pub device_gen: u8,
    /// The device answers configuration reads with "retry" this long after the link is up.
    pub device_retry_ms: u64,
    /// The device needs the reference clock this long before PERST# is released.
    pub device_refclk_ms: u64,
    /// The controller strapped as an endpoint (PCIE_STATUS.PORT = 0).
    pub endpoint_mode: bool,
    /// RESCAL's START bit does not stick (a block that does not answer writes).
    pub rescal_start_ignored: bool,
    /// pcie2's bridge (line 44) held in reset, as the firmware leaves it by default
    /// (`pciex4_reset=1`); otherwise it runs RP1 (`pciex4_reset=0`).
    pub pcie2_in_reset: bool,
    /// pcie2's link to RP1 is up (when out of reset).
    pub pcie2_link_up: bool,
    /// The firmware left PCIE_CTRL.L23_REQUEST set.
    pub left_l23_request: bool,
    /// The firmware left HARD_DEBUG.PERST_ASSERT set.
    pub left_perst_assert: bool,
}

impl ModelConfig {
    pub fn new(soc: Soc) -> Self {
        ModelConfig {
            soc,
            rescal_calibrated: false,
            rescal_polls: 3,
            device_gen: 3,
            device_retry_ms: 0,
            device_refclk_ms: 0,
            endpoint_mode: false,
            rescal_start_ignored: false,
            // The firmware's default (`pciex4_reset=1`): pcie2 reset before the OS starts.
            pcie2_in_reset: true,
            pcie2_link_up: true,
            left_l23_request: false,
            left_perst_assert: false,
        }
    }
}

/// The register blocks a driver reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    RootComplex,
    ResetController,
    Rescal,
    /// BCM2712's pcie2, in front of RP1 (only its status register is modelled).
    Pcie2,
}

/// One register write, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedWrite {
    pub block: Block,
    pub offset: usize,
    pub value: u32,
    pub at_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConfigTarget {
    /// No link: the CPU would take an abort.
    Abort,
    /// Nothing answers: an unsupported request.
    Nobody,
    Device,
}

#[derive(Default)]
struct Mdio {
    packet: u32,
    /// The block SET_ADDR_OFFSET selected and the registers written in it.
    block: u16,
    pll_writes: BTreeMap<u8, u16>,
    /// BCM2711's SSC control register (override enable and value in bits 15 and 14).
    ssc_control: u16,
}

struct State {
    config: ModelConfig,
    registers: BTreeMap<usize, u32>,
    rgr1: u32,
    /// PCIE_CTRL and HARD_DEBUG bits that survive the bridge reset (the firmware's leftovers,
    /// until the driver writes them).
    sticky_pcie_ctrl: u32,
    sticky_hard_debug: u32,
    /// Reset controller STATUS of banks 0 and 1.
    reset_banks: [u32; 2],
    rescal_start: u32,
    rescal_done: bool,
    rescal_countdown: Option<u32>,
    mdio: Mdio,
    speed_limit_written: (bool, bool),
    perst_asserted: bool,
    refclk_since_ns: Option<u64>,
    released_at_ns: Option<u64>,
    trained_gen: Option<u8>,
    device: Option<SimulatedFunction>,
    violations: Vec<String>,
    writes: Vec<LoggedWrite>,
}

fn line_name(line: u32) -> String {
    LINE_NAMES
        .iter()
        .find(|(number, _)| *number == line)
        .map(|(_, name)| format!("line {line} ({name})"))
        .unwrap_or_else(|| format!("line {line}"))
}

impl State {
    fn new(config: ModelConfig) -> Self {
        let mut state = State {
            config,
            registers: BTreeMap::new(),
            rgr1: 0b11,
            sticky_pcie_ctrl: u32::from(config.left_l23_request),
            sticky_hard_debug: u32::from(config.left_perst_assert) << 3,
            // pcie0 and pcie1 held in reset (the firmware's "PCI1 reset"); pcie2 too unless
            // `pciex4_reset=0` kept RP1 running.
            reset_banks: [
                0,
                (1 << (42 - 32)) | (1 << (43 - 32)) | (u32::from(config.pcie2_in_reset) << (44 - 32)),
            ],
            rescal_start: 0,
            rescal_done: config.rescal_calibrated,
            rescal_countdown: None,
            mdio: Mdio::default(),
            speed_limit_written: (false, false),
            perst_asserted: true,
            refclk_since_ns: None,
            released_at_ns: None,
            trained_gen: None,
            device: None,
            violations: Vec::new(),
            writes: Vec::new(),
        };
        state.power_on_registers();
        state
    }

    fn soc(&self) -> Soc {
        self.config.soc
    }

    fn hard_debug(&self) -> usize {
        match self.soc() {
            Soc::Bcm2711 => offsets::MISC_HARD_PCIE_HARD_DEBUG_2711,
            Soc::Bcm2712 => offsets::MISC_HARD_PCIE_HARD_DEBUG_2712,
        }
    }

    fn fastest_gen(&self) -> u32 {
        u32::from(self.soc().fastest_gen())
    }

    /// The values after the bridge reset; every known register has an entry.
    fn power_on_registers(&mut self) {
        let mut known: Vec<(usize, u32)> = Vec::new();
        for offset in [0x04, 0x0c, 0x18, 0x1c, 0x20, 0x24, 0x28, 0x2c, 0x30, 0x3c, 0x4c, 0xbc] {
            known.push((offset, 0));
        }
        // Device Control: Max Payload 128, Max Read Request 512 (the specification's reset).
        known.push((ROOT_PORT_DEVICE_CONTROL, 2 << 12));
        known.push((offsets::ROOT_CONTROL_CAPABILITIES, 0));
        known.push((offsets::LINK_CONTROL_2, self.fastest_gen()));
        known.push((offsets::RC_CFG_VENDOR_SPECIFIC_REG1, 0b10 << 2));
        known.push((offsets::RC_CFG_PRIV1_ID_VAL3, 0x00_80_00));
        let lanes = match self.soc() {
            Soc::Bcm2711 => 1,
            Soc::Bcm2712 => 4,
        };
        known.push((offsets::RC_CFG_PRIV1_LINK_CAPABILITY, self.fastest_gen() | (lanes << 4) | (0b11 << 10)));
        known.push((offsets::RC_PL_REG_PHY_CTL_1, 0));
        known.push((offsets::MISC_MISC_CTRL, 0));
        for window in 0..regs::OUTBOUND_WINDOWS {
            known.push((offsets::MISC_CPU_2_PCIE_MEM_WIN0_LO + 8 * window, 0));
            known.push((offsets::MISC_CPU_2_PCIE_MEM_WIN0_HI + 8 * window, 0));
            known.push((offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT + 4 * window, 0));
            known.push((offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_HI + 8 * window, 0));
            known.push((offsets::MISC_CPU_2_PCIE_MEM_WIN0_LIMIT_HI + 8 * window, 0));
        }
        let inbound_windows = match self.soc() {
            Soc::Bcm2711 => regs::INBOUND_WINDOWS_2711,
            Soc::Bcm2712 => regs::INBOUND_WINDOWS_2712,
        };
        for window in 1..=inbound_windows {
            known.push((regs::inbound_window_config(window), 0));
            known.push((regs::inbound_window_config(window) + 4, 0));
            if self.soc() == Soc::Bcm2712 {
                known.push((regs::inbound_window_remap(window), 0));
                known.push((regs::inbound_window_remap(window) + 4, 0));
            }
        }
        known.extend([
            (offsets::MISC_MSI_BAR_CONFIG_LO, 0),
            (offsets::MISC_MSI_BAR_CONFIG_HI, 0),
            (offsets::MISC_PCIE_CTRL, 0),
            (offsets::RC_DL_MDIO_ADDR, 0),
            (offsets::RC_DL_MDIO_WR_DATA, 0),
            (offsets::EXT_CFG_INDEX, 0),
            (self.hard_debug(), (1 << 27) | (1 << 21) | (1 << 1)),
        ]);
        let intr2_cpu = match self.soc() {
            Soc::Bcm2711 => offsets::INTR2_CPU_BASE_2711,
            Soc::Bcm2712 => offsets::INTR2_CPU_BASE_2712,
        };
        for base in [intr2_cpu, offsets::MSI_INTR2_BASE] {
            for register in (0..0x18).step_by(4) {
                known.push((base + register, 0));
            }
        }
        if self.soc() == Soc::Bcm2712 {
            known.extend([
                (offsets::RC_PL_PHY_CTL_15, 0x0040_0000),
                (offsets::MISC_RC_CONFIG_RETRY_TIMEOUT, 0),
                (offsets::MISC_CTRL_1, 1 << 5),
                (offsets::MISC_UBUS_CTRL, 0),
                (offsets::MISC_UBUS_TIMEOUT, 0),
                (offsets::MISC_AXI_INTF_CTRL, 1 << 7),
                (offsets::MISC_AXI_READ_ERROR_DATA, 0xdead_dead),
                (offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_HI, 0),
                (offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_LO, 0),
                (offsets::RC_TL_VDM_CTL0, 0),
                (offsets::RC_TL_VDM_CTL1, 0xffff_ffff),
            ]);
        }
        self.registers = known.into_iter().collect();
        *self.registers.entry(offsets::MISC_PCIE_CTRL).or_default() |= self.sticky_pcie_ctrl;
        let hard_debug = self.hard_debug();
        *self.registers.entry(hard_debug).or_default() |= self.sticky_hard_debug;
        self.mdio = Mdio::default();
        self.speed_limit_written = (false, false);
        self.perst_asserted = true;
        self.refclk_since_ns = None;
        self.released_at_ns = None;
        self.trained_gen = None;
    }

    fn register(&self, offset: usize) -> u32 {
        self.registers.get(&offset).copied().unwrap_or(0)
    }

    fn violation(&mut self, text: String) {
        self.violations.push(text);
    }

    fn bridge_in_reset(&self) -> bool {
        match self.soc() {
            Soc::Bcm2711 => self.rgr1 & 0b10 != 0,
            Soc::Bcm2712 => self.reset_banks[1] & (1 << (PCIE1_BRIDGE_LINE - 32)) != 0,
        }
    }

    fn link_up(&self, now_ns: u64) -> bool {
        matches!((self.trained_gen, self.released_at_ns), (Some(_), Some(at)) if now_ns >= at + 100 * MS)
    }

    fn status(&self, now_ns: u64) -> u32 {
        let link = if self.link_up(now_ns) { 0b11 << 4 } else { 0 };
        link | if self.config.endpoint_mode { 0 } else { 1 << 7 }
    }

    fn secondary_bus(&self) -> u8 {
        (self.register(0x18) >> 8) as u8
    }

    fn root_port_command(&self) -> u32 {
        self.register(0x04) & 0xffff
    }

    // -----------------------------------------------------------------------------------------
    // PERST# and link training.

    fn perst_asserted_now(&self) -> bool {
        let pad_held = self.register(self.hard_debug()) & (1 << 3) != 0;
        let signal = match self.soc() {
            Soc::Bcm2711 => self.rgr1 & 1 != 0,
            Soc::Bcm2712 => self.register(offsets::MISC_PCIE_CTRL) & (1 << 2) == 0,
        };
        pad_held || signal
    }

    /// The reference clock runs once PERSTB (or RGR1.PERST) says go, even while HARD_DEBUG
    /// holds the pad.
    fn refclk_requested(&self) -> bool {
        match self.soc() {
            Soc::Bcm2711 => self.rgr1 & 1 == 0,
            Soc::Bcm2712 => self.register(offsets::MISC_PCIE_CTRL) & (1 << 2) != 0,
        }
    }

    fn update_perst(&mut self, now_ns: u64) {
        match (self.refclk_requested(), self.refclk_since_ns) {
            (true, None) => self.refclk_since_ns = Some(now_ns),
            (false, Some(_)) => self.refclk_since_ns = None,
            _ => {}
        }
        let asserted = self.perst_asserted_now();
        if asserted && !self.perst_asserted {
            self.released_at_ns = None;
            self.trained_gen = None;
        } else if !asserted && self.perst_asserted {
            self.released_at_ns = Some(now_ns);
            self.trained_gen = self.training_outcome(now_ns);
        }
        self.perst_asserted = asserted;
    }

    fn pll_programmed(&self) -> bool {
        super::mdio::PLL_54_MHZ_SETTINGS
            .iter()
            .all(|(register, value)| self.mdio.pll_writes.get(register) == Some(value))
    }

    /// The generation the link trains to when PERST# is released now, or `None`.
    fn training_outcome(&self, now_ns: u64) -> Option<u8> {
        let hard_debug = self.register(self.hard_debug());
        let serdes_on = hard_debug & (1 << 27) == 0;
        let clkreq_off = hard_debug & ((1 << 1) | (1 << 21)) == 0;
        let pll_ok = self.soc() == Soc::Bcm2711 || self.pll_programmed();
        let limit_written = self.speed_limit_written == (true, true);
        let no_l23_request = self.register(offsets::MISC_PCIE_CTRL) & 1 == 0;
        let refclk_ms = self.refclk_since_ns.map(|since| (now_ns - since) / MS).unwrap_or(0);
        let refclk_ok = refclk_ms >= self.config.device_refclk_ms;
        if !(serdes_on
            && clkreq_off
            && pll_ok
            && limit_written
            && refclk_ok
            && no_l23_request
            && self.device.is_some())
        {
            return None;
        }
        let target = self.register(offsets::LINK_CONTROL_2) & 0xf;
        let supported = self.register(offsets::RC_CFG_PRIV1_LINK_CAPABILITY) & 0xf;
        let gen = target.min(supported).min(u32::from(self.config.device_gen));
        (gen >= 1).then_some(gen as u8)
    }

    // -----------------------------------------------------------------------------------------
    // Root complex registers.

    fn read_root_complex(&mut self, offset: usize, now_ns: u64) -> u32 {
        if offset == offsets::RGR1_SW_INIT_1 && self.soc() == Soc::Bcm2711 {
            return self.rgr1;
        }
        if self.bridge_in_reset() {
            self.violation(format!("read of root complex register {offset:#x} while the bridge is in reset"));
            return u32::MAX;
        }
        if (offsets::EXT_CFG_DATA..offsets::EXT_CFG_DATA + 0x1000).contains(&offset) {
            return self.read_downstream_config(offset - offsets::EXT_CFG_DATA, now_ns);
        }
        match offset {
            0x00 => match self.soc() {
                Soc::Bcm2711 => 0x2711_14e4,
                Soc::Bcm2712 => 0x2712_14e4,
            },
            0x08 => ((self.register(offsets::RC_CFG_PRIV1_ID_VAL3) & 0xff_ffff) << 8) | 0x10,
            0x0c => 0x0001_0000 | (self.register(0x0c) & 0xff),
            0x10 | 0x14 | 0x38 => 0,
            0x24 => self.register(0x24) | 0x0001_0001,
            // Status: capability list (read-only); command as written.
            0x04 => (self.register(0x04) & 0xffff) | (1 << 20),
            // Power Management (0x48) -> PCI Express (0xac), as lspci shows both root ports
            // (raspberrypi/linux#5352, #6190; geerlingguy/sbc-reviews#21 for BCM2712).
            0x34 => 0x48,
            0x48 => 0x0003_ac01,
            offsets::PCIE_CAPABILITY => 0x0042_0010,
            // Device Capabilities: Role-Based Error Reporting, Max Payload Size Supported 512.
            0xb0 => 0x0000_8002,
            0xb8 => self.register(offsets::RC_CFG_PRIV1_LINK_CAPABILITY) & 0xfff,
            offsets::LINK_CONTROL_STATUS => self.link_control_status(now_ns),
            offsets::ROOT_CONTROL_CAPABILITIES => (self.register(offset) & 0xffff) | (1 << 16),
            offsets::MISC_PCIE_STATUS => self.status(now_ns),
            offsets::MISC_REVISION => 0x0304,
            offsets::RC_DL_MDIO_ADDR => self.mdio.packet,
            offsets::RC_DL_MDIO_WR_DATA => self.register(offset) & !(1 << 31),
            offsets::RC_DL_MDIO_RD_DATA => self.mdio_read(now_ns),
            _ if self.registers.contains_key(&offset) => self.register(offset),
            _ => {
                self.violation(format!("read of unknown root complex register {offset:#x}"));
                u32::MAX
            }
        }
    }

    fn link_control_status(&self, now_ns: u64) -> u32 {
        let control = self.register(offsets::LINK_CONTROL_STATUS) & 0xffff;
        match (self.link_up(now_ns), self.trained_gen) {
            (true, Some(gen)) => control | (u32::from(gen) << 16) | (1 << 20),
            _ => control,
        }
    }

    fn write_root_complex(&mut self, offset: usize, value: u32, now_ns: u64) {
        if offset == offsets::RGR1_SW_INIT_1 && self.soc() == Soc::Bcm2711 {
            self.write_rgr1(value, now_ns);
            return;
        }
        if self.bridge_in_reset() {
            self.violation(format!(
                "write of {value:#x} to root complex register {offset:#x} while the bridge is in reset"
            ));
            return;
        }
        if (offsets::EXT_CFG_DATA..offsets::EXT_CFG_DATA + 0x1000).contains(&offset) {
            self.write_downstream_config(offset - offsets::EXT_CFG_DATA, value, now_ns);
            return;
        }
        match offset {
            0x00 | 0x08 | 0x10 | 0x14 | 0x34 | 0x38 | 0x48 | offsets::PCIE_CAPABILITY | 0xb0 | 0xb8 => {}
            0x04 | ROOT_PORT_DEVICE_CONTROL => {
                // The status halves are RW1C: only the control half is kept.
                self.registers.insert(offset, value & 0xffff);
            }
            offsets::RC_DL_MDIO_ADDR => self.mdio.packet = value,
            offsets::RC_DL_MDIO_WR_DATA => self.mdio_write(value),
            offsets::MISC_PCIE_STATUS | offsets::MISC_REVISION | offsets::RC_DL_MDIO_RD_DATA => {
                self.violation(format!("write of {value:#x} to read-only register {offset:#x}"))
            }
            offsets::MISC_AXI_INTF_CTRL => {
                // pcie1 has one lane: EN_QOS_UPDATE_TIMING_FIX is reserved-0.
                self.registers.insert(offset, value & !(1 << 12));
            }
            _ if self.registers.contains_key(&offset) => {
                self.registers.insert(offset, value);
                self.after_write(offset, now_ns);
            }
            _ => self.violation(format!("write of {value:#x} to unknown root complex register {offset:#x}")),
        }
    }

    fn after_write(&mut self, offset: usize, now_ns: u64) {
        if offset == offsets::MISC_PCIE_CTRL {
            self.sticky_pcie_ctrl = self.register(offset) & 1;
        }
        if offset == self.hard_debug() {
            self.sticky_hard_debug = self.register(offset) & (1 << 3);
        }
        if offset == offsets::LINK_CONTROL_2 {
            self.speed_limit_written.0 = true;
        }
        if offset == offsets::RC_CFG_PRIV1_LINK_CAPABILITY {
            self.speed_limit_written.1 = true;
        }
        if offset == offsets::MISC_PCIE_CTRL || offset == self.hard_debug() {
            self.update_perst(now_ns);
        }
    }

    fn write_rgr1(&mut self, value: u32, now_ns: u64) {
        let entering_reset = value & 0b10 != 0 && self.rgr1 & 0b10 == 0;
        self.rgr1 = value & 0b11;
        if entering_reset {
            self.power_on_registers();
        }
        self.update_perst(now_ns);
    }

    /// An MDIO read: only BCM2711's SSC block is modelled.
    fn mdio_read(&mut self, now_ns: u64) -> u32 {
        // SSC is on only with both the override and its value set.
        const SSC_ON: u16 =
            super::mdio::SSC_CONTROL_OVERRIDE_ENABLE | super::mdio::SSC_CONTROL_OVERRIDE_VALUE;
        let packet = self.mdio.packet;
        let register = (packet & 0xffff) as u8;
        if packet & (1 << 20) == 0 || self.soc() != Soc::Bcm2711 || self.mdio.block != super::mdio::SSC_BLOCK
        {
            self.violation(format!("MDIO read with packet {packet:#x} in block {:#x}", self.mdio.block));
            return 0;
        }
        let data = match register {
            super::mdio::SSC_CONTROL => self.mdio.ssc_control,
            super::mdio::SSC_STATUS if self.mdio.ssc_control & SSC_ON == SSC_ON => {
                if !self.link_up(now_ns) {
                    self.violation(String::from("SSC turned on before the link is up"));
                }
                super::mdio::SSC_STATUS_SSC | super::mdio::SSC_STATUS_PLL_LOCK
            }
            super::mdio::SSC_STATUS => super::mdio::SSC_STATUS_PLL_LOCK,
            _ => {
                self.violation(format!("MDIO read of SSC register {register:#x}"));
                0
            }
        };
        (1 << 31) | u32::from(data)
    }

    fn mdio_write(&mut self, value: u32) {
        if value & (1 << 31) == 0 {
            self.violation(format!("MDIO WR_DATA {value:#x} without DONE set"));
            return;
        }
        let packet = self.mdio.packet;
        if packet & (1 << 20) != 0 || (packet >> 16) & 0xf != 0 {
            self.violation(format!("MDIO write data after a read or other-port packet {packet:#x}"));
            return;
        }
        let (register, data) = ((packet & 0xffff) as u8, (value & 0xffff) as u16);
        if register == super::mdio::SET_ADDR_OFFSET {
            self.mdio.block = data;
            self.mdio.pll_writes.clear();
        } else if self.mdio.block == super::mdio::PLL_BLOCK {
            self.mdio.pll_writes.insert(register, data);
        } else if self.mdio.block == super::mdio::SSC_BLOCK && register == super::mdio::SSC_CONTROL {
            if self.soc() == Soc::Bcm2712 {
                self.violation(String::from("SSC on BCM2712, which has none (CFG_QUIRK_NO_SSC)"));
            }
            self.mdio.ssc_control = data;
        }
        self.registers.insert(offsets::RC_DL_MDIO_WR_DATA, value);
    }

    // -----------------------------------------------------------------------------------------
    // Configuration requests below the root port.

    /// Where a configuration request through EXT_CFG_INDEX goes: only the root port's
    /// secondary bus, device 0 function 0, has a device.
    fn config_target(&mut self, now_ns: u64, register: usize) -> ConfigTarget {
        if !self.link_up(now_ns) {
            self.violation(format!(
                "configuration access (EXT_CFG_INDEX {:#x}, register {register:#x}) while the link is down: CPU abort",
                self.register(offsets::EXT_CFG_INDEX)
            ));
            return ConfigTarget::Abort;
        }
        let index = self.register(offsets::EXT_CFG_INDEX);
        let (bus, device, function) = ((index >> 20) as u8, (index >> 15) & 0x1f, (index >> 12) & 7);
        if index & 0xfff != 0 {
            self.violation(format!("EXT_CFG_INDEX {index:#x} has register bits set"));
        }
        let secondary = self.secondary_bus();
        if secondary != 0 && bus == secondary && device != 0 {
            self.violation(format!(
                "configuration request to device {device} on the root port's link, which carries device 0 only"
            ));
            return ConfigTarget::Nobody;
        }
        if secondary != 0 && bus == secondary && device == 0 && function == 0 && self.device.is_some() {
            ConfigTarget::Device
        } else {
            ConfigTarget::Nobody
        }
    }

    fn device_retrying(&self, now_ns: u64) -> bool {
        let up_at = self.released_at_ns.unwrap_or(0) + 100 * MS;
        now_ns < up_at + self.config.device_retry_ms * MS
    }

    fn read_downstream_config(&mut self, register: usize, now_ns: u64) -> u32 {
        match self.config_target(now_ns, register) {
            ConfigTarget::Abort => return u32::MAX,
            ConfigTarget::Nobody => return self.unsupported_request_read(),
            ConfigTarget::Device => {}
        }
        if self.device_retrying(now_ns) {
            // CRS: with software visibility the vendor ID reads 0x0001, otherwise the root
            // complex retries until its timeout and the read fails.
            let visible = self.register(offsets::ROOT_CONTROL_CAPABILITIES) & (1 << 4) != 0;
            return if visible && register == 0 { 0xffff_0001 } else { u32::MAX };
        }
        match (register, self.device.as_ref()) {
            (0..=0xff, Some(device)) => device.read(register as u16),
            _ => 0,
        }
    }

    fn write_downstream_config(&mut self, register: usize, value: u32, now_ns: u64) {
        if self.config_target(now_ns, register) != ConfigTarget::Device || self.device_retrying(now_ns) {
            return;
        }
        if let (0..=0xff, Some(device)) = (register, self.device.as_mut()) {
            device.write(register as u16, value);
        }
    }

    fn unsupported_request_read(&mut self) -> u32 {
        if self.register(offsets::MISC_MISC_CTRL) & (1 << 13) == 0 {
            self.violation(String::from(
                "unsupported-request configuration read without CFG_READ_UR_MODE: CPU abort",
            ));
        }
        u32::MAX
    }

    // -----------------------------------------------------------------------------------------
    // Reset controller and RESCAL (BCM2712).

    fn read_reset_controller(&mut self, offset: usize) -> u32 {
        let bank = offset / reset_controller::BANK_BYTES;
        match (bank, offset % reset_controller::BANK_BYTES) {
            (0 | 1, reset_controller::SW_INIT_STATUS) => self.reset_banks[bank],
            _ => {
                self.violation(format!("read of reset controller register {offset:#x}"));
                0
            }
        }
    }

    fn write_reset_controller(&mut self, offset: usize, value: u32) {
        let bank = offset / reset_controller::BANK_BYTES;
        let register = offset % reset_controller::BANK_BYTES;
        let allowed = if bank == 1 { 1 << (PCIE1_BRIDGE_LINE - 32) } else { 0 };
        if bank > 1 || !matches!(register, reset_controller::SW_INIT_SET | reset_controller::SW_INIT_CLEAR) {
            self.violation(format!("write of {value:#x} to reset controller register {offset:#x}"));
            return;
        }
        let foreign = value & !allowed;
        if foreign != 0 {
            let lines: Vec<String> = (0..32)
                .filter(|bit| foreign & (1 << bit) != 0)
                .map(|bit| line_name(bank as u32 * 32 + bit))
                .collect();
            self.violation(format!("reset controller write touches {}", lines.join(", ")));
            return;
        }
        let entering_reset = register == reset_controller::SW_INIT_SET && !self.bridge_in_reset();
        if register == reset_controller::SW_INIT_SET {
            self.reset_banks[bank] |= value;
        } else {
            self.reset_banks[bank] &= !value;
        }
        if entering_reset && self.bridge_in_reset() {
            self.power_on_registers();
        }
    }

    fn pcie2_in_reset(&self) -> bool {
        self.reset_banks[1] & (1 << (super::resets::PCIE2_BRIDGE_LINE - 32)) != 0
    }

    fn rp1_link_live(&self) -> bool {
        self.soc() == Soc::Bcm2712 && !self.pcie2_in_reset() && self.config.pcie2_link_up
    }

    /// pcie2: MISC_PCIE_STATUS only; anything while its bridge is in reset is an SError.
    fn read_pcie2(&mut self, offset: usize) -> u32 {
        if self.pcie2_in_reset() {
            self.violation(format!(
                "pcie2 register {offset:#x} read while its bridge (reset line 44) is in reset: SError"
            ));
            return u32::MAX;
        }
        match offset {
            offsets::MISC_PCIE_STATUS => (1 << 7) | if self.config.pcie2_link_up { 0b11 << 4 } else { 0 },
            _ => {
                self.violation(format!("read of pcie2 register {offset:#x}: only its status is read"));
                u32::MAX
            }
        }
    }

    fn read_rescal(&mut self, offset: usize) -> u32 {
        if self.bridge_in_reset() {
            self.violation(format!("RESCAL register {offset:#x} read while pcie1's bridge is in reset"));
            return u32::MAX;
        }
        match offset {
            rescal::START => self.rescal_start,
            rescal::STATUS => {
                if let Some(countdown) = self.rescal_countdown {
                    self.rescal_countdown = countdown.checked_sub(1);
                    self.rescal_done = countdown == 0;
                }
                u32::from(self.rescal_done)
            }
            _ => {
                self.violation(format!("read of RESCAL register {offset:#x}"));
                0
            }
        }
    }

    fn write_rescal(&mut self, offset: usize, value: u32) {
        if self.bridge_in_reset() {
            self.violation(format!("RESCAL register {offset:#x} written while pcie1's bridge is in reset"));
            return;
        }
        if offset != rescal::START {
            self.violation(format!("write of {value:#x} to RESCAL register {offset:#x}"));
            return;
        }
        if self.config.rescal_start_ignored {
            return;
        }
        if value & rescal::BIT != 0 && self.rescal_start & rescal::BIT == 0 {
            if self.rp1_link_live() {
                self.violation(String::from("RESCAL re-run while RP1's link on pcie2 is live"));
            }
            self.rescal_done = false;
            self.rescal_countdown = Some(self.config.rescal_polls);
        }
        self.rescal_start = value;
    }

    // -----------------------------------------------------------------------------------------
    // Address decoding.

    /// The PCI address an outbound window gives CPU address `cpu`.
    fn outbound(&self, cpu: u64) -> Option<u64> {
        (0..regs::OUTBOUND_WINDOWS).find_map(|window| {
            let base_limit = self.register(offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT + 4 * window);
            let base_high = self.register(offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_HI + 8 * window) & 0xff;
            let limit_high = self.register(offsets::MISC_CPU_2_PCIE_MEM_WIN0_LIMIT_HI + 8 * window) & 0xff;
            let base_mb = u64::from((base_limit >> 4) & 0xfff) | u64::from(base_high) << 12;
            let limit_mb = u64::from(base_limit >> 20) | u64::from(limit_high) << 12;
            let cpu_mb = cpu >> 20;
            if base_limit == 0 || cpu_mb < base_mb || cpu_mb > limit_mb {
                return None;
            }
            let pci_low = u64::from(self.register(offsets::MISC_CPU_2_PCIE_MEM_WIN0_LO + 8 * window));
            let pci_high = u64::from(self.register(offsets::MISC_CPU_2_PCIE_MEM_WIN0_HI + 8 * window));
            Some((pci_high << 32 | pci_low) + (cpu - (base_mb << 20)))
        })
    }

    /// Whether the root port forwards memory requests for `pci` downstream (PCI-PCI Bridge 1.2
    /// §3.2.5.8-9: memory base/limit and the 64-bit prefetchable window).
    fn root_port_forwards(&self, pci: u64) -> bool {
        let memory = self.register(0x20);
        let base = u64::from(memory & 0xfff0) << 16;
        let limit = (u64::from(memory >> 20) << 20) | 0xf_ffff;
        let prefetchable = self.register(0x24);
        let prefetch_base = u64::from(self.register(0x28)) << 32 | u64::from(prefetchable & 0xfff0) << 16;
        let prefetch_limit =
            u64::from(self.register(0x2c)) << 32 | u64::from(prefetchable >> 20) << 20 | 0xf_ffff;
        (base <= limit && (base..=limit).contains(&pci))
            || (prefetch_base <= prefetch_limit && (prefetch_base..=prefetch_limit).contains(&pci))
    }

    /// The offset into the device's BAR 0 that CPU address `cpu` reaches, or why not.
    fn route_cpu_access(&self, cpu: u64, now_ns: u64) -> Result<usize, String> {
        if self.bridge_in_reset() {
            return Err(format!("CPU access to {cpu:#x} while the bridge is in reset"));
        }
        let pci =
            self.outbound(cpu).ok_or_else(|| format!("CPU address {cpu:#x} is in no outbound window"))?;
        if !self.link_up(now_ns) {
            return Err(format!("CPU access to {cpu:#x} (PCI {pci:#x}) while the link is down"));
        }
        if self.root_port_command() & 0b10 == 0 || !self.root_port_forwards(pci) {
            return Err(format!("PCI {pci:#x} (CPU {cpu:#x}) is not forwarded by the root port"));
        }
        let device = self.device.as_ref().ok_or_else(|| format!("no device at PCI {pci:#x}"))?;
        let bar = device.memory_bar(0).filter(|(base, size)| (*base..base + size).contains(&pci));
        match bar {
            Some((base, _)) if device.command() & 0b10 != 0 => Ok((pci - base) as usize),
            _ => Err(format!("PCI {pci:#x} (CPU {cpu:#x}) hits no enabled BAR of the device")),
        }
    }

    /// Size of inbound window `n` from its size code, with its PCI base.
    fn inbound_window(&self, n: usize) -> Option<(u64, u64)> {
        let low = self.register(regs::inbound_window_config(n));
        let high = self.register(regs::inbound_window_config(n) + 4);
        let size = match low & 0x1f {
            0 => return None,
            code @ 0x1c..=0x1f => 1u64 << (code - 0x1c + 12),
            code @ 1..=21 => 1u64 << (code + 15),
            _ => return None,
        };
        Some((u64::from(high) << 32 | u64::from(low & !0xfff), size))
    }

    /// The physical address a device's DMA to `pci` reaches, or why not.
    fn route_dma(&self, pci: u64, length: usize) -> Result<u64, String> {
        if self.bridge_in_reset() {
            return Err(format!("DMA to PCI {pci:#x} while the bridge is in reset"));
        }
        let device_master = self.device.as_ref().is_some_and(|d| d.command() & 0b100 != 0);
        if !device_master || self.root_port_command() & 0b100 == 0 {
            return Err(format!("DMA to PCI {pci:#x} without bus mastering in the device and the root port"));
        }
        let windows = match self.soc() {
            Soc::Bcm2711 => regs::INBOUND_WINDOWS_2711,
            Soc::Bcm2712 => regs::INBOUND_WINDOWS_2712,
        };
        let end = pci + length as u64;
        let (n, (base, _)) = (1..=windows)
            .filter_map(|n| self.inbound_window(n).map(|window| (n, window)))
            .find(|(_, (base, size))| pci >= *base && end <= base + size)
            .ok_or_else(|| format!("DMA to PCI {pci:#x}+{length:#x} hits no inbound window"))?;
        match self.soc() {
            Soc::Bcm2711 => self.bcm2711_inbound(n, pci - base, length),
            Soc::Bcm2712 => self.bcm2712_inbound(n, pci - base),
        }
    }

    /// BCM2711: window 2 reaches memory from CPU address 0, little endian, within SCB0.
    fn bcm2711_inbound(&self, n: usize, offset: u64, length: usize) -> Result<u64, String> {
        if n != 2 {
            return Err(format!("DMA through inbound window {n}, which maps internal registers"));
        }
        if self.register(offsets::RC_CFG_VENDOR_SPECIFIC_REG1) & 0b1100 != 0 {
            return Err(String::from("DMA through window 2 in big-endian mode (ENDIAN_MODE_BAR2)"));
        }
        let scb_code = self.register(offsets::MISC_MISC_CTRL) >> 27;
        if scb_code == 0 || offset + length as u64 > 1u64 << (scb_code + 15) {
            return Err(format!("DMA to memory {offset:#x} beyond SCB0_SIZE code {scb_code}"));
        }
        Ok(offset)
    }

    /// BCM2712: every window has its UBUS remap, which must be enabled.
    fn bcm2712_inbound(&self, n: usize, offset: u64) -> Result<u64, String> {
        let low = self.register(regs::inbound_window_remap(n));
        let high = self.register(regs::inbound_window_remap(n) + 4);
        if low & 1 == 0 {
            return Err(format!("DMA through inbound window {n} whose UBUS remap has ACCESS_EN clear"));
        }
        Ok((u64::from(high & 0xff) << 32 | u64::from(low & !0xfff)) + offset)
    }
}

/// The model; blocks, CPU windows and the inbound view are handles onto it.
pub struct RootComplexModel<'a> {
    state: Rc<RefCell<State>>,
    clock: &'a dyn Clock,
    device_registers: Option<&'a dyn RegisterIo>,
}

impl<'a> RootComplexModel<'a> {
    pub fn new(config: ModelConfig, clock: &'a dyn Clock) -> Self {
        RootComplexModel { state: Rc::new(RefCell::new(State::new(config))), clock, device_registers: None }
    }

    /// Connects a device: its configuration space and what its BAR 0 holds.
    pub fn with_device(mut self, function: SimulatedFunction, bar0: &'a dyn RegisterIo) -> Self {
        self.state.borrow_mut().device = Some(function);
        self.device_registers = Some(bar0);
        self
    }

    fn now_ns(&self) -> u64 {
        blockdev::ticks_to_ns(self.clock.now_ticks(), self.clock.ticks_per_second())
    }

    pub fn block(&self, block: Block) -> ModelBlock<'_, 'a> {
        ModelBlock { model: self, block }
    }

    /// CPU addresses `cpu_base..cpu_base + length_bytes` as the driver reaches them.
    pub fn cpu_window(&self, cpu_base: u64, length_bytes: usize) -> CpuWindow<'_, 'a> {
        CpuWindow { model: self, cpu_base, length_bytes }
    }

    /// The inbound decoding, for `ArenaPlatform::set_bus_view`.
    pub fn inbound(&self) -> Rc<dyn BusView> {
        Rc::new(InboundView(self.state.clone()))
    }

    pub fn violations(&self) -> Vec<String> {
        self.state.borrow().violations.clone()
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "root complex model: {violations:#?}");
    }

    pub fn writes(&self) -> Vec<LoggedWrite> {
        self.state.borrow().writes.clone()
    }

    pub fn bridge_in_reset(&self) -> bool {
        self.state.borrow().bridge_in_reset()
    }

    pub fn reset_banks(&self) -> [u32; 2] {
        self.state.borrow().reset_banks
    }

    pub fn rescal_runs(&self) -> usize {
        self.writes().iter().filter(|w| w.block == Block::Rescal && w.value & rescal::BIT != 0).count()
    }
}

/// One register block of the model, as the driver's `RegisterIo`.
#[derive(Clone, Copy)]
pub struct ModelBlock<'m, 'a> {
    model: &'m RootComplexModel<'a>,
    block: Block,
}

impl RegisterIo for ModelBlock<'_, '_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let now_ns = self.model.now_ns();
        let mut state = self.model.state.borrow_mut();
        match self.block {
            Block::RootComplex => state.read_root_complex(offset_bytes, now_ns),
            Block::ResetController => state.read_reset_controller(offset_bytes),
            Block::Rescal => state.read_rescal(offset_bytes),
            Block::Pcie2 => state.read_pcie2(offset_bytes),
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let now_ns = self.model.now_ns();
        let mut state = self.model.state.borrow_mut();
        state.writes.push(LoggedWrite { block: self.block, offset: offset_bytes, value, at_ns: now_ns });
        match self.block {
            Block::RootComplex => state.write_root_complex(offset_bytes, value, now_ns),
            Block::ResetController => state.write_reset_controller(offset_bytes, value),
            Block::Rescal => state.write_rescal(offset_bytes, value),
            Block::Pcie2 => {
                state.violation(format!("write of {value:#x} to pcie2 register {offset_bytes:#x}"))
            }
        }
    }

    fn read64(&self, offset_bytes: usize) -> u64 {
        self.model
            .state
            .borrow_mut()
            .violation(format!("64-bit access to {:?} register {offset_bytes:#x}", self.block));
        u64::MAX
    }

    fn write64(&self, offset_bytes: usize, _value: u64) {
        self.model
            .state
            .borrow_mut()
            .violation(format!("64-bit access to {:?} register {offset_bytes:#x}", self.block));
    }
}

/// CPU accesses to an outbound window, routed to the device's BAR 0.
#[derive(Clone, Copy)]
pub struct CpuWindow<'m, 'a> {
    model: &'m RootComplexModel<'a>,
    cpu_base: u64,
    length_bytes: usize,
}

impl CpuWindow<'_, '_> {
    /// The device register offset for `offset_bytes`, or `None` after recording why not.
    fn route(&self, offset_bytes: usize, width: usize) -> Option<usize> {
        assert!(offset_bytes + width <= self.length_bytes, "access beyond the mapped window");
        let cpu = self.cpu_base + offset_bytes as u64;
        let now_ns = self.model.now_ns();
        let mut state = self.model.state.borrow_mut();
        if width == 8 && state.soc() == Soc::Bcm2711 {
            state
                .violation(format!("64-bit access to CPU {cpu:#x}: BCM2711's PCIe cannot carry 64-bit MMIO"));
            return None;
        }
        // The borrow ends here: the device may DMA back through the inbound view.
        state.route_cpu_access(cpu, now_ns).map_err(|problem| state.violation(problem)).ok()
    }

    fn device(&self) -> &dyn RegisterIo {
        self.model.device_registers.expect("a device is attached")
    }
}

impl RegisterIo for CpuWindow<'_, '_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        match self.route(offset_bytes, 4) {
            Some(offset) => self.device().read32(offset),
            None => u32::MAX,
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        if let Some(offset) = self.route(offset_bytes, 4) {
            self.device().write32(offset, value);
        }
    }

    fn read64(&self, offset_bytes: usize) -> u64 {
        match self.route(offset_bytes, 8) {
            Some(offset) => self.device().read64(offset),
            None => u64::MAX,
        }
    }

    fn write64(&self, offset_bytes: usize, value: u64) {
        if let Some(offset) = self.route(offset_bytes, 8) {
            self.device().write64(offset, value);
        }
    }
}

/// The device's DMA through the inbound windows.
struct InboundView(Rc<RefCell<State>>);

impl BusView for InboundView {
    fn to_physical(&self, bus_address: u64, length_bytes: usize) -> Option<u64> {
        let mut state = self.0.borrow_mut();
        state.route_dma(bus_address, length_bytes).map_err(|problem| state.violation(problem)).ok()
    }
}
