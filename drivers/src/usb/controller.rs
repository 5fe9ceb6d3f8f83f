//! The xHCI host controller, polled (eXtensible Host Controller Interface 1.2, §4.2 "Host
//! Controller Initialization", §4.6 commands, §4.9 rings, §4.19 root hub ports, §7.1 legacy
//! hand-off; the bring-up order of docs/usb-storage.md §1 and §10): hand-off, halt, reset,
//! DCBAA and scratchpads, command ring, one event ring with interrupts off, run; commands
//! executed one at a time; events drained into per-slot queues; ports reset and their speed
//! read. The register base and the DMA translation come from whatever found the controller (a
//! PCI BAR and its host bridge's `dma-ranges`, or a board table), never from constants here.

use super::context::ContextLayout;
use super::error::UsbError;
use super::regs::{
    self, capability, extended_capability, interrupter, link_state, operational, Capabilities, PortStatus,
    Speed, SupportedProtocol, USBCMD, USBSTS,
};
use super::ring::{segment_table_entry, EventRing, ProducerRing};
use super::trb::{CompletionCode, Event, Trb, TRB_BYTES};
use alloc::collections::VecDeque;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use hal::barrier;
use hal::dma::{DmaAllocation, DmaRegion};
use hal::mmio::RegisterIo;
use hal::platform::{wait_until, BusTranslation, Deadline, Platform};

/// Device slots the driver enables at most (CONFIG.MaxSlotsEn): one per drive is plenty.
pub const DRIVER_MAX_SLOTS: u8 = 32;
/// TRBs per ring segment: one 4 KiB page (followed by a guard page, docs/usb-storage.md §2).
pub const RING_TRBS: u32 = 256;
/// Bytes allocated per ring: the segment page and an untouched guard page after it, because
/// the VL805 prefetches TRBs past a Link TRB (docs/usb-storage.md §2, raspberrypi/linux#4685).
pub const RING_ALLOCATION_BYTES: usize = 8192;
pub const PAGE_BYTES: usize = 4096;
/// Event ring entries: every outstanding TD, command and port change fits (§1 step 11).
pub const EVENT_RING_TRBS: u32 = 256;
pub const HALT_TIMEOUT_US: u64 = 100_000;
/// Linux allows 10 s for HCRST at probe (`XHCI_RESET_LONG_USEC`); U-Boot 250 ms.
pub const RESET_TIMEOUT_US: u64 = 1_000_000;
pub const HANDOFF_TIMEOUT_US: u64 = 1_000_000;
pub const COMMAND_TIMEOUT_US: u64 = 5_000_000;
/// USB 2 port reset: the root port drives reset for 50 ms (USB 2.0 §7.1.7.5 TDRSTR); allow more.
pub const PORT_RESET_TIMEOUT_US: u64 = 500_000;
/// Reset recovery before the first request (USB 2.0 §7.1.7.5 TRSTRCY = 10 ms).
pub const PORT_RESET_RECOVERY_US: u64 = 10_000;
/// A USB 3 port trains by itself after a connect (USB 3.2 §7.5.4); how long to wait for it.
pub const LINK_TRAINING_TIMEOUT_US: u64 = 200_000;
/// Port power-on to good power (xHCI §5.4.8 PP: 20 ms, as Linux's `xhci_hub_control`).
pub const PORT_POWER_US: u64 = 20_000;
/// A connection must be stable this long before the port is reset (USB 2.0 §7.1.7.3 TATTDB); it
/// is also U-Boot's least query delay after power (`common/usb_hub.c`, `usb_hub_power_on`:
/// max(100 ms, the hub's power-good time)).
pub const CONNECT_DEBOUNCE_US: u64 = 100_000;
/// How long root ports are watched for devices after power unless `usb.connect-ms=` says
/// otherwise: U-Boot gives each port its query delay plus a 1 s connect timeout; USB 3 drives
/// retraining after the controller reset and slow bridges connect within that.
pub const DEFAULT_CONNECT_WAIT_MS: u64 = 1500;
/// The longest `usb.connect-ms=` accepted.
pub const MAX_CONNECT_WAIT_MS: u64 = 10_000;
/// A progress line this often while ports are still empty.
pub const PORT_PROGRESS_EVERY_MS: u64 = 500;
/// Between two looks at the ports.
const PORT_POLL_INTERVAL_US: u64 = 1000;
/// Events queued per slot before the oldest is dropped (a slot nobody polls).
pub const MAX_QUEUED_EVENTS_PER_SLOT: usize = 1024;

