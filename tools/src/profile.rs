//! `barebench qemu --profile FILE`: where every instruction of the CPU cost per I/O goes.
//!
//! QEMU runs the kernel under `-icount shift=0` with barebench's TCG plugin
//! (`profiler/plugin/`, `libbarebench_profile.so`), which charges every executed instruction to the
//! account of the kernel's CPU meter it falls in and to the code it ran in (docs/measurement.md
//! §18). This module gives the plugin the meter's addresses from the kernel ELF, then reads its
//! records back: it names each block's function and its callers from the ELF's symbols, groups
//! the runs by device and job as the serial log announced them, and writes a flat table per
//! device and job and folded stacks for flame-graph tools (`inferno-flamegraph`,
//! `flamegraph.pl`).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};
use profiler::format::{self, RunRecord};
use profiler::options::Options;

/// Where `make` puts the plugin.
pub const DEFAULT_PLUGIN: &str = "build/libbarebench_profile.so";

/// The kernel's functions the plugin watches (demangled, without the hash).
const LAP: &str = "bench::cpu_cost::CpuMeter::lap";
const RUN_END: &str = "bench::cpu_cost::run_metered";

/// The meter's accounts in a profile, in the order of the plugin's counts.
pub const ACCOUNT_NAMES: [&str; 3] = ["driver", "bookkeeping", "recording"];

/// Functions below this share of a table's total are summed in one row.
const SMALL_SHARE_PERCENT: f64 = 1.0;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read the kernel ELF {path}: {reason} (the profile names code with its symbols; `make` writes build/kernel-virt.elf)")]
    Elf { path: PathBuf, reason: String },
    #[error("the kernel ELF {path} has no function {name}: is it a barebench kernel?")]
    MissingSymbol { path: PathBuf, name: &'static str },
    #[error("the profile plugin {path} is missing: run `make profiler` to build it (or pass --profile-plugin PATH)")]
    PluginMissing { path: PathBuf },
    #[error("cannot read the plugin's records {path}: {reason}")]
    Records { path: PathBuf, reason: String },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// A function of the kernel ELF.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Function {
    start: u64,
    end: u64,
    name: String,
}

/// The kernel ELF's functions, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct KernelSymbols {
    /// The ELF they were read from.
    pub path: PathBuf,
    functions: Vec<Function>,
}

impl KernelSymbols {
    /// Reads the function symbols of the ELF at `path`.
    pub fn read(path: &Path) -> Result<KernelSymbols, ProfileError> {
        let error = |reason: String| ProfileError::Elf { path: path.to_path_buf(), reason };
        let data = fs::read(path).map_err(|source| error(source.to_string()))?;
        let file = object::File::parse(&*data).map_err(|source| error(source.to_string()))?;
        let mut functions: Vec<Function> = file
            .symbols()
            .filter(|symbol| symbol.kind() == SymbolKind::Text && symbol.size() > 0)
            .filter_map(|symbol| {
                let name = symbol.name().ok()?;
                Some(Function {
                    start: symbol.address(),
                    end: symbol.address() + symbol.size(),
                    name: format!("{:#}", rustc_demangle::demangle(name)),
                })
            })
            .collect();
        functions.sort_by_key(|function| (function.start, function.end));
        functions.dedup_by_key(|function| function.start);
        Ok(KernelSymbols { path: path.to_path_buf(), functions })
    }

    #[cfg(test)]
    fn from_functions(functions: &[(u64, u64, &str)]) -> KernelSymbols {
        KernelSymbols {
            path: PathBuf::from("test.elf"),
            functions: functions
                .iter()
                .map(|&(start, end, name)| Function { start, end, name: name.to_string() })
                .collect(),
        }
    }

    fn find(&self, name: &'static str) -> Result<&Function, ProfileError> {
        self.functions
            .iter()
            .find(|function| function.name == name)
            .ok_or(ProfileError::MissingSymbol { path: self.path.clone(), name })
    }

    /// The name of the function holding `address`, or the address itself.
    pub fn name_of(&self, address: u64) -> String {
        let index = self.functions.partition_point(|function| function.start <= address);
        match index.checked_sub(1).map(|index| &self.functions[index]) {
            Some(function) if address < function.end => function.name.clone(),
            _ => format!("{address:#x}"),
        }
    }

