//! USB standard requests and descriptors, and how a mass-storage interface is recognised (USB
//! 2.0 §9.3 setup packet, §9.4 standard requests, §9.6 descriptors; USB 3.2 §9.6.7 SuperSpeed
//! endpoint companion; USB Mass Storage Class Bulk-Only Transport 1.0 §3.1-3.2 class requests;
//! UAS pipe usage descriptor from USB Attached SCSI 1.0 §5.3.3.1; docs/usb-storage.md §4 steps
//! 4-6: the order of descriptors varies, so everything is collected before choosing).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Descriptor types (USB 2.0 Table 9-5, USB 3.2 Table 9-6).
pub mod descriptor_type {
    pub const DEVICE: u8 = 1;
    pub const CONFIGURATION: u8 = 2;
    pub const STRING: u8 = 3;
    pub const INTERFACE: u8 = 4;
    pub const ENDPOINT: u8 = 5;
    /// UAS Pipe Usage (class-specific, UAS §5.3.3.1).
    pub const PIPE_USAGE: u8 = 0x24;
    pub const SUPERSPEED_ENDPOINT_COMPANION: u8 = 0x30;
}

/// An 8-byte setup packet (USB 2.0 §9.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetupPacket {
    pub request_type: u8,
    pub request: u8,
    pub value: u16,
    pub index: u16,
    pub length: u16,
}

impl SetupPacket {
    /// The packet as the Setup Stage TRB carries it (little-endian, §9.3).
    pub fn to_u64(&self) -> u64 {
        u64::from(self.request_type)
            | (u64::from(self.request) << 8)
            | (u64::from(self.value) << 16)
            | (u64::from(self.index) << 32)
            | (u64::from(self.length) << 48)
    }

    /// Device-to-host (bit 7 of bmRequestType).
    pub fn is_in(&self) -> bool {
        self.request_type & 0x80 != 0
    }

    /// GET_DESCRIPTOR (§9.4.3).
    pub fn get_descriptor(kind: u8, index: u8, language: u16, length: u16) -> Self {
        SetupPacket {
            request_type: 0x80,
            request: 6,
            value: (u16::from(kind) << 8) | u16::from(index),
            index: language,
            length,
        }
    }

    /// SET_CONFIGURATION (§9.4.7).
    pub fn set_configuration(value: u8) -> Self {
        SetupPacket { request_type: 0x00, request: 9, value: u16::from(value), index: 0, length: 0 }
    }

    /// SET_INTERFACE (§9.4.10).
    pub fn set_interface(interface: u8, alternate: u8) -> Self {
        SetupPacket {
            request_type: 0x01,
            request: 11,
            value: u16::from(alternate),
            index: u16::from(interface),
            length: 0,
        }
    }

    /// CLEAR_FEATURE(ENDPOINT_HALT) (§9.4.1, feature selector 0).
    pub fn clear_endpoint_halt(endpoint_address: u8) -> Self {
        SetupPacket {
            request_type: 0x02,
            request: 1,
            value: 0,
            index: u16::from(endpoint_address),
            length: 0,
        }
    }

    /// Bulk-Only Mass Storage Reset (BOT §3.1: class, interface, request 0xFF).
    pub fn bulk_only_reset(interface: u8) -> Self {
        SetupPacket { request_type: 0x21, request: 0xff, value: 0, index: u16::from(interface), length: 0 }
    }

    /// Get Max LUN (BOT §3.2: request 0xFE, one byte back).
    pub fn get_max_lun(interface: u8) -> Self {
        SetupPacket { request_type: 0xa1, request: 0xfe, value: 0, index: u16::from(interface), length: 1 }
    }
}

/// Why descriptor bytes could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorError {
    /// Fewer bytes than the descriptor needs.
    Truncated { kind: u8, have: usize, need: usize },
    /// The descriptor's type byte is not the one asked for.
    WrongType { expected: u8, found: u8 },
    /// A bLength below 2 (the walk could not go on).
    BadLength { offset: usize, length: u8 },
}