/// Port numbers written as ranges: `2-4, 6`.
pub struct PortList<'a>(pub &'a [u8]);

impl core::fmt::Display for PortList<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut rest = self.0;
        let mut separator = "";
        while let Some((&first, _)) = rest.split_first() {
            let run = rest.windows(2).take_while(|pair| pair[1] == pair[0] + 1).count() + 1;
            let last = rest[run - 1];
            if first == last {
                write!(f, "{separator}{first}")?;
            } else {
                write!(f, "{separator}{first}-{last}")?;
            }
            separator = ", ";
            rest = &rest[run..];
        }
        Ok(())
    }
}

/// What the port watch says while it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortWait {
    /// Ports with nothing enabled yet.
    pub empty: Vec<u8>,
    pub waited_ms: u64,
    pub limit_ms: u64,
}

impl core::fmt::Display for PortWait {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "waiting for devices on port{} {} ({} of {} ms, usb.connect-ms)",
            if self.empty.len() == 1 { "" } else { "s" },
            PortList(&self.empty),
            self.waited_ms,
            self.limit_ms
        )
    }
}

/// What the port watch found.
#[derive(Debug, Default)]
pub struct PortScan {
    /// Ports enabled, in the order their devices appeared, with their speed.
    pub enabled: Vec<(u8, Speed)>,
    /// Ports with a device that could not be enabled.
    pub failed: Vec<(u8, UsbError)>,
    /// Ports that stayed empty.
    pub empty: Vec<u8>,
    pub waited_ms: u64,
}

/// A transfer event as a device's transport sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferEvent {
    pub trb_pointer: u64,
    pub residual_bytes: u32,
    pub code: CompletionCode,
    pub dci: u8,
}

/// Counters of one controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ControllerStatistics {
    pub events: u64,
    pub transfer_events: u64,
    pub commands: u64,
    pub doorbell_writes: u64,
    pub erdp_writes: u64,
    /// Events for slots with no queue, or command completions nobody waited for.
    pub stray_events: u64,
    pub port_change_events: u64,
    /// Host Controller events (Event Ring Full and others).
    pub host_controller_events: u64,
    pub dropped_transfer_events: u64,
}

/// One xHCI after bring-up.
pub struct HostController<'p, R: RegisterIo, P: Platform> {
    registers: R,
    register_bytes: usize,
    platform: &'p P,
    dma: BusTranslation,
    label: String,
    capabilities: Capabilities,
    protocols: Vec<SupportedProtocol>,
    operational: usize,
    runtime: usize,
    doorbells: usize,
    layout: ContextLayout,
    slots_enabled: u8,
    dcbaa: DmaRegion<'p>,
    command_ring: ProducerRing<'p>,
    event_ring: EventRing<'p>,
    transfer_events: Vec<VecDeque<TransferEvent>>,
    completed_command: Option<(u64, CompletionCode, u8, u32)>,
    port_changes: Vec<u8>,
    last_host_controller_code: Option<CompletionCode>,
    statistics: ControllerStatistics,
}

/// A controller shared by every drive behind it (each drive's transport borrows it to ring
/// doorbells and take its events). One core, no interrupts: the borrows never overlap.
pub type SharedController<'p, R, P> = alloc::rc::Rc<RefCell<HostController<'p, R, P>>>;