    /// The plugin's arguments for these symbols, writing its records to `output`.
    pub fn plugin_options(&self, output: &Path) -> Result<Options, ProfileError> {
        let (lap, run_end) = (self.find(LAP)?, self.find(RUN_END)?);
        Ok(Options {
            output: output.to_string_lossy().into_owned(),
            lap: lap.start..lap.end,
            run_end: run_end.start,
        })
    }
}

/// The source-level functions at each instruction address, inlined ones included, from the ELF's
/// debug information (`llvm-symbolizer --inlines`; the kernel is built with `debug = true`).
/// With link-time optimisation most of the benchmark's loop is one symbol (`run_once`); its
/// inlined functions say where inside it the instructions go.
#[derive(Clone, Debug, Default)]
pub struct InlineFrames {
    /// Address → function names, outermost first.
    frames: HashMap<u64, Vec<String>>,
}

/// The program that reads the debug information.
const SYMBOLIZER: &str = "llvm-symbolizer";

impl InlineFrames {
    /// Asks `llvm-symbolizer` about `addresses` of the ELF at `elf`.
    pub fn read(elf: &Path, addresses: &[u64]) -> Result<InlineFrames, String> {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new(SYMBOLIZER)
            .arg(format!("--obj={}", elf.display()))
            .args(["--inlines", "--functions=linkage", "--no-demangle", "--output-style=JSON"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("cannot run {SYMBOLIZER}: {error}"))?;
        let input: String = addresses.iter().map(|address| format!("{address:#x}\n")).collect();
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let output = child.wait_with_output().map_err(|error| format!("{SYMBOLIZER}: {error}"))?;
        let _ = writer.join();
        if !output.status.success() {
            return Err(format!("{SYMBOLIZER} failed ({})", output.status));
        }
        Ok(InlineFrames::parse(&String::from_utf8_lossy(&output.stdout)))
    }

    /// `llvm-symbolizer --output-style=JSON` lines: per address, the frames innermost first.
    fn parse(text: &str) -> InlineFrames {
        let mut frames = HashMap::new();
        for line in text.lines() {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let address = value["Address"]
                .as_str()
                .and_then(|text| u64::from_str_radix(text.trim_start_matches("0x"), 16).ok());
            let Some(address) = address else { continue };
            let mut names: Vec<String> = value["Symbol"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|frame| frame["FunctionName"].as_str())
                .filter(|name| !name.is_empty())
                .map(|name| format!("{:#}", rustc_demangle::demangle(name)).replace(';', ","))
                .collect();
            names.reverse();
            if !names.is_empty() {
                frames.insert(address, names);
            }
        }
        InlineFrames { frames }
    }

    /// The frames at `address`, outermost first, if the debug information has them.
    fn at(&self, address: u64) -> Option<&[String]> {
        self.frames.get(&address).map(Vec::as_slice)
    }
}

/// Rust's own library, whose inlined functions the table charges to the kernel's function that
/// inlined them (and whose called functions, `memcpy` and `memset`, it names by their symbol).
const LIBRARY_CRATES: [&str; 3] = ["core::", "alloc::", "compiler_builtins::"];

/// Whether `name` (demangled) is a function of Rust's library: a path in one of its crates, or a
/// library trait's method on a type without a path (`<usize as core::slice::SliceIndex<..>>`).
fn is_library(name: &str) -> bool {
    let in_library = |path: &str| LIBRARY_CRATES.iter().any(|library| path.starts_with(library));
    let bracketed = name.starts_with('<');
    let name = name.trim_start_matches('<');
    if in_library(name) {
        return true;
    }
    match name.split_once(" as ") {
        Some((self_type, rest)) => !self_type.contains("::") && in_library(rest),
        // `<u64>::checked_add`: a method of a primitive type.
        None => bracketed && name.split_once('>').is_some_and(|(self_type, _)| !self_type.contains("::")),
    }
}

/// The bytes of one A64 instruction.
const INSTRUCTION_BYTES: u64 = 4;

/// The instruction addresses of every block the records name, for [`InlineFrames::read`].
pub fn instruction_addresses(records: &[RunRecord]) -> Vec<u64> {
    let mut addresses: Vec<u64> = records
        .iter()
        .flat_map(|record| record.slots.iter())
        .flat_map(|slot| {
            (0..u64::from(slot.block_instructions.max(1)))
                .map(move |index| slot.block_start + index * INSTRUCTION_BYTES)
        })
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    addresses
}

/// The ELF beside a kernel image: `build/kernel-virt.img` → `build/kernel-virt.elf`; an ELF given
/// as the kernel is its own.
pub fn elf_for_kernel(kernel: &Path) -> PathBuf {
    if kernel.extension().is_some_and(|extension| extension == "img") {
        kernel.with_extension("elf")
    } else {
        kernel.to_path_buf()
    }
}

/// QEMU's arguments that load the plugin.
pub fn plugin_arguments(plugin: &Path, options: &Options) -> Result<Vec<String>, ProfileError> {
    if !plugin.is_file() {
        return Err(ProfileError::PluginMissing { path: plugin.to_path_buf() });
    }
    let mut value = format!("file={}", plugin.display());
    for argument in options.to_arguments() {
        value.push(',');
        value.push_str(&argument);
    }
    Ok(vec!["-plugin".to_string(), value])
}

/// A run as the serial log announces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunLabel {
    pub job: String,
    pub device: String,
}