impl fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DescriptorError::Truncated { kind, have, need } => {
                write!(f, "descriptor type {kind:#04x} has {have} bytes, needs {need}")
            }
            DescriptorError::WrongType { expected, found } => {
                write!(f, "descriptor type {found:#04x} where {expected:#04x} was asked for")
            }
            DescriptorError::BadLength { offset, length } => {
                write!(f, "descriptor at byte {offset} has bLength {length}")
            }
        }
    }
}

fn u16_at(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

fn check(bytes: &[u8], kind: u8, need: usize) -> Result<(), DescriptorError> {
    if bytes.len() < need {
        return Err(DescriptorError::Truncated { kind, have: bytes.len(), need });
    }
    if bytes[1] != kind {
        return Err(DescriptorError::WrongType { expected: kind, found: bytes[1] });
    }
    Ok(())
}

/// The device descriptor (§9.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceDescriptor {
    /// bcdUSB (0x0300 = 3.00).
    pub usb_version: u16,
    pub class: u8,
    pub subclass: u8,
    pub protocol: u8,
    /// bMaxPacketSize0: bytes below USB 3, an exponent (9 → 512) at SuperSpeed.
    pub max_packet_size0: u8,
    pub vendor_id: u16,
    pub product_id: u16,
    pub device_version: u16,
    pub manufacturer_index: u8,
    pub product_index: u8,
    pub serial_index: u8,
    pub configurations: u8,
}

impl DeviceDescriptor {
    pub const BYTES: usize = 18;

    /// Before the device has been asked.
    pub const EMPTY: DeviceDescriptor = DeviceDescriptor {
        usb_version: 0,
        class: 0,
        subclass: 0,
        protocol: 0,
        max_packet_size0: 0,
        vendor_id: 0,
        product_id: 0,
        device_version: 0,
        manufacturer_index: 0,
        product_index: 0,
        serial_index: 0,
        configurations: 0,
    };

    pub fn parse(bytes: &[u8]) -> Result<Self, DescriptorError> {
        check(bytes, descriptor_type::DEVICE, Self::BYTES)?;
        Ok(DeviceDescriptor {
            usb_version: u16_at(bytes, 2),
            class: bytes[4],
            subclass: bytes[5],
            protocol: bytes[6],
            max_packet_size0: bytes[7],
            vendor_id: u16_at(bytes, 8),
            product_id: u16_at(bytes, 10),
            device_version: u16_at(bytes, 12),
            manufacturer_index: bytes[14],
            product_index: bytes[15],
            serial_index: bytes[16],
            configurations: bytes[17],
        })
    }

    /// The control endpoint's packet size in bytes (USB 3.2 §9.6.1: 2^bMaxPacketSize0 for
    /// bcdUSB ≥ 3.0).
    pub fn control_packet_bytes(&self) -> u16 {
        if self.usb_version >= 0x0300 {
            1u16 << self.max_packet_size0.min(15)
        } else {
            u16::from(self.max_packet_size0)
        }
    }
}

/// One endpoint of an interface, with its companion and UAS pipe usage when present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    pub address: u8,
    pub attributes: u8,
    pub max_packet_bytes: u16,
    pub interval: u8,
    /// SuperSpeed companion bMaxBurst (0 without a companion).
    pub max_burst: u8,
    /// SuperSpeed companion bmAttributes 4:0 for bulk: the endpoint supports 2^n streams.
    pub max_streams_exponent: u8,
    /// UAS pipe ID (1 command, 2 status, 3 data-in, 4 data-out).
    pub pipe_id: Option<u8>,
}

impl EndpointInfo {
    pub fn is_in(&self) -> bool {
        self.address & 0x80 != 0
    }

    pub fn is_bulk(&self) -> bool {
        self.attributes & 3 == 2
    }

    /// Streams the endpoint supports (0 without).
    pub fn max_streams(&self) -> u32 {
        match self.max_streams_exponent {
            0 => 0,
            n => 1 << n.min(16),
        }
    }
}