/// A ring segment with its guard page.
pub fn allocate_ring<'p, P: Platform>(
    platform: &'p P,
    dma: &BusTranslation,
) -> Result<ProducerRing<'p>, UsbError> {
    let memory = DmaAllocation::new(platform, dma, RING_ALLOCATION_BYTES, PAGE_BYTES)?;
    Ok(ProducerRing::new(memory, RING_TRBS))
}

impl<'p, R: RegisterIo, P: Platform> HostController<'p, R, P> {
    /// Takes the controller from whatever state the firmware left, resets it and starts it with
    /// interrupts off (docs/usb-storage.md §1 steps 1-10, §10 steps 3-5).
    pub fn bring_up(
        registers: R,
        register_bytes: usize,
        platform: &'p P,
        dma: BusTranslation,
        label: String,
    ) -> Result<Self, UsbError> {
        let first_word = registers.read32(capability::CAPLENGTH_HCIVERSION);
        if !plausible_capability_word(first_word) {
            return Err(UsbError::NoController { first_word });
        }
        let capabilities = Capabilities::decode(
            first_word,
            registers.read(regs::HCSPARAMS1),
            registers.read(regs::HCSPARAMS2),
            registers.read(regs::HCCPARAMS1),
            registers.read32(capability::DBOFF),
            registers.read32(capability::RTSOFF),
        );
        let operational = usize::from(capabilities.capability_length);
        let slots_enabled = capabilities.max_slots.clamp(1, DRIVER_MAX_SLOTS);
        let needed_bytes = [
            operational
                + operational::PORT_REGISTERS
                + operational::PORT_STRIDE * usize::from(capabilities.max_ports),
            capabilities.runtime_offset + interrupter::FIRST + interrupter::STRIDE,
            capabilities.doorbell_offset + 4 * (usize::from(slots_enabled) + 1),
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        if register_bytes < needed_bytes {
            return Err(UsbError::RegistersTooSmall { register_bytes, needed_bytes });
        }
        let protocols = supported_protocols(&registers, register_bytes, &capabilities);
        take_from_firmware(&registers, register_bytes, platform, &capabilities)?;
        halt_and_reset(&registers, operational, platform)?;
        let pagesize = registers.read32(operational + operational::PAGESIZE);
        if pagesize & 1 == 0 {
            return Err(UsbError::UnsupportedPageSize { pagesize });
        }
        registers.write32(operational + operational::CONFIG, u32::from(slots_enabled));

        let DmaAllocation { region: dcbaa, bus_address: dcbaa_bus } =
            DmaAllocation::new(platform, &dma, PAGE_BYTES, PAGE_BYTES)?;
        set_up_scratchpads(platform, &dma, &dcbaa, capabilities.scratchpad_buffers)?;
        platform.clean_for_device(&dcbaa.buffer());
        regs::write_split64(&registers, operational + operational::DCBAAP, dcbaa_bus);

        let command_ring = allocate_ring(platform, &dma)?;
        regs::write_split64(&registers, operational + operational::CRCR, command_ring.initial_dequeue());

        let event_memory =
            DmaAllocation::new(platform, &dma, EVENT_RING_TRBS as usize * TRB_BYTES, PAGE_BYTES)?;
        let event_bus = event_memory.bus_address;
        let event_ring = EventRing::new(event_memory, EVENT_RING_TRBS);
        let DmaAllocation { region: segment_table, bus_address: segment_table_bus } =
            DmaAllocation::new(platform, &dma, 64, 64)?;
        for (index, word) in segment_table_entry(event_bus, EVENT_RING_TRBS).iter().enumerate() {
            segment_table.write_words(4 * index, &[*word]);
        }
        platform.clean_for_device(&segment_table.buffer());
        let runtime = capabilities.runtime_offset;
        let interrupter0 = runtime + interrupter::FIRST;
        // Polled: IE = 0 (and IP cleared), no moderation; events are still written (§4.17.2).
        registers.write32(interrupter0 + interrupter::IMAN, 1);
        registers.write32(interrupter0 + interrupter::IMOD, 0);
        registers.write32(interrupter0 + interrupter::ERSTSZ, 1);
        regs::write_split64(&registers, interrupter0 + interrupter::ERDP, event_bus);
        // ERSTBA last: writing it enables the event ring (§4.9.4; QEMU latches the high half).
        regs::write_split64(&registers, interrupter0 + interrupter::ERSTBA, segment_table_bus);

        let mut controller = HostController {
            registers,
            register_bytes,
            platform,
            dma,
            label,
            capabilities,
            protocols,
            operational,
            runtime,
            doorbells: capabilities.doorbell_offset,
            layout: ContextLayout::new(capabilities.context_bytes),
            slots_enabled,
            dcbaa,
            command_ring,
            event_ring,
            transfer_events: (0..=slots_enabled).map(|_| VecDeque::new()).collect(),
            completed_command: None,
            port_changes: Vec::new(),
            last_host_controller_code: None,
            statistics: ControllerStatistics::default(),
        };
        controller.run()?;
        // The smoke test of docs/usb-storage.md §1 step 10: a No-Op command completes.
        controller.execute_command(Trb::no_op_command())?;
        Ok(controller)
    }

    fn run(&mut self) -> Result<(), UsbError> {
        self.registers.modify(regs::USBCMD.at(self.operational), USBCMD::INTE::CLEAR + USBCMD::RS::SET);
        let registers = &self.registers;
        let status = regs::USBSTS.at(self.operational);
        let running =
            wait_until(self.platform, HALT_TIMEOUT_US, || !registers.read(status).is_set(USBSTS::HCH));
        let usbsts = registers.read(status).get();
        if !running {
            return Err(UsbError::NotRunning { usbcmd: registers.read32(self.operational), usbsts });
        }
        self.check_status()
    }

    /// USBSTS.HSE or HCE: the controller stopped working.
    pub fn check_status(&self) -> Result<(), UsbError> {
        let status = self.registers.read(regs::USBSTS.at(self.operational));
        if status.is_set(USBSTS::HSE) || status.is_set(USBSTS::HCE) {
            return Err(UsbError::ControllerError { usbsts: status.get() });
        }
        Ok(())
    }

    pub fn usbsts(&self) -> u32 {
        self.registers.read32(self.operational + operational::USBSTS)
    }

    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    pub fn protocols(&self) -> &[SupportedProtocol] {
        &self.protocols
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn platform(&self) -> &'p P {
        self.platform
    }

    pub fn dma(&self) -> BusTranslation {
        self.dma
    }

    pub fn layout(&self) -> ContextLayout {
        self.layout
    }

    pub fn slots_enabled(&self) -> u8 {
        self.slots_enabled
    }

    pub fn statistics(&self) -> ControllerStatistics {
        self.statistics
    }

    pub fn register_bytes(&self) -> usize {
        self.register_bytes
    }

    /// The Host Controller event code last seen (an Event Ring Full means events were lost).
    pub fn last_host_controller_code(&self) -> Option<CompletionCode> {
        self.last_host_controller_code
    }

    /// Points DCBAA entry `slot_id` at an output device context.
    pub fn set_device_context(&mut self, slot_id: u8, context_bus: u64) {
        self.dcbaa.write_u64(usize::from(slot_id) * 8, context_bus);
        self.platform.clean_for_device(&self.dcbaa.slice(usize::from(slot_id) * 8, 8));
    }

    /// Rings doorbell `target` of slot `slot_id` (0: the command ring) for `stream_id`
    /// (§5.6), after a barrier that puts every TRB written so far in memory.
    pub fn ring_doorbell(&mut self, slot_id: u8, target: u8, stream_id: u16) {
        barrier::store_before_doorbell();
        self.registers.write32(
            self.doorbells + 4 * usize::from(slot_id),
            u32::from(target) | (u32::from(stream_id) << 16),
        );
        self.statistics.doorbell_writes += 1;
    }

    /// Drains the event ring: transfer events go to their slot's queue, command completions to
    /// the waiting command, port changes are noted; then ERDP moves (with EHB cleared) once.
    pub fn process_events(&mut self) {
        let mut consumed = 0u32;
        while consumed < self.event_ring.entries() {
            let Some(trb) = self.event_ring.pop(self.platform) else {
                break;
            };
            consumed += 1;
            self.statistics.events += 1;
            self.dispatch(Event::decode(&trb));
        }
        if consumed > 0 {
            let erdp = self.event_ring.dequeue_bus() | (1 << 3);
            regs::write_split64(&self.registers, self.runtime + interrupter::FIRST + interrupter::ERDP, erdp);
            self.statistics.erdp_writes += 1;
        }
    }

    fn dispatch(&mut self, event: Event) {
        match event {
            Event::Transfer { trb_pointer, residual_bytes, code, slot_id, dci } => {
                self.statistics.transfer_events += 1;
                match self.transfer_events.get_mut(usize::from(slot_id)).filter(|_| slot_id != 0) {
                    Some(queue) => {
                        if queue.len() >= MAX_QUEUED_EVENTS_PER_SLOT {
                            queue.pop_front();
                            self.statistics.dropped_transfer_events += 1;
                        }
                        queue.push_back(TransferEvent { trb_pointer, residual_bytes, code, dci });
                    }
                    None => self.statistics.stray_events += 1,
                }
            }
            Event::CommandCompletion { command_pointer, code, slot_id, parameter } => {
                if self.completed_command.is_some() {
                    self.statistics.stray_events += 1;
                }
                self.completed_command = Some((command_pointer, code, slot_id, parameter));
            }
            Event::PortStatusChange { port } => {
                self.statistics.port_change_events += 1;
                if !self.port_changes.contains(&port) {
                    self.port_changes.push(port);
                }
            }
            Event::HostController { code } => {
                self.statistics.host_controller_events += 1;
                self.last_host_controller_code = Some(code);
            }
            Event::Other { .. } => self.statistics.stray_events += 1,
        }
    }

    /// The oldest transfer event of `slot_id` not taken yet.
    pub fn pop_transfer_event(&mut self, slot_id: u8) -> Option<TransferEvent> {
        self.transfer_events.get_mut(usize::from(slot_id))?.pop_front()
    }

    /// The oldest transfer event of `slot_id` for endpoint `dci`, leaving the others queued
    /// (control transfers during a transport's recovery must not take its bulk events).
    pub fn pop_transfer_event_for(&mut self, slot_id: u8, dci: u8) -> Option<TransferEvent> {
        let queue = self.transfer_events.get_mut(usize::from(slot_id))?;
        let position = queue.iter().position(|event| event.dci == dci)?;
        queue.remove(position)
    }

    /// Ports that reported a change since the last call.
    pub fn take_port_changes(&mut self) -> Vec<u8> {
        core::mem::take(&mut self.port_changes)
    }

    /// Runs one command and waits for its completion (§4.6.1). Returns the slot ID and the
    /// completion parameter of a successful command.
    pub fn execute_command(&mut self, trb: Trb) -> Result<(u8, u32), UsbError> {
        let trb_type = trb.trb_type();
        let placement =
            self.command_ring.enqueue_td(self.platform, &[trb]).map_err(|_| UsbError::CommandRingFull)?;
        self.completed_command = None;
        self.statistics.commands += 1;
        self.ring_doorbell(0, 0, 0);
        let deadline = Deadline::after_us(self.platform, COMMAND_TIMEOUT_US);
        loop {
            self.process_events();
            if let Some((pointer, code, slot_id, parameter)) = self.completed_command.take() {
                if pointer != self.command_ring.bus_of(placement.first_index) {
                    self.statistics.stray_events += 1;
                    continue;
                }
                self.command_ring.retire(pointer);
                if code != CompletionCode::SUCCESS {
                    return Err(UsbError::CommandFailed { trb_type, code, slot_id });
                }
                return Ok((slot_id, parameter));
            }
            if deadline.has_passed(self.platform) {
                // The TRB stays on the ring; later commands go after it.
                return Err(UsbError::CommandTimeout {
                    trb_type,
                    waited_ms: deadline.elapsed_us(self.platform) / 1000,
                    usbsts: self.usbsts(),
                });
            }
            self.check_status()?;
            core::hint::spin_loop();
        }
    }

    /// The Supported Protocol capability that covers a port.
    pub fn protocol_of(&self, port: u8) -> Option<SupportedProtocol> {
        self.protocols.iter().copied().find(|protocol| protocol.covers(port))
    }

    fn port_offset(&self, port: u8) -> usize {
        self.operational + operational::PORT_REGISTERS + operational::PORT_STRIDE * (usize::from(port) - 1)
    }

    pub fn port_status(&self, port: u8) -> PortStatus {
        PortStatus(self.registers.read32(self.port_offset(port)))
    }

    fn write_port(&self, port: u8, set_bits: u32) {
        let current = self.registers.read32(self.port_offset(port));
        self.registers.write32(self.port_offset(port), regs::portsc_write_value(current, set_bits));
    }

    /// Clears the port's change bits without touching anything else.
    pub fn clear_port_changes(&self, port: u8) {
        let changes = self.port_status(port).change_bits();
        if changes != 0 {
            self.write_port(port, changes);
        }
    }

    /// Powers ports that need it (HCCPARAMS1.PPC) and gives them time to see a connection.
    pub fn power_ports(&self) {
        let mut powered_any = false;
        for port in 1..=self.capabilities.max_ports {
            if self.capabilities.port_power_control && !self.port_status(port).powered() {
                self.write_port(port, 1 << 9);
                powered_any = true;
            }
        }
        if powered_any {
            self.platform.delay_us(PORT_POWER_US);
        }
    }

    /// Powers the ports and watches them for `wait_ms`: each port whose device has been
    /// connected for [`CONNECT_DEBOUNCE_US`] is enabled as it appears, until every port is
    /// enabled or the time is up (U-Boot `usb_hub_power_on` / `usb_hub_port_connect_change`
    /// per port; a single look after the reset misses drives that connect later). `report`
    /// hears about the empty ports every [`PORT_PROGRESS_EVERY_MS`].
    pub fn scan_ports(&self, wait_ms: u64, report: &dyn Fn(&PortWait)) -> PortScan {
        self.power_ports();
        let ports = self.capabilities.max_ports;
        let watch = Deadline::after_us(self.platform, wait_ms.saturating_mul(1000));
        let mut connected_since_us: Vec<Option<u64>> = alloc::vec![None; usize::from(ports)];
        let mut pending: Vec<u8> = (1..=ports).collect();
        let mut scan = PortScan::default();
        let mut next_report_ms = PORT_PROGRESS_EVERY_MS;
        loop {
            let now_us = watch.elapsed_us(self.platform);
            let time_is_up = watch.has_passed(self.platform);
            pending.retain(|&port| {
                let since = &mut connected_since_us[usize::from(port) - 1];
                if !self.port_status(port).connected() {
                    *since = None;
                    return true;
                }
                let first_seen = *since.get_or_insert(now_us);
                // Past the watch, a device already seen still gets its debounce.
                if now_us < first_seen + CONNECT_DEBOUNCE_US {
                    return true;
                }
                match self.enable_port(port) {
                    Ok(Some(speed)) => scan.enabled.push((port, speed)),
                    Ok(None) => return true,
                    Err(error) => scan.failed.push((port, error)),
                }
                false
            });
            let debouncing = pending.iter().any(|&port| connected_since_us[usize::from(port) - 1].is_some());
            if pending.is_empty() || (time_is_up && !debouncing) {
                break;
            }
            if now_us / 1000 >= next_report_ms && !time_is_up {
                report(&PortWait { empty: pending.clone(), waited_ms: now_us / 1000, limit_ms: wait_ms });
                next_report_ms =
                    now_us / 1000 - (now_us / 1000) % PORT_PROGRESS_EVERY_MS + PORT_PROGRESS_EVERY_MS;
            }
            self.platform.delay_us(PORT_POLL_INTERVAL_US);
        }
        scan.empty = pending;
        scan.waited_ms = watch.elapsed_us(self.platform) / 1000;
        scan
    }

    /// Gets a connected port to the Enabled state and returns its speed (§4.3.1, §4.19.1): a
    /// USB 3 port trains by itself (a warm reset only if it does not), a USB 2 port is reset
    /// with PR and waited for. `None` when nothing is connected.
    pub fn enable_port(&self, port: u8) -> Result<Option<Speed>, UsbError> {
        if !self.port_status(port).connected() {
            return Ok(None);
        }
        let usb3 = self.protocol_of(port).is_some_and(|protocol| protocol.major_revision >= 3);
        if usb3 {
            self.wait_for_link(port)?;
        } else {
            self.reset_port(port, 1 << 4)?;
            self.platform.delay_us(PORT_RESET_RECOVERY_US);
        }
        let status = self.port_status(port);
        self.clear_port_changes(port);
        if !status.enabled() {
            return Err(UsbError::PortNotEnabled { port, portsc: status.0 });
        }
        Speed::from_id(status.speed_id()).map(Some).ok_or(UsbError::UnknownSpeed { port, portsc: status.0 })
    }

    fn wait_for_link(&self, port: u8) -> Result<(), UsbError> {
        let registers = &self.registers;
        let offset = self.port_offset(port);
        if wait_until(self.platform, LINK_TRAINING_TIMEOUT_US, || {
            PortStatus(registers.read32(offset)).enabled()
        }) {
            return Ok(());
        }
        let state = self.port_status(port).link_state();
        if matches!(
            state,
            link_state::INACTIVE | link_state::COMPLIANCE_MODE | link_state::POLLING | link_state::DISABLED
        ) {
            self.reset_port(port, 1 << 31)?;
        }
        Ok(())
    }

    /// Starts a port reset (PR) or warm reset (WPR) and waits for the reset to end.
    fn reset_port(&self, port: u8, reset_bit: u32) -> Result<(), UsbError> {
        self.write_port(port, reset_bit);
        let registers = &self.registers;
        let offset = self.port_offset(port);
        let done = wait_until(self.platform, PORT_RESET_TIMEOUT_US, || {
            let status = PortStatus(registers.read32(offset));
            !status.in_reset() && status.reset_changed()
        });
        if !done {
            return Err(UsbError::PortResetTimeout { port, portsc: self.port_status(port).0 });
        }
        Ok(())
    }
}

/// CAPLENGTH/HCIVERSION as an xHCI has them: a dword-aligned capability length of at least
/// 0x20 (§5.3.1) and a version from 0.90 to 1.x. All ones (nothing behind a PCI window) and
/// RP1's 0xDEADDEAD when its link is down (docs/hardware.md §3.8) are not.
fn plausible_capability_word(word: u32) -> bool {
    let length = word & 0xff;
    let version = word >> 16;
    length >= 0x20 && length.is_multiple_of(4) && (0x0090..0x0200).contains(&version)
}

/// The Supported Protocol capabilities (§7.2): which ports are USB 2 and which USB 3.
fn supported_protocols<R: RegisterIo>(
    registers: &R,
    register_bytes: usize,
    capabilities: &Capabilities,
) -> Vec<SupportedProtocol> {
    let mut protocols = Vec::new();
    regs::walk_extended_capabilities(
        capabilities.extended_capabilities_offset,
        register_bytes,
        |offset| registers.read32(offset),
        |offset, id, word0| {
            if id == extended_capability::SUPPORTED_PROTOCOL && offset + 16 <= register_bytes {
                protocols.push(SupportedProtocol::decode(
                    word0,
                    registers.read32(offset + 8),
                    registers.read32(offset + 12),
                ));
            }
        },
    );
    protocols
}

/// The USB Legacy Support hand-off (§4.22.1, §7.1; Linux `pci-quirks.c`): set the OS semaphore,
/// wait for the BIOS semaphore to clear, turn the SMIs off.
fn take_from_firmware<R: RegisterIo, P: Platform>(
    registers: &R,
    register_bytes: usize,
    platform: &P,
    capabilities: &Capabilities,
) -> Result<(), UsbError> {
    let mut legacy = None;
    regs::walk_extended_capabilities(
        capabilities.extended_capabilities_offset,
        register_bytes,
        |offset| registers.read32(offset),
        |offset, id, _| {
            if id == extended_capability::LEGACY_SUPPORT && legacy.is_none() {
                legacy = Some(offset);
            }
        },
    );
    let Some(offset) = legacy else {
        return Ok(());
    };
    let word = registers.read32(offset);
    if word & extended_capability::BIOS_OWNED != 0 {
        registers.write32(offset, word | extended_capability::OS_OWNED);
        let released = wait_until(platform, HANDOFF_TIMEOUT_US, || {
            registers.read32(offset) & extended_capability::BIOS_OWNED == 0
        });
        if !released {
            return Err(UsbError::FirmwareOwned { legacy_support: registers.read32(offset) });
        }
    }
    let control = registers.read32(offset + 4);
    registers.write32(
        offset + 4,
        (control & !extended_capability::LEGACY_SMI_ENABLES) | extended_capability::LEGACY_SMI_EVENTS,
    );
    Ok(())
}

/// Halts a running controller (firmware may leave it running), then HCRST (§4.2 steps 1-2).
fn halt_and_reset<R: RegisterIo, P: Platform>(
    registers: &R,
    operational: usize,
    platform: &P,
) -> Result<(), UsbError> {
    let command = operational + operational::USBCMD;
    let status = operational + operational::USBSTS;
    let halted = |registers: &R| registers.read32(status) & 1 != 0;
    if !halted(registers) {
        let usbcmd = registers.read32(command);
        registers.write32(command, usbcmd & !1);
        if !wait_until(platform, HALT_TIMEOUT_US, || halted(registers)) {
            return Err(UsbError::NotHalted {
                usbcmd: registers.read32(command),
                usbsts: registers.read32(status),
            });
        }
    }
    let not_ready = |registers: &R| registers.read32(status) & (1 << 11) != 0;
    let timeout = |registers: &R| UsbError::ResetTimeout {
        usbcmd: registers.read32(command),
        usbsts: registers.read32(status),
    };
    if !wait_until(platform, RESET_TIMEOUT_US, || !not_ready(registers)) {
        return Err(timeout(registers));
    }
    registers.write32(command, 1 << 1);
    let reset_done = wait_until(platform, RESET_TIMEOUT_US, || {
        registers.read32(command) & (1 << 1) == 0 && !not_ready(registers)
    });
    if !reset_done {
        return Err(timeout(registers));
    }
    Ok(())
}

/// Scratchpad buffers (§4.20): an array of page pointers in DCBAA entry 0, zeroed pages.
fn set_up_scratchpads<P: Platform>(
    platform: &P,
    dma: &BusTranslation,
    dcbaa: &DmaRegion,
    count: u16,
) -> Result<(), UsbError> {
    if count == 0 {
        return Ok(());
    }
    let DmaAllocation { region: array, bus_address: array_bus } =
        DmaAllocation::new(platform, dma, usize::from(count) * 8, 64)?;
    for index in 0..usize::from(count) {
        let page = DmaAllocation::new(platform, dma, PAGE_BYTES, PAGE_BYTES)?;
        array.write_u64(index * 8, page.bus_address);
    }
    platform.clean_for_device(&array.buffer());
    dcbaa.write_u64(0, array_bus);
    Ok(())
}
