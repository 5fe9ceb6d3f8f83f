//! The storage devices the kernel found, with the names the console and the command line use
//! (`sd0`, `sd1`, … in discovery order, then `nvme0`, `nvme1`, … one per namespace, then `usb0`,
//! `usb1`, … one per USB drive), the `crc=DEV:LBA:COUNT` and `verify=DEV:LBA:COUNT` integrity
//! checks, and the sample of the benchmark's region before the first run, which read through the
//! block interface ([`crate::block_checks`]), and the controllers whose registers `regs=DEV`
//! prints again after the last run.
#![forbid(unsafe_code)]

use super::platform::KernelPlatform;
use crate::block_checks::{crc_of_blocks, read_checked, sample_region, verify_blocks, CheckFailure};
use crate::kernel_settings::{BlockRange, KernelSettings};
use crate::println;
use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use bench::results::RegionSample;
use blockdev::{BlockDevice, DmaBuffer};
use core::cell::{RefCell, RefMut};
use drivers::snapshot::RegisterSnapshot;
use hal::platform::Platform;

/// The kind of device, which decides its name prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    Sd,
    Nvme,
    Usb,
}

impl DeviceClass {
    pub fn prefix(self) -> &'static str {
        match self {
            DeviceClass::Sd => "sd",
            DeviceClass::Nvme => "nvme",
            DeviceClass::Usb => "usb",
        }
    }
}

pub struct StorageDevice {
    pub class: DeviceClass,
    pub device: Box<dyn BlockDevice>,
    /// What `device` wraps when it is a [`SharedDevice`]: the benchmark borrows it once for all
    /// its runs ([`StorageDevice::lend`]) instead of once per submit, kick and poll.
    pub shared: Option<Rc<RefCell<dyn BlockDevice>>>,
    /// How the device says deallocated blocks read (NVMe Identify Namespace DLFEAT), in words.
    pub deallocated_read: Option<&'static str>,
}

impl StorageDevice {
    /// The device for the benchmark, a shared one borrowed until the loan is dropped: one
    /// `RefCell` borrow and one call level less per submit, kick and poll (about 50 instructions
    /// per NVMe read, docs/measurement.md §18). Nothing else touches the device meanwhile: one
    /// core, and its counters are read after the benchmark.
    pub fn lend(&mut self) -> LentDevice<'_> {
        match &self.shared {
            Some(shared) => LentDevice::Shared(shared.borrow_mut()),
            None => LentDevice::Own(self.device.as_mut()),
        }
    }
}

/// A device lent to the benchmark ([`StorageDevice::lend`]).
pub enum LentDevice<'a> {
    Own(&'a mut dyn BlockDevice),
    Shared(RefMut<'a, dyn BlockDevice>),
}

impl LentDevice<'_> {
    pub fn device(&mut self) -> &mut dyn BlockDevice {
        match self {
            LentDevice::Own(device) => &mut **device,
            LentDevice::Shared(device) => &mut **device,
        }
    }
}

/// Every usable storage device, in naming order.
#[derive(Default)]
pub struct Storage {
    devices: Vec<StorageDevice>,
    next_sd: u32,
    next_nvme: u32,
    next_usb: u32,
    shutdown_hooks: Vec<Box<dyn FnOnce()>>,
    /// (device, its controller) for the JSON's board facts, e.g. ("sd0", "BCM2835 sdhost at 0x20202000").
    controllers: Vec<(String, String)>,
    /// `regs=DEV`: each device's register reader, for the snapshot after the last run.
    register_readers: Vec<(String, Box<dyn Fn() -> RegisterSnapshot>)>,
}

/// Prints a register snapshot of `device` (its controller) under a heading saying when it was taken.
pub fn print_registers(device: &str, when: &str, snapshot: &RegisterSnapshot) {
    println!("regs       {device} {when}");
    for register in snapshot.lines() {
        println!("regs       {device}   {register}");
    }
}

impl Storage {
    /// The name the next device of `class` gets; call it once per device, right before building
    /// the driver (empty SD controllers get no name).
    pub fn next_name(&mut self, class: DeviceClass) -> String {
        let counter = match class {
            DeviceClass::Sd => &mut self.next_sd,
            DeviceClass::Nvme => &mut self.next_nvme,
            DeviceClass::Usb => &mut self.next_usb,
        };
        let name = alloc::format!("{}{}", class.prefix(), counter);
        *counter += 1;
        name
    }

