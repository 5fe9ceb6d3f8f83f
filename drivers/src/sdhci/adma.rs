//! ADMA2 descriptor tables (SD Host Controller Simplified Specification v4.20 §1.13.4: 32-bit
//! descriptors of 64 bits, and the v3-mode 64-bit descriptors of 96 bits; attribute Valid, End,
//! Act = Tran; length 16 bits, 0 meaning 65536 bytes). A descriptor moves up to 64 KiB, as
//! Linux's `sdhci.c` does, on hosts that read a length of 0 as 65536; hosts that do not (Linux's
//! `SDHCI_QUIRK_BROKEN_ADMA_ZEROLEN_DESC`) get 32 KiB descriptors, whose length is never 0
//! ([`DescriptorLimit`], chosen per host by the quirks table; docs/hardware.md §8).

use blockdev::DmaBuffer;
use hal::dma::DmaRegion;
use hal::platform::{BusTranslation, UnreachableAddress};

/// How much one descriptor may move on a host, from the quirks table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorLimit {
    /// 65536 bytes, written as length 0 (SDHCI §1.13.4 Table 1-10; QEMU's `sdhci.c` and every
    /// host Linux drives without `SDHCI_QUIRK_BROKEN_ADMA_ZEROLEN_DESC`).
    ZeroLengthMeans64KiB,
    /// 32768 bytes: for hosts that misread a length of 0 (the length field is never 0).
    NoZeroLength32KiB,
}

impl DescriptorLimit {
    /// Bytes one descriptor moves at most.
    pub const fn max_bytes(self) -> usize {
        match self {
            DescriptorLimit::ZeroLengthMeans64KiB => 64 * 1024,
            DescriptorLimit::NoZeroLength32KiB => 32 * 1024,
        }
    }

    /// The 16-bit length field for `length_bytes` (1 ..= `max_bytes`): 65536 is written as 0.
    fn length_field(self, length_bytes: usize) -> u32 {
        debug_assert!(length_bytes > 0 && length_bytes <= self.max_bytes());
        (length_bytes & 0xffff) as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            DescriptorLimit::ZeroLengthMeans64KiB => "64 KiB per descriptor",
            DescriptorLimit::NoZeroLength32KiB => "32 KiB per descriptor",
        }
    }
}

const ATTRIBUTE_VALID: u32 = 1 << 0;
const ATTRIBUTE_END: u32 = 1 << 1;
const ACTION_TRANSFER: u32 = 0b10 << 4;

/// The descriptor layout, chosen by Host Control 1 DMA Select.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmaFormat {
    /// 32-bit addresses, 8-byte descriptors.
    Adma2Bits32,
    /// 64-bit addresses, 12-byte descriptors (v3 mode: Capabilities bit 28).
    Adma2Bits64,
}

impl AdmaFormat {
    pub fn descriptor_bytes(self) -> usize {
        match self {
            AdmaFormat::Adma2Bits32 => 8,
            AdmaFormat::Adma2Bits64 => 12,
        }
    }

    /// Data addresses must be aligned to 4 (32-bit) or 8 (64-bit) bytes (§1.13.4).
    pub fn data_alignment(self) -> u64 {
        match self {
            AdmaFormat::Adma2Bits32 => 4,
            AdmaFormat::Adma2Bits64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AdmaFormat::Adma2Bits32 => "ADMA2 (32-bit)",
            AdmaFormat::Adma2Bits64 => "ADMA2 (64-bit)",
        }
    }
}

/// Why a transfer cannot be described.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmaError {
    /// The buffer is outside the host's DMA window.
    #[error("{0}")]
    Unreachable(UnreachableAddress),
    /// A 32-bit table cannot address it.
    #[error("bus address {bus_address:#x} is above 4 GiB for 32-bit ADMA2")]
    Above4GiB { bus_address: u64 },
    #[error("bus address {bus_address:#x} is not {alignment}-byte aligned")]
    Misaligned { bus_address: u64, alignment: u64 },
    /// More descriptors than the table holds.
    #[error("{length_bytes} bytes exceed the descriptor table's {capacity_bytes}")]
    TooLong { length_bytes: usize, capacity_bytes: usize },
}

