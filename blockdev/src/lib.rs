//! The block interface between storage drivers and the benchmark (docs/architecture.md, "The block interface").
//!
//! A driver exposes its data path through [`BlockDevice`]: `geometry()`, `submit()` (queue without
//! starting), `kick()` (one doorbell for everything submitted) and `poll()` (never blocks, moves
//! finished requests out). Control operations (reset, identify, queue creation, card bring-up,
//! clock switching) are methods of the concrete drivers, not of this interface.
//!
//! Time is read through [`Clock`], so the same benchmark code runs against the ARM generic timer
//! in the kernel and against a simulated clock in host tests.
#![no_std]
#![forbid(unsafe_code)]

pub mod blocking;
pub mod crc32;
pub mod marker;
pub mod pattern;
pub mod pattern_region;
pub mod scratch;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// A memory range that a device may read or write by DMA.
///
/// `cpu_address` is where the CPU sees the bytes (identity-mapped in the kernel, so it equals the
/// physical address there); `physical_address` is the CPU physical address. A driver turns the
/// physical address into a bus address with its own translation (the Pi's SD and PCIe DMA see RAM
/// at an offset), never by assuming they are equal.
///
/// It only names memory: nothing here reads or writes it. Whoever makes one promises that it
/// names memory a device may use by DMA (drivers program their devices with it, and the SD
/// hosts' PIO paths write it); the CPU reaches that memory through `drivers::dma::DmaRegion`,
/// whose volatile copies never make a Rust reference into bytes a device may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaBuffer {
    pub cpu_address: usize,
    pub physical_address: u64,
    pub length_bytes: usize,
}

impl DmaBuffer {
    /// The sub-range `[offset_bytes, offset_bytes + length_bytes)`, or `None` when it does not fit.
    pub fn slice(&self, offset_bytes: usize, length_bytes: usize) -> Option<DmaBuffer> {
        let end = offset_bytes.checked_add(length_bytes)?;
        if end > self.length_bytes {
            return None;
        }
        Some(DmaBuffer {
            cpu_address: self.cpu_address + offset_bytes,
            physical_address: self.physical_address + offset_bytes as u64,
            length_bytes,
        })
    }
}

/// What a request does. Writes exist only as an explicit opt-in for a region made for them; the
/// benchmark refuses them otherwise and drivers may answer [`SubmitError::Unsupported`].
///
/// Four bytes wide, so that a [`Request`] has no odd run of padding: with a one-byte operation
/// the seven padding bytes after it made every move of a request a call to `memcpy` (about 40
/// instructions per 4 KiB read, docs/measurement.md §18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Operation {
    Read,
    Write,
    /// Make every completed write durable (NVMe Flush, NVM Command Set 1.0 §3.2; an SD card's
    /// cache flush). Carries no data: `block_count` is 0 and the buffer is not used.
    Flush,
}

/// What a flush does on a device ([`BlockDevice::flush_support`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushSupport {
    /// The device takes a flush command ([`Operation::Flush`]).
    Command,
    /// The device has no enabled volatile write cache: a completed write is already durable,
    /// so there is nothing to flush and no command is sent. The text says why, for the console.
    NoCache(&'static str),
}

/// One request: `block_count` logical blocks starting at `lba`, into or out of `buffer`.
///
/// `tag` is the submitter's own identifier, handed back unchanged in the [`Completion`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub tag: u32,
    pub operation: Operation,
    pub lba: u64,
    pub block_count: u32,
    pub buffer: DmaBuffer,
}

/// The shape of a device as its driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Size of one logical block (the unit of `lba` and `block_count`).
    pub logical_block_bytes: u32,
    /// Number of logical blocks on the device.
    pub block_count: u64,
    /// Largest `block_count` one request may have. Drivers split larger transfers into several
    /// commands themselves (NVMe MDTS, SD's 65535-block count), so this is the caller's limit,
    /// not the hardware's.
    pub max_request_blocks: u32,
    /// How many requests may be in flight at once (1 for an SD host without command queueing,
    /// queue size − 1 for an NVMe queue pair).
    pub max_in_flight: u32,
}

impl Geometry {
    pub fn capacity_bytes(&self) -> u64 {
        self.block_count * u64::from(self.logical_block_bytes)
    }
}