    pub fn add(&mut self, class: DeviceClass, device: Box<dyn BlockDevice>) {
        self.devices.push(StorageDevice { class, device, shared: None, deallocated_read: None });
    }

    /// Adds a device that other code holds too (for its counters at the end).
    pub fn add_shared<D: BlockDevice + 'static>(&mut self, class: DeviceClass, device: SharedDevice<D>) {
        let shared: Rc<RefCell<dyn BlockDevice>> = device.inner.clone();
        let device = Box::new(device);
        self.devices.push(StorageDevice { class, device, shared: Some(shared), deallocated_read: None });
    }

    /// Records how the device named `name` says deallocated blocks read.
    pub fn set_deallocated_read(&mut self, name: &str, description: &'static str) {
        if let Some(entry) = self.find_mut(name) {
            entry.deallocated_read = Some(description);
        }
    }

    /// Records which controller a device sits behind, for the JSON.
    pub fn set_controller(&mut self, device: &str, controller: String) {
        self.controllers.push((String::from(device), controller));
    }

    pub fn controllers(&self) -> &[(String, String)] {
        &self.controllers
    }

    /// Registers work for the end of the run (an NVMe controller's normal shutdown).
    pub fn on_shutdown(&mut self, hook: Box<dyn FnOnce()>) {
        self.shutdown_hooks.push(hook);
    }

    /// Keeps a way to read the registers of `device`'s controller again after the last run.
    pub fn watch_registers(&mut self, device: &str, read: Box<dyn Fn() -> RegisterSnapshot>) {
        self.register_readers.push((String::from(device), read));
    }

    /// The `regs=` snapshots after the last run (before any controller is shut down).
    pub fn print_registers_after_runs(&self) {
        for (device, read) in &self.register_readers {
            print_registers(device, "after the last run", &read());
        }
    }

    /// Runs the shutdown hooks, in reverse order of registration.
    pub fn shut_down(&mut self) {
        while let Some(hook) = self.shutdown_hooks.pop() {
            hook();
        }
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn devices(&self) -> &[StorageDevice] {
        &self.devices
    }

    pub fn devices_mut(&mut self) -> &mut [StorageDevice] {
        &mut self.devices
    }

    pub fn find_mut(&mut self, name: &str) -> Option<&mut StorageDevice> {
        self.devices.iter_mut().find(|d| d.device.name() == name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.devices.iter().map(|d| d.device.name())
    }
}

/// Bytes read per request by the checks.
const CHECK_CHUNK_BYTES: usize = 1 << 20;

/// What a block check computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckKind {
    Crc,
    Verify,
}

/// Runs every `crc=` and `verify=` request. Prints `crc DEV LBA COUNT 0xXXXXXXXX` or
/// `verify DEV LBA COUNT ok` for each success and a message naming the failure otherwise.
/// Returns whether all succeeded.
pub fn run_block_checks(settings: &KernelSettings, storage: &mut Storage, platform: &KernelPlatform) -> bool {
    if settings.crc_requests.is_empty() && settings.verify_requests.is_empty() {
        return true;
    }
    let buffer = match platform.allocate_dma(CHECK_CHUNK_BYTES, 4096) {
        Ok(buffer) => buffer,
        Err(error) => {
            println!("crc/verify: {error}; no check runs");
            return false;
        }
    };
    let checks = settings
        .crc_requests
        .iter()
        .map(|r| (CheckKind::Crc, r))
        .chain(settings.verify_requests.iter().map(|r| (CheckKind::Verify, r)));
    let mut all_passed = true;
    for (kind, request) in checks {
        let label = match kind {
            CheckKind::Crc => "crc",
            CheckKind::Verify => "verify",
        };
        let BlockRange { device, lba, block_count } = request;
        let result = match storage.find_mut(device) {
            Some(entry) => match kind {
                CheckKind::Crc => crc_of_blocks(entry.device.as_mut(), platform, buffer, *lba, *block_count)
                    .map(|crc| alloc::format!("{crc:#010x}")),
                CheckKind::Verify => {
                    verify_blocks(entry.device.as_mut(), platform, buffer, *lba, *block_count)
                        .map(|()| String::from("ok"))
                }
            },
            None => Err(CheckFailure::NoSuchDevice),
        };
        match result {
            Ok(text) => println!("{label} {device} {lba} {block_count} {text}"),
            Err(CheckFailure::NoSuchDevice) => {
                all_passed = false;
                let known: Vec<&str> = storage.names().collect();
                let known = if known.is_empty() { String::from("none") } else { known.join(", ") };
                println!("{label} {device} {lba} {block_count}: no such device (devices: {known})");
            }
            Err(failure) => {
                all_passed = false;
                println!("{label} {device} {lba} {block_count}: {failure}");
            }
        }
    }
    all_passed
}

