//! Emulated-disk specifications (`SIZE[:pattern|pattern-partition|zeros|FILE]`) and the image files made from them
//! for QEMU (docs/qemu.md §0, §2: SD card sizes must be a power of two).
#![forbid(unsafe_code)]

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use bench::units::ByteSize;

use crate::pattern;

/// Errors from parsing a size or disk specification, or from creating a disk image.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("size {text:?} is not a size; accepted forms: 4096, 512K, 64M, 4G, 1T (binary units, optional 'iB'/'B')")]
    MalformedSize { text: String },
    #[error("size {text:?} is zero or too large")]
    SizeOutOfRange { text: String },
    #[error("disk size {size_bytes} bytes is not a multiple of 512")]
    NotWholeSectors { size_bytes: u64 },
    #[error("content file {path} is {file_bytes} bytes, larger than the disk size {size_bytes} bytes")]
    ContentTooLarge { path: PathBuf, file_bytes: u64, size_bytes: u64 },
    #[error("cannot read content file {path}: {source}")]
    ContentFile { path: PathBuf, source: io::Error },
    #[error("scratch region {} does not fit a {} disk after its first MiB", ByteSize(*region_bytes), ByteSize(*size_bytes))]
    ScratchTooLarge { region_bytes: u64, size_bytes: u64 },
    #[error("cannot create disk image {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
}

/// Parses a byte count: a plain number of bytes or a number with a binary unit
/// (`K`, `M`, `G`, `T`, optionally followed by `iB` or `B`, case-insensitive).
pub fn parse_size_bytes(text: &str) -> Result<u64, DiskError> {
    let malformed = || DiskError::MalformedSize { text: text.to_string() };
    let trimmed = text.trim();
    let digits_end = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(malformed());
    }
    let number: u64 = digits.parse().map_err(|_| malformed())?;
    let unit_lower = unit.to_ascii_lowercase();
    let shift = match unit_lower.trim_end_matches("ib").trim_end_matches('b') {
        "" if unit_lower.is_empty() || unit_lower == "b" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return Err(malformed()),
    };
    let bytes = number
        .checked_mul(1u64 << shift)
        .filter(|bytes| *bytes > 0)
        .ok_or_else(|| DiskError::SizeOutOfRange { text: text.to_string() })?;
    Ok(bytes)
}

/// What an emulated disk holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskContent {
    /// [`crate::pattern`]: every 512-byte sector tagged with its number.
    Pattern,
    /// The pattern, with an MBR and one pattern partition (`blockdev::pattern_region`) from
    /// 1 MiB to the end, which the kernel finds and `check=` verifies by default.
    PatternPartition,
    /// All zeros (a sparse file).
    Zeros,
    /// The bytes of a file, followed by zeros up to the disk size.
    File(PathBuf),
}

/// Whether the kernel's writes reach the image file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskWrites {
    /// QEMU's `snapshot=on`: the file never changes (every read test).
    Discarded,
    /// `,scratch=SIZE`: an MBR partition of type 0xDA at 1 MiB holding a marked scratch region
    /// of SIZE; the image is rebuilt for every run and written in place.
    Scratch { region_bytes: u64 },
    /// `,writable`: the image (a copy, for FILE content) is written in place, as it is.
    InPlace,
}

/// `SIZE[:pattern|zeros|FILE][,scratch=SIZE|,writable]`: the size of an emulated disk, what it
/// holds (default: pattern) and whether the kernel's writes reach the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSpec {
    pub size_bytes: u64,
    pub content: DiskContent,
    pub writes: DiskWrites,
}

impl FromStr for DiskSpec {
    type Err = DiskError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (text, writes) = match text.rsplit_once(',') {
            Some((rest, "writable")) => (rest, DiskWrites::InPlace),
            Some((rest, option)) => match option.strip_prefix("scratch=") {
                Some(size) => (rest, DiskWrites::Scratch { region_bytes: parse_size_bytes(size)? }),
                None => (text, DiskWrites::Discarded),
            },
            None => (text, DiskWrites::Discarded),
        };
        let (size_text, content_text) = match text.split_once(':') {
            Some((size, content)) => (size, Some(content)),
            None => (text, None),
        };
        let size_bytes = parse_size_bytes(size_text)?;
        if size_bytes % pattern::SECTOR_BYTES as u64 != 0 {
            return Err(DiskError::NotWholeSectors { size_bytes });
        }
        let content = match content_text {
            None | Some("pattern") => DiskContent::Pattern,
            Some("pattern-partition") => DiskContent::PatternPartition,
            Some("zeros") | Some("zero") => DiskContent::Zeros,
            Some(path) => DiskContent::File(PathBuf::from(path)),
        };
        if let DiskWrites::Scratch { region_bytes } = writes {
            if scratch_partition_end(region_bytes) > size_bytes {
                return Err(DiskError::ScratchTooLarge { region_bytes, size_bytes });
            }
        }
        Ok(DiskSpec { size_bytes, content, writes })
    }
}

