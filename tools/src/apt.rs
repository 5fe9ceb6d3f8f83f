//! Debian packages through APT in a private root (docs/ecosystem.md §1.4): its own sources, lists,
//! cache and (empty) dpkg status, architecture arm64 whatever the host, so packages are downloaded
//! and never installed. APT checks every download against the archive's Release file, whose
//! signature it checks with Debian's keyring (`Signed-By`), before it keeps the file. Both
//! `barebench image` (firmware and device trees) and `barebench compare-linux` (the Linux side's
//! kernel, busybox and fio) fetch their packages this way.
#![forbid(unsafe_code)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Debian's archive signing keys (package debian-archive-keyring).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// The Debian archive and release to fetch from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianArchive {
    pub uri: String,
    pub codename: String,
    pub security_uri: Option<String>,
}

/// Why APT could not give a package.
#[derive(Debug, thiserror::Error)]
pub enum AptError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("`{command}` failed ({status}): {output}")]
    Tool { command: String, status: String, output: String },
    #[error("cannot run `{command}`: {source} (the Debian package tools apt-get and dpkg-deb are needed)")]
    ToolMissing { command: String, source: io::Error },
    #[error("package {package}: {problem}")]
    Package { package: String, problem: String },
}

/// A private APT root, its package lists updated.
pub struct Apt {
    config: PathBuf,
    downloads: PathBuf,
}

impl Apt {
    /// Makes (or reuses) the APT root in `root` for `archive` (main and non-free-firmware of the
    /// release, its backports and security updates) and updates its package lists; `status` gets
    /// a line. A list that cannot be fetched (offline) is only warned about by apt-get: the
    /// download that needs it fails then.
    pub fn prepare(
        root: &Path,
        archive: &DebianArchive,
        status: &mut dyn FnMut(&str),
    ) -> Result<Apt, AptError> {
        let write = |path: PathBuf, text: String| {
            fs::write(&path, text).map_err(|source| AptError::Write { path, source })
        };
        for dir in [
            "etc/sources.list.d",
            "etc/preferences.d",
            "state/lists/partial",
            "cache/archives/partial",
            "downloads",
        ] {
            let path = root.join(dir);
            fs::create_dir_all(&path).map_err(|source| AptError::Write { path, source })?;
        }
        let codename = &archive.codename;
        let mut sources = format!(
            "Types: deb\nURIs: {}\nSuites: {codename} {codename}-backports\nComponents: main non-free-firmware\nSigned-By: {KEYRING}\n",
            archive.uri
        );
        if let Some(security) = &archive.security_uri {
            sources.push_str(&format!(
                "\nTypes: deb\nURIs: {security}\nSuites: {codename}-security\nComponents: main non-free-firmware\nSigned-By: {KEYRING}\n"
            ));
        }
        write(root.join("etc/sources.list.d/debian.sources"), sources)?;
        write(root.join("state/status"), String::new())?;
        let dir = |name: &str| root.join(name).display().to_string();
        // The system's apt.conf.d (proxies) still applies.
        let config = format!(
            "Dir::State \"{}\";\nDir::State::status \"{}\";\nDir::Cache \"{}\";\n\
             Dir::Etc::SourceList \"{}\";\nDir::Etc::SourceParts \"{}\";\n\
             Dir::Etc::Preferences \"{}\";\nDir::Etc::PreferencesParts \"{}\";\n\
             APT::Architecture \"arm64\";\nAPT::Architectures {{ \"arm64\"; }};\n\
             Acquire::Languages \"none\";\nAPT::Sandbox::User \"root\";\n",
            dir("state"),
            dir("state/status"),
            dir("cache"),
            dir("etc/sources.list"),
            dir("etc/sources.list.d"),
            dir("etc/preferences"),
            dir("etc/preferences.d"),
        );
        let config_path = root.join("apt.conf");
        write(config_path.clone(), config)?;
        let apt = Apt { config: config_path, downloads: root.join("downloads") };
        status(&format!(
            "updating package lists for Debian {codename} (private APT root {})",
            root.display()
        ));
        apt.run("apt-get", &["-q", "update"])?;
        Ok(apt)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, AptError> {
        let command = format!("{program} {}", args.join(" "));
        let output = Command::new(program)
            .args(args)
            .env("APT_CONFIG", &self.config)
            .current_dir(&self.downloads)
            .stdin(Stdio::null())
            .output();
        let output = succeeded(command, output)?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn candidate_version(&self, package: &str) -> Result<String, AptError> {
        let show = self.run("apt-cache", &["show", "--no-all-versions", package])?;
        field(&show, "Version").ok_or_else(|| AptError::Package {
            package: package.to_string(),
            problem: "apt-cache show gave no version".to_string(),
        })
    }

    /// The versioned kernel package a metapackage depends on (e.g. linux-image-6.12-arm64 →
    /// linux-image-6.12.117+deb12-arm64).
    pub fn resolve_kernel_package(&self, meta_package: &str) -> Result<String, AptError> {
        let show = self.run("apt-cache", &["show", "--no-all-versions", meta_package])?;
        let depends = field(&show, "Depends").unwrap_or_default();
        depends
            .split(',')
            .map(|dependency| dependency.split_whitespace().next().unwrap_or(""))
            .find(|name| name.starts_with("linux-image-") && name.ends_with("-arm64"))
            .map(String::from)
            .ok_or_else(|| AptError::Package {
                package: meta_package.to_string(),
                problem: format!("no linux-image dependency in {depends:?}"),
            })
    }

    /// Downloads the candidate version of a package (never installs it); returns name, version
    /// and the .deb path.
    pub fn download(
        &self,
        package: &str,
        status: &mut dyn FnMut(&str),
    ) -> Result<(String, String, PathBuf), AptError> {
        let version = self.candidate_version(package)?;
        let deb = self.download_version(package, &version, status)?;
        Ok((package.to_string(), version, deb))
    }

    /// Downloads `package` at exactly `version` (`apt-get download package=version`); fails when
    /// the archive no longer lists that version.
    pub fn download_version(
        &self,
        package: &str,
        version: &str,
        status: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, AptError> {
        status(&format!("downloading {package} {version}"));
        self.run("apt-get", &["-q", "download", &format!("{package}={version}")])?;
        let entries = fs::read_dir(&self.downloads)
            .map_err(|source| AptError::Read { path: self.downloads.clone(), source })?;
        let prefix = deb_file_prefix(package, version);
        entries
            .filter_map(|entry| entry.ok())
            .map(|entry| entry.path())
            .find(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".deb"))
            })
            .ok_or_else(|| AptError::Package {
                package: package.to_string(),
                problem: format!("apt-get download left no {prefix}*.deb in {}", self.downloads.display()),
            })
    }
}

