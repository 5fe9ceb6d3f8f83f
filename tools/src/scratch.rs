//! Scratch regions on the host: marking a partition of a disk or image (`barebench scratch`),
//! and adding a marked partition to an image (`barebench image --scratch`, the `scratch=` part of
//! `barebench qemu`'s disk specs). The marker format and the partition tables are
//! `blockdev::scratch`'s, the same code the kernel scans with (docs/writes.md §2).
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use blockdev::marker::{Marker, RESERVED_BYTES};
use blockdev::scratch::{
    self, find_partition, BlockReader, Finding, Partition, PartitionTable, ScanError, MBR_TYPE_NON_FS_DATA,
};

use crate::image::card::{self, CardError};
use bench::units::ByteSize;

/// Bytes read from the start of a partition to recognise a file system (btrfs's superblock is
/// at 64 KiB).
const PROBE_BYTES: usize = 68 << 10;
const MBR_SECTOR_BYTES: u64 = 512;

/// Refusals and failures of the scratch commands.
#[derive(Debug, thiserror::Error)]
pub enum ScratchError {
    #[error(transparent)]
    Target(#[from] CardError),
    #[error("{path}: {context}: {source}")]
    Io { path: PathBuf, context: &'static str, source: io::Error },
    #[error("{path}: cannot read its partition table: {problem}")]
    Table { path: PathBuf, problem: String },
    #[error("{path} has no partition {number} (MBR primary 1-4, or a GPT entry behind a protective MBR)")]
    NoSuchPartition { path: PathBuf, number: u32 },
    #[error("{path}: {partition} holds a {filesystem} file system; marking it would let the benchmark overwrite it. Repeat with --force if its data may be destroyed")]
    HoldsFilesystem { path: PathBuf, partition: String, filesystem: &'static str },
    #[error("{path}: {partition} is {} bytes, less than the reserved 1 MiB plus one block ({} bytes)", .partition_bytes, .minimum_bytes)]
    TooSmall { path: PathBuf, partition: String, partition_bytes: u64, minimum_bytes: u64 },
    #[error("{path}: the MBR has no free primary entry for the scratch partition")]
    NoFreeEntry { path: PathBuf },
    #[error("{path}: partitions need an MBR or GPT, and a scratch region that fits below 2 TiB")]
    TooLarge { path: PathBuf },
}

/// A disk or image file read one logical block at a time.
pub struct FileReader {
    file: File,
    block_bytes: u32,
    block_count: u64,
}

impl FileReader {
    /// Opens `path` for reading; a block device reports its logical block size, a file has 512.
    pub fn open(path: &Path) -> io::Result<FileReader> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        let block_bytes = logical_block_bytes(&meta).unwrap_or(512);
        let size_bytes = if meta.is_file() { meta.len() } else { (&file).seek(SeekFrom::End(0))? };
        Ok(FileReader { file, block_bytes, block_count: size_bytes / u64::from(block_bytes) })
    }
}

/// A block device's logical block size from sysfs (`queue/logical_block_size`).
fn logical_block_bytes(meta: &std::fs::Metadata) -> Option<u32> {
    if meta.is_file() {
        return None;
    }
    let dir = card::sysfs_dir_of(meta.rdev())?;
    let whole = if dir.join("partition").is_file() { dir.parent()?.to_path_buf() } else { dir };
    card::read_trimmed(&whole.join("queue/logical_block_size"))?.parse().ok()
}

impl BlockReader for FileReader {
    type Error = io::Error;
    fn block_bytes(&self) -> u32 {
        self.block_bytes
    }
    fn block_count(&self) -> u64 {
        self.block_count
    }
    fn read_block(&mut self, lba: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.seek(SeekFrom::Start(lba * u64::from(self.block_bytes)))?;
        self.file.read_exact(out)
    }
}

/// The file system whose signature starts `bytes` (a partition's first bytes), if any: FAT,
/// exFAT, NTFS (boot sector names), ext2/3/4 (superblock magic 0xEF53 at 1080), XFS, btrfs,
/// F2FS, squashfs, LUKS, LVM2, Linux swap, ISO 9660. Signatures as util-linux's libblkid probes
/// them (libblkid/src/superblocks/*.c).
pub fn recognise_filesystem(bytes: &[u8]) -> Option<&'static str> {
    let at = |offset: usize, signature: &[u8]| bytes.get(offset..offset + signature.len()) == Some(signature);
    let signatures: [(&'static str, usize, &[u8]); 13] = [
        ("FAT32", 82, b"FAT32   "),
        ("FAT12/16", 54, b"FAT1"),
        ("exFAT", 3, b"EXFAT   "),
        ("NTFS", 3, b"NTFS    "),
        ("ext2/3/4", 1080, &[0x53, 0xEF]),
        ("XFS", 0, b"XFSB"),
        ("btrfs", 65_600, b"_BHRfS_M"),
        ("F2FS", 1024, &[0x10, 0x20, 0xF5, 0xF2]),
        ("squashfs", 0, b"hsqs"),
        ("LUKS", 0, b"LUKS\xba\xbe"),
        ("LVM2 physical volume", 536, b"LVM2 001"),
        ("Linux swap", 4086, b"SWAPSPACE2"),
        ("ISO 9660", 32_769, b"CD001"),
    ];
    signatures.iter().find(|(_, offset, signature)| at(*offset, signature)).map(|(name, _, _)| *name)
}

/// What `barebench scratch` will do, for the user to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkPlan {
    pub path: PathBuf,
    pub partition: Partition,
    pub block_bytes: u32,
    pub marker: Marker,
    /// The finding for the partition as it is now (an existing marker, a refused one).
    pub existing: Option<Finding>,
    /// A file system found there (only with `--force`).
    pub filesystem: Option<&'static str>,
}

impl MarkPlan {
    pub fn offset_bytes(&self) -> u64 {
        self.partition.first_lba * u64::from(self.block_bytes)
    }

