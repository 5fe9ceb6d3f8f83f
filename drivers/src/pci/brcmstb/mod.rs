//! The Broadcom STB PCIe root complex of BCM2711 (Pi 4, 400, CM4: pcie0) and BCM2712 (Pi 5:
//! pcie1, the external x1 connector), brought up from reset by its registers alone and used as a
//! [`ConfigAccess`] for the bus walk. The sequence follows Linux
//! `drivers/pci/controller/pcie-brcmstb.c` (`brcm_pcie_setup`, `brcm_pcie_post_setup_bcm2712`,
//! `brcm_pcie_start_link`, `brcm_pcie_map_bus`), with the facts and orders collected in
//! docs/pcie-brcmstb.md §1-§5 and docs/hardware.md §3:
//!
//! 1. BCM2712: release the bridge's reset line and run RESCAL unless RP1's link on pcie2 is live;
//! 2. pulse the bridge reset, with PERST# asserted; power the SerDes up;
//! 3. bus interface (MISC_CTRL), inbound window for DMA, root port class, outbound windows,
//!    little-endian inbound data, every interrupt masked (polled only: no MSI);
//! 4. BCM2712: SerDes PLL for the 54 MHz reference over MDIO, UBUS/AXI error and timeout
//!    settings, QoS work-arounds;
//! 5. no ASPM, the link width the device tree's `num-lanes` allows, the speed limit
//!    (`pcie.gen`), CLKREQ# "safe" (reference clock always driven); BCM2712: the device tree's
//!    `brcm,vdm-qos-map`;
//! 6. L23_REQUEST and HARD_DEBUG's PERST_ASSERT cleared whatever the firmware left, PERST#
//!    released (after `pcie.perst-ms` of reference clock if asked), 100 ms, link poll;
//! 7. CRS software visibility, so that a device still starting answers "retry" (Vendor ID 0x0001)
//!    instead of stalling the CPU; the bus walk waits for it (`pci::ready`); BCM2711 with
//!    `brcm,enable-ssc`: spread-spectrum clocking.
//!
//! Configuration reads of the root port go to the controller's own registers; everything below
//! goes through EXT_CFG_INDEX and the 4 KiB data window, and only while the link is up (an access
//! without a link aborts the CPU).
#![forbid(unsafe_code)]

pub mod mdio;
pub mod options;
pub mod regs;
pub mod resets;
pub mod soc;
pub mod windows;

#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;

use super::{ConfigAccess, FunctionAddress, HostWindows};
use core::fmt;
use hal::mmio::RegisterIo;
use hal::platform::{wait_until, BusTranslation, Deadline, Platform};
use regs::{offsets, *};
pub use resets::{line_in_reset, link_access, Bcm2712Resets, Calibration, CalibrationError, LinkAccess};
pub use soc::Soc;
use windows::{outbound_list, outbound_window_values, InboundWindow, OutboundWindowValues, WindowProblem};

/// The PCIe CEM specification's wait between PERST# release and the first configuration request
/// (Linux `PCIE_RESET_CONFIG_WAIT_MS`).
pub const PERST_TO_CONFIG_MS: u64 = 100;
/// After that, the link is polled for up to this long (Linux: 5 ms steps up to 100 ms).
pub const LINK_POLL_MS: u64 = 100;
/// PCI-to-PCI bridge class code written into the root port (it resets as an endpoint class).
pub const ROOT_PORT_CLASS: u32 = 0x06_04_00;

/// What the kernel asks of a root complex.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkPlan {
    /// Outbound windows (device tree `ranges`).
    pub outbound: HostWindows,
    /// How devices see memory (device tree `dma-ranges`), made into the inbound window.
    pub inbound: BusTranslation,
    /// Link generation limit, 1-3.
    pub gen: u8,
    /// Extra time with the reference clock running before PERST# is released.
    pub perst_extra_ms: u32,
    /// BCM2712: RP1's link on pcie2 is up (the firmware kept it with `pciex4_reset=0`), so the
    /// shared RESCAL is left alone.
    pub rp1_link_live: bool,
    /// The device tree's `num-lanes` (1 on pcie1): the link width the root port advertises.
    pub num_lanes: Option<u8>,
    /// BCM2712: the device tree's `brcm,vdm-qos-map` (pcie1 on the Pi 5: 0x33333333).
    pub vdm_qos_map: Option<u32>,
    /// BCM2711: the device tree's `brcm,enable-ssc`.
    pub spread_spectrum: bool,
}

