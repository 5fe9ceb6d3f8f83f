//! The Synopsys DesignWare USB 3 cores of the Pi 5's RP1: xHCI registers at offset 0 and the
//! DWC3 global registers from 0xC100 of the same block (Linux `drivers/usb/dwc3/core.h`,
//! `DWC3_GLOBALS_REGS_START`). Linux's dwc3 core driver sets the core up before `xhci-plat`
//! resets the host controller, from the device tree's properties; for RP1 (`rp1.dtsi`,
//! `rp1_usb0`/`rp1_usb1`: `dr_mode = "host"`, `snps,axi-pipe-limit = 8`,
//! `snps,dis_rxdet_inp3_quirk`, `snps,parkmode-disable-{ss,hs,fsls}-quirk`,
//! `snps,tx-max-burst = 8`, `snps,tx-thr-num-pkt = 2`) that is, per `core.c`:
//!
//! - `dwc3_set_prtcap`: GCTL.PRTCAPDIR (bits 13:12) = 1, host;
//! - `dwc3_phy_setup`: GUSB3PIPECTL(0) bit 28 DISRXDETINP3;
//! - `dwc3_core_init`: GUCTL1 bits 17/16/15 PARKMODE_DISABLE_SS/HS/FSLS;
//! - `dwc3_config_threshold`: GTXTHRCFG packet count and burst with its count select bit, in the
//!   DWC_usb3 layout (count 27:24, burst 23:16, select 29) or the DWC_usb31 one (count 25:21,
//!   burst 20:16, select 26), chosen by GSNPSID;
//! - the AXI pipe limit: GSBUSCFG1.PIPETRANSLIMIT (bits 11:8), as the downstream Raspberry Pi
//!   kernel's "axi-pipe-limit" quirk does; the field holds the limit minus one (the encoding is
//!   not in a public source: the lower of the two readings is the safe one).
//!
//! The firmware may leave these set or not (unknown): they are written every time, before HCRST.
#![forbid(unsafe_code)]

use core::fmt;
use hal::mmio::{Reg, RegisterIo};
use tock_registers::fields::TryFromValue;
use tock_registers::register_bitfields;

/// Byte offsets from the start of the controller's block.
pub mod offsets {
    pub const GSBUSCFG1: usize = 0xc104;
    pub const GTXTHRCFG: usize = 0xc108;
    pub const GCTL: usize = 0xc110;
    pub const GUCTL1: usize = 0xc11c;
    pub const GSNPSID: usize = 0xc120;
    pub const GUSB3PIPECTL0: usize = 0xc2c0;
}

/// Bytes of the block the settings need to reach.
pub const REGISTER_BYTES_NEEDED: usize = offsets::GUSB3PIPECTL0 + 4;

register_bitfields! [u32,
    GCTL [
        /// Port capability direction (`DWC3_GCTL_PRTCAP_HOST`, `_DEVICE`, `_OTG`).
        PRTCAPDIR OFFSET(12) NUMBITS(2) [
            Host = 1,
            Device = 2,
            Otg = 3
        ]
    ],
    GUSB3PIPECTL [
        /// No receiver detection in P3 (`snps,dis_rxdet_inp3_quirk`).
        DISRXDETINP3 OFFSET(28) NUMBITS(1) []
    ],
    GUCTL1 [
        PARKMODE_DISABLE_FSLS OFFSET(15) NUMBITS(1) [],
        PARKMODE_DISABLE_HS OFFSET(16) NUMBITS(1) [],
        PARKMODE_DISABLE_SS OFFSET(17) NUMBITS(1) []
    ],
    GSBUSCFG1 [
        /// The AXI pipe limit minus one.
        PIPETRANSLIMIT OFFSET(8) NUMBITS(4) []
    ],
    GSNPSID [
        /// The core's IP (`DWC3_GSNPS_ID`, `DWC31_IP`, `DWC32_IP`).
        IP_ID OFFSET(16) NUMBITS(16) [
            Usb3 = 0x5533,
            Usb31 = 0x3331,
            Usb32 = 0x3332
        ]
    ],
    /// GTXTHRCFG in the DWC_usb3 layout.
    GTXTHRCFG_USB3 [
        MAX_TX_BURST OFFSET(16) NUMBITS(8) [],
        TX_PACKET_COUNT OFFSET(24) NUMBITS(4) [],
        TX_PACKET_COUNT_SELECT OFFSET(29) NUMBITS(1) []
    ],
    /// GTXTHRCFG in the DWC_usb31 layout.
    GTXTHRCFG_USB31 [
        MAX_TX_BURST OFFSET(16) NUMBITS(5) [],
        TX_PACKET_COUNT OFFSET(21) NUMBITS(5) [],
        TX_PACKET_COUNT_SELECT OFFSET(26) NUMBITS(1) []
    ]
];