/// One alternate setting of an interface (§9.6.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    pub number: u8,
    pub alternate: u8,
    pub class: u8,
    pub subclass: u8,
    pub protocol: u8,
    pub endpoints: Vec<EndpointInfo>,
}

/// A configuration with everything in it (§9.6.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigurationInfo {
    pub value: u8,
    pub total_length: u16,
    pub interfaces: Vec<InterfaceInfo>,
}

/// The total length of a configuration from its first 9 bytes.
pub fn configuration_total_length(header: &[u8]) -> Result<u16, DescriptorError> {
    check(header, descriptor_type::CONFIGURATION, 9)?;
    Ok(u16_at(header, 2))
}

impl ConfigurationInfo {
    /// Walks the whole configuration: interfaces, their endpoints, companions and pipe usage.
    pub fn parse(bytes: &[u8]) -> Result<Self, DescriptorError> {
        let total_length = configuration_total_length(bytes)?;
        let mut info = ConfigurationInfo { value: bytes[5], total_length, interfaces: Vec::new() };
        let end = usize::from(total_length).min(bytes.len());
        let mut offset = 0;
        while offset + 2 <= end {
            let length = bytes[offset];
            if length < 2 {
                return Err(DescriptorError::BadLength { offset, length });
            }
            let descriptor = &bytes[offset..(offset + usize::from(length)).min(end)];
            info.take(descriptor)?;
            offset += usize::from(length);
        }
        Ok(info)
    }