/// Why a request failed after it was accepted. The benchmark counts errors by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoErrorKind {
    /// The device did not answer within its timeout.
    Timeout,
    /// A CRC or end-bit error on the bus (SD).
    Crc,
    /// The device reported a failure status (NVMe status code, SD card status error bits).
    DeviceStatus,
    /// A DMA or transfer error reported by the host controller.
    Transfer,
    /// The completion could not be trusted (unknown command identifier, impossible queue head).
    Protocol,
    /// The medium could not give the data back (NVMe status code type 2, Media and Data
    /// Integrity Errors, e.g. Unrecovered Read Error: NVMe Base Specification 2.0 §4.2.3.2.3).
    Media,
    /// The device stopped answering as a device: its registers read as all ones (removed,
    /// or its link is down), so the request can never complete.
    DeviceGone,
}

impl IoErrorKind {
    pub const ALL: [IoErrorKind; 7] = [
        IoErrorKind::Timeout,
        IoErrorKind::Crc,
        IoErrorKind::DeviceStatus,
        IoErrorKind::Transfer,
        IoErrorKind::Protocol,
        IoErrorKind::Media,
        IoErrorKind::DeviceGone,
    ];

    /// A short, stable name for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            IoErrorKind::Timeout => "timeout",
            IoErrorKind::Crc => "crc",
            IoErrorKind::DeviceStatus => "device-status",
            IoErrorKind::Transfer => "transfer",
            IoErrorKind::Protocol => "protocol",
            IoErrorKind::Media => "media",
            IoErrorKind::DeviceGone => "device-gone",
        }
    }

    /// The Linux errno a block layer would hand fio for this failure (`blk_status_to_errno` in
    /// Linux's block/blk-core.c: BLK_STS_TIMEOUT is ETIMEDOUT, BLK_STS_MEDIUM ENODATA, a
    /// vanished device ENODEV, anything else, an SD CRC error too, EIO): fio's `first_error`
    /// (docs/fio-json.md §2).
    pub fn linux_errno(self) -> u32 {
        match self {
            IoErrorKind::Timeout => 110,
            IoErrorKind::Media => 61,
            IoErrorKind::DeviceGone => 19,
            IoErrorKind::Crc | IoErrorKind::DeviceStatus | IoErrorKind::Transfer | IoErrorKind::Protocol => 5,
        }
    }

    /// Position in [`IoErrorKind::ALL`], for fixed-size counters.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A failed request: the kind, plus a driver-specific code (an NVMe status word, SDHCI error
/// interrupt bits) that the driver's own messages explain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} (code {:#x})", .kind.name(), .code)]
pub struct IoError {
    pub kind: IoErrorKind,
    pub code: u32,
}

/// A finished request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub tag: u32,
    pub result: Result<(), IoError>,
}

impl Default for Completion {
    fn default() -> Self {
        Completion { tag: 0, result: Ok(()) }
    }
}

/// What a driver can say about the command that carried a request, for per-command traces:
/// the queue, the command's identifier in it, and for NVMe the submission queue head the
/// completion reported (NVMe 1.4 §4.6, completion queue entry DW2). A request split into several
/// commands is described by the last one to complete. An SD host has one queue (0) and one
/// command slot (0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandDetail {
    pub queue_id: u16,
    pub command_id: u16,
    pub sq_head: Option<u16>,
}

/// Why `submit` handed a request back without queueing it. Nothing was sent to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// `max_in_flight` requests (or the driver's command slots) are in use; poll and retry.
    QueueFull,
    /// The range `lba .. lba + block_count` is not inside the device.
    OutOfRange,
    /// `block_count` is zero or above `max_request_blocks`.
    BadLength,
    /// The buffer is shorter than the transfer or not aligned as the driver needs.
    BadBuffer,
    /// The operation is not allowed on this device (writes without an explicit opt-in).
    Unsupported,
    /// The device is gone or could not be recovered after a failure; it takes no more requests.
    DeviceUnusable,
}

impl SubmitError {
    pub fn name(self) -> &'static str {
        match self {
            SubmitError::QueueFull => "queue full",
            SubmitError::OutOfRange => "beyond the end of the device",
            SubmitError::BadLength => "bad length",
            SubmitError::BadBuffer => "buffer too small or misaligned",
            SubmitError::Unsupported => "operation not allowed",
            SubmitError::DeviceUnusable => "the device is gone or was not recovered",
        }
    }
}

/// Checks that a request fits the geometry; drivers call it before building any command.
pub fn check_request(geometry: &Geometry, request: &Request) -> Result<(), SubmitError> {
    if request.operation == Operation::Flush {
        return if request.block_count == 0 { Ok(()) } else { Err(SubmitError::BadLength) };
    }
    if request.block_count == 0 || request.block_count > geometry.max_request_blocks {
        return Err(SubmitError::BadLength);
    }
    let end = request.lba.checked_add(u64::from(request.block_count)).ok_or(SubmitError::OutOfRange)?;
    if end > geometry.block_count {
        return Err(SubmitError::OutOfRange);
    }
    let bytes = u64::from(request.block_count) * u64::from(geometry.logical_block_bytes);
    if (request.buffer.length_bytes as u64) < bytes {
        return Err(SubmitError::BadBuffer);
    }
    Ok(())
}

