//! Where the boot files come from: Debian's `raspi-firmware` and 6.12 arm64 kernel packages,
//! fetched with APT into a private root and unpacked (never installed), or a directory such as
//! the Raspberry Pi firmware repository's `boot/` (docs/ecosystem.md §1.1–1.6, docs/hardware.md §4.5).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use crate::apt::DebianArchive;
use crate::apt::{succeeded, Apt, AptError};

/// The firmware files the card needs, with the boards that need them (docs/hardware.md §4.5; Pi 5
/// has its firmware in the bootloader EEPROM).
pub const FIRMWARE_FILES: [(&str, &str); 5] = [
    ("bootcode.bin", "Pi 3"),
    ("start.elf", "Pi 3"),
    ("fixup.dat", "Pi 3"),
    ("start4.elf", "Pi 4"),
    ("fixup4.dat", "Pi 4"),
];

/// Each board's device tree, upstream Linux name first, then the Raspberry Pi firmware's name.
pub const BOARD_DTBS: [(&str, [&str; 2]); 3] = [
    ("Pi 3", ["bcm2837-rpi-3-b.dtb", "bcm2710-rpi-3-b.dtb"]),
    ("Pi 4", ["bcm2711-rpi-4-b.dtb", "bcm2711-rpi-4-b.dtb"]),
    ("Pi 5", ["bcm2712-rpi-5-b.dtb", "bcm2712-rpi-5-b.dtb"]),
];

/// The Pi 5 D0-stepping device tree (2 GB and 16 GB Pi 5, Pi 500, CM5, newer 4/8 GB boards):
/// the Raspberry Pi firmware's name, then upstream Linux's (added after 6.12, so Debian's 6.12
/// packages ship neither; docs/hardware.md §7).
pub const PI5_D0_DTBS: [&str; 2] = ["bcm2712d0-rpi-5-b.dtb", "bcm2712-d-rpi-5-b.dtb"];

/// The Broadcom licence as Raspberry Pi ships it in `boot/LICENCE.broadcom`; used only when a
/// `--firmware` directory lacks that file, so that the notice still travels with the blobs
/// (its text is the `Files: boot/*` stanza of Debian's raspi-firmware copyright file).
const BROADCOM_LICENCE_FALLBACK: &str = include_str!("licence_broadcom.txt");

/// The overlay that moves the PL011 to GPIO14/15 (docs/hardware.md §4.1).
pub const DISABLE_BT_OVERLAY: &str = "overlays/disable-bt.dtbo";

/// Errors while fetching or reading firmware.
#[derive(Debug, thiserror::Error)]
pub enum FirmwareError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("firmware directory {path} holds none of {expected}")]
    EmptyDirectory { path: PathBuf, expected: String },
    #[error("no Debian archive found in the APT sources (/etc/apt/sources.list{{,.d/*}}); pass --debian-mirror URI and --debian-suite CODENAME, or use --firmware DIR")]
    NoDebianSource,
    #[error("{0} (or use --firmware DIR)")]
    Apt(#[from] AptError),
    #[error("package {package}: {problem}")]
    Package { package: String, problem: String },
}

/// A file for the boot partition: path inside the FAT (`/`-separated) and content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// Everything taken from the firmware source.
#[derive(Debug, Clone, Default)]
pub struct FirmwareSet {
    /// Firmware blobs, DTBs and overlays.
    pub files: Vec<ImageFile>,
    pub licence_broadcom: String,
    pub copying_linux: String,
    /// Where the files came from, for the user and the card's README.
    pub origin: String,
    /// Things missing from the source that make the card less useful.
    pub warnings: Vec<String>,
}

impl FirmwareSet {
    pub fn has_file(&self, path: &str) -> bool {
        self.files.iter().any(|file| file.path == path)
    }

    /// True when the DTBs carry upstream Linux names (Debian), not the firmware's.
    pub fn has_upstream_dtb_names(&self) -> bool {
        self.files.iter().any(|file| file.path.starts_with("bcm2837-"))
    }

