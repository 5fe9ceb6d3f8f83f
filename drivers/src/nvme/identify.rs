//! Identify data structures (NVMe Base Specification 1.4 §5.15.2: Identify Controller, Figure
//! 247; Identify Namespace, Figure 245; Active Namespace ID list, §5.15.2.2), decoded into the
//! fields the console shows (offsets as in docs/nvme-and-fio.md §1.4).
#![forbid(unsafe_code)]

use super::regs::Version;
use core::fmt;

/// Bytes of every Identify data structure.
pub const IDENTIFY_BYTES: usize = 4096;

/// Text fields are ASCII padded with spaces (NVMe 1.4 §1.5 "ASCII string"); anything else is
/// shown as `?` so that a broken controller cannot garble the console.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AsciiField<const N: usize> {
    bytes: [u8; N],
}

impl<const N: usize> AsciiField<N> {
    pub fn from_bytes(raw: &[u8]) -> Self {
        let mut bytes = [b' '; N];
        for (out, byte) in bytes.iter_mut().zip(raw) {
            *out = if byte.is_ascii_graphic() || *byte == b' ' {
                *byte
            } else if *byte == 0 {
                b' '
            } else {
                b'?'
            };
        }
        AsciiField { bytes }
    }

    /// The text without the padding.
    pub fn as_str(&self) -> &str {
        let text = core::str::from_utf8(&self.bytes).unwrap_or("?");
        text.trim_matches(' ')
    }
}

impl<const N: usize> fmt::Display for AsciiField<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> fmt::Debug for AsciiField<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

fn u16_at(data: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([data[offset], data[offset + 1]])
}

