//! NVMe controller bring-up and control over the admin queue (NVMe Base Specification 1.4 §7.6.1
//! "Initialization", §7.6.2 "Shutdown"; docs/nvme-and-fio.md §1.2-1.6 and §1.10): disable with the
//! CAP.TO timeout, admin queue pair, enable, Identify Controller and Namespaces, Set Features
//! Number of Queues, creation of polled I/O queue pairs, an optional host memory buffer (`hmb`),
//! and the normal shutdown (CC.SHN), which takes the host memory buffer back first.

use super::admin::{AdminChannel, QueueRecord, SharedAdmin, ADMIN_COMMAND_TIMEOUT_MS};
use super::command::{
    allocated_queue_counts, cns, CompletionEntry, SubmissionEntry, COMPLETION_ENTRY_BYTES,
    SUBMISSION_ENTRY_BYTES,
};
use super::enable::{disable, enable_with_admin_queue, WaitReporter};
use super::error::{NamespaceProblem, NvmeError};
use super::events::EventSink;
use super::hmb::{self, HmbOutcome, HostMemoryBuffer};
use super::identify::{
    active_namespace_ids, ControllerIdentity, NamespaceIdentity, ACTIVE_LIST_ENTRIES, IDENTIFY_BYTES,
};
use super::io_queue::{IoQueuePair, QueuePairSetup};
use super::prp;
use super::regs::{self, offsets, Capabilities, Version, CC, CSTS};
use super::ring::QueueMemory;
use super::status::{code_type, generic};
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::fmt;
use hal::dma::{DmaAllocation, DmaRegion};
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Deadline, Platform};

/// Admin queue entries (both queues). Commands are issued one at a time, so a small queue is
/// plenty; SPDK uses 256 only because it pipelines admin commands (docs/nvme-and-fio.md §2.1).
pub const ADMIN_QUEUE_ENTRIES: u32 = 32;
/// How long an I/O command may take before it is aborted, unless `nvme.timeout-ms=` says
/// otherwise: far beyond any healthy read (a slow SSD's worst reads take tens of ms) and well
/// inside Linux's 30 s `nvme_core.io_timeout`, so a stuck drive costs a run seconds, not minutes.
pub const DEFAULT_IO_TIMEOUT_MS: u64 = 5_000;
/// Shutdown waits at least this long, or RTD3E if longer (SPDK after spdk/spdk#676, where 5 s
/// was too short for a virtual controller: docs/nvme-and-fio.md §1.10).
pub const MINIMUM_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;
/// The largest transfer the driver puts in one command, whatever MDTS allows: it sizes each
/// command's PRP list memory (4 MiB = 1024 entries in three chained 4 KiB list pages).
pub const DRIVER_MAX_COMMAND_BYTES: u64 = 4 << 20;
/// The fallback walk over namespace identifiers stops here when CNS 02h is not supported.
pub const MAX_PROBED_NAMESPACES: u32 = 1024;
/// Smallest I/O queue (one command in flight).
pub const MIN_QUEUE_ENTRIES: u32 = 2;
/// NLB is 16 bits, 0-based (NVMe 1.4 §6.9).
pub const MAX_BLOCKS_PER_COMMAND: u64 = 65536;

/// What Set Features Number of Queues gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueGrant {
    pub requested: u16,
    pub submission_queues: u32,
    pub completion_queues: u32,
}

impl QueueGrant {
    /// Queue pairs the driver may create.
    pub fn usable_pairs(&self) -> u16 {
        self.submission_queues.min(self.completion_queues).min(u32::from(self.requested)) as u16
    }
}

/// The depth an I/O queue pair gets, and why it differs from the one asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DepthChoice {
    pub requested: u32,
    pub entries: u32,
}

impl DepthChoice {
    /// Clamps `requested` entries to `[2, CAP.MQES + 1]` (NVMe 1.4 §3.1.1 MQES, §4.1).
    pub fn new(requested: u32, capabilities: &Capabilities) -> Self {
        DepthChoice { requested, entries: requested.clamp(MIN_QUEUE_ENTRIES, capabilities.max_queue_entries) }
    }

    pub fn was_clamped(&self) -> bool {
        self.entries != self.requested
    }
}

/// The message for a clamped depth.
impl fmt::Display for DepthChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requested > self.entries {
            write!(
                f,
                "queue depth {} is more than the controller allows (CAP.MQES + 1 = {}); using {}",
                self.requested, self.entries, self.entries
            )
        } else if self.requested < self.entries {
            write!(
                f,
                "queue depth {} is below the minimum of {}; using {}",
                self.requested, self.entries, self.entries
            )
        } else {
            write!(f, "queue depth {}", self.entries)
        }
    }
}

/// How the shutdown went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    pub waited_us: u64,
    pub queues_deleted: u16,
    /// The first queue deletion that failed (the shutdown goes on regardless).
    pub deletion_error: Option<NvmeError>,
}

/// One NVMe controller after bring-up, with its admin queue (shared with its I/O queue pairs for
/// their recovery: [`AdminChannel`]).
pub struct Controller<'p, R: RegisterIo + Clone, P: Platform> {
    registers: R,
    register_bytes: usize,
    platform: &'p P,
    dma: BusTranslation,
    events: &'p dyn EventSink,
    label: String,
    capabilities: Capabilities,
    version: Version,
    page_bytes: usize,
    admin: SharedAdmin<'p, R, P>,
    identify_buffer: DmaRegion<'p>,
    identity: ControllerIdentity,
    granted_pairs: u16,
    created_queue_ids: Vec<u16>,
    io_timeout_us: u64,
    shut_down: bool,
    host_memory_buffer: Option<HostMemoryBuffer<'p>>,
}

