//! Max Payload Size and Max Read Request Size (PCIe Base Specification 4.0 §7.5.3.3 Device
//! Capabilities, §7.5.3.4 Device Control). Every function resets to a 128-byte Max Payload Size;
//! a TLP larger than the receiver's setting is a malformed TLP, so the setting must be one that
//! every function on the path supports. After the bus walk barebench does what Raspberry Pi OS
//! does with its `pci=pcie_bus_safe` command line (Linux `drivers/pci/probe.c`,
//! `pcie_bus_configure_settings` with `PCIE_BUS_SAFE`): the payload is the smallest maximum any
//! PCI Express function of the walk supports, programmed on both ends of every link (root port,
//! bridges and endpoints), and endpoints read in requests of 512 bytes, the specification's
//! reset value and what the Pi 5 bootloader logs ("Max Payload Size set to 512/512 (was 128), Max
//! Read Rq 512", raspberrypi/rpi-eeprom#817). Linux takes the minimum per root port; the
//! walks here have one root port, or none (QEMU virt's integrated endpoints), so the minimum is
//! taken over the whole walk, which is never larger.
#![forbid(unsafe_code)]

use super::{offsets, ConfigAccess, FunctionAddress, PciFunction};

/// Configuration offset of the capability list pointer (PCI LB 3.0 §6.7).
const CAPABILITIES_POINTER: u16 = 0x34;
/// Status register bit 4 (bit 20 of the command/status dword): the capability list exists.
const STATUS_CAPABILITIES_LIST: u32 = 1 << 20;
/// The PCI Express capability's ID (PCIe Base 4.0 §7.5.3.1).
const PCI_EXPRESS_CAPABILITY_ID: u8 = 0x10;
/// Device Capabilities and Device Control/Status, from the capability.
const DEVICE_CAPABILITIES: u16 = 0x04;
const DEVICE_CONTROL: u16 = 0x08;
/// Device Control fields: Max Payload Size 7:5, Max Read Request Size 14:12 (128 << code).
const MAX_PAYLOAD_SHIFT: u32 = 5;
const MAX_READ_REQUEST_SHIFT: u32 = 12;
const SIZE_CODE_MASK: u32 = 0b111;
/// Device Capabilities bits 2:0: Max Payload Size Supported.
const PAYLOAD_SUPPORTED_MASK: u32 = 0b111;
/// The read request size endpoints get: 512 bytes (code 2).
pub const MAX_READ_REQUEST_BYTES: u16 = 512;
/// A capability list longer than this is a loop (48 = (256 - 64) / 4 dwords).
const MAX_CAPABILITIES: usize = 48;

/// A function's PCI Express capability: where it is and the payload sizes it supports and got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcieCapability {
    /// Configuration offset of the capability.
    pub offset: u16,
    /// Device Capabilities: Max Payload Size Supported, in bytes.
    pub max_payload_supported_bytes: u16,
    /// Device Control after the walk: Max Payload Size, in bytes.
    pub max_payload_bytes: u16,
    /// Device Control after the walk: Max Read Request Size, in bytes.
    pub max_read_request_bytes: u16,
}

/// What the walk programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadSettings {
    pub max_payload_bytes: u16,
    pub max_read_request_bytes: u16,
    /// The function whose support set the payload (the first of the smallest).
    pub limited_by: FunctionAddress,
    /// PCI Express functions programmed.
    pub functions: usize,
    /// Functions whose Device Control read back other sizes than asked (QEMU's devices keep
    /// their payload fields read-only), and the first of them; each function's line shows what
    /// it kept.
    pub kept: usize,
    pub first_kept: Option<FunctionAddress>,
}

/// `max payload 512 bytes (smallest supported: 01:00.0), read request 512 bytes`.
impl core::fmt::Display for PayloadSettings {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "max payload {} bytes (the smallest supported in the hierarchy, {}), read request {} bytes",
            self.max_payload_bytes, self.limited_by, self.max_read_request_bytes
        )?;
        if let Some(first) = self.first_kept {
            let plural = if self.kept == 1 { "" } else { "s" };
            write!(f, "; {} function{plural} kept other sizes (first {first})", self.kept)?;
        }
        Ok(())
    }
}

