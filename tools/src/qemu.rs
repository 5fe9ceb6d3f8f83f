//! Runs the barebench kernel under QEMU (`raspi3b`, `raspi4b`, `virt`; the 32-bit `raspi0`,
//! `raspi1ap` and `raspi2b` with `qemu-system-arm`) with emulated SD/EMMC2/NVMe disks and USB
//! drives, captures the serial console and passes the exit status on (docs/qemu.md §0 command
//! lines, §2 SD placement, §3 NVMe on virt, §4 semihosting exits; docs/aarch32-pis.md §3 for the
//! 32-bit machines; docs/usb-storage.md §8 for `qemu-xhci` with `usb-storage` and `usb-uas`).

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use bench::units::ByteSize;

use crate::disk::{DiskContent, DiskError, DiskSpec, DiskWrites};
use crate::qemu_faults::{self, Fault};

/// The machine `barebench qemu` runs when none is named: the one `make qemu` uses, the only one
/// with NVMe.
pub const DEFAULT_MACHINE: Machine = Machine::Virt;
/// The virt CPU when none is named (virt needs one: its default is 32-bit): the Pi 4's core, as
/// QEMU's raspi4b has it (docs/qemu.md §1), and what the end-to-end tests run.
pub const DEFAULT_VIRT_CPU: &str = "cortex-a72";
/// virt RAM when none is named (raspi RAM sizes are fixed by QEMU).
pub const DEFAULT_VIRT_MEMORY: &str = "1G";
/// The NVMe drive's `aio=` backend where the host allows it: the lowest, steadiest completion
/// latency (docs/qemu.md §3).
pub const PREFERRED_NVME_AIO: &str = "io_uring";
/// The backend where io_uring is not available (QEMU's default thread pool).
pub const FALLBACK_NVME_AIO: &str = "threads";

/// The QEMU machines barebench runs on (docs/qemu.md §1 table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Machine {
    /// Raspberry Pi Zero: BCM2835, ARM1176 (qemu-system-arm).
    Raspi0,
    /// Raspberry Pi 1 A+: BCM2835, ARM1176 (qemu-system-arm).
    Raspi1ap,
    /// Raspberry Pi 2 B v1.1: BCM2836, Cortex-A7 (qemu-system-arm).
    Raspi2b,
    /// Raspberry Pi 3B: BCM2837, Arasan SDHCI gets the `-drive if=sd` card.
    Raspi3b,
    /// Raspberry Pi 4B: BCM2711, SD on the Arasan SDHCI, optional card on EMMC2.
    Raspi4b,
    /// Generic `virt` board: sdhci-pci and NVMe on the ECAM PCIe host.
    Virt,
}

impl Machine {
    /// The `-M` value.
    pub fn qemu_name(self) -> &'static str {
        match self {
            Machine::Raspi0 => "raspi0",
            Machine::Raspi1ap => "raspi1ap",
            Machine::Raspi2b => "raspi2b",
            Machine::Raspi3b => "raspi3b",
            Machine::Raspi4b => "raspi4b",
            Machine::Virt => "virt",
        }
    }

    /// The kernel image `make` builds for this machine.
    pub fn default_kernel(self) -> PathBuf {
        match self {
            Machine::Raspi0 | Machine::Raspi1ap => PathBuf::from("build/kernel.img"),
            Machine::Raspi2b => PathBuf::from("build/kernel7.img"),
            Machine::Raspi3b | Machine::Raspi4b => PathBuf::from("build/kernel8.img"),
            Machine::Virt => PathBuf::from("build/kernel-virt.img"),
        }
    }

    /// The QEMU binary: `qemu-system-arm` for the 32-bit Pis (`qemu-system-aarch64` has no
    /// raspi0/raspi1ap/raspi2b), `qemu-system-aarch64` otherwise.
    pub fn qemu_binary(self) -> PathBuf {
        match self {
            Machine::Raspi0 | Machine::Raspi1ap | Machine::Raspi2b => PathBuf::from("qemu-system-arm"),
            _ => PathBuf::from("qemu-system-aarch64"),
        }
    }

    /// Physical address of the first PL011 (docs/qemu.md §1 "UARTs").
    pub fn pl011_address(self) -> u32 {
        match self {
            Machine::Raspi0 | Machine::Raspi1ap => 0x2020_1000,
            Machine::Raspi2b => 0x3F20_1000,
            Machine::Raspi3b => 0x3F20_1000,
            Machine::Raspi4b => 0xFE20_1000,
            Machine::Virt => 0x0900_0000,
        }
    }
}

/// Errors from preparing or running QEMU.
#[derive(Debug, thiserror::Error)]
pub enum QemuError {
    #[error("kernel image {path} not found: run `make` to build it (or pass --kernel PATH)")]
    KernelMissing { path: PathBuf },
    #[error("{device} is not available on {machine}: {reason}")]
    DeviceNotOnMachine { device: &'static str, machine: &'static str, reason: &'static str },
    #[error("--boot-card goes in the {slot} slot, which --{slot} also names: give one of them")]
    SlotTaken { slot: &'static str },
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("cannot start {binary}: {source} (tools/scripts/deps.sh installs qemu-system-aarch64 >= 9.0)")]
    Spawn { binary: PathBuf, source: io::Error },
    #[error("cannot write the serial log {path}: {source}")]
    Log { path: PathBuf, source: io::Error },
    #[error("waiting for QEMU failed: {source}")]
    Wait { source: io::Error },
    #[error("QEMU did not finish within {timeout_s} s and was killed; serial log so far in {}", log_path.display())]
    TimedOut { timeout_s: u64, log_path: PathBuf, log_text: String },
}

/// The `aio=` backend of the NVMe drive on this host, and why it is not the preferred one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeAio {
    pub backend: &'static str,
    /// Why io_uring cannot be used here (`None` when it is the backend).
    pub fallback_reason: Option<String>,
}

impl NvmeAio {
    /// io_uring when `probe` (creating an io_uring instance) succeeded, else the thread pool with
    /// the reason.
    pub fn choose(probe: io::Result<()>) -> NvmeAio {
        match probe {
            Ok(()) => NvmeAio { backend: PREFERRED_NVME_AIO, fallback_reason: None },
            Err(error) => NvmeAio { backend: FALLBACK_NVME_AIO, fallback_reason: Some(error.to_string()) },
        }
    }