/// What the link trained to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkUp {
    /// Current Link Speed (Link Status): 1 = 2.5, 2 = 5.0, 3 = 8.0 GT/s.
    pub speed_gen: u8,
    pub width: u8,
    pub target_gen: u8,
    /// From PERST# release to the link being up.
    pub waited_ms: u64,
    pub calibration: Option<Calibration>,
    /// Spread-spectrum clocking when asked: whether the SerDes reports it with its PLL locked.
    pub spread_spectrum: Option<bool>,
}

/// The console's words: "link up Gen2 x1 (5.0 GT/s), target Gen2, 104 ms after PERST# release".
impl fmt::Display for LinkUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "link up Gen{} x{} ({}), target Gen{}, {} ms after PERST# release",
            self.speed_gen,
            self.width,
            gen_rate(self.speed_gen),
            self.target_gen,
            self.waited_ms
        )?;
        match self.spread_spectrum {
            Some(true) => write!(f, " (SSC)")?,
            Some(false) => write!(f, " (SSC asked for, not reported locked)")?,
            None => {}
        }
        match self.calibration {
            Some(Calibration::Done) => write!(f, "; RESCAL calibrated"),
            Some(Calibration::KeptForRp1) => write!(f, "; RESCAL not re-run: RP1's link on pcie2 shares it"),
            None => Ok(()),
        }
    }
}

/// The transfer rate of a link generation.
pub fn gen_rate(gen: u8) -> &'static str {
    match gen {
        1 => "2.5 GT/s",
        2 => "5.0 GT/s",
        3 => "8.0 GT/s",
        _ => "unknown speed",
    }
}

/// Why the root complex did not come up; each carries the registers that explain it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BringUpError {
    Window(WindowProblem),
    Calibration(CalibrationError),
    Mdio(mdio::MdioTimeout),
    /// PHYLINKUP and DL_ACTIVE not both set.
    LinkDown {
        waited_ms: u64,
        status: u32,
    },
    /// PCIE_STATUS.PORT says endpoint mode.
    NotRootComplex {
        status: u32,
    },
}

impl From<WindowProblem> for BringUpError {
    fn from(problem: WindowProblem) -> Self {
        BringUpError::Window(problem)
    }
}

/// PCIE_STATUS in words.
pub struct StatusBits(pub u32);

impl fmt::Display for StatusBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = tock_registers::LocalRegisterCopy::<u32, PCIE_STATUS::Register>::new(self.0);
        write!(
            f,
            "PCIE_STATUS {:#010x}: PHYLINKUP {}, DL_ACTIVE {}, LINK_IN_L23 {}, PORT {} ({})",
            self.0,
            status.read(PCIE_STATUS::PCIE_PHYLINKUP),
            status.read(PCIE_STATUS::PCIE_DL_ACTIVE),
            status.read(PCIE_STATUS::PCIE_LINK_IN_L23),
            status.read(PCIE_STATUS::PCIE_PORT),
            if status.is_set(PCIE_STATUS::PCIE_PORT) { "root complex" } else { "endpoint" }
        )
    }
}

impl fmt::Display for BringUpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BringUpError::Window(problem) => write!(f, "{problem}"),
            BringUpError::Calibration(CalibrationError::DidNotStart { start }) => {
                write!(f, "RESCAL did not start (START {start:#x})")
            }
            BringUpError::Calibration(CalibrationError::Timeout { status }) => {
                write!(f, "RESCAL did not finish in 1 ms (STATUS {status:#x})")
            }
            BringUpError::Mdio(mdio::MdioTimeout { register, data }) => {
                write!(
                    f,
                    "SerDes MDIO write to register {register:#04x} did not finish (WR_DATA {data:#010x})"
                )
            }
            BringUpError::LinkDown { waited_ms, status } => {
                write!(f, "link down after {waited_ms} ms ({})", StatusBits(status))
            }
            BringUpError::NotRootComplex { status } => {
                write!(f, "the controller is in endpoint mode ({})", StatusBits(status))
            }
        }
    }
}

