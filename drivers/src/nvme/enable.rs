//! Enabling and disabling the controller: the admin queue handed over with CC.EN = 1, CC.EN = 0,
//! and the waits for CSTS.RDY to follow, reported while they last (NVMe Base Specification 1.4
//! §7.6.1 initialization, §7.6.2 reset; docs/nvme-and-fio.md §1.2).
#![forbid(unsafe_code)]

use super::error::{NvmeError, ReadyWait};
use super::events::{Event, EventSink};
use super::regs::{self, offsets, Capabilities, CC, CSTS};
use super::ring::QueueMemory;
use hal::barrier;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// Used instead of CAP.TO × 500 ms when a controller reports TO = 0.
pub const MINIMUM_READY_TIMEOUT_MS: u64 = 500;
fn ready_timeout_ms(capabilities: &Capabilities) -> u64 {
    capabilities.ready_timeout_ms().max(MINIMUM_READY_TIMEOUT_MS)
}

/// A controller state wait says so every this often (CAP.TO allows up to 127.5 s; drives behind
/// a Pi's PCIe have taken 20 s: docs/pcie-brcmstb.md §8).
pub const READY_WAIT_REPORT_MS: u64 = 2000;

/// Where a long controller state wait is reported.
#[derive(Clone, Copy)]
pub(crate) struct WaitReporter<'a> {
    pub(crate) events: &'a dyn EventSink,
    pub(crate) label: &'a str,
}

/// Waits until CSTS.RDY matches `waiting_for`; CFS ends an enable wait at once. Every
/// [`READY_WAIT_REPORT_MS`] the wait is reported.
fn wait_ready<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
    capabilities: &Capabilities,
    waiting_for: ReadyWait,
    waits: WaitReporter<'_>,
) -> Result<(), NvmeError> {
    let want_ready = waiting_for == ReadyWait::Enabled;
    let timeout_ms = ready_timeout_ms(capabilities);
    let deadline = Deadline::after_us(platform, timeout_ms * 1000);
    let mut reported_ms = 0;
    loop {
        let status = registers.read(regs::CSTS);
        let csts = status.get();
        if want_ready && status.is_set(CSTS::CFS) {
            return Err(NvmeError::FatalStatus {
                cap: capabilities.raw,
                cc: registers.read(regs::CC).get(),
                csts,
            });
        }
        if status.is_set(CSTS::RDY) == want_ready {
            return Ok(());
        }
        if deadline.has_passed(platform) {
            return Err(NvmeError::NotReady {
                waiting_for,
                waited_ms: deadline.elapsed_us(platform) / 1000,
                cap: capabilities.raw,
                cc: registers.read(regs::CC).get(),
                csts,
            });
        }
        let waited_ms = deadline.elapsed_us(platform) / 1000;
        if waited_ms >= reported_ms + READY_WAIT_REPORT_MS {
            reported_ms = waited_ms;
            waits
                .events
                .report(waits.label, &Event::StillWaiting { ready: want_ready, waited_ms, timeout_ms });
        }
        core::hint::spin_loop();
    }
}

/// Hands the controller its admin queue (AQA, ASQ, ACQ) and enables it (CC.EN = 1, waiting for
/// CSTS.RDY; NVMe 1.4 §7.6.1 steps 3-5), polled only (INTMS masks every vector).
pub(crate) fn enable_with_admin_queue<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
    capabilities: &Capabilities,
    queue: &QueueMemory<'_>,
    waits: WaitReporter<'_>,
) -> Result<(), NvmeError> {
    // The zeroed admin CQ must be in memory (no dirty line left to overwrite the controller's
    // entries) before CC.EN hands it over; the store barrier orders the zeroing before that
    // register write, as before a doorbell.
    platform.clean_for_device(&queue.completion.region.buffer());
    registers.write32(offsets::AQA, regs::admin_queue_attributes(queue.entries, queue.entries));
    registers.write64(offsets::ASQ, queue.submission.bus_address);
    registers.write64(offsets::ACQ, queue.completion.bus_address);
    barrier::store_before_doorbell();
    registers.write32(offsets::CC, regs::enable_configuration(capabilities.mpsmin));
    wait_ready(registers, platform, capabilities, ReadyWait::Enabled, waits)?;
    // Polled only: mask every pin-based/MSI vector at the controller too (INTMS, NVMe 1.4
    // §3.1.3; legal because MSI-X is never enabled), besides IEN = 0 on every CQ.
    registers.write32(offsets::INTMS, u32::MAX);
    Ok(())
}

/// Brings the controller to CC.EN = 0, CSTS.RDY = 0 (docs/nvme-and-fio.md §1.2 step 2): a controller
/// left enabled but not yet ready is first given its time to become ready, because EN must not
/// change while RDY differs from it.
pub(crate) fn disable<R: RegisterIo, P: Platform>(
    registers: &R,
    platform: &P,
    capabilities: &Capabilities,
    waits: WaitReporter<'_>,
) -> Result<(), NvmeError> {
    let mut cc = registers.read(regs::CC);
    let csts = registers.read(regs::CSTS);
    if cc.is_set(CC::EN) {
        if !csts.is_set(CSTS::RDY) && !csts.is_set(CSTS::CFS) {
            // If it never gets there, clearing EN below is still the way out; the RDY = 0 wait
            // then reports what the controller did.
            let _ = wait_ready(registers, platform, capabilities, ReadyWait::Enabled, waits);
        }
        cc.modify(CC::EN::CLEAR);
        registers.write_value(regs::CC, cc);
    }
    wait_ready(registers, platform, capabilities, ReadyWait::Disabled, waits)
}
