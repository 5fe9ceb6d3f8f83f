//! Builds the SD card image in-process: an MBR with one FAT32 (LBA, type 0x0C) boot partition
//! at LBA 8192 holding the boot files (docs/ecosystem.md §1.7 layout, §1.8 fatfs/mbrman recipe).
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::firmware::ImageFile;
use bench::units::ByteSize;

/// Sector size of the image.
pub const SECTOR_BYTES: u64 = 512;
/// First sector of the boot partition: 4 MiB, aligned to SD erase blocks (docs/ecosystem.md §1.7).
pub const PARTITION_START_LBA: u32 = 8192;
/// MBR partition type: W95 FAT32 (LBA).
pub const PARTITION_TYPE_FAT32_LBA: u8 = 0x0C;
/// Fewest clusters a FAT32 volume may have (Microsoft FAT specification, "FAT type
/// determination": fewer than 65525 clusters is FAT12/16).
pub const FAT32_MIN_CLUSTERS: u64 = 65_525;
/// Default image size: a 252 MiB partition, FAT32 with 2 KiB clusters.
pub const DEFAULT_IMAGE_BYTES: u64 = 256 << 20;
/// Offset of the BPB "hidden sectors" field in a FAT boot sector (FAT spec BPB_HiddSec).
const BPB_HIDDEN_SECTORS_OFFSET: u64 = 0x1C;
/// FAT32 backup boot sector, relative to the partition (BPB_BkBootSec as fatfs writes it).
const BACKUP_BOOT_SECTOR: u64 = 6;

/// Errors building the image.
#[derive(Debug, thiserror::Error)]
pub enum FatError {
    #[error("image size {size_bytes} bytes is too small: the files need at least {needed_bytes} bytes ({})", ByteSize(*needed_bytes))]
    TooSmall { size_bytes: u64, needed_bytes: u64 },
    #[error("image size {size_bytes} bytes leaves a partition too small for FAT32 ({clusters} clusters of 512 bytes; at least {FAT32_MIN_CLUSTERS} needed)")]
    TooFewClusters { size_bytes: u64, clusters: u64 },
    #[error("image size {size_bytes} bytes does not fit an MBR (2 TiB at most)")]
    TooLarge { size_bytes: u64 },
    #[error("{context} ({path}): {source}")]
    Io { context: &'static str, path: PathBuf, source: io::Error },
    #[error("partition table: {0}")]
    Mbr(String),
}

/// Where things ended up in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLayout {
    pub image_bytes: u64,
    pub partition_start_lba: u32,
    pub partition_sectors: u32,
    pub cluster_bytes: u32,
    /// Every file written, with its size.
    pub files: Vec<(String, u64)>,
}

impl ImageLayout {
    /// Byte offset of the FAT partition (for `mdir -i IMG@@OFFSET`).
    pub fn partition_offset_bytes(&self) -> u64 {
        u64::from(self.partition_start_lba) * SECTOR_BYTES
    }
}

/// The smallest image that holds `files`, before rounding to a power of two: partition start,
/// the files in whole 4 KiB clusters, FATs and directories (generous), and 25% room.
pub fn minimum_image_bytes(files: &[ImageFile]) -> u64 {
    let data_bytes: u64 = files.iter().map(|file| (file.bytes.len() as u64).div_ceil(4096) * 4096).sum();
    let metadata_bytes = 2 << 20;
    u64::from(PARTITION_START_LBA) * SECTOR_BYTES + (data_bytes + metadata_bytes) * 5 / 4
}

/// The image size to use: the request (or the default), at least the minimum, rounded up to a
/// power of two so QEMU also accepts the image as an SD card (docs/qemu.md §2).
pub fn choose_image_bytes(files: &[ImageFile], requested_bytes: Option<u64>) -> Result<u64, FatError> {
    let needed_bytes = minimum_image_bytes(files);
    let size_bytes = requested_bytes.unwrap_or(DEFAULT_IMAGE_BYTES.max(needed_bytes));
    if size_bytes < needed_bytes {
        return Err(FatError::TooSmall { size_bytes, needed_bytes });
    }
    Ok(size_bytes.next_power_of_two())
}