    /// The message for a run that falls back, naming the cause and the cost (docs/qemu.md §7).
    pub fn note(&self) -> Option<String> {
        self.fallback_reason.as_ref().map(|reason| {
            format!(
                "io_uring is not available here (io_uring_setup: {reason}; container runtimes' default \
                 seccomp profiles refuse it); the NVMe drive uses aio={}, whose completions are slower \
                 and noisier (docs/qemu.md §3, §7)",
                self.backend
            )
        })
    }
}

/// The NVMe backend for this host, probed once per process.
pub fn host_nvme_aio() -> &'static NvmeAio {
    static CHOICE: OnceLock<NvmeAio> = OnceLock::new();
    CHOICE.get_or_init(|| NvmeAio::choose(probe_io_uring()))
}

/// Creates and closes a one-entry io_uring instance: the system call QEMU's `aio=io_uring` needs
/// first, and the one a seccomp profile or `kernel.io_uring_disabled` refuses (io_uring_setup(2)).
fn probe_io_uring() -> io::Result<()> {
    // `struct io_uring_params` (include/uapi/linux/io_uring.h): 120 bytes, all zero on input.
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup reads and writes one `struct io_uring_params`, which `params` holds
    // (120 bytes, 8-byte aligned); it touches no other memory of this process.
    let descriptor = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if descriptor < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `descriptor` was just returned by io_uring_setup and is owned by nothing else.
    unsafe { libc::close(descriptor as libc::c_int) };
    Ok(())
}

/// The result of a QEMU run that ended by itself.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// QEMU's exit status; with semihosting it is the kernel's exit code (docs/qemu.md §4).
    pub exit_status: ExitStatus,
    /// Where the serial console was saved.
    pub log_path: PathBuf,
    /// The serial console text (invalid UTF-8 replaced).
    pub log_text: String,
    /// What QEMU printed on its own stderr (its error messages).
    pub qemu_stderr: String,
    /// Wall-clock time from start to exit.
    pub elapsed: Duration,
}

impl Outcome {
    /// The exit code, or 128 + signal number when QEMU was killed by a signal (shell habit).
    pub fn exit_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        match (self.exit_status.code(), self.exit_status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 1,
        }
    }
}

/// Which emulated disk a [`PlannedDisk`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskRole {
    Sd,
    Emmc2,
    Nvme,
    /// A Bulk-Only USB drive (`usb-storage` on `qemu-xhci`).
    UsbBot,
    /// A UAS USB drive (`usb-uas` with a `scsi-hd` on `qemu-xhci`).
    UsbUas,
}

impl DiskRole {
    fn name(self) -> &'static str {
        match self {
            DiskRole::Sd => "sd",
            DiskRole::Emmc2 => "emmc2",
            DiskRole::Nvme => "nvme",
            DiskRole::UsbBot => "usb",
            DiskRole::UsbUas => "uas",
        }
    }
}

/// An emulated disk as it will be given to QEMU: final spec, image path and any size change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedDisk {
    pub role: DiskRole,
    pub spec: DiskSpec,
    pub image_path: PathBuf,
    /// The size asked for, when it was rounded up to a power of two.
    pub requested_size_bytes: Option<u64>,
    /// The image exists already and is the disk itself (a boot card): nothing is created.
    pub use_as_is: bool,
}

/// One QEMU run: machine, kernel, command line, disks and capture settings.
#[derive(Debug, Clone)]
pub struct QemuRun {
    pub machine: Machine,
    pub kernel: PathBuf,
    /// Benchmark settings for the kernel command line (`-append`); `exit=semihosting` is added
    /// unless an `exit=` setting is present.
    pub append: String,
    /// Card on the SD controller (raspi: Arasan SDHCI via `-drive if=sd`; virt: sdhci-pci).
    pub sd: Option<DiskSpec>,
    /// Card on the raspi4b EMMC2 controller.
    pub emmc2: Option<DiskSpec>,
    /// NVMe namespace (virt only: raspi machines have no PCIe, docs/qemu.md §3 / docs/ecosystem.md §3.4).
    pub nvme: Option<DiskSpec>,
    /// Extra `nvme` device properties, e.g. `mdts=9`.
    pub nvme_options: Vec<String>,
    /// `aio=` of the NVMe drive (docs/qemu.md §3: io_uring gives the lowest, steadiest latency;
    /// [`host_nvme_aio`] picks it where the host allows).
    pub nvme_aio: String,
    /// USB drive on the Bulk-Only transport (virt only: `qemu-xhci` + `usb-storage`).
    pub usb: Option<DiskSpec>,
    /// USB drive on UAS (virt only: `qemu-xhci` + `usb-uas` + `scsi-hd`).
    pub uas: Option<DiskSpec>,
    /// Printed when the run has an NVMe drive: why `nvme_aio` is not io_uring.
    pub nvme_aio_note: Option<String>,
    /// CPU model for virt (mandatory there: the default is 32-bit).
    pub virt_cpu: String,
    /// RAM for virt (raspi RAM sizes are fixed by QEMU).
    pub virt_memory: String,
    /// Arguments passed to QEMU unchanged, after the generated ones.
    pub extra_args: Vec<String>,
    /// Where disk images are created.
    pub workdir: PathBuf,
    /// Where the serial console is saved.
    pub log_path: PathBuf,
    /// Kill QEMU after this long.
    pub timeout: Option<Duration>,
    /// `-icount shift=0`: exact instruction counting (QEMU implements the PMU's INST_RETIRED
    /// event only in this mode; docs/qemu.md §5).
    pub icount: bool,
    pub qemu_binary: PathBuf,
    /// Show a progress bar while pattern images are written.
    pub show_progress: bool,
    /// Faults injected into the emulated devices (`--fault`).
    pub faults: Vec<Fault>,
    /// A card image that is the machine's boot card, used in place as a real card is: in the SD
    /// slot, or on a raspi4b in EMMC2, the Pi 4's card slot (crate::qemu_boot_card).
    pub boot_card: Option<PathBuf>,
    /// An initramfs for a Linux `kernel` (`barebench compare-linux`, docs/linux-compare.md): given
    /// as `-initrd`, and `append` goes to Linux as it is, without barebench's `exit=` setting.
    pub initrd: Option<PathBuf>,
}

