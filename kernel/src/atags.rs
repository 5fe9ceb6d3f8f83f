//! ATAGS, the older boot-parameter list QEMU's raspi machines pass in x0 (at 0x100) when no DTB is
//! given (docs/qemu.md §1; Linux Documentation/arch/arm/booting.rst lists the tag layout: a size in
//! words and a tag number, then the payload).
#![forbid(unsafe_code)]

const ATAG_NONE: u32 = 0;
const ATAG_CORE: u32 = 0x5441_0001;
const ATAG_MEM: u32 = 0x5441_0002;
const ATAG_CMDLINE: u32 = 0x5441_0009;
/// The list is short; more than this many tags means it is not an ATAGS list.
const MAX_TAGS: usize = 64;

/// What the kernel takes from the list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootTags<'a> {
    /// (start, size) of the first ATAG_MEM.
    pub memory: Option<(u64, u64)>,
    pub command_line: Option<&'a str>,
}

/// The little-endian 32-bit word `index` of `memory`.
fn word(memory: &[u8], index: usize) -> Option<u32> {
    let bytes = memory.get(4 * index..4 * index + 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Reads an ATAGS list from `memory` (the bytes at x0, 32-bit little-endian words). `None` when
/// the list does not start with ATAG_CORE or runs off the end.
pub fn parse(memory: &[u8]) -> Option<BootTags<'_>> {
    let mut tags = BootTags::default();
    let mut index = 0usize;
    let mut count = 0usize;
    let mut first = true;
    loop {
        let size_words = word(memory, index)? as usize;
        let tag = word(memory, index + 1)?;
        if first && (tag != ATAG_CORE || (size_words != 2 && size_words != 5)) {
            return None;
        }
        first = false;
        if tag == ATAG_NONE {
            return Some(tags);
        }
        if size_words < 2 || count == MAX_TAGS {
            return None;
        }
        let end = index.checked_add(size_words)?.checked_mul(4)?;
        let payload = memory.get(4 * (index + 2)..end)?;
        match tag {
            ATAG_MEM if payload.len() >= 8 && tags.memory.is_none() => {
                tags.memory = Some((u64::from(word(payload, 1)?), u64::from(word(payload, 0)?)));
            }
            ATAG_CMDLINE => {
                // The payload words hold a NUL-terminated string.
                let bytes = payload;
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                // Keep the valid start if the text is damaged: on QEMU's raspi machines a line
                // longer than ~460 bytes runs into the secondary-core stub written at 0x300.
                tags.command_line = Some(match core::str::from_utf8(&bytes[..end]) {
                    Ok(text) => text,
                    Err(error) => core::str::from_utf8(&bytes[..error.valid_up_to()]).unwrap_or_default(),
                });
            }
            _ => {}
        }
        index += size_words;
        count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn bytes(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|word| word.to_le_bytes()).collect()
    }

    fn qemu_like_list(command_line: &str) -> Vec<u32> {
        let mut words = vec![5, ATAG_CORE, 0, 0, 0, 4, ATAG_MEM, 0x3c00_0000, 0];
        let mut bytes = command_line.as_bytes().to_vec();
        bytes.push(0);
        while !bytes.len().is_multiple_of(4) {
            bytes.push(0);
        }
        words.push(2 + (bytes.len() / 4) as u32);
        words.push(ATAG_CMDLINE);
        words.extend(bytes.chunks(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        words.extend([0, ATAG_NONE]);
        words
    }

    #[test]
    fn qemu_list_gives_memory_and_command_line() {
        let words = qemu_like_list("preset=quick exit=semihosting");
        let memory = bytes(&words);
        let tags = parse(&memory).unwrap();
        assert_eq!(tags.memory, Some((0, 0x3c00_0000)));
        assert_eq!(tags.command_line, Some("preset=quick exit=semihosting"));
    }

    #[test]
    fn a_damaged_command_line_keeps_its_valid_start() {
        let mut words = qemu_like_list("exit=semihosting runs=1");
        // The string's words are the last eight before ATAG_NONE's two; break the one holding " run".
        let index = words.len() - 4;
        words[index] = 0xffff_ffff;
        let memory = bytes(&words);
        let line = parse(&memory).unwrap().command_line.unwrap();
        assert_eq!(line, "exit=semihosting");
    }

    #[test]
    fn garbage_is_not_a_list() {
        assert_eq!(parse(&bytes(&[0xd00d_feed, 0, 0, 0])), None);
        assert_eq!(parse(&[]), None);
        let words = qemu_like_list("x");
        assert_eq!(parse(&bytes(&words[..words.len() - 2])), None);
        assert_eq!(parse(&bytes(&[5, ATAG_CORE, 0, 0, 0, 1, 7])), None);
        // A list cut inside a word is no list either.
        assert_eq!(parse(&bytes(&words)[..13]), None);
    }
}
