//! `barebench compare-linux`: the same jobs on the same emulated devices, once by Linux + fio and
//! once by barebench, side by side (docs/linux-compare.md).
//!
//! Linux is Debian's arm64 kernel with an initramfs of busybox, fio and the storage modules
//! (packages pinned in `packages.txt`). Both sides boot through the same [`QemuRun`], so machine,
//! CPU, memory, `-icount` and every drive and device option are the same; only `-kernel`,
//! `-initrd` and `-append` differ. Each run is one boot of each side per device, the sides in turn.
#![forbid(unsafe_code)]

pub mod initramfs;
pub mod packages;
pub mod table;

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use bench::fio_json::{extract_json_from_log, parse_fio_json, FioReport};

use crate::disk::DiskSpec;
use crate::qemu::{Machine, QemuRun};
use initramfs::{CpioWriter, FIO_EXIT, JSON_BEGIN, JSON_END};
use packages::PackageError;
use table::{DeviceKind, Job, Row, Window};

/// What went wrong on the way to the table.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the kernel package has no {what}")]
    KernelPackage { what: String },
    #[error(transparent)]
    Qemu(#[from] crate::qemu::QemuError),
    #[error("{side} on {device}: {problem} (serial log {log})")]
    Run { side: &'static str, device: &'static str, problem: String, log: PathBuf },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> CompareError + '_ {
    move |source| CompareError::Io { path: path.to_path_buf(), source }
}

/// Linux ready to boot: the kernel image and the base initramfs (without jobs).
#[derive(Debug, Clone)]
pub struct LinuxSystem {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
}

const COMPLETE_MARKER: &str = ".complete";

/// Downloads (or finds in `cache_dir`) the pinned packages and builds the kernel and base
/// initramfs from them, once per pin list.
pub fn prepare_linux(cache_dir: &Path, status: &mut dyn FnMut(&str)) -> Result<LinuxSystem, CompareError> {
    let pins = packages::parse_pins(packages::PINNED_PACKAGES)?;
    let root = cache_dir.join("linux-compare");
    let built = root.join(system_name(packages::PINNED_PACKAGES, &initramfs::init_script()));
    let initramfs = built.join("initramfs.cpio");
    let kernel = built.join("Image");
    if built.join(COMPLETE_MARKER).is_file() {
        return Ok(LinuxSystem { kernel, initramfs });
    }
    let debs = packages::fetch_all(&pins, &root, &packages::bookworm(), status)?;
    status(&format!("building the initramfs in {}", built.display()));
    let _ = fs::remove_dir_all(&built);
    let tree = built.join("root");
    let kernel_tree = built.join("kernel");
    for (pin, deb) in &debs {
        let into = if pin.name.starts_with("linux-image-") { &kernel_tree } else { &tree };
        packages::unpack(deb, into)?;
    }
    // Documentation, man pages and locales are not needed to run fio.
    let _ = fs::remove_dir_all(tree.join("usr/share"));
    let vmlinuz = find_named(&kernel_tree.join("boot"), |name| name.starts_with("vmlinuz-"))
        .ok_or_else(|| CompareError::KernelPackage { what: "boot/vmlinuz-*".to_string() })?;
    fs::rename(&vmlinuz, &kernel).map_err(io_error(&kernel))?;
    let modules_dir = tree.join("modules");
    fs::create_dir_all(&modules_dir).map_err(io_error(&modules_dir))?;
    let modules_root = kernel_tree.join("lib/modules");
    for module in initramfs::MODULES {
        let file = format!("{module}.ko");
        let found = find_recursive(&modules_root, &file)
            .ok_or_else(|| CompareError::KernelPackage { what: format!("module {file}") })?;
        fs::copy(&found, modules_dir.join(&file)).map_err(io_error(&found))?;
    }
    write_file(&tree.join("init"), initramfs::init_script().as_bytes(), 0o755)?;
    let _ = fs::remove_dir_all(&kernel_tree);
    let file = File::create(&initramfs).map_err(io_error(&initramfs))?;
    let mut writer = CpioWriter::new(BufWriter::new(file));
    writer.add_tree(&tree).map_err(io_error(&tree))?;
    writer.finish().and_then(|mut out| out.flush()).map_err(io_error(&initramfs))?;
    let _ = fs::remove_dir_all(&tree);
    write_file(&built.join(COMPLETE_MARKER), packages::PINNED_PACKAGES.as_bytes(), 0o644)?;
    remove_other_systems(&root, &built);
    Ok(LinuxSystem { kernel, initramfs })
}

