//! `barebench`: the host CLI — SD card image, QEMU runs, serial capture and reports
//! (docs/architecture.md "Layout"; the subcommands and their flags in tools/README.md).

use std::io::{self, BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use bench::units::ByteSize;
use tools::console_listen::ConsoleListener;
use tools::disk::{parse_size_bytes, DiskSpec};
use tools::image::card::{self, WriteTarget};
use tools::image::firmware::{DebianArchive, DebianFetch};
use tools::image::{CardRequest, FirmwareSource, ImageRequest};
use tools::profile::KernelSymbols;
use tools::qemu::{Machine, QemuError, QemuRun, DEFAULT_MACHINE, DEFAULT_VIRT_CPU, DEFAULT_VIRT_MEMORY};
use tools::qemu_faults::Fault;
use tools::scratch;
use tools::serial::{self, CaptureEnd};

/// Exit status for a run stopped by --timeout (the habit of timeout(1)).
const TIMEOUT_EXIT_STATUS: u8 = 124;
/// How long `qemu --console-listen` waits, after QEMU exits, for a client to take the console
/// output nobody has read yet ...
const CONSOLE_CLIENT_WAIT: Duration = Duration::from_secs(10);
/// ... and then keeps the connection open until the client closes it, as a console server
/// does for a board that was switched off.
const CONSOLE_LINGER: Duration = Duration::from_secs(120);

#[derive(Parser)]
#[command(
    name = "barebench",
    version,
    about = "barebench host tool: SD card image, QEMU runs, serial capture, reports"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write one bootable SD card image for every Pi, Pi 1 to Pi 5 (and optionally flash it).
    Image(Box<ImageArgs>),
    /// Boot the kernel in QEMU with emulated SD, NVMe and USB disks; exits with the kernel's status.
    Qemu(Box<QemuArgs>),
    /// Capture the serial console until the end-of-results marker.
    Serial(SerialArgs),
    /// Turn serial logs (and fio JSON from Linux) into tables and charts.
    Report(ReportArgs),
    /// Mark a partition of a disk or image as a scratch region the benchmark may overwrite.
    Scratch(ScratchArgs),
    /// Run the benchmark on every place of a labgrid board farm and merge the logs into one
    /// report (docs/farm.md).
    Farm(Box<FarmArgs>),
    /// The same read jobs on the same QEMU virt devices by Linux + fio and by barebench, side by
    /// side (docs/linux-compare.md; downloads Debian's arm64 kernel and fio once).
    CompareLinux(Box<CompareLinuxArgs>),
}

#[derive(Args)]
struct CompareLinuxArgs {
    /// Devices to compare, comma-separated: nvme, sd, usb.
    #[arg(long, value_delimiter = ',', default_value = "nvme,sd,usb")]
    devices: Vec<String>,
    /// Runs of each job on each side; the table shows each side's median.
    #[arg(long, default_value_t = 1)]
    runs: u32,
    /// Ramp before each measured window, ms.
    #[arg(long, default_value_t = 500)]
    ramp_ms: u64,
    /// Measured window of each run, ms.
    #[arg(long, default_value_t = 2000)]
    runtime_ms: u64,
    /// Start of the region read, in bytes or with k/m/g.
    #[arg(long, value_parser = parse_offset_arg, default_value = "0")]
    offset: u64,
    /// Size of the region read.
    #[arg(long, value_parser = parse_size_arg, default_value = "256m")]
    size: u64,
    /// Each emulated drive: SIZE[:pattern|zeros|FILE], the same on both sides.
    #[arg(long, value_name = "SPEC", default_value = "512M:pattern")]
    disk: DiskSpec,
    /// `-icount shift=0` on both sides (as `barebench qemu --icount`).
    #[arg(long)]
    icount: bool,
    /// barebench's kernel image.
    #[arg(long, default_value = "build/kernel-virt.img")]
    kernel: PathBuf,
    /// Where disk images, initramfs and serial logs go.
    #[arg(long, default_value = "build")]
    workdir: PathBuf,
    /// Cache for the Debian downloads [default: $XDG_CACHE_HOME/barebench or ~/.cache/barebench].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Seconds each boot may take before QEMU is stopped.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Also write the table (Markdown) to this file.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct FarmArgs {
    /// The labgrid environment file: one target per place, its RemotePlace and drivers
    /// (docs/farm.md has one for a Pi lab; tools/farm/qemu-env.yaml is the QEMU farm's).
    #[arg(long, value_name = "ENV.yaml")]
    env: PathBuf,
    /// The places to run, comma-separated [default: every place of the environment].
    #[arg(long, value_delimiter = ',', value_name = "PLACE,...")]
    places: Option<Vec<String>>,
    /// Where the logs (PLACE.log), the cards and the merged report go.
    #[arg(short, long, default_value = "build/farm")]
    output: PathBuf,
    /// Seconds from power-on to the end of the results before a place counts as timed out.
    #[arg(long, value_name = "SECONDS", default_value_t = 1800)]
    timeout: u64,
    /// Seconds a place may take from its driver's start to an open console (power, SD mux,
    /// writing the card).
    #[arg(long, value_name = "SECONDS", default_value_t = 900)]
    prepare_timeout: u64,
    /// labgrid's Python virtual environment [default: $BAREBENCH_LABGRID_VENV, else
    /// ~/.cache/barebench/labgrid-venv when present, else python3 and labgrid-client from PATH].
    #[arg(long, value_name = "DIR")]
    labgrid_venv: Option<PathBuf>,
    /// The labgrid coordinator [default: LG_COORDINATOR, or the environment's coordinator_address].
    #[arg(long, value_name = "HOST:PORT")]
    coordinator: Option<String>,
    #[command(flatten)]
    card: CardArgs,
    /// Benchmark settings for every place's cmdline.txt (after `--`), e.g. `-- preset=matrix write=sd0`.
    #[arg(last = true, value_name = "SETTINGS")]
    settings: Vec<String>,
}