fn u32_at(data: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(data[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(data: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(data[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Identify Controller, the fields barebench uses or prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerIdentity {
    pub vendor_id: u16,
    pub subsystem_vendor_id: u16,
    pub serial: AsciiField<20>,
    pub model: AsciiField<40>,
    pub firmware: AsciiField<8>,
    /// Maximum Data Transfer Size as 2^MDTS units of CAP.MPSMIN pages; 0 = no limit.
    pub mdts: u8,
    pub controller_id: u16,
    /// VER (0 on controllers older than 1.2).
    pub version: Version,
    /// RTD3 Entry Latency in microseconds (0 = not reported).
    pub rtd3_entry_latency_us: u32,
    /// Optional Admin Command Support.
    pub oacs: u16,
    /// HMPRE, HMMIN, HMMINDS, HMMAXD: what the controller asks of a host memory buffer.
    pub host_memory: super::hmb::HmbRequest,
    /// SQES: required (bits 3:0) and maximum (7:4) entry size, log2 bytes.
    pub sqes: u8,
    /// CQES: as SQES.
    pub cqes: u8,
    /// MAXCMD (0 = not reported).
    pub max_commands: u16,
    /// NN: the largest namespace identifier.
    pub namespace_count: u32,
    /// ONCS: Optional NVM Command Support.
    pub oncs: u16,
    /// VWC bit 0: volatile write cache present.
    pub volatile_write_cache: bool,
    /// SGLS bits 1:0 non-zero: SGLs supported.
    pub sgl_support: u32,
}

impl ControllerIdentity {
    pub fn parse(data: &[u8; IDENTIFY_BYTES]) -> Self {
        ControllerIdentity {
            vendor_id: u16_at(data, 0),
            subsystem_vendor_id: u16_at(data, 2),
            serial: AsciiField::from_bytes(&data[4..24]),
            model: AsciiField::from_bytes(&data[24..64]),
            firmware: AsciiField::from_bytes(&data[64..72]),
            mdts: data[77],
            controller_id: u16_at(data, 78),
            version: Version(u32_at(data, 80)),
            rtd3_entry_latency_us: u32_at(data, 88),
            oacs: u16_at(data, 256),
            host_memory: super::hmb::HmbRequest {
                preferred_bytes: u64::from(u32_at(data, 272)) * super::hmb::UNIT_BYTES,
                minimum_bytes: u64::from(u32_at(data, 276)) * super::hmb::UNIT_BYTES,
                minimum_descriptor_bytes: u64::from(u32_at(data, 332)) * super::hmb::UNIT_BYTES,
                max_descriptors: u16_at(data, 336),
            },
            sqes: data[512],
            cqes: data[513],
            max_commands: u16_at(data, 514),
            namespace_count: u32_at(data, 516),
            oncs: u16_at(data, 520),
            volatile_write_cache: data[525] & 1 != 0,
            sgl_support: u32_at(data, 536),
        }
    }

    /// Largest transfer of one command in bytes: 2^MDTS × the minimum page size (NVMe 1.4
    /// Figure 247 MDTS: "in units of the minimum memory page size (CAP.MPSMIN)"); `None` = no
    /// limit.
    pub fn max_transfer_bytes(&self, page_min_bytes: usize) -> Option<u64> {
        if self.mdts == 0 {
            None
        } else {
            Some((page_min_bytes as u64) << self.mdts.min(40))
        }
    }

    /// Whether 64-byte SQEs and 16-byte CQEs are within what the controller supports.
    pub fn supports_standard_entry_sizes(&self) -> bool {
        let fits = |value: u8, shift: u8| {
            let required = value & 0xf;
            let maximum = value >> 4;
            // A controller older than 1.2 may leave the field zero.
            value == 0 || (required <= shift && shift <= maximum.max(required))
        };
        fits(self.sqes, 6) && fits(self.cqes, 4)
    }
}

/// One LBA Format (NVMe 1.4 Figure 246).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbaFormat {
    pub metadata_bytes: u16,
    /// LBADS: log2 of the data size; below 9 the format is not in use.
    pub data_shift: u8,
    /// Relative Performance: 0 best .. 3 degraded.
    pub relative_performance: u8,
}

impl LbaFormat {
    pub fn decode(raw: u32) -> Self {
        LbaFormat {
            metadata_bytes: raw as u16,
            data_shift: (raw >> 16) as u8,
            relative_performance: ((raw >> 24) & 0x3) as u8,
        }
    }

    /// Data bytes per block, or `None` for a format the specification does not allow (LBADS < 9
    /// or absurdly large).
    pub fn data_bytes(&self) -> Option<u32> {
        (9..=31).contains(&self.data_shift).then(|| 1u32 << self.data_shift)
    }

    pub fn performance_name(&self) -> &'static str {
        match self.relative_performance {
            0 => "best",
            1 => "better",
            2 => "good",
            _ => "degraded",
        }
    }
}

impl fmt::Display for LbaFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.data_bytes() {
            Some(bytes) => write!(f, "{bytes}+{}", self.metadata_bytes),
            None => write!(f, "invalid (LBADS {})", self.data_shift),
        }
    }
}

/// The most LBA formats a namespace can list (NLBAF is 0-based; 64 since NVMe 2.0).
pub const MAX_LBA_FORMATS: usize = 64;

/// Identify Namespace, the fields barebench uses or prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceIdentity {
    pub namespace_id: u32,
    /// NSZE: size in logical blocks.
    pub size_blocks: u64,
    /// NCAP: capacity in logical blocks.
    pub capacity_blocks: u64,
    /// NUSE: utilisation in logical blocks.
    pub utilization_blocks: u64,
    pub features: u8,
    /// NLBAF + 1.
    pub format_count: usize,
    /// FLBAS: the format in use.
    pub format_index: usize,
    /// FLBAS bit 4: metadata at the end of each block's data (extended LBA).
    pub metadata_inline: bool,
    /// DLFEAT (byte 33): how deallocated blocks read, and Write Zeroes features.
    pub deallocate_features: u8,
    pub formats: [LbaFormat; MAX_LBA_FORMATS],
}

/// What a read of a deallocated logical block returns: DLFEAT bits 2:0 (NVMe 1.4 Figure 245).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeallocatedRead {
    /// 000b: the controller does not say.
    NotReported,
    /// 001b: every byte 00h.
    Zeros,
    /// 010b: every byte FFh.
    Ones,
    /// A reserved value.
    Reserved(u8),
}