    fn check_boards(&mut self) {
        for (file, board) in FIRMWARE_FILES {
            if !self.has_file(file) {
                self.warnings.push(format!("{file} is missing: the card will not boot a {board}"));
            }
        }
        for (board, names) in BOARD_DTBS {
            if !names.iter().any(|name| self.has_file(name)) {
                let note = if board == "Pi 5" {
                    "the Pi 5 firmware boots without it only because config.txt sets os_check=0"
                } else {
                    "the firmware boots without it, but the kernel gets no device tree"
                };
                self.warnings.push(format!("no {} device tree: {note}", names[0]));
            }
        }
        if !PI5_D0_DTBS.iter().any(|name| self.has_file(name)) {
            self.warnings.push(format!(
                "no {} device tree (Pi 5 boards with the D0 stepping: 2 GB and 16 GB Pi 5, Pi 500, CM5): \
                 they boot without their own tree and the kernel runs from its board table",
                PI5_D0_DTBS[0]
            ));
        }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, FirmwareError> {
    fs::read(path).map_err(|source| FirmwareError::Read { path: path.to_path_buf(), source })
}

fn is_board_dtb(name: &str) -> bool {
    name.ends_with(".dtb")
        && [
            "bcm2710-rpi-",
            "bcm2711-rpi-",
            "bcm2712-rpi-",
            "bcm2712d0-rpi-",
            "bcm2712-d-rpi-",
            "bcm2837-rpi-",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Adds the firmware files present in `firmware_dir` (in [`FIRMWARE_FILES`] order) and every
/// board DTB in `dtb_dir` (sorted by name) to `set`: the one reader for a firmware directory and
/// for Debian's unpacked packages.
fn add_firmware_and_dtbs(
    set: &mut FirmwareSet,
    firmware_dir: &Path,
    dtb_dir: &Path,
) -> Result<(), FirmwareError> {
    for (name, _) in FIRMWARE_FILES {
        let path = firmware_dir.join(name);
        if path.is_file() {
            set.files.push(ImageFile { path: name.to_string(), bytes: read_file(&path)? });
        }
    }
    let mut dtb_names: Vec<String> = fs::read_dir(dtb_dir)
        .map_err(|source| FirmwareError::Read { path: dtb_dir.to_path_buf(), source })?
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_board_dtb(name))
        .collect();
    dtb_names.sort();
    for name in dtb_names {
        let bytes = read_file(&dtb_dir.join(&name))?;
        set.files.push(ImageFile { path: name, bytes });
    }
    Ok(())
}

/// Reads the firmware, DTBs and licences from a directory laid out like the Raspberry Pi
/// firmware repository's `boot/` (or an existing Pi OS boot partition).
pub fn from_directory(dir: &Path) -> Result<FirmwareSet, FirmwareError> {
    let mut set = FirmwareSet { origin: format!("directory {}", dir.display()), ..Default::default() };
    add_firmware_and_dtbs(&mut set, dir, dir)?;
    if set.files.is_empty() {
        return Err(FirmwareError::EmptyDirectory {
            path: dir.to_path_buf(),
            expected: "bootcode.bin, start.elf, fixup.dat, start4.elf, fixup4.dat, bcm27*.dtb".to_string(),
        });
    }
    let overlay = dir.join(DISABLE_BT_OVERLAY);
    if overlay.is_file() {
        set.files.push(ImageFile { path: DISABLE_BT_OVERLAY.to_string(), bytes: read_file(&overlay)? });
    }
    set.licence_broadcom = match fs::read_to_string(dir.join("LICENCE.broadcom")) {
        Ok(text) => text,
        Err(_) => {
            set.warnings.push(format!(
                "{} has no LICENCE.broadcom; writing the Broadcom licence notice barebench carries",
                dir.display()
            ));
            BROADCOM_LICENCE_FALLBACK.to_string()
        }
    };
    set.copying_linux = match fs::read_to_string(dir.join("COPYING.linux")) {
        Ok(text) => text,
        Err(_) => copying_linux_note(&set.origin, None),
    };
    set.check_boards();
    Ok(set)
}

/// No firmware: a card only QEMU boots (it loads the kernel itself, docs/qemu.md §1). It carries
/// no Broadcom file, so its licence file says so.
pub fn none() -> FirmwareSet {
    let origin = "no firmware (a card for QEMU, which boots the kernel without it)".to_string();
    FirmwareSet {
        files: Vec::new(),
        licence_broadcom: "This card carries no Raspberry Pi firmware, so no Broadcom file.\n".to_string(),
        copying_linux: "This card carries no device tree blobs.\n".to_string(),
        warnings: vec![
            "no firmware on this card: only QEMU boots it (barebench qemu --boot-card)".to_string()
        ],
        origin,
    }
}

/// The `Files: boot/*` stanza of a Debian copyright file (DEP-5) as a plain licence text.
pub fn broadcom_licence_from_copyright(copyright: &str) -> Option<String> {
    let stanza: Vec<&str> = copyright
        .lines()
        .skip_while(|line| line.trim_end() != "Files: boot/*")
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .collect();
    if stanza.is_empty() {
        return None;
    }
    let mut text = String::new();
    let mut field = "";
    for line in stanza {
        if let Some(continuation) = line.strip_prefix(' ') {
            let content = continuation.trim_end();
            match field {
                "Copyright" => text.push_str(&format!("Copyright (c) {}\n", content.trim())),
                _ if content == "." => text.push('\n'),
                _ => {
                    text.push_str(content);
                    text.push('\n');
                }
            }
        } else if let Some((name, value)) = line.split_once(':') {
            field = name.trim();
            match field {
                "Copyright" => text.push_str(&format!("Copyright (c) {}\n", value.trim())),
                "License" => {}
                _ => {}
            }
        }
    }
    Some(text)
}

/// The note that goes with the DTBs: where they came from, their licences and where the
/// corresponding source is (docs/ecosystem.md §1.6).
pub fn copying_linux_note(origin: &str, debian_copyright: Option<&str>) -> String {
    let mut text = String::from(
        "The device tree blobs (*.dtb) on this card are built from the Linux kernel sources.\n\
         Licences of their sources (SPDX): bcm2837-rpi-*.dts and bcm2711-rpi-*.dts GPL-2.0,\n\
         bcm2712-rpi-5-b.dts GPL-2.0 OR MIT. They are copied here unmodified.\n",
    );
    text.push_str(&format!("Origin: {origin}.\n"));
    text.push_str(
        "The corresponding source is the Linux kernel source of that version (for Debian\n\
         packages: the `linux` source package, `apt-get source linux=VERSION`).\n\
         The GPL-2.0 text is in /usr/share/common-licenses/GPL-2 on Debian systems and at\n\
         LICENSES/preferred/GPL-2.0 in the Linux source tree.\n",
    );
    if let Some(copyright) = debian_copyright {
        text.push_str("\nDebian's copyright file for the package follows.\n\n");
        text.push_str(copyright);
    }
    text
}

/// One entry of the system's APT sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub uris: Vec<String>,
    pub suites: Vec<String>,
}

/// Parses APT sources in deb822 (`.sources`) or one-line (`.list`) form; `deb-src` and
/// commented entries are skipped.
pub fn parse_apt_sources(text: &str) -> Vec<AptSource> {
    let mut sources = Vec::new();
    let is_deb822 = text.lines().any(|line| line.trim_start().starts_with("Types:"));
    if is_deb822 {
        for stanza in text.split("\n\n") {
            let mut fields: BTreeMap<String, String> = BTreeMap::new();
            for line in stanza.lines() {
                let line = line.trim();
                if line.starts_with('#') {
                    continue;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if !name.contains(' ') {
                        fields.insert(name.to_ascii_lowercase(), value.trim().to_string());
                    }
                }
            }
            let types = fields.get("types").cloned().unwrap_or_default();
            let enabled = fields.get("enabled").is_none_or(|value| value != "no");
            if enabled && types.split_whitespace().any(|kind| kind == "deb") {
                let list = |name: &str| -> Vec<String> {
                    fields
                        .get(name)
                        .map(|value| value.split_whitespace().map(String::from).collect())
                        .unwrap_or_default()
                };
                sources.push(AptSource { uris: list("uris"), suites: list("suites") });
            }
        }
    } else {
        for line in text.lines() {
            let mut words = line.split_whitespace().peekable();
            if words.next() != Some("deb") {
                continue;
            }
            if words.peek().is_some_and(|word| word.starts_with('[')) {
                for word in words.by_ref() {
                    if word.ends_with(']') {
                        break;
                    }
                }
            }
            if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
                sources.push(AptSource { uris: vec![uri.to_string()], suites: vec![suite.to_string()] });
            }
        }
    }
    sources
}

/// Finds the Debian archive of a release (a suite without `-`, signed by Debian's keyring in
/// practice) and its security archive among the sources.
pub fn find_debian_archive(sources: &[AptSource]) -> Option<DebianArchive> {
    const CODENAMES: [&str; 4] = ["bookworm", "trixie", "forky", "sid"];
    let (uri, codename) = sources.iter().find_map(|source| {
        let codename = source.suites.iter().find(|suite| CODENAMES.contains(&suite.as_str()))?;
        Some((source.uris.first()?.clone(), codename.clone()))
    })?;
    let security_suite = format!("{codename}-security");
    let security_uri = sources
        .iter()
        .find(|source| source.suites.contains(&security_suite))
        .and_then(|source| source.uris.first().cloned());
    Some(DebianArchive { uri, codename, security_uri })
}

/// Reads the system's APT sources and finds the Debian archive in them.
pub fn system_debian_archive() -> Option<DebianArchive> {
    let mut texts = Vec::new();
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list") {
        texts.push(text);
    }
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> =
            entries.filter_map(|entry| entry.ok()).map(|entry| entry.path()).collect();
        paths.sort();
        for path in paths {
            let name = path.to_string_lossy();
            if name.ends_with(".list") || name.ends_with(".sources") {
                if let Ok(text) = fs::read_to_string(&path) {
                    texts.push(text);
                }
            }
        }
    }
    let sources: Vec<AptSource> = texts.iter().flat_map(|text| parse_apt_sources(text)).collect();
    find_debian_archive(&sources)
}