/// Where the scratch partition of a `scratch=` disk starts.
pub const SCRATCH_PARTITION_OFFSET_BYTES: u64 = 1 << 20;

/// The end of the scratch partition of a `scratch=SIZE` disk (SIZE rounded up to 1 MiB).
fn scratch_partition_end(region_bytes: u64) -> u64 {
    SCRATCH_PARTITION_OFFSET_BYTES + region_bytes.next_multiple_of(1 << 20)
}

impl fmt::Display for DiskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = ByteSize(self.size_bytes).to_string().replace(' ', "");
        match &self.content {
            DiskContent::Pattern => write!(f, "{size}:pattern")?,
            DiskContent::PatternPartition => write!(f, "{size}:pattern-partition")?,
            DiskContent::Zeros => write!(f, "{size}:zeros")?,
            DiskContent::File(path) => write!(f, "{size}:{}", path.display())?,
        }
        match self.writes {
            DiskWrites::Discarded => Ok(()),
            DiskWrites::Scratch { region_bytes } => {
                write!(f, ",scratch={}", ByteSize(region_bytes).to_string().replace(' ', ""))
            }
            DiskWrites::InPlace => write!(f, ",writable"),
        }
    }
}

impl DiskSpec {
    /// The same spec with the size rounded up to a power of two (QEMU's SD card model refuses
    /// other sizes, docs/qemu.md §2 "Card model"); `None` when it already is one.
    pub fn rounded_to_power_of_two(&self) -> Option<DiskSpec> {
        if self.size_bytes.is_power_of_two() {
            return None;
        }
        Some(DiskSpec { size_bytes: self.size_bytes.next_power_of_two(), ..self.clone() })
    }