    /// The lines shown before asking.
    pub fn describe(&self) -> String {
        let offset = self.offset_bytes();
        let mut text = format!(
            "{}: {} from byte {offset}, {} ({} bytes)\n",
            self.path.display(),
            self.partition,
            ByteSize(self.marker.length_bytes),
            self.marker.length_bytes
        );
        if let Some(existing) = &self.existing {
            text.push_str(&format!("now: {existing}\n"));
        }
        if let Some(filesystem) = self.filesystem {
            text.push_str(&format!(
                "now: a {filesystem} file system (--force): its data will be destroyed\n"
            ));
        }
        text.push_str(&format!(
            "will write: a 512-byte BAREBENCHSCRATCH marker at byte {offset} (version 1, length {} \
             bytes, region id {:#018x})\n\
             then: a kernel started with write=DEV may overwrite bytes {}..{} of this partition \
             (all but its first MiB)",
            self.marker.length_bytes, self.marker.region_id, RESERVED_BYTES, self.marker.length_bytes
        ));
        text
    }
}

/// Checks `path` (a regular file, or a whole block device that is not mounted nor the system's)
/// and its partition `number`, and returns what marking it would write. A recognisable file
/// system is refused unless `force` (which also accepts a non-removable device).
pub fn plan_mark(path: &Path, number: u32, force: bool, region_id: u64) -> Result<MarkPlan, ScratchError> {
    card::inspect_target(path, 0, force)?;
    let io_error = |context| move |source| ScratchError::Io { path: path.to_path_buf(), context, source };
    let mut reader = FileReader::open(path).map_err(io_error("cannot open"))?;
    let block_bytes = reader.block_bytes();
    let mut buffer = vec![0u8; block_bytes as usize];
    let partition = find_partition(&mut reader, &mut buffer, number)
        .map_err(|error| table_error(path, error))?
        .ok_or(ScratchError::NoSuchPartition { path: path.to_path_buf(), number })?;
    let partition_bytes = partition.block_count * u64::from(block_bytes);
    let minimum_bytes = RESERVED_BYTES + u64::from(block_bytes);
    if partition_bytes < minimum_bytes {
        let partition = partition.to_string();
        return Err(ScratchError::TooSmall {
            path: path.to_path_buf(),
            partition,
            partition_bytes,
            minimum_bytes,
        });
    }
    let mut probe = vec![0u8; PROBE_BYTES];
    reader
        .file
        .seek(SeekFrom::Start(partition.first_lba * u64::from(block_bytes)))
        .map_err(io_error("cannot seek"))?;
    let probed = read_up_to(&mut reader.file, &mut probe).map_err(io_error("cannot read"))?;
    let filesystem = recognise_filesystem(&probe[..probed]);
    if let (Some(filesystem), false) = (filesystem, force) {
        let partition = partition.to_string();
        return Err(ScratchError::HoldsFilesystem { path: path.to_path_buf(), partition, filesystem });
    }
    let existing = scratch::judge_marker(&partition, &probe[..probed.min(block_bytes as usize)], block_bytes);
    let marker = Marker::scratch(partition_bytes, region_id);
    Ok(MarkPlan { path: path.to_path_buf(), partition, block_bytes, marker, existing, filesystem })
}

fn table_error(path: &Path, error: ScanError<io::Error>) -> ScratchError {
    ScratchError::Table { path: path.to_path_buf(), problem: error.to_string() }
}

fn read_up_to(file: &mut File, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            count => filled += count,
        }
    }
    Ok(filled)
}

