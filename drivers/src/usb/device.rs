//! One USB device behind a root port: slot, contexts, the default control endpoint and the
//! standard requests (eXtensible Host Controller Interface 1.2, §4.3 "USB Device
//! Initialization": Enable Slot, Address Device with BSR = 0, Evaluate Context for the control
//! packet size, Configure Endpoint §4.6.6; §4.11.2.2 control transfers as Setup, Data and
//! Status stage TDs; §4.6.8-4.6.10 Reset Endpoint, Stop Endpoint, Set TR Dequeue Pointer;
//! docs/usb-storage.md §4 steps 1-7).

use super::context::{self, ContextLayout, EndpointContext, EndpointType, SlotContext};
use super::controller::{allocate_ring, HostController, PAGE_BYTES};
use super::descriptors::{
    configuration_total_length, descriptor_type, first_language, string_from_descriptor, ConfigurationInfo,
    DeviceDescriptor, SetupPacket,
};
use super::error::UsbError;
use super::regs::Speed;
use super::ring::ProducerRing;
use super::trb::{CompletionCode, Trb};
use alloc::string::String;
use alloc::vec::Vec;
use hal::dma::{DmaAllocation, DmaRegion};
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// How long one control transfer may take (USB 2.0 §9.2.6.4 allows 5 s for a request with data).
pub const CONTROL_TIMEOUT_US: u64 = 5_000_000;
/// The largest control data stage the driver reads (a page).
pub const CONTROL_BUFFER_BYTES: usize = PAGE_BYTES;
/// Average TRB length for the control endpoint (§4.14.1.1: 8).
const CONTROL_AVERAGE_TRB_BYTES: u16 = 8;
/// DCI of the default control endpoint.
pub const CONTROL_DCI: u8 = 1;

/// An addressed, described device.
pub struct UsbDevice<'p> {
    pub port: u8,
    pub speed: Speed,
    pub slot_id: u8,
    layout: ContextLayout,
    input: DmaAllocation<'p>,
    output: DmaRegion<'p>,
    control_ring: ProducerRing<'p>,
    control_packet_bytes: u16,
    buffer: DmaAllocation<'p>,
    pub descriptor: DeviceDescriptor,
    pub configuration: ConfigurationInfo,
    pub manufacturer: String,
    pub product: String,
    pub serial: String,
}