#[derive(Args)]
struct ScratchArgs {
    /// The whole disk (e.g. /dev/sdX) or image file.
    path: PathBuf,
    /// The partition to mark (1-based: MBR primary 1-4, or the GPT entry number).
    #[arg(long)]
    partition: u32,
    /// Do not ask before writing the marker.
    #[arg(long)]
    yes: bool,
    /// Mark even a partition holding a recognisable file system, or on a non-removable disk.
    #[arg(long)]
    force: bool,
}

/// `--pi5-console`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Pi5ConsoleArg {
    /// The 3-pin debug connector (UART10) only.
    Debug,
    /// The header pins GPIO 14/15 (RP1 UART0) too.
    Header,
    /// Both connectors (the same config.txt lines as header).
    Both,
}

/// What goes on a benchmark card besides its settings (`barebench image` and `barebench farm`).
#[derive(Args)]
struct CardArgs {
    /// Kernel image (copied as kernel8.img and kernel_2712.img).
    #[arg(long, default_value = "build/kernel8.img")]
    kernel: PathBuf,
    /// 32-bit kernel image for Pi 1, Zero and Pi 2 (copied as kernel.img and kernel7.img).
    #[arg(long, default_value = "build/kernel.img")]
    kernel32: PathBuf,
    /// Image size, e.g. 256M (rounded up to a power of two; default 256 MiB or what the files need).
    #[arg(long, value_parser = parse_size_arg)]
    size: Option<u64>,
    /// Take firmware, DTBs and licences from this directory (e.g. the firmware repository's
    /// boot/) instead of Debian's packages.
    #[arg(long, value_name = "DIR")]
    firmware: Option<PathBuf>,
    /// Put no firmware on the card: for QEMU's raspi machines (`barebench qemu --boot-card`,
    /// a QEMU farm), which boot the kernel without it; no Pi starts from such a card.
    #[arg(long, conflicts_with = "firmware")]
    no_firmware: bool,
    /// Cache for the Debian downloads [default: $XDG_CACHE_HOME/barebench or ~/.cache/barebench].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Download the Debian packages again even when the cache has them.
    #[arg(long)]
    refresh_firmware: bool,
    /// Debian archive URI to use instead of the one in the system's APT sources.
    #[arg(long, value_name = "URI", requires = "debian_suite")]
    debian_mirror: Option<String>,
    /// Debian release codename for --debian-mirror (e.g. bookworm).
    #[arg(long, value_name = "CODENAME", requires = "debian_mirror")]
    debian_suite: Option<String>,
    /// Have the firmware print its boot log on the UART too (uart_2ndstage=1).
    #[arg(long)]
    firmware_log: bool,
    /// Pi 5 console: the 3-pin debug connector only, or also the header pins GPIO 14/15 (writes
    /// `enable_rp1_uart=1` and `pciex4_reset=0` in [pi5]; docs/console.md).
    #[arg(long, value_enum, default_value_t = Pi5ConsoleArg::Debug)]
    pi5_console: Pi5ConsoleArg,
    /// Add a partition of this size after the FAT partition filled with the test pattern and
    /// marked as a pattern region, so `check=` verifies the benchmark's reads on the board
    /// (e.g. 1G; the image grows to the next power of two).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    pattern: Option<u64>,
    /// Add a partition of this size after the FAT partition with a scratch-region marker, so
    /// write jobs can run on the card (e.g. 1G; the image grows to the next power of two).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_arg)]
    scratch: Option<u64>,
}

