//! The Debian packages `barebench compare-linux` boots (docs/linux-compare.md §1): pinned by name,
//! version and SHA-256 in `packages.txt`, downloaded once through the private APT root of
//! [`crate::apt`] (the same as `barebench image`'s; APT checks each download against Debian's
//! signed Release file), checked against the pin, kept in the cache and unpacked with
//! `dpkg-deb -x`.
#![forbid(unsafe_code)]

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::apt::{deb_file_prefix, Apt, AptError, DebianArchive};

/// The pinned packages: one `PACKAGE VERSION SHA256` line each (`#` starts a comment line).
pub const PINNED_PACKAGES: &str = include_str!("packages.txt");

/// The release the pins come from: Debian 12 "bookworm", with its security updates.
pub fn bookworm() -> DebianArchive {
    DebianArchive {
        uri: "http://deb.debian.org/debian".to_string(),
        codename: "bookworm".to_string(),
        security_uri: Some("http://deb.debian.org/debian-security".to_string()),
    }
}

/// One pinned `.deb`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPackage {
    pub name: String,
    /// As APT writes it, epoch included (`1:1.35.0-4+deb12u1+b1`).
    pub version: String,
    /// Lower-case hex.
    pub sha256: String,
}

impl PinnedPackage {
    /// The file name in the cache, as `apt-get download` names it without the architecture.
    pub fn file_name(&self) -> String {
        format!("{}.deb", deb_file_prefix(&self.name, &self.version).trim_end_matches('_'))
    }
}

/// Why the packages could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("packages.txt line {line}: expected `PACKAGE VERSION SHA256`, found {text:?}")]
    BadPin { line: usize, text: String },
    #[error("setting up APT for Debian's packages: {0}")]
    Apt(#[source] AptError),
    #[error(
        "could not download {package} {version} ({source}). Is this machine offline? Downloads are kept \
         in {cache} once they succeed. If APT found no such version, Debian has dropped it (its archive \
         keeps only the current point release and security updates): run \
         tools/scripts/linux-compare-pins.sh to pin the current ones"
    )]
    Download { package: String, version: String, source: Box<AptError>, cache: PathBuf },
    #[error("{path}: SHA-256 {actual}, but the pin says {expected}: the download is not the pinned package")]
    Checksum { path: PathBuf, expected: String, actual: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "unpacking {path} with dpkg-deb failed: {message} (dpkg-deb comes with dpkg: apt-get install dpkg)"
    )]
    Unpack { path: PathBuf, message: String },
    #[error("no package named {name} among the pinned packages")]
    NotPinned { name: String },
}

/// Reads the pin list.
pub fn parse_pins(text: &str) -> Result<Vec<PinnedPackage>, PackageError> {
    let mut pins = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || PackageError::BadPin { line: index + 1, text: line.to_string() };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, version, sha256] = fields[..] else { return Err(bad()) };
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        pins.push(PinnedPackage {
            name: name.to_string(),
            version: version.to_string(),
            sha256: sha256.to_ascii_lowercase(),
        });
    }
    Ok(pins)
}

/// The pin of package `name`.
pub fn pin_named<'a>(pins: &'a [PinnedPackage], name: &str) -> Result<&'a PinnedPackage, PackageError> {
    pins.iter().find(|pin| pin.name == name).ok_or_else(|| PackageError::NotPinned { name: name.to_string() })
}