/// The largest cluster size (512 B to 4 KiB) that still gives a valid FAT32 cluster count.
pub fn cluster_bytes_for(partition_bytes: u64) -> Option<u32> {
    // Approximate data area: FATs and reserved sectors take well under 2%.
    let data_bytes = partition_bytes * 98 / 100;
    [4096u32, 2048, 1024, 512]
        .into_iter()
        .find(|cluster| data_bytes / u64::from(*cluster) >= FAT32_MIN_CLUSTERS)
}

/// Writes the image to `output` (through a temporary file, renamed at the end) and returns its
/// layout. `disk_signature` goes into the MBR, `volume_id` into the FAT.
pub fn build_image(
    output: &Path,
    files: &[ImageFile],
    image_bytes: u64,
    disk_signature: u32,
) -> Result<ImageLayout, FatError> {
    let io_error = |context: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| FatError::Io { context, path, source }
    };
    let partition_offset = u64::from(PARTITION_START_LBA) * SECTOR_BYTES;
    let partition_bytes = image_bytes.saturating_sub(partition_offset);
    let partition_sectors = u32::try_from(partition_bytes / SECTOR_BYTES)
        .map_err(|_| FatError::TooLarge { size_bytes: image_bytes })?;
    let cluster_bytes = cluster_bytes_for(partition_bytes)
        .ok_or(FatError::TooFewClusters { size_bytes: image_bytes, clusters: partition_bytes / 512 })?;
    if image_bytes < minimum_image_bytes(files) {
        return Err(FatError::TooSmall { size_bytes: image_bytes, needed_bytes: minimum_image_bytes(files) });
    }

    let temporary = output.with_extension(format!("tmp.{}", std::process::id()));
    if let Some(parent) = output.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(io_error("cannot create the output directory", parent))?;
    }
    let mut image = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)
        .map_err(io_error("cannot create the image", &temporary))?;
    image.set_len(image_bytes).map_err(io_error("cannot size the image", &temporary))?;

    let mut mbr = mbrman::MBR::new_from(&mut image, SECTOR_BYTES as u32, disk_signature.to_le_bytes())
        .map_err(|error| FatError::Mbr(error.to_string()))?;
    mbr[1] = mbrman::MBRPartitionEntry {
        boot: mbrman::BOOT_ACTIVE,
        first_chs: mbrman::CHS::empty(),
        sys: PARTITION_TYPE_FAT32_LBA,
        last_chs: mbrman::CHS::empty(),
        starting_lba: PARTITION_START_LBA,
        sectors: partition_sectors,
    };
    mbr.write_into(&mut image).map_err(|error| FatError::Mbr(error.to_string()))?;

    {
        let partition = fscommon::StreamSlice::new(&mut image, partition_offset, image_bytes)
            .map_err(io_error("cannot address the partition", &temporary))?;
        let label = *b"BAREBENCH  ";
        fatfs::format_volume(
            partition,
            fatfs::FormatVolumeOptions::new()
                .fat_type(fatfs::FatType::Fat32)
                .bytes_per_cluster(cluster_bytes)
                .volume_id(disk_signature)
                .volume_label(label),
        )
        .map_err(io_error("cannot format FAT32", &temporary))?;
    }
    let mut written = Vec::new();
    {
        let partition = fscommon::StreamSlice::new(&mut image, partition_offset, image_bytes)
            .map_err(io_error("cannot address the partition", &temporary))?;
        let filesystem = fatfs::FileSystem::new(partition, fatfs::FsOptions::new())
            .map_err(io_error("cannot open the new FAT32", &temporary))?;
        let root = filesystem.root_dir();
        for file in files {
            let mut directory = root.clone();
            let mut components: Vec<&str> = file.path.split('/').collect();
            let name = components.pop().unwrap_or_default();
            for component in components {
                directory = match directory.open_dir(component) {
                    Ok(existing) => existing,
                    Err(_) => directory
                        .create_dir(component)
                        .map_err(io_error("cannot create a directory in the image", Path::new(&file.path)))?,
                };
            }
            let mut entry = directory
                .create_file(name)
                .map_err(io_error("cannot create a file in the image", Path::new(&file.path)))?;
            entry
                .truncate()
                .map_err(io_error("cannot truncate a file in the image", Path::new(&file.path)))?;
            entry
                .write_all(&file.bytes)
                .map_err(io_error("cannot write a file in the image", Path::new(&file.path)))?;
            entry.flush().map_err(io_error("cannot write a file in the image", Path::new(&file.path)))?;
            written.push((file.path.clone(), file.bytes.len() as u64));
        }
        drop(root);
        // Counting the free clusters lets unmount store a valid FSInfo free count.
        filesystem.stats().map_err(io_error("cannot read the FAT back", &temporary))?;
        filesystem.unmount().map_err(io_error("cannot finish the FAT32", &temporary))?;
    }
    // fatfs leaves BPB_HiddSec at 0; strict tools want the partition's start LBA there, in the
    // boot sector and its backup (docs/ecosystem.md §1.8).
    for sector in [0, BACKUP_BOOT_SECTOR] {
        image
            .seek(SeekFrom::Start(partition_offset + sector * SECTOR_BYTES + BPB_HIDDEN_SECTORS_OFFSET))
            .map_err(io_error("cannot patch the boot sector", &temporary))?;
        image
            .write_all(&PARTITION_START_LBA.to_le_bytes())
            .map_err(io_error("cannot patch the boot sector", &temporary))?;
    }
    let mut top_directories: Vec<&str> =
        files.iter().filter_map(|file| file.path.split_once('/')).map(|(directory, _)| directory).collect();
    top_directories.dedup();
    for directory in top_directories {
        fix_dot_entries(&mut image, partition_offset, directory)
            .map_err(io_error("cannot fix a directory in the image", Path::new(directory)))?;
    }
    image.sync_all().map_err(io_error("cannot flush the image", &temporary))?;
    drop(image);
    fs::rename(&temporary, output).map_err(io_error("cannot move the image into place", output))?;
    Ok(ImageLayout {
        image_bytes,
        partition_start_lba: PARTITION_START_LBA,
        partition_sectors,
        cluster_bytes,
        files: written,
    })
}