/// The cache directory's name of the system built from these pins and this `/init`: a new pin
/// list or a new `/init` builds a new system.
fn system_name(pins: &str, init_script: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(pins.as_bytes());
    hasher.update(init_script.as_bytes());
    let digest: String = hasher.finalize().iter().take(6).map(|byte| format!("{byte:02x}")).collect();
    format!("system-{digest}")
}

/// Removes the systems built from earlier pins or an earlier `/init` (about 150 MB each).
fn remove_other_systems(root: &Path, keep: &Path) {
    let Ok(entries) = fs::read_dir(root) else { return };
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        let is_system = path.file_name().is_some_and(|name| name.to_string_lossy().starts_with("system-"));
        if is_system && path != keep {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn write_file(path: &Path, data: &[u8], mode: u32) -> Result<(), CompareError> {
    use std::os::unix::fs::PermissionsExt;
    fs::write(path, data).map_err(io_error(path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_error(path))
}

fn find_named(dir: &Path, wanted: impl Fn(&str) -> bool) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.file_name().is_some_and(|name| wanted(&name.to_string_lossy())))
}

fn find_recursive(dir: &Path, file_name: &str) -> Option<PathBuf> {
    for entry in fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_recursive(&path, file_name) {
                return Some(found);
            }
        } else if entry.file_name().to_string_lossy() == file_name {
            return Some(path);
        }
    }
    None
}

/// The initramfs for one device's jobs: the base archive followed by a second one with
/// `/jobs.fio` and `/devices` (Linux unpacks concatenated archives in turn).
pub fn initramfs_with_jobs(
    base: &Path,
    jobs: &[Job],
    window: &Window,
    out: &Path,
) -> Result<(), CompareError> {
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    fs::copy(base, out).map_err(io_error(out))?;
    let file = fs::OpenOptions::new().append(true).open(out).map_err(io_error(out))?;
    let mut writer = CpioWriter::new(BufWriter::new(file));
    let devices: Vec<&str> = jobs.iter().map(|job| job.device.linux_path()).collect();
    let written = writer
        .add_file("jobs.fio", 0o644, table::fio_job_file(jobs, window).as_bytes())
        .and_then(|_| writer.add_file("devices", 0o644, format!("{}\n", devices.join(" ")).as_bytes()));
    written.map_err(io_error(out))?;
    writer.finish().and_then(|mut out| out.flush()).map_err(io_error(out))
}

/// How both sides are run.
#[derive(Debug, Clone)]
pub struct Comparison {
    pub devices: Vec<DeviceKind>,
    pub window: Window,
    /// Size and content of each emulated drive (`512M:pattern`).
    pub disk: DiskSpec,
    /// `-icount shift=0` on both sides.
    pub icount: bool,
    pub barebench_kernel: PathBuf,
    pub workdir: PathBuf,
    pub timeout_s: u64,
}

/// The kernel command line Linux boots with: the console on the PL011, quiet, `/init` from the
/// initramfs.
pub const LINUX_APPEND: &str = "console=ttyAMA0 loglevel=1 rdinit=/init panic=-1";

impl Comparison {
    /// The QEMU run shared by both sides for `device`: machine, CPU, memory, `-icount` and drive.
    pub fn qemu_run(&self, device: DeviceKind) -> QemuRun {
        let mut run = QemuRun::new(Machine::Virt);
        run.workdir = self.workdir.clone();
        run.icount = self.icount;
        run.timeout = Some(std::time::Duration::from_secs(self.timeout_s));
        let disk = Some(self.disk.clone());
        match device {
            DeviceKind::Nvme => run.nvme = disk,
            DeviceKind::Sd => run.sd = disk,
            DeviceKind::Usb => run.usb = disk,
        }
        run
    }

    /// Runs both sides on every device and returns the rows. The sides take turns, one boot
    /// each per run (Linux, barebench, Linux, …), so that a shared host's load, which moves over
    /// minutes, falls on both alike.
    pub fn run(&self, linux: &LinuxSystem, status: &mut dyn FnMut(&str)) -> Result<Vec<Row>, CompareError> {
        let mut rows = Vec::new();
        let one_run = Window { runs: 1, ..self.window.clone() };
        for &device in &self.devices {
            let jobs: Vec<Job> = table::JOBS.iter().copied().filter(|job| job.device == device).collect();
            let (mut linux_reports, mut barebench_reports) = (Vec::new(), Vec::new());
            for run in 1..=self.window.runs {
                let label = device.label();
                status(&format!("{label}: Linux + fio, run {run} of {}", self.window.runs));
                let boot_plan = BootPlan { device, jobs: &jobs, window: &one_run, run_number: run };
                linux_reports.push(self.run_linux(linux, &boot_plan)?);
                status(&format!("{label}: barebench, run {run} of {}", self.window.runs));
                barebench_reports.push(self.run_barebench(&boot_plan)?);
            }
            let (linux_report, barebench_report) = (merged(linux_reports), merged(barebench_reports));
            for job in jobs {
                rows.push(Row {
                    job,
                    linux: table::figures(&linux_report, &job),
                    barebench: table::figures(&barebench_report, &job),
                });
            }
        }
        Ok(rows)
    }