    /// Creates the image at `path`, reusing an existing one made from the same pattern/zeros
    /// spec (recorded in a `.spec` file beside it); `progress(done, total)` is called while
    /// pattern bytes are written. A file-content image is always rebuilt.
    pub fn create_image(&self, path: &Path, mut progress: impl FnMut(u64, u64)) -> Result<(), DiskError> {
        let create_error = |source| DiskError::Create { path: path.to_path_buf(), source };
        let stamp_path = path.with_extension("spec");
        let stamp_text = self.to_string();
        let reusable = !matches!(self.content, DiskContent::File(_))
            && self.writes == DiskWrites::Discarded
            && fs::read_to_string(&stamp_path).is_ok_and(|stamp| stamp == stamp_text)
            && fs::metadata(path).is_ok_and(|meta| meta.len() == self.size_bytes);
        if reusable {
            return Ok(());
        }
        // The stamp goes away first, so an interrupted build is never reused.
        match fs::remove_file(&stamp_path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(create_error(error)),
            _ => {}
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(create_error)?;
        }
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(create_error)?;
        match &self.content {
            DiskContent::Zeros => {}
            DiskContent::Pattern => {
                pattern::write_pattern(&mut file, self.size_bytes, |done| progress(done, self.size_bytes))
                    .map_err(create_error)?;
            }
            DiskContent::PatternPartition => {
                const MIB: u64 = 1 << 20;
                file.set_len(self.size_bytes).map_err(create_error)?;
                pattern::write_pattern(&mut file, MIB.min(self.size_bytes), |_| {}).map_err(create_error)?;
                let length = (self.size_bytes - MIB) / MIB * MIB;
                pattern::add_pattern_partition(&mut file, MIB, length, |done| {
                    progress(MIB + done, self.size_bytes)
                })
                .map_err(create_error)?;
            }
            DiskContent::File(source_path) => {
                let content_error = |source| DiskError::ContentFile { path: source_path.clone(), source };
                let mut source = File::open(source_path).map_err(content_error)?;
                let file_bytes = source.metadata().map_err(content_error)?.len();
                if file_bytes > self.size_bytes {
                    return Err(DiskError::ContentTooLarge {
                        path: source_path.clone(),
                        file_bytes,
                        size_bytes: self.size_bytes,
                    });
                }
                let mut buffer = vec![0u8; 1 << 20];
                let mut copied = 0;
                loop {
                    let count = source.read(&mut buffer).map_err(content_error)?;
                    if count == 0 {
                        break;
                    }
                    file.write_all(&buffer[..count]).map_err(create_error)?;
                    copied += count as u64;
                    progress(copied, self.size_bytes);
                }
            }
        }
        // set_len extends with a hole, so zeros cost no disk space.
        file.set_len(self.size_bytes).map_err(create_error)?;
        file.sync_all().map_err(create_error)?;
        drop(file);
        if let DiskWrites::Scratch { region_bytes } = self.writes {
            let region_bytes = region_bytes.next_multiple_of(1 << 20);
            let region_id = crate::scratch::random_region_id().map_err(create_error)?;
            crate::scratch::add_scratch_partition(
                path,
                SCRATCH_PARTITION_OFFSET_BYTES,
                region_bytes,
                region_id,
            )
            .map_err(|error| create_error(io::Error::other(error.to_string())))?;
        }
        if !matches!(self.content, DiskContent::File(_)) && self.writes == DiskWrites::Discarded {
            fs::write(&stamp_path, stamp_text).map_err(create_error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_size_bytes("512K").unwrap(), 512 * 1024);
        assert_eq!(parse_size_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size_bytes("4g").unwrap(), 4 << 30);
        assert_eq!(parse_size_bytes("1TB").unwrap(), 1 << 40);
        assert_eq!(parse_size_bytes("100B").unwrap(), 100);
    }

    #[test]
    fn bad_sizes_are_refused() {
        for text in ["", "M", "12X", "1.5G", "-4M", "4MM"] {
            assert!(matches!(parse_size_bytes(text), Err(DiskError::MalformedSize { .. })), "{text}");
        }
        assert!(matches!(parse_size_bytes("0"), Err(DiskError::SizeOutOfRange { .. })));
        assert!(matches!(parse_size_bytes("99999999999T"), Err(DiskError::SizeOutOfRange { .. })));
    }

    #[test]
    fn disk_specs_parse_content_kinds() {
        let partitioned: DiskSpec = "64M:pattern-partition".parse().unwrap();
        assert_eq!(partitioned.content, DiskContent::PatternPartition);
        assert_eq!(partitioned.to_string(), "64MiB:pattern-partition");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partitioned.img");
        "4M:pattern-partition".parse::<DiskSpec>().unwrap().create_image(&path, |_, _| {}).unwrap();
        let data = fs::read(&path).unwrap();
        assert_eq!((data.len(), data[446 + 4], data[510]), (4 << 20, 0x7F, 0x55));
        assert_eq!(
            blockdev::marker::Marker::parse(blockdev::marker::MarkerKind::Pattern, &data[1 << 20..])
                .unwrap()
                .length_bytes,
            3 << 20
        );
        assert_eq!(blockdev::pattern::first_mismatch(2 << 20, &data[2 << 20..]), None);
        let pattern: DiskSpec = "64M".parse().unwrap();
        assert_eq!(
            pattern,
            DiskSpec { size_bytes: 64 << 20, content: DiskContent::Pattern, writes: DiskWrites::Discarded }
        );
        let zeros: DiskSpec = "1G:zeros".parse().unwrap();
        assert_eq!(zeros.content, DiskContent::Zeros);
        let file: DiskSpec = "8M:/tmp/x.img".parse().unwrap();
        assert_eq!(file.content, DiskContent::File(PathBuf::from("/tmp/x.img")));
        assert!(matches!(
            "1000:zeros".parse::<DiskSpec>(),
            Err(DiskError::NotWholeSectors { size_bytes: 1000 })
        ));
        assert_eq!(zeros.to_string(), "1GiB:zeros");
    }

    #[test]
    fn scratch_and_writable_specs_parse_and_print_back() {
        let scratch: DiskSpec = "512M:pattern,scratch=256M".parse().unwrap();
        assert_eq!(scratch.writes, DiskWrites::Scratch { region_bytes: 256 << 20 });
        assert_eq!(scratch.content, DiskContent::Pattern);
        assert_eq!(scratch.to_string(), "512MiB:pattern,scratch=256MiB");
        let writable: DiskSpec = "64M:/tmp/a.img,writable".parse().unwrap();
        assert_eq!(writable.writes, DiskWrites::InPlace);
        assert_eq!(writable.content, DiskContent::File(PathBuf::from("/tmp/a.img")));
        assert!(matches!("4M,scratch=4M".parse::<DiskSpec>(), Err(DiskError::ScratchTooLarge { .. })));
        assert!(matches!("4M,scratch=x".parse::<DiskSpec>(), Err(DiskError::MalformedSize { .. })));
    }

    #[test]
    fn a_scratch_image_is_marked_and_rebuilt_for_every_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.img");
        let spec: DiskSpec = "8M:pattern,scratch=4M".parse().unwrap();
        spec.create_image(&path, |_, _| {}).unwrap();
        let findings = crate::scratch::scan_file(&path).unwrap();
        let [blockdev::scratch::Finding::Region(region)] = findings[..] else { panic!("{findings:?}") };
        assert_eq!((region.start_bytes, region.length_bytes), (1 << 20, 4 << 20));
        let data = fs::read(&path).unwrap();
        assert_eq!(&data[6 << 20..(6 << 20) + 8], b"BAREBNCH", "the pattern outside the marker");
        fs::write(&path, vec![0u8; 8 << 20]).unwrap();
        spec.create_image(&path, |_, _| {}).unwrap();
        assert_eq!(crate::scratch::scan_file(&path).unwrap().len(), 1, "rebuilt, not reused");
    }