/// One root complex: its register block, BCM2712's resets, and time.
pub struct RootComplex<'p, R: RegisterIo, P: Platform> {
    soc: Soc,
    registers: R,
    resets: Option<Bcm2712Resets<R>>,
    platform: &'p P,
}

impl<'p, R: RegisterIo, P: Platform> RootComplex<'p, R, P> {
    /// BCM2711: the bridge reset and PERST# are in the block's RGR1_SW_INIT_1.
    pub fn bcm2711(registers: R, platform: &'p P) -> Self {
        RootComplex { soc: Soc::Bcm2711, registers, resets: None, platform }
    }

    /// BCM2712: the bridge reset is a reset controller line, PERST# is PCIE_CTRL.PERSTB.
    pub fn bcm2712(registers: R, resets: Bcm2712Resets<R>, platform: &'p P) -> Self {
        RootComplex { soc: Soc::Bcm2712, registers, resets: Some(resets), platform }
    }

    pub fn soc(&self) -> Soc {
        self.soc
    }

    pub fn status(&self) -> u32 {
        self.registers.read(MISC_PCIE_STATUS).get()
    }

    /// PHYLINKUP and DL_ACTIVE ([`resets::status_says_link_up`]).
    pub fn link_is_up(&self) -> bool {
        resets::status_says_link_up(self.registers.read(MISC_PCIE_STATUS))
    }

    /// Resets and configures the root complex, trains the link and waits for the device.
    pub fn bring_up(&self, plan: &LinkPlan) -> Result<LinkUp, BringUpError> {
        let inbound = InboundWindow::covering(self.soc, &plan.inbound)?;
        let outbound = outbound_values(&plan.outbound)?;
        let calibration = self.start_bridge(plan.rp1_link_live)?;
        self.reset_bridge();
        self.power_up_serdes();
        self.configure_bus_interface(&inbound);
        self.set_inbound_window(&inbound);
        self.registers.modify(RC_CFG_PRIV1_ID_VAL3, PRIV1_ID_VAL3::CLASS_CODE.val(ROOT_PORT_CLASS));
        for (index, values) in outbound.iter().enumerate() {
            self.set_outbound_window(index, values);
        }
        self.registers.modify(RC_CFG_VENDOR_SPECIFIC_REG1, VENDOR_SPECIFIC_REG1::ENDIAN_MODE_BAR2.val(0));
        self.mask_interrupts();
        self.limit_link_width(plan.num_lanes);
        if self.soc == Soc::Bcm2712 {
            self.set_up_bcm2712_serdes_and_bus(plan.vdm_qos_map)?;
        }
        let target_gen = plan.gen.clamp(1, self.soc.fastest_gen());
        self.prepare_link(target_gen);
        self.release_perst(plan.perst_extra_ms);
        let waited_ms = self.wait_for_link()?;
        let status = self.status();
        if status & PCIE_STATUS::PCIE_PORT::SET.value == 0 {
            return Err(BringUpError::NotRootComplex { status });
        }
        self.enable_crs_visibility();
        // Linux `brcm_pcie_start_link`: after the link; BCM2712 has no SSC (CFG_QUIRK_NO_SSC).
        let spread_spectrum = match (plan.spread_spectrum, self.soc) {
            (true, Soc::Bcm2711) => Some(
                mdio::enable_spread_spectrum(&self.registers, self.platform).map_err(BringUpError::Mdio)?,
            ),
            _ => None,
        };
        let link = self.registers.read(LINK_CONTROL_STATUS);
        Ok(LinkUp {
            speed_gen: link.read(LINK_CONTROL_STATUS::CURRENT_LINK_SPEED) as u8,
            width: link.read(LINK_CONTROL_STATUS::NEGOTIATED_LINK_WIDTH) as u8,
            target_gen,
            waited_ms,
            calibration,
            spread_spectrum,
        })
    }

