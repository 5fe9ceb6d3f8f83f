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
use hal::mmio::RegisterIo;

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

const GCTL_PRTCAPDIR_SHIFT: u32 = 12;
const GCTL_PRTCAPDIR_MASK: u32 = 0b11 << GCTL_PRTCAPDIR_SHIFT;
const PRTCAP_HOST: u32 = 1;
const GUSB3PIPECTL_DISRXDETINP3: u32 = 1 << 28;
const GUCTL1_PARKMODE_DISABLE_FSLS: u32 = 1 << 15;
const GUCTL1_PARKMODE_DISABLE_HS: u32 = 1 << 16;
const GUCTL1_PARKMODE_DISABLE_SS: u32 = 1 << 17;
const GSBUSCFG1_PIPETRANSLIMIT_SHIFT: u32 = 8;
const GSBUSCFG1_PIPETRANSLIMIT_MASK: u32 = 0xf << GSBUSCFG1_PIPETRANSLIMIT_SHIFT;

/// The core's IP, from GSNPSID bits 31:16 (`DWC3_GSNPS_ID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ip {
    /// DWC_usb3, "U3" (0x5533).
    Usb3,
    /// DWC_usb31 (0x3331) or DWC_usb32 (0x3332): the other threshold layout.
    Usb31,
}

/// The TX threshold fields of GTXTHRCFG for one IP: (count shift, count mask, burst shift,
/// burst mask, count select bit).
fn tx_threshold_fields(ip: Ip) -> (u32, u32, u32, u32, u32) {
    match ip {
        Ip::Usb3 => (24, 0xf, 16, 0xff, 1 << 29),
        Ip::Usb31 => (21, 0x1f, 16, 0x1f, 1 << 26),
    }
}

/// The values `rp1.dtsi` gives both controllers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dwc3Settings {
    pub axi_pipe_limit: u8,
    pub tx_max_burst: u8,
    pub tx_threshold_packets: u8,
}

pub const RP1_SETTINGS: Dwc3Settings =
    Dwc3Settings { axi_pipe_limit: 8, tx_max_burst: 8, tx_threshold_packets: 2 };

/// Why the settings were not applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dwc3Error {
    /// GSNPSID is not a DWC3's (all ones: nothing answers; 0xDEADDEAD: RP1's link is down).
    NotDwc3 { snpsid: u32 },
    /// The block given is too small to reach the global registers.
    RegistersTooSmall { register_bytes: usize },
}

impl fmt::Display for Dwc3Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dwc3Error::NotDwc3 { snpsid } => write!(f, "GSNPSID {snpsid:#010x} is not a DWC3 core's"),
            Dwc3Error::RegistersTooSmall { register_bytes } => write!(
                f,
                "{register_bytes:#x} bytes of registers do not reach the DWC3 globals (up to {REGISTER_BYTES_NEEDED:#x})"
            ),
        }
    }
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
        let mode = |value: u32| match value {
            1 => "host",
            2 => "device",
            3 => "OTG",
            _ => "none",
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

fn modify<R: RegisterIo>(registers: &R, offset: usize, clear: u32, set: u32) {
    let value = registers.read32(offset);
    registers.write32(offset, (value & !clear) | set);
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
    let snpsid = registers.read32(offsets::GSNPSID);
    let ip = match snpsid >> 16 {
        0x5533 => Ip::Usb3,
        0x3331 | 0x3332 => Ip::Usb31,
        _ => return Err(Dwc3Error::NotDwc3 { snpsid }),
    };
    let mode_before = (registers.read32(offsets::GCTL) & GCTL_PRTCAPDIR_MASK) >> GCTL_PRTCAPDIR_SHIFT;
    modify(registers, offsets::GCTL, GCTL_PRTCAPDIR_MASK, PRTCAP_HOST << GCTL_PRTCAPDIR_SHIFT);
    modify(registers, offsets::GUSB3PIPECTL0, 0, GUSB3PIPECTL_DISRXDETINP3);
    let park_mode_off =
        GUCTL1_PARKMODE_DISABLE_SS | GUCTL1_PARKMODE_DISABLE_HS | GUCTL1_PARKMODE_DISABLE_FSLS;
    modify(registers, offsets::GUCTL1, 0, park_mode_off);
    let pipe_limit = u32::from(settings.axi_pipe_limit.clamp(1, 16) - 1) << GSBUSCFG1_PIPETRANSLIMIT_SHIFT;
    modify(registers, offsets::GSBUSCFG1, GSBUSCFG1_PIPETRANSLIMIT_MASK, pipe_limit);
    let (count_shift, count_mask, burst_shift, burst_mask, select) = tx_threshold_fields(ip);
    let threshold = select
        | (u32::from(settings.tx_threshold_packets) & count_mask) << count_shift
        | (u32::from(settings.tx_max_burst) & burst_mask) << burst_shift;
    modify(registers, offsets::GTXTHRCFG, count_mask << count_shift | burst_mask << burst_shift, threshold);
    Ok(Dwc3Report { snpsid, ip, mode_before, settings })
}