/// A device's region sample, by name.
pub struct SampledRegion {
    pub device_name: String,
    pub sample: RegionSample,
    pub deallocated_read: Option<&'static str>,
}

/// Reads a few blocks spread over each selected device's benchmark region (the same region on
/// every device, fitted to it as the benchmark does) before the first run; a read that fails is
/// named on the console.
pub fn sample_regions(
    config: &bench::settings::Config,
    storage: &mut Storage,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
) -> Vec<SampledRegion> {
    let mut samples = Vec::new();
    for entry in storage.devices_mut() {
        let name = String::from(entry.device.name());
        let geometry = entry.device.geometry();
        let Some(region) =
            bench::plan::device_region(config, &geometry, &name).filter(|_| config.selects_device(&name))
        else {
            continue;
        };
        let (sample, failure) = sample_region(entry.device.as_mut(), platform, buffer, region);
        if let Some(failure) = failure {
            println!("{name}: region sample stopped after {} reads: {failure}", sample.reads);
        }
        samples.push(SampledRegion { device_name: name, sample, deallocated_read: entry.deallocated_read });
    }
    samples
}

/// Looks for a pattern region (`blockdev::pattern_region`) on each device the benchmark runs
/// and prints what it finds; returns each device's region as its readable bytes, which the
/// benchmark reads inside and `check=auto` verifies.
pub fn scan_pattern_regions(
    config: &bench::settings::Config,
    storage: &mut Storage,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
) -> Vec<(String, bench::region::Region)> {
    use blockdev::pattern_region::{scan, Finding};
    let mut regions = Vec::new();
    let Some(buffer) = buffer.slice(0, buffer.length_bytes.min(65_536)) else {
        return regions;
    };
    for entry in storage.devices_mut() {
        let name = String::from(entry.device.name());
        if !config.selects_device(&name) {
            continue;
        }
        let mut block = alloc::vec![0u8; entry.device.geometry().logical_block_bytes as usize];
        let mut reader = ScanReader { device: entry.device.as_mut(), platform, buffer };
        let mut found = Vec::new();
        if let Err(error) = scan(&mut reader, &mut block, &mut |finding| found.push(finding)) {
            println!("{name:<10} pattern scan stopped: {error}");
        }
        for finding in found {
            match finding {
                Finding::Region(region) if regions.iter().all(|(device, _)| *device != name) => {
                    let (offset_bytes, size_bytes) = region.readable();
                    println!("{name:<10} {region}: the benchmark reads inside it");
                    regions.push((name.clone(), bench::region::Region { offset_bytes, size_bytes }));
                }
                Finding::Region(region) => println!("{name:<10} {region}: not used (the first one is)"),
                Finding::Refused { partition_number, reason } => {
                    println!("{name:<10} partition {partition_number}: not a pattern region: {reason}")
                }
            }
        }
    }
    regions
}

/// A block device shared between the storage registry (the block interface) and the code that
/// reads its counters at the end (an NVMe namespace, a USB drive). One core, no interrupts: the
/// borrows never overlap.
pub struct SharedDevice<D> {
    name: String,
    inner: Rc<RefCell<D>>,
}

impl<D> Clone for SharedDevice<D> {
    fn clone(&self) -> Self {
        SharedDevice { name: self.name.clone(), inner: alloc::rc::Rc::clone(&self.inner) }
    }
}

impl<D: BlockDevice> SharedDevice<D> {
    pub fn new(device: D) -> Self {
        SharedDevice {
            name: String::from(device.name()),
            inner: alloc::rc::Rc::new(core::cell::RefCell::new(device)),
        }
    }

    /// The device itself, for its counters.
    pub fn borrow(&self) -> core::cell::Ref<'_, D> {
        self.inner.borrow()
    }
}

impl<D: BlockDevice> BlockDevice for SharedDevice<D> {
    fn name(&self) -> &str {
        &self.name
    }

    fn geometry(&self) -> blockdev::Geometry {
        self.inner.borrow().geometry()
    }