    fn run_linux(&self, linux: &LinuxSystem, boot_plan: &BootPlan) -> Result<FioReport, CompareError> {
        let name = boot_plan.device.barebench_name();
        let initrd = self.workdir.join(format!("compare-linux-{name}.cpio"));
        initramfs_with_jobs(&linux.initramfs, boot_plan.jobs, boot_plan.window, &initrd)?;
        let mut run = self.boot_run(boot_plan, "linux");
        run.kernel = linux.kernel.clone();
        run.initrd = Some(initrd);
        run.append = LINUX_APPEND.to_string();
        boot(run, "Linux + fio", boot_plan.device, linux_fio_json)
    }

    fn run_barebench(&self, boot_plan: &BootPlan) -> Result<FioReport, CompareError> {
        let mut run = self.boot_run(boot_plan, "barebench");
        run.kernel = self.barebench_kernel.clone();
        run.append = table::barebench_settings(boot_plan.jobs, boot_plan.window);
        boot(run, "barebench", boot_plan.device, |log| {
            extract_json_from_log(log).map_err(|error| error.to_string())
        })
    }

    /// [`Self::qemu_run`] with the boot's own serial log, `compare-linux-DEVICE-SIDE-runN.log`.
    fn boot_run(&self, boot_plan: &BootPlan, side: &str) -> QemuRun {
        let mut run = self.qemu_run(boot_plan.device);
        let (name, number) = (boot_plan.device.barebench_name(), boot_plan.run_number);
        run.log_path = self.workdir.join(format!("compare-linux-{name}-{side}-run{number}.log"));
        run
    }
}

/// One boot of either side: the device, its jobs, the window and which run it is.
struct BootPlan<'a> {
    device: DeviceKind,
    jobs: &'a [Job],
    window: &'a Window,
    run_number: u32,
}

/// One report with the jobs of all `reports` (the first one's global options).
fn merged(reports: Vec<FioReport>) -> FioReport {
    let mut reports = reports.into_iter();
    let mut first = reports.next().unwrap_or_default();
    for report in reports {
        first.jobs.extend(report.jobs);
    }
    first
}

/// Boots `run` and reads the fio JSON that `json_in_log` finds in its console.
fn boot(
    run: QemuRun,
    side: &'static str,
    device: DeviceKind,
    json_in_log: impl Fn(&str) -> Result<String, String>,
) -> Result<FioReport, CompareError> {
    let outcome = run.run(&mut io::sink())?;
    let problem = |problem: String| CompareError::Run {
        side,
        device: device.label(),
        problem,
        log: outcome.log_path.clone(),
    };
    let json = json_in_log(&outcome.log_text).map_err(problem)?;
    parse_fio_json(&json).map_err(|error| problem(error.to_string()))
}