    /// BCM2712: the bridge must be out of reset before anything in pcie1's page answers,
    /// RESCAL included; then RESCAL once.
    fn start_bridge(&self, rp1_link_live: bool) -> Result<Option<Calibration>, BringUpError> {
        let Some(resets) = &self.resets else {
            return Ok(None);
        };
        resets.deassert_bridge(self.platform);
        resets.calibrate(self.platform, rp1_link_live).map(Some).map_err(BringUpError::Calibration)
    }

    /// Bridge reset for 200 µs with PERST# asserted ("some bootloaders may deassert it"). On
    /// BCM2712 PERST# is a root complex register, so it is asserted once the bridge is out of
    /// reset (an access during the reset hangs the SoC: docs/hardware.md §3.3).
    fn reset_bridge(&self) {
        match &self.resets {
            None => {
                self.registers.modify(RGR1_SW_INIT_1, RGR1_SW_INIT_1::INIT::SET);
                self.registers.modify(RGR1_SW_INIT_1, RGR1_SW_INIT_1::PERST::SET);
                self.platform.delay_us(200);
                self.registers.modify(RGR1_SW_INIT_1, RGR1_SW_INIT_1::INIT::CLEAR);
            }
            Some(resets) => {
                resets.assert_bridge();
                self.platform.delay_us(200);
                resets.deassert_bridge(self.platform);
                self.registers.modify(MISC_PCIE_CTRL, PCIE_CTRL::PCIE_PERSTB::CLEAR);
            }
        }
    }

    fn power_up_serdes(&self) {
        self.registers.modify(self.soc.hard_debug(), HARD_DEBUG::SERDES_IDDQ::CLEAR);
        self.platform.delay_us(200);
    }

    /// MISC_CTRL: SCB access, all-ones for unsupported-request configuration reads, burst size,
    /// read completion boundary; on BCM2711 also the memory controller window size.
    fn configure_bus_interface(&self, inbound: &InboundWindow) {
        let mut change = MISC_CTRL::SCB_ACCESS_EN::SET
            + MISC_CTRL::CFG_READ_UR_MODE::SET
            + MISC_CTRL::MAX_BURST_SIZE.val(self.soc.max_burst_size())
            + MISC_CTRL::PCIE_RCB_MPS_MODE::SET
            + MISC_CTRL::PCIE_RCB_64B_MODE::SET;
        if self.soc == Soc::Bcm2711 {
            change += MISC_CTRL::SCB0_SIZE.val(inbound.scb_size_code());
        }
        self.registers.modify(MISC_MISC_CTRL, change);
    }

    /// BCM2711: window 2 maps PCI `pci_base..` to CPU 0 (windows 1 and 3 off: 1 would expose
    /// internal registers). BCM2712: window 1 with its UBUS remap to the CPU address, 2 and 3 off.
    fn set_inbound_window(&self, inbound: &InboundWindow) {
        let main = match self.soc {
            Soc::Bcm2711 => 2,
            Soc::Bcm2712 => 1,
        };
        for window in 1..=3 {
            let config = inbound_window_config(window);
            let (low, high) = if window == main {
                ((inbound.pci_base as u32 & !0x1f) | inbound.size_code(), (inbound.pci_base >> 32) as u32)
            } else {
                (0, 0)
            };
            self.registers.write32(config, low);
            self.registers.write32(config + 4, high);
            if self.soc == Soc::Bcm2712 {
                let remap = inbound_window_remap(window);
                let (low, high) = if window == main {
                    (
                        (inbound.cpu_base as u32 & !0xfff) | UBUS_REMAP::ACCESS_EN::SET.value,
                        (inbound.cpu_base >> 32) as u32,
                    )
                } else {
                    (0, 0)
                };
                self.registers.write32(remap, low);
                self.registers.write32(remap + 4, high);
            }
        }
    }