/// The runs in `log`, in order: each `run i/n: ... on DEVICE, ...` line with the `job i/n: NAME`
/// before it. The kernel meters each such run once, so they pair with the plugin's records.
pub fn runs_in_log(log: &str) -> Vec<RunLabel> {
    let mut job = String::new();
    let mut runs = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("job ") {
            if let Some((_, name)) = rest.split_once(": ") {
                job = name.trim().to_string();
            }
        } else if let Some(rest) = line.strip_prefix("run ") {
            let device = rest
                .split_once(": ")
                .and_then(|(_, text)| text.split_once(" on "))
                .and_then(|(_, text)| text.split(',').next());
            if let Some(device) = device {
                runs.push(RunLabel { job: job.clone(), device: device.trim().to_string() });
            }
        }
    }
    runs
}

/// One function's instructions in one account (a block's count is spread evenly over its
/// instructions, so a row can hold a fraction).
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionRow {
    pub function: String,
    pub account: &'static str,
    pub instructions: f64,
}

/// The profile of one device and job (all its runs).
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub device: String,
    pub job: String,
    pub runs: usize,
    pub ios: u64,
    /// Per account of [`ACCOUNT_NAMES`], over all runs.
    pub totals: [i64; 3],
    /// By account, then most instructions first.
    pub rows: Vec<FunctionRow>,
    /// `frame;frame;...` (root first, after device, job and account) → instructions.
    pub stacks: BTreeMap<String, f64>,
}

impl Profile {
    /// Instructions per I/O of an account total or a row.
    pub fn per_io(&self, instructions: f64) -> f64 {
        if self.ios == 0 {
            0.0
        } else {
            instructions / self.ios as f64
        }
    }

    /// The flat table: per account, the functions with their instructions per I/O and share of
    /// the account, small ones summed in one row, and the account's total.
    pub fn table(&self) -> String {
        let width = self.rows.iter().map(|row| row.function.chars().count()).max().unwrap_or(8).clamp(8, 100);
        let mut text = format!(
            "profile of {} {}: {} I/Os in {} run{}, instructions per I/O by function\n",
            self.device,
            self.job,
            self.ios,
            self.runs,
            if self.runs == 1 { "" } else { "s" }
        );
        for (index, account) in ACCOUNT_NAMES.iter().enumerate() {
            let total = self.totals[index] as f64;
            if total == 0.0 && index == 2 {
                continue;
            }
            let _ = writeln!(text, "  {:<width$}  {:>10}  {:>6}", account, "instr/IO", "share");
            let mut other = (0usize, 0.0);
            for row in self.rows.iter().filter(|row| row.account == *account) {
                let share = share_percent(row.instructions, total);
                if share.abs() < SMALL_SHARE_PERCENT {
                    other = (other.0 + 1, other.1 + row.instructions);
                    continue;
                }
                let name: String = row.function.chars().take(width).collect();
                let _ = writeln!(
                    text,
                    "  {name:<width$}  {:>10.1}  {share:>5.1}%",
                    self.per_io(row.instructions)
                );
            }
            if other.0 > 0 {
                let name = format!("({} functions under {SMALL_SHARE_PERCENT} % each)", other.0);
                let _ = writeln!(
                    text,
                    "  {name:<width$}  {:>10.1}  {:>5.1}%",
                    self.per_io(other.1),
                    share_percent(other.1, total)
                );
            }
            let _ = writeln!(
                text,
                "  {:<width$}  {:>10.1}  100.0%",
                format!("{account} total"),
                self.per_io(total)
            );
        }
        text
    }

    /// Folded stacks (`device;job;account;frame;...;function count`), one line per stack.
    pub fn folded(&self) -> String {
        let mut text = String::new();
        for (stack, count) in &self.stacks {
            let count = count.round() as i64;
            if count > 0 {
                let _ = writeln!(text, "{};{};{stack} {count}", self.device, self.job);
            }
        }
        text
    }