/// Writes the planned marker (512 bytes, then fsync).
pub fn write_marker(plan: &MarkPlan) -> Result<(), ScratchError> {
    let io_error = |context| move |source| ScratchError::Io { path: plan.path.clone(), context, source };
    let mut file =
        OpenOptions::new().write(true).open(&plan.path).map_err(io_error("cannot open for writing"))?;
    file.seek(SeekFrom::Start(plan.offset_bytes())).map_err(io_error("cannot seek"))?;
    file.write_all(&plan.marker.encode()).map_err(io_error("cannot write the marker"))?;
    file.sync_all().map_err(io_error("cannot sync"))
}

/// A random region id from the kernel's random source.
pub fn random_region_id() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// Adds a primary MBR partition of type 0xDA covering `length_bytes` from `offset_bytes` (both
/// multiples of 1 MiB) to the image at `path`, writing an MBR signature when there is none, and
/// marks it. Returns the partition number.
pub fn add_scratch_partition(
    path: &Path,
    offset_bytes: u64,
    length_bytes: u64,
    region_id: u64,
) -> Result<u32, ScratchError> {
    let io_error = |context| move |source| ScratchError::Io { path: path.to_path_buf(), context, source };
    let mut file =
        OpenOptions::new().read(true).write(true).open(path).map_err(io_error("cannot open for writing"))?;
    let mut mbr = [0u8; 512];
    file.read_exact(&mut mbr).map_err(io_error("cannot read the MBR"))?;
    if mbr[510..] != [0x55, 0xAA] {
        mbr = [0u8; 512];
        mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    }
    let slot = (0..4).find(|&index| mbr[446 + 16 * index + 4] == 0);
    let index = slot.ok_or(ScratchError::NoFreeEntry { path: path.to_path_buf() })?;
    let first_lba = u32::try_from(offset_bytes / MBR_SECTOR_BYTES);
    let sectors = u32::try_from(length_bytes / MBR_SECTOR_BYTES);
    let (Ok(first_lba), Ok(sectors)) = (first_lba, sectors) else {
        return Err(ScratchError::TooLarge { path: path.to_path_buf() });
    };
    let entry = &mut mbr[446 + 16 * index..446 + 16 * index + 16];
    entry.fill(0);
    entry[4] = MBR_TYPE_NON_FS_DATA;
    entry[8..12].copy_from_slice(&first_lba.to_le_bytes());
    entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    file.seek(SeekFrom::Start(0)).map_err(io_error("cannot seek"))?;
    file.write_all(&mbr).map_err(io_error("cannot write the MBR"))?;
    file.seek(SeekFrom::Start(offset_bytes)).map_err(io_error("cannot seek"))?;
    file.write_all(&Marker::scratch(length_bytes, region_id).encode())
        .map_err(io_error("cannot write the marker"))?;
    file.sync_all().map_err(io_error("cannot sync"))?;
    Ok(index as u32 + 1)
}