    fn set_outbound_window(&self, index: usize, values: &OutboundWindowValues) {
        self.registers.write32(offsets::MISC_CPU_2_PCIE_MEM_WIN0_LO + 8 * index, values.pci_low);
        self.registers.write32(offsets::MISC_CPU_2_PCIE_MEM_WIN0_HI + 8 * index, values.pci_high);
        self.registers.write32(offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT + 4 * index, values.base_limit);
        self.registers.write32(offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_HI + 8 * index, values.base_high);
        self.registers.write32(offsets::MISC_CPU_2_PCIE_MEM_WIN0_LIMIT_HI + 8 * index, values.limit_high);
    }

    /// Polled only: the CPU and MSI interrupt controllers cleared and masked, the MSI target off.
    fn mask_interrupts(&self) {
        for base in [self.soc.intr2_cpu_base(), offsets::MSI_INTR2_BASE] {
            self.registers.write32(base + offsets::INTR2_CLEAR, u32::MAX);
            self.registers.write32(base + offsets::INTR2_MASK_SET, u32::MAX);
        }
        self.registers.write32(offsets::MISC_MSI_BAR_CONFIG_LO, 0);
        self.registers.write32(offsets::MISC_MSI_BAR_CONFIG_HI, 0);
    }

    /// The device tree's `num-lanes`, when it differs from what the root port advertises: the
    /// Maximum Link Width it shows and the power-down of unused lanes (Linux `brcm_pcie_setup`:
    /// "assume that the chip's built-in link width capability information is incorrect").
    fn limit_link_width(&self, num_lanes: Option<u8>) {
        let Some(lanes @ 1..=4) = num_lanes else {
            return;
        };
        let capability = self.registers.read(RC_CFG_PRIV1_LINK_CAPABILITY);
        if capability.read(PRIV1_LINK_CAPABILITY::MAX_LINK_WIDTH) == u32::from(lanes) {
            return;
        }
        self.registers.modify(
            RC_CFG_PRIV1_LINK_CAPABILITY,
            PRIV1_LINK_CAPABILITY::MAX_LINK_WIDTH.val(u32::from(lanes)),
        );
        self.registers.modify(RC_PL_REG_PHY_CTL_1, PHY_CTL_1::REG_P2_POWERDOWN_ENA_NOSYNC::SET);
    }

    /// BCM2712's QoS from the device tree's `brcm,vdm-qos-map` (downstream Linux
    /// `brcm_pcie_post_setup_bcm2712`): VDM reception on, the map as the AXI QoS of every VDM
    /// priority (the same for both halves: "broken forwarding means no point separating panic
    /// priorities from normal"), vendor ID 0 matched, VDMs forwarded.
    fn set_vdm_qos_map(&self, map: u32) {
        let io = &self.registers;
        io.modify(MISC_CTRL_1, MISC_CTRL_1::EN_VDM_QOS_CONTROL::SET);
        io.write32(offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_LO, map);
        io.write32(offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_HI, map);
        io.write32(offsets::RC_TL_VDM_CTL1, 0);
        io.modify(
            RC_TL_VDM_CTL0,
            VDM_CTL0::VDM_ENABLED::SET + VDM_CTL0::VDM_IGNORETAG::SET + VDM_CTL0::VDM_IGNOREVNDRID::SET,
        );
    }