/// Size of a FAT directory entry.
const DIR_ENTRY_BYTES: usize = 32;
/// Directory entry attribute of a long-file-name slot (FAT spec "ATTR_LONG_NAME").
const ATTR_LONG_NAME: u8 = 0x0F;
/// First byte of a free (deleted) directory entry.
const DIR_ENTRY_FREE: u8 = 0xE5;

/// The geometry of a FAT32 volume, from its BPB (FAT specification section 3).
struct Fat32Geometry {
    bytes_per_sector: u64,
    cluster_bytes: u64,
    fat_offset: u64,
    data_offset: u64,
    root_cluster: u32,
}

impl Fat32Geometry {
    fn read(image: &mut File, partition_offset: u64) -> io::Result<Self> {
        let mut boot = [0u8; 512];
        image.seek(SeekFrom::Start(partition_offset))?;
        image.read_exact(&mut boot)?;
        let u16_at = |offset: usize| u64::from(u16::from_le_bytes([boot[offset], boot[offset + 1]]));
        let u32_at = |offset: usize| {
            u32::from_le_bytes([boot[offset], boot[offset + 1], boot[offset + 2], boot[offset + 3]])
        };
        let bytes_per_sector = u16_at(11);
        let sectors_per_cluster = u64::from(boot[13]);
        let reserved_sectors = u16_at(14);
        let fat_count = u64::from(boot[16]);
        let sectors_per_fat = u64::from(u32_at(36));
        let fat_offset = partition_offset + reserved_sectors * bytes_per_sector;
        Ok(Fat32Geometry {
            bytes_per_sector,
            cluster_bytes: sectors_per_cluster * bytes_per_sector,
            fat_offset,
            data_offset: fat_offset + fat_count * sectors_per_fat * bytes_per_sector,
            root_cluster: u32_at(44),
        })
    }

    fn cluster_offset(&self, cluster: u32) -> u64 {
        self.data_offset + u64::from(cluster - 2) * self.cluster_bytes
    }

