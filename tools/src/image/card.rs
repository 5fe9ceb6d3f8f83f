//! Writing the image to an SD card (`barebench image --write /dev/sdX`): refuses mounted or
//! system devices and, without `--force`, fixed disks; writes, syncs and verifies by reading
//! back. Device facts come from Linux sysfs (Documentation/ABI/stable/sysfs-block: `removable`,
//! `size` in 512-byte units, `device/model`, `holders/`, `partition`) and /proc/mounts.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use bench::units::ByteSize;

/// Mount points whose device holds the running system.
const SYSTEM_MOUNT_POINTS: [&str; 7] = ["/", "/boot", "/boot/firmware", "/boot/efi", "/usr", "/var", "/home"];
/// Bytes per write/verify chunk.
const CHUNK_BYTES: usize = 4 << 20;
/// sysfs `size` unit (sysfs-block ABI: always 512-byte sectors).
const SYSFS_SECTOR_BYTES: u64 = 512;

/// Errors and refusals when writing a card.
#[derive(Debug, thiserror::Error)]
pub enum CardError {
    #[error("{path} does not exist")]
    NotFound { path: PathBuf },
    #[error("{path} is neither a block device nor a regular file")]
    NotADevice { path: PathBuf },
    #[error("{path} is partition {partition} of /dev/{disk}: give the whole card, /dev/{disk}")]
    Partition { path: PathBuf, partition: String, disk: String },
    #[error("/dev/{device} holds the running system (mounted on {mount_point}); refusing to write it")]
    SystemDevice { device: String, mount_point: String },
    #[error("/dev/{device} is mounted on {mount_point}: unmount it first (e.g. `udisksctl unmount -b /dev/{device}` or `umount {mount_point}`)")]
    Mounted { device: String, mount_point: String },
    #[error("/dev/{device} is in use ({usage})")]
    InUse { device: String, usage: String },
    #[error("/dev/{device} ({model}, {}) is not a removable device; if it really is the SD card, repeat with --force", ByteSize(*size_bytes))]
    NotRemovable { device: String, model: String, size_bytes: u64 },
    #[error("the image ({}) is larger than {path} ({})", ByteSize(*image_bytes), ByteSize(*device_bytes))]
    TooSmall { path: PathBuf, image_bytes: u64, device_bytes: u64 },
    #[error("{context} {path}: {source}")]
    Io { context: &'static str, path: PathBuf, source: io::Error },
    #[error("verification failed: {path} differs from the image at byte {offset}")]
    VerifyMismatch { path: PathBuf, offset: u64 },
}

/// A whole block device as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceInfo {
    /// Kernel name, e.g. `sdb`, `mmcblk0`.
    pub name: String,
    pub size_bytes: u64,
    pub model: String,
    pub removable: bool,
    /// Partition names, e.g. `sdb1`.
    pub partitions: Vec<String>,
    /// Devices stacked on it or on its partitions (device mapper, RAID), e.g. `dm-0`.
    pub holders: Vec<String>,
}

pub(crate) fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|text| text.trim().to_string())
}