/// Fetches firmware and DTBs from Debian into a cache (docs/ecosystem.md §1.3–1.4).
#[derive(Debug, Clone)]
pub struct DebianFetch {
    pub cache_dir: PathBuf,
    /// Ignore the unpacked files in the cache and download again.
    pub refresh: bool,
    /// Archive to use; `None` = the one in the system's APT sources.
    pub archive: Option<DebianArchive>,
    /// Kernel packages tried in order for the DTBs (6.12 is the first with a Pi 5 DTB).
    pub kernel_packages: Vec<String>,
}

const COMPLETE_MARKER: &str = ".complete";

impl DebianFetch {
    pub fn new(cache_dir: PathBuf) -> Self {
        DebianFetch {
            cache_dir,
            refresh: false,
            archive: None,
            kernel_packages: vec!["linux-image-6.12-arm64".to_string(), "linux-image-arm64".to_string()],
        }
    }

    /// The default cache: `$XDG_CACHE_HOME/barebench`, else `~/.cache/barebench`, else
    /// `build/cache`.
    pub fn default_cache_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|dir| !dir.is_empty()) {
            return PathBuf::from(dir).join("barebench");
        }
        if let Some(home) = std::env::var_os("HOME").filter(|dir| !dir.is_empty()) {
            return PathBuf::from(home).join(".cache/barebench");
        }
        PathBuf::from("build/cache")
    }

    /// Firmware, DTBs and licences: from the cache when a complete unpacked set is there,
    /// otherwise downloaded. `status` receives one line per step.
    pub fn fetch(&self, status: &mut dyn FnMut(&str)) -> Result<FirmwareSet, FirmwareError> {
        let firmware_root = self.cache_dir.join("raspi-firmware");
        let dtb_root = self.cache_dir.join("dtbs");
        let mut firmware_dir = (!self.refresh).then(|| newest_complete(&firmware_root)).flatten();
        let mut dtb_dir = (!self.refresh).then(|| newest_complete(&dtb_root)).flatten();
        if firmware_dir.is_none() || dtb_dir.is_none() {
            let apt = self.prepare_apt_root(status)?;
            if firmware_dir.is_none() {
                let (package, version, deb) = apt.download("raspi-firmware", status)?;
                let dir = firmware_root.join(&version);
                unpack(&deb, &dir, &package, &version, |path| {
                    if path == "./usr/share/doc/raspi-firmware/copyright" {
                        return Some("copyright".to_string());
                    }
                    let name = path.strip_prefix("./usr/lib/raspi-firmware/")?;
                    FIRMWARE_FILES.iter().any(|(file, _)| *file == name).then(|| name.to_string())
                })?;
                firmware_dir = Some(dir);
            }
            if dtb_dir.is_none() {
                let mut last_error = None;
                for meta_package in &self.kernel_packages {
                    match apt.resolve_kernel_package(meta_package) {
                        Ok(package) => {
                            status(&format!(
                                "downloading {package} for its device trees (about 93 MB, cached afterwards)"
                            ));
                            let (package, version, deb) = apt.download(&package, status)?;
                            let dir = dtb_root.join(format!("{package}_{version}"));
                            let copyright = format!("./usr/share/doc/{package}/copyright");
                            unpack(&deb, &dir, &package, &version, |path| {
                                let name = path.rsplit('/').next()?;
                                (path.contains("/broadcom/") && is_board_dtb(name))
                                    .then(|| name.to_string())
                                    .or_else(|| (path == copyright).then(|| "copyright".to_string()))
                            })?;
                            // The download is not needed once unpacked.
                            let _ = fs::remove_file(&deb);
                            dtb_dir = Some(dir);
                            break;
                        }
                        Err(error) => last_error = Some(FirmwareError::from(error)),
                    }
                }
                if dtb_dir.is_none() {
                    return Err(last_error.unwrap_or(FirmwareError::NoDebianSource));
                }
            }
        }
        let firmware_dir = firmware_dir.ok_or(FirmwareError::NoDebianSource)?;
        let dtb_dir = dtb_dir.ok_or(FirmwareError::NoDebianSource)?;
        self.assemble(&firmware_dir, &dtb_dir)
    }

    fn assemble(&self, firmware_dir: &Path, dtb_dir: &Path) -> Result<FirmwareSet, FirmwareError> {
        let firmware_origin = fs::read_to_string(firmware_dir.join(COMPLETE_MARKER)).unwrap_or_default();
        let dtb_origin = fs::read_to_string(dtb_dir.join(COMPLETE_MARKER)).unwrap_or_default();
        let mut set = FirmwareSet {
            origin: format!("Debian {} and {}", firmware_origin.trim(), dtb_origin.trim()),
            ..Default::default()
        };
        add_firmware_and_dtbs(&mut set, firmware_dir, dtb_dir)?;
        let copyright = String::from_utf8_lossy(&read_file(&firmware_dir.join("copyright"))?).into_owned();
        set.licence_broadcom =
            broadcom_licence_from_copyright(&copyright).ok_or_else(|| FirmwareError::Package {
                package: firmware_origin.trim().to_string(),
                problem: "its copyright file has no `Files: boot/*` stanza".to_string(),
            })?;
        let kernel_copyright = fs::read_to_string(dtb_dir.join("copyright")).ok();
        set.copying_linux =
            copying_linux_note(&format!("Debian package {}", dtb_origin.trim()), kernel_copyright.as_deref());
        set.warnings.push(
            "Debian ships no overlays/disable-bt.dtbo: the kernel moves the PL011 to GPIO14/15 itself"
                .to_string(),
        );
        set.check_boards();
        Ok(set)
    }

    fn prepare_apt_root(&self, status: &mut dyn FnMut(&str)) -> Result<Apt, FirmwareError> {
        let archive = match &self.archive {
            Some(archive) => archive.clone(),
            None => system_debian_archive().ok_or(FirmwareError::NoDebianSource)?,
        };
        Ok(Apt::prepare(&self.cache_dir.join("apt"), &archive, status)?)
    }
}

