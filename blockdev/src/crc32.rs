//! CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial and final XOR 0xFFFFFFFF): the
//! checksum zlib's `crc32()` computes, so `crc=` lines can be checked against the image file.

const POLYNOMIAL_REFLECTED: u32 = 0xEDB8_8320;

const TABLE: [u32; 256] = build_table();

const fn build_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut index = 0;
    while index < 256 {
        let mut value = index as u32;
        let mut bit = 0;
        while bit < 8 {
            value = if value & 1 != 0 { (value >> 1) ^ POLYNOMIAL_REFLECTED } else { value >> 1 };
            bit += 1;
        }
        table[index] = value;
        index += 1;
    }
    table
}

/// A running CRC-32, fed in pieces (e.g. one device read at a time).
#[derive(Clone, Copy, Debug)]
pub struct Crc32 {
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    pub const fn new() -> Self {
        Crc32 { state: 0xFFFF_FFFF }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        let mut state = self.state;
        for &byte in bytes {
            state = TABLE[((state ^ u32::from(byte)) & 0xFF) as usize] ^ (state >> 8);
        }
        self.state = state;
    }

    pub fn finish(&self) -> u32 {
        self.state ^ 0xFFFF_FFFF
    }
}

/// CRC-32 of one byte slice.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = Crc32::new();
    crc.update(bytes);
    crc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_zlib_check_values() {
        // The standard check value for "123456789" and zlib's results for simple inputs.
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
        assert_eq!(crc32(&[0u8; 512]), 0xB2AA_7578);
    }

    #[test]
    fn pieces_give_the_same_result_as_the_whole() {
        let data: [u8; 1000] = core::array::from_fn(|i| (i * 7 + 3) as u8);
        let mut crc = Crc32::new();
        for chunk in data.chunks(97) {
            crc.update(chunk);
        }
        assert_eq!(crc.finish(), crc32(&data));
    }
}