fn dir_names(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .filter_map(|entry| entry.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

impl BlockDeviceInfo {
    /// Reads `/sys/block/<name>`-style directory `sys_dir` (its last component is the name).
    /// Counted as removable: `removable` = 1, an MMC/SD slot (`mmcblk*`, many report 0), or a
    /// device on a USB bus (card readers).
    pub fn from_sysfs(sys_dir: &Path) -> BlockDeviceInfo {
        let name = sys_dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let size_bytes = read_trimmed(&sys_dir.join("size"))
            .and_then(|text| text.parse::<u64>().ok())
            .map_or(0, |sectors| sectors * SYSFS_SECTOR_BYTES);
        let vendor = read_trimmed(&sys_dir.join("device/vendor")).unwrap_or_default();
        let model = read_trimmed(&sys_dir.join("device/model"))
            .or_else(|| read_trimmed(&sys_dir.join("device/name")))
            .unwrap_or_else(|| "unknown model".to_string());
        let model = if vendor.is_empty() { model } else { format!("{vendor} {model}") };
        let on_usb = fs::canonicalize(sys_dir).is_ok_and(|path| path.to_string_lossy().contains("/usb"));
        let removable = read_trimmed(&sys_dir.join("removable")).as_deref() == Some("1")
            || name.starts_with("mmcblk")
            || on_usb;
        let partitions: Vec<String> = dir_names(sys_dir)
            .into_iter()
            .filter(|entry| sys_dir.join(entry).join("partition").is_file())
            .collect();
        let mut holders = dir_names(&sys_dir.join("holders"));
        for partition in &partitions {
            holders.extend(dir_names(&sys_dir.join(partition).join("holders")));
        }
        BlockDeviceInfo { name, size_bytes, model, removable, partitions, holders }
    }
}

/// A mounted block device: its kernel name and mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedDevice {
    pub device: String,
    pub mount_point: String,
}

/// Unescapes the octal escapes /proc/mounts uses for spaces and the like (fstab(5)).
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\'
            && index + 3 < bytes.len()
            && bytes[index + 1..index + 4].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let value =
                (bytes[index + 1] - b'0') * 64 + (bytes[index + 2] - b'0') * 8 + (bytes[index + 3] - b'0');
            out.push(value);
            index += 4;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The devices in a /proc/mounts text; `resolve(source, mount_point)` names the kernel devices
/// behind one entry (a `/dev/disk/by-uuid/…` link, `/dev/root`, …).
pub fn mounted_devices(proc_mounts: &str, resolve: impl Fn(&str, &str) -> Vec<String>) -> Vec<MountedDevice> {
    let mut mounted = Vec::new();
    for line in proc_mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(source), Some(mount_point)) = (fields.next(), fields.next()) else {
            continue;
        };
        let (source, mount_point) = (unescape_mount_field(source), unescape_mount_field(mount_point));
        for device in resolve(&source, &mount_point) {
            mounted.push(MountedDevice { device, mount_point: mount_point.clone() });
        }
    }
    mounted
}

/// Linux `dev_t` major and minor numbers (glibc's encoding, sys/sysmacros.h).
fn major_minor(dev: u64) -> (u64, u64) {
    let major = ((dev >> 32) & 0xFFFF_F000) | ((dev >> 8) & 0xFFF);
    let minor = ((dev >> 12) & 0xFFFF_FF00) | (dev & 0xFF);
    (major, minor)
}

/// The sysfs directory of a block device number, via /sys/dev/block/MAJ:MIN.
pub(crate) fn sysfs_dir_of(dev: u64) -> Option<PathBuf> {
    let (major, minor) = major_minor(dev);
    fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()
}

/// The real resolver for [`mounted_devices`]: the source's device node name, and the device
/// that holds the mount point's file system.
fn resolve_mount_on_this_system(source: &str, mount_point: &str) -> Vec<String> {
    let mut names = Vec::new();
    if !source.starts_with("/dev/") {
        return names;
    }
    if let Some(name) = fs::canonicalize(source)
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        names.push(name);
    }
    if let Ok(meta) = fs::metadata(mount_point) {
        if let Some(name) =
            sysfs_dir_of(meta.dev()).and_then(|dir| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        {
            names.push(name);
        }
    }
    names.dedup();
    names
}

/// Refuses a device that is mounted, in use or holds the system; without `force`, also one
/// that does not look removable.
pub fn check_block_device(
    device: &BlockDeviceInfo,
    mounted: &[MountedDevice],
    swap_devices: &[String],
    force: bool,
) -> Result<(), CardError> {
    let mut own_names = vec![device.name.clone()];
    own_names.extend(device.partitions.iter().cloned());
    let is_ours = |name: &str| {
        own_names.iter().any(|own| own == name) || device.holders.iter().any(|holder| holder == name)
    };
    if let Some(system) = mounted
        .iter()
        .find(|entry| is_ours(&entry.device) && SYSTEM_MOUNT_POINTS.contains(&entry.mount_point.as_str()))
    {
        return Err(CardError::SystemDevice {
            device: device.name.clone(),
            mount_point: system.mount_point.clone(),
        });
    }
    if let Some(entry) = mounted.iter().find(|entry| is_ours(&entry.device)) {
        return Err(CardError::Mounted {
            device: entry.device.clone(),
            mount_point: entry.mount_point.clone(),
        });
    }
    if let Some(swap) = swap_devices.iter().find(|name| is_ours(name)) {
        return Err(CardError::InUse { device: device.name.clone(), usage: format!("swap on /dev/{swap}") });
    }
    if let Some(holder) = device.holders.first() {
        return Err(CardError::InUse {
            device: device.name.clone(),
            usage: format!("/dev/{holder} is stacked on it (device mapper, RAID or LVM)"),
        });
    }
    if !device.removable && !force {
        return Err(CardError::NotRemovable {
            device: device.name.clone(),
            model: device.model.clone(),
            size_bytes: device.size_bytes,
        });
    }
    Ok(())
}

