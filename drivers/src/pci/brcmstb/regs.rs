//! Registers of the Broadcom STB PCIe root complex (BCM2711 pcie0, BCM2712 pcie1), the BCM2712
//! reset controller and its RESCAL block, in the names of Broadcom's register database as Linux
//! `drivers/pci/controller/pcie-brcmstb.c`, `drivers/reset/reset-brcmstb.c` and
//! `reset-brcmstb-rescal.c` use them (offsets and bits: docs/hardware.md §3.1,
//! docs/pcie-brcmstb.md §0-§4). Offsets are from the block's base; nothing else lives here.
#![forbid(unsafe_code)]

use hal::mmio::Reg;
use tock_registers::register_bitfields;

/// Byte offsets from the root complex base, common to both SoCs unless the name says.
pub mod offsets {
    /// The root port's own configuration space (bus 0, device 0) is the first 4 KiB.
    pub const ROOT_PORT_CONFIG_BYTES: usize = 0x1000;
    /// The PCI Express capability of the root port (`BRCM_PCIE_CAP_REGS`).
    pub const PCIE_CAPABILITY: usize = 0x0ac;
    /// Link Control (bits 15:0) and Link Status (bits 31:16): capability + 0x10.
    pub const LINK_CONTROL_STATUS: usize = PCIE_CAPABILITY + 0x10;
    /// Root Control (bits 15:0) and Root Capabilities (bits 31:16): capability + 0x1C.
    pub const ROOT_CONTROL_CAPABILITIES: usize = PCIE_CAPABILITY + 0x1c;
    /// Link Control 2 (bits 15:0): capability + 0x30.
    pub const LINK_CONTROL_2: usize = PCIE_CAPABILITY + 0x30;
    pub const RC_CFG_VENDOR_SPECIFIC_REG1: usize = 0x0188;
    pub const RC_CFG_PRIV1_ID_VAL3: usize = 0x043c;
    /// The writable copy of Link Capabilities (speed, ASPM) the capability shows.
    pub const RC_CFG_PRIV1_LINK_CAPABILITY: usize = 0x04dc;
    pub const RC_DL_MDIO_ADDR: usize = 0x1100;
    pub const RC_DL_MDIO_WR_DATA: usize = 0x1104;
    pub const RC_DL_MDIO_RD_DATA: usize = 0x1108;
    /// Transaction layer VDM control (BCM2712 QoS): CTL1 the vendor IDs matched, CTL0 enables.
    pub const RC_TL_VDM_CTL1: usize = 0x0a0c;
    pub const RC_TL_VDM_CTL0: usize = 0x0a20;
    /// PHY control 1: REG_P2_POWERDOWN_ENA_NOSYNC (bit 3) powers unused lanes down.
    pub const RC_PL_REG_PHY_CTL_1: usize = 0x1804;
    /// BCM2712: PHY control 15 (L1SS PM clock period).
    pub const RC_PL_PHY_CTL_15: usize = 0x184c;
    pub const MISC_MISC_CTRL: usize = 0x4008;
    /// Outbound window n: PCI address low/high at +8n.
    pub const MISC_CPU_2_PCIE_MEM_WIN0_LO: usize = 0x400c;
    pub const MISC_CPU_2_PCIE_MEM_WIN0_HI: usize = 0x4010;
    /// Inbound window ("RC BAR") 1..3 at +8(n-1); 4..10 from [`MISC_RC_BAR4_CONFIG_LO`].
    pub const MISC_RC_BAR1_CONFIG_LO: usize = 0x402c;
    pub const MISC_MSI_BAR_CONFIG_LO: usize = 0x4044;
    pub const MISC_MSI_BAR_CONFIG_HI: usize = 0x4048;
    /// BCM2712: how long the root complex retries a configuration request answered with CRS.
    pub const MISC_RC_CONFIG_RETRY_TIMEOUT: usize = 0x405c;
    /// BCM2712: PERSTB lives here.
    pub const MISC_PCIE_CTRL: usize = 0x4064;
    pub const MISC_PCIE_STATUS: usize = 0x4068;
    pub const MISC_REVISION: usize = 0x406c;
    /// Outbound window n: CPU base/limit in MB at +4n.
    pub const MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT: usize = 0x4070;
    /// Outbound window n: bits 39:32 of the CPU base/limit MB numbers at +8n.
    pub const MISC_CPU_2_PCIE_MEM_WIN0_BASE_HI: usize = 0x4080;
    pub const MISC_CPU_2_PCIE_MEM_WIN0_LIMIT_HI: usize = 0x4084;
    /// BCM2712 only from here to [`MISC_AXI_READ_ERROR_DATA`].
    pub const MISC_CTRL_1: usize = 0x40a0;
    pub const MISC_UBUS_CTRL: usize = 0x40a4;
    pub const MISC_UBUS_TIMEOUT: usize = 0x40a8;
    /// CPU target of inbound window 1..3 at +8(n-1) (low: address bits 31:12 + ACCESS_EN,
    /// high: bits 39:32); 4..10 from [`MISC_UBUS_BAR4_CONFIG_REMAP`].
    pub const MISC_UBUS_BAR1_CONFIG_REMAP: usize = 0x40ac;
    pub const MISC_RC_BAR4_CONFIG_LO: usize = 0x40d4;
    pub const MISC_UBUS_BAR4_CONFIG_REMAP: usize = 0x410c;
    /// BCM2712: AXI QoS per VDM priority level, 4 bits each (`brcm,vdm-qos-map`).
    pub const MISC_VDM_PRIORITY_TO_QOS_MAP_HI: usize = 0x4164;
    pub const MISC_VDM_PRIORITY_TO_QOS_MAP_LO: usize = 0x4168;
    pub const MISC_AXI_INTF_CTRL: usize = 0x416c;
    pub const MISC_AXI_READ_ERROR_DATA: usize = 0x4170;
    /// HARD_DEBUG: 0x4204 on BCM2711, 0x4304 on BCM2712.
    pub const MISC_HARD_PCIE_HARD_DEBUG_2711: usize = 0x4204;
    pub const MISC_HARD_PCIE_HARD_DEBUG_2712: usize = 0x4304;
    /// The CPU interrupt controller: 0x4300 on BCM2711, 0x4400 on BCM2712.
    pub const INTR2_CPU_BASE_2711: usize = 0x4300;
    pub const INTR2_CPU_BASE_2712: usize = 0x4400;
    pub const MSI_INTR2_BASE: usize = 0x4500;
    /// Offsets inside an INTR2 block.
    pub const INTR2_CLEAR: usize = 0x08;
    pub const INTR2_MASK_SET: usize = 0x10;
    /// The 4 KiB window onto the configuration space EXT_CFG_INDEX selects.
    pub const EXT_CFG_DATA: usize = 0x8000;
    pub const EXT_CFG_INDEX: usize = 0x9000;
    /// BCM2711: bridge reset and PERST#.
    pub const RGR1_SW_INIT_1: usize = 0x9210;
    /// Bytes of the root complex register block (device tree `reg`).
    pub const BLOCK_BYTES: usize = 0x9310;
}

