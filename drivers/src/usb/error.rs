//! What can go wrong in the USB driver, with the register values and codes that explain it.
#![forbid(unsafe_code)]

use super::descriptors::DescriptorError;
use super::trb::CompletionCode;
use core::fmt;
use hal::platform::{DmaAllocationError, UnreachableAddress};

/// The tag is a whole word so that the fields start 8-byte aligned (see `TransportError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum UsbError {
    /// The capability registers read as all ones: nothing answers at the base.
    NoController {
        first_word: u32,
    },
    /// The DWC3 core around the xHCI (RP1) could not be set up.
    Dwc3(super::dwc3::Dwc3Error),
    /// The register window is smaller than the registers the capabilities place in it.
    RegistersTooSmall {
        register_bytes: usize,
        needed_bytes: usize,
    },
    /// PAGESIZE does not offer 4 KiB pages.
    UnsupportedPageSize {
        pagesize: u32,
    },
    /// The firmware kept the controller (USBLEGSUP BIOS semaphore still set after 1 s).
    FirmwareOwned {
        legacy_support: u32,
    },
    /// USBSTS.HCH did not follow USBCMD.R/S.
    NotHalted {
        usbcmd: u32,
        usbsts: u32,
    },
    NotRunning {
        usbcmd: u32,
        usbsts: u32,
    },
    /// HCRST or CNR did not clear.
    ResetTimeout {
        usbcmd: u32,
        usbsts: u32,
    },
    /// USBSTS reports a host system error or host controller error.
    ControllerError {
        usbsts: u32,
    },
    Allocation(DmaAllocationError),
    Unreachable(UnreachableAddress),
    /// A command TRB got no completion in time.
    CommandTimeout {
        trb_type: u8,
        waited_ms: u64,
        usbsts: u32,
    },
    /// A command completed with an error code.
    CommandFailed {
        trb_type: u8,
        code: CompletionCode,
        slot_id: u8,
    },
    /// The command ring had no room (a command never completed).
    CommandRingFull,
    /// A port reset did not finish, or the port stayed disabled.
    PortResetTimeout {
        port: u8,
        portsc: u32,
    },
    PortNotEnabled {
        port: u8,
        portsc: u32,
    },
    /// The port reports a speed the driver does not know.
    UnknownSpeed {
        port: u8,
        portsc: u32,
    },
    /// A transfer on an endpoint got no event in time.
    TransferTimeout {
        slot_id: u8,
        dci: u8,
        waited_ms: u64,
    },
    /// A transfer ended with an error code; the endpoint state as the output context shows it.
    TransferFailed {
        slot_id: u8,
        dci: u8,
        code: CompletionCode,
        endpoint_state: u8,
    },
    /// A transfer ring had no room.
    TransferRingFull {
        dci: u8,
    },
    Descriptor(DescriptorError),
    /// The device offers no interface this driver can use.
    NotMassStorage {
        class: u8,
        subclass: u8,
        protocol: u8,
    },
    /// Streams are needed (UAS at SuperSpeed) and the controller has none.
    NoStreams,
}

fn trb_name(trb_type: u8) -> &'static str {
    use super::trb::trb_type::*;
    match trb_type {
        ENABLE_SLOT => "Enable Slot",
        DISABLE_SLOT => "Disable Slot",
        ADDRESS_DEVICE => "Address Device",
        CONFIGURE_ENDPOINT => "Configure Endpoint",
        EVALUATE_CONTEXT => "Evaluate Context",
        RESET_ENDPOINT => "Reset Endpoint",
        STOP_ENDPOINT => "Stop Endpoint",
        SET_TR_DEQUEUE_POINTER => "Set TR Dequeue Pointer",
        RESET_DEVICE => "Reset Device",
        NO_OP_COMMAND => "No Op",
        _ => "command",
    }
}