impl DeallocatedRead {
    /// In words, for the console and the JSON.
    pub fn description(self) -> &'static str {
        match self {
            DeallocatedRead::NotReported => "what deallocated blocks read as is not reported",
            DeallocatedRead::Zeros => "deallocated blocks read as all zeros",
            DeallocatedRead::Ones => "deallocated blocks read as all 0xff",
            DeallocatedRead::Reserved(_) => "deallocated-block reads in a reserved DLFEAT encoding",
        }
    }
}

impl NamespaceIdentity {
    pub fn parse(namespace_id: u32, data: &[u8; IDENTIFY_BYTES]) -> Self {
        let format_count = (usize::from(data[25]) + 1).min(MAX_LBA_FORMATS);
        let flbas = data[26];
        // FLBAS bits 3:0, and bits 6:5 as the upper index bits when more than 16 formats exist
        // (NVMe 2.0 Figure 275; always zero before).
        let format_index = if format_count > 16 {
            usize::from(flbas & 0xf) | usize::from((flbas >> 5) & 0x3) << 4
        } else {
            usize::from(flbas & 0xf)
        };
        let mut formats = [LbaFormat::default(); MAX_LBA_FORMATS];
        for (index, format) in formats.iter_mut().enumerate().take(format_count) {
            *format = LbaFormat::decode(u32_at(data, 128 + 4 * index));
        }
        NamespaceIdentity {
            namespace_id,
            size_blocks: u64_at(data, 0),
            capacity_blocks: u64_at(data, 8),
            utilization_blocks: u64_at(data, 16),
            features: data[24],
            format_count,
            format_index,
            metadata_inline: flbas & 0x10 != 0,
            deallocate_features: data[33],
            formats,
        }
    }

    /// What reads of deallocated (never written, or trimmed) blocks return.
    pub fn deallocated_read(&self) -> DeallocatedRead {
        match self.deallocate_features & 0x7 {
            0 => DeallocatedRead::NotReported,
            1 => DeallocatedRead::Zeros,
            2 => DeallocatedRead::Ones,
            reserved => DeallocatedRead::Reserved(reserved),
        }
    }

    /// The format in use (an index past NLBAF reads as an invalid format).
    pub fn format(&self) -> LbaFormat {
        if self.format_index < self.format_count {
            self.formats[self.format_index]
        } else {
            LbaFormat::default()
        }
    }

    pub fn formats(&self) -> &[LbaFormat] {
        &self.formats[..self.format_count]
    }

    /// Whether the namespace is active: NSZE > 0 (NVMe 1.4 §5.15.2.1: an inactive NSID
    /// returns a zero-filled structure).
    pub fn is_active(&self) -> bool {
        self.size_blocks > 0
    }

    /// Size in bytes (NSZE × LBA data size), when the format is valid.
    pub fn size_bytes(&self) -> Option<u64> {
        self.format().data_bytes().and_then(|bytes| self.size_blocks.checked_mul(u64::from(bytes)))
    }

    pub fn capacity_bytes(&self) -> Option<u64> {
        self.format().data_bytes().and_then(|bytes| self.capacity_blocks.checked_mul(u64::from(bytes)))
    }
}

/// Namespace identifiers in an Active Namespace ID list (CNS 02h): ascending, ended by the
/// first zero entry or the end of the 1024-entry list.
pub fn active_namespace_ids(data: &[u8; IDENTIFY_BYTES]) -> impl Iterator<Item = u32> + '_ {
    data.chunks_exact(4)
        .map(|chunk| u32::from_le_bytes(chunk.try_into().expect("4 bytes")))
        .take_while(|id| *id != 0)
}