/// Inbound windows ("RC BARs") a root complex has: 3 on BCM2711, 10 on BCM2712.
pub const INBOUND_WINDOWS_2711: usize = 3;
pub const INBOUND_WINDOWS_2712: usize = 10;
/// Outbound windows (`BRCM_NUM_PCIE_OUT_WINS`).
pub const OUTBOUND_WINDOWS: usize = 4;

/// RC_BARn_CONFIG_LO of inbound window `n` (1-based, as the hardware numbers them).
pub fn inbound_window_config(n: usize) -> usize {
    if n <= 3 {
        offsets::MISC_RC_BAR1_CONFIG_LO + 8 * (n - 1)
    } else {
        offsets::MISC_RC_BAR4_CONFIG_LO + 8 * (n - 4)
    }
}

/// UBUS_BARn_CONFIG_REMAP of inbound window `n` (BCM2712).
pub fn inbound_window_remap(n: usize) -> usize {
    if n <= 3 {
        offsets::MISC_UBUS_BAR1_CONFIG_REMAP + 8 * (n - 1)
    } else {
        offsets::MISC_UBUS_BAR4_CONFIG_REMAP + 8 * (n - 4)
    }
}

register_bitfields! [u32,
    pub RGR1_SW_INIT_1 [
        /// 1 = PERST# asserted (BCM2711).
        PERST OFFSET(0) NUMBITS(1) [],
        /// 1 = bridge held in reset (`RGR1_SW_INIT_1_INIT_GENERIC`).
        INIT OFFSET(1) NUMBITS(1) []
    ],
    pub MISC_CTRL [
        PCIE_RCB_64B_MODE OFFSET(7) NUMBITS(1) [],
        PCIE_RCB_MPS_MODE OFFSET(10) NUMBITS(1) [],
        SCB_ACCESS_EN OFFSET(12) NUMBITS(1) [],
        /// Unsupported-request configuration reads return all ones instead of aborting.
        CFG_READ_UR_MODE OFFSET(13) NUMBITS(1) [],
        /// 0 = 128, 1 = 256, 2 = 512 bytes.
        MAX_BURST_SIZE OFFSET(20) NUMBITS(2) [],
        /// BCM2711: log2(memory controller window) - 15.
        SCB0_SIZE OFFSET(27) NUMBITS(5) []
    ],
    pub PCIE_CTRL [
        PCIE_L23_REQUEST OFFSET(0) NUMBITS(1) [],
        /// BCM2712: 0 = PERST# asserted.
        PCIE_PERSTB OFFSET(2) NUMBITS(1) []
    ],
    pub PCIE_STATUS [
        PCIE_PHYLINKUP OFFSET(4) NUMBITS(1) [],
        PCIE_DL_ACTIVE OFFSET(5) NUMBITS(1) [],
        PCIE_LINK_IN_L23 OFFSET(6) NUMBITS(1) [],
        /// 1 = root complex mode.
        PCIE_PORT OFFSET(7) NUMBITS(1) []
    ],
    pub HARD_DEBUG [
        CLKREQ_DEBUG_ENABLE OFFSET(1) NUMBITS(1) [],
        /// Holds the PERST# pad low whatever PERSTB says (the `brcm,tperst-clk-ms` sequence).
        PERST_ASSERT OFFSET(3) NUMBITS(1) [],
        REFCLK_OVRD_ENABLE OFFSET(16) NUMBITS(1) [],
        REFCLK_OVRD_OUT OFFSET(20) NUMBITS(1) [],
        L1SS_ENABLE OFFSET(21) NUMBITS(1) [],
        /// SerDes powered down.
        SERDES_IDDQ OFFSET(27) NUMBITS(1) []
    ],
    pub WIN_BASE_LIMIT [
        /// CPU base, MB number bits 11:0.
        BASE OFFSET(4) NUMBITS(12) [],
        /// CPU limit (last byte), MB number bits 11:0.
        LIMIT OFFSET(20) NUMBITS(12) []
    ],
    pub WIN_HIGH [
        /// MB number bits 19:12 (CPU address bits 39:32).
        MB_HIGH OFFSET(0) NUMBITS(8) []
    ],
    pub RC_BAR_CONFIG_LO [
        /// Window size code (`brcm_pcie_encode_ibar_size`); 0 = disabled. Bits 31:12 are the
        /// PCI address.
        SIZE OFFSET(0) NUMBITS(5) []
    ],
    pub UBUS_REMAP [
        ACCESS_EN OFFSET(0) NUMBITS(1) []
    ],
    pub MDIO_ADDR [
        REGAD OFFSET(0) NUMBITS(16) [],
        PORT OFFSET(16) NUMBITS(4) [],
        /// Linux `MDIO_CMD_WRITE` (0) and `MDIO_CMD_READ` (1).
        CMD OFFSET(20) NUMBITS(1) [
            Write = 0,
            Read = 1
        ]
    ],
    pub MDIO_DATA [
        DATA OFFSET(0) NUMBITS(31) [],
        /// Write: set by software, cleared when done. Read: set when the data is valid.
        DONE OFFSET(31) NUMBITS(1) []
    ],
    pub LINK_CONTROL_STATUS [
        /// Link Status: Current Link Speed (1 = 2.5, 2 = 5.0, 3 = 8.0 GT/s).
        CURRENT_LINK_SPEED OFFSET(16) NUMBITS(4) [],
        /// Link Status: Negotiated Link Width.
        NEGOTIATED_LINK_WIDTH OFFSET(20) NUMBITS(6) []
    ],
    pub LINK_CONTROL_2 [
        TARGET_LINK_SPEED OFFSET(0) NUMBITS(4) []
    ],
    pub PRIV1_LINK_CAPABILITY [
        /// Supported Link Speeds as Link Capabilities shows them.
        MAX_LINK_SPEED OFFSET(0) NUMBITS(4) [],
        /// Maximum Link Width as Link Capabilities shows it (Linux mask 0x1f0).
        MAX_LINK_WIDTH OFFSET(4) NUMBITS(5) [],
        /// ASPM L0s (bit 10) and L1 (bit 11) advertised.
        ASPM_SUPPORT OFFSET(10) NUMBITS(2) []
    ],
    pub ROOT_CONTROL_CAPABILITIES [
        /// Root Control: CRS Software Visibility Enable.
        CRS_SOFTWARE_VISIBILITY_ENABLE OFFSET(4) NUMBITS(1) [],
        /// Root Capabilities: CRS Software Visibility.
        CRS_SOFTWARE_VISIBILITY OFFSET(16) NUMBITS(1) []
    ],
    pub VENDOR_SPECIFIC_REG1 [
        /// 0 = little endian.
        ENDIAN_MODE_BAR2 OFFSET(2) NUMBITS(2) []
    ],
    pub PRIV1_ID_VAL3 [
        CLASS_CODE OFFSET(0) NUMBITS(24) []
    ],
    pub PL_PHY_CTL_15 [
        PM_CLK_PERIOD OFFSET(0) NUMBITS(8) []
    ],
    pub MISC_CTRL_1 [
        EN_VDM_QOS_CONTROL OFFSET(5) NUMBITS(1) []
    ],
    pub VDM_CTL0 [
        VDM_ENABLED OFFSET(16) NUMBITS(1) [],
        VDM_IGNORETAG OFFSET(17) NUMBITS(1) [],
        VDM_IGNOREVNDRID OFFSET(18) NUMBITS(1) []
    ],
    pub PHY_CTL_1 [
        REG_P2_POWERDOWN_ENA_NOSYNC OFFSET(3) NUMBITS(1) []
    ],
    pub UBUS_CTRL [
        UBUS_PCIE_REPLY_ERR_DIS OFFSET(13) NUMBITS(1) [],
        UBUS_PCIE_REPLY_DECERR_DIS OFFSET(19) NUMBITS(1) []
    ],
    pub AXI_INTF_CTRL [
        MASTER_MAX_OUTSTANDING_REQUESTS OFFSET(0) NUMBITS(6) [],
        REQFIFO_EN_QOS_PROPAGATION OFFSET(7) NUMBITS(1) [],
        DIS_QOS_GATING_IN_MASTER OFFSET(11) NUMBITS(1) [],
        /// Reads back 0 on BCM2712 C1 and on the one-lane root complexes.
        EN_QOS_UPDATE_TIMING_FIX OFFSET(12) NUMBITS(1) [],
        EN_RCLK_QOS_ARRAY_FIX OFFSET(13) NUMBITS(1) []
    ],
    pub EXT_CFG_INDEX [
        FUNCTION OFFSET(12) NUMBITS(3) [],
        DEVICE OFFSET(15) NUMBITS(5) [],
        BUS OFFSET(20) NUMBITS(8) []
    ]
];