    /// BCM2712 (Linux `brcm_pcie_post_setup_bcm2712` and the downstream QoS fixes): PLL for the
    /// 54 MHz crystal, L1SS clock period, AXI errors as all-ones reads instead of aborts, UBUS and
    /// configuration retry timeouts (~250/240 ms), the QoS work-arounds, and the VDM QoS map
    /// when the device tree gives one.
    fn set_up_bcm2712_serdes_and_bus(&self, vdm_qos_map: Option<u32>) -> Result<(), BringUpError> {
        let io = &self.registers;
        mdio::set_up_pll_for_54_mhz(io, self.platform).map_err(BringUpError::Mdio)?;
        io.modify(RC_PL_PHY_CTL_15, PL_PHY_CTL_15::PM_CLK_PERIOD.val(0x12));
        io.modify(
            MISC_UBUS_CTRL,
            UBUS_CTRL::UBUS_PCIE_REPLY_ERR_DIS::SET + UBUS_CTRL::UBUS_PCIE_REPLY_DECERR_DIS::SET,
        );
        io.write32(offsets::MISC_AXI_READ_ERROR_DATA, u32::MAX);
        io.write32(offsets::MISC_UBUS_TIMEOUT, 0x0b2d_0000);
        io.write32(offsets::MISC_RC_CONFIG_RETRY_TIMEOUT, 0x0aba_0000);
        io.modify(
            MISC_AXI_INTF_CTRL,
            AXI_INTF_CTRL::REQFIFO_EN_QOS_PROPAGATION::CLEAR
                + AXI_INTF_CTRL::EN_RCLK_QOS_ARRAY_FIX::SET
                + AXI_INTF_CTRL::EN_QOS_UPDATE_TIMING_FIX::SET
                + AXI_INTF_CTRL::DIS_QOS_GATING_IN_MASTER::SET,
        );
        // One-lane root complexes (pcie1) and C1 chips lack the timing fix: limit the AXI
        // requests in flight instead.
        let axi = io.read(MISC_AXI_INTF_CTRL);
        if !axi.is_set(AXI_INTF_CTRL::EN_QOS_UPDATE_TIMING_FIX) {
            io.modify(MISC_AXI_INTF_CTRL, AXI_INTF_CTRL::MASTER_MAX_OUTSTANDING_REQUESTS.val(15));
        }
        io.modify(MISC_CTRL_1, MISC_CTRL_1::EN_VDM_QOS_CONTROL::CLEAR);
        if let Some(map) = vdm_qos_map {
            self.set_vdm_qos_map(map);
        }
        Ok(())
    }

    /// Before PERST# release: no ASPM advertised, the speed limit in Link Capabilities and Link
    /// Control 2, CLKREQ# debug and L1SS off so the reference clock runs unconditionally.
    fn prepare_link(&self, gen: u8) {
        let gen = u32::from(gen);
        self.registers.modify(
            RC_CFG_PRIV1_LINK_CAPABILITY,
            PRIV1_LINK_CAPABILITY::MAX_LINK_SPEED.val(gen) + PRIV1_LINK_CAPABILITY::ASPM_SUPPORT.val(0),
        );
        self.registers.modify(LINK_CONTROL_2, LINK_CONTROL_2::TARGET_LINK_SPEED.val(gen));
        self.registers.modify(
            self.soc.hard_debug(),
            HARD_DEBUG::CLKREQ_DEBUG_ENABLE::CLEAR + HARD_DEBUG::L1SS_ENABLE::CLEAR,
        );
    }

    /// PERST# released; with `extra_ms`, HARD_DEBUG.PERST_ASSERT holds the pad low that long
    /// with the reference clock running (`brcm,tperst-clk-ms`). A request to enter L2/L3 and a
    /// PERST_ASSERT the firmware left set are cleared first, whatever they read: either keeps the
    /// link from training and would look like "PHYLINKUP 0", a power problem (Linux clears
    /// L23_REQUEST in `brcm_pcie_turn_off` and PERST_ASSERT after the tperst wait).
    fn release_perst(&self, extra_ms: u32) {
        let hard_debug = self.soc.hard_debug();
        self.registers.modify(MISC_PCIE_CTRL, PCIE_CTRL::PCIE_L23_REQUEST::CLEAR);
        let hold = if extra_ms > 0 { HARD_DEBUG::PERST_ASSERT::SET } else { HARD_DEBUG::PERST_ASSERT::CLEAR };
        self.registers.modify(hard_debug, hold);
        match self.soc {
            Soc::Bcm2711 => self.registers.modify(RGR1_SW_INIT_1, RGR1_SW_INIT_1::PERST::CLEAR),
            Soc::Bcm2712 => self.registers.modify(MISC_PCIE_CTRL, PCIE_CTRL::PCIE_PERSTB::SET),
        }
        if extra_ms > 0 {
            self.platform.delay_us(u64::from(extra_ms) * 1000);
            self.registers.modify(hard_debug, HARD_DEBUG::PERST_ASSERT::CLEAR);
        }
    }