    fn take(&mut self, descriptor: &[u8]) -> Result<(), DescriptorError> {
        let kind = descriptor[1];
        match kind {
            descriptor_type::INTERFACE => {
                check(descriptor, kind, 9)?;
                self.interfaces.push(InterfaceInfo {
                    number: descriptor[2],
                    alternate: descriptor[3],
                    class: descriptor[5],
                    subclass: descriptor[6],
                    protocol: descriptor[7],
                    endpoints: Vec::new(),
                });
            }
            descriptor_type::ENDPOINT => {
                check(descriptor, kind, 7)?;
                if let Some(interface) = self.interfaces.last_mut() {
                    interface.endpoints.push(EndpointInfo {
                        address: descriptor[2],
                        attributes: descriptor[3],
                        max_packet_bytes: u16_at(descriptor, 4) & 0x7ff,
                        interval: descriptor[6],
                        max_burst: 0,
                        max_streams_exponent: 0,
                        pipe_id: None,
                    });
                }
            }
            descriptor_type::SUPERSPEED_ENDPOINT_COMPANION => {
                check(descriptor, kind, 6)?;
                if let Some(endpoint) = self.last_endpoint() {
                    endpoint.max_burst = descriptor[2];
                    if endpoint.is_bulk() {
                        endpoint.max_streams_exponent = descriptor[3] & 0x1f;
                    }
                }
            }
            descriptor_type::PIPE_USAGE => {
                check(descriptor, kind, 3)?;
                if let Some(endpoint) = self.last_endpoint() {
                    endpoint.pipe_id = Some(descriptor[2]);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn last_endpoint(&mut self) -> Option<&mut EndpointInfo> {
        self.interfaces.last_mut().and_then(|interface| interface.endpoints.last_mut())
    }
}

/// A string descriptor's text (UTF-16LE, §9.6.7), non-ASCII characters shown as '?', trailing
/// spaces and NULs removed.
pub fn string_from_descriptor(bytes: &[u8]) -> Result<String, DescriptorError> {
    check(bytes, descriptor_type::STRING, 2)?;
    let length = usize::from(bytes[0]).min(bytes.len());
    let mut text = String::new();
    for pair in bytes[2..length].chunks_exact(2) {
        let unit = u16::from_le_bytes([pair[0], pair[1]]);
        text.push(match unit {
            0x20..=0x7e => unit as u8 as char,
            0 => ' ',
            _ => '?',
        });
    }
    Ok(String::from(text.trim_end()))
}

/// The first language of string descriptor 0 (§9.6.7), or US English.
pub fn first_language(bytes: &[u8]) -> u16 {
    if bytes.len() >= 4 && bytes[1] == descriptor_type::STRING && bytes[0] >= 4 {
        u16_at(bytes, 2)
    } else {
        0x0409
    }
}

/// Mass storage interface class and the SCSI transparent command set (MSC Overview 1.4 §2).
pub const MASS_STORAGE_CLASS: u8 = 0x08;
pub const SCSI_SUBCLASS: u8 = 0x06;
/// Bulk-Only Transport and USB Attached SCSI protocol codes (MSC Overview 1.4 §3).
pub const BULK_ONLY_PROTOCOL: u8 = 0x50;
pub const UAS_PROTOCOL: u8 = 0x62;

/// A Bulk-Only interface: its alternate setting and two bulk endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkOnlyInterface {
    pub interface: u8,
    pub alternate: u8,
    pub bulk_in: EndpointInfo,
    pub bulk_out: EndpointInfo,
}

/// A UAS interface: its alternate setting and the four pipes found by their usage descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UasInterface {
    pub interface: u8,
    pub alternate: u8,
    pub command: EndpointInfo,
    pub status: EndpointInfo,
    pub data_in: EndpointInfo,
    pub data_out: EndpointInfo,
}

impl UasInterface {
    /// Streams all three streamed pipes support (the smallest), 0 below SuperSpeed.
    pub fn streams(&self) -> u32 {
        self.status.max_streams().min(self.data_in.max_streams()).min(self.data_out.max_streams())
    }
}

/// The mass storage transports a configuration offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MassStorageOffer {
    pub bulk_only: Option<BulkOnlyInterface>,
    pub uas: Option<UasInterface>,
}

impl MassStorageOffer {
    pub fn find(configuration: &ConfigurationInfo) -> Self {
        let mut offer = MassStorageOffer::default();
        for interface in &configuration.interfaces {
            if interface.class != MASS_STORAGE_CLASS || interface.subclass != SCSI_SUBCLASS {
                continue;
            }
            match interface.protocol {
                BULK_ONLY_PROTOCOL if offer.bulk_only.is_none() => offer.bulk_only = bulk_only(interface),
                UAS_PROTOCOL if offer.uas.is_none() => offer.uas = uas(interface),
                _ => {}
            }
        }
        offer
    }
}

fn bulk_only(interface: &InterfaceInfo) -> Option<BulkOnlyInterface> {
    let find =
        |want_in: bool| interface.endpoints.iter().copied().find(|e| e.is_bulk() && e.is_in() == want_in);
    Some(BulkOnlyInterface {
        interface: interface.number,
        alternate: interface.alternate,
        bulk_in: find(true)?,
        bulk_out: find(false)?,
    })
}

fn uas(interface: &InterfaceInfo) -> Option<UasInterface> {
    let pipe = |id: u8| interface.endpoints.iter().copied().find(|e| e.is_bulk() && e.pipe_id == Some(id));
    Some(UasInterface {
        interface: interface.number,
        alternate: interface.alternate,
        command: pipe(1).filter(|e| !e.is_in())?,
        status: pipe(2).filter(EndpointInfo::is_in)?,
        data_in: pipe(3).filter(EndpointInfo::is_in)?,
        data_out: pipe(4).filter(|e| !e.is_in())?,
    })
}

#[cfg(test)]
pub mod tests {
    extern crate std;
    use super::*;
    use std::vec;

    /// The SuperSpeed configuration of QEMU's usb-uas (hw/usb/dev-uas.c `desc_iface_super`).
    pub fn qemu_uas_configuration() -> Vec<u8> {
        let mut bytes = vec![9, 2, 0, 0, 1, 1, 0, 0xc0, 0];
        bytes.extend_from_slice(&[9, 4, 0, 0, 4, 0x08, 0x06, 0x62, 0]);
        for (address, pipe) in [(0x01u8, 1u8), (0x82, 2), (0x83, 3), (0x04, 4)] {
            bytes.extend_from_slice(&[7, 5, address, 2, 0x00, 0x04, 0]);
            let streams = if pipe == 1 { 0 } else { 4 };
            bytes.extend_from_slice(&[6, 0x30, 15, streams, 0, 0]);
            bytes.extend_from_slice(&[4, 0x24, pipe, 0]);
        }
        let total = bytes.len() as u16;
        bytes[2..4].copy_from_slice(&total.to_le_bytes());
        bytes
    }

