//! The Debian packages `barebench compare-linux` boots (docs/linux-compare.md §1): pinned by URL,
//! size and SHA-256 in `packages.txt`, downloaded once with `curl` into the cache, checked, and
//! unpacked with `dpkg-deb -x`.
#![forbid(unsafe_code)]

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The pinned packages: one `URL SIZE SHA256` line each (`#` starts a comment line).
pub const PINNED_PACKAGES: &str = include_str!("packages.txt");

/// One pinned `.deb`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPackage {
    pub url: String,
    pub size_bytes: u64,
    /// Lower-case hex.
    pub sha256: String,
}

impl PinnedPackage {
    /// The file name in the cache: the URL's last component.
    pub fn file_name(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or(&self.url)
    }

    /// The package name (the file name up to its first `_`).
    pub fn package_name(&self) -> &str {
        self.file_name().split('_').next().unwrap_or_default()
    }
}

/// Why the packages could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("packages.txt line {line}: expected `URL SIZE SHA256`, found {text:?}")]
    BadPin { line: usize, text: String },
    #[error(
        "could not download {url} ({message}). Is this machine offline? Downloads are kept in {cache} once \
         they succeed. A 404 means Debian has dropped the pinned version: run \
         tools/scripts/linux-compare-pins.sh to pin the current ones"
    )]
    Download { url: String, message: String, cache: PathBuf },
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
        let [url, size, sha256] = fields[..] else { return Err(bad()) };
        let size_bytes = size.parse().map_err(|_| bad())?;
        if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) || !url.ends_with(".deb") {
            return Err(bad());
        }
        pins.push(PinnedPackage { url: url.to_string(), size_bytes, sha256: sha256.to_ascii_lowercase() });
    }
    Ok(pins)
}

/// The pin of package `name`.
pub fn pin_named<'a>(pins: &'a [PinnedPackage], name: &str) -> Result<&'a PinnedPackage, PackageError> {
    pins.iter()
        .find(|pin| pin.package_name() == name)
        .ok_or_else(|| PackageError::NotPinned { name: name.to_string() })
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

/// The package from `cache_dir`, downloaded with `curl` first when it is not there (or does
/// not match its pin). `status` gets a line per download.
pub fn fetch(
    pin: &PinnedPackage,
    cache_dir: &Path,
    status: &mut dyn FnMut(&str),
) -> Result<PathBuf, PackageError> {
    fs::create_dir_all(cache_dir)
        .map_err(|source| PackageError::Io { path: cache_dir.to_path_buf(), source })?;
    let path = cache_dir.join(pin.file_name());
    if path.is_file() && verify(pin, &path).is_ok() {
        return Ok(path);
    }
    status(&format!("downloading {} ({} KiB)", pin.url, pin.size_bytes.div_ceil(1024)));
    let partial = path.with_extension("deb.part");
    let output = Command::new("curl")
        .args(["-fsS", "--retry", "2", "--connect-timeout", "20", "-o"])
        .arg(&partial)
        .arg(&pin.url)
        .output()
        .map_err(|error| PackageError::Download {
            url: pin.url.clone(),
            message: format!("running curl: {error}"),
            cache: cache_dir.to_path_buf(),
        })?;
    if !output.status.success() {
        let _ = fs::remove_file(&partial);
        return Err(PackageError::Download {
            url: pin.url.clone(),
            message: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            cache: cache_dir.to_path_buf(),
        });
    }
    verify(pin, &partial)?;
    fs::rename(&partial, &path).map_err(|source| PackageError::Io { path: path.clone(), source })?;
    Ok(path)
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
        assert!(pins.iter().any(|pin| pin.package_name().starts_with("linux-image-")));
        assert!(pins.iter().all(|pin| pin.url.starts_with("http://deb.debian.org/")));
    }

    #[test]
    fn an_unreachable_archive_says_the_machine_may_be_offline_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        // Port 9 (discard) on the loopback: nothing listens, the connection is refused at once.
        let pin = PinnedPackage {
            url: "http://127.0.0.1:9/a_1_arm64.deb".into(),
            size_bytes: 3,
            sha256: "0".repeat(64),
        };
        let mut lines = Vec::new();
        let error = fetch(&pin, dir.path(), &mut |line| lines.push(line.to_string())).unwrap_err();
        assert!(matches!(error, PackageError::Download { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("offline") && message.contains("linux-compare-pins.sh"), "{message}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "a partial download was left behind");
    }

    #[test]
    fn a_malformed_pin_names_its_line() {
        let text = "# comment\nhttp://x/a_1_arm64.deb 10 zz\n";
        assert!(matches!(parse_pins(text), Err(PackageError::BadPin { line: 2, .. })));
        let short = "http://x/a_1_arm64.deb 10\n";
        assert!(matches!(parse_pins(short), Err(PackageError::BadPin { line: 1, .. })));
    }

    #[test]
    fn a_file_that_does_not_match_its_pin_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a_1_arm64.deb");
        fs::write(&path, b"abc").unwrap();
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        let good = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let pin = PinnedPackage { url: "http://x/a_1_arm64.deb".into(), size_bytes: 3, sha256: good.into() };
        verify(&pin, &path).unwrap();
        let bad = PinnedPackage { sha256: "0".repeat(64), ..pin.clone() };
        assert!(matches!(verify(&bad, &path), Err(PackageError::Checksum { .. })));
        // A cached file that matches is used without a download.
        assert_eq!(fetch(&pin, dir.path(), &mut |line| panic!("downloaded: {line}")).unwrap(), path);
    }
}