    /// 100 ms, then up to 100 ms more for PHYLINKUP and DL_ACTIVE; the time from release.
    fn wait_for_link(&self) -> Result<u64, BringUpError> {
        let since_release = Deadline::after_us(self.platform, 0);
        self.platform.delay_us(PERST_TO_CONFIG_MS * 1000);
        let up = wait_until(self.platform, LINK_POLL_MS * 1000, || self.link_is_up());
        let waited_ms = since_release.elapsed_us(self.platform) / 1000;
        if up {
            Ok(waited_ms)
        } else {
            Err(BringUpError::LinkDown { waited_ms, status: self.status() })
        }
    }

    /// CRS software visibility (PERST# clears it): configuration reads of a device still
    /// starting return vendor 0x0001 instead of stalling the CPU until the UBUS timeout.
    fn enable_crs_visibility(&self) {
        let root = self.registers.read(ROOT_CONTROL_CAPABILITIES);
        if root.is_set(ROOT_CONTROL_CAPABILITIES::CRS_SOFTWARE_VISIBILITY) {
            self.registers.modify(
                ROOT_CONTROL_CAPABILITIES,
                ROOT_CONTROL_CAPABILITIES::CRS_SOFTWARE_VISIBILITY_ENABLE::SET,
            );
        }
    }

    /// Where a configuration register is in the root complex's block; selects the function in
    /// EXT_CFG_INDEX for everything below the root port. `None`: no such function.
    fn config_register(&self, function: FunctionAddress, offset: u16) -> Option<usize> {
        let register = usize::from(offset) & !3;
        if register >= offsets::ROOT_PORT_CONFIG_BYTES || function.device > 31 || function.function > 7 {
            return None;
        }
        if function.bus == 0 {
            // Bus 0 holds the root port only; other slots lock up (docs/pcie-brcmstb.md §4).
            return (function.device == 0 && function.function == 0).then_some(register);
        }
        // The root port's link carries device 0 only, and without a link an access aborts.
        if (function.bus == 1 && function.device != 0) || !self.link_is_up() {
            return None;
        }
        let index = EXT_CFG_INDEX::BUS.val(u32::from(function.bus))
            + EXT_CFG_INDEX::DEVICE.val(u32::from(function.device))
            + EXT_CFG_INDEX::FUNCTION.val(u32::from(function.function));
        self.registers.write(EXT_CFG_INDEX, index);
        Some(offsets::EXT_CFG_DATA + register)
    }
}

/// The registers of the host's windows (at most two: `HostWindows` has a 32-bit and a 64-bit one;
/// the root complex has four).
fn outbound_values(
    windows: &HostWindows,
) -> Result<heapless::Vec<OutboundWindowValues, OUTBOUND_WINDOWS>, WindowProblem> {
    let mut values = heapless::Vec::new();
    for window in outbound_list(windows) {
        // Cannot fail: two windows at most.
        let _ = values.push(outbound_window_values(&window)?);
    }
    Ok(values)
}

impl<R: RegisterIo, P: Platform> ConfigAccess for RootComplex<'_, R, P> {
    fn read32(&self, function: FunctionAddress, offset: u16) -> u32 {
        match self.config_register(function, offset) {
            Some(register) => self.registers.read32(register),
            None => 0xffff_ffff,
        }
    }

    fn write32(&self, function: FunctionAddress, offset: u16, value: u32) {
        if let Some(register) = self.config_register(function, offset) {
            self.registers.write32(register, value);
        }
    }

    fn first_bus(&self) -> u8 {
        0
    }

    fn last_bus(&self) -> u8 {
        255
    }
}