impl QemuRun {
    /// A run with the defaults: `make`'s kernel image, no disks, log in build/qemu-<machine>.log,
    /// the NVMe backend this host allows.
    pub fn new(machine: Machine) -> Self {
        let aio = host_nvme_aio();
        QemuRun {
            machine,
            kernel: machine.default_kernel(),
            append: String::new(),
            sd: None,
            emmc2: None,
            nvme: None,
            nvme_options: Vec::new(),
            nvme_aio: aio.backend.to_string(),
            nvme_aio_note: aio.note(),
            usb: None,
            uas: None,
            virt_cpu: DEFAULT_VIRT_CPU.to_string(),
            virt_memory: DEFAULT_VIRT_MEMORY.to_string(),
            extra_args: Vec::new(),
            workdir: PathBuf::from("build"),
            log_path: PathBuf::from(format!("build/qemu-{}.log", machine.qemu_name())),
            timeout: None,
            icount: false,
            qemu_binary: machine.qemu_binary(),
            show_progress: false,
            faults: Vec::new(),
            boot_card: None,
            initrd: None,
        }
    }

    /// The monitor socket `nvme-gone` removes the device through.
    pub fn monitor_socket_path(&self) -> PathBuf {
        self.workdir.join(format!("qemu-monitor-{}.sock", std::process::id()))
    }

    /// Where the `nvme-media` fault's blkdebug rules are written.
    pub fn blkdebug_config_path(&self) -> PathBuf {
        self.workdir.join("blkdebug-nvme-media.conf")
    }

    /// The kernel command line actually passed: the settings plus `exit=semihosting` unless an
    /// `exit=` setting is already there.
    pub fn effective_append(&self) -> String {
        let has_exit = self.append.split_whitespace().any(|token| token.starts_with("exit="));
        let mut append = self.append.split_whitespace().collect::<Vec<_>>().join(" ");
        let added_by_faults: Vec<&str> =
            self.faults.iter().filter_map(|fault| fault.setting(&append)).collect();
        for setting in (!has_exit).then_some("exit=semihosting").into_iter().chain(added_by_faults) {
            if !append.is_empty() {
                append.push(' ');
            }
            append.push_str(setting);
        }
        append
    }

    /// Checks the disks against the machine and decides image paths and sizes (SD and EMMC2
    /// sizes rounded up to a power of two, docs/qemu.md §2 "Card model").
    pub fn plan_disks(&self) -> Result<Vec<PlannedDisk>, QemuError> {
        let machine = self.machine.qemu_name();
        if self.nvme.is_some() && self.machine != Machine::Virt {
            return Err(QemuError::DeviceNotOnMachine {
                device: "NVMe",
                machine,
                reason: "QEMU's raspi machines have no PCIe (use --machine virt)",
            });
        }
        if self.faults.iter().any(|fault| fault.needs_nvme()) && self.nvme.is_none() {
            return Err(QemuError::DeviceNotOnMachine {
                device: "an NVMe fault",
                machine,
                reason: "the nvme faults need an NVMe drive (--nvme SIZE)",
            });
        }
        if self.faults.contains(&Fault::SdEject) && (self.sd.is_none() || self.machine != Machine::Virt) {
            return Err(QemuError::DeviceNotOnMachine {
                device: "the sd-eject fault",
                machine,
                reason: "sd-eject needs an SD card on virt (--machine virt --sd SIZE)",
            });
        }
        if (self.usb.is_some() || self.uas.is_some()) && self.machine != Machine::Virt {
            return Err(QemuError::DeviceNotOnMachine {
                device: "USB drive",
                machine,
                reason: "QEMU's raspi machines have no PCIe for an xHCI (use --machine virt)",
            });
        }
        if self.emmc2.is_some() && self.machine != Machine::Raspi4b {
            return Err(QemuError::DeviceNotOnMachine {
                device: "EMMC2",
                machine,
                reason: "only the BCM2711 (raspi4b) has an EMMC2 controller",
            });
        }
        let mut planned = Vec::new();
        let disks = [
            (DiskRole::Sd, &self.sd),
            (DiskRole::Emmc2, &self.emmc2),
            (DiskRole::Nvme, &self.nvme),
            (DiskRole::UsbBot, &self.usb),
            (DiskRole::UsbUas, &self.uas),
        ];
        for (role, spec) in disks {
            let Some(spec) = spec else { continue };
            let (spec, requested_size_bytes) = match role {
                DiskRole::Sd | DiskRole::Emmc2 => match spec.rounded_to_power_of_two() {
                    Some(rounded) => (rounded, Some(spec.size_bytes)),
                    None => (spec.clone(), None),
                },
                DiskRole::Nvme | DiskRole::UsbBot | DiskRole::UsbUas => (spec.clone(), None),
            };
            let content_name = match &spec.content {
                DiskContent::Pattern => "pattern",
                DiskContent::PatternPartition => "pattern-partition",
                DiskContent::Zeros => "zeros",
                DiskContent::File(_) => "file",
            };
            let size_name = ByteSize(spec.size_bytes).to_string().replace(' ', "");
            let writes_name = match spec.writes {
                DiskWrites::Discarded => String::new(),
                DiskWrites::Scratch { region_bytes } => {
                    format!("-scratch{}", ByteSize(region_bytes).to_string().replace(' ', ""))
                }
                DiskWrites::InPlace => String::from("-writable"),
            };
            let image_path = self
                .workdir
                .join(format!("disk-{}-{size_name}-{content_name}{writes_name}.img", role.name()));
            planned.push(PlannedDisk { role, spec, image_path, requested_size_bytes, use_as_is: false });
        }
        if let Some(card) = &self.boot_card {
            planned.push(self.plan_boot_card(card)?);
        }
        Ok(planned)
    }

    /// The boot card as a disk: in EMMC2 on a raspi4b (the Pi 4's card slot), else in the SD
    /// slot; its own size, written in place.
    fn plan_boot_card(&self, card: &Path) -> Result<PlannedDisk, QemuError> {
        let (role, taken) = match self.machine {
            Machine::Raspi4b => (DiskRole::Emmc2, self.emmc2.is_some()),
            _ => (DiskRole::Sd, self.sd.is_some()),
        };
        if taken {
            return Err(QemuError::SlotTaken { slot: role.name() });
        }
        let size_bytes = fs::metadata(card)
            .map_err(|source| DiskError::ContentFile { path: card.to_path_buf(), source })?
            .len();
        let spec = DiskSpec {
            size_bytes,
            content: DiskContent::File(card.to_path_buf()),
            writes: DiskWrites::InPlace,
        };
        Ok(PlannedDisk {
            role,
            spec,
            image_path: card.to_path_buf(),
            requested_size_bytes: None,
            use_as_is: true,
        })
    }