    /// The file name of this profile's folded stacks beside `file`: `FILE-nvme0-randread-4k-1.folded`.
    pub fn folded_path(&self, file: &Path) -> PathBuf {
        let clean = |text: &str| -> String {
            text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect()
        };
        let stem = file.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        file.with_file_name(format!("{stem}-{}-{}.folded", clean(&self.device), clean(&self.job)))
    }
}

fn share_percent(part: f64, whole: f64) -> f64 {
    if whole == 0.0 {
        0.0
    } else {
        part * 100.0 / whole
    }
}

/// Groups the plugin's runs by the log's device and job and names their code: the table's rows
/// by the function each instruction's source belongs to (the innermost inlined one that is not
/// Rust's library, from `inline`; else the ELF symbol), the stacks by the calls and then the
/// inlined functions. Records beyond the log's runs (or runs beyond the records) are left out.
pub fn build_profiles(
    records: &[RunRecord],
    labels: &[RunLabel],
    symbols: &KernelSymbols,
    inline: &InlineFrames,
) -> Vec<Profile> {
    // Every run reports the call-tree nodes it saw first; later runs refer to earlier ones.
    let mut nodes: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
    let mut profiles: Vec<Profile> = Vec::new();
    let mut rows: Vec<BTreeMap<(usize, String), f64>> = Vec::new();
    for (record, label) in records.iter().zip(labels) {
        for node in &record.nodes {
            nodes.insert(node.id, (node.parent, node.function));
        }
        let profile_index = match profiles.iter().position(|p| p.device == label.device && p.job == label.job)
        {
            Some(index) => index,
            None => {
                profiles.push(Profile {
                    device: label.device.clone(),
                    job: label.job.clone(),
                    runs: 0,
                    ios: 0,
                    totals: [0; 3],
                    rows: Vec::new(),
                    stacks: BTreeMap::new(),
                });
                rows.push(BTreeMap::new());
                profiles.len() - 1
            }
        };
        let profile = &mut profiles[profile_index];
        let rows = &mut rows[profile_index];
        profile.runs += 1;
        profile.ios += record.ios;
        for slot in &record.slots {
            let calls = stack_names(slot.node, &nodes, symbols);
            let length = slot.block_instructions.max(1);
            for (account, &count) in slot.counts.iter().enumerate() {
                if count == 0 {
                    continue;
                }
                profile.totals[account] += count;
                let share = count as f64 / f64::from(length);
                for offset in 0..u64::from(length) {
                    let address = slot.block_start + offset * INSTRUCTION_BYTES;
                    let symbol = [symbols.name_of(address)];
                    let frames = inline.at(address).unwrap_or(&symbol);
                    let row = frames.iter().rev().find(|name| !is_library(name)).unwrap_or(&symbol[0]);
                    *rows.entry((account, row.clone())).or_default() += share;
                    let mut stack = String::from(ACCOUNT_NAMES[account]);
                    for frame in &calls {
                        stack.push(';');
                        stack.push_str(frame);
                    }
                    // The outermost inlined frame is the function the call went to.
                    let skip = usize::from(calls.last() == frames.first());
                    for frame in &frames[skip..] {
                        stack.push(';');
                        stack.push_str(frame);
                    }
                    *profile.stacks.entry(stack).or_default() += share;
                }
            }
        }
    }
    for (profile, rows) in profiles.iter_mut().zip(rows) {
        profile.rows = rows
            .into_iter()
            .map(|((account, function), instructions)| FunctionRow {
                function,
                account: ACCOUNT_NAMES[account],
                instructions,
            })
            .collect();
        profile.rows.sort_by(|a, b| {
            let account = |row: &FunctionRow| ACCOUNT_NAMES.iter().position(|name| *name == row.account);
            account(a)
                .cmp(&account(b))
                .then(b.instructions.total_cmp(&a.instructions))
                .then(a.function.cmp(&b.function))
        });
    }
    profiles
}

/// The names of a call-tree node's functions, root first (frames named like `;` would be
/// misread by flame-graph tools, so a `;` in a name becomes `,`).
fn stack_names(mut node: u32, nodes: &BTreeMap<u32, (u32, u64)>, symbols: &KernelSymbols) -> Vec<String> {
    let mut frames = Vec::new();
    while node != 0 {
        let Some(&(parent, function)) = nodes.get(&node) else { break };
        frames.push(symbols.name_of(function).replace(';', ","));
        node = parent;
    }
    frames.reverse();
    frames
}