/// How a driver moved the data of the commands it issued, counted since it was set up. A run
/// takes the difference over its window, so that what it measured is said even when some
/// requests did not go the way the device's mode line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataPath {
    /// How data moves when it can go the intended way (`"ADMA2 (32-bit)"`, `"PIO"`).
    pub mode: &'static str,
    /// Commands issued with data (each part of a split request counts).
    pub commands: u64,
    /// Of those, commands whose data went by PIO although the device was set up for DMA (the
    /// buffer was one the DMA engine cannot use).
    pub pio_fallbacks: u64,
}

impl DataPath {
    /// What happened between `earlier` and `self` (same device).
    pub fn since(&self, earlier: &DataPath) -> DataPath {
        DataPath {
            mode: self.mode,
            commands: self.commands.saturating_sub(earlier.commands),
            pio_fallbacks: self.pio_fallbacks.saturating_sub(earlier.pio_fallbacks),
        }
    }
}

/// A storage device's data path.
pub trait BlockDevice {
    /// The device's name as the console and the command line use it (`sd0`, `nvme0`).
    fn name(&self) -> &str;

    fn geometry(&self) -> Geometry;

    /// Queues a request without starting it. On refusal the request comes back with the reason;
    /// a refusal never reaches the device. An accepted request's buffer belongs to the driver
    /// (and its device's DMA) until its completion comes back from [`BlockDevice::poll`]: the
    /// submitter neither touches nor frees it meanwhile.
    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)>;

    /// Starts everything submitted since the last kick (one doorbell write for the batch).
    fn kick(&mut self);

    /// Moves finished requests into `completions` and returns how many. Never blocks; a driver
    /// whose hardware needs the CPU to move data (SD PIO) does that work here.
    fn poll(&mut self, completions: &mut [Completion]) -> usize;

    /// Whether [`Operation::Flush`] requests go to the device. The default is a device that
    /// takes no writes at all, so it has nothing to flush.
    fn flush_support(&self) -> FlushSupport {
        FlushSupport::NoCache("the driver takes no writes")
    }

    /// How the data moved so far, for drivers that can move it more than one way (an SD host
    /// with ADMA2 falls back to PIO for a buffer ADMA2 cannot use); `None` for the others.
    fn data_path(&self) -> Option<DataPath> {
        None
    }

    /// How many failures the driver counted but did not describe on the console since the last
    /// call (drivers describe the first few of each run and count the rest); the call starts
    /// the count and the description allowance anew. The runner calls it when a run starts
    /// and when it ends.
    fn take_unreported_failures(&mut self) -> u64 {
        0
    }

    /// [`BlockDevice::poll`], and for each completion `i` the command that carried it in
    /// `details[i]` (`details` at least as long as `completions`). Used only while a trace
    /// records; a driver that knows nothing more keeps this default (queue 0, command 0).
    fn poll_detailed(&mut self, completions: &mut [Completion], details: &mut [CommandDetail]) -> usize {
        let count = self.poll(completions);
        details[..count].fill(CommandDetail::default());
        count
    }
}

/// A monotonic time source: the ARM generic timer in the kernel, a simulated clock in tests.
pub trait Clock {
    /// The counter now (`CNTPCT_EL0` in the kernel).
    fn now_ticks(&self) -> u64;

    /// The counter frequency (`CNTFRQ_EL0` in the kernel).
    fn ticks_per_second(&self) -> u64;

    /// Whether [`Clock::now_ticks`] reads the generic timer's counter and nothing else (CNTPCT,
    /// `hal::counter::generic_counter_ticks`), so that a caller that reads the clock on every I/O
    /// (the benchmark's timestamps) may read that register inline instead of calling through a
    /// trait object: the same readings. `false` (the default): call `now_ticks`.
    fn is_generic_counter(&self) -> bool {
        false
    }

    /// Converts a tick count to nanoseconds without overflow for any realistic duration.
    fn ticks_to_ns(&self, ticks: u64) -> u64 {
        ticks_to_ns(ticks, self.ticks_per_second())
    }

    /// Converts nanoseconds to ticks, rounding up so that a wait is never shorter than asked.
    fn ns_to_ticks(&self, ns: u64) -> u64 {
        let frequency = u128::from(self.ticks_per_second());
        ((u128::from(ns) * frequency).div_ceil(1_000_000_000)) as u64
    }