    /// A bridge with BOT in alternate 0 and UAS in alternate 1, pipe usage before the companion.
    pub fn dual_configuration() -> Vec<u8> {
        let mut bytes = vec![9, 2, 0, 0, 1, 1, 0, 0x80, 50];
        bytes.extend_from_slice(&[9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0]);
        bytes.extend_from_slice(&[7, 5, 0x81, 2, 0x00, 0x04, 0, 6, 0x30, 3, 0, 0, 0]);
        bytes.extend_from_slice(&[7, 5, 0x02, 2, 0x00, 0x04, 0, 6, 0x30, 3, 0, 0, 0]);
        bytes.extend_from_slice(&[9, 4, 0, 1, 4, 0x08, 0x06, 0x62, 0]);
        for (address, pipe) in [(0x04u8, 1u8), (0x83, 2), (0x81, 3), (0x02, 4)] {
            bytes.extend_from_slice(&[7, 5, address, 2, 0x00, 0x04, 0]);
            bytes.extend_from_slice(&[4, 0x24, pipe, 0]);
            bytes.extend_from_slice(&[6, 0x30, 3, if pipe == 1 { 0 } else { 5 }, 0, 0]);
        }
        let total = bytes.len() as u16;
        bytes[2..4].copy_from_slice(&total.to_le_bytes());
        bytes
    }

    #[test]
    fn setup_packets_encode_little_endian() {
        assert_eq!(
            SetupPacket::get_descriptor(descriptor_type::DEVICE, 0, 0, 18).to_u64().to_le_bytes(),
            [0x80, 6, 0, 1, 0, 0, 18, 0]
        );
        assert_eq!(
            SetupPacket::get_descriptor(3, 2, 0x0409, 255).to_u64().to_le_bytes(),
            [0x80, 6, 2, 3, 9, 4, 255, 0]
        );
        assert_eq!(SetupPacket::set_configuration(1).to_u64().to_le_bytes(), [0, 9, 1, 0, 0, 0, 0, 0]);
        assert_eq!(SetupPacket::set_interface(0, 1).to_u64().to_le_bytes(), [1, 11, 1, 0, 0, 0, 0, 0]);
        assert_eq!(
            SetupPacket::clear_endpoint_halt(0x81).to_u64().to_le_bytes(),
            [2, 1, 0, 0, 0x81, 0, 0, 0]
        );
        assert_eq!(SetupPacket::bulk_only_reset(0).to_u64().to_le_bytes(), [0x21, 0xff, 0, 0, 0, 0, 0, 0]);
        assert_eq!(SetupPacket::get_max_lun(2).to_u64().to_le_bytes(), [0xa1, 0xfe, 0, 0, 2, 0, 1, 0]);
        assert!(SetupPacket::get_max_lun(0).is_in() && !SetupPacket::bulk_only_reset(0).is_in());
    }

    #[test]
    fn device_descriptors_decode_and_size_the_control_endpoint() {
        // QEMU usb-storage at SuperSpeed: bcdUSB 3.00, bMaxPacketSize0 9, 46f4:0001.
        let bytes = [18, 1, 0x00, 0x03, 0, 0, 0, 9, 0xf4, 0x46, 0x01, 0x00, 0, 0, 1, 2, 3, 1];
        let device = DeviceDescriptor::parse(&bytes).unwrap();
        assert_eq!((device.vendor_id, device.product_id), (0x46f4, 0x0001));
        assert_eq!(device.control_packet_bytes(), 512);
        assert_eq!((device.manufacturer_index, device.product_index, device.serial_index), (1, 2, 3));
        let mut high = bytes;
        high[2..4].copy_from_slice(&0x0200u16.to_le_bytes());
        high[7] = 64;
        assert_eq!(DeviceDescriptor::parse(&high).unwrap().control_packet_bytes(), 64);
        assert_eq!(
            DeviceDescriptor::parse(&bytes[..8]),
            Err(DescriptorError::Truncated { kind: 1, have: 8, need: 18 })
        );
        let mut wrong = bytes;
        wrong[1] = 2;
        assert_eq!(
            DeviceDescriptor::parse(&wrong),
            Err(DescriptorError::WrongType { expected: 1, found: 2 })
        );
    }