impl<'p, R: RegisterIo + Clone, P: Platform> Controller<'p, R, P> {
    /// Resets and enables the controller and identifies it (NVMe 1.4 §7.6.1 steps 1-6).
    /// `register_bytes` is BAR0's size; `dma` is how the controller sees RAM; `label` names the
    /// controller in reports.
    pub fn bring_up(
        registers: R,
        register_bytes: usize,
        platform: &'p P,
        dma: BusTranslation,
        events: &'p dyn EventSink,
        label: String,
    ) -> Result<Self, NvmeError> {
        let cap = registers.read64(offsets::CAP);
        if cap == u64::MAX {
            return Err(NvmeError::NoController { cap });
        }
        let capabilities = Capabilities::decode(cap);
        let version = Version(registers.read32(offsets::VS));
        if !capabilities.nvm_command_set {
            return Err(NvmeError::NoNvmCommandSet { cap });
        }
        let admin_doorbells_end = regs::completion_doorbell(0, capabilities.doorbell_stride_bytes) + 4;
        if register_bytes < admin_doorbells_end {
            return Err(NvmeError::RegistersTooSmall { register_bytes, needed_bytes: admin_doorbells_end });
        }
        // The smallest page the controller allows (4 KiB on every controller seen so far).
        let page_bytes = capabilities.page_min_bytes;
        let waits = WaitReporter { events, label: &label };
        disable(&registers, platform, &capabilities, waits)?;

        let allocate = |bytes: usize| DmaAllocation::new(platform, &dma, bytes, page_bytes);
        let submission = allocate(ADMIN_QUEUE_ENTRIES as usize * SUBMISSION_ENTRY_BYTES)?;
        let completion = allocate(ADMIN_QUEUE_ENTRIES as usize * COMPLETION_ENTRY_BYTES)?;
        let admin_queue = QueueMemory { submission, completion, entries: ADMIN_QUEUE_ENTRIES };
        let identify_buffer = allocate(IDENTIFY_BYTES.max(page_bytes))?.region;

        enable_with_admin_queue(&registers, platform, &capabilities, &admin_queue, waits)?;
        let admin =
            AdminChannel::new(registers.clone(), platform, events, label.clone(), capabilities, admin_queue);
        let mut controller = Controller {
            registers,
            register_bytes,
            platform,
            dma,
            events,
            label,
            capabilities,
            version,
            page_bytes,
            admin: Rc::new(RefCell::new(admin)),
            identify_buffer,
            identity: ControllerIdentity::parse(&[0u8; IDENTIFY_BYTES]),
            granted_pairs: 0,
            created_queue_ids: Vec::new(),
            io_timeout_us: DEFAULT_IO_TIMEOUT_MS * 1000,
            shut_down: false,
            host_memory_buffer: None,
        };
        let data = controller.identify(cns::CONTROLLER, 0)?;
        controller.identity = ControllerIdentity::parse(&data);
        if !controller.identity.supports_standard_entry_sizes() {
            return Err(NvmeError::UnsupportedEntrySizes {
                sqes: controller.identity.sqes,
                cqes: controller.identity.cqes,
            });
        }
        Ok(controller)
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn identity(&self) -> &ControllerIdentity {
        &self.identity
    }

    pub fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// MDTS in bytes (`None` = no limit reported).
    pub fn max_transfer_bytes(&self) -> Option<u64> {
        self.identity.max_transfer_bytes(self.capabilities.page_min_bytes)
    }

    /// The most bytes one command of this driver carries: MDTS, capped by
    /// [`DRIVER_MAX_COMMAND_BYTES`].
    pub fn command_limit_bytes(&self) -> u64 {
        self.max_transfer_bytes().unwrap_or(DRIVER_MAX_COMMAND_BYTES).min(DRIVER_MAX_COMMAND_BYTES)
    }

    /// CSTS now (for reports).
    pub fn status_register(&self) -> u32 {
        self.registers.read32(offsets::CSTS)
    }

    fn identify(&mut self, cns_value: u8, namespace_id: u32) -> Result<[u8; IDENTIFY_BYTES], NvmeError> {
        let buffer = self.identify_buffer.buffer();
        let bus = self.dma.to_bus(buffer.physical_address, IDENTIFY_BYTES as u64)?;
        // Nothing dirty in the cache may later be written back over what the controller writes.
        self.platform.clean_for_device(&buffer);
        self.admin_command(SubmissionEntry::identify(cns_value, namespace_id, bus))?;
        self.platform.invalidate_for_cpu(&buffer);
        let mut data = [0u8; IDENTIFY_BYTES];
        self.identify_buffer.read_bytes(0, &mut data);
        Ok(data)
    }

    /// The active namespaces in identifier order: the Active Namespace ID list (CNS 02h, NVMe
    /// ≥ 1.1), or, when the controller refuses it, every identifier 1..=NN whose NSZE > 0.
    pub fn active_namespaces(&mut self) -> Result<Vec<NamespaceIdentity>, NvmeError> {
        let mut ids = Vec::new();
        let mut listed = false;
        if self.version.at_least(1, 1) || self.version.0 == 0 {
            match self.active_namespace_list() {
                Ok(list) => {
                    ids = list;
                    listed = true;
                }
                Err(NvmeError::AdminFailed { status, .. })
                    if status.is(code_type::GENERIC, generic::INVALID_FIELD)
                        || status.is(code_type::GENERIC, generic::INVALID_OPCODE) => {}
                Err(error) => return Err(error),
            }
        }
        if !listed {
            ids = (1..=self.identity.namespace_count.min(MAX_PROBED_NAMESPACES)).collect();
        }
        let mut namespaces = Vec::new();
        for id in ids {
            let data = self.identify(cns::NAMESPACE, id)?;
            let namespace = NamespaceIdentity::parse(id, &data);
            if namespace.is_active() {
                namespaces.push(namespace);
            }
        }
        Ok(namespaces)
    }

    fn active_namespace_list(&mut self) -> Result<Vec<u32>, NvmeError> {
        let mut ids: Vec<u32> = Vec::new();
        let mut after = 0u32;
        loop {
            let data = self.identify(cns::ACTIVE_NAMESPACE_LIST, after)?;
            let before = ids.len();
            // Identifiers must ascend; anything else would loop forever, so it ends the walk.
            ids.extend(active_namespace_ids(&data).filter(|id| *id > after));
            let added = ids.len() - before;
            match ids.last() {
                Some(&last) if added == ACTIVE_LIST_ENTRIES && last < u32::MAX - 1 => after = last,
                _ => break,
            }
        }
        ids.dedup();
        Ok(ids)
    }

    /// Checks that the driver can read `namespace` and returns its block size.
    pub fn check_namespace(&self, namespace: &NamespaceIdentity) -> Result<u32, NvmeError> {
        let problem = |reason| NvmeError::UnusableNamespace { namespace_id: namespace.namespace_id, reason };
        let format = namespace.format();
        let block_bytes = format.data_bytes().ok_or(problem(NamespaceProblem::InvalidFormat {
            format_index: namespace.format_index,
            data_shift: format.data_shift,
        }))?;
        if format.metadata_bytes != 0 {
            return Err(problem(NamespaceProblem::Metadata { metadata_bytes: format.metadata_bytes }));
        }
        if u64::from(block_bytes) > self.command_limit_bytes() {
            return Err(problem(NamespaceProblem::BlockLargerThanTransfer {
                block_bytes,
                max_transfer_bytes: self.command_limit_bytes(),
            }));
        }
        if namespace.size_blocks == 0 {
            return Err(problem(NamespaceProblem::Empty));
        }
        Ok(block_bytes)
    }

    /// Set Features, Number of Queues (NVMe 1.4 §5.21.1.7): asks for `pairs` I/O queue pairs,
    /// once, before any I/O queue exists.
    pub fn request_io_queues(&mut self, pairs: u16) -> Result<QueueGrant, NvmeError> {
        let pairs = pairs.max(1);
        let completion = self.admin_command(SubmissionEntry::set_number_of_queues(pairs, pairs))?;
        self.admin.borrow_mut().pairs_requested = pairs;
        let (submission_queues, completion_queues) = allocated_queue_counts(completion.command_specific());
        let grant = QueueGrant { requested: pairs, submission_queues, completion_queues };
        self.granted_pairs = grant.usable_pairs();
        Ok(grant)
    }

    /// Creates the next I/O queue pair (CQ first, then SQ: NVMe 1.4 §7.6.1 step 9) with
    /// `depth.entries` entries each, polled (CQ with PC = 1, IEN = 0, IV = 0), reading
    /// `namespace`. `name` is what the pair answers to `BlockDevice::name`.
    pub fn create_io_queue_pair(
        &mut self,
        namespace: &NamespaceIdentity,
        depth: DepthChoice,
        name: String,
    ) -> Result<IoQueuePair<'p, R, P>, NvmeError> {
        let block_bytes = self.check_namespace(namespace)?;
        let queue_id = self.created_queue_ids.len() as u16 + 1;
        if queue_id > self.granted_pairs {
            return Err(NvmeError::NoQueueLeft { granted: self.granted_pairs });
        }
        let stride = self.capabilities.doorbell_stride_bytes;
        let doorbells_end = regs::completion_doorbell(queue_id, stride) + 4;
        if doorbells_end > self.register_bytes {
            return Err(NvmeError::RegistersTooSmall {
                register_bytes: self.register_bytes,
                needed_bytes: doorbells_end,
            });
        }
        let entries = depth.entries.clamp(MIN_QUEUE_ENTRIES, self.capabilities.max_queue_entries);
        let command_bytes = self.command_limit_bytes();
        let max_command_blocks = (command_bytes / u64::from(block_bytes)).min(MAX_BLOCKS_PER_COMMAND) as u32;
        let command_bytes = u64::from(max_command_blocks) * u64::from(block_bytes);
        let list_pages_per_command = prp::worst_case_list_pages(command_bytes as usize, self.page_bytes);
        let page_bytes = self.page_bytes;
        let allocate = |bytes: usize| DmaAllocation::new(self.platform, &self.dma, bytes, page_bytes);
        let completion = allocate(entries as usize * COMPLETION_ENTRY_BYTES)?;
        let submission = allocate(entries as usize * SUBMISSION_ENTRY_BYTES)?;
        let lists = if list_pages_per_command > 0 {
            Some(allocate((entries as usize - 1) * list_pages_per_command * page_bytes)?)
        } else {
            None
        };
        let queue = QueueMemory { submission, completion, entries };
        // As for the admin CQ: in memory before the Create command (whose doorbell comes after
        // the admin ring's store barrier) hands it over.
        self.platform.clean_for_device(&completion.region.buffer());
        self.admin_command(SubmissionEntry::create_io_completion_queue(
            queue_id,
            entries,
            completion.bus_address,
        ))?;
        if let Err(error) = self.admin_command(SubmissionEntry::create_io_submission_queue(
            queue_id,
            entries,
            submission.bus_address,
            queue_id,
        )) {
            // Best effort: the CQ alone is of no use. Its own failure adds nothing to report.
            let _ = self.admin_command(SubmissionEntry::delete_io_completion_queue(queue_id));
            return Err(error);
        }
        self.created_queue_ids.push(queue_id);
        self.admin.borrow_mut().record_queue(QueueRecord { queue_id, memory: queue });
        Ok(IoQueuePair::new(
            QueuePairSetup {
                name,
                queue_id,
                namespace_id: namespace.namespace_id,
                block_bytes,
                block_count: namespace.size_blocks,
                max_command_blocks,
                page_bytes,
                queue,
                lists,
                list_pages_per_command,
                submission_doorbell: regs::submission_doorbell(queue_id, stride),
                completion_doorbell: regs::completion_doorbell(queue_id, stride),
                dma: self.dma,
                command_timeout_us: self.io_timeout_us,
            },
            self.registers.clone(),
            self.platform,
            self.events,
            Some(self.admin.clone()),
        ))
    }