    #[test]
    fn rounding_to_a_power_of_two() {
        let spec: DiskSpec = "300M".parse().unwrap();
        assert_eq!(spec.rounded_to_power_of_two().unwrap().size_bytes, 512 << 20);
        let exact: DiskSpec = "256M".parse().unwrap();
        assert_eq!(exact.rounded_to_power_of_two(), None);
    }

    #[test]
    fn images_hold_their_content_and_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let zeros_path = dir.path().join("z.img");
        let spec: DiskSpec = "2M:zeros".parse().unwrap();
        spec.create_image(&zeros_path, |_, _| {}).unwrap();
        assert_eq!(fs::read(&zeros_path).unwrap(), vec![0u8; 2 << 20]);

        let pattern_path = dir.path().join("p.img");
        let spec: DiskSpec = "1M".parse().unwrap();
        spec.create_image(&pattern_path, |_, _| {}).unwrap();
        let data = fs::read(&pattern_path).unwrap();
        assert_eq!(&data[512..520], b"BAREBNCH");
        assert_eq!(data[520], 1);
        // A reused image is not rewritten: mark it and check the mark survives.
        let mut marked = data.clone();
        marked[0] = b'X';
        fs::write(&pattern_path, &marked).unwrap();
        spec.create_image(&pattern_path, |_, _| {}).unwrap();
        assert_eq!(fs::read(&pattern_path).unwrap()[0], b'X');
        // A different spec at the same path rebuilds it.
        let bigger: DiskSpec = "2M".parse().unwrap();
        bigger.create_image(&pattern_path, |_, _| {}).unwrap();
        assert_eq!(fs::read(&pattern_path).unwrap()[0], b'B');
    }

    #[test]
    fn file_content_is_copied_and_padded() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source.bin");
        fs::write(&source, b"hello").unwrap();
        let spec = DiskSpec {
            size_bytes: 4096,
            content: DiskContent::File(source.clone()),
            writes: DiskWrites::Discarded,
        };
        let image = dir.path().join("f.img");
        spec.create_image(&image, |_, _| {}).unwrap();
        let data = fs::read(&image).unwrap();
        assert_eq!(data.len(), 4096);
        assert_eq!(&data[..5], b"hello");
        assert!(data[5..].iter().all(|byte| *byte == 0));
        let small =
            DiskSpec { size_bytes: 4, content: DiskContent::File(source), writes: DiskWrites::Discarded };
        assert!(matches!(
            small.create_image(&image, |_, _| {}),
            Err(DiskError::ContentTooLarge { file_bytes: 5, size_bytes: 4, .. })
        ));
    }
}