const GCTL: Reg<GCTL::Register> = Reg::new(offsets::GCTL);
const GUSB3PIPECTL0: Reg<GUSB3PIPECTL::Register> = Reg::new(offsets::GUSB3PIPECTL0);
const GUCTL1: Reg<GUCTL1::Register> = Reg::new(offsets::GUCTL1);
const GSBUSCFG1: Reg<GSBUSCFG1::Register> = Reg::new(offsets::GSBUSCFG1);
const GSNPSID: Reg<GSNPSID::Register> = Reg::new(offsets::GSNPSID);
const GTXTHRCFG_USB3: Reg<GTXTHRCFG_USB3::Register> = Reg::new(offsets::GTXTHRCFG);
const GTXTHRCFG_USB31: Reg<GTXTHRCFG_USB31::Register> = Reg::new(offsets::GTXTHRCFG);
const PRTCAP_HOST: u32 = GCTL::PRTCAPDIR::Value::Host as u32;
/// The AXI pipe limits GSBUSCFG1.PIPETRANSLIMIT can hold (4 bits of the limit minus one).
const AXI_PIPE_LIMITS: core::ops::RangeInclusive<u8> = 1..=16;

/// The core's IP, from GSNPSID bits 31:16 (`DWC3_GSNPS_ID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ip {
    /// DWC_usb3, "U3" (0x5533).
    Usb3,
    /// DWC_usb31 (0x3331) or DWC_usb32 (0x3332): the other threshold layout.
    Usb31,
}

/// The values `rp1.dtsi` gives both controllers (`snps,axi-pipe-limit`, `snps,tx-max-burst`,
/// `snps,tx-thr-num-pkt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dwc3Settings {
    pub axi_pipe_limit: u8,
    pub tx_max_burst: u8,
    pub tx_threshold_packets: u8,
}

pub const RP1_SETTINGS: Dwc3Settings =
    Dwc3Settings { axi_pipe_limit: 8, tx_max_burst: 8, tx_threshold_packets: 2 };

/// Why the settings were not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Dwc3Error {
    /// GSNPSID is not a DWC3's (all ones: nothing answers; 0xDEADDEAD: RP1's link is down).
    #[error("GSNPSID {snpsid:#010x} is not a DWC3 core's")]
    NotDwc3 { snpsid: u32 },
    /// The block given is too small to reach the global registers.
    #[error(
        "{register_bytes:#x} bytes of registers do not reach the DWC3 globals (up to {needed:#x})",
        needed = REGISTER_BYTES_NEEDED
    )]
    RegistersTooSmall { register_bytes: usize },
}

/// What was found and set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dwc3Report {
    pub snpsid: u32,
    pub ip: Ip,
    /// GCTL.PRTCAPDIR before: 1 host, 2 device, 3 OTG.
    pub mode_before: u32,
    pub settings: Dwc3Settings,
}

