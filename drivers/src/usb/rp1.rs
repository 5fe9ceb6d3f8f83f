//! The Pi 5's RP1 USB controllers: a DWC3 core set up as Linux sets it up (`dwc3`), then the xHCI
//! inside it brought up like any other (`controller`).
#![forbid(unsafe_code)]

use super::controller::HostController;
use super::dwc3::{apply, Dwc3Report, RP1_SETTINGS};
use super::error::UsbError;
use alloc::string::String;
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Platform};

/// An RP1 controller: the DWC3 core set up as Linux does ([`apply`] with [`RP1_SETTINGS`]), then
/// the xHCI brought up (HCRST included). `register_bytes` covers the whole block, DWC3 globals
/// included; `xhci_bytes` the xHCI's part of it.
pub fn bring_up_rp1_controller<'p, R: RegisterIo, P: Platform>(
    registers: R,
    register_bytes: usize,
    platform: &'p P,
    dma: BusTranslation,
    label: String,
) -> Result<(HostController<'p, R, P>, Dwc3Report), UsbError> {
    let report = apply(&registers, register_bytes, RP1_SETTINGS).map_err(UsbError::Dwc3)?;
    let controller = HostController::bring_up(registers, register_bytes, platform, dma, label)?;
    Ok((controller, report))
}