    /// Runs one admin command to completion (bounded by [`ADMIN_COMMAND_TIMEOUT_MS`]).
    fn admin_command(&mut self, entry: SubmissionEntry) -> Result<CompletionEntry, NvmeError> {
        self.admin.borrow_mut().command(entry, ADMIN_COMMAND_TIMEOUT_MS * 1000)
    }

    /// Gives the controller a host memory buffer of up to `limit_mib` (`nvme.hmb=`; `None` gives
    /// none) if it asks for one, from what the DMA pool has left once the I/O queues exist; see
    /// [`hmb`]. Whatever the outcome but [`HmbOutcome::Enabled`], the driver keeps nothing it
    /// allocated here, and only [`HmbOutcome::Refused`] allocated anything (see
    /// [`HmbOutcome::left_memory_unused`]). An error (the admin command did not complete) leaves
    /// the memory taken: the controller may still be using it.
    pub fn set_up_host_memory_buffer(&mut self, limit_mib: Option<u64>) -> Result<HmbOutcome, NvmeError> {
        let request = self.identity.host_memory;
        if !request.offered() {
            return Ok(HmbOutcome::NotOffered);
        }
        let Some(limit_mib) = limit_mib else {
            return Ok(HmbOutcome::Off { request });
        };
        if self.created_queue_ids.is_empty() {
            return Ok(HmbOutcome::BeforeIoQueues);
        }
        let limit_bytes = limit_mib << 20;
        let room_bytes = self.platform.dma_remaining_bytes();
        let plan = match hmb::HmbPlan::new(&request, limit_bytes, room_bytes, self.page_bytes) {
            Ok(plan) => plan,
            Err(available_bytes) => return Ok(HmbOutcome::BelowMinimum { request, available_bytes }),
        };
        let buffer = HostMemoryBuffer::allocate(self.platform, &self.dma, self.page_bytes, &plan)?;
        match self.admin_command(buffer.enable_command(self.page_bytes)) {
            Ok(_) => {}
            Err(NvmeError::AdminFailed { status, .. }) => {
                return Ok(HmbOutcome::Refused { bytes: buffer.taken_bytes(), status });
            }
            Err(error) => {
                // Keep the memory with the controller: it may have taken the command after all.
                self.host_memory_buffer = Some(buffer);
                return Err(error);
            }
        }
        let outcome = HmbOutcome::Enabled { bytes: buffer.bytes, descriptors: buffer.chunks.len() };
        self.host_memory_buffer = Some(buffer);
        Ok(outcome)
    }