impl CardArgs {
    /// The request for a card at `output` holding `settings`.
    fn request(&self, output: &Path, settings: Vec<String>) -> CardRequest {
        let firmware = match &self.firmware {
            Some(dir) => FirmwareSource::Directory(dir.clone()),
            None if self.no_firmware => FirmwareSource::NoFirmware,
            None => {
                let mut fetch =
                    DebianFetch::new(self.cache_dir.clone().unwrap_or_else(DebianFetch::default_cache_dir));
                fetch.refresh = self.refresh_firmware;
                if let (Some(uri), Some(codename)) = (&self.debian_mirror, &self.debian_suite) {
                    fetch.archive = Some(DebianArchive {
                        uri: uri.clone(),
                        codename: codename.clone(),
                        security_uri: None,
                    });
                }
                FirmwareSource::Debian(fetch)
            }
        };
        let image = ImageRequest {
            output: output.to_path_buf(),
            kernel: self.kernel.clone(),
            kernel32: self.kernel32.clone(),
            settings,
            size_bytes: self.size,
            firmware,
            firmware_boot_log: self.firmware_log,
            pi5_console: match self.pi5_console {
                Pi5ConsoleArg::Debug => tools::image::config::Pi5Console::Debug,
                Pi5ConsoleArg::Header => tools::image::config::Pi5Console::Header,
                Pi5ConsoleArg::Both => tools::image::config::Pi5Console::Both,
            },
        };
        CardRequest { image, pattern_bytes: self.pattern, scratch_bytes: self.scratch }
    }
}

#[derive(Args)]
struct ImageArgs {
    /// The image file to write.
    #[arg(short, long, default_value = "build/barebench-sd.img")]
    output: PathBuf,
    #[command(flatten)]
    card: CardArgs,
    /// Benchmark settings for cmdline.txt, as one string.
    #[arg(long, value_name = "SETTINGS")]
    cmdline: Option<String>,
    /// Also write the image to this card (e.g. /dev/sdX or /dev/mmcblk0), then verify it.
    #[arg(long, value_name = "DEVICE")]
    write: Option<PathBuf>,
    /// Do not ask before writing the card.
    #[arg(long)]
    yes: bool,
    /// Write even to a device that does not report itself removable.
    #[arg(long)]
    force: bool,
    /// Benchmark settings for cmdline.txt (after `--`), e.g. `-- preset=quick devices=sd0`.
    #[arg(last = true, value_name = "SETTINGS")]
    settings: Vec<String>,
}