/// How `apt-get download` names the file of `package` at `version`, up to the architecture:
/// `name_version_`, the epoch's colon written `%3a`.
pub fn deb_file_prefix(package: &str, version: &str) -> String {
    format!("{package}_{}_", version.replace(':', "%3a"))
}

/// The output of the external `command` when it ran and exited with success; otherwise the error
/// that names it (not found or not started, or its exit status with its stderr).
pub fn succeeded(command: String, output: io::Result<Output>) -> Result<Output, AptError> {
    let output = output.map_err(|source| AptError::ToolMissing { command: command.clone(), source })?;
    if !output.status.success() {
        return Err(AptError::Tool {
            command,
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(output)
}

fn field(control: &str, name: &str) -> Option<String> {
    let prefix = format!("{name}:");
    control.lines().find_map(|line| line.strip_prefix(&prefix)).map(|value| value.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn download_names_carry_the_epoch_escaped() {
        assert_eq!(
            deb_file_prefix("busybox-static", "1:1.35.0-4+deb12u1+b1"),
            "busybox-static_1%3a1.35.0-4+deb12u1+b1_"
        );
        assert_eq!(deb_file_prefix("fio", "3.33-3"), "fio_3.33-3_");
    }

    #[test]
    fn control_fields_are_found_by_name() {
        let show = "Package: fio\nVersion: 3.33-3\nDepends: libc6 (>= 2.34), zlib1g\n";
        assert_eq!(field(show, "Version").as_deref(), Some("3.33-3"));
        assert_eq!(field(show, "Depends").as_deref(), Some("libc6 (>= 2.34), zlib1g"));
        assert_eq!(field(show, "SHA256"), None);
    }
}