impl<'p> UsbDevice<'p> {
    /// Enables a slot for the device on `port` (already enabled at `speed`), addresses it and
    /// reads its descriptors and strings.
    pub fn enumerate<R: RegisterIo, P: Platform>(
        hc: &mut HostController<'p, R, P>,
        port: u8,
        speed: Speed,
    ) -> Result<UsbDevice<'p>, UsbError> {
        let slot_type = hc.protocol_of(port).map_or(0, |protocol| protocol.slot_type);
        let (slot_id, _) = hc.execute_command(Trb::enable_slot(slot_type))?;
        let platform = hc.platform();
        let dma = hc.dma();
        let layout = hc.layout();
        let input = DmaAllocation::new(platform, &dma, PAGE_BYTES, PAGE_BYTES)?;
        let output = DmaAllocation::new(platform, &dma, PAGE_BYTES, PAGE_BYTES)?;
        let buffer = DmaAllocation::new(platform, &dma, CONTROL_BUFFER_BYTES, PAGE_BYTES)?;
        let control_ring = allocate_ring(platform, &dma)?;
        hc.set_device_context(slot_id, output.bus_address);
        let mut device = UsbDevice {
            port,
            speed,
            slot_id,
            layout,
            input,
            output: output.region,
            control_ring,
            control_packet_bytes: speed.default_control_packet_bytes(),
            buffer,
            descriptor: DeviceDescriptor::EMPTY,
            configuration: ConfigurationInfo { value: 0, total_length: 0, interfaces: Vec::new() },
            manufacturer: String::new(),
            product: String::new(),
            serial: String::new(),
        };
        device.address(hc)?;
        device.read_descriptors(hc)?;
        Ok(device)
    }

    fn slot_context(&self, context_entries: u8) -> SlotContext {
        SlotContext { route_string: 0, speed: self.speed, context_entries, root_hub_port: self.port }
    }

    fn control_context(&self) -> EndpointContext {
        EndpointContext {
            endpoint_type: EndpointType::Control,
            max_packet_bytes: self.control_packet_bytes,
            max_burst: 0,
            dequeue: self.control_ring.initial_dequeue(),
            average_trb_bytes: CONTROL_AVERAGE_TRB_BYTES,
            max_primary_streams: 0,
        }
    }

    fn write_words(&self, offset: usize, words: &[u32]) {
        for (index, word) in words.iter().enumerate() {
            self.input.region.write_words(offset + 4 * index, &[*word]);
        }
    }

    /// Fills the input context: control flags, slot context, and the listed endpoints.
    fn prepare_input(
        &self,
        drop_flags: u32,
        add_flags: u32,
        slot: SlotContext,
        endpoints: &[(u8, EndpointContext)],
    ) {
        self.input.region.zero(0, self.layout.input_context_bytes());
        self.write_words(0, &context::input_control(drop_flags, add_flags));
        self.write_words(self.layout.input_slot_offset(), &slot.encode());
        for (dci, endpoint) in endpoints {
            self.write_words(self.layout.input_endpoint_offset(*dci), &endpoint.encode());
        }
    }

    /// Address Device with the slot and control endpoint contexts (§4.3.3, A0 | A1 exactly).
    fn address<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
    ) -> Result<(), UsbError> {
        self.prepare_input(0, 0b11, self.slot_context(1), &[(CONTROL_DCI, self.control_context())]);
        hc.platform().clean_for_device(&self.input.region.buffer());
        hc.execute_command(Trb::address_device(self.input.bus_address, self.slot_id))?;
        Ok(())
    }

    /// Device descriptor (first 8 bytes for the control packet size, then all 18), the
    /// configuration, and the strings.
    fn read_descriptors<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
    ) -> Result<(), UsbError> {
        let head = self.control_in(hc, SetupPacket::get_descriptor(descriptor_type::DEVICE, 0, 0, 8))?;
        if head.len() >= 8 {
            let usb_version = u16::from_le_bytes([head[2], head[3]]);
            let packet = if usb_version >= 0x0300 { 1u16 << head[7].min(15) } else { u16::from(head[7]) };
            if packet != self.control_packet_bytes && packet >= 8 {
                self.control_packet_bytes = packet;
                self.prepare_input(0, 0b10, self.slot_context(1), &[(CONTROL_DCI, self.control_context())]);
                hc.platform().clean_for_device(&self.input.region.buffer());
                hc.execute_command(Trb::evaluate_context(self.input.bus_address, self.slot_id))?;
            }
        }
        let bytes = self.control_in(
            hc,
            SetupPacket::get_descriptor(descriptor_type::DEVICE, 0, 0, DeviceDescriptor::BYTES as u16),
        )?;
        self.descriptor = DeviceDescriptor::parse(&bytes)?;
        let header =
            self.control_in(hc, SetupPacket::get_descriptor(descriptor_type::CONFIGURATION, 0, 0, 9))?;
        let total = configuration_total_length(&header)?.min(CONTROL_BUFFER_BYTES as u16);
        let bytes =
            self.control_in(hc, SetupPacket::get_descriptor(descriptor_type::CONFIGURATION, 0, 0, total))?;
        self.configuration = ConfigurationInfo::parse(&bytes)?;
        let indices =
            [self.descriptor.manufacturer_index, self.descriptor.product_index, self.descriptor.serial_index];
        if indices.iter().any(|index| *index != 0) {
            let language =
                match self.control_in(hc, SetupPacket::get_descriptor(descriptor_type::STRING, 0, 0, 255)) {
                    Ok(bytes) => first_language(&bytes),
                    Err(_) => 0x0409,
                };
            let [manufacturer, product, serial] = indices;
            self.manufacturer = self.read_string(hc, manufacturer, language);
            self.product = self.read_string(hc, product, language);
            self.serial = self.read_string(hc, serial, language);
        }
        Ok(())
    }

    /// A string descriptor's text; empty when the index is 0 or the device refuses it.
    fn read_string<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        index: u8,
        language: u16,
    ) -> String {
        if index == 0 {
            return String::new();
        }
        self.control_in(hc, SetupPacket::get_descriptor(descriptor_type::STRING, index, language, 255))
            .ok()
            .and_then(|bytes| string_from_descriptor(&bytes).ok())
            .unwrap_or_default()
    }

    /// A control request with an IN data stage; returns the bytes the device sent.
    pub fn control_in<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        setup: SetupPacket,
    ) -> Result<Vec<u8>, UsbError> {
        let length = usize::from(setup.length).min(CONTROL_BUFFER_BYTES);
        let received = self.control_transfer(hc, setup, length)?;
        hc.platform().invalidate_for_cpu(&self.buffer.region.slice(0, length.max(1)));
        let mut bytes = alloc::vec![0u8; received];
        self.buffer.region.read_bytes(0, &mut bytes);
        Ok(bytes)
    }

    /// A control request without a data stage.
    pub fn control_no_data<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        setup: SetupPacket,
    ) -> Result<(), UsbError> {
        self.control_transfer(hc, SetupPacket { length: 0, ..setup }, 0).map(|_| ())
    }

    /// Queues Setup, optional IN Data and Status stage TDs, rings the endpoint and waits for
    /// the Status stage's event (§4.11.2.2). A STALL or other error fails the request and the
    /// endpoint is made usable again.
    fn control_transfer<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        setup: SetupPacket,
        length: usize,
    ) -> Result<usize, UsbError> {
        let platform = hc.platform();
        let has_data = length > 0;
        let enqueue = |ring: &mut ProducerRing, trb: Trb| {
            ring.enqueue_td(platform, &[trb]).map_err(|_| UsbError::TransferRingFull { dci: CONTROL_DCI })
        };
        enqueue(&mut self.control_ring, Trb::setup_stage(setup.to_u64(), has_data.then_some(true)))?;
        let data = if has_data {
            Some(enqueue(
                &mut self.control_ring,
                Trb::data_stage(self.buffer.bus_address, length as u32, true),
            )?)
        } else {
            None
        };
        let status = enqueue(&mut self.control_ring, Trb::status_stage(!has_data))?;
        hc.ring_doorbell(self.slot_id, CONTROL_DCI, 0);
        let deadline = Deadline::after_us(platform, CONTROL_TIMEOUT_US);
        let mut received = length;
        loop {
            hc.process_events();
            while let Some(event) = hc.pop_transfer_event_for(self.slot_id, CONTROL_DCI) {
                let Some((placement, _)) = self.control_ring.retire(event.trb_pointer) else {
                    continue;
                };
                if !event.code.is_success() {
                    self.recover_control_endpoint(hc)?;
                    return Err(self.transfer_failed(hc, CONTROL_DCI, event.code));
                }
                if Some(placement) == data {
                    received = length.saturating_sub(event.residual_bytes as usize);
                }
                if placement == status {
                    return Ok(received);
                }
            }
            if deadline.has_passed(platform) {
                let waited_ms = deadline.elapsed_us(platform) / 1000;
                let _ = self.stop_and_skip(hc, CONTROL_DCI);
                return Err(UsbError::TransferTimeout { slot_id: self.slot_id, dci: CONTROL_DCI, waited_ms });
            }
            core::hint::spin_loop();
        }
    }

    /// After a STALL on the control endpoint: Reset Endpoint, then move its dequeue past
    /// everything queued (§4.6.8, §4.6.10; docs/usb-storage.md §4 step 7).
    fn recover_control_endpoint<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
    ) -> Result<(), UsbError> {
        hc.execute_command(Trb::reset_endpoint(self.slot_id, CONTROL_DCI))?;
        let (dequeue, cycle) = self.control_ring.enqueue_position();
        hc.execute_command(Trb::set_tr_dequeue(self.slot_id, CONTROL_DCI, 0, dequeue, cycle))?;
        self.control_ring.retire_all();
        Ok(())
    }

    /// Stops the control endpoint and moves its dequeue past everything queued.
    fn stop_and_skip<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        dci: u8,
    ) -> Result<(), UsbError> {
        hc.execute_command(Trb::stop_endpoint(self.slot_id, dci))?;
        let (dequeue, cycle) = self.control_ring.enqueue_position();
        hc.execute_command(Trb::set_tr_dequeue(self.slot_id, dci, 0, dequeue, cycle))?;
        self.control_ring.retire_all();
        Ok(())
    }

    /// A failed transfer, with the endpoint state from the output context.
    pub fn transfer_failed<R: RegisterIo, P: Platform>(
        &self,
        hc: &HostController<'_, R, P>,
        dci: u8,
        code: CompletionCode,
    ) -> UsbError {
        UsbError::TransferFailed {
            slot_id: self.slot_id,
            dci,
            code,
            endpoint_state: self.endpoint_state(hc, dci),
        }
    }

    /// The endpoint state the controller keeps in the output context (§6.2.3).
    pub fn endpoint_state<R: RegisterIo, P: Platform>(&self, hc: &HostController<'_, R, P>, dci: u8) -> u8 {
        let offset = self.layout.output_endpoint_offset(dci);
        hc.platform().invalidate_for_cpu(&self.output.slice(offset, 4));
        context::endpoint_state(self.output.read_u32(offset))
    }

    /// Configure Endpoint (§4.6.6): adds `endpoints`, dropping `dropped` DCIs first (a drop and
    /// add of the same DCI re-initialises its ring pointer and sequence number). The slot
    /// context's Context Entries becomes the highest DCI in use.
    pub fn configure_endpoints<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        dropped: &[u8],
        endpoints: &[(u8, EndpointContext)],
    ) -> Result<(), UsbError> {
        let drop_flags = dropped.iter().fold(0u32, |flags, dci| flags | (1 << dci));
        let add_flags = endpoints.iter().fold(1u32, |flags, (dci, _)| flags | (1 << dci));
        let entries = endpoints.iter().map(|(dci, _)| *dci).chain(dropped.iter().copied()).max().unwrap_or(1);
        self.prepare_input(drop_flags, add_flags, self.slot_context(entries), endpoints);
        hc.platform().clean_for_device(&self.input.region.buffer());
        hc.execute_command(Trb::configure_endpoint(self.input.bus_address, self.slot_id))?;
        Ok(())
    }

    /// SET_CONFIGURATION of the configuration read at enumeration.
    pub fn set_configuration<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
    ) -> Result<(), UsbError> {
        let value = self.configuration.value;
        self.control_no_data(hc, SetupPacket::set_configuration(value))
    }

    pub fn reset_endpoint<R: RegisterIo, P: Platform>(
        &self,
        hc: &mut HostController<'_, R, P>,
        dci: u8,
    ) -> Result<(), UsbError> {
        hc.execute_command(Trb::reset_endpoint(self.slot_id, dci)).map(|_| ())
    }

    pub fn stop_endpoint<R: RegisterIo, P: Platform>(
        &self,
        hc: &mut HostController<'_, R, P>,
        dci: u8,
    ) -> Result<(), UsbError> {
        hc.execute_command(Trb::stop_endpoint(self.slot_id, dci)).map(|_| ())
    }

    pub fn set_dequeue<R: RegisterIo, P: Platform>(
        &self,
        hc: &mut HostController<'_, R, P>,
        dci: u8,
        stream_id: u16,
        (dequeue, cycle): (u64, bool),
    ) -> Result<(), UsbError> {
        hc.execute_command(Trb::set_tr_dequeue(self.slot_id, dci, stream_id, dequeue, cycle)).map(|_| ())
    }

    /// CLEAR_FEATURE(ENDPOINT_HALT): the device side of a halt (USB 2.0 §9.4.1).
    pub fn clear_halt<R: RegisterIo, P: Platform>(
        &mut self,
        hc: &mut HostController<'_, R, P>,
        endpoint_address: u8,
    ) -> Result<(), UsbError> {
        self.control_no_data(hc, SetupPacket::clear_endpoint_halt(endpoint_address))
    }

    pub fn control_packet_bytes(&self) -> u16 {
        self.control_packet_bytes
    }
}