/// Grows the image at `path` (its partitions end at its current size, a multiple of 1 MiB) by
/// a marked scratch partition of `length_bytes` (rounded up to 1 MiB) right after them; the
/// image's new size is the next power of two, as QEMU's SD card needs. Returns the partition
/// number, the region and the new image size.
pub fn append_scratch_partition(
    path: &Path,
    length_bytes: u64,
    region_id: u64,
) -> Result<(u32, u64, u64), ScratchError> {
    let io_error = |context| move |source| ScratchError::Io { path: path.to_path_buf(), context, source };
    let old_bytes = std::fs::metadata(path).map_err(io_error("cannot inspect"))?.len();
    let offset_bytes = old_bytes.next_multiple_of(RESERVED_BYTES);
    let length_bytes = length_bytes.max(RESERVED_BYTES + MBR_SECTOR_BYTES).next_multiple_of(RESERVED_BYTES);
    let new_bytes = (offset_bytes + length_bytes).next_power_of_two();
    let file = OpenOptions::new().write(true).open(path).map_err(io_error("cannot open for writing"))?;
    file.set_len(new_bytes).map_err(io_error("cannot grow"))?;
    drop(file);
    let number = add_scratch_partition(path, offset_bytes, length_bytes, region_id)?;
    Ok((number, length_bytes, new_bytes))
}

/// Every scratch finding of the disk or image at `path`, as the kernel's scan would report them.
pub fn scan_file(path: &Path) -> Result<Vec<Finding>, ScratchError> {
    let mut reader = FileReader::open(path).map_err(|source| ScratchError::Io {
        path: path.to_path_buf(),
        context: "cannot open",
        source,
    })?;
    let mut buffer = vec![0u8; reader.block_bytes() as usize];
    let mut findings = Vec::new();
    scratch::scan(&mut reader, &mut buffer, &mut |finding| findings.push(finding))
        .map_err(|error| table_error(path, error))?;
    Ok(findings)
}