    fn now_ns(&self) -> u64 {
        self.ticks_to_ns(self.now_ticks())
    }
}

/// `ticks × 10⁹ / frequency` in 128-bit arithmetic (exact, truncating).
pub fn ticks_to_ns(ticks: u64, ticks_per_second: u64) -> u64 {
    if ticks_per_second == 0 {
        return 0;
    }
    (u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_second)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry { logical_block_bytes: 512, block_count: 1000, max_request_blocks: 256, max_in_flight: 1 }
    }

    fn request(lba: u64, block_count: u32, buffer_bytes: usize) -> Request {
        Request {
            tag: 7,
            operation: Operation::Read,
            lba,
            block_count,
            buffer: DmaBuffer { cpu_address: 0x1000, physical_address: 0x1000, length_bytes: buffer_bytes },
        }
    }

    #[test]
    fn request_checks_refuse_what_does_not_fit() {
        let g = geometry();
        assert_eq!(check_request(&g, &request(0, 1, 512)), Ok(()));
        assert_eq!(check_request(&g, &request(999, 1, 512)), Ok(()));
        assert_eq!(check_request(&g, &request(1000, 1, 512)), Err(SubmitError::OutOfRange));
        assert_eq!(check_request(&g, &request(999, 2, 1024)), Err(SubmitError::OutOfRange));
        assert_eq!(check_request(&g, &request(u64::MAX, 1, 512)), Err(SubmitError::OutOfRange));
        assert_eq!(check_request(&g, &request(0, 0, 512)), Err(SubmitError::BadLength));
        assert_eq!(check_request(&g, &request(0, 257, 257 * 512)), Err(SubmitError::BadLength));
        assert_eq!(check_request(&g, &request(0, 2, 1000)), Err(SubmitError::BadBuffer));
        let flush = Request { operation: Operation::Flush, block_count: 0, ..request(0, 0, 0) };
        assert_eq!(check_request(&g, &flush), Ok(()));
        assert_eq!(check_request(&g, &Request { block_count: 1, ..flush }), Err(SubmitError::BadLength));
    }

    #[test]
    fn buffer_slices_stay_inside() {
        let b = DmaBuffer { cpu_address: 0x1000, physical_address: 0x8000_1000, length_bytes: 4096 };
        let s = b.slice(512, 1024).unwrap();
        assert_eq!((s.cpu_address, s.physical_address, s.length_bytes), (0x1200, 0x8000_1200, 1024));
        assert!(b.slice(4096, 1).is_none());
        assert!(b.slice(usize::MAX, 2).is_none());
        assert_eq!(b.slice(4096, 0).unwrap().length_bytes, 0);
    }

    struct FixedClock(u64, u64);
    impl Clock for FixedClock {
        fn now_ticks(&self) -> u64 {
            self.0
        }
        fn ticks_per_second(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn tick_conversions_at_each_board_frequency() {
        // 19.2 MHz (Pi 3), 54 MHz (Pi 4/5), 62.5 MHz (QEMU), 1 GHz (QEMU -cpu max).
        assert_eq!(FixedClock(19_200_000, 19_200_000).now_ns(), 1_000_000_000);
        assert_eq!(FixedClock(54, 54_000_000).now_ns(), 1_000);
        assert_eq!(FixedClock(1, 62_500_000).now_ns(), 16);
        assert_eq!(FixedClock(0, 1).ns_to_ticks(1), 1);
        assert_eq!(FixedClock(0, 62_500_000).ns_to_ticks(17), 2); // rounds up
        assert_eq!(FixedClock(0, 54_000_000).ns_to_ticks(1_000_000), 54_000);
        // A day at 1 GHz does not overflow.
        assert_eq!(ticks_to_ns(86_400 * 1_000_000_000, 1_000_000_000), 86_400 * 1_000_000_000);
        assert_eq!(ticks_to_ns(5, 0), 0);
    }

    #[test]
    fn data_path_differences_count_what_happened_in_between() {
        let before = DataPath { mode: "ADMA2 (32-bit)", commands: 10, pio_fallbacks: 1 };
        let after = DataPath { mode: "ADMA2 (32-bit)", commands: 25, pio_fallbacks: 4 };
        assert_eq!(after.since(&before), DataPath { mode: "ADMA2 (32-bit)", commands: 15, pio_fallbacks: 3 });
        // A device reset in between never makes a negative count.
        assert_eq!(before.since(&after).commands, 0);
    }

    #[test]
    fn error_kind_indices_match_the_table() {
        for (i, kind) in IoErrorKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i);
        }
    }
}