    /// What the user should know about these disks before the run: sizes rounded up, and an NVMe
    /// drive without io_uring.
    pub fn notes(&self, disks: &[PlannedDisk]) -> Vec<String> {
        let mut notes = Vec::new();
        for disk in disks {
            if let Some(requested) = disk.requested_size_bytes {
                notes.push(format!(
                    "{} size {} is not a power of two (QEMU refuses such SD cards); using {}",
                    disk.role.name(),
                    ByteSize(requested),
                    ByteSize(disk.spec.size_bytes)
                ));
            }
            if disk.spec.writes != DiskWrites::Discarded {
                notes.push(format!(
                    "{} image {} is written in place (no snapshot): write jobs with write= change it",
                    disk.role.name(),
                    disk.image_path.display()
                ));
            }
            if let (DiskRole::Nvme, Some(note)) = (disk.role, &self.nvme_aio_note) {
                notes.push(note.clone());
            }
        }
        notes.extend(self.faults.iter().map(|fault| fault.note()));
        notes
    }

    /// The QEMU arguments for this run and these disks (docs/qemu.md §0).
    pub fn command_args(&self, disks: &[PlannedDisk]) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |arg: &str| args.push(OsString::from(arg));
        push("-M");
        push(self.machine.qemu_name());
        if self.machine == Machine::Virt {
            push("-cpu");
            push(&self.virt_cpu);
            push("-m");
            push(&self.virt_memory);
            // virt adds a virtio-net NIC at 00:01.0 otherwise (docs/qemu.md §3 memory map).
            push("-nic");
            push("none");
        }
        push("-display");
        push("none");
        push("-monitor");
        if self.mid_run_faults().next().is_some() {
            push(&format!("unix:{},server,nowait", self.monitor_socket_path().display()));
        } else {
            push("none");
        }
        push("-serial");
        push("stdio");
        push("-semihosting");
        if self.icount {
            push("-icount");
            push("shift=0");
        }
        push("-append");
        match self.initrd {
            Some(_) => push(&self.append),
            None => push(&self.effective_append()),
        }
        let mut args_with_paths = args;
        args_with_paths.push("-kernel".into());
        args_with_paths.push(self.kernel.clone().into_os_string());
        if let Some(initrd) = &self.initrd {
            args_with_paths.push("-initrd".into());
            args_with_paths.push(initrd.clone().into_os_string());
        }
        if disks.iter().any(|disk| matches!(disk.role, DiskRole::UsbBot | DiskRole::UsbUas)) {
            // One xHCI for both drives: the BOT drive on root port 1, the UAS drive on port 2
            // (both USB 3 ports of qemu-xhci: docs/usb-storage.md §3).
            args_with_paths.extend(["-device".into(), "qemu-xhci,id=xhci".into()]);
        }
        for disk in disks {
            let file = disk.image_path.to_string_lossy();
            let snapshot = if disk.spec.writes == DiskWrites::Discarded { "on" } else { "off" };
            let drive = |id: &str| format!("if=none,id={id},file={file},format=raw,snapshot={snapshot}");
            let mut add = |arg: String| args_with_paths.push(arg.into());
            match (disk.role, self.machine) {
                (DiskRole::Sd, Machine::Virt) => {
                    add("-drive".into());
                    add(drive("sdc"));
                    add("-device".into());
                    add("sdhci-pci,sd-spec-version=3".into());
                    add("-device".into());
                    add("sd-card,drive=sdc".into());
                }
                (DiskRole::Sd, _) => {
                    add("-drive".into());
                    add(format!("if=sd,file={file},format=raw,snapshot={snapshot}"));
                }
                (DiskRole::Emmc2, _) => {
                    // The qdev path resolves to EMMC2, the last generic-sdhci realized (docs/qemu.md §2).
                    add("-drive".into());
                    add(drive("e2"));
                    add("-device".into());
                    add("sd-card,drive=e2,bus=/generic-sdhci/sd-bus".into());
                }
                (DiskRole::UsbBot, _) => {
                    add("-drive".into());
                    add(drive("ub"));
                    add("-device".into());
                    add("usb-storage,bus=xhci.0,port=1,drive=ub,serial=barebench-bot".into());
                }
                (DiskRole::UsbUas, _) => {
                    add("-device".into());
                    add("usb-uas,id=uas,bus=xhci.0,port=2".into());
                    add("-drive".into());
                    add(drive("uasd"));
                    add("-device".into());
                    add("scsi-hd,bus=uas.0,scsi-id=0,lun=0,drive=uasd,serial=barebench-uas".into());
                }
                (DiskRole::Nvme, _) => {
                    add("-drive".into());
                    let config = self.blkdebug_config_path();
                    add(qemu_faults::nvme_drive(
                        &self.faults,
                        &format!("{},aio={}", drive("nv"), self.nvme_aio),
                        (&file, &self.nvme_aio, disk.spec.size_bytes),
                        &config.to_string_lossy(),
                    ));
                    let mut device = "nvme,drive=nv,serial=barebench0".to_string();
                    if self.faults.contains(&Fault::NvmeGone) {
                        // In a root port of its own, as a removable drive sits in a slot.
                        add("-device".into());
                        add(qemu_faults::NVME_ROOT_PORT.into());
                        device.push_str(&format!(",id={},bus=rp1", qemu_faults::NVME_DEVICE_ID));
                    }
                    for option in &self.nvme_options {
                        device.push(',');
                        device.push_str(option);
                    }
                    add("-device".into());
                    add(device);
                }
            }
        }
        args_with_paths.extend(self.extra_args.iter().map(OsString::from));
        args_with_paths
    }

    /// Creates the disk images, runs QEMU, shows the serial console on `live` while saving it,
    /// and returns QEMU's exit status with the log.
    pub fn run(&self, live: &mut dyn Write) -> Result<Outcome, QemuError> {
        if !self.kernel.is_file() {
            return Err(QemuError::KernelMissing { path: self.kernel.clone() });
        }
        let disks = self.plan_disks()?;
        for note in self.notes(&disks) {
            eprintln!("barebench: {note}");
        }
        for disk in disks.iter().filter(|disk| !disk.use_as_is) {
            create_disk_image(disk, self.show_progress)?;
        }
        if self.faults.contains(&Fault::NvmeMedia) {
            let path = self.blkdebug_config_path();
            fs::write(&path, qemu_faults::media_error_rules())
                .map_err(|source| QemuError::Log { path: path.clone(), source })?;
        }
        let log_error = |source| QemuError::Log { path: self.log_path.clone(), source };
        if let Some(parent) = self.log_path.parent() {
            fs::create_dir_all(parent).map_err(log_error)?;
        }
        let mut log = File::create(&self.log_path).map_err(log_error)?;

        if self.mid_run_faults().next().is_some() {
            // A socket left by an earlier run would keep QEMU from listening.
            let _ = fs::remove_file(self.monitor_socket_path());
        }
        let started = Instant::now();
        let mut child = Command::new(&self.qemu_binary)
            .args(self.command_args(&disks))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| QemuError::Spawn { binary: self.qemu_binary.clone(), source })?;
        let serial_chunks = spawn_pipe_reader(child.stdout.take());
        let stderr_chunks = spawn_pipe_reader(child.stderr.take());

        let mut log_bytes = Vec::new();
        let mut stderr_bytes = Vec::new();
        // Every chunk goes to the log at once (flushed, so an interrupted run keeps it) and to
        // the live view (best effort: a closed terminal must not stop the capture).
        let mut record = |chunk: Vec<u8>, log_bytes: &mut Vec<u8>| -> Result<(), QemuError> {
            log.write_all(&chunk).and_then(|_| log.flush()).map_err(log_error)?;
            let _ = live.write_all(&chunk).and_then(|_| live.flush());
            log_bytes.extend_from_slice(&chunk);
            Ok(())
        };
        let deadline = self.timeout.map(|timeout| started + timeout);
        let mut removals: Vec<(Fault, qemu_faults::RemovalTimer)> = self
            .mid_run_faults()
            .map(|(fault, _, after)| (fault, qemu_faults::RemovalTimer::new(after)))
            .collect();
        let mut serial_open = true;
        let mut exited: Option<(ExitStatus, Instant)> = None;
        let exit_status = loop {
            if serial_open {
                match serial_chunks.recv_timeout(POLL_INTERVAL) {
                    Ok(chunk) => record(chunk, &mut log_bytes)?,
                    Err(mpsc::RecvTimeoutError::Disconnected) => serial_open = false,
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
            } else {
                thread::sleep(POLL_INTERVAL);
            }
            stderr_bytes.extend(stderr_chunks.try_iter().flatten());
            for (fault, timer) in &mut removals {
                if timer.due(&log_bytes, Instant::now()) {
                    self.send_mid_run_fault(*fault, started);
                }
            }
            if exited.is_none() {
                let status = child.try_wait().map_err(|source| QemuError::Wait { source })?;
                exited = status.map(|status| (status, Instant::now()));
            }
            // After the exit, wait for the pipe to drain (a child of QEMU could keep it open,
            // so not for ever).
            if let Some((status, exited_at)) = exited {
                if !serial_open || exited_at.elapsed() > PIPE_DRAIN_TIMEOUT {
                    break status;
                }
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                kill_and_reap(&mut child);
                for chunk in serial_chunks.try_iter() {
                    record(chunk, &mut log_bytes)?;
                }
                stderr_bytes.extend(stderr_chunks.try_iter().flatten());
                eprint!("{}", String::from_utf8_lossy(&stderr_bytes));
                return Err(QemuError::TimedOut {
                    timeout_s: self.timeout.unwrap_or_default().as_secs(),
                    log_path: self.log_path.clone(),
                    log_text: String::from_utf8_lossy(&log_bytes).into_owned(),
                });
            }
        };
        for chunk in serial_chunks.try_iter() {
            record(chunk, &mut log_bytes)?;
        }
        stderr_bytes.extend(stderr_chunks.try_iter().flatten());
        let qemu_stderr = String::from_utf8_lossy(&stderr_bytes).into_owned();
        if !qemu_stderr.is_empty() {
            eprint!("{qemu_stderr}");
        }
        Ok(Outcome {
            exit_status,
            log_path: self.log_path.clone(),
            log_text: String::from_utf8_lossy(&log_bytes).into_owned(),
            qemu_stderr,
            elapsed: started.elapsed(),
        })
    }
}