/// Whether a partition table entry is an MBR one of type 0xDA (what the tool makes).
pub fn is_tool_made(partition: &Partition) -> bool {
    partition.table == PartitionTable::Mbr { partition_type: MBR_TYPE_NON_FS_DATA }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::scratch::{Refusal, ScratchRegion};
    use std::fs;

    const MIB: u64 = 1 << 20;

    fn image(size_bytes: u64) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let file = File::create(&path).unwrap();
        file.set_len(size_bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn an_added_partition_is_found_by_the_kernels_scan() {
        let (_dir, path) = image(16 * MIB);
        assert_eq!(add_scratch_partition(&path, 4 * MIB, 8 * MIB, 0xABCD).unwrap(), 1);
        let findings = scan_file(&path).unwrap();
        let [Finding::Region(ScratchRegion { partition, start_bytes, length_bytes, region_id })] =
            findings[..]
        else {
            panic!("{findings:?}")
        };
        assert!(is_tool_made(&partition));
        assert_eq!((start_bytes, length_bytes, region_id), (4 * MIB, 8 * MIB, 0xABCD));
        // A second one takes the next entry; bytes outside the MBR and the markers stay zero.
        assert_eq!(add_scratch_partition(&path, 12 * MIB, 2 * MIB, 1).unwrap(), 2);
        let bytes = fs::read(&path).unwrap();
        let written: Vec<usize> = bytes.iter().enumerate().filter(|(_, &b)| b != 0).map(|(i, _)| i).collect();
        assert!(written.iter().all(|&i| i < 512
            || (4 * MIB as usize..4 * MIB as usize + 44).contains(&i)
            || (12 * MIB as usize..12 * MIB as usize + 44).contains(&i)));
    }

    #[test]
    fn marking_a_partition_plans_then_writes_only_the_marker() {
        let (_dir, path) = image(16 * MIB);
        add_scratch_partition(&path, 2 * MIB, 4 * MIB, 5).unwrap();
        // Destroy the marker: the partition is now type 0xDA without one.
        let mut bytes = fs::read(&path).unwrap();
        bytes[2 * MIB as usize] = 0;
        fs::write(&path, &bytes).unwrap();
        let plan = plan_mark(&path, 1, false, 0x77).unwrap();
        assert!(matches!(plan.existing, Some(Finding::Refused { reason: Refusal::TypeWithoutMarker, .. })));
        assert_eq!(plan.marker, Marker::scratch(4 * MIB, 0x77));
        let text = plan.describe();
        assert!(text.contains("partition 1 (MBR, type 0xda) from byte 2097152, 4 MiB"), "{text}");
        assert!(text.contains("region id 0x0000000000000077"), "{text}");
        write_marker(&plan).unwrap();
        let after = fs::read(&path).unwrap();
        let changed: Vec<usize> = (0..after.len()).filter(|&i| after[i] != bytes[i]).collect();
        assert!(
            changed.iter().all(|&i| (2 * MIB as usize..2 * MIB as usize + 512).contains(&i)),
            "{changed:?}"
        );
        assert!(matches!(scan_file(&path).unwrap()[..], [Finding::Region(_)]));
    }

    #[test]
    fn a_partition_with_a_filesystem_is_refused_unless_forced() {
        let (_dir, path) = image(16 * MIB);
        add_scratch_partition(&path, 2 * MIB, 4 * MIB, 5).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes[2 * MIB as usize..2 * MIB as usize + 512].fill(0);
        bytes[2 * MIB as usize + 1080..2 * MIB as usize + 1082].copy_from_slice(&[0x53, 0xEF]);
        fs::write(&path, &bytes).unwrap();
        let error = plan_mark(&path, 1, false, 1).unwrap_err();
        assert!(error.to_string().contains("holds a ext2/3/4 file system"), "{error}");
        assert_eq!(fs::read(&path).unwrap(), bytes, "a refusal writes nothing");
        let plan = plan_mark(&path, 1, true, 1).unwrap();
        assert_eq!(plan.filesystem, Some("ext2/3/4"));
        assert!(plan.describe().contains("its data will be destroyed"));
    }

    #[test]
    fn missing_and_tiny_partitions_are_refused() {
        let (_dir, path) = image(16 * MIB);
        assert!(matches!(
            plan_mark(&path, 1, false, 1),
            Err(ScratchError::NoSuchPartition { number: 1, .. })
        ));
        add_scratch_partition(&path, 2 * MIB, MIB, 5).unwrap();
        let error = plan_mark(&path, 1, false, 1).unwrap_err();
        assert!(
            matches!(error, ScratchError::TooSmall { partition_bytes, .. } if partition_bytes == MIB),
            "{error}"
        );
        let missing = plan_mark(Path::new("/nonexistent/disk.img"), 1, false, 1).unwrap_err();
        assert!(missing.to_string().contains("does not exist"), "{missing}");
    }

    #[test]
    fn an_appended_partition_follows_the_image_and_keeps_a_power_of_two() {
        let (_dir, path) = image(64 * MIB);
        let (number, length, total) = append_scratch_partition(&path, 100 * MIB + 1, 9).unwrap();
        assert_eq!((number, length, total), (1, 101 * MIB, 256 * MIB));
        let findings = scan_file(&path).unwrap();
        let [Finding::Region(region)] = findings[..] else { panic!("{findings:?}") };
        assert_eq!((region.start_bytes, region.length_bytes), (64 * MIB, 101 * MIB));
    }

    #[test]
    fn filesystems_are_recognised_by_their_signatures() {
        let mut bytes = vec![0u8; PROBE_BYTES];
        assert_eq!(recognise_filesystem(&bytes), None);
        bytes[82..90].copy_from_slice(b"FAT32   ");
        assert_eq!(recognise_filesystem(&bytes), Some("FAT32"));
        let mut btrfs = vec![0u8; PROBE_BYTES];
        btrfs[65_600..65_608].copy_from_slice(b"_BHRfS_M");
        assert_eq!(recognise_filesystem(&btrfs), Some("btrfs"));
        assert_eq!(recognise_filesystem(&btrfs[..1000]), None, "short input is no match");
    }
}
