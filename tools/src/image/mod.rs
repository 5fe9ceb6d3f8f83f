//! `barebench image`: one bootable SD card image for every Pi from Pi 1 to Pi 5 (docs/ecosystem.md §1,
//! docs/hardware.md §4, docs/aarch32-pis.md §2), and writing it to a card with the checks a careful
//! user expects.

pub mod card;
pub mod config;
pub mod fat;
pub mod firmware;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use bench::units::ByteSize;

use config::{CmdlineError, ConfigOptions, KERNEL_PI1, KERNEL_PI2, KERNEL_PI3_PI4, KERNEL_PI5};
use fat::{FatError, ImageLayout};
use firmware::{FirmwareError, FirmwareSet, ImageFile, DISABLE_BT_OVERLAY};

/// Errors creating an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("kernel image {path} not found: run `make` to build it (or pass --kernel PATH)")]
    KernelMissing { path: PathBuf },
    #[error("cannot read kernel image {path}: {source}")]
    KernelRead { path: PathBuf, source: io::Error },
    #[error("kernel image {path} is empty")]
    KernelEmpty { path: PathBuf },
    #[error(transparent)]
    Firmware(#[from] FirmwareError),
    #[error(transparent)]
    Cmdline(#[from] CmdlineError),
    #[error(transparent)]
    Fat(#[from] FatError),
}

/// Where the firmware comes from.
#[derive(Debug, Clone)]
pub enum FirmwareSource {
    /// Debian's packages, through the cache.
    Debian(firmware::DebianFetch),
    /// A directory like the firmware repository's `boot/`.
    Directory(PathBuf),
    /// No firmware at all: a card for QEMU's raspi machines, which boot the kernel without the
    /// GPU firmware (`barebench qemu --boot-card`); no Pi starts from it.
    NoFirmware,
}

/// Everything `barebench image` needs.
#[derive(Debug, Clone)]
pub struct ImageRequest {
    pub output: PathBuf,
    /// The 64-bit kernel (kernel8.img and kernel_2712.img).
    pub kernel: PathBuf,
    /// The 32-bit kernel (kernel.img and kernel7.img).
    pub kernel32: PathBuf,
    /// Benchmark settings for cmdline.txt.
    pub settings: Vec<String>,
    /// Requested image size (rounded up to a power of two); `None` = default.
    pub size_bytes: Option<u64>,
    pub firmware: FirmwareSource,
    /// `uart_2ndstage=1` in config.txt.
    pub firmware_boot_log: bool,
    /// The Pi 5's console connector(s) (`--pi5-console`).
    pub pi5_console: config::Pi5Console,
}

/// What was built.
#[derive(Debug, Clone)]
pub struct ImageReport {
    pub layout: ImageLayout,
    pub firmware_origin: String,
    pub warnings: Vec<String>,
}

/// The kernel image, with a clear message when `make` has not been run.
pub fn read_kernel(path: &Path) -> Result<Vec<u8>, ImageError> {
    if !path.exists() {
        return Err(ImageError::KernelMissing { path: path.to_path_buf() });
    }
    let bytes =
        fs::read(path).map_err(|source| ImageError::KernelRead { path: path.to_path_buf(), source })?;
    if bytes.is_empty() {
        return Err(ImageError::KernelEmpty { path: path.to_path_buf() });
    }
    Ok(bytes)
}

/// The kernel images for the card: the 64-bit one (Pi 3/4 and Pi 5 load the same bytes) and
/// the 32-bit one (Pi 1/Zero and Pi 2 load the same bytes).
pub struct Kernels<'a> {
    pub aarch64: &'a [u8],
    pub aarch32: &'a [u8],
}

/// The files of the boot partition: firmware, DTBs, config.txt, cmdline.txt, the kernels under
/// their four names and the licence files.
pub fn boot_files(
    firmware: &FirmwareSet,
    kernels: &Kernels<'_>,
    cmdline: &str,
    (firmware_boot_log, pi5_console): (bool, config::Pi5Console),
) -> Vec<ImageFile> {
    let options = ConfigOptions {
        has_disable_bt_overlay: firmware.has_file(DISABLE_BT_OVERLAY),
        upstream_dtb_names: firmware.has_upstream_dtb_names(),
        firmware_boot_log,
        pi5_console,
    };
    let mut files = firmware.files.clone();
    let mut add = |path: &str, bytes: Vec<u8>| files.push(ImageFile { path: path.to_string(), bytes });
    add("config.txt", config::config_txt(&options).into_bytes());
    add("cmdline.txt", cmdline.as_bytes().to_vec());
    add(KERNEL_PI3_PI4, kernels.aarch64.to_vec());
    add(KERNEL_PI5, kernels.aarch64.to_vec());
    add(KERNEL_PI1, kernels.aarch32.to_vec());
    add(KERNEL_PI2, kernels.aarch32.to_vec());
    add("LICENCE.broadcom", firmware.licence_broadcom.clone().into_bytes());
    add("COPYING.linux", firmware.copying_linux.clone().into_bytes());
    add("README.txt", readme(firmware).into_bytes());
    files
}

fn readme(firmware: &FirmwareSet) -> String {
    format!(
        "barebench: bare-metal storage benchmark for every Raspberry Pi, Pi 1 to Pi 5.\n\
         \n\
         Boot files from {}.\n\
         cmdline.txt holds the benchmark settings (space-separated key=value).\n\
         \n\
         Serial console, 115200 8N1, 3.3 V only:\n\
         - Pi 1 / Zero / Pi 2 / Pi 3 / Pi 4: GPIO14 TXD (pin 8), GPIO15 RXD (pin 10), GND (pin 6);\n\
           cross TX and RX.\n\
         - Pi 5: the 3-pin UART debug connector between the HDMI ports.\n\
         Then: picocom -b 115200 /dev/ttyUSB0   (or barebench serial /dev/ttyUSB0)\n\
         Nothing appears? Add uart_2ndstage=1 to config.txt for the firmware's own log.\n",
        firmware.origin
    )
}

/// Builds the image described by `request`; `status` receives progress lines.
pub fn create_image(request: &ImageRequest, status: &mut dyn FnMut(&str)) -> Result<ImageReport, ImageError> {
    let kernel = read_kernel(&request.kernel)?;
    let kernel32 = read_kernel(&request.kernel32)?;
    let (cmdline, mut warnings) = config::cmdline_txt(&request.settings)?;
    let firmware = match &request.firmware {
        FirmwareSource::Debian(fetch) => fetch.fetch(status)?,
        FirmwareSource::Directory(dir) => firmware::from_directory(dir)?,
        FirmwareSource::NoFirmware => firmware::none(),
    };
    warnings.extend(firmware.warnings.iter().cloned());
    let kernels = Kernels { aarch64: &kernel, aarch32: &kernel32 };
    let files = boot_files(&firmware, &kernels, &cmdline, (request.firmware_boot_log, request.pi5_console));
    let image_bytes = fat::choose_image_bytes(&files, request.size_bytes)?;
    if let Some(requested) = request.size_bytes.filter(|requested| *requested != image_bytes) {
        warnings.push(format!(
            "image size {} rounded up to {} (a power of two, so QEMU accepts it as an SD card)",
            ByteSize(requested),
            ByteSize(image_bytes)
        ));
    }
    let signature = disk_signature(&[&kernel, &kernel32], &cmdline);
    let layout = fat::build_image(&request.output, &files, image_bytes, signature)?;
    Ok(ImageReport { layout, firmware_origin: firmware.origin, warnings })
}

/// A benchmark card: the boot image of [`create_image`], then optionally a pattern partition
/// (`check=` verifies reads against it) and a marked scratch partition (write jobs may use it).
/// What `barebench image` writes and `barebench farm` writes to every place's card.
#[derive(Debug, Clone)]
pub struct CardRequest {
    pub image: ImageRequest,
    pub pattern_bytes: Option<u64>,
    pub scratch_bytes: Option<u64>,
}

/// A partition added after the boot partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddedPartition {
    /// 1-based MBR entry.
    pub number: u32,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// The card's size once the partition was added (the next power of two).
    pub image_bytes_after: u64,
}