#[derive(Args)]
struct QemuArgs {
    /// QEMU machine: virt (sdhci-pci and NVMe on PCIe, as `make qemu`), raspi3b, raspi4b, or the
    /// 32-bit raspi0, raspi1ap, raspi2b.
    #[arg(long, value_enum, default_value_t = DEFAULT_MACHINE)]
    machine: Machine,
    /// Kernel image [default: build/kernel8.img for raspi3b/4b, build/kernel.img for raspi0/1ap,
    /// build/kernel7.img for raspi2b, build/kernel-virt.img for virt].
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// SD card: SIZE[:pattern|pattern-partition|zeros|FILE] (size rounded up to a power of two).
    #[arg(long, value_name = "SPEC")]
    sd: Option<DiskSpec>,
    /// Card on the raspi4b EMMC2 controller: SIZE[:pattern|pattern-partition|zeros|FILE].
    #[arg(long, value_name = "SPEC")]
    emmc2: Option<DiskSpec>,
    /// NVMe namespace (virt only): SIZE[:pattern|pattern-partition|zeros|FILE].
    #[arg(long, value_name = "SPEC")]
    nvme: Option<DiskSpec>,
    /// Extra properties of the nvme device, e.g. mdts=9 (repeatable).
    #[arg(long = "nvme-opts", value_name = "PROP=VALUE")]
    nvme_options: Vec<String>,
    /// aio backend of the NVMe drive (QEMU's aio=) [default: io_uring, or threads with a message
    /// where this host refuses io_uring].
    #[arg(long, value_name = "BACKEND")]
    nvme_aio: Option<String>,
    /// USB drive on the Bulk-Only transport (virt only; qemu-xhci + usb-storage): SIZE[:pattern|pattern-partition|zeros|FILE].
    #[arg(long, value_name = "SPEC")]
    usb: Option<DiskSpec>,
    /// USB drive on UAS (virt only; qemu-xhci + usb-uas + scsi-hd): SIZE[:pattern|pattern-partition|zeros|FILE].
    #[arg(long, value_name = "SPEC")]
    uas: Option<DiskSpec>,
    /// CPU model for virt (the raspi machines have their own fixed CPUs).
    #[arg(long, default_value = DEFAULT_VIRT_CPU)]
    cpu: String,
    /// RAM for virt (the raspi machines have their own fixed sizes).
    #[arg(long, default_value = DEFAULT_VIRT_MEMORY)]
    memory: String,
    /// Serial log [default: build/qemu-<machine>.log].
    #[arg(long)]
    log: Option<PathBuf>,
    /// Where disk images are created.
    #[arg(long, default_value = "build")]
    workdir: PathBuf,
    /// Kill QEMU after this many seconds (exit status 124).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Count instructions exactly: adds `-icount shift=0` (one instruction = 1 ns of virtual
    /// time), so the kernel's CPU cost per I/O has instruction counts; times then measure the
    /// guest's instructions, not the host's speed.
    #[arg(long)]
    icount: bool,
    /// Profile the instructions of the CPU cost per I/O (implies --icount): every instruction the
    /// kernel's CPU meter charges to the driver or the bookkeeping, attributed to its function
    /// and callers with the kernel ELF's symbols (the ELF beside --kernel). Prints a table per
    /// device and job and writes folded stacks for flame-graph tools to FILE (all) and
    /// FILE-DEVICE-JOB.folded (docs/measurement.md §18).
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// The QEMU plugin --profile loads (`make profiler` builds it).
    #[arg(long, value_name = "PATH", default_value = tools::profile::DEFAULT_PLUGIN)]
    profile_plugin: PathBuf,
    /// Inject a fault to see what the kernel does with it (repeatable or comma-separated):
    /// nvme-media (reads of the NVMe drive's second MiB fail: Unrecovered Read Error),
    /// nvme-slow (the NVMe drive answers after 2 s; nvme.timeout-ms=500 unless set),
    /// nvme-gone (the NVMe device is removed 0.5 s into its first run), sd-eject (the SD card
    /// is ejected 0.5 s into its first run; virt), hang (the whole board stops 0.5 s into its
    /// first run and prints nothing more).
    #[arg(long = "fault", value_enum, value_delimiter = ',', value_name = "KIND")]
    faults: Vec<Fault>,
    /// One extra QEMU argument, passed through (repeatable; `--extra=-d --extra=guest_errors`).
    #[arg(long = "extra", value_name = "ARG", allow_hyphen_values = true)]
    extra_args: Vec<String>,
    /// The QEMU binary [default: qemu-system-arm for raspi0/1ap/2b, qemu-system-aarch64 otherwise].
    #[arg(long)]
    qemu: Option<PathBuf>,
    /// Boot from this card image (from `barebench image`) as the Pi firmware would: the kernel
    /// config.txt names for the machine's board (virt: --kernel) and cmdline.txt's settings
    /// (before any given here); the card is the SD card (EMMC2 on raspi4b), written in place.
    #[arg(long, value_name = "IMAGE")]
    boot_card: Option<PathBuf>,
    /// Serve the serial console on this TCP address (e.g. 127.0.0.1:5001; raw, like ser2net)
    /// instead of showing it here; what is printed before a client connects is kept for it.
    #[arg(long, value_name = "HOST:PORT")]
    console_listen: Option<String>,
    /// Benchmark settings as one string.
    #[arg(long, value_name = "SETTINGS")]
    cmdline: Option<String>,
    /// Benchmark settings (after `--`), e.g. `-- preset=quick devices=nvme0`.
    #[arg(last = true, value_name = "SETTINGS")]
    settings: Vec<String>,
}

#[derive(Args)]
struct SerialArgs {
    /// The serial port, e.g. /dev/ttyUSB0 (USB-UART) or /dev/ttyACM0 (Raspberry Pi Debug Probe).
    port: String,
    /// Line speed in baud (8N1, no flow control), as the kernel's console uses.
    #[arg(long, default_value_t = serial::DEFAULT_BAUD)]
    baud: u32,
    /// Where to save the console.
    #[arg(long, default_value = "build/serial.log")]
    log: PathBuf,
    /// Stop after this many seconds even without the end marker.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
}

#[derive(Args)]
struct ReportArgs {
    /// Output directory for report.md, report.csv, report.json and the charts.
    #[arg(short, long)]
    output: PathBuf,
    /// Serial logs of barebench runs and fio JSON files from Linux runs.
    #[arg(required = true, value_name = "LOG_OR_FIO_JSON")]
    inputs: Vec<PathBuf>,
    /// Also decode the per-command traces (`trace=DEV`) of the logs into trace-DEV-RUN.csv,
    /// charts and traces.md, with the kernel ELF's defmt table.
    #[arg(long)]
    trace: bool,
    /// The kernel ELF that printed the logs [default: build/kernel-virt.elf or build/kernel8.elf,
    /// whichever matches].
    #[arg(long, value_name = "ELF", requires = "trace")]
    elf: Option<PathBuf>,
}