/// A descriptor table in DMA memory, rewritten for each transfer.
pub struct DescriptorTable<'p> {
    table: DmaRegion<'p>,
    table_bus_address: u64,
    format: AdmaFormat,
    limit: DescriptorLimit,
    data_translation: BusTranslation,
}

impl<'p> DescriptorTable<'p> {
    /// A table in `table` (DMA memory only this table and its host use), which must be reachable
    /// by the host through `translation`, aligned to 8 bytes (refused otherwise).
    pub fn new(
        table: DmaRegion<'p>,
        format: AdmaFormat,
        limit: DescriptorLimit,
        translation: BusTranslation,
    ) -> Result<DescriptorTable<'p>, AdmaError> {
        let memory = table.buffer();
        let table_bus_address = translation
            .to_bus(memory.physical_address, memory.length_bytes as u64)
            .map_err(AdmaError::Unreachable)?;
        if format == AdmaFormat::Adma2Bits32 && table_bus_address + memory.length_bytes as u64 > 1 << 32 {
            return Err(AdmaError::Above4GiB { bus_address: table_bus_address });
        }
        if !table_bus_address.is_multiple_of(8) || !memory.cpu_address.is_multiple_of(8) {
            return Err(AdmaError::Misaligned { bus_address: table_bus_address, alignment: 8 });
        }
        Ok(DescriptorTable { table, table_bus_address, format, limit, data_translation: translation })
    }

    /// Table bytes needed for transfers of up to `max_transfer_bytes`.
    pub fn bytes_for(max_transfer_bytes: usize, format: AdmaFormat, limit: DescriptorLimit) -> usize {
        max_transfer_bytes.div_ceil(limit.max_bytes()) * format.descriptor_bytes()
    }

    pub fn format(&self) -> AdmaFormat {
        self.format
    }

    pub fn limit(&self) -> DescriptorLimit {
        self.limit
    }

    pub fn bus_address(&self) -> u64 {
        self.table_bus_address
    }

    pub fn buffer(&self) -> DmaBuffer {
        self.table.buffer()
    }

    /// The first `count` descriptors' bytes (what [`DescriptorTable::describe`] wrote).
    pub fn descriptors(&self, count: usize) -> DmaBuffer {
        self.table.slice(0, count * self.format.descriptor_bytes())
    }

    /// Writes descriptors for `data` (its first `length_bytes`); returns how many.
    pub fn describe(&mut self, data: &DmaBuffer, length_bytes: usize) -> Result<usize, AdmaError> {
        let bus_address = self
            .data_translation
            .to_bus(data.physical_address, length_bytes as u64)
            .map_err(AdmaError::Unreachable)?;
        let alignment = self.format.data_alignment();
        if !bus_address.is_multiple_of(alignment) {
            return Err(AdmaError::Misaligned { bus_address, alignment });
        }
        if self.format == AdmaFormat::Adma2Bits32 && bus_address + length_bytes as u64 > 1 << 32 {
            return Err(AdmaError::Above4GiB { bus_address });
        }
        let max_bytes = self.limit.max_bytes();
        let count = length_bytes.div_ceil(max_bytes);
        let stride = self.format.descriptor_bytes();
        if count * stride > self.table.length_bytes() || count == 0 {
            return Err(AdmaError::TooLong {
                length_bytes,
                capacity_bytes: self.table.length_bytes() / stride * max_bytes,
            });
        }
        // No transfer runs while the table is rewritten (one request in flight, and this runs
        // before the command is issued).
        for index in 0..count {
            let offset = index * max_bytes;
            let length = self.limit.length_field((length_bytes - offset).min(max_bytes));
            let mut attributes = ATTRIBUTE_VALID | ACTION_TRANSFER;
            if index + 1 == count {
                attributes |= ATTRIBUTE_END;
            }
            let address = bus_address + offset as u64;
            let first_word = attributes | (length << 16);
            match self.format {
                AdmaFormat::Adma2Bits32 => {
                    self.table.write_words(index * stride, &[first_word, address as u32])
                }
                AdmaFormat::Adma2Bits64 => self
                    .table
                    .write_words(index * stride, &[first_word, address as u32, (address >> 32) as u32]),
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use hal::testing::{ArenaPlatform, PHYSICAL_BASE};
    use std::vec::Vec;

    const LIMIT_32K: DescriptorLimit = DescriptorLimit::NoZeroLength32KiB;

    /// A table of `entries` 64-bit words in the test arena.
    fn table(platform: &ArenaPlatform, entries: usize) -> DmaRegion<'_> {
        DmaRegion::allocate(platform, entries * 8, 8).unwrap()
    }

    /// The table's 64-bit words as the host reads them.
    fn words(table: &DmaRegion) -> Vec<u64> {
        let mut halves = std::vec![0u32; table.length_bytes() / 4];
        table.read_words(0, &mut halves);
        halves.chunks(2).map(|pair| u64::from(pair[0]) | (u64::from(pair[1]) << 32)).collect()
    }

    #[test]
    fn hosts_without_zero_length_get_32_kib_descriptors_that_end() {
        let platform = ArenaPlatform::new(1 << 16);
        let memory = table(&platform, 8);
        let limit = DescriptorLimit::NoZeroLength32KiB;
        let mut adma =
            DescriptorTable::new(memory, AdmaFormat::Adma2Bits32, limit, BusTranslation::IDENTITY).unwrap();
        let data = DmaBuffer { cpu_address: 0, physical_address: 0x4200_0000, length_bytes: 1 << 20 };
        assert_eq!(adma.describe(&data, 70_000), Ok(3));
        let entries = words(&memory);
        assert_eq!(entries[0], 0x4200_0000_8000_0021);
        assert_eq!(entries[1], 0x4200_8000_8000_0021);
        // 70 000 - 65 536 = 4 464 = 0x1170 bytes, with End.
        assert_eq!(entries[2], 0x4201_0000_1170_0023);
        // 8 descriptors of 32 KiB is all this table holds.
        assert_eq!(adma.describe(&data, 256 * 1024), Ok(8));
        assert_eq!(
            adma.describe(&data, 256 * 1024 + 512),
            Err(AdmaError::TooLong { length_bytes: 256 * 1024 + 512, capacity_bytes: 256 * 1024 })
        );
        assert!(words(&memory).iter().all(|entry| (entry >> 16) & 0xffff != 0), "no length field is 0");
        assert_eq!(limit.name(), "32 KiB per descriptor");
        assert_eq!(DescriptorLimit::ZeroLengthMeans64KiB.name(), "64 KiB per descriptor");
    }

    #[test]
    fn sixty_four_kib_descriptors_write_65536_as_length_zero() {
        let platform = ArenaPlatform::new(1 << 16);
        let memory = table(&platform, 16);
        let limit = DescriptorLimit::ZeroLengthMeans64KiB;
        let mut adma =
            DescriptorTable::new(memory, AdmaFormat::Adma2Bits32, limit, BusTranslation::IDENTITY).unwrap();
        let data = DmaBuffer { cpu_address: 0, physical_address: 0x4200_0000, length_bytes: 1 << 20 };
        // 1 MiB is 16 descriptors of 64 KiB, each with length field 0, the last with End.
        assert_eq!(adma.describe(&data, 1 << 20), Ok(16));
        for (index, entry) in words(&memory).iter().enumerate() {
            let end = if index == 15 { 0b10 } else { 0 };
            assert_eq!(*entry, ((0x4200_0000 + (index as u64) * 0x1_0000) << 32) | 0x21 | end, "{index}");
        }
        // 65536 + 512: one full descriptor, then 512 bytes with End.
        assert_eq!(adma.describe(&data, 65_536 + 512), Ok(2));
        assert_eq!(words(&memory)[..2], [0x4200_0000_0000_0021, 0x4201_0000_0200_0023]);
        // Exactly 65535 bytes is one descriptor with the length written out.
        assert_eq!(adma.describe(&data, 65_535), Ok(1));
        assert_eq!(words(&memory)[0], 0x4200_0000_ffff_0023);
        assert_eq!(DescriptorTable::bytes_for(1 << 20, AdmaFormat::Adma2Bits32, limit), 16 * 8);
        assert_eq!(
            DescriptorTable::bytes_for(1 << 20, AdmaFormat::Adma2Bits64, DescriptorLimit::NoZeroLength32KiB),
            32 * 12
        );
    }

    #[test]
    fn translation_alignment_and_reach_are_checked() {
        let platform = ArenaPlatform::new(1 << 20);
        // A window like EMMC2's on B0 (CPU memory at bus 0xC000_0000, 1 GiB: docs/hardware.md
        // §2.4), here over the test arena.
        let b0 = BusTranslation { cpu_base: PHYSICAL_BASE, bus_base: 0xc000_0000, size_bytes: 1 << 30 };
        let memory = table(&platform, 6);
        let mut adma =
            DescriptorTable::new(memory, AdmaFormat::Adma2Bits32, DescriptorLimit::ZeroLengthMeans64KiB, b0)
                .unwrap();
        assert_eq!(adma.bus_address(), 0xc000_0000 + (memory.physical_address() - PHYSICAL_BASE));
        let low =
            DmaBuffer { cpu_address: 0, physical_address: PHYSICAL_BASE + 0x0010_0000, length_bytes: 4096 };
        assert_eq!(adma.describe(&low, 4096), Ok(1));
        assert_eq!(words(&memory)[0], 0xc010_0000_1000_0023);
        let high = DmaBuffer { physical_address: PHYSICAL_BASE + 0x4000_0000, ..low };
        assert!(matches!(adma.describe(&high, 4096), Err(AdmaError::Unreachable(_))));
        let odd = DmaBuffer { physical_address: PHYSICAL_BASE + 0x0010_0002, ..low };
        assert!(matches!(adma.describe(&odd, 512), Err(AdmaError::Misaligned { .. })));
    }

    #[test]
    fn sixty_four_bit_descriptors_carry_wide_addresses() {
        let platform = ArenaPlatform::new(1 << 16);
        // The arena seen at bus 4 GiB and above.
        let wide = BusTranslation { cpu_base: PHYSICAL_BASE, bus_base: 0x1_0000_0000, size_bytes: 1 << 40 };
        let memory = table(&platform, 3);
        let mut adma = DescriptorTable::new(memory, AdmaFormat::Adma2Bits64, LIMIT_32K, wide).unwrap();
        let data = DmaBuffer {
            cpu_address: 0,
            physical_address: PHYSICAL_BASE + 0x1_0000_0000,
            length_bytes: 40_960,
        };
        assert_eq!(adma.describe(&data, 40_960), Ok(2));
        let bytes: Vec<u8> = words(&memory).iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(&bytes[0..4], &0x8000_0021u32.to_le_bytes());
        assert_eq!(&bytes[4..12], &0x2_0000_0000u64.to_le_bytes());
        assert_eq!(&bytes[12..16], &0x2000_0023u32.to_le_bytes());
        assert_eq!(&bytes[16..24], &0x2_0000_8000u64.to_le_bytes());
        // The same table cannot be used for 32-bit ADMA2.
        assert!(matches!(
            DescriptorTable::new(memory, AdmaFormat::Adma2Bits32, LIMIT_32K, wide),
            Err(AdmaError::Above4GiB { .. })
        ));
    }
}
