//! A DWC3 core around the simulated xHCI, as RP1 has them: the xHCI's registers at offset 0, the
//! DWC3 global registers from 0xC100 (Linux `drivers/usb/dwc3/core.h`). Strict where the order
//! matters: the xHCI's registers are only there in host mode (GCTL.PRTCAPDIR = 1), so an HCRST in
//! another mode is a violation, and so is a DWC3 setting written after HCRST (Linux sets the core
//! up before `xhci-plat` resets the controller). GSNPSID is read-only; other offsets are errors.
//! Reset values nobody documents are chosen so that a forgotten setting shows.
#![forbid(unsafe_code)]

extern crate std;

use super::{SimXhci, REGISTER_BYTES};
use crate::usb::dwc3::offsets;
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec::Vec;

/// Bytes of the block (RP1 gives each controller 1 MiB: `rp1.dtsi` `reg`).
pub const BLOCK_BYTES: usize = 1 << 20;

struct Globals {
    registers: BTreeMap<usize, u32>,
    reset_seen: bool,
    violations: Vec<String>,
}

pub struct SimDwc3<'a> {
    xhci: &'a SimXhci<'a>,
    /// Where USBCMD is (the xHCI's CAPLENGTH).
    usbcmd_offset: usize,
    globals: RefCell<Globals>,
}

impl<'a> SimDwc3<'a> {
    /// A core with GSNPSID `snpsid` (0x5533xxxx DWC_usb3, 0x3331xxxx DWC_usb31), in device mode.
    pub fn new(xhci: &'a SimXhci<'a>, capability_length: u8, snpsid: u32) -> Self {
        let registers = [
            (offsets::GSBUSCFG1, 0x0000_1300),
            (offsets::GTXTHRCFG, 0),
            (offsets::GCTL, 0x30c1_2004),
            (offsets::GUCTL1, 0x0004_0000),
            (offsets::GSNPSID, snpsid),
            (offsets::GUSB3PIPECTL0, 0x0100_0002),
        ]
        .into_iter()
        .collect();
        SimDwc3 {
            xhci,
            usbcmd_offset: usize::from(capability_length),
            globals: RefCell::new(Globals { registers, reset_seen: false, violations: Vec::new() }),
        }
    }

    pub fn register(&self, offset: usize) -> u32 {
        self.globals.borrow().registers[&offset]
    }

    pub fn violations(&self) -> Vec<String> {
        let mut all = self.globals.borrow().violations.clone();
        all.extend(self.xhci.violations());
        all
    }

    fn in_host_mode(&self) -> bool {
        (self.register(offsets::GCTL) >> 12) & 0b11 == 1
    }
}

impl RegisterIo for SimDwc3<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        if offset_bytes < REGISTER_BYTES {
            return self.xhci.read32(offset_bytes);
        }
        let mut globals = self.globals.borrow_mut();
        match globals.registers.get(&offset_bytes) {
            Some(value) => *value,
            None => {
                globals.violations.push(format!("read of DWC3 register {offset_bytes:#x}"));
                u32::MAX
            }
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        if offset_bytes < REGISTER_BYTES {
            if offset_bytes == self.usbcmd_offset && value & (1 << 1) != 0 {
                if !self.in_host_mode() {
                    let gctl = self.register(offsets::GCTL);
                    self.globals
                        .borrow_mut()
                        .violations
                        .push(format!("HCRST with the core not in host mode (GCTL {gctl:#010x})"));
                }
                self.globals.borrow_mut().reset_seen = true;
            }
            self.xhci.write32(offset_bytes, value);
            return;
        }
        let mut globals = self.globals.borrow_mut();
        if globals.reset_seen {
            globals.violations.push(format!("DWC3 register {offset_bytes:#x} written after HCRST"));
        }
        match offset_bytes {
            offsets::GSNPSID => globals.violations.push(String::from("write to the read-only GSNPSID")),
            _ if globals.registers.contains_key(&offset_bytes) => {
                globals.registers.insert(offset_bytes, value);
            }
            _ => globals.violations.push(format!("write of {value:#x} to DWC3 register {offset_bytes:#x}")),
        }
    }
}