/// Reads the plugin's records.
pub fn read_records(path: &Path) -> Result<Vec<RunRecord>, ProfileError> {
    let error = |reason: String| ProfileError::Records { path: path.to_path_buf(), reason };
    let text = fs::read_to_string(path).map_err(|source| error(source.to_string()))?;
    format::parse(&text).map_err(|source| error(source.to_string()))
}

/// Writes every profile's folded stacks to `file` and each one's to its own file beside it;
/// returns the paths written.
pub fn write_folded(profiles: &[Profile], file: &Path) -> Result<Vec<PathBuf>, ProfileError> {
    let write = |path: &Path, text: &str| {
        fs::write(path, text).map_err(|source| ProfileError::Write { path: path.to_path_buf(), source })
    };
    if let Some(parent) = file.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        fs::create_dir_all(parent)
            .map_err(|source| ProfileError::Write { path: parent.to_path_buf(), source })?;
    }
    let all: String = profiles.iter().map(Profile::folded).collect();
    write(file, &all)?;
    let mut written = vec![file.to_path_buf()];
    for profile in profiles {
        let path = profile.folded_path(file);
        write(&path, &profile.folded())?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profiler::format::{NodeRecord, SlotRecord};

    fn symbols() -> KernelSymbols {
        KernelSymbols::from_functions(&[
            (0x1000, 0x1100, "bench::run_loop::RunLoop::run"),
            (0x2000, 0x2100, "drivers::nvme::NvmeDevice::submit"),
            (0x3000, 0x3010, "bench::cpu_cost::CpuMeter::lap"),
            (0x3200, 0x3220, "bench::cpu_cost::run_metered"),
        ])
    }

    fn record(ios: u64, submit: i64, run: i64, nodes: bool) -> RunRecord {
        RunRecord {
            ios,
            laps: 10,
            meter_instructions: 100,
            nodes: if nodes {
                vec![
                    NodeRecord { id: 1, parent: 0, function: 0x1000 },
                    NodeRecord { id: 2, parent: 1, function: 0x2000 },
                ]
            } else {
                Vec::new()
            },
            slots: vec![
                SlotRecord { node: 2, block_start: 0x2010, block_instructions: 1, counts: [submit, 0, 0] },
                SlotRecord { node: 1, block_start: 0x1040, block_instructions: 2, counts: [0, run, 0] },
            ],
        }
    }

    #[test]
    fn the_meters_functions_become_the_plugins_arguments() {
        let options = symbols().plugin_options(Path::new("build/raw.txt")).unwrap();
        assert_eq!((options.lap.clone(), options.run_end), (0x3000..0x3010, 0x3200));
        let missing = KernelSymbols::from_functions(&[(0x1000, 0x1100, "main")]);
        let error = missing.plugin_options(Path::new("x")).unwrap_err();
        assert!(error.to_string().contains("no function bench::cpu_cost::CpuMeter::lap"), "{error}");
        assert_eq!(symbols().name_of(0x2050), "drivers::nvme::NvmeDevice::submit");
        assert_eq!(symbols().name_of(0x2100), "0x2100");
        assert_eq!(
            elf_for_kernel(Path::new("build/kernel-virt.img")),
            PathBuf::from("build/kernel-virt.elf")
        );
        let missing_plugin = plugin_arguments(Path::new("/nonexistent/plugin.so"), &options).unwrap_err();
        assert!(missing_plugin.to_string().contains("make profiler"), "{missing_plugin}");
    }

    #[test]
    fn runs_are_named_by_the_log_in_order() {
        let log =
            "job 1/2: randread:4k:1\nrun 1/1: randread 4k qd1 on nvme0, region 8m at offset 0, ramp 0s\n\
                   run 1/1: randread 4k qd1 on sd0, region 8m\njob 2/2: read:1m:16\n\
                   run 1/1: read 1m qd16 on nvme0, region 8m\n";
        let runs = runs_in_log(log);
        let pairs: Vec<(&str, &str)> = runs.iter().map(|r| (r.job.as_str(), r.device.as_str())).collect();
        assert_eq!(pairs, [("randread:4k:1", "nvme0"), ("randread:4k:1", "sd0"), ("read:1m:16", "nvme0")]);
    }

    #[test]
    fn profiles_sum_runs_per_device_and_job_and_name_every_frame() {
        let labels = [
            RunLabel { job: "randread:4k:1".into(), device: "nvme0".into() },
            RunLabel { job: "randread:4k:1".into(), device: "nvme0".into() },
        ];
        let profiles = build_profiles(
            &[record(10, 300, 100, true), record(20, 600, 200, false)],
            &labels,
            &symbols(),
            &InlineFrames::default(),
        );
        assert_eq!(profiles.len(), 1);
        let profile = &profiles[0];
        assert_eq!((profile.runs, profile.ios, profile.totals), (2, 30, [900, 300, 0]));
        assert_eq!(profile.per_io(profile.totals[0] as f64), 30.0);
        assert_eq!(
            profile.folded(),
            "nvme0;randread:4k:1;bookkeeping;bench::run_loop::RunLoop::run 300\n\
             nvme0;randread:4k:1;driver;bench::run_loop::RunLoop::run;drivers::nvme::NvmeDevice::submit 900\n"
        );
        let table = profile.table();
        assert!(table.contains("30 I/Os in 2 runs"), "{table}");
        assert!(
            table.lines().any(|line| line.contains("drivers::nvme::NvmeDevice::submit")
                && line.contains("30.0")
                && line.ends_with("100.0%")),
            "{table}"
        );
        assert!(table.contains("bookkeeping total"), "{table}");
        assert!(!table.contains("recording"), "an empty recording account is left out:\n{table}");
        assert_eq!(
            profile.folded_path(Path::new("build/nvme.folded")),
            PathBuf::from("build/nvme.folded-nvme0-randread-4k-1.folded")
        );
    }

    #[test]
    fn inlined_functions_name_the_rows_and_extend_the_stacks() {
        // What llvm-symbolizer says about the loop's two instructions at 0x1040 and 0x1044.
        let inline = InlineFrames::parse(
            "{\"Address\":\"0x1040\",\"Symbol\":[{\"FunctionName\":\"_ZN4core3ptr5write17h0123456789abcdefE\"},\
             {\"FunctionName\":\"_ZN5bench5stats11Accumulator6record17h0123456789abcdefE\"},\
             {\"FunctionName\":\"_ZN5bench8run_loop7RunLoop3run17h0123456789abcdefE\"}]}\n\
             {\"Address\":\"0x1044\",\"Symbol\":[{\"FunctionName\":\"_ZN5bench8run_loop7RunLoop3run17h0123456789abcdefE\"}]}\n",
        );
        let labels = [RunLabel { job: "j".into(), device: "d".into() }];
        let profile = &build_profiles(&[record(1, 10, 100, true)], &labels, &symbols(), &inline)[0];
        let bookkeeping: Vec<(&str, f64)> = profile
            .rows
            .iter()
            .filter(|row| row.account == "bookkeeping")
            .map(|row| (row.function.as_str(), row.instructions))
            .collect();
        // Rust's library inlined into the kernel's code counts as the kernel function's.
        assert_eq!(
            bookkeeping,
            [("bench::run_loop::RunLoop::run", 50.0), ("bench::stats::Accumulator::record", 50.0)]
        );
        assert!(profile.folded().contains(
            "d;j;bookkeeping;bench::run_loop::RunLoop::run;bench::stats::Accumulator::record;core::ptr::write 50\n"
        ));
        assert!(is_library("<usize as core::slice::index::SliceIndex<[T]>>::index_mut"));
        assert!(is_library("<alloc::vec::Vec<T,A> as core::ops::deref::Deref>::deref"));
        assert!(!is_library("<kernel::runtime::timer::KernelTimer as blockdev::Clock>::now_ticks"));
        assert!(!is_library("bench::histogram::bucket_index"));
        assert!(is_library("<u64>::checked_add"));
        assert!(!is_library("<bench::wide::U256>::add"));
    }

    #[test]
    fn small_functions_share_one_row_and_the_shares_add_up() {
        let mut record = record(1, 1000, 10, true);
        record.slots.push(SlotRecord {
            node: 1,
            block_start: 0x1050,
            block_instructions: 1,
            counts: [2, 0, 0],
        });
        let labels = [RunLabel { job: "j".into(), device: "d".into() }];
        let profile = &build_profiles(&[record], &labels, &symbols(), &InlineFrames::default())[0];
        let table = profile.table();
        assert!(table.contains("(1 functions under 1 % each)"), "{table}");
        assert!(
            table.lines().any(|line| line.contains("driver total") && line.contains("1002.0")),
            "{table}"
        );
    }
}