/// The BCM2712 reset controller (`brcm,brcmstb-reset`): banks of 32 lines, 0x18 bytes apart.
pub mod reset_controller {
    pub const SW_INIT_SET: usize = 0x00;
    pub const SW_INIT_CLEAR: usize = 0x04;
    pub const SW_INIT_STATUS: usize = 0x08;
    pub const BANK_BYTES: usize = 0x18;
    /// Bytes of the block (device tree `reg`, two banks).
    pub const BLOCK_BYTES: usize = 0x30;

    /// (register offset of the line's bank, bit) for `line`.
    pub fn bank_and_bit(line: u32) -> (usize, u32) {
        ((line >> 5) as usize * BANK_BYTES, 1 << (line & 31))
    }
}

/// The SATA/PCIe resistor calibration block (`brcm,bcm7216-pcie-sata-rescal`).
pub mod rescal {
    pub const START: usize = 0x0;
    pub const STATUS: usize = 0x8;
    /// START bit 0 starts a calibration; STATUS bit 0 says it finished.
    pub const BIT: u32 = 1;
    pub const BLOCK_BYTES: usize = 0x10;
}

/// The registers with fields, each with the bitfields its value decodes as.
pub const RGR1_SW_INIT_1: Reg<RGR1_SW_INIT_1::Register> = Reg::new(offsets::RGR1_SW_INIT_1);
pub const MISC_MISC_CTRL: Reg<MISC_CTRL::Register> = Reg::new(offsets::MISC_MISC_CTRL);
pub const MISC_PCIE_CTRL: Reg<PCIE_CTRL::Register> = Reg::new(offsets::MISC_PCIE_CTRL);
pub const MISC_PCIE_STATUS: Reg<PCIE_STATUS::Register> = Reg::new(offsets::MISC_PCIE_STATUS);
pub const MISC_HARD_PCIE_HARD_DEBUG_2711: Reg<HARD_DEBUG::Register> =
    Reg::new(offsets::MISC_HARD_PCIE_HARD_DEBUG_2711);