/// Entries in one Active Namespace ID list.
pub const ACTIVE_LIST_ENTRIES: usize = IDENTIFY_BYTES / 4;

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::vec::Vec;

    fn controller_data() -> [u8; IDENTIFY_BYTES] {
        let mut data = [0u8; IDENTIFY_BYTES];
        data[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
        data[2..4].copy_from_slice(&0x1af4u16.to_le_bytes());
        data[4..24].copy_from_slice(b"barebench0          ");
        data[24..64].copy_from_slice(b"QEMU NVMe Ctrl                          ");
        data[64..72].copy_from_slice(b"10.0.2  ");
        data[77] = 7;
        data[78..80].copy_from_slice(&3u16.to_le_bytes());
        data[80..84].copy_from_slice(&0x0001_0400u32.to_le_bytes());
        data[88..92].copy_from_slice(&1_000_000u32.to_le_bytes());
        data[256..258].copy_from_slice(&0x0100u16.to_le_bytes());
        data[512] = 0x66;
        data[513] = 0x44;
        data[516..520].copy_from_slice(&256u32.to_le_bytes());
        data[525] = 1;
        data[536] = 1;
        data
    }

    #[test]
    fn controller_fields_come_from_their_offsets() {
        let identity = ControllerIdentity::parse(&controller_data());
        assert_eq!(identity.vendor_id, 0x1b36);
        assert_eq!(identity.subsystem_vendor_id, 0x1af4);
        assert_eq!(identity.serial.as_str(), "barebench0");
        assert_eq!(identity.model.as_str(), "QEMU NVMe Ctrl");
        assert_eq!(identity.firmware.as_str(), "10.0.2");
        assert_eq!(identity.mdts, 7);
        assert_eq!(identity.controller_id, 3);
        assert_eq!(format!("{}", identity.version), "1.4.0");
        assert_eq!(identity.rtd3_entry_latency_us, 1_000_000);
        assert_eq!(identity.oacs, 0x100);
        assert_eq!((identity.sqes, identity.cqes), (0x66, 0x44));
        assert_eq!(identity.namespace_count, 256);
        assert!(identity.volatile_write_cache);
        assert_eq!(identity.max_transfer_bytes(4096), Some(512 << 10));
        assert!(identity.supports_standard_entry_sizes());
    }

    #[test]
    fn mdts_zero_means_no_limit_and_entry_sizes_are_checked() {
        let mut data = controller_data();
        data[77] = 0;
        data[512] = 0x77; // requires 128-byte SQEs
        let identity = ControllerIdentity::parse(&data);
        assert_eq!(identity.max_transfer_bytes(4096), None);
        assert!(!identity.supports_standard_entry_sizes());
        data[77] = 9;
        data[512] = 0;
        data[513] = 0;
        let identity = ControllerIdentity::parse(&data);
        assert_eq!(identity.max_transfer_bytes(8192), Some(8192 << 9));
        assert!(identity.supports_standard_entry_sizes(), "pre-1.2 zeros");
    }

    #[test]
    fn text_fields_drop_padding_and_mask_control_bytes() {
        let field = AsciiField::<8>::from_bytes(b"ab\x01\0  \xff ");
        assert_eq!(field.as_str(), "ab?   ?");
        assert_eq!(AsciiField::<4>::from_bytes(b"    ").as_str(), "");
    }

    fn namespace_data(nlbaf: u8, flbas: u8) -> [u8; IDENTIFY_BYTES] {
        let mut data = [0u8; IDENTIFY_BYTES];
        data[0..8].copy_from_slice(&131_072u64.to_le_bytes());
        data[8..16].copy_from_slice(&131_000u64.to_le_bytes());
        data[16..24].copy_from_slice(&42u64.to_le_bytes());
        data[25] = nlbaf;
        data[26] = flbas;
        // QEMU's eight formats: 512, 512+8, 512+16, 512+64, 4096, 4096+8, 4096+16, 4096+64.
        let formats: [(u16, u8); 8] =
            [(0, 9), (8, 9), (16, 9), (64, 9), (0, 12), (8, 12), (16, 12), (64, 12)];
        for (index, (metadata, shift)) in formats.iter().enumerate() {
            let raw = u32::from(*metadata) | u32::from(*shift) << 16 | (index as u32 % 4) << 24;
            data[128 + 4 * index..132 + 4 * index].copy_from_slice(&raw.to_le_bytes());
        }
        data
    }

    #[test]
    fn namespace_fields_and_the_format_in_use() {
        let identity = NamespaceIdentity::parse(1, &namespace_data(7, 4));
        assert_eq!(identity.namespace_id, 1);
        assert_eq!(identity.size_blocks, 131_072);
        assert_eq!(identity.capacity_blocks, 131_000);
        assert_eq!(identity.utilization_blocks, 42);
        assert_eq!(identity.format_count, 8);
        assert_eq!(identity.format_index, 4);
        assert_eq!(identity.format().data_bytes(), Some(4096));
        assert_eq!(identity.format().metadata_bytes, 0);
        assert_eq!(identity.size_bytes(), Some(131_072 * 4096));
        assert_eq!(identity.capacity_bytes(), Some(131_000 * 4096));
        assert!(identity.is_active());
        assert!(!identity.metadata_inline);
        let shown: Vec<_> = identity.formats().iter().map(|f| format!("{f}")).collect();
        assert_eq!(shown, ["512+0", "512+8", "512+16", "512+64", "4096+0", "4096+8", "4096+16", "4096+64"]);
        assert_eq!(identity.formats[1].performance_name(), "better");
        let inline = NamespaceIdentity::parse(1, &namespace_data(7, 0x15));
        assert!(inline.metadata_inline);
        assert_eq!(inline.format().metadata_bytes, 8);
    }

    #[test]
    fn deallocated_reads_come_from_dlfeat() {
        let mut data = namespace_data(0, 0);
        let read = |data: &[u8; IDENTIFY_BYTES]| NamespaceIdentity::parse(1, data).deallocated_read();
        assert_eq!(read(&data), DeallocatedRead::NotReported);
        // Zeros, and Write Zeroes may deallocate (bit 3); QEMU 10's namespaces report 0x01.
        data[33] = 0x09;
        assert_eq!(read(&data), DeallocatedRead::Zeros);
        assert_eq!(read(&data).description(), "deallocated blocks read as all zeros");
        data[33] = 0x12;
        assert_eq!(read(&data), DeallocatedRead::Ones);
        data[33] = 0x05;
        assert_eq!(read(&data), DeallocatedRead::Reserved(5));
        data[32] = 0xff;
        data[34] = 0xff;
        assert_eq!(NamespaceIdentity::parse(1, &data).deallocate_features, 0x05);
    }

    #[test]
    fn bad_format_indices_and_inactive_namespaces() {
        let beyond = NamespaceIdentity::parse(2, &namespace_data(3, 6));
        assert_eq!(beyond.format_count, 4);
        assert_eq!(beyond.format().data_bytes(), None, "index past NLBAF");
        assert_eq!(beyond.size_bytes(), None);
        let inactive = NamespaceIdentity::parse(3, &[0u8; IDENTIFY_BYTES]);
        assert!(!inactive.is_active());
        // More than 16 formats: FLBAS bits 6:5 extend the index.
        let mut data = namespace_data(40, 0x20 | 0x2);
        data[128 + 4 * 18..132 + 4 * 18].copy_from_slice(&(12u32 << 16).to_le_bytes());
        let wide = NamespaceIdentity::parse(4, &data);
        assert_eq!(wide.format_index, 18);
        assert_eq!(wide.format().data_bytes(), Some(4096));
    }

    #[test]
    fn active_lists_stop_at_the_first_zero() {
        let mut data = [0u8; IDENTIFY_BYTES];
        for (index, id) in [1u32, 2, 7].iter().enumerate() {
            data[4 * index..4 * index + 4].copy_from_slice(&id.to_le_bytes());
        }
        assert_eq!(active_namespace_ids(&data).collect::<Vec<_>>(), [1, 2, 7]);
        let full = [0x11u8; IDENTIFY_BYTES];
        assert_eq!(active_namespace_ids(&full).count(), ACTIVE_LIST_ENTRIES);
    }
}