/// `DWC3 core 0x5533330a (DWC_usb3) in host mode (was OTG); AXI pipe limit 8, ...`.
impl fmt::Display for Dwc3Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = |value: u32| match <GCTL::PRTCAPDIR::Value as TryFromValue<u32>>::try_from_value(value) {
            Some(GCTL::PRTCAPDIR::Value::Host) => "host",
            Some(GCTL::PRTCAPDIR::Value::Device) => "device",
            Some(GCTL::PRTCAPDIR::Value::Otg) => "OTG",
            None => "none",
        };
        let ip = match self.ip {
            Ip::Usb3 => "DWC_usb3",
            Ip::Usb31 => "DWC_usb31",
        };
        write!(f, "DWC3 core {:#010x} ({ip}) in host mode", self.snpsid)?;
        if self.mode_before != PRTCAP_HOST {
            write!(f, " (was {})", mode(self.mode_before))?;
        }
        write!(
            f,
            "; AXI pipe limit {}, TX threshold {} packets / burst {}, RX detect in P3 off, park mode off (rp1.dtsi)",
            self.settings.axi_pipe_limit, self.settings.tx_threshold_packets, self.settings.tx_max_burst,
        )
    }
}

/// Puts the core in host mode and applies `settings` the way Linux's dwc3 core does, before the
/// xHCI driver resets the host controller.
pub fn apply<R: RegisterIo>(
    registers: &R,
    register_bytes: usize,
    settings: Dwc3Settings,
) -> Result<Dwc3Report, Dwc3Error> {
    if register_bytes < REGISTER_BYTES_NEEDED {
        return Err(Dwc3Error::RegistersTooSmall { register_bytes });
    }
    let id = registers.read(GSNPSID);
    let snpsid = id.get();
    let ip = match id.read_as_enum(GSNPSID::IP_ID) {
        Some(GSNPSID::IP_ID::Value::Usb3) => Ip::Usb3,
        Some(GSNPSID::IP_ID::Value::Usb31 | GSNPSID::IP_ID::Value::Usb32) => Ip::Usb31,
        None => return Err(Dwc3Error::NotDwc3 { snpsid }),
    };
    let mode_before = registers.read(GCTL).read(GCTL::PRTCAPDIR);
    registers.modify(GCTL, GCTL::PRTCAPDIR.val(PRTCAP_HOST));
    registers.modify(GUSB3PIPECTL0, GUSB3PIPECTL::DISRXDETINP3::SET);
    registers.modify(
        GUCTL1,
        GUCTL1::PARKMODE_DISABLE_SS::SET
            + GUCTL1::PARKMODE_DISABLE_HS::SET
            + GUCTL1::PARKMODE_DISABLE_FSLS::SET,
    );
    let pipe_limit =
        u32::from(settings.axi_pipe_limit.clamp(*AXI_PIPE_LIMITS.start(), *AXI_PIPE_LIMITS.end()) - 1);
    registers.modify(GSBUSCFG1, GSBUSCFG1::PIPETRANSLIMIT.val(pipe_limit));
    let (packets, burst) = (u32::from(settings.tx_threshold_packets), u32::from(settings.tx_max_burst));
    match ip {
        Ip::Usb3 => registers.modify(
            GTXTHRCFG_USB3,
            GTXTHRCFG_USB3::TX_PACKET_COUNT_SELECT::SET
                + GTXTHRCFG_USB3::TX_PACKET_COUNT.val(packets & GTXTHRCFG_USB3::TX_PACKET_COUNT.mask)
                + GTXTHRCFG_USB3::MAX_TX_BURST.val(burst & GTXTHRCFG_USB3::MAX_TX_BURST.mask),
        ),
        Ip::Usb31 => registers.modify(
            GTXTHRCFG_USB31,
            GTXTHRCFG_USB31::TX_PACKET_COUNT_SELECT::SET
                + GTXTHRCFG_USB31::TX_PACKET_COUNT.val(packets & GTXTHRCFG_USB31::TX_PACKET_COUNT.mask)
                + GTXTHRCFG_USB31::MAX_TX_BURST.val(burst & GTXTHRCFG_USB31::MAX_TX_BURST.mask),
        ),
    }
    Ok(Dwc3Report { snpsid, ip, mode_before, settings })
}