    /// The clusters of a chain, from the first FAT.
    fn chain(&self, image: &mut File, first_cluster: u32) -> io::Result<Vec<u32>> {
        let mut clusters = vec![first_cluster];
        let mut entry = [0u8; 4];
        loop {
            let current = *clusters.last().unwrap_or(&first_cluster);
            image.seek(SeekFrom::Start(self.fat_offset + u64::from(current) * 4))?;
            image.read_exact(&mut entry)?;
            let next = u32::from_le_bytes(entry) & 0x0FFF_FFFF;
            if !(2..0x0FFF_FFF8).contains(&next) || clusters.len() as u64 > self.bytes_per_sector * 1024 {
                return Ok(clusters);
            }
            clusters.push(next);
        }
    }
}

/// fatfs 0.3.6 writes long-name slots before the "." and ".." entries of a new directory and
/// points ".." of a top-level directory at the root cluster; fsck.fat rejects both. The FAT
/// specification (section 6.x, "dot and dotdot entries") wants "." and ".." as the first two
/// entries, and ".." of a directory in the root to have cluster 0. This moves the two short
/// entries to the front, frees the two slots after them and clears the ".." cluster, for the
/// top-level directory `name`. A directory without the stray slots is left as it is.
fn fix_dot_entries(image: &mut File, partition_offset: u64, name: &str) -> io::Result<()> {
    let geometry = Fat32Geometry::read(image, partition_offset)?;
    let mut short_name = [b' '; 11];
    for (slot, byte) in short_name.iter_mut().zip(name.bytes().take(8)) {
        *slot = byte.to_ascii_uppercase();
    }
    let mut directory_cluster = None;
    'search: for cluster in geometry.chain(image, geometry.root_cluster)? {
        let mut bytes = vec![0u8; geometry.cluster_bytes as usize];
        image.seek(SeekFrom::Start(geometry.cluster_offset(cluster)))?;
        image.read_exact(&mut bytes)?;
        for entry in bytes.chunks(DIR_ENTRY_BYTES) {
            if entry[0] == 0 {
                break 'search;
            }
            if entry[11] != ATTR_LONG_NAME && entry[11] & 0x10 != 0 && entry[..11] == short_name {
                let high = u32::from(u16::from_le_bytes([entry[20], entry[21]]));
                let low = u32::from(u16::from_le_bytes([entry[26], entry[27]]));
                directory_cluster = Some((high << 16) | low);
                break 'search;
            }
        }
    }
    let Some(directory_cluster) = directory_cluster else {
        return Ok(());
    };
    let start = geometry.cluster_offset(directory_cluster);
    let mut slots = [0u8; 4 * DIR_ENTRY_BYTES];
    image.seek(SeekFrom::Start(start))?;
    image.read_exact(&mut slots)?;
    let slot = |index: usize| &slots[index * DIR_ENTRY_BYTES..(index + 1) * DIR_ENTRY_BYTES];
    let stray_long_names = slot(0)[11] == ATTR_LONG_NAME
        && slot(1)[..11] == *b".          "
        && slot(2)[11] == ATTR_LONG_NAME
        && slot(3)[..11] == *b"..         ";
    if !stray_long_names {
        return Ok(());
    }
    let mut fixed = [0u8; 4 * DIR_ENTRY_BYTES];
    fixed[..DIR_ENTRY_BYTES].copy_from_slice(slot(1));
    fixed[DIR_ENTRY_BYTES..2 * DIR_ENTRY_BYTES].copy_from_slice(slot(3));
    // ".." of a directory in the root names cluster 0 (high word at 20, low word at 26).
    for offset in [DIR_ENTRY_BYTES + 20, DIR_ENTRY_BYTES + 21, DIR_ENTRY_BYTES + 26, DIR_ENTRY_BYTES + 27] {
        fixed[offset] = 0;
    }
    fixed[2 * DIR_ENTRY_BYTES] = DIR_ENTRY_FREE;
    fixed[3 * DIR_ENTRY_BYTES] = DIR_ENTRY_FREE;
    image.seek(SeekFrom::Start(start))?;
    image.write_all(&fixed)
}