fn newest_complete(root: &Path) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root)
        .ok()?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.join(COMPLETE_MARKER).is_file())
        .collect();
    dirs.sort_by_key(|path| fs::metadata(path.join(COMPLETE_MARKER)).and_then(|meta| meta.modified()).ok());
    dirs.pop()
}

/// Unpacks the entries of `deb` selected by `select(path) -> Some(file name)` into `dest`
/// (`dpkg-deb --fsys-tarfile`, read with the tar crate) and marks the directory complete.
fn unpack(
    deb: &Path,
    dest: &Path,
    package: &str,
    version: &str,
    select: impl Fn(&str) -> Option<String>,
) -> Result<(), FirmwareError> {
    let write_error = |path: &Path, source| FirmwareError::Write { path: path.to_path_buf(), source };
    fs::create_dir_all(dest).map_err(|source| write_error(dest, source))?;
    let command = format!("dpkg-deb --fsys-tarfile {}", deb.display());
    let mut child = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| AptError::ToolMissing { command: command.clone(), source })?;
    let stdout = child.stdout.take().ok_or_else(|| FirmwareError::Package {
        package: package.to_string(),
        problem: "dpkg-deb gave no output pipe".to_string(),
    })?;
    let mut archive = tar::Archive::new(stdout);
    let read_error = |source| FirmwareError::Read { path: deb.to_path_buf(), source };
    let mut unpacked = 0;
    for entry in archive.entries().map_err(read_error)? {
        let mut entry = entry.map_err(read_error)?;
        let path = entry.path().map_err(read_error)?.to_string_lossy().into_owned();
        if let Some(name) = select(&path) {
            let target = dest.join(name);
            let mut file = fs::File::create(&target).map_err(|source| write_error(&target, source))?;
            io::copy(&mut entry, &mut file).map_err(|source| write_error(&target, source))?;
            unpacked += 1;
        }
    }
    succeeded(command, child.wait_with_output())?;
    // The copyright file is always selected: without it the licence cannot travel.
    if unpacked < 2 || !dest.join("copyright").is_file() {
        return Err(FirmwareError::Package {
            package: package.to_string(),
            problem: format!(
                "only {unpacked} of the expected files (firmware or DTBs, and the copyright file) were in it"
            ),
        });
    }
    let marker = dest.join(COMPLETE_MARKER);
    fs::write(&marker, format!("{package} {version}\n")).map_err(|source| write_error(&marker, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COPYRIGHT_LINES: [&str; 16] = [
        "Format: https://example/dep5",
        "Upstream-Name: raspberrypi / firmware",
        "",
        "Files: boot/*",
        "Copyright: 2006, Broadcom Corporation",
        "           2015, Raspberry Pi (Trading) Ltd",
        "License: Proprietary_1",
        " All rights reserved.",
        " .",
        " Redistribution.  Redistribution and use in binary form, without",
        " modification, are permitted.",
        "",
        "Files: brcm80211/*",
        "Copyright: 2015 Broadcom Corporation",
        "License: Proprietary_2",
        " SOFTWARE LICENSE AGREEMENT",
    ];

    #[test]
    fn broadcom_licence_is_the_boot_stanza_as_plain_text() {
        let text = broadcom_licence_from_copyright(&COPYRIGHT_LINES.join("\n")).unwrap();
        assert_eq!(
            text,
            "Copyright (c) 2006, Broadcom Corporation\n\
             Copyright (c) 2015, Raspberry Pi (Trading) Ltd\n\
             All rights reserved.\n\
             \n\
             Redistribution.  Redistribution and use in binary form, without\n\
             modification, are permitted.\n"
        );
        assert!(!text.contains("SOFTWARE LICENSE AGREEMENT"));
        assert_eq!(broadcom_licence_from_copyright("Files: other/*\n"), None);
    }

    #[test]
    fn deb822_sources_are_parsed() {
        let text = "Types: deb\n# comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n\
                    Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n\
                    Types: deb-src\nURIs: http://src.example\nSuites: bookworm\n\n\
                    Enabled: no\nTypes: deb\nURIs: http://off.example\nSuites: trixie\n";
        let sources = parse_apt_sources(text);
        assert_eq!(sources.len(), 2);
        assert_eq!(sources[0].suites, ["bookworm", "bookworm-updates"]);
        let archive = find_debian_archive(&sources).unwrap();
        assert_eq!(
            archive,
            DebianArchive {
                uri: "http://mirror.example/debian".to_string(),
                codename: "bookworm".to_string(),
                security_uri: Some("http://mirror.example/debian-security".to_string()),
            }
        );
    }

    #[test]
    fn one_line_sources_are_parsed() {
        let text = "# deb http://old.example bullseye main\n\
                    deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] http://m.example/debian trixie main\n\
                    deb-src http://m.example/debian trixie main\n";
        let sources = parse_apt_sources(text);
        assert_eq!(
            sources,
            [AptSource {
                uris: vec!["http://m.example/debian".to_string()],
                suites: vec!["trixie".to_string()]
            }]
        );
        let archive = find_debian_archive(&sources).unwrap();
        assert_eq!(archive.codename, "trixie");
        assert_eq!(archive.security_uri, None);
        assert_eq!(find_debian_archive(&parse_apt_sources("deb http://x.example jammy main\n")), None);
    }

    #[test]
    fn a_firmware_directory_is_read_and_gaps_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("start4.elf"), b"start4").unwrap();
        fs::write(dir.path().join("fixup4.dat"), b"fixup4").unwrap();
        fs::write(dir.path().join("bcm2711-rpi-4-b.dtb"), b"dtb4").unwrap();
        fs::write(dir.path().join("unrelated.dtb"), b"x").unwrap();
        let set = from_directory(dir.path()).unwrap();
        let paths: Vec<&str> = set.files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, ["start4.elf", "fixup4.dat", "bcm2711-rpi-4-b.dtb"]);
        assert!(set.licence_broadcom.contains("Broadcom"));
        assert!(set.warnings.iter().any(|warning| warning.contains("bootcode.bin")));
        assert!(set.warnings.iter().any(|warning| warning.contains("bcm2712-rpi-5-b.dtb")));
        assert!(set.warnings.iter().any(|warning| warning.contains("LICENCE.broadcom")));
        assert!(set.warnings.iter().any(|warning| warning.contains("no bcm2712d0-rpi-5-b.dtb")));
        assert!(!set.has_upstream_dtb_names());
        // With the D0 tree (here under upstream's name) it goes on the card and the warning goes.
        fs::write(dir.path().join("bcm2712-d-rpi-5-b.dtb"), b"dtb5d0").unwrap();
        let set = from_directory(dir.path()).unwrap();
        assert!(set.has_file("bcm2712-d-rpi-5-b.dtb"));
        assert!(!set.warnings.iter().any(|warning| warning.contains("bcm2712d0")));
    }

    #[test]
    fn an_empty_firmware_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(from_directory(dir.path()), Err(FirmwareError::EmptyDirectory { .. })));
    }

    #[test]
    fn board_dtbs_are_recognised_by_name() {
        assert!(is_board_dtb("bcm2837-rpi-3-b-plus.dtb"));
        assert!(is_board_dtb("bcm2712d0-rpi-5-b.dtb"));
        // Upstream's name for the D0 tree, so that a newer Debian kernel package's copy is kept.
        assert!(is_board_dtb("bcm2712-d-rpi-5-b.dtb"));
        assert!(!is_board_dtb("bcm2835-rpi-b.dtb"));
        assert!(!is_board_dtb("bcm2711-rpi-4-b.dts"));
    }
}