impl fmt::Display for UsbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            UsbError::NoController { first_word } => {
                write!(f, "no xHCI answers (CAPLENGTH/HCIVERSION = {first_word:#010x})")
            }
            UsbError::Dwc3(error) => write!(f, "DWC3 core: {error}"),
            UsbError::RegistersTooSmall { register_bytes, needed_bytes } => {
                write!(f, "the register window is {register_bytes} bytes, the registers need {needed_bytes}")
            }
            UsbError::UnsupportedPageSize { pagesize } => {
                write!(f, "PAGESIZE {pagesize:#x} does not offer 4 KiB pages")
            }
            UsbError::FirmwareOwned { legacy_support } => write!(
                f,
                "the firmware did not hand the controller over within 1 s (USBLEGSUP = {legacy_support:#010x})"
            ),
            UsbError::NotHalted { usbcmd, usbsts } => {
                write!(f, "controller did not halt: USBCMD = {usbcmd:#010x}, USBSTS = {usbsts:#010x}")
            }
            UsbError::NotRunning { usbcmd, usbsts } => {
                write!(f, "controller did not start: USBCMD = {usbcmd:#010x}, USBSTS = {usbsts:#010x}")
            }
            UsbError::ResetTimeout { usbcmd, usbsts } => write!(
                f,
                "controller reset did not finish (HCRST or CNR still set): USBCMD = {usbcmd:#010x}, USBSTS = {usbsts:#010x}"
            ),
            UsbError::ControllerError { usbsts } => write!(
                f,
                "controller error: USBSTS = {usbsts:#010x} (HSE bit 2: host system error, HCE bit 12: host controller error)"
            ),
            UsbError::Allocation(error) => write!(f, "{error}"),
            UsbError::Unreachable(error) => write!(f, "{error}"),
            UsbError::CommandTimeout { trb_type, waited_ms, usbsts } => write!(
                f,
                "{} command got no completion in {waited_ms} ms (USBSTS = {usbsts:#010x})",
                trb_name(trb_type)
            ),
            UsbError::CommandFailed { trb_type, code, slot_id } => {
                write!(f, "{} command failed: {code} (slot {slot_id})", trb_name(trb_type))
            }
            UsbError::CommandRingFull => write!(f, "the command ring is full"),
            UsbError::PortResetTimeout { port, portsc } => {
                write!(f, "port {port} reset did not finish (PORTSC = {portsc:#010x})")
            }
            UsbError::PortNotEnabled { port, portsc } => {
                write!(f, "port {port} stayed disabled after reset (PORTSC = {portsc:#010x})")
            }
            UsbError::UnknownSpeed { port, portsc } => {
                write!(f, "port {port} reports an unknown speed (PORTSC = {portsc:#010x})")
            }
            UsbError::TransferTimeout { slot_id, dci, waited_ms } => {
                write!(f, "transfer on slot {slot_id} endpoint {dci} got no event in {waited_ms} ms")
            }
            UsbError::TransferFailed { slot_id, dci, code, endpoint_state } => write!(
                f,
                "transfer on slot {slot_id} endpoint {dci} failed: {code}, endpoint {}",
                super::context::endpoint_state_name(endpoint_state)
            ),
            UsbError::TransferRingFull { dci } => write!(f, "the transfer ring of endpoint {dci} is full"),
            UsbError::Descriptor(error) => write!(f, "bad descriptor: {error}"),
            UsbError::NotMassStorage { class, subclass, protocol } => write!(
                f,
                "no SCSI mass storage interface with Bulk-Only or UAS transport (class {class:02x}:{subclass:02x}:{protocol:02x})"
            ),
            UsbError::NoStreams => write!(
                f,
                "UAS at SuperSpeed needs bulk streams, and this controller has none (HCCPARAMS1.MaxPSASize = 0)"
            ),
        }
    }
}

impl From<DmaAllocationError> for UsbError {
    fn from(error: DmaAllocationError) -> Self {
        UsbError::Allocation(error)
    }
}

impl From<hal::dma::DmaRegionError> for UsbError {
    fn from(error: hal::dma::DmaRegionError) -> Self {
        match error {
            hal::dma::DmaRegionError::Allocation(error) => UsbError::Allocation(error),
            hal::dma::DmaRegionError::Unreachable(error) => UsbError::Unreachable(error),
        }
    }
}

impl From<UnreachableAddress> for UsbError {
    fn from(error: UnreachableAddress) -> Self {
        UsbError::Unreachable(error)
    }
}

impl From<DescriptorError> for UsbError {
    fn from(error: DescriptorError) -> Self {
        UsbError::Descriptor(error)
    }
}