/// SHA-256 of a file, lower-case hex.
pub fn sha256_hex(path: &Path) -> Result<String, PackageError> {
    let io_error = |source| PackageError::Io { path: path.to_path_buf(), source };
    let mut file = File::open(path).map_err(io_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let read = file.read(&mut buffer).map_err(io_error)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Checks a file against its pin.
pub fn verify(pin: &PinnedPackage, path: &Path) -> Result<(), PackageError> {
    let actual = sha256_hex(path)?;
    if actual != pin.sha256 {
        return Err(PackageError::Checksum {
            path: path.to_path_buf(),
            expected: pin.sha256.clone(),
            actual,
        });
    }
    Ok(())
}

/// Every pinned package from `root/debs`; those not there (or not matching their pin) are
/// downloaded first through the APT root `root/apt` for `archive` and checked against their pin.
/// `status` gets a line per step.
pub fn fetch_all<'a>(
    pins: &'a [PinnedPackage],
    root: &Path,
    archive: &DebianArchive,
    status: &mut dyn FnMut(&str),
) -> Result<Vec<(&'a PinnedPackage, PathBuf)>, PackageError> {
    let debs_dir = root.join("debs");
    fs::create_dir_all(&debs_dir).map_err(|source| PackageError::Io { path: debs_dir.clone(), source })?;
    let cached = |pin: &PinnedPackage| {
        let path = debs_dir.join(pin.file_name());
        (path.is_file() && verify(pin, &path).is_ok()).then_some(path)
    };
    let mut apt = None;
    let mut debs = Vec::with_capacity(pins.len());
    for pin in pins {
        if let Some(path) = cached(pin) {
            debs.push((pin, path));
            continue;
        }
        let apt = match &mut apt {
            Some(apt) => apt,
            empty => {
                empty.insert(Apt::prepare(&root.join("apt"), archive, status).map_err(PackageError::Apt)?)
            }
        };
        let download = apt.download_version(&pin.name, &pin.version, status).map_err(|source| {
            PackageError::Download {
                package: pin.name.clone(),
                version: pin.version.clone(),
                source: Box::new(source),
                cache: debs_dir.clone(),
            }
        })?;
        let checked = verify(pin, &download);
        let path = debs_dir.join(pin.file_name());
        match checked {
            Ok(()) => fs::rename(&download, &path)
                .map_err(|source| PackageError::Io { path: path.clone(), source })?,
            Err(error) => {
                let _ = fs::remove_file(&download);
                return Err(error);
            }
        }
        debs.push((pin, path));
    }
    remove_unpinned(&debs_dir, &debs);
    Ok(debs)
}

/// Removes the downloads of earlier pins from `debs_dir` (about 100 MB a set).
fn remove_unpinned(debs_dir: &Path, pinned: &[(&PinnedPackage, PathBuf)]) {
    let Ok(entries) = fs::read_dir(debs_dir) else { return };
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if !pinned.iter().any(|(_, kept)| *kept == path) {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Unpacks a `.deb`'s files into `dir` (`dpkg-deb -x`).
pub fn unpack(deb: &Path, dir: &Path) -> Result<(), PackageError> {
    fs::create_dir_all(dir).map_err(|source| PackageError::Io { path: dir.to_path_buf(), source })?;
    let output = Command::new("dpkg-deb")
        .arg("-x")
        .arg(deb)
        .arg(dir)
        .output()
        .map_err(|error| PackageError::Unpack { path: deb.to_path_buf(), message: error.to_string() })?;
    if !output.status.success() {
        return Err(PackageError::Unpack {
            path: deb.to_path_buf(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_pins_parse_and_name_the_kernel_fio_and_busybox() {
        let pins = parse_pins(PINNED_PACKAGES).unwrap();
        assert!(pins.len() > 10, "{pins:?}");
        for name in ["fio", "busybox-static", "libc6"] {
            pin_named(&pins, name).unwrap();
        }
        assert!(pins.iter().any(|pin| pin.name.starts_with("linux-image-")));
    }

    #[test]
    fn an_unreachable_archive_says_the_machine_may_be_offline_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        // Port 9 (discard) on the loopback: nothing listens, the connection is refused at once,
        // so APT has no package list and no version of anything.
        let archive = DebianArchive {
            uri: "http://127.0.0.1:9/debian".into(),
            codename: "bookworm".into(),
            security_uri: None,
        };
        let pin = PinnedPackage { name: "fio".into(), version: "3.33-3".into(), sha256: "0".repeat(64) };
        let mut lines = Vec::new();
        let pins = [pin];
        let error =
            fetch_all(&pins, dir.path(), &archive, &mut |line| lines.push(line.to_string())).unwrap_err();
        assert!(matches!(error, PackageError::Download { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("offline") && message.contains("linux-compare-pins.sh"), "{message}");
        assert!(lines.iter().any(|line| line.contains("downloading fio 3.33-3")), "{lines:?}");
        assert_eq!(fs::read_dir(dir.path().join("debs")).unwrap().count(), 0, "a download was left behind");
    }

    #[test]
    fn a_malformed_pin_names_its_line() {
        let text = "# comment\nfio 3.33-3 zz\n";
        assert!(matches!(parse_pins(text), Err(PackageError::BadPin { line: 2, .. })));
        let short = "fio 3.33-3\n";
        assert!(matches!(parse_pins(short), Err(PackageError::BadPin { line: 1, .. })));
    }

    #[test]
    fn a_file_that_does_not_match_its_pin_is_refused_and_a_matching_one_used_as_cached() {
        let dir = tempfile::tempdir().unwrap();
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        let good = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let pin = PinnedPackage { name: "a".into(), version: "1:1.0-1".into(), sha256: good.into() };
        assert_eq!(pin.file_name(), "a_1%3a1.0-1.deb");
        fs::create_dir_all(dir.path().join("debs")).unwrap();
        let path = dir.path().join("debs").join(pin.file_name());
        fs::write(&path, b"abc").unwrap();
        verify(&pin, &path).unwrap();
        let bad = PinnedPackage { sha256: "0".repeat(64), ..pin.clone() };
        assert!(matches!(verify(&bad, &path), Err(PackageError::Checksum { .. })));
        // A cached file that matches is used without APT (the archive is unreachable); the files
        // of other pins go.
        let stale = dir.path().join("debs/a_0.9-1_arm64.deb");
        fs::write(&stale, b"old").unwrap();
        let archive =
            DebianArchive { uri: "http://127.0.0.1:9/".into(), codename: "x".into(), security_uri: None };
        let pins = [pin];
        let found = fetch_all(&pins, dir.path(), &archive, &mut |line| panic!("downloaded: {line}")).unwrap();
        assert_eq!(found[0].1, path);
        assert!(!stale.exists());
    }
}