impl QemuRun {
    /// The faults sent through the monitor mid-run: each with its command and the console text
    /// after which it is due.
    fn mid_run_faults(&self) -> impl Iterator<Item = (Fault, &'static str, &'static str)> + '_ {
        self.faults
            .iter()
            .filter_map(|&fault| fault.mid_run_command().map(|(command, after)| (fault, command, after)))
    }

    /// `nvme-gone` / `sd-eject`: sends the fault's command through the monitor socket and says so
    /// (on stderr, beside QEMU's own messages); a failure to reach the monitor is said, not fatal.
    fn send_mid_run_fault(&self, fault: Fault, started: Instant) {
        let Some((command, _)) = fault.mid_run_command() else {
            return;
        };
        let path = self.monitor_socket_path();
        let sent = std::os::unix::net::UnixStream::connect(&path)
            .and_then(|mut monitor| monitor.write_all(command.as_bytes()));
        let name = fault.name();
        match sent {
            Ok(()) => eprintln!(
                "barebench: {name}: sent {:.2} s after QEMU started ({})",
                started.elapsed().as_secs_f64(),
                command.trim_end()
            ),
            Err(error) => {
                eprintln!("barebench: {name}: cannot reach QEMU's monitor at {}: {error}", path.display())
            }
        }
    }
}

/// How often the run loop checks QEMU, the pipes and the deadline.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long the serial pipe may stay open after QEMU has exited.
const PIPE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

fn create_disk_image(disk: &PlannedDisk, show_progress: bool) -> Result<(), QemuError> {
    let bar = (show_progress
        && matches!(disk.spec.content, DiskContent::Pattern | DiskContent::PatternPartition))
    .then(|| {
        let bar = indicatif::ProgressBar::new(disk.spec.size_bytes);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{} image", disk.role.name()));
        bar
    });
    disk.spec.create_image(&disk.image_path, |done, _| {
        if let Some(bar) = &bar {
            bar.set_position(done);
        }
    })?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(())
}