    /// The I/O command timeout of the pairs created after this call (`nvme.timeout-ms=`).
    pub fn set_io_timeout_ms(&mut self, timeout_ms: u64) {
        self.io_timeout_us = timeout_ms.saturating_mul(1000);
    }

    /// Controller resets made to recover from timeouts so far.
    pub fn resets(&self) -> u32 {
        self.admin.borrow().resets()
    }

    /// Normal shutdown (NVMe 1.4 §7.6.2): take the host memory buffer back (Set Features 0Dh,
    /// EHM = 0), delete the I/O queues (SQs, then CQs), set CC.SHN = 01b and wait for CSTS.SHST =
    /// 10b, at most max(RTD3E, 10 s). Outstanding commands are abandoned: the run is over. A
    /// failure to take the buffer back or delete a queue is reported but does not stop the
    /// shutdown.
    pub fn shutdown(&mut self) -> Result<ShutdownReport, NvmeError> {
        self.shut_down = true;
        if self.admin.borrow().device_gone() {
            // Nothing would answer: no admin command or CSTS wait is worth its timeout.
            return Err(NvmeError::DeviceGone);
        }
        let mut deletion_error = None;
        if self.host_memory_buffer.take().is_some() {
            if let Err(error) = self.admin_command(hmb::disable_command()) {
                deletion_error = Some(error);
            }
        }
        let mut queues_deleted = 0u16;
        let created = core::mem::take(&mut self.created_queue_ids);
        self.admin.borrow_mut().forget_queues();
        for &queue_id in created.iter().rev() {
            match self.admin_command(SubmissionEntry::delete_io_submission_queue(queue_id)) {
                Ok(_) => queues_deleted += 1,
                Err(error) => {
                    deletion_error.get_or_insert(error);
                }
            }
        }
        for &queue_id in created.iter().rev() {
            if let Err(error) = self.admin_command(SubmissionEntry::delete_io_completion_queue(queue_id)) {
                deletion_error.get_or_insert(error);
            }
        }
        self.registers.modify(regs::CC, CC::SHN::Normal);
        let timeout_ms =
            u64::from(self.identity.rtd3_entry_latency_us).div_ceil(1000).max(MINIMUM_SHUTDOWN_TIMEOUT_MS);
        let deadline = Deadline::after_us(self.platform, timeout_ms * 1000);
        loop {
            let status = self.registers.read(regs::CSTS);
            let csts = status.get();
            if status.matches_all(CSTS::SHST::Complete) {
                return Ok(ShutdownReport {
                    waited_us: deadline.elapsed_us(self.platform),
                    queues_deleted,
                    deletion_error,
                });
            }
            if deadline.has_passed(self.platform) {
                return Err(NvmeError::ShutdownTimeout {
                    waited_ms: deadline.elapsed_us(self.platform) / 1000,
                    cc: self.registers.read(regs::CC).get(),
                    csts,
                });
            }
            core::hint::spin_loop();
        }
    }