/// What [`build_card`] made.
#[derive(Debug, Clone)]
pub struct BuiltCard {
    pub boot: ImageReport,
    pub pattern: Option<AddedPartition>,
    /// The scratch partition and its region id.
    pub scratch: Option<(AddedPartition, u64)>,
    /// The card's final size.
    pub image_bytes: u64,
}

/// Errors building a card.
#[derive(Debug, thiserror::Error)]
pub enum CardBuildError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error("adding the pattern partition to {path}: {source}")]
    Pattern { path: PathBuf, source: io::Error },
    #[error("reading /dev/urandom for the scratch region id: {source}")]
    RegionId { source: io::Error },
    #[error(transparent)]
    Scratch(#[from] crate::scratch::ScratchError),
}

/// Builds the card image of `request`; `status` receives progress lines.
pub fn build_card(request: &CardRequest, status: &mut dyn FnMut(&str)) -> Result<BuiltCard, CardBuildError> {
    let boot = create_image(&request.image, status)?;
    let output = &request.image.output;
    let mut image_bytes = boot.layout.image_bytes;
    let mut pattern = None;
    if let Some(pattern_bytes) = request.pattern_bytes {
        let (number, length_bytes, total_bytes) =
            crate::pattern::append_pattern_partition(output, pattern_bytes)
                .map_err(|source| CardBuildError::Pattern { path: output.clone(), source })?;
        pattern = Some(AddedPartition {
            number,
            offset_bytes: image_bytes,
            length_bytes,
            image_bytes_after: total_bytes,
        });
        image_bytes = total_bytes;
    }
    let mut scratch = None;
    if let Some(scratch_bytes) = request.scratch_bytes {
        let region_id =
            crate::scratch::random_region_id().map_err(|source| CardBuildError::RegionId { source })?;
        let (number, length_bytes, total_bytes) =
            crate::scratch::append_scratch_partition(output, scratch_bytes, region_id)?;
        let added = AddedPartition {
            number,
            offset_bytes: image_bytes,
            length_bytes,
            image_bytes_after: total_bytes,
        };
        scratch = Some((added, region_id));
        image_bytes = total_bytes;
    }
    Ok(BuiltCard { boot, pattern, scratch, image_bytes })
}