fn run_compare_linux(args: &CompareLinuxArgs) -> Result<ExitCode> {
    use tools::compare_linux::{self, table};
    let devices = args
        .devices
        .iter()
        .map(|name| {
            table::DeviceKind::parse(name.trim())
                .with_context(|| format!("--devices: unknown device {name:?} (nvme, sd or usb)"))
        })
        .collect::<Result<Vec<_>>>()?;
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let cache_dir = args.cache_dir.clone().unwrap_or_else(DebianFetch::default_cache_dir);
    let mut status = |line: &str| eprintln!("barebench: {line}");
    let linux = compare_linux::prepare_linux(&cache_dir, &mut status)?;
    let comparison = compare_linux::Comparison {
        devices,
        window: table::Window {
            ramp_ms: args.ramp_ms,
            runtime_ms: args.runtime_ms,
            runs: args.runs,
            offset_bytes: args.offset,
            size_bytes: args.size,
        },
        disk: args.disk.clone(),
        icount: args.icount,
        barebench_kernel: args.kernel.clone(),
        workdir: args.workdir.clone(),
        timeout_s: args.timeout,
    };
    let rows = comparison.run(&linux, &mut status)?;
    let rendered = table::render(&rows);
    print!("{rendered}");
    if let Some(path) = &args.output {
        std::fs::write(path, &rendered).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_offset_arg(text: &str) -> Result<u64, String> {
    bench::units::parse_size_bytes(text)
        .ok_or_else(|| format!("{text:?} is not a size in bytes (k/m/g/t allowed)"))
}

fn parse_size_arg(text: &str) -> Result<u64, String> {
    parse_size_bytes(text).map_err(|error| error.to_string())
}

fn settings_from(cmdline: &Option<String>, settings: &[String]) -> Vec<String> {
    cmdline.iter().cloned().chain(settings.iter().cloned()).collect()
}

fn byte_bar(total: u64, message: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:10} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} ({eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(message.to_string());
    bar
}

fn run_image(args: &ImageArgs) -> Result<ExitCode> {
    let request = args.card.request(&args.output, settings_from(&args.cmdline, &args.settings));
    let spinner = ProgressBar::new_spinner();
    spinner.enable_steady_tick(Duration::from_millis(120));
    let result = tools::image::build_card(&request, &mut |line| spinner.set_message(line.to_string()));
    spinner.finish_and_clear();
    let card = result?;
    for warning in &card.boot.warnings {
        eprintln!("barebench: note: {warning}");
    }
    let layout = &card.boot.layout;
    println!(
        "wrote {} ({}, FAT32 partition at byte offset {}, {}-byte clusters); boot files from {}:",
        args.output.display(),
        ByteSize(layout.image_bytes),
        layout.partition_offset_bytes(),
        layout.cluster_bytes,
        card.boot.firmware_origin
    );
    for (name, size) in &layout.files {
        println!("  {name:<28} {size:>10} bytes");
    }
    println!("check it with: mdir -i {}@@{} ::", args.output.display(), layout.partition_offset_bytes());
    if let Some(pattern) = card.pattern {
        println!(
            "pattern region: partition {} (type 0x7f), {} from byte {}; image now {}",
            pattern.number,
            ByteSize(pattern.length_bytes),
            pattern.offset_bytes,
            ByteSize(pattern.image_bytes_after)
        );
    }
    if let Some((scratch, region_id)) = card.scratch {
        println!(
            "scratch region: partition {} (type 0xda), {} from byte {}, region id {region_id:#018x}; \
             image now {}",
            scratch.number,
            ByteSize(scratch.length_bytes),
            scratch.offset_bytes,
            ByteSize(scratch.image_bytes_after)
        );
    }
    if let Some(device) = &args.write {
        write_card(&args.output, device, card.image_bytes, args.yes, args.force)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks on the terminal; `false` when the answer is not `yes`. Without a terminal it refuses.
fn confirm(question: &str, what: &str) -> Result<bool> {
    if !io::stdin().is_terminal() {
        bail!("not asking for confirmation without a terminal: add --yes to {what}");
    }
    print!("{question} Type yes to continue: ");
    io::stdout().flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

fn run_scratch(args: &ScratchArgs) -> Result<ExitCode> {
    let region_id = scratch::random_region_id().context("reading /dev/urandom")?;
    let plan = scratch::plan_mark(&args.path, args.partition, args.force, region_id)?;
    println!("{}", plan.describe());
    let what = format!("mark partition {} of {}", args.partition, args.path.display());
    if !args.yes && !confirm("Write the marker?", &what)? {
        bail!("not written: the answer was not `yes`");
    }
    scratch::write_marker(&plan)?;
    println!(
        "marked: {} is scratch region {:#018x}; run the kernel with write=DEV to allow write jobs on it",
        plan.partition, plan.marker.region_id
    );
    Ok(ExitCode::SUCCESS)
}

fn write_card(image: &Path, device: &Path, image_bytes: u64, yes: bool, force: bool) -> Result<()> {
    let target = card::inspect_target(device, image_bytes, force)?;
    println!("target: {}", target.describe());
    if !yes {
        let question = format!(
            "Write {} to {}? Everything on it will be lost.",
            ByteSize(image_bytes),
            device.display()
        );
        if !confirm(&question, &format!("write {}", device.display()))? {
            bail!("not written: the answer was not `yes`");
        }
    }
    let bar = byte_bar(image_bytes, "writing");
    card::write_image(image, &target, |done, _| bar.set_position(done))?;
    bar.finish();
    let bar = byte_bar(image_bytes, "verifying");
    card::verify_image(image, &target, |done, _| bar.set_position(done))?;
    bar.finish();
    match target {
        WriteTarget::BlockDevice { .. } => {
            println!("{} written, synced and verified; it can be removed", device.display())
        }
        WriteTarget::File { .. } => println!("{} written and verified", device.display()),
    }
    Ok(())
}

fn run_qemu(args: &QemuArgs) -> Result<ExitCode> {
    let mut run = QemuRun::new(args.machine);
    if let Some(kernel) = &args.kernel {
        run.kernel = kernel.clone();
    }
    run.append = settings_from(&args.cmdline, &args.settings).join(" ");
    if let Some(card) = &args.boot_card {
        let boot = tools::qemu_boot_card::load(card, args.machine, &args.workdir)?;
        if let Some(kernel) = &boot.kernel {
            run.kernel = kernel.clone();
        }
        eprintln!(
            "barebench: booting from the card {}: {} and cmdline.txt {:?}",
            card.display(),
            boot.kernel_name.as_deref().unwrap_or("the --kernel image (virt has no firmware)"),
            boot.cmdline
        );
        run.append = [boot.cmdline.as_str(), run.append.as_str()].join(" ").trim().to_string();
        run.boot_card = Some(card.clone());
    }
    run.sd = args.sd.clone();
    run.emmc2 = args.emmc2.clone();
    run.nvme = args.nvme.clone();
    run.nvme_options = args.nvme_options.clone();
    if let Some(backend) = &args.nvme_aio {
        run.nvme_aio = backend.clone();
        run.nvme_aio_note = None;
    }
    run.usb = args.usb.clone();
    run.uas = args.uas.clone();
    run.virt_cpu = args.cpu.clone();
    run.virt_memory = args.memory.clone();
    run.extra_args = args.extra_args.clone();
    run.workdir = args.workdir.clone();
    if let Some(log) = &args.log {
        run.log_path = log.clone();
    }
    run.timeout = args.timeout.map(Duration::from_secs);
    run.icount = args.icount || args.profile.is_some();
    let profile = match &args.profile {
        Some(file) => Some(prepare_profile(&mut run, file, &args.profile_plugin)?),
        None => None,
    };
    run.faults = args.faults.clone();
    if let Some(binary) = &args.qemu {
        run.qemu_binary = binary.clone();
    }
    run.show_progress = args.console_listen.is_none();
    eprintln!(
        "barebench: {} -M {} -append {:?}; serial log {}",
        run.qemu_binary.display(),
        args.machine.qemu_name(),
        run.effective_append(),
        run.log_path.display()
    );
    let mut console_port = match &args.console_listen {
        Some(address) => {
            let port = ConsoleListener::bind(address.as_str())
                .with_context(|| format!("listening for the console on {address}"))?;
            eprintln!("barebench: serving the console on {address} (raw TCP)");
            Some(port)
        }
        None => None,
    };
    let mut stdout = io::stdout();
    let live: &mut dyn Write = match &mut console_port {
        Some(port) => port,
        None => &mut stdout,
    };
    let result = run.run(live);
    if let Some(port) = &mut console_port {
        port.finish(CONSOLE_CLIENT_WAIT, CONSOLE_LINGER);
    }
    match result {
        Ok(outcome) => {
            let code = outcome.exit_code();
            if let Some((file, records, symbols)) = &profile {
                report_profile(file, records, symbols, &outcome.log_text)?;
            }
            eprintln!(
                "barebench: QEMU exited with status {code} after {:.2} s; log in {}",
                outcome.elapsed.as_secs_f64(),
                outcome.log_path.display()
            );
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        Err(error @ QemuError::TimedOut { .. }) => {
            eprintln!("barebench: {error}");
            Ok(ExitCode::from(TIMEOUT_EXIT_STATUS))
        }
        Err(error) => Err(error.into()),
    }
}

/// `--profile FILE`: the plugin's arguments from the kernel ELF's symbols, added to the run.
/// Returns what the report needs afterwards.
fn prepare_profile(
    run: &mut QemuRun,
    file: &Path,
    plugin: &Path,
) -> Result<(PathBuf, PathBuf, KernelSymbols)> {
    let symbols = KernelSymbols::read(&tools::profile::elf_for_kernel(&run.kernel))?;
    let records = run.workdir.join("profile-records.txt");
    let options = symbols.plugin_options(&records)?;
    let mut arguments = tools::profile::plugin_arguments(plugin, &options)?;
    arguments.append(&mut run.extra_args);
    run.extra_args = arguments;
    Ok((file.to_path_buf(), records, symbols))
}

/// After a `--profile` run: the table of each device and job, and the folded stacks.
fn report_profile(file: &Path, records: &Path, symbols: &KernelSymbols, log: &str) -> Result<()> {
    let runs = tools::profile::read_records(records)?;
    let labels = tools::profile::runs_in_log(log);
    if runs.len() != labels.len() {
        eprintln!(
            "barebench: the profile has {} runs and the log {}; the first {} are paired in order",
            runs.len(),
            labels.len(),
            runs.len().min(labels.len())
        );
    }
    let elf = &symbols.path;
    let inline = tools::profile::InlineFrames::read(elf, &tools::profile::instruction_addresses(&runs))
        .unwrap_or_else(|reason| {
            eprintln!("barebench: {reason}; the profile names ELF symbols only, not the functions inlined into them");
            tools::profile::InlineFrames::default()
        });
    let profiles = tools::profile::build_profiles(&runs, &labels, symbols, &inline);
    println!();
    for profile in &profiles {
        println!("{}", profile.table());
    }
    for path in tools::profile::write_folded(&profiles, file)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn run_serial(args: &SerialArgs) -> Result<ExitCode> {
    eprintln!(
        "barebench: reading {} at {} 8N1; the same with picocom: {}  (exit with Ctrl-A Ctrl-X)",
        args.port,
        args.baud,
        serial::picocom_command(&args.port, args.baud)
    );
    let mut port = serial::open_port(&args.port, args.baud)?;
    let mut log = serial::create_log(&args.log)?;
    eprintln!(
        "barebench: saving the console to {}; waiting for the results (power the Pi on now)",
        args.log.display()
    );
    let outcome =
        serial::capture(&mut port, &mut io::stdout(), &mut log, args.timeout.map(Duration::from_secs))
            .with_context(|| format!("writing {}", args.log.display()))?;
    match outcome.end {
        CaptureEnd::EndMarker => {
            eprintln!(
                "barebench: results complete; {} bytes saved in {}",
                outcome.bytes_captured,
                args.log.display()
            );
            eprintln!("barebench: next: barebench report -o build/report {}", args.log.display());
            Ok(ExitCode::SUCCESS)
        }
        CaptureEnd::Disconnected { reason } => {
            eprintln!(
                "barebench: {} went away ({reason}) before the end of the results; the {} bytes received so far are in {}",
                args.port,
                outcome.bytes_captured,
                args.log.display()
            );
            explain_stage(&args.log);
            Ok(ExitCode::FAILURE)
        }
        CaptureEnd::TimedOut => {
            eprintln!(
                "barebench: no end-of-results marker within {} s; the {} bytes received are in {}",
                args.timeout.unwrap_or_default(),
                outcome.bytes_captured,
                args.log.display()
            );
            explain_stage(&args.log);
            Ok(ExitCode::from(TIMEOUT_EXIT_STATUS))
        }
    }
}

/// For a capture that ended without results: the last `stage:` the log reached and what to check.
fn explain_stage(log: &std::path::Path) {
    let text =
        std::fs::read(log).map(|bytes| String::from_utf8_lossy(&bytes).into_owned()).unwrap_or_default();
    match tools::stages::explain(&text) {
        Some(explanation) => eprintln!("barebench: {explanation}"),
        None => eprintln!("barebench: the log has no `stage:` marker: the kernel did not get as far as its console (see docs/led.md for what the activity LED shows)"),
    }
}

/// `report --trace`: each log's traces decoded, written and summarised.
fn run_trace_report(args: &ReportArgs) -> Result<ExitCode> {
    use tools::report::trace;
    let elves = match &args.elf {
        Some(elf) => vec![elf.clone()],
        None => trace::default_elves(std::path::Path::new("build")),
    };
    let mut decoded = Vec::new();
    for input in &args.inputs {
        let Ok(log) = std::fs::read_to_string(input) else {
            continue;
        };
        if !log.contains(bench::trace::TRACE_BEGIN_PREFIX) {
            continue;
        }
        let (elf, traces) = trace::decode_with_any(&log, &elves)?;
        println!("{}: {} traces decoded with {}", input.display(), traces.len(), elf.display());
        decoded.extend(traces);
    }
    if decoded.is_empty() {
        eprintln!("barebench: no trace in any input (run with trace=DEV)");
        return Ok(ExitCode::FAILURE);
    }
    for written in tools::report::write_traces(&decoded, &args.output)? {
        println!("wrote {}", written.display());
    }
    for one in &decoded {
        let rows = one.rows();
        println!(
            "{} {}: {} commands, mean latency {:.1} µs; slowest:",
            one.device,
            one.run,
            rows.len(),
            trace::mean_latency_ns(&rows) / 1e3
        );
        for line in trace::slowest(one, 5) {
            println!("  {line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_report(args: &ReportArgs) -> Result<ExitCode> {
    if args.trace {
        let status = run_trace_report(args)?;
        if status != ExitCode::SUCCESS {
            return Ok(status);
        }
    }
    let report = tools::report::build_report(&args.inputs);
    for source in &report.sources {
        for problem in &source.problems {
            eprintln!("barebench: {} ({}): {problem}", source.label, source.path.display());
        }
    }
    // Empty tables and charts would look like a report; nothing is written without a result.
    if !report.has_results() {
        eprintln!("barebench: no results in any input; nothing written to {}", args.output.display());
        return Ok(ExitCode::FAILURE);
    }
    let written = tools::report::write_report(&report, &args.output)?;
    print!("{}", tools::report::markdown(&report));
    println!();
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn run_farm(args: &FarmArgs) -> Result<ExitCode> {
    use tools::farm::{self, PlaceStatus};
    tools::signals::catch_interrupts().context("catching Ctrl-C")?;
    let tools = farm::labgrid::LabgridTools::find(
        args.labgrid_venv.as_deref(),
        &args.output,
        args.coordinator.clone(),
    )?;
    let options = farm::FarmOptions {
        env: args.env.clone(),
        places: args.places.clone(),
        output: args.output.clone(),
        card: args.card.request(Path::new(""), args.settings.clone()),
        console_timeout: Duration::from_secs(args.timeout),
        prepare_timeout: Duration::from_secs(args.prepare_timeout),
    };
    let outcome = farm::run(&options, &tools)?;
    print!("{}", outcome.report_markdown);
    println!();
    print!("{}", farm::summary_markdown(&outcome.places));
    for path in &outcome.written {
        println!("wrote {}", path.display());
    }
    for place in outcome.places.iter().filter(|place| place.status != PlaceStatus::Complete) {
        eprintln!(
            "barebench: farm: place {} {}: {} ({})",
            place.place,
            place.status.name(),
            place.stage,
            place.detail
        );
    }
    let all_complete = outcome.places.iter().all(|place| place.status == PlaceStatus::Complete);
    Ok(if all_complete { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Image(args) => run_image(args),
        Command::Qemu(args) => run_qemu(args),
        Command::Serial(args) => run_serial(args),
        Command::Report(args) => run_report(args),
        Command::Scratch(args) => run_scratch(args),
        Command::Farm(args) => run_farm(args),
        Command::CompareLinux(args) => run_compare_linux(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            // Typed errors already quote their cause; print each cause only once.
            let mut message = error.to_string();
            for cause in error.chain().skip(1) {
                let cause = cause.to_string();
                if !message.contains(&cause) {
                    message.push_str(": ");
                    message.push_str(&cause);
                }
            }
            eprintln!("barebench: error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn qemu_runs_virt_with_the_default_cpu_unless_told_otherwise() {
        let Command::Qemu(args) = Cli::parse_from(["barebench", "qemu"]).command else { panic!("not qemu") };
        assert_eq!(args.machine, Machine::Virt);
        assert_eq!(args.cpu, "cortex-a72");
        assert_eq!(args.memory, "1G");
        assert_eq!(args.nvme_aio, None);
        let Command::Qemu(args) =
            Cli::parse_from(["barebench", "qemu", "--machine", "raspi4b", "--nvme-aio", "native"]).command
        else {
            panic!("not qemu")
        };
        assert_eq!(args.machine, Machine::Raspi4b);
        assert_eq!(args.nvme_aio.as_deref(), Some("native"));
    }

    #[test]
    fn the_help_names_every_board_the_card_boots() {
        let help = Cli::command().render_help().to_string();
        let image = help.lines().find(|line| line.trim_start().starts_with("image")).unwrap_or_default();
        assert!(image.contains("every Pi, Pi 1 to Pi 5"), "barebench --help: {help}");
        // The card's config.txt has a section for the 32-bit Pis too (tools/src/image/config.rs).
        assert!(!help.contains("for Pi 3, Pi 4 and Pi 5"), "{help}");
    }

    #[test]
    fn every_flag_and_argument_has_a_help_text() {
        let cli = Cli::command();
        let mut missing = Vec::new();
        for subcommand in cli.get_subcommands() {
            for argument in subcommand.get_arguments() {
                let id = argument.get_id().as_str();
                if id != "help" && id != "version" && argument.get_help().is_none() {
                    missing.push(format!("barebench {} {id}", subcommand.get_name()));
                }
            }
        }
        assert!(missing.is_empty(), "without help text: {missing:?}");
    }
}