    fn submit(
        &mut self,
        request: blockdev::Request,
    ) -> Result<(), (blockdev::Request, blockdev::SubmitError)> {
        self.inner.borrow_mut().submit(request)
    }

    fn kick(&mut self) {
        self.inner.borrow_mut().kick()
    }

    fn poll(&mut self, completions: &mut [blockdev::Completion]) -> usize {
        self.inner.borrow_mut().poll(completions)
    }

    fn poll_detailed(
        &mut self,
        completions: &mut [blockdev::Completion],
        details: &mut [blockdev::CommandDetail],
    ) -> usize {
        self.inner.borrow_mut().poll_detailed(completions, details)
    }

    fn data_path(&self) -> Option<blockdev::DataPath> {
        self.inner.borrow().data_path()
    }

    fn take_unreported_failures(&mut self) -> u64 {
        self.inner.borrow_mut().take_unreported_failures()
    }

    fn flush_support(&self) -> blockdev::FlushSupport {
        self.inner.borrow().flush_support()
    }
}

/// A device's scratch region, found by the scan of its partition tables.
pub struct FoundRegion {
    pub device_name: String,
    pub region: blockdev::scratch::ScratchRegion,
}

/// Reads a device one logical block at a time for the scratch and pattern-region scans, through
/// [`read_checked`].
struct ScanReader<'a> {
    device: &'a mut dyn BlockDevice,
    platform: &'a KernelPlatform,
    buffer: DmaBuffer,
}

impl blockdev::scratch::BlockReader for ScanReader<'_> {
    type Error = CheckFailure;
    fn block_bytes(&self) -> u32 {
        self.device.geometry().logical_block_bytes
    }
    fn block_count(&self) -> u64 {
        self.device.geometry().block_count
    }
    fn read_block(&mut self, lba: u64, out: &mut [u8]) -> Result<(), CheckFailure> {
        // The scan refuses blocks larger than the 64 KiB buffer before reading any.
        let buffer = self.buffer.slice(0, out.len()).ok_or(CheckFailure::OutOfRange { block_count: 1 })?;
        read_checked(self.device, self.platform, buffer, lba, 1, |bytes| out.copy_from_slice(bytes))
    }
}

/// Scans the partition tables of the devices `write=` names for scratch regions, prints what
/// it finds (regions and refused markers, each naming its partition) and returns the regions.
/// Devices not named are not read.
pub fn scan_scratch_regions(
    config: &bench::settings::Config,
    storage: &mut Storage,
    platform: &KernelPlatform,
) -> Vec<FoundRegion> {
    let mut regions = Vec::new();
    if config.write_devices.is_empty() {
        return regions;
    }
    let buffer = match platform.allocate_dma(65_536, 4096) {
        Ok(buffer) => buffer,
        Err(error) => {
            println!("scratch    {error}; no device is scanned, nothing is written");
            return regions;
        }
    };
    for name in &config.write_devices {
        let Some(entry) = storage.find_mut(name) else {
            println!("scratch    write={name}: no such device; nothing is written to it");
            continue;
        };
        scan_device(name, entry.device.as_mut(), platform, buffer, &mut regions);
    }
    regions
}

fn scan_device(
    name: &str,
    device: &mut dyn BlockDevice,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
    regions: &mut Vec<FoundRegion>,
) {
    use blockdev::scratch::Finding;
    let mut block = alloc::vec![0u8; device.geometry().logical_block_bytes as usize];
    let mut reader = ScanReader { device, platform, buffer };
    let mut found = Vec::new();
    let scanned = blockdev::scratch::scan(&mut reader, &mut block, &mut |finding| found.push(finding));
    for finding in &found {
        println!("{name:<10} {finding}");
        if let (Finding::Region(region), true) = (finding, regions.iter().all(|r| r.device_name != name)) {
            regions.push(FoundRegion { device_name: String::from(name), region: *region });
        }
    }
    if let Err(error) = scanned {
        println!("{name:<10} scratch scan stopped: {error}");
    }
    if regions.iter().all(|r| r.device_name != name) {
        println!(
            "{name:<10} no scratch region (no MBR or GPT partition starts with a valid \
             BAREBENCHSCRATCH marker): write and mixed jobs are skipped on it"
        );
    } else if found.iter().filter(|f| matches!(f, Finding::Region(_))).count() > 1 {
        println!("{name:<10} more than one scratch region: write jobs use the first");
    }
}