/// A deterministic MBR disk signature / FAT volume id: FNV-1a over the kernels and settings, so
/// the same inputs give the same image bytes.
fn disk_signature(kernels: &[&[u8]], cmdline: &str) -> u32 {
    const FNV_OFFSET_BASIS: u32 = 0x811C_9DC5;
    const FNV_PRIME: u32 = 0x0100_0193;
    kernels
        .iter()
        .flat_map(|kernel| kernel.iter())
        .chain(cmdline.as_bytes())
        .fold(FNV_OFFSET_BASIS, |hash, byte| (hash ^ u32::from(*byte)).wrapping_mul(FNV_PRIME))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_firmware_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, _) in firmware::FIRMWARE_FILES {
            fs::write(dir.path().join(name), format!("fake {name}")).unwrap();
        }
        for dtb in
            ["bcm2710-rpi-3-b.dtb", "bcm2711-rpi-4-b.dtb", "bcm2712-rpi-5-b.dtb", "bcm2712d0-rpi-5-b.dtb"]
        {
            fs::write(dir.path().join(dtb), format!("fake {dtb}")).unwrap();
        }
        fs::write(dir.path().join("LICENCE.broadcom"), "fake licence\n").unwrap();
        dir
    }

    #[test]
    fn missing_kernel_says_to_run_make() {
        let error = read_kernel(Path::new("/nonexistent/build/kernel8.img")).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("run `make`"), "{message}");
        assert!(message.contains("/nonexistent/build/kernel8.img"), "{message}");
    }

    #[test]
    fn image_from_a_firmware_directory_holds_every_file() {
        let firmware_dir = fake_firmware_dir();
        let work = tempfile::tempdir().unwrap();
        let kernel = work.path().join("kernel8.img");
        fs::write(&kernel, b"\x00\x00\x00\x14kernel").unwrap();
        let kernel32 = work.path().join("kernel.img");
        fs::write(&kernel32, b"\x02\xa0\xa0\xe1kernel32").unwrap();
        let output = work.path().join("card.img");
        let request = ImageRequest {
            output: output.clone(),
            kernel,
            kernel32,
            settings: vec!["preset=quick".to_string(), "devices=sd0".to_string()],
            size_bytes: Some(64 << 20),
            firmware: FirmwareSource::Directory(firmware_dir.path().to_path_buf()),
            firmware_boot_log: false,
            pi5_console: config::Pi5Console::Header,
        };
        let report = create_image(&request, &mut |_| {}).unwrap();
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        let read = |name: &str| fat::read_file_from_image(&output, name).unwrap();
        assert_eq!(read("cmdline.txt"), b"preset=quick devices=sd0\n");
        assert_eq!(read("kernel8.img"), b"\x00\x00\x00\x14kernel");
        assert_eq!(read("kernel_2712.img"), b"\x00\x00\x00\x14kernel");
        assert_eq!(read("kernel.img"), b"\x02\xa0\xa0\xe1kernel32");
        assert_eq!(read("kernel7.img"), b"\x02\xa0\xa0\xe1kernel32");
        assert_eq!(read("bootcode.bin"), b"fake bootcode.bin");
        assert_eq!(read("bcm2712-rpi-5-b.dtb"), b"fake bcm2712-rpi-5-b.dtb");
        assert_eq!(read("bcm2712d0-rpi-5-b.dtb"), b"fake bcm2712d0-rpi-5-b.dtb");
        assert_eq!(read("LICENCE.broadcom"), b"fake licence\n");
        let config = String::from_utf8(read("config.txt")).unwrap();
        assert!(config.contains("os_check=0"));
        assert!(config.contains("[pi1]\n# Pi 1 A/B/A+/B+, CM1\nkernel=kernel.img\narm_64bit=0"), "{config}");
        assert!(!config.contains("upstream_kernel=1"), "firmware-style DTB names");
        assert!(config.contains("\npciex4_reset=0\n"), "--pi5-console header");
        assert!(String::from_utf8(read("COPYING.linux")).unwrap().contains("GPL-2.0"));
    }

    #[test]
    fn a_card_without_firmware_holds_the_kernels_and_settings_only() {
        let work = tempfile::tempdir().unwrap();
        let kernel = work.path().join("kernel8.img");
        fs::write(&kernel, b"kernel").unwrap();
        let kernel32 = work.path().join("kernel.img");
        fs::write(&kernel32, b"kernel32").unwrap();
        let output = work.path().join("card.img");
        let request = ImageRequest {
            output: output.clone(),
            kernel,
            kernel32,
            settings: vec!["preset=matrix".to_string()],
            size_bytes: Some(64 << 20),
            firmware: FirmwareSource::NoFirmware,
            firmware_boot_log: false,
            pi5_console: config::Pi5Console::Debug,
        };
        let card = build_card(
            &CardRequest { image: request, pattern_bytes: None, scratch_bytes: Some(16 << 20) },
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(
            card.boot.warnings,
            ["no firmware on this card: only QEMU boots it (barebench qemu --boot-card)"]
        );
        let read = |name: &str| fat::read_file_from_image(&output, name);
        assert_eq!(read("cmdline.txt").unwrap(), b"preset=matrix\n");
        assert_eq!(read("kernel7.img").unwrap(), b"kernel32");
        assert!(read("start.elf").is_err() && read("bootcode.bin").is_err());
        assert!(String::from_utf8(read("LICENCE.broadcom").unwrap())
            .unwrap()
            .contains("no Raspberry Pi firmware"));
        let (scratch, _) = card.scratch.unwrap();
        assert_eq!((scratch.number, scratch.offset_bytes, card.image_bytes), (2, 64 << 20, 128 << 20));
    }

    #[test]
    fn the_same_inputs_give_the_same_image() {
        let firmware_dir = fake_firmware_dir();
        let work = tempfile::tempdir().unwrap();
        let kernel = work.path().join("kernel8.img");
        fs::write(&kernel, b"kernel").unwrap();
        let kernel32 = work.path().join("kernel.img");
        fs::write(&kernel32, b"kernel32").unwrap();
        let mut request = ImageRequest {
            output: work.path().join("a.img"),
            kernel,
            kernel32,
            settings: vec![],
            size_bytes: Some(64 << 20),
            firmware: FirmwareSource::Directory(firmware_dir.path().to_path_buf()),
            firmware_boot_log: true,
            pi5_console: config::Pi5Console::Debug,
        };
        create_image(&request, &mut |_| {}).unwrap();
        request.output = work.path().join("b.img");
        create_image(&request, &mut |_| {}).unwrap();
        assert!(fs::read(work.path().join("a.img")).unwrap() == fs::read(work.path().join("b.img")).unwrap());
    }
}