/// fio's JSON from the Linux console: the text between the marker lines `/init` prints, or why
/// there is none (fio's exit status and what it printed on stderr).
pub fn linux_fio_json(log: &str) -> Result<String, String> {
    let log = log.replace('\r', "");
    let exit_line = log.lines().find(|line| line.starts_with(FIO_EXIT)).map(str::to_string);
    let Some(begin) = log.find(JSON_BEGIN) else {
        let tail: String =
            log.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
        return Err(format!("no fio results on the console; its last lines:\n{tail}"));
    };
    let body = &log[begin + JSON_BEGIN.len()..];
    let Some(end) = body.find(JSON_END) else {
        return Err("the fio results on the console stop before their end line".to_string());
    };
    let json = body[..end].trim();
    if json.is_empty() {
        let between =
            exit_line.map(|line| log[log.find(&line).unwrap_or(0)..begin].to_string()).unwrap_or_default();
        return Err(format!("fio printed no JSON: {}", between.trim()));
    }
    Ok(json.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_between_the_markers_is_taken_and_an_empty_run_says_why() {
        let log = format!(
            "[    1.0] booting\r\n{FIO_EXIT} 0\r\n{JSON_BEGIN}\r\n{{\"fio version\": \"fio-3.33\"}}\r\n{JSON_END}\r\n[ 9.0] reboot: Power down\r\n"
        );
        assert_eq!(linux_fio_json(&log).unwrap(), "{\"fio version\": \"fio-3.33\"}");
        let failed = format!("{FIO_EXIT} 1\nfio: failed to open /dev/mmcblk0\n{JSON_BEGIN}\n{JSON_END}\n");
        let error = linux_fio_json(&failed).unwrap_err();
        assert!(error.contains("failed to open /dev/mmcblk0"), "{error}");
        let error = linux_fio_json("Kernel panic - not syncing\n").unwrap_err();
        assert!(error.contains("Kernel panic"), "{error}");
    }

    #[test]
    fn both_sides_share_every_qemu_option_but_kernel_initrd_and_append() {
        let comparison = Comparison {
            devices: vec![DeviceKind::Sd],
            window: Window { ramp_ms: 100, runtime_ms: 200, runs: 1, offset_bytes: 0, size_bytes: 1 << 20 },
            disk: "64M:pattern".parse().unwrap(),
            icount: true,
            barebench_kernel: PathBuf::from("build/kernel-virt.img"),
            workdir: PathBuf::from("build"),
            timeout_s: 60,
        };
        let mut barebench = comparison.qemu_run(DeviceKind::Sd);
        barebench.append = "jobs=randread:4k:1".into();
        let mut linux = comparison.qemu_run(DeviceKind::Sd);
        linux.kernel = PathBuf::from("Image");
        linux.initrd = Some(PathBuf::from("initrd.cpio"));
        linux.append = LINUX_APPEND.into();
        let args = |run: &QemuRun| -> Vec<String> {
            let disks = run.plan_disks().unwrap();
            let mut args: Vec<String> =
                run.command_args(&disks).iter().map(|a| a.to_string_lossy().into_owned()).collect();
            for flag in ["-append", "-kernel", "-initrd"] {
                if let Some(at) = args.iter().position(|arg| arg == flag) {
                    args.drain(at..at + 2);
                }
            }
            args
        };
        let barebench_args = args(&barebench);
        assert_eq!(barebench_args, args(&linux));
        assert!(barebench_args.windows(2).any(|pair| pair == ["-icount", "shift=0"]), "{barebench_args:?}");
        assert!(barebench_args.iter().any(|arg| arg.starts_with("sdhci-pci")), "{barebench_args:?}");
    }

    #[test]
    fn a_new_init_or_new_pins_build_a_new_system() {
        let name = system_name("pins", "init");
        assert!(name.starts_with("system-") && name.len() == "system-".len() + 12, "{name}");
        assert_ne!(name, system_name("pins", "init changed"));
        assert_ne!(name, system_name("pins changed", "init"));
        assert_eq!(name, system_name("pins", "init"));
    }

    #[test]
    fn a_new_system_replaces_the_old_ones_and_keeps_the_downloads() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["debs", "system-old", "system-new"] {
            fs::create_dir(root.path().join(dir)).unwrap();
        }
        remove_other_systems(root.path(), &root.path().join("system-new"));
        let mut left: Vec<String> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["debs", "system-new"]);
    }

    #[test]
    fn the_runs_of_separate_boots_are_one_report_for_the_medians() {
        let report = |iops: f64| FioReport {
            fio_version: "fio-3.33".into(),
            jobs: vec![bench::fio_json::FioJob {
                read: bench::fio_json::FioDirection { iops, ..Default::default() },
                ..Default::default()
            }],
            ..Default::default()
        };
        let merged = merged(vec![report(1.0), report(2.0), report(3.0)]);
        assert_eq!(merged.jobs.iter().map(|job| job.read.iops).collect::<Vec<_>>(), [1.0, 2.0, 3.0]);
        assert_eq!(merged.fio_version, "fio-3.33");
    }

    #[test]
    fn the_jobs_archive_follows_the_base_archive() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.cpio");
        let mut writer = CpioWriter::new(Vec::new());
        writer.add_file("init", 0o755, b"#!/bin/busybox sh\n").unwrap();
        let base_bytes = writer.finish().unwrap();
        fs::write(&base, &base_bytes).unwrap();
        let out = dir.path().join("workdir-not-made-yet/with-jobs.cpio");
        let window = Window { ramp_ms: 100, runtime_ms: 200, runs: 1, offset_bytes: 0, size_bytes: 1 << 20 };
        initramfs_with_jobs(&base, &table::JOBS[..2], &window, &out).unwrap();
        let bytes = fs::read(&out).unwrap();
        assert_eq!(&bytes[..base_bytes.len()], &base_bytes[..]);
        let rest = String::from_utf8_lossy(&bytes[base_bytes.len()..]);
        assert!(
            rest.starts_with("070701") && rest.contains("jobs.fio") && rest.contains("/dev/nvme0n1\n"),
            "{rest}"
        );
        assert_eq!(bytes.len() % 512, 0);
    }
}