fn kill_and_reap(child: &mut Child) {
    // Kill can only fail when the process is already gone, which is what we want anyway.
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a child's pipe on its own thread and hands the chunks over a channel, so that the
/// caller can wait with a timeout.
pub(crate) fn spawn_pipe_reader<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (sender, receiver) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            loop {
                match pipe.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(count) => {
                        if sender.send(buffer[..count].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    receiver
}

/// A minimal raw AArch64 kernel for tests: it writes `message` to the machine's PL011 data
/// register, then exits QEMU through semihosting SYS_EXIT with `exit_code` (docs/qemu.md §4:
/// `hlt #0xf000`, x0 = 0x18, x1 → {0x20026 ADP_Stopped_ApplicationExit, code}). Position
/// independent, so it runs at 0x80000 (raspi) and 0x40080000 (virt). Instruction encodings from
/// the Arm ARM (DDI 0487) C6.2: MOVZ/MOVK, STR (immediate), ADR, HLT, B.
pub fn semihosting_exit_kernel(machine: Machine, message: &[u8], exit_code: u32) -> Vec<u8> {
    const X0: u32 = 0;
    const X1: u32 = 1;
    const X2: u32 = 2;
    const W3: u32 = 3;
    let movz_x =
        |rd: u32, imm16: u32, shift_halfwords: u32| 0xD280_0000 | (shift_halfwords << 21) | (imm16 << 5) | rd;
    let movk_x = |rd: u32, imm16: u32| 0xF280_0000 | (imm16 << 5) | rd;
    let movz_w = |rd: u32, imm16: u32| 0x5280_0000 | (imm16 << 5) | rd;
    let str_w = |rt: u32, rn: u32| 0xB900_0000 | (rn << 5) | rt;
    let uart = machine.pl011_address();
    let mut words = vec![movz_x(X2, uart >> 16, 1), movk_x(X2, uart & 0xFFFF)];
    for byte in message {
        words.push(movz_w(W3, u32::from(*byte)));
        words.push(str_w(W3, X2));
    }
    const SYS_EXIT: u32 = 0x18;
    words.push(movz_x(X0, SYS_EXIT, 0));
    let adr_index = words.len();
    words.push(0); // ADR x1, block: filled in below once the block offset is known.
    words.push(0xD45E_0000); // HLT #0xF000
    words.push(0x1400_0000); // B . (never reached)
    if words.len() % 2 == 1 {
        words.push(0xD503_201F); // NOP, so the block is 8-byte aligned
    }
    let offset_bytes = ((words.len() - adr_index) * 4) as u32;
    words[adr_index] = 0x1000_0000 | ((offset_bytes & 3) << 29) | ((offset_bytes >> 2) << 5) | X1;
    const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x20026;
    let mut image: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
    image.extend_from_slice(&ADP_STOPPED_APPLICATION_EXIT.to_le_bytes());
    image.extend_from_slice(&u64::from(exit_code).to_le_bytes());
    image
}

/// Writes [`semihosting_exit_kernel`] to `path`.
pub fn write_semihosting_exit_kernel(
    path: &Path,
    machine: Machine,
    message: &[u8],
    exit_code: u32,
) -> io::Result<()> {
    fs::write(path, semihosting_exit_kernel(machine, message, exit_code))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_text(run: &QemuRun) -> Vec<String> {
        let disks = run.plan_disks().unwrap();
        run.command_args(&disks).iter().map(|arg| arg.to_string_lossy().into_owned()).collect()
    }

    fn follows(args: &[String], flag: &str, value: &str) -> bool {
        args.windows(2).any(|pair| pair[0] == flag && pair[1] == value)
    }

    #[test]
    fn exit_semihosting_is_added_unless_given() {
        let mut run = QemuRun::new(Machine::Raspi3b);
        assert_eq!(run.effective_append(), "exit=semihosting");
        run.append = "preset=quick  devices=sd0".to_string();
        assert_eq!(run.effective_append(), "preset=quick devices=sd0 exit=semihosting");
        run.append = "exit=halt preset=quick".to_string();
        assert_eq!(run.effective_append(), "exit=halt preset=quick");
    }

    #[test]
    fn virt_gets_cpu_memory_and_no_nic() {
        let run = QemuRun::new(Machine::Virt);
        let args = args_text(&run);
        assert!(follows(&args, "-M", "virt"));
        assert!(follows(&args, "-cpu", "cortex-a72"));
        assert!(follows(&args, "-m", "1G"));
        assert!(follows(&args, "-nic", "none"));
        assert!(follows(&args, "-kernel", "build/kernel-virt.img"));
        assert!(follows(&args, "-serial", "stdio"));
        assert!(follows(&args, "-display", "none"));
        assert!(args.contains(&"-semihosting".to_string()));
    }

    #[test]
    fn the_32_bit_pis_run_in_qemu_system_arm_with_their_image() {
        for (machine, name, kernel) in [
            (Machine::Raspi0, "raspi0", "build/kernel.img"),
            (Machine::Raspi1ap, "raspi1ap", "build/kernel.img"),
            (Machine::Raspi2b, "raspi2b", "build/kernel7.img"),
        ] {
            let mut run = QemuRun::new(machine);
            assert_eq!(run.qemu_binary, PathBuf::from("qemu-system-arm"));
            run.sd = Some("64M".parse().unwrap());
            let args = args_text(&run);
            assert!(follows(&args, "-M", name));
            assert!(follows(&args, "-kernel", kernel));
            assert!(args.iter().any(|arg| arg.starts_with("if=sd,")), "{args:?}");
            assert!(!args.contains(&"-cpu".to_string()));
        }
        assert_eq!(QemuRun::new(Machine::Raspi3b).qemu_binary, PathBuf::from("qemu-system-aarch64"));
        assert_eq!(Machine::Raspi0.pl011_address(), 0x2020_1000);
    }

    #[test]
    fn icount_asks_for_exact_instruction_counting() {
        let mut run = QemuRun::new(Machine::Raspi4b);
        assert!(!args_text(&run).contains(&"-icount".to_string()));
        run.icount = true;
        assert!(follows(&args_text(&run), "-icount", "shift=0"));
    }

    #[test]
    fn a_linux_boot_gets_its_initrd_and_its_command_line_unchanged() {
        let mut run = QemuRun::new(Machine::Virt);
        run.append = "console=ttyAMA0 quiet".to_string();
        run.initrd = Some(PathBuf::from("build/initrd.cpio"));
        let args = args_text(&run);
        assert!(follows(&args, "-append", "console=ttyAMA0 quiet"));
        assert!(follows(&args, "-initrd", "build/initrd.cpio"));
        run.initrd = None;
        assert!(follows(&args_text(&run), "-append", "console=ttyAMA0 quiet exit=semihosting"));
    }

    #[test]
    fn raspi_has_no_virt_only_options() {
        let args = args_text(&QemuRun::new(Machine::Raspi4b));
        assert!(follows(&args, "-M", "raspi4b"));
        assert!(follows(&args, "-kernel", "build/kernel8.img"));
        assert!(!args.contains(&"-cpu".to_string()));
        assert!(!args.contains(&"-m".to_string()));
    }

    #[test]
    fn raspi_sd_uses_if_sd_with_snapshot() {
        let mut run = QemuRun::new(Machine::Raspi3b);
        run.sd = Some("64M".parse().unwrap());
        let args = args_text(&run);
        assert!(follows(
            &args,
            "-drive",
            "if=sd,file=build/disk-sd-64MiB-pattern.img,format=raw,snapshot=on"
        ));
    }

    #[test]
    fn faults_reshape_the_nvme_drive_and_add_their_settings() {
        let mut run = QemuRun::new(Machine::Virt);
        run.nvme = Some("64M:pattern".parse().unwrap());
        run.nvme_aio = "io_uring".into();
        run.faults = vec![Fault::NvmeMedia];
        let args = args_text(&run);
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=nv,driver=raw,file.driver=blkdebug,file.config=build/blkdebug-nvme-media.conf,\
             file.image.filename=build/disk-nvme-64MiB-pattern.img,file.image.aio=io_uring,snapshot=on"
        ));
        assert_eq!(run.effective_append(), "exit=semihosting");
        assert!(run
            .notes(&run.plan_disks().unwrap())
            .iter()
            .any(|note| note.starts_with("fault nvme-media")));
        run.faults = vec![Fault::NvmeSlow];
        run.append = "preset=quick".into();
        assert_eq!(run.effective_append(), "preset=quick exit=semihosting nvme.timeout-ms=500");
        assert!(args_text(&run).iter().any(|arg| arg.contains("driver=null-co,size=67108864")));
        run.nvme = None;
        assert!(matches!(run.plan_disks(), Err(QemuError::DeviceNotOnMachine { .. })));
    }

    #[test]
    fn sd_sizes_are_rounded_up_to_a_power_of_two() {
        let mut run = QemuRun::new(Machine::Raspi3b);
        run.sd = Some("300M:zeros".parse().unwrap());
        let disks = run.plan_disks().unwrap();
        assert_eq!(disks[0].spec.size_bytes, 512 << 20);
        assert_eq!(disks[0].requested_size_bytes, Some(300 << 20));
        assert!(disks[0].image_path.ends_with("disk-sd-512MiB-zeros.img"));
    }

    #[test]
    fn scratch_and_writable_disks_are_written_in_place_and_say_so() {
        let mut run = QemuRun::new(Machine::Raspi4b);
        run.emmc2 = Some("64M:pattern,scratch=32M".parse().unwrap());
        run.sd = Some("64M:/tmp/x.img,writable".parse().unwrap());
        let args = args_text(&run);
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=e2,file=build/disk-emmc2-64MiB-pattern-scratch32MiB.img,format=raw,snapshot=off"
        ));
        assert!(follows(
            &args,
            "-drive",
            "if=sd,file=build/disk-sd-64MiB-file-writable.img,format=raw,snapshot=off"
        ));
        let notes = run.notes(&run.plan_disks().unwrap());
        assert!(
            notes.iter().any(|note| note
                .contains("emmc2 image build/disk-emmc2-64MiB-pattern-scratch32MiB.img is written in place")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_boot_card_is_the_card_slot_s_disk_used_as_it_is_and_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let card = dir.path().join("card.img");
        fs::write(&card, vec![0u8; 1 << 20]).unwrap();
        let mut run = QemuRun::new(Machine::Raspi4b);
        run.boot_card = Some(card.clone());
        let disks = run.plan_disks().unwrap();
        assert_eq!(disks.len(), 1);
        assert!(disks[0].use_as_is && disks[0].role == DiskRole::Emmc2 && disks[0].image_path == card);
        let args = args_text(&run);
        let drive = format!("if=none,id=e2,file={},format=raw,snapshot=off", card.display());
        assert!(follows(&args, "-drive", &drive), "{args:?}");
        let mut raspi3 = QemuRun::new(Machine::Raspi3b);
        raspi3.boot_card = Some(card.clone());
        let drive = format!("if=sd,file={},format=raw,snapshot=off", card.display());
        assert!(follows(&args_text(&raspi3), "-drive", &drive));
        raspi3.sd = Some("64M".parse().unwrap());
        assert!(matches!(raspi3.plan_disks(), Err(QemuError::SlotTaken { slot: "sd" })));
    }

    #[test]
    fn emmc2_uses_the_generic_sdhci_bus() {
        let mut run = QemuRun::new(Machine::Raspi4b);
        run.emmc2 = Some("64M:zeros".parse().unwrap());
        let args = args_text(&run);
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=e2,file=build/disk-emmc2-64MiB-zeros.img,format=raw,snapshot=on"
        ));
        assert!(follows(&args, "-device", "sd-card,drive=e2,bus=/generic-sdhci/sd-bus"));
    }

    #[test]
    fn virt_nvme_and_sd_use_pci_devices() {
        let mut run = QemuRun::new(Machine::Virt);
        run.nvme = Some("100M".parse().unwrap());
        run.nvme_options = vec!["mdts=9".to_string()];
        run.nvme_aio = PREFERRED_NVME_AIO.to_string();
        run.sd = Some("64M".parse().unwrap());
        run.extra_args = vec!["-d".to_string(), "guest_errors".to_string()];
        let args = args_text(&run);
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=nv,file=build/disk-nvme-100MiB-pattern.img,format=raw,snapshot=on,aio=io_uring"
        ));
        assert!(follows(&args, "-device", "nvme,drive=nv,serial=barebench0,mdts=9"));
        assert!(follows(&args, "-device", "sdhci-pci,sd-spec-version=3"));
        assert!(follows(&args, "-device", "sd-card,drive=sdc"));
        assert_eq!(&args[args.len() - 2..], ["-d", "guest_errors"]);
        // NVMe sizes are not rounded: only the SD card model needs a power of two.
        assert_eq!(run.plan_disks().unwrap()[1].spec.size_bytes, 100 << 20);
    }

    #[test]
    fn virt_usb_drives_share_one_xhci() {
        let mut run = QemuRun::new(Machine::Virt);
        run.usb = Some("64M".parse().unwrap());
        run.uas = Some("32M:zeros".parse().unwrap());
        let args = args_text(&run);
        assert_eq!(args.iter().filter(|a| a.starts_with("qemu-xhci")).count(), 1);
        assert!(follows(&args, "-device", "qemu-xhci,id=xhci"));
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=ub,file=build/disk-usb-64MiB-pattern.img,format=raw,snapshot=on"
        ));
        assert!(follows(&args, "-device", "usb-storage,bus=xhci.0,port=1,drive=ub,serial=barebench-bot"));
        assert!(follows(&args, "-device", "usb-uas,id=uas,bus=xhci.0,port=2"));
        assert!(follows(
            &args,
            "-drive",
            "if=none,id=uasd,file=build/disk-uas-32MiB-zeros.img,format=raw,snapshot=on"
        ));
        assert!(follows(
            &args,
            "-device",
            "scsi-hd,bus=uas.0,scsi-id=0,lun=0,drive=uasd,serial=barebench-uas"
        ));
        let only_uas = QemuRun { usb: None, ..run };
        let args = args_text(&only_uas);
        assert!(follows(&args, "-device", "qemu-xhci,id=xhci"));
        assert!(!args.iter().any(|a| a.starts_with("usb-storage")));
        let mut raspi = QemuRun::new(Machine::Raspi4b);
        raspi.uas = Some("64M".parse().unwrap());
        assert!(matches!(raspi.plan_disks(), Err(QemuError::DeviceNotOnMachine { device: "USB drive", .. })));
    }

    #[test]
    fn the_default_machine_is_virt_with_one_default_cpu() {
        assert_eq!(DEFAULT_MACHINE, Machine::Virt);
        let run = QemuRun::new(DEFAULT_MACHINE);
        assert_eq!(run.virt_cpu, "cortex-a72");
        assert_eq!(run.virt_memory, "1G");
        assert_eq!(run.kernel, PathBuf::from("build/kernel-virt.img"));
    }

    #[test]
    fn io_uring_is_preferred_and_a_refused_probe_falls_back_to_threads_with_the_reason() {
        let allowed = NvmeAio::choose(Ok(()));
        assert_eq!(allowed.backend, "io_uring");
        assert_eq!(allowed.note(), None);
        // What a container's default seccomp profile answers (EPERM).
        let refused = NvmeAio::choose(Err(io::Error::from_raw_os_error(libc::EPERM)));
        assert_eq!(refused.backend, "threads");
        let note = refused.note().unwrap();
        assert!(note.contains("io_uring_setup: Operation not permitted"), "{note}");
        assert!(note.contains("the NVMe drive uses aio=threads"), "{note}");
    }

    #[test]
    fn the_nvme_drive_uses_the_chosen_backend_and_its_note_comes_with_nvme_only() {
        let mut run = QemuRun::new(Machine::Virt);
        run.nvme_aio = FALLBACK_NVME_AIO.to_string();
        run.nvme_aio_note = NvmeAio::choose(Err(io::Error::from_raw_os_error(libc::EPERM))).note();
        run.sd = Some("64M".parse().unwrap());
        let sd_only = run.plan_disks().unwrap();
        assert!(run.notes(&sd_only).is_empty());
        run.nvme = Some("16M".parse().unwrap());
        let disks = run.plan_disks().unwrap();
        let notes = run.notes(&disks);
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("aio=threads"), "{notes:?}");
        let args: Vec<String> =
            run.command_args(&disks).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(
            args.iter().any(|arg| arg.starts_with("if=none,id=nv,") && arg.ends_with(",aio=threads")),
            "{args:?}"
        );
    }

    #[test]
    fn sd_size_notes_name_the_rounding() {
        let mut run = QemuRun::new(Machine::Raspi3b);
        run.sd = Some("300M:zeros".parse().unwrap());
        let notes = run.notes(&run.plan_disks().unwrap());
        assert_eq!(
            notes,
            ["sd size 300 MiB is not a power of two (QEMU refuses such SD cards); using 512 MiB"]
        );
    }

    #[test]
    fn devices_missing_on_a_machine_are_refused() {
        let mut run = QemuRun::new(Machine::Raspi4b);
        run.nvme = Some("64M".parse().unwrap());
        assert!(matches!(run.plan_disks(), Err(QemuError::DeviceNotOnMachine { device: "NVMe", .. })));
        let mut run = QemuRun::new(Machine::Raspi3b);
        run.emmc2 = Some("64M".parse().unwrap());
        assert!(matches!(run.plan_disks(), Err(QemuError::DeviceNotOnMachine { device: "EMMC2", .. })));
    }

    #[test]
    fn a_missing_kernel_says_to_run_make() {
        let mut run = QemuRun::new(Machine::Raspi3b);
        run.kernel = PathBuf::from("/nonexistent/kernel8.img");
        let error = run.run(&mut io::sink()).unwrap_err();
        assert!(error.to_string().contains("run `make`"), "{error}");
    }

    #[test]
    fn exit_kernel_encodes_the_semihosting_call() {
        let image = semihosting_exit_kernel(Machine::Raspi3b, b"", 7);
        let words: Vec<u32> =
            image.chunks(4).map(|bytes| u32::from_le_bytes(bytes.try_into().unwrap())).collect();
        // movz x2,#0x3f20,lsl#16; movk x2,#0x1000; movz x0,#0x18; adr x1,+12; hlt #0xf000; b .
        let expected = [0xD2A7_E402, 0xF282_0002, 0xD280_0300, 0x1000_0061, 0xD45E_0000, 0x1400_0000];
        assert_eq!(&words[..6], &expected);
        assert_eq!(u64::from_le_bytes(image[24..32].try_into().unwrap()), 0x20026);
        assert_eq!(u64::from_le_bytes(image[32..40].try_into().unwrap()), 7);
    }
}