    #[test]
    fn qemu_uas_offers_uas_with_16_streams_and_no_bot() {
        let configuration = ConfigurationInfo::parse(&qemu_uas_configuration()).unwrap();
        assert_eq!(configuration.interfaces.len(), 1);
        let offer = MassStorageOffer::find(&configuration);
        assert!(offer.bulk_only.is_none());
        let uas = offer.uas.unwrap();
        assert_eq!(
            (uas.command.address, uas.status.address, uas.data_in.address, uas.data_out.address),
            (1, 0x82, 0x83, 4)
        );
        assert_eq!(uas.streams(), 16);
        assert_eq!(uas.data_in.max_burst, 15);
        assert_eq!(uas.command.max_streams(), 0);
    }

    #[test]
    fn both_transports_are_found_whatever_the_descriptor_order() {
        let configuration = ConfigurationInfo::parse(&dual_configuration()).unwrap();
        let offer = MassStorageOffer::find(&configuration);
        let bot = offer.bulk_only.unwrap();
        assert_eq!((bot.alternate, bot.bulk_in.address, bot.bulk_out.address), (0, 0x81, 0x02));
        let uas = offer.uas.unwrap();
        assert_eq!(uas.alternate, 1);
        assert_eq!((uas.command.address, uas.status.address, uas.data_in.address), (4, 0x83, 0x81));
        assert_eq!(uas.streams(), 32);
        assert_eq!(configuration.value, 1);
    }

    #[test]
    fn broken_configurations_are_refused_or_ignored() {
        let mut bytes = qemu_uas_configuration();
        bytes[9] = 0;
        assert_eq!(
            ConfigurationInfo::parse(&bytes),
            Err(DescriptorError::BadLength { offset: 9, length: 0 })
        );
        // An interface that is not mass storage offers nothing.
        let mut keyboard = qemu_uas_configuration();
        keyboard[9 + 5] = 0x03;
        assert_eq!(
            MassStorageOffer::find(&ConfigurationInfo::parse(&keyboard).unwrap()),
            MassStorageOffer::default()
        );
        // A UAS interface without pipe usage descriptors is not usable.
        let mut no_pipes = qemu_uas_configuration();
        for index in 0..no_pipes.len() - 3 {
            if no_pipes[index] == 4 && no_pipes[index + 1] == 0x24 {
                no_pipes[index + 1] = 0x25;
            }
        }
        assert_eq!(MassStorageOffer::find(&ConfigurationInfo::parse(&no_pipes).unwrap()).uas, None);
        assert_eq!(configuration_total_length(&[9, 2, 0x20, 0x01, 1, 1, 0, 0, 0]), Ok(0x120));
        assert!(configuration_total_length(&[9, 2]).is_err());
    }

    #[test]
    fn strings_and_languages_decode() {
        let bytes = [10, 3, b'Q', 0, b'E', 0, b'M', 0, b'U', 0];
        assert_eq!(string_from_descriptor(&bytes).unwrap(), "QEMU");
        let odd = [8, 3, 0xe9, 0, b'x', 0, b' ', 0];
        assert_eq!(string_from_descriptor(&odd).unwrap(), "?x");
        assert_eq!(first_language(&[4, 3, 0x09, 0x04]), 0x0409);
        assert_eq!(first_language(&[2, 3]), 0x0409);
        assert_eq!(first_language(&[4, 3, 0x07, 0x04]), 0x0407);
        assert!(string_from_descriptor(&[4, 2, 0, 0]).is_err());
    }
}
