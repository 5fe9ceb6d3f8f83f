//! Runs the kernel images under QEMU for the end-to-end tests: serial captured to a file,
//! semihosting on, a timeout, and the exit status passed back.
#![allow(dead_code)]
#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub enum Machine {
    Raspi0,
    Raspi1ap,
    Raspi2b,
    Raspi3b,
    Raspi4b,
    Virt,
}

pub struct Run {
    machine: Machine,
    append: String,
    elf: bool,
    cpu: Option<String>,
    smp: Option<u32>,
    extra: Vec<String>,
    device_tree: Option<Vec<u8>>,
    machine_options: Option<String>,
    timeout: Duration,
}

pub struct Outcome {
    pub status: Option<i32>,
    pub output: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn assert_status(&self, expected: i32) {
        assert_eq!(self.status, Some(expected), "exit status; serial output:\n{}", self.output);
    }
}

pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub fn scratch_dir() -> PathBuf {
    let dir = repository_root().join("build").join("e2e");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn unique_name(stem: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!("{stem}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

impl Run {
    pub fn new(machine: Machine) -> Self {
        Run {
            machine,
            append: String::new(),
            elf: false,
            cpu: None,
            smp: None,
            extra: Vec::new(),
            device_tree: None,
            machine_options: None,
            timeout: Duration::from_secs(60),
        }
    }
    pub fn append(mut self, line: &str) -> Self {
        self.append = line.to_string();
        self
    }
    pub fn elf(mut self) -> Self {
        self.elf = true;
        self
    }
    pub fn cpu(mut self, cpu: &str) -> Self {
        self.cpu = Some(cpu.to_string());
        self
    }
    pub fn smp(mut self, count: u32) -> Self {
        self.smp = Some(count);
        self
    }
    pub fn arg(mut self, argument: &str) -> Self {
        self.extra.push(argument.to_string());
        self
    }
    pub fn args(mut self, arguments: &[&str]) -> Self {
        self.extra.extend(arguments.iter().map(|a| a.to_string()));
        self
    }
    /// Extra `-M` options, e.g. "highmem=off".
    pub fn machine_options(mut self, options: &str) -> Self {
        self.machine_options = Some(options.to_string());
        self
    }
    pub fn device_tree(mut self, blob: &[u8]) -> Self {
        self.device_tree = Some(blob.to_vec());
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Runs QEMU through the host tool's library (`tools::qemu::QemuRun`, what `barebench qemu`
    /// uses), with the serial console captured to a log of its own.
    pub fn go(self) -> Outcome {
        let (machine, image) = match self.machine {
            Machine::Raspi0 => (tools::qemu::Machine::Raspi0, "kernel"),
            Machine::Raspi1ap => (tools::qemu::Machine::Raspi1ap, "kernel"),
            Machine::Raspi2b => (tools::qemu::Machine::Raspi2b, "kernel7"),
            Machine::Raspi3b => (tools::qemu::Machine::Raspi3b, "kernel8"),
            Machine::Raspi4b => (tools::qemu::Machine::Raspi4b, "kernel8"),
            Machine::Virt => (tools::qemu::Machine::Virt, "kernel-virt"),
        };
        let mut run = tools::qemu::QemuRun::new(machine);
        run.kernel =
            repository_root().join("build").join(format!("{image}.{}", if self.elf { "elf" } else { "img" }));
        assert!(run.kernel.exists(), "{} is missing: run `make` first", run.kernel.display());
        run.append = self.append;
        if let Some(cpu) = self.cpu {
            run.virt_cpu = cpu;
        }
        run.workdir = scratch_dir();
        run.log_path = scratch_dir().join(unique_name(&format!("serial-{}", machine.qemu_name())) + ".log");
        run.timeout = Some(self.timeout);
        if let (Machine::Virt, Some(smp)) = (self.machine, self.smp) {
            run.extra_args.extend(["-smp".to_string(), smp.to_string()]);
        }
        if let Some(options) = &self.machine_options {
            // QEMU merges repeated -machine options into the machine chosen by -M.
            run.extra_args.extend(["-machine".to_string(), options.clone()]);
        }
        let tree_path = self.device_tree.as_ref().map(|blob| {
            let path = scratch_dir().join(unique_name("tree") + ".dtb");
            std::fs::write(&path, blob).unwrap();
            path
        });
        if let Some(path) = &tree_path {
            run.extra_args.extend(["-dtb".to_string(), path.display().to_string()]);
        }
        run.extra_args.extend(self.extra);
        let started = Instant::now();
        let (status, log_path, log_text) = match run.run(&mut std::io::sink()) {
            Ok(outcome) => (Some(outcome.exit_code()), outcome.log_path, outcome.log_text),
            Err(tools::qemu::QemuError::TimedOut { log_path, log_text, .. }) => (None, log_path, log_text),
            Err(error) => panic!("QEMU could not run: {error}"),
        };
        let _ = std::fs::remove_file(&log_path);
        if let Some(path) = tree_path {
            let _ = std::fs::remove_file(path);
        }
        Outcome { status, output: log_text.replace("\r\n", "\n"), elapsed: started.elapsed() }
    }
}

/// The `aio=` backend for an NVMe `-drive` a test writes itself: io_uring where this host allows
/// it, else the thread pool (`tools::qemu::host_nvme_aio`, which `barebench qemu` uses too).
pub fn nvme_aio() -> &'static str {
    tools::qemu::host_nvme_aio().backend
}

/// Bytes in one sector of a test image (the pattern's unit).
pub const SECTOR: u64 = 512;

/// A disk image for a test: sparse, filled with the test pattern (`blockdev::pattern`) in the
/// given ranges of 512-byte sectors, attached with `snapshot=on`, removed when dropped.
pub struct TestImage {
    pub path: PathBuf,
    /// Size in 512-byte sectors.
    pub blocks: u64,
}

impl TestImage {
    pub fn new(stem: &str, size_bytes: u64, filled: &[(u64, u64)]) -> TestImage {
        let path = scratch_dir().join(unique_name(stem) + ".img");
        let mut file = OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
        file.set_len(size_bytes).unwrap();
        for &(lba, count) in filled {
            file.seek(SeekFrom::Start(lba * SECTOR)).unwrap();
            let mut bytes = Vec::with_capacity((count * SECTOR) as usize);
            let mut sector = [0u8; 512];
            for s in lba..lba + count {
                blockdev::pattern::fill_sector(s, &mut sector);
                bytes.extend_from_slice(&sector);
            }
            file.write_all(&bytes).unwrap();
        }
        TestImage { path, blocks: size_bytes / SECTOR }
    }

    /// An image filled with the pattern from end to end.
    pub fn full(stem: &str, size_bytes: u64) -> TestImage {
        Self::new(stem, size_bytes, &[(0, size_bytes / SECTOR)])
    }

    /// The CRC-32 of 512-byte sectors `lba .. lba + count` as the host reads them from the file.
    pub fn crc(&self, lba: u64, count: u64) -> u32 {
        let mut file = File::open(&self.path).unwrap();
        file.seek(SeekFrom::Start(lba * SECTOR)).unwrap();
        let mut bytes = vec![0u8; (count * SECTOR) as usize];
        file.read_exact(&mut bytes).unwrap();
        crc32fast::hash(&bytes)
    }

    /// The `-drive` options naming this file (add `if=`, `id=`).
    pub fn drive(&self) -> String {
        format!("file={},format=raw,snapshot=on", self.path.display())
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A monitor socket path of its own for a test (`-S -monitor unix:PATH,server,nowait`).
pub fn monitor_socket(stem: &str) -> PathBuf {
    scratch_dir().join(unique_name(stem) + ".sock")
}

/// Samples one bit of a guest register through QEMU's monitor: waits for the socket, starts the
/// machine (`cont`, for a QEMU started with `-S`), then reads `address` with `xp` as fast as the
/// monitor answers until QEMU goes away or `limit` passes. Returns the changes of the bit as
/// (ms since the start, set), the first reading included. QEMU has no GPIO trace events, but the
/// monitor reads device registers like memory.
pub fn sample_register_bit(
    socket: PathBuf,
    address: u64,
    bit: u32,
    limit: Duration,
) -> std::thread::JoinHandle<Vec<(u64, bool)>> {
    std::thread::spawn(move || sample_bit(&socket, address, bit, limit).unwrap_or_default())
}

/// Reads the monitor's output up to its next prompt; `None` once QEMU has gone.
fn read_until_prompt(stream: &mut std::os::unix::net::UnixStream, pending: &mut Vec<u8>) -> Option<String> {
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(pending).into_owned();
        if let Some(end) = text.find("(qemu)") {
            pending.drain(..end + "(qemu)".len());
            return Some(text[..end].to_string());
        }
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return None,
            Ok(count) => pending.extend_from_slice(&buffer[..count]),
        }
    }
}

fn sample_bit(socket: &Path, address: u64, bit: u32, limit: Duration) -> Option<Vec<(u64, bool)>> {
    let started = Instant::now();
    let mut stream = loop {
        match std::os::unix::net::UnixStream::connect(socket) {
            Ok(stream) => break stream,
            Err(_) if started.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => return None,
        }
    };
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let mut pending = Vec::new();
    read_until_prompt(&mut stream, &mut pending)?;
    stream.write_all(b"cont\n").ok()?;
    read_until_prompt(&mut stream, &mut pending)?;
    let running_since = Instant::now();
    let mut changes: Vec<(u64, bool)> = Vec::new();
    let marker = format!("{address:016x}: 0x");
    while started.elapsed() < limit {
        stream.write_all(format!("xp /1wx {address:#x}\n").as_bytes()).ok()?;
        let Some(answer) = read_until_prompt(&mut stream, &mut pending) else { break };
        let value = answer
            .split(&marker)
            .nth(1)
            .and_then(|rest| u32::from_str_radix(rest.split_whitespace().next()?, 16).ok());
        let Some(value) = value else { continue };
        let set = value & (1 << bit) != 0;
        if changes.last().is_none_or(|&(_, last)| last != set) {
            changes.push((running_since.elapsed().as_millis() as u64, set));
        }
    }
    Some(changes)
}

/// `barebench report`'s Markdown for a serial log, and the problems it found in it.
pub fn report_markdown(stem: &str, log: &str) -> (String, Vec<String>) {
    let path = scratch_dir().join(unique_name(stem) + ".log");
    std::fs::write(&path, log).unwrap();
    let report = tools::report::build_report(std::slice::from_ref(&path));
    let _ = std::fs::remove_file(&path);
    let problems = report.sources[0].problems.clone();
    (tools::report::table::markdown(&report), problems)
}