/// Reads a file back out of an image's FAT partition (for checks and tests).
pub fn read_file_from_image(image_path: &Path, file_path: &str) -> io::Result<Vec<u8>> {
    let mut image = File::open(image_path)?;
    let mbr = mbrman::MBR::read_from(&mut image, SECTOR_BYTES as u32)
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
    let entry = &mbr[1];
    let start = u64::from(entry.starting_lba) * SECTOR_BYTES;
    let end = start + u64::from(entry.sectors) * SECTOR_BYTES;
    let image = OpenOptions::new().read(true).write(true).open(image_path)?;
    let partition = fscommon::StreamSlice::new(image, start, end)?;
    let filesystem = fatfs::FileSystem::new(partition, fatfs::FsOptions::new())?;
    let mut file = filesystem.root_dir().open_file(file_path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_files() -> Vec<ImageFile> {
        vec![
            ImageFile { path: "config.txt".to_string(), bytes: b"arm_64bit=1\n".to_vec() },
            ImageFile { path: "kernel8.img".to_string(), bytes: (0..200_000u32).map(|i| i as u8).collect() },
            ImageFile { path: "overlays/disable-bt.dtbo".to_string(), bytes: vec![0xd0, 0x0d, 0xfe, 0xed] },
        ]
    }

    #[test]
    fn cluster_size_keeps_fat32_valid() {
        assert_eq!(cluster_bytes_for(60 << 20), Some(512));
        assert_eq!(cluster_bytes_for(252 << 20), Some(2048));
        assert_eq!(cluster_bytes_for(1020 << 20), Some(4096));
        assert_eq!(cluster_bytes_for(20 << 20), None);
    }

    #[test]
    fn image_size_is_a_power_of_two_and_big_enough() {
        let files = sample_files();
        assert_eq!(choose_image_bytes(&files, None).unwrap(), 256 << 20);
        assert_eq!(choose_image_bytes(&files, Some(100 << 20)).unwrap(), 128 << 20);
        assert!(matches!(choose_image_bytes(&files, Some(1 << 20)), Err(FatError::TooSmall { .. })));
        let big = vec![ImageFile { path: "big".to_string(), bytes: vec![0; 300 << 20] }];
        assert_eq!(choose_image_bytes(&big, None).unwrap(), 512 << 20);
    }

    #[test]
    fn built_image_has_the_partition_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("card.img");
        let files = sample_files();
        let layout = build_image(&path, &files, 64 << 20, 0x1234_5678).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 64 << 20);
        assert_eq!(layout.cluster_bytes, 512);
        assert_eq!(layout.partition_offset_bytes(), 4 << 20);

        let mut image = File::open(&path).unwrap();
        let mbr = mbrman::MBR::read_from(&mut image, 512).unwrap();
        assert_eq!(mbr[1].sys, 0x0C);
        assert_eq!(mbr[1].starting_lba, 8192);
        assert_eq!(mbr[1].sectors, ((64 << 20) - (4 << 20)) / 512);
        assert!(mbr[1].is_active());
        assert_eq!(mbr.header.disk_signature, 0x1234_5678u32.to_le_bytes());

        let data = fs::read(&path).unwrap();
        let boot = 4 << 20;
        assert_eq!(&data[boot + 0x1C..boot + 0x20], &8192u32.to_le_bytes());
        assert_eq!(&data[boot + 6 * 512 + 0x1C..boot + 6 * 512 + 0x20], &8192u32.to_le_bytes());
        assert_eq!(&data[boot + 0x52..boot + 0x5A], b"FAT32   ");

        for file in &files {
            assert_eq!(read_file_from_image(&path, &file.path).unwrap(), file.bytes, "{}", file.path);
        }
        assert!(!dir.path().join(format!("card.tmp.{}", std::process::id())).exists());
    }

    #[test]
    fn a_too_small_image_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let error = build_image(&dir.path().join("x.img"), &sample_files(), 16 << 20, 1).unwrap_err();
        assert!(matches!(error, FatError::TooFewClusters { .. }), "{error}");
    }
}