fn size_bytes(code: u32) -> u16 {
    128 << code.min(5)
}

fn size_code(bytes: u16) -> u32 {
    u32::from(bytes / 128).trailing_zeros()
}

/// Follows the capability list to the PCI Express capability.
pub fn find_pcie_capability<C: ConfigAccess + ?Sized>(
    config: &C,
    address: FunctionAddress,
) -> Option<PcieCapability> {
    if config.read32(address, offsets::COMMAND_STATUS) & STATUS_CAPABILITIES_LIST == 0 {
        return None;
    }
    let mut pointer = (config.read32(address, CAPABILITIES_POINTER) & 0xfc) as u16;
    for _ in 0..MAX_CAPABILITIES {
        if pointer < 0x40 {
            return None;
        }
        let header = config.read32(address, pointer);
        if header as u8 == PCI_EXPRESS_CAPABILITY_ID {
            let supported = config.read32(address, pointer + DEVICE_CAPABILITIES) & PAYLOAD_SUPPORTED_MASK;
            let control = config.read32(address, pointer + DEVICE_CONTROL);
            return Some(PcieCapability {
                offset: pointer,
                max_payload_supported_bytes: size_bytes(supported),
                max_payload_bytes: size_bytes((control >> MAX_PAYLOAD_SHIFT) & SIZE_CODE_MASK),
                max_read_request_bytes: size_bytes((control >> MAX_READ_REQUEST_SHIFT) & SIZE_CODE_MASK),
            });
        }
        pointer = ((header >> 8) & 0xfc) as u16;
    }
    None
}

/// Programs the smallest supported payload into every PCI Express function of `functions` and
/// 512-byte read requests into the endpoints; `None` when none has the capability.
pub fn configure<C: ConfigAccess + ?Sized>(
    config: &C,
    functions: &mut [PciFunction],
) -> Option<PayloadSettings> {
    let (limited_by, max_payload_bytes) = functions
        .iter()
        .filter_map(|function| function.pcie.map(|pcie| (function.address, pcie.max_payload_supported_bytes)))
        .min_by_key(|(_, bytes)| *bytes)?;
    let mut programmed = 0;
    let (mut kept, mut first_kept) = (0, None);
    for function in functions.iter_mut() {
        let Some(pcie) = function.pcie.as_mut() else {
            continue;
        };
        let register = pcie.offset + DEVICE_CONTROL;
        // Only Device Control: the upper half is Device Status, whose error bits are RW1C.
        let mut control = config.read32(function.address, register) & 0xffff;
        control &= !(SIZE_CODE_MASK << MAX_PAYLOAD_SHIFT);
        control |= size_code(max_payload_bytes) << MAX_PAYLOAD_SHIFT;
        if !function.is_bridge {
            control &= !(SIZE_CODE_MASK << MAX_READ_REQUEST_SHIFT);
            control |= size_code(MAX_READ_REQUEST_BYTES) << MAX_READ_REQUEST_SHIFT;
        }
        config.write32(function.address, register, control);
        let read_back = config.read32(function.address, register);
        pcie.max_payload_bytes = size_bytes((read_back >> MAX_PAYLOAD_SHIFT) & SIZE_CODE_MASK);
        pcie.max_read_request_bytes = size_bytes((read_back >> MAX_READ_REQUEST_SHIFT) & SIZE_CODE_MASK);
        programmed += 1;
        let asked_read_request = !function.is_bridge;
        if pcie.max_payload_bytes != max_payload_bytes
            || (asked_read_request && pcie.max_read_request_bytes != MAX_READ_REQUEST_BYTES)
        {
            kept += 1;
            first_kept.get_or_insert(function.address);
        }
    }
    Some(PayloadSettings {
        max_payload_bytes,
        max_read_request_bytes: MAX_READ_REQUEST_BYTES,
        limited_by,
        functions: programmed,
        kept,
        first_kept,
    })
}