/// What `--write` will write to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteTarget {
    /// A plain file (for tests, or to copy the image).
    File { path: PathBuf },
    /// A whole block device that passed the checks.
    BlockDevice { path: PathBuf, info: BlockDeviceInfo },
}

impl WriteTarget {
    pub fn path(&self) -> &Path {
        match self {
            WriteTarget::File { path } | WriteTarget::BlockDevice { path, .. } => path,
        }
    }

    /// One line for the confirmation prompt.
    pub fn describe(&self) -> String {
        match self {
            WriteTarget::File { path } => format!("{} (a regular file)", path.display()),
            WriteTarget::BlockDevice { path, info } => format!(
                "{} ({}, {}{})",
                path.display(),
                info.model,
                ByteSize(info.size_bytes),
                if info.removable { ", removable" } else { ", NOT removable" }
            ),
        }
    }
}

/// Looks at `path` on this system and applies every check for an image of `image_bytes`.
pub fn inspect_target(path: &Path, image_bytes: u64, force: bool) -> Result<WriteTarget, CardError> {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(CardError::NotFound { path: path.to_path_buf() })
        }
        Err(error) => return Err(io_error("cannot inspect", path)(error)),
    };
    if meta.file_type().is_file() {
        return Ok(WriteTarget::File { path: path.to_path_buf() });
    }
    if !meta.file_type().is_block_device() {
        return Err(CardError::NotADevice { path: path.to_path_buf() });
    }
    let sys_dir = sysfs_dir_of(meta.rdev()).ok_or_else(|| {
        io_error("cannot find the sysfs entry of", path)(io::Error::new(
            io::ErrorKind::NotFound,
            "no /sys/dev/block entry",
        ))
    })?;
    if sys_dir.join("partition").is_file() {
        let partition = sys_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let disk = sys_dir
            .parent()
            .and_then(|parent| parent.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Err(CardError::Partition { path: path.to_path_buf(), partition, disk });
    }
    let info = BlockDeviceInfo::from_sysfs(&sys_dir);
    let proc_mounts =
        fs::read_to_string("/proc/mounts").map_err(io_error("cannot read /proc/mounts for", path))?;
    let mounted = mounted_devices(&proc_mounts, resolve_mount_on_this_system);
    let swaps: Vec<String> = fs::read_to_string("/proc/swaps")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(|source| fs::canonicalize(source).ok())
        .filter_map(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    check_block_device(&info, &mounted, &swaps, force)?;
    if image_bytes > info.size_bytes {
        return Err(CardError::TooSmall {
            path: path.to_path_buf(),
            image_bytes,
            device_bytes: info.size_bytes,
        });
    }
    Ok(WriteTarget::BlockDevice { path: path.to_path_buf(), info })
}

/// Writes `image` to the target, then flushes it to the medium (fsync).
/// `progress(done_bytes, total_bytes)` is called after every chunk.
pub fn write_image(
    image: &Path,
    target: &WriteTarget,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), CardError> {
    let target_path = target.path();
    let (mut source, total) = open_image(image)?;
    let mut options = OpenOptions::new();
    options.write(true);
    match target {
        // O_EXCL on a block device: the kernel refuses it while the device is mounted or
        // claimed (open(2), "O_EXCL ... block devices").
        WriteTarget::BlockDevice { .. } => {
            options.custom_flags(libc::O_EXCL);
        }
        WriteTarget::File { .. } => {
            options.truncate(true);
        }
    }
    let mut destination =
        options.open(target_path).map_err(io_error("cannot open for writing", target_path))?;
    let mut buffer = vec![0u8; CHUNK_BYTES];
    let mut done = 0;
    loop {
        let count = read_full(&mut source, &mut buffer).map_err(io_error("cannot read", image))?;
        if count == 0 {
            break;
        }
        destination.write_all(&buffer[..count]).map_err(io_error("cannot write", target_path))?;
        done += count as u64;
        progress(done, total);
    }
    destination.sync_all().map_err(io_error("cannot sync", target_path))?;
    drop_cached_pages(&destination);
    Ok(())
}

/// Reads the target back and compares it with the image (the whole image length).
pub fn verify_image(
    image: &Path,
    target: &WriteTarget,
    mut progress: impl FnMut(u64, u64),
) -> Result<(), CardError> {
    let target_path = target.path();
    let (mut expected, total) = open_image(image)?;
    let mut actual = File::open(target_path).map_err(io_error("cannot open for reading", target_path))?;
    drop_cached_pages(&actual);
    actual.seek(SeekFrom::Start(0)).map_err(io_error("cannot seek", target_path))?;
    let mut expected_buffer = vec![0u8; CHUNK_BYTES];
    let mut actual_buffer = vec![0u8; CHUNK_BYTES];
    let mut offset = 0u64;
    while offset < total {
        let count = read_full(&mut expected, &mut expected_buffer).map_err(io_error("cannot read", image))?;
        if count == 0 {
            break;
        }
        let actual_count = read_full(&mut actual, &mut actual_buffer[..count])
            .map_err(io_error("cannot read back", target_path))?;
        if let Some(position) = (0..count)
            .find(|index| *index >= actual_count || expected_buffer[*index] != actual_buffer[*index])
        {
            return Err(CardError::VerifyMismatch {
                path: target_path.to_path_buf(),
                offset: offset + position as u64,
            });
        }
        offset += count as u64;
        progress(offset, total);
    }
    Ok(())
}

/// `map_err`'s function for an I/O step named `context` on `path`.
fn io_error<'p>(context: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> CardError + 'p {
    move |source| CardError::Io { context, path: path.to_path_buf(), source }
}

/// The image opened for reading, with its length in bytes.
fn open_image(image: &Path) -> Result<(File, u64), CardError> {
    let file = File::open(image).map_err(io_error("cannot open", image))?;
    let total_bytes = file.metadata().map_err(io_error("cannot inspect", image))?.len();
    Ok((file, total_bytes))
}

fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match reader.read(&mut buffer[filled..]) {
            Ok(0) => break,
            Ok(count) => filled += count,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

/// Asks the kernel to drop the file's clean cached pages, so that verification reads the
/// medium rather than the page cache (posix_fadvise(2) POSIX_FADV_DONTNEED). Advisory: a
/// failure only means the verification may be served from the cache.
fn drop_cached_pages(file: &File) {
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is owned by `file`
    // and stays open for the duration of the call.
    let _status = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_disk(root: &Path, name: &str, removable: &str, partitions: &[&str]) -> PathBuf {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("device")).unwrap();
        fs::create_dir_all(dir.join("holders")).unwrap();
        fs::write(dir.join("removable"), format!("{removable}\n")).unwrap();
        fs::write(dir.join("size"), "62333952\n").unwrap();
        fs::write(dir.join("device/model"), "SD/MMC Reader   \n").unwrap();
        fs::write(dir.join("device/vendor"), "Generic\n").unwrap();
        for partition in partitions {
            fs::create_dir_all(dir.join(partition).join("holders")).unwrap();
            fs::write(dir.join(partition).join("partition"), "1\n").unwrap();
        }
        dir
    }

    fn mount(device: &str, mount_point: &str) -> MountedDevice {
        MountedDevice { device: device.to_string(), mount_point: mount_point.to_string() }
    }

    #[test]
    fn sysfs_facts_are_read() {
        let root = tempfile::tempdir().unwrap();
        let info = BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "sdb", "1", &["sdb1", "sdb2"]));
        assert_eq!(info.name, "sdb");
        assert_eq!(info.size_bytes, 62_333_952 * 512);
        assert_eq!(info.model, "Generic SD/MMC Reader");
        assert!(info.removable);
        assert_eq!(info.partitions, ["sdb1", "sdb2"]);
        assert!(info.holders.is_empty());
    }

    #[test]
    fn an_sd_slot_counts_as_removable_even_when_sysfs_says_0() {
        let root = tempfile::tempdir().unwrap();
        assert!(BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "mmcblk0", "0", &[])).removable);
        assert!(!BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "nvme0n1", "0", &[])).removable);
    }

    #[test]
    fn a_mounted_partition_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let info = BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "sdb", "1", &["sdb1"]));
        let mounts = [mount("sda1", "/"), mount("sdb1", "/media/user/boot")];
        let error = check_block_device(&info, &mounts, &[], false).unwrap_err();
        assert!(matches!(&error, CardError::Mounted { device, .. } if device == "sdb1"), "{error}");
        assert!(check_block_device(&info, &mounts[..1], &[], false).is_ok());
    }

    #[test]
    fn the_system_disk_is_refused_even_with_force() {
        let root = tempfile::tempdir().unwrap();
        let info = BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "sda", "0", &["sda1", "sda2"]));
        let error = check_block_device(&info, &[mount("sda2", "/")], &[], true).unwrap_err();
        assert!(
            matches!(&error, CardError::SystemDevice { mount_point, .. } if mount_point == "/"),
            "{error}"
        );
        let error = check_block_device(&info, &[mount("sda1", "/boot/efi")], &[], true).unwrap_err();
        assert!(matches!(error, CardError::SystemDevice { .. }));
    }

    #[test]
    fn stacked_and_swap_devices_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = fake_disk(root.path(), "sdc", "1", &["sdc1"]);
        fs::create_dir_all(dir.join("sdc1/holders/dm-0")).unwrap();
        let info = BlockDeviceInfo::from_sysfs(&dir);
        assert_eq!(info.holders, ["dm-0"]);
        let error = check_block_device(&info, &[mount("dm-0", "/")], &[], true).unwrap_err();
        assert!(matches!(error, CardError::SystemDevice { .. }), "{error}");
        assert!(matches!(check_block_device(&info, &[], &[], true), Err(CardError::InUse { .. })));
        let plain = BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "sdd", "1", &["sdd1"]));
        let error = check_block_device(&plain, &[], &["sdd1".to_string()], true).unwrap_err();
        assert!(matches!(error, CardError::InUse { .. }), "{error}");
    }

    #[test]
    fn a_fixed_disk_needs_force() {
        let root = tempfile::tempdir().unwrap();
        let info = BlockDeviceInfo::from_sysfs(&fake_disk(root.path(), "sdb", "0", &[]));
        let error = check_block_device(&info, &[], &[], false).unwrap_err();
        assert!(error.to_string().contains("--force"), "{error}");
        assert!(check_block_device(&info, &[], &[], true).is_ok());
    }

    #[test]
    fn proc_mounts_is_parsed_with_escapes() {
        let text = "/dev/sdb1 /media/my\\040card vfat rw 0 0\nproc /proc proc rw 0 0\n";
        let mounted = mounted_devices(text, |source, _| {
            source.strip_prefix("/dev/").map(|name| vec![name.to_string()]).unwrap_or_default()
        });
        assert_eq!(mounted, [mount("sdb1", "/media/my card")]);
    }

    #[test]
    fn device_numbers_split_like_glibc() {
        assert_eq!(major_minor(0x0810), (8, 16));
        assert_eq!(major_minor((259 << 8) | 3), (259, 3));
        // glibc makedev(259, 0x12345): minor bits 8..31 go to dev bits 20..43.
        assert_eq!(major_minor(0x1230_0000 | 0x1_0300 | 0x45), (259, 0x12345));
    }

    #[test]
    fn writing_to_a_file_copies_syncs_and_verifies() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("card.img");
        let bytes: Vec<u8> = (0..(9 << 20)).map(|i: u32| (i % 251) as u8).collect();
        fs::write(&image, &bytes).unwrap();
        let target_path = dir.path().join("target.bin");
        fs::write(&target_path, vec![0xFFu8; 16 << 20]).unwrap();
        let target = inspect_target(&target_path, bytes.len() as u64, false).unwrap();
        assert_eq!(target, WriteTarget::File { path: target_path.clone() });
        let mut reports = Vec::new();
        write_image(&image, &target, |done, total| reports.push((done, total))).unwrap();
        assert_eq!(reports.last(), Some(&(9 << 20, 9 << 20)));
        assert_eq!(fs::read(&target_path).unwrap(), bytes);
        verify_image(&image, &target, |_, _| {}).unwrap();
    }

    #[test]
    fn verification_reports_the_first_difference() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("card.img");
        fs::write(&image, vec![7u8; 5 << 20]).unwrap();
        let target_path = dir.path().join("target.bin");
        let mut changed = vec![7u8; 5 << 20];
        changed[(4 << 20) + 12] = 8;
        fs::write(&target_path, &changed).unwrap();
        let target = WriteTarget::File { path: target_path.clone() };
        let error = verify_image(&image, &target, |_, _| {}).unwrap_err();
        assert!(
            matches!(error, CardError::VerifyMismatch { offset, .. } if offset == (4 << 20) + 12),
            "{error}"
        );
        fs::write(&target_path, vec![7u8; 100]).unwrap();
        let error = verify_image(&image, &target, |_, _| {}).unwrap_err();
        assert!(matches!(error, CardError::VerifyMismatch { offset: 100, .. }), "{error}");
    }

    #[test]
    fn odd_targets_are_refused() {
        assert!(matches!(
            inspect_target(Path::new("/nonexistent/sdz"), 1, false),
            Err(CardError::NotFound { .. })
        ));
        assert!(matches!(
            inspect_target(Path::new("/dev/null"), 1, false),
            Err(CardError::NotADevice { .. })
        ));
    }
}
