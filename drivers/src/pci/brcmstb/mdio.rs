//! The SerDes registers behind the root complex's MDIO port (Linux `brcm_pcie_mdio_write`,
//! `brcm_pcie_post_setup_bcm2712`; docs/pcie-brcmstb.md §1 step 5, docs/hardware.md §3.1): a
//! packet (port, register, command) in MDIO_ADDR, read back, then the data with DONE set in
//! WR_DATA, which the hardware clears when the write is done; a read polls RD_DATA until its DONE
//! bit is set. Also spread-spectrum clocking on BCM2711 (Linux `brcm_pcie_set_ssc`).
#![forbid(unsafe_code)]

use super::regs::{MDIO_ADDR, MDIO_DATA, RC_DL_MDIO_ADDR, RC_DL_MDIO_RD_DATA, RC_DL_MDIO_WR_DATA};
use hal::mmio::RegisterIo;
use hal::platform::{wait_until, Platform};

/// Linux polls the write for up to 100 µs.
pub const WRITE_TIMEOUT_US: u64 = 100;
/// The MDIO port of the root complex's SerDes (Linux `MDIO_PORT0`).
pub const SERDES_PORT: u32 = 0;
/// The SerDes registers are 16 bits wide: the part of RD_DATA's DATA field a read returns.
pub const SERDES_REGISTER_MASK: u32 = 0xffff;
/// MDIO register that selects the block the following registers address.
pub const SET_ADDR_OFFSET: u8 = 0x1f;
/// The PLL block of BCM2712's SerDes (the block Linux selects in `brcm_pcie_post_setup_bcm2712`).
pub const PLL_BLOCK: u16 = 0x1600;
/// Registers and values that let the PLL lock to the 54 MHz crystal instead of a 100 MHz
/// reference ("Allow a 54MHz (xosc) refclk source"); the link never trains without them. Linux's
/// `brcm_pcie_post_setup_bcm2712` writes them from two unnamed arrays (`regs[]`, `data[]`): no
/// public source names the registers or their fields.
pub const PLL_54_MHZ_SETTINGS: [(u8, u16); 7] = [
    (0x16, 0x50b9),
    (0x17, 0xbda1),
    (0x18, 0x0094),
    (0x19, 0x97b4),
    (0x1b, 0x5030),
    (0x1c, 0x5030),
    (0x1e, 0x0007),
];

/// The SSC block of BCM2711's SerDes (Linux `SSC_REGS_ADDR`), its control register
/// (`SSC_CNTL_OFFSET`: override enable `SSC_CNTL_OVRD_EN_MASK`, override value
/// `SSC_CNTL_OVRD_VAL_MASK`) and status register (`SSC_STATUS_OFFSET`: `SSC_STATUS_SSC_MASK`,
/// `SSC_STATUS_PLL_LOCK_MASK`).
pub const SSC_BLOCK: u16 = 0x1100;
pub const SSC_CONTROL: u8 = 0x02;
pub const SSC_CONTROL_OVERRIDE_ENABLE: u16 = 1 << 15;
pub const SSC_CONTROL_OVERRIDE_VALUE: u16 = 1 << 14;
pub const SSC_STATUS: u8 = 0x01;
pub const SSC_STATUS_SSC: u16 = 1 << 10;
pub const SSC_STATUS_PLL_LOCK: u16 = 1 << 11;
/// Linux waits 1-2 ms after turning SSC on before it reads the status.
pub const SSC_SETTLE_US: u64 = 2000;
/// Linux waits 200 µs (`udelay(200)`) for the PLL after the 54 MHz settings.
pub const PLL_SETTLE_US: u64 = 200;

/// An MDIO write that did not finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdioTimeout {
    pub register: u8,
    pub data: u32,
}

/// Writes `value` to SerDes register `register` of port 0.
pub fn write<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
    register: u8,
    value: u16,
) -> Result<(), MdioTimeout> {
    let packet =
        MDIO_ADDR::PORT.val(SERDES_PORT) + MDIO_ADDR::REGAD.val(u32::from(register)) + MDIO_ADDR::CMD::Write;
    registers.write(RC_DL_MDIO_ADDR, packet);
    // The read back orders the packet before the data (as Linux does).
    registers.read(RC_DL_MDIO_ADDR);
    registers.write(RC_DL_MDIO_WR_DATA, MDIO_DATA::DONE::SET + MDIO_DATA::DATA.val(u32::from(value)));
    let done = wait_until(platform, WRITE_TIMEOUT_US, || {
        !registers.read(RC_DL_MDIO_WR_DATA).is_set(MDIO_DATA::DONE)
    });
    if done {
        Ok(())
    } else {
        Err(MdioTimeout { register, data: registers.read(RC_DL_MDIO_WR_DATA).get() })
    }
}

/// Reads SerDes register `register` of port 0 (Linux `brcm_pcie_mdio_read`: up to 100 µs).
pub fn read<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
    register: u8,
) -> Result<u16, MdioTimeout> {
    let packet =
        MDIO_ADDR::PORT.val(SERDES_PORT) + MDIO_ADDR::REGAD.val(u32::from(register)) + MDIO_ADDR::CMD::Read;
    registers.write(RC_DL_MDIO_ADDR, packet);
    registers.read(RC_DL_MDIO_ADDR);
    let mut data = 0;
    let done = wait_until(platform, WRITE_TIMEOUT_US, || {
        let value = registers.read(RC_DL_MDIO_RD_DATA);
        data = value.get();
        value.is_set(MDIO_DATA::DONE)
    });
    if done {
        Ok((data & SERDES_REGISTER_MASK) as u16)
    } else {
        Err(MdioTimeout { register, data })
    }
}

/// Turns on spread-spectrum clocking (BCM2711 with `brcm,enable-ssc`, after the link is up) and
/// returns whether the SerDes reports SSC with its PLL locked.
pub fn enable_spread_spectrum<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
) -> Result<bool, MdioTimeout> {
    write(registers, platform, SET_ADDR_OFFSET, SSC_BLOCK)?;
    let control = read(registers, platform, SSC_CONTROL)?;
    write(
        registers,
        platform,
        SSC_CONTROL,
        control | SSC_CONTROL_OVERRIDE_ENABLE | SSC_CONTROL_OVERRIDE_VALUE,
    )?;
    platform.delay_us(SSC_SETTLE_US);
    let status = read(registers, platform, SSC_STATUS)?;
    Ok(status & SSC_STATUS_SSC != 0 && status & SSC_STATUS_PLL_LOCK != 0)
}

/// Programs BCM2712's SerDes PLL for the 54 MHz reference and waits [`PLL_SETTLE_US`] for it.
pub fn set_up_pll_for_54_mhz<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
) -> Result<(), MdioTimeout> {
    write(registers, platform, SET_ADDR_OFFSET, PLL_BLOCK)?;
    for (register, value) in PLL_54_MHZ_SETTINGS {
        write(registers, platform, register, value)?;
    }
    platform.delay_us(PLL_SETTLE_US);
    Ok(())
}
