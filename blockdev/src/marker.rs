//! The 512-byte marker that announces a region barebench may use: a scratch region, where write
//! jobs may write (docs/writes.md §1), or a pattern region, whose content the kernel can compute
//! (docs/checks.md §1, docs/ecosystem.md §5). Both kinds share one layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0..16 | the kind's magic: ASCII `BAREBENCHSCRATCH` or `BAREBENCHPATTERN` |
//! | 16..20 | format version (1) |
//! | 20..24 | zero |
//! | 24..32 | region length in bytes, counted from the marker's first byte, inside the partition |
//! | 32..40 | region id (a scratch region); zero (a pattern region) |
//! | 40..44 | CRC-32 (zlib's) of bytes 0..40 |
//! | 44..512 | zero |
//!
//! The first MiB of a region ([`RESERVED_BYTES`]), marker included, is never written and never
//! read by the benchmark.

use core::fmt;

use crate::crc32::crc32;

/// The only marker format this code knows.
pub const MARKER_VERSION: u32 = 1;
/// Size of the marker (it sits at the start of the partition's first logical block).
pub const MARKER_BYTES: usize = 512;
/// The start of every region that the benchmark never writes or reads (the marker is in it).
pub const RESERVED_BYTES: u64 = 1 << 20;

const CRC_COVERED_BYTES: usize = 40;

/// Which region a marker announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// A region write jobs may write (`blockdev::scratch`).
    Scratch,
    /// A region filled with the test pattern (`blockdev::pattern_region`).
    Pattern,
}

impl MarkerKind {
    /// The marker's first 16 bytes.
    pub const fn magic(self) -> [u8; 16] {
        match self {
            MarkerKind::Scratch => *b"BAREBENCHSCRATCH",
            MarkerKind::Pattern => *b"BAREBENCHPATTERN",
        }
    }
}

impl fmt::Display for MarkerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MarkerKind::Scratch => "BAREBENCHSCRATCH",
            MarkerKind::Pattern => "BAREBENCHPATTERN",
        })
    }
}

/// The contents of a valid marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    pub kind: MarkerKind,
    /// Bytes of the region, counted from the marker's first byte.
    pub length_bytes: u64,
    /// A scratch region's random id, printed by the kernel and kept in the JSON; 0 for a
    /// pattern region.
    pub region_id: u64,
}

/// Why 512 bytes are not a usable marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// The first 16 bytes are not the kind's magic: no marker at all.
    #[error("no {kind} marker")]
    NoMagic { kind: MarkerKind },
    /// A marker of a format this code does not know.
    #[error("marker of unknown version {version} (this kernel knows version {})", MARKER_VERSION)]
    UnknownVersion { version: u32 },
    /// The stored CRC-32 does not match bytes 0..40.
    #[error("marker CRC-32 {stored:#010x} does not match its bytes ({computed:#010x})")]
    BadCrc { stored: u32, computed: u32 },
    /// A byte that must be zero is not.
    #[error("marker byte {offset} should be zero")]
    ReservedNotZero { offset: usize },
}

impl Marker {
    /// A scratch region's marker.
    pub const fn scratch(length_bytes: u64, region_id: u64) -> Marker {
        Marker { kind: MarkerKind::Scratch, length_bytes, region_id }
    }

    /// A pattern region's marker.
    pub const fn pattern(length_bytes: u64) -> Marker {
        Marker { kind: MarkerKind::Pattern, length_bytes, region_id: 0 }
    }

    /// The 512 bytes of this marker.
    pub fn encode(&self) -> [u8; MARKER_BYTES] {
        let mut bytes = [0u8; MARKER_BYTES];
        bytes[..16].copy_from_slice(&self.kind.magic());
        bytes[16..20].copy_from_slice(&MARKER_VERSION.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.length_bytes.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.region_id.to_le_bytes());
        let crc = crc32(&bytes[..CRC_COVERED_BYTES]);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Reads a marker of `kind` from the first 512 bytes of `bytes` (shorter input has none).
    pub fn parse(kind: MarkerKind, bytes: &[u8]) -> Result<Marker, MarkerError> {
        let Some(bytes) = bytes.get(..MARKER_BYTES) else {
            return Err(MarkerError::NoMagic { kind });
        };
        if bytes[..16] != kind.magic() {
            return Err(MarkerError::NoMagic { kind });
        }
        let version = le_u32(bytes, 16);
        if version != MARKER_VERSION {
            return Err(MarkerError::UnknownVersion { version });
        }
        let stored = le_u32(bytes, 40);
        let computed = crc32(&bytes[..CRC_COVERED_BYTES]);
        if stored != computed {
            return Err(MarkerError::BadCrc { stored, computed });
        }
        // A pattern marker has no region id: its bytes 32..40 are zero too.
        let id_bytes = if kind == MarkerKind::Pattern { 32..40 } else { 0..0 };
        let reserved = (20..24).chain(id_bytes).chain(44..MARKER_BYTES);
        if let Some(offset) = reserved.into_iter().find(|&offset| bytes[offset] != 0) {
            return Err(MarkerError::ReservedNotZero { offset });
        }
        Ok(Marker { kind, length_bytes: le_u64(bytes, 24), region_id: le_u64(bytes, 32) })
    }
}

/// The little-endian u32 at `offset` (markers and partition tables).
pub(crate) fn le_u32(bytes: &[u8], offset: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(word)
}

/// The little-endian u64 at `offset`.
pub(crate) fn le_u64(bytes: &[u8], offset: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_round_trip_and_a_marker_of_one_kind_is_no_marker_of_the_other() {
        for marker in [Marker::scratch(4 << 20, 0x1C3F_5E0A_9B8D_7E21), Marker::pattern(4 << 20)] {
            let bytes = marker.encode();
            assert_eq!(Marker::parse(marker.kind, &bytes), Ok(marker));
            let other =
                if marker.kind == MarkerKind::Scratch { MarkerKind::Pattern } else { MarkerKind::Scratch };
            assert_eq!(Marker::parse(other, &bytes), Err(MarkerError::NoMagic { kind: other }));
        }
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &[0u8; 100]),
            Err(MarkerError::NoMagic { kind: MarkerKind::Scratch })
        );
    }

    #[test]
    fn a_pattern_marker_carries_no_region_id() {
        let mut with_id = Marker::scratch(4 << 20, 5).encode();
        with_id[..16].copy_from_slice(&MarkerKind::Pattern.magic());
        let crc = crc32(&with_id[..CRC_COVERED_BYTES]);
        with_id[40..44].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Marker::parse(MarkerKind::Pattern, &with_id),
            Err(MarkerError::ReservedNotZero { offset: 32 })
        );
    }

    #[test]
    fn errors_say_what_is_wrong_as_the_console_prints_it() {
        extern crate std;
        use std::string::ToString;
        assert_eq!(
            MarkerError::NoMagic { kind: MarkerKind::Scratch }.to_string(),
            "no BAREBENCHSCRATCH marker"
        );
        assert_eq!(
            MarkerError::NoMagic { kind: MarkerKind::Pattern }.to_string(),
            "no BAREBENCHPATTERN marker"
        );
        assert_eq!(
            MarkerError::UnknownVersion { version: 2 }.to_string(),
            "marker of unknown version 2 (this kernel knows version 1)"
        );
        assert_eq!(
            MarkerError::BadCrc { stored: 0xdead_beef, computed: 0x1234 }.to_string(),
            "marker CRC-32 0xdeadbeef does not match its bytes (0x00001234)"
        );
        assert_eq!(
            MarkerError::ReservedNotZero { offset: 100 }.to_string(),
            "marker byte 100 should be zero"
        );
    }
}
