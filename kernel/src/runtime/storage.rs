//! The storage devices the kernel found, with the names the console and the command line use
//! (`sd0`, `sd1`, … in discovery order, then `nvme0`, `nvme1`, … one per namespace), and the
//! `crc=DEV:LBA:COUNT` and `verify=DEV:LBA:COUNT` integrity checks that read through the block
//! interface.

use super::platform::KernelPlatform;
use crate::cmdline::{BlockRange, KernelSettings};
use crate::println;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::crc32::Crc32;
use blockdev::{BlockDevice, Completion, DmaBuffer, Operation, Request};
use drivers::platform::Platform;

/// The kind of device, which decides its name prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    Sd,
    Nvme,
}

impl DeviceClass {
    pub fn prefix(self) -> &'static str {
        match self {
            DeviceClass::Sd => "sd",
            DeviceClass::Nvme => "nvme",
        }
    }
}

pub struct StorageDevice {
    pub class: DeviceClass,
    pub device: Box<dyn BlockDevice>,
}

/// Every usable storage device, in naming order.
#[derive(Default)]
pub struct Storage {
    devices: Vec<StorageDevice>,
    next_sd: u32,
    next_nvme: u32,
    shutdown_hooks: Vec<Box<dyn FnOnce()>>,
    /// (device, its controller) for the JSON's board facts, e.g. ("sd0", "BCM2835 sdhost at 0x20202000").
    controllers: Vec<(String, String)>,
}

impl Storage {
    /// The name the next device of `class` gets; call it once per device, right before building
    /// the driver (empty SD controllers get no name).
    pub fn next_name(&mut self, class: DeviceClass) -> String {
        let counter = match class {
            DeviceClass::Sd => &mut self.next_sd,
            DeviceClass::Nvme => &mut self.next_nvme,
        };
        let name = alloc::format!("{}{}", class.prefix(), counter);
        *counter += 1;
        name
    }

    pub fn add(&mut self, class: DeviceClass, device: Box<dyn BlockDevice>) {
        self.devices.push(StorageDevice { class, device });
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
/// How long one chunk may take before a check gives up on the device.
const CHECK_CHUNK_TIMEOUT_US: u64 = 30_000_000;

/// Why a CRC check could not be completed.
#[derive(Debug)]
pub enum CheckFailure {
    NoSuchDevice,
    OutOfRange { block_count: u64 },
    NoBuffer(drivers::platform::DmaAllocationError),
    Refused(blockdev::SubmitError),
    Failed { lba: u64, error: blockdev::IoError },
    Timeout { lba: u64 },
    Mismatch { byte_offset: u64 },
}

impl core::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CheckFailure::NoSuchDevice => write!(f, "no such device"),
            CheckFailure::OutOfRange { block_count } => {
                write!(f, "range is beyond the end of the device ({block_count} blocks); nothing was read")
            }
            CheckFailure::NoBuffer(error) => write!(f, "{error}"),
            CheckFailure::Refused(error) => write!(f, "request refused: {}", error.name()),
            CheckFailure::Failed { lba, error } => write!(f, "read at LBA {lba} failed: {error}"),
            CheckFailure::Timeout { lba } => {
                write!(f, "read at LBA {lba} did not complete in time")
            }
            CheckFailure::Mismatch { byte_offset } => {
                write!(f, "MISMATCH: first differing byte at device offset {byte_offset}")
            }
        }
    }
}

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

/// CRC-32 of `block_count` logical blocks from `lba`, read one chunk at a time.
pub fn crc_of_blocks(
    device: &mut dyn BlockDevice,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
) -> Result<u32, CheckFailure> {
    let mut crc = Crc32::new();
    for_each_chunk(device, platform, buffer, lba, block_count, |_, bytes| crc.update(bytes))?;
    Ok(crc.finish())
}

/// Reads the range and compares every byte with the test pattern (`blockdev::pattern`).
pub fn verify_blocks(
    device: &mut dyn BlockDevice,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
) -> Result<(), CheckFailure> {
    let block_bytes = u64::from(device.geometry().logical_block_bytes);
    let mut mismatch = None;
    for_each_chunk(device, platform, buffer, lba, block_count, |chunk_lba, bytes| {
        if mismatch.is_none() {
            if let Some(offset) = blockdev::pattern::first_mismatch(chunk_lba * block_bytes, bytes) {
                mismatch = Some(chunk_lba * block_bytes + offset as u64);
            }
        }
    })?;
    match mismatch {
        None => Ok(()),
        Some(byte_offset) => Err(CheckFailure::Mismatch { byte_offset }),
    }
}

/// Reads `block_count` blocks from `lba` through `buffer`, one chunk at a time, and hands each
/// chunk's LBA and bytes to `consume`. The range is checked before anything is read.
fn for_each_chunk(
    device: &mut dyn BlockDevice,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
    mut consume: impl FnMut(u64, &[u8]),
) -> Result<(), CheckFailure> {
    let geometry = device.geometry();
    let end = lba.checked_add(block_count).filter(|end| *end <= geometry.block_count);
    if end.is_none() {
        return Err(CheckFailure::OutOfRange { block_count: geometry.block_count });
    }
    let block_bytes = u64::from(geometry.logical_block_bytes);
    let chunk_blocks =
        (buffer.length_bytes as u64 / block_bytes).min(u64::from(geometry.max_request_blocks)).max(1);
    let mut next = lba;
    let mut remaining = block_count;
    while remaining > 0 {
        let blocks = remaining.min(chunk_blocks);
        let bytes = (blocks * block_bytes) as usize;
        let chunk =
            buffer.slice(0, bytes).ok_or(CheckFailure::OutOfRange { block_count: geometry.block_count })?;
        read_blocking(device, platform, chunk, next, blocks as u32)?;
        platform.invalidate_for_cpu(&chunk);
        // SAFETY: the read completed, so no device writes the chunk; it is pool memory owned here.
        consume(next, unsafe { chunk.as_bytes() });
        next += blocks;
        remaining -= blocks;
    }
    Ok(())
}

/// One read through the block interface, waiting for its completion (bounded).
pub fn read_blocking(
    device: &mut dyn BlockDevice,
    platform: &KernelPlatform,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u32,
) -> Result<(), CheckFailure> {
    const TAG: u32 = 0x0c8c_0001;
    let request = Request { tag: TAG, operation: Operation::Read, lba, block_count, buffer };
    device.submit(request).map_err(|(_, error)| CheckFailure::Refused(error))?;
    device.kick();
    let deadline = drivers::platform::Deadline::after_us(platform, CHECK_CHUNK_TIMEOUT_US);
    let mut completions = [Completion::default(); 4];
    loop {
        let finished = device.poll(&mut completions);
        if let Some(completion) = completions[..finished].iter().find(|c| c.tag == TAG) {
            return completion.result.map_err(|error| CheckFailure::Failed { lba, error });
        }
        if deadline.has_passed(platform) {
            return Err(CheckFailure::Timeout { lba });
        }
        core::hint::spin_loop();
    }
}