pub const MISC_HARD_PCIE_HARD_DEBUG_2712: Reg<HARD_DEBUG::Register> =
    Reg::new(offsets::MISC_HARD_PCIE_HARD_DEBUG_2712);
pub const LINK_CONTROL_STATUS: Reg<LINK_CONTROL_STATUS::Register> = Reg::new(offsets::LINK_CONTROL_STATUS);
pub const LINK_CONTROL_2: Reg<LINK_CONTROL_2::Register> = Reg::new(offsets::LINK_CONTROL_2);
pub const ROOT_CONTROL_CAPABILITIES: Reg<ROOT_CONTROL_CAPABILITIES::Register> =
    Reg::new(offsets::ROOT_CONTROL_CAPABILITIES);
pub const RC_CFG_PRIV1_LINK_CAPABILITY: Reg<PRIV1_LINK_CAPABILITY::Register> =
    Reg::new(offsets::RC_CFG_PRIV1_LINK_CAPABILITY);
pub const RC_CFG_VENDOR_SPECIFIC_REG1: Reg<VENDOR_SPECIFIC_REG1::Register> =
    Reg::new(offsets::RC_CFG_VENDOR_SPECIFIC_REG1);
pub const RC_CFG_PRIV1_ID_VAL3: Reg<PRIV1_ID_VAL3::Register> = Reg::new(offsets::RC_CFG_PRIV1_ID_VAL3);
pub const RC_PL_PHY_CTL_15: Reg<PL_PHY_CTL_15::Register> = Reg::new(offsets::RC_PL_PHY_CTL_15);
pub const MISC_CTRL_1: Reg<MISC_CTRL_1::Register> = Reg::new(offsets::MISC_CTRL_1);
pub const MISC_UBUS_CTRL: Reg<UBUS_CTRL::Register> = Reg::new(offsets::MISC_UBUS_CTRL);
pub const MISC_AXI_INTF_CTRL: Reg<AXI_INTF_CTRL::Register> = Reg::new(offsets::MISC_AXI_INTF_CTRL);
pub const EXT_CFG_INDEX: Reg<EXT_CFG_INDEX::Register> = Reg::new(offsets::EXT_CFG_INDEX);
pub const RC_DL_MDIO_ADDR: Reg<MDIO_ADDR::Register> = Reg::new(offsets::RC_DL_MDIO_ADDR);
pub const RC_DL_MDIO_WR_DATA: Reg<MDIO_DATA::Register> = Reg::new(offsets::RC_DL_MDIO_WR_DATA);
pub const RC_DL_MDIO_RD_DATA: Reg<MDIO_DATA::Register> = Reg::new(offsets::RC_DL_MDIO_RD_DATA);
pub const RC_TL_VDM_CTL0: Reg<VDM_CTL0::Register> = Reg::new(offsets::RC_TL_VDM_CTL0);
pub const RC_PL_REG_PHY_CTL_1: Reg<PHY_CTL_1::Register> = Reg::new(offsets::RC_PL_REG_PHY_CTL_1);