    pub fn is_shut_down(&self) -> bool {
        self.shut_down
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::command::admin_opcode;
    use super::super::error::ReadyWait;
    use super::super::events::DiscardEvents;
    use super::super::sim::NvmeArena;
    use super::super::sim::{
        Corruption, Fault, RecordingEvents, SimConfig, SimController, SimNamespace, SimPlatform, BUS_OFFSET,
    };
    use super::*;
    use std::format;
    use std::string::ToString;
    use std::vec;

    const ARENA: usize = 32 << 20;

    fn bring_up<'a>(
        sim: &'a SimController<'a>,
        platform: &'a SimPlatform,
        events: &'a dyn EventSink,
    ) -> Result<Controller<'a, &'a SimController<'a>, SimPlatform>, NvmeError> {
        Controller::bring_up(
            sim,
            sim.register_bytes(),
            platform,
            platform.translation(),
            events,
            "nvme 00:02.0".to_string(),
        )
    }

    #[test]
    fn qemu_like_controller_comes_up_and_identifies() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        assert_eq!(controller.capabilities().max_queue_entries, 2048);
        assert_eq!(format!("{}", controller.version()), "1.4.0");
        let identity = controller.identity();
        assert_eq!(identity.model.as_str(), "QEMU NVMe Ctrl");
        assert_eq!(identity.serial.as_str(), "barebench0");
        assert_eq!(identity.firmware.as_str(), "10.0.2");
        assert_eq!(identity.namespace_count, 256);
        assert_eq!(controller.max_transfer_bytes(), Some(512 << 10));
        let namespaces = controller.active_namespaces().unwrap();
        assert_eq!(namespaces.len(), 1);
        assert_eq!(namespaces[0].namespace_id, 1);
        assert_eq!(namespaces[0].size_bytes(), Some(64 << 20));
        let grant = controller.request_io_queues(2).unwrap();
        assert_eq!(grant.usable_pairs(), 2);
        let (ready, fatal, _) = sim.csts_bits();
        assert!(ready && !fatal);
        sim.assert_no_violations();
    }

    /// A DRAM-less drive: HMPRE 32 MiB, HMMIN 8 MiB, pieces of at least 64 KiB, at most 32.
    fn dram_less() -> SimConfig {
        SimConfig { host_memory: (8192, 2048, 16, 32), ..SimConfig::default() }
    }

    /// The kernel's order: the I/O queues first (here one pair of 64 entries), then the buffer.
    fn with_io_queue<'a>(
        controller: &mut Controller<'a, &'a SimController<'a>, SimPlatform>,
    ) -> IoQueuePair<'a, &'a SimController<'a>, SimPlatform> {
        controller.request_io_queues(1).unwrap();
        let namespace = controller.active_namespaces().unwrap()[0];
        let depth = DepthChoice::new(64, controller.capabilities());
        controller.create_io_queue_pair(&namespace, depth, "nvme0q1".to_string()).unwrap()
    }

    #[test]
    fn a_host_memory_buffer_is_given_as_asked_and_taken_back_at_shutdown() {
        let platform = SimPlatform::for_nvme(64 << 20);
        let sim = SimController::new(&platform, dram_less());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let request = controller.identity().host_memory;
        assert_eq!((request.preferred_bytes, request.minimum_bytes), (32 << 20, 8 << 20));
        assert_eq!(format!("{request}"), "host memory buffer HMPRE 32768 KiB, HMMIN 8192 KiB");
        let _pair = with_io_queue(&mut controller);
        let outcome = controller.set_up_host_memory_buffer(Some(16)).unwrap();
        assert_eq!(outcome, HmbOutcome::Enabled { bytes: 16 << 20, descriptors: 1 });
        assert_eq!(
            format!("{outcome}"),
            "host memory buffer of 16384 KiB given in 1 piece (Set Features 0Dh)"
        );
        let given = sim.statistics().host_memory_buffer.expect("in use");
        assert_eq!(given.len(), 1);
        assert_eq!(given[0].1, 4096, "16 MiB in 4 KiB pages");
        assert!(given[0].0 >= BUS_OFFSET, "descriptors hold bus addresses");
        controller.shutdown().unwrap();
        assert_eq!(sim.statistics().host_memory_buffers_returned, 1);
        sim.assert_no_violations();
    }

    #[test]
    fn the_host_memory_buffer_is_off_by_default_and_below_hmmin_never_given() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, dram_less());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let outcome = controller.set_up_host_memory_buffer(None).unwrap();
        assert!(matches!(outcome, HmbOutcome::Off { .. }));
        assert!(format!("{outcome}").contains("nvme.hmb=off, as Raspberry Pi OS"), "{outcome}");
        let _pair = with_io_queue(&mut controller);
        assert!(matches!(
            controller.set_up_host_memory_buffer(Some(4)).unwrap(),
            HmbOutcome::BelowMinimum { available_bytes: 0x40_0000, .. }
        ));
        assert_eq!(sim.statistics().host_memory_buffer, None);
        controller.shutdown().unwrap();
        // QEMU's controller asks for none.
        let qemu = SimController::new(&platform, SimConfig::default());
        let mut controller = bring_up(&qemu, &platform, &DiscardEvents).expect("bring-up");
        assert_eq!(controller.set_up_host_memory_buffer(Some(64)).unwrap(), HmbOutcome::NotOffered);
        sim.assert_no_violations();
        qemu.assert_no_violations();
    }

    #[test]
    fn a_host_memory_buffer_too_big_for_the_pool_comes_in_pieces_within_hmmaxd() {
        // 24 MiB of arena: what the queues left is less than the 32 MiB allowed (and HMPRE), so
        // the buffer takes what is left in 16 MiB pieces and a smaller last one; HMMAXD 32
        // bounds the list.
        let platform = SimPlatform::for_nvme(24 << 20);
        let sim = SimController::new(&platform, dram_less());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let _pair = with_io_queue(&mut controller);
        let room_before = platform.dma_remaining_bytes();
        match controller.set_up_host_memory_buffer(Some(32)).unwrap() {
            HmbOutcome::Enabled { bytes, descriptors } => {
                assert!((8 << 20..24 << 20).contains(&bytes), "{bytes}");
                assert!(descriptors > 1 && descriptors <= 32, "{bytes} in {descriptors}");
                assert!(room_before - bytes < 3 * 4096, "{room_before} left, {bytes} given");
            }
            other => panic!("{other:?}"),
        }
        let given = sim.statistics().host_memory_buffer.unwrap();
        assert!(given.iter().all(|(_, pages)| *pages >= 16), "{given:?}");
        controller.shutdown().unwrap();
        sim.assert_no_violations();
    }

    #[test]
    fn the_host_memory_buffer_comes_after_the_io_queues() {
        // A buffer allowed to take the whole pool must not leave the I/O queues without memory:
        // asked for before them, none is given; after them it takes what they left.
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, dram_less());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let room_before = platform.dma_remaining_bytes();
        let early = controller.set_up_host_memory_buffer(Some(1024)).unwrap();
        assert_eq!(early, HmbOutcome::BeforeIoQueues);
        assert!(format!("{early}").contains("before the I/O queues"), "{early}");
        assert_eq!(sim.statistics().host_memory_buffer, None);
        assert_eq!(platform.dma_remaining_bytes(), room_before, "nothing taken");
        let _pair = with_io_queue(&mut controller);
        let commands_before_buffer = sim.statistics().admin_commands.len();
        let outcome = controller.set_up_host_memory_buffer(Some(1024)).unwrap();
        assert!(matches!(outcome, HmbOutcome::Enabled { .. }), "{outcome:?}");
        let commands = sim.statistics().admin_commands;
        assert_eq!(commands[commands_before_buffer..], [admin_opcode::SET_FEATURES]);
        let created_at = commands.iter().position(|&op| op == admin_opcode::CREATE_IO_SUBMISSION_QUEUE);
        assert!(created_at.is_some_and(|at| at < commands_before_buffer), "{commands:?}");
        controller.shutdown().unwrap();
        sim.assert_no_violations();
    }

    #[test]
    fn a_pool_short_of_hmmin_loses_nothing_to_the_attempt() {
        // 12 MiB of arena: once the queues took their share, less than HMMIN (8 MiB) is left
        // after the 4 MiB the benchmark would take; the bump allocator never frees, so the
        // attempt must take nothing.
        let platform = SimPlatform::for_nvme(12 << 20);
        let sim = SimController::new(&platform, dram_less());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let _pair = with_io_queue(&mut controller);
        DmaRegion::allocate(&platform, 4 << 20, 4096).unwrap();
        let room_before = platform.dma_remaining_bytes();
        assert!(room_before < 8 << 20, "{room_before}");
        let outcome = controller.set_up_host_memory_buffer(Some(32)).unwrap();
        assert!(matches!(outcome, HmbOutcome::BelowMinimum { .. }), "{outcome:?}");
        assert!(!outcome.left_memory_unused());
        assert_eq!(platform.dma_remaining_bytes(), room_before);
        assert_eq!(sim.statistics().host_memory_buffer, None);
        controller.shutdown().unwrap();
        sim.assert_no_violations();
    }

    #[test]
    fn a_refused_host_memory_buffer_is_reported_unused_and_kept_by_no_one() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim =
            SimController::new(&platform, SimConfig { refuses_host_memory_buffer: true, ..dram_less() });
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).expect("bring-up");
        let _pair = with_io_queue(&mut controller);
        let room_before = platform.dma_remaining_bytes();
        let outcome = controller.set_up_host_memory_buffer(Some(16)).unwrap();
        let HmbOutcome::Refused { bytes, status } = outcome else { panic!("{outcome:?}") };
        assert_eq!(status.code, generic::INVALID_FIELD);
        // Exactly the buffer and its one-page list were taken, all of it after the mark the
        // pool's owner took before the call: it may rewind to that mark.
        assert_eq!(bytes, (16 << 20) + 4096);
        assert_eq!(room_before - platform.dma_remaining_bytes(), bytes);
        assert!(outcome.left_memory_unused());
        assert!(format!("{outcome}").contains("refused 16388 KiB"), "{outcome}");
        controller.shutdown().unwrap();
        assert_eq!(sim.statistics().host_memory_buffers_returned, 0, "nothing to take back");
        sim.assert_no_violations();
    }

    #[test]
    fn admin_queues_are_given_at_bus_addresses() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        bring_up(&sim, &platform, &DiscardEvents).unwrap();
        // ASQ as the controller holds it is a bus address: CPU + BUS_OFFSET.
        let asq = sim.read64(offsets::ASQ);
        assert!(asq >= BUS_OFFSET, "ASQ {asq:#x} is not a bus address");
        sim.assert_no_violations();
    }

    #[test]
    fn every_interrupt_vector_is_masked_after_bring_up() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        bring_up(&sim, &platform, &DiscardEvents).unwrap();
        assert_eq!(sim.interrupt_mask(), u32::MAX);
        sim.assert_no_violations();
    }

    #[test]
    fn a_slow_controller_gets_its_whole_cap_to_and_the_wait_is_reported() {
        // CAP.TO = 40 (20 s), ready after about 7 s of polling (two clock reads of 100 µs per
        // poll): drives behind a Pi's PCIe take this long (docs/pcie-brcmstb.md §8).
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { timeout_units: 40, ready_after_reads: 35_000, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let events = RecordingEvents::default();
        bring_up(&sim, &platform, &events).expect("ready within CAP.TO");
        let messages = events.messages.borrow();
        let waits: std::vec::Vec<_> = messages.iter().filter(|m| m.contains("still waiting")).collect();
        assert_eq!(waits.len(), 3, "{messages:#?}");
        assert!(
            waits[0].starts_with(
                "nvme 00:02.0: still waiting for CSTS.RDY = 1 after 2000 ms (CAP.TO allows 20000 ms)"
            ),
            "{}",
            waits[0]
        );
        sim.assert_no_violations();
    }

    #[test]
    fn a_controller_left_enabled_is_disabled_first() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { start_enabled: true, ready_after_reads: 3, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        bring_up(&sim, &platform, &DiscardEvents).expect("bring-up after reset");
        sim.assert_no_violations();
    }

    #[test]
    fn a_controller_that_never_becomes_ready_times_out_with_its_registers() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { fault: Some(Fault::NeverReady), ..SimConfig::default() };
        let cap = config.cap();
        let sim = SimController::new(&platform, config);
        let error = bring_up(&sim, &platform, &DiscardEvents).err().expect("fails");
        match error {
            NvmeError::NotReady { waiting_for: ReadyWait::Enabled, waited_ms, cap: seen_cap, cc, csts } => {
                assert!((7500..7700).contains(&waited_ms), "waited {waited_ms} ms");
                assert_eq!(seen_cap, cap);
                assert_eq!(cc, 0x0046_0001);
                assert_eq!(csts & 1, 0);
            }
            other => panic!("unexpected {other:?}"),
        }
        let message = format!("{error}");
        assert!(
            message.contains("not ready after")
                && message.contains("CAP.TO = 7500 ms")
                && message.contains("CC = 0x00460001"),
            "{message}"
        );
    }

    #[test]
    fn an_admin_command_that_never_completes_times_out_after_10_s() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { fault: Some(Fault::AdminCommandsHang), ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let error = bring_up(&sim, &platform, &DiscardEvents).err().expect("fails");
        match error {
            NvmeError::AdminTimeout { opcode, waited_ms, csts, .. } => {
                assert_eq!(opcode, super::super::command::admin_opcode::IDENTIFY);
                assert!((10_000..10_200).contains(&waited_ms), "waited {waited_ms} ms");
                assert_eq!(csts & 1, 1, "still ready");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(format!("{error}").contains("did not complete in 10"), "{error}");
        sim.assert_no_violations();
    }

    #[test]
    fn fatal_status_at_enable_is_reported_with_registers() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { fault: Some(Fault::FatalOnEnable), ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let error = bring_up(&sim, &platform, &DiscardEvents).err().expect("fails");
        assert!(matches!(error, NvmeError::FatalStatus { csts, .. } if csts & 2 != 0), "{error:?}");
        assert!(format!("{error}").contains("CSTS.CFS = 1"));
    }

    #[test]
    fn refuses_a_controller_without_the_nvm_command_set_or_absent() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig { command_sets: 0x40, ..SimConfig::default() });
        assert!(matches!(
            bring_up(&sim, &platform, &DiscardEvents).err(),
            Some(NvmeError::NoNvmCommandSet { .. })
        ));
        let healthy = SimController::new(&platform, SimConfig::default());
        let error = Controller::bring_up(
            &healthy,
            0x800,
            &platform,
            platform.translation(),
            &DiscardEvents,
            "x".to_string(),
        )
        .err();
        assert_eq!(error, Some(NvmeError::RegistersTooSmall { register_bytes: 0x800, needed_bytes: 0x1008 }));
        // Nothing behind BAR0 (a function whose link is down): every read returns all ones.
        #[derive(Clone)]
        struct Absent;
        impl RegisterIo for Absent {
            fn read32(&self, _offset_bytes: usize) -> u32 {
                u32::MAX
            }
            fn write32(&self, _offset_bytes: usize, _value: u32) {
                panic!("nothing may be written to an absent controller");
            }
        }
        let error = Controller::bring_up(
            Absent,
            0x4000,
            &platform,
            platform.translation(),
            &DiscardEvents,
            "x".to_string(),
        )
        .err();
        assert_eq!(error, Some(NvmeError::NoController { cap: u64::MAX }));
        assert_eq!(format!("{}", error.unwrap()), "no controller answers (CAP = 0xffffffffffffffff)");
    }

    #[test]
    fn depth_beyond_mqes_is_clamped_with_a_message() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { mqes: 63, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
        let depth = DepthChoice::new(1024, controller.capabilities());
        assert!(depth.was_clamped());
        assert_eq!(depth.entries, 64);
        assert_eq!(
            format!("{depth}"),
            "queue depth 1024 is more than the controller allows (CAP.MQES + 1 = 64); using 64"
        );
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(1).unwrap();
        let pair = controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string()).unwrap();
        assert_eq!(sim.io_queue_entries(1), Some(64));
        assert_eq!(blockdev::BlockDevice::geometry(&pair).max_in_flight, 63);
        let small = DepthChoice::new(1, controller.capabilities());
        assert_eq!(small.entries, 2);
        assert!(format!("{small}").contains("below the minimum"));
        sim.assert_no_violations();
    }

    #[test]
    fn fewer_queues_than_asked_are_used_as_granted() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig { max_io_queue_pairs: 2, ..SimConfig::default() };
        let sim = SimController::new(&platform, config);
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        let grant = controller.request_io_queues(4).unwrap();
        assert_eq!(grant, QueueGrant { requested: 4, submission_queues: 2, completion_queues: 2 });
        assert_eq!(grant.usable_pairs(), 2);
        let depth = DepthChoice::new(16, controller.capabilities());
        for _ in 0..2 {
            controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string()).unwrap();
        }
        let third = controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string());
        assert!(matches!(third, Err(NvmeError::NoQueueLeft { granted: 2 })));
        assert_eq!(sim.io_queue_ids(), vec![1, 2]);
        sim.assert_no_violations();
    }

    #[test]
    fn namespaces_come_from_the_active_list_or_a_probe() {
        for supports_active_list in [true, false] {
            let platform = SimPlatform::for_nvme(ARENA);
            let config = SimConfig {
                namespace_count: 8,
                supports_active_list,
                namespaces: vec![
                    SimNamespace { id: 2, blocks: 1000, lba_shift: 9, metadata_bytes: 0 },
                    SimNamespace { id: 5, blocks: 2000, lba_shift: 12, metadata_bytes: 0 },
                    SimNamespace { id: 7, blocks: 10, lba_shift: 9, metadata_bytes: 8 },
                ],
                ..SimConfig::default()
            };
            let sim = SimController::new(&platform, config);
            let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
            let namespaces = controller.active_namespaces().unwrap();
            let ids: std::vec::Vec<u32> = namespaces.iter().map(|n| n.namespace_id).collect();
            assert_eq!(ids, [2, 5, 7], "active list supported: {supports_active_list}");
            assert_eq!(controller.check_namespace(&namespaces[1]), Ok(4096));
            let metadata = controller.check_namespace(&namespaces[2]).unwrap_err();
            assert!(format!("{metadata}").contains("8 bytes of metadata per block"), "{metadata}");
            sim.assert_no_violations();
        }
    }

    #[test]
    fn shutdown_deletes_queues_then_sets_shn() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(2).unwrap();
        let depth = DepthChoice::new(8, controller.capabilities());
        let _first = controller.create_io_queue_pair(&namespaces[0], depth, "a".to_string()).unwrap();
        let _second = controller.create_io_queue_pair(&namespaces[0], depth, "b".to_string()).unwrap();
        let report = controller.shutdown().expect("shutdown");
        assert_eq!(report.queues_deleted, 2);
        assert_eq!(report.deletion_error, None);
        let statistics = sim.statistics();
        assert_eq!(statistics.io_queues_deleted, [2, 1]);
        assert_eq!(statistics.io_queues_alive_at_shutdown, 0);
        assert_eq!(statistics.shutdowns, 1);
        assert_eq!(sim.csts_bits().2, 2, "SHST = complete");
        sim.assert_no_violations();
    }

    #[test]
    fn a_controller_that_is_gone_is_not_waited_for_at_shutdown() {
        use blockdev::Clock;
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
        sim.remove();
        let started = platform.now_ns();
        assert_eq!(controller.shutdown().unwrap_err(), NvmeError::DeviceGone);
        assert!(platform.now_ns() - started < 1_000_000, "no admin or CSTS timeout waited out");
        assert_eq!(sim.statistics().shutdowns, 0);
    }

    #[test]
    fn a_shutdown_that_never_completes_times_out() {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = SimConfig {
            fault: Some(Fault::NeverFinishesShutdown),
            rtd3_entry_latency_us: 12_500_000,
            ..SimConfig::default()
        };
        let sim = SimController::new(&platform, config);
        let mut controller = bring_up(&sim, &platform, &DiscardEvents).unwrap();
        let error = controller.shutdown().unwrap_err();
        match error {
            NvmeError::ShutdownTimeout { waited_ms, cc, csts } => {
                assert!((12_500..12_700).contains(&waited_ms), "RTD3E is longer than 10 s: {waited_ms}");
                assert_eq!(cc & (3 << 14), 1 << 14);
                assert_eq!(csts & (3 << 2), 1 << 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn untrusted_admin_completions_are_reported_or_refused() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut controller = bring_up(&sim, &platform, &events).unwrap();
        // A completion nobody asked for comes first: reported, ignored, the real one counts.
        sim.corrupt_next_admin_completion(Corruption::UnknownCommandId);
        assert_eq!(controller.active_namespaces().unwrap().len(), 1);
        assert!(
            events.any_contains("nvme 00:02.0: completion for unknown command identifier 65520 on queue 0")
        );
        // A completion with an impossible SQ head is not trusted.
        sim.corrupt_next_admin_completion(Corruption::ImpossibleSqHead);
        let error = controller.request_io_queues(1).unwrap_err();
        assert!(
            matches!(error, NvmeError::AdminProtocol { opcode: 0x09, reported_head: 0xFFFE, .. }),
            "{error:?}"
        );
        assert!(format!("{error}").contains("impossible SQ head 65534; not trusted"), "{error}");
        // The admin queue still works with the head it could prove.
        assert!(controller.active_namespaces().is_ok());
        sim.assert_no_violations();
    }

    #[test]
    fn failed_admin_commands_are_named() {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let events = RecordingEvents::default();
        let mut controller = bring_up(&sim, &platform, &events).unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(1).unwrap();
        controller
            .create_io_queue_pair(
                &namespaces[0],
                DepthChoice::new(4, controller.capabilities()),
                "nvme0".to_string(),
            )
            .unwrap();
        // Number of Queues after a CQ exists: Command Sequence Error (QEMU and the spec).
        let error = controller.request_io_queues(1).unwrap_err();
        assert_eq!(
            format!("{error}"),
            "Set Features (opcode 0x09) failed: Command Sequence Error (00/0c) dnr (cdw0 0x0)"
        );
    }
}
