//! The test pattern of barebench's emulated drives: every 512-byte sector says where it is, so a
//! read can be checked byte for byte by the kernel (`verify=`) and by the host tools without
//! keeping the image.
//!
//! Sector `s` (counted in 512-byte units from the start of the device, whatever its logical block
//! size) holds: bytes 0..8 the ASCII tag `BAREBNCH`; bytes 8..16 `s` as a little-endian u64;
//! bytes 16..512 sixty-two little-endian u64 words from a 64-bit linear congruential generator
//! (Knuth's MMIX constants) seeded with `s × 0x9E37_79B9_7F4A_7C15 ^ 0xD1B5_4A32_D192_ED03`, each
//! word being the state after one step, xor-shifted right by 29.

pub const SECTOR_BYTES: usize = 512;
pub const TAG: [u8; 8] = *b"BAREBNCH";
const MULTIPLIER: u64 = 6_364_136_223_846_793_005;
const INCREMENT: u64 = 1_442_695_040_888_963_407;

/// Fills `out` with sector `sector`'s bytes.
pub fn fill_sector(sector: u64, out: &mut [u8; SECTOR_BYTES]) {
    out[..8].copy_from_slice(&TAG);
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    let mut state = sector.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    for word in out[16..].chunks_exact_mut(8) {
        state = state.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT);
        word.copy_from_slice(&(state ^ (state >> 29)).to_le_bytes());
    }
}

/// The offset of the first byte of `data` that differs from the pattern, where `data` starts at
/// byte `device_offset` of the device (a multiple of 512).
pub fn first_mismatch(device_offset: u64, data: &[u8]) -> Option<usize> {
    let first_sector = device_offset / SECTOR_BYTES as u64;
    let mut expected = [0u8; SECTOR_BYTES];
    for (index, chunk) in data.chunks(SECTOR_BYTES).enumerate() {
        fill_sector(first_sector + index as u64, &mut expected);
        if let Some(position) = chunk.iter().zip(expected.iter()).position(|(a, b)| a != b) {
            return Some(index * SECTOR_BYTES + position);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_are_tagged_numbered_and_distinct() {
        let mut a = [0u8; SECTOR_BYTES];
        let mut b = [0u8; SECTOR_BYTES];
        fill_sector(0, &mut a);
        fill_sector(1, &mut b);
        assert_eq!(&a[..8], b"BAREBNCH");
        assert_eq!(u64::from_le_bytes(b[8..16].try_into().unwrap()), 1);
        assert_ne!(a[16..], b[16..]);
        // Values from an independent Python implementation of the definition above, so that a
        // change of the generator is caught (the host tools use it too).
        assert_eq!(u64::from_le_bytes(a[16..24].try_into().unwrap()), 0x0D2B_DACD_E1D0_71BA);
        assert_eq!(crate::crc32::crc32(&a), 0x5931_2D4B);
    }

    #[test]
    fn mismatches_are_found_where_they_are() {
        let mut data = [0u8; 3 * SECTOR_BYTES];
        for (index, chunk) in data.chunks_mut(SECTOR_BYTES).enumerate() {
            fill_sector(10 + index as u64, chunk.try_into().unwrap());
        }
        assert_eq!(first_mismatch(10 * 512, &data), None);
        assert_eq!(first_mismatch(11 * 512, &data), Some(8));
        data[700] ^= 1;
        assert_eq!(first_mismatch(10 * 512, &data), Some(700));
    }
}
