//! The VideoCore mailbox property interface (channel 8): board revision, firmware revision,
//! memory split, clock rates (and raising the ARM clock to its maximum), power, the firmware's
//! copy of the command line (docs/hardware.md §4.6, after circle's `bcmmailbox.cpp`,
//! `bcmpropertytags.h`, `cputhrottle.cpp` and the Raspberry Pi firmware wiki's tag list).
#![forbid(unsafe_code)]

use blockdev::Clock;
use core::fmt;
use hal::barrier;
use hal::mmio::RegisterIo;
use hal::platform::wait_until;

/// Register offsets from the mailbox base (docs/hardware.md §4.6).
pub mod offsets {
    pub const READ: usize = 0x00;
    pub const READ_STATUS: usize = 0x18;
    pub const WRITE: usize = 0x20;
    pub const WRITE_STATUS: usize = 0x38;
}

const STATUS_EMPTY: u32 = 1 << 30;
const STATUS_FULL: u32 = 1 << 31;
pub const PROPERTY_CHANNEL: u32 = 8;
const REQUEST_CODE: u32 = 0;
const RESPONSE_SUCCESS: u32 = 0x8000_0000;
const TAG_RESPONSE_BIT: u32 = 0x8000_0000;

/// Property tags used by the kernel (docs/hardware.md §4.6; docs/qemu.md §1 for what QEMU answers).
pub mod tags {
    pub const GET_FIRMWARE_REVISION: u32 = 0x0000_0001;
    pub const GET_BOARD_REVISION: u32 = 0x0001_0002;
    pub const GET_ARM_MEMORY: u32 = 0x0001_0005;
    pub const SET_POWER_STATE: u32 = 0x0002_8001;
    pub const GET_CLOCK_RATE: u32 = 0x0003_0002;
    pub const GET_MAX_CLOCK_RATE: u32 = 0x0003_0004;
    /// {sensor id 0}; answers {id, SoC temperature in thousandths of a °C}.
    pub const GET_TEMPERATURE: u32 = 0x0003_0006;
    /// {sensor id 0}; answers {id, the temperature at which the firmware throttles, m°C}: a
    /// limit, not the highest temperature reached.
    pub const GET_MAX_TEMPERATURE: u32 = 0x0003_000a;
    /// {sticky bits to clear}; answers the throttle flags (bit meanings in
    /// `bench::conditions::ThrottleFlags`).
    pub const GET_THROTTLED: u32 = 0x0003_0046;
    /// {clock id}; answers {clock id, the rate the firmware measures, Hz}: what runs, where
    /// GET_CLOCK_RATE answers what was requested.
    pub const GET_CLOCK_RATE_MEASURED: u32 = 0x0003_0047;
    /// {clock id, rate in Hz, skip setting turbo}; answers {clock id, rate set}.
    pub const SET_CLOCK_RATE: u32 = 0x0003_8002;
    pub const SET_GPIO_STATE: u32 = 0x0003_8041;
    /// Reload the VL805's firmware after a PCIe reset (docs/pcie-brcmstb.md §8).
    pub const NOTIFY_XHCI_RESET: u32 = 0x0003_0058;
    pub const GET_COMMAND_LINE: u32 = 0x0005_0001;

    /// The tag's name as the firmware wiki's tag list spells it, for "the firmware did not answer
    /// …" messages.
    pub fn name(tag: u32) -> Option<&'static str> {
        Some(match tag {
            GET_FIRMWARE_REVISION => "GET_FIRMWARE_REVISION",
            GET_BOARD_REVISION => "GET_BOARD_REVISION",
            GET_ARM_MEMORY => "GET_ARM_MEMORY",
            SET_POWER_STATE => "SET_POWER_STATE",
            GET_CLOCK_RATE => "GET_CLOCK_RATE",
            GET_MAX_CLOCK_RATE => "GET_MAX_CLOCK_RATE",
            GET_TEMPERATURE => "GET_TEMPERATURE",
            GET_MAX_TEMPERATURE => "GET_MAX_TEMPERATURE",
            GET_THROTTLED => "GET_THROTTLED",
            GET_CLOCK_RATE_MEASURED => "GET_CLOCK_RATE_MEASURED",
            SET_CLOCK_RATE => "SET_CLOCK_RATE",
            SET_GPIO_STATE => "SET_GPIO_STATE",
            NOTIFY_XHCI_RESET => "NOTIFY_XHCI_RESET",
            GET_COMMAND_LINE => "GET_COMMAND_LINE",
            _ => return None,
        })
    }
}

/// Clock identifiers for GET_CLOCK_RATE (docs/hardware.md §2.2).
pub mod clocks {
    pub const EMMC: u32 = 1;
    pub const UART: u32 = 2;
    pub const ARM: u32 = 3;
    pub const CORE: u32 = 4;
    pub const EMMC2: u32 = 12;

    /// The clock's name in the firmware wiki's list, lower case as the console prints it.
    pub fn name(clock_id: u32) -> &'static str {
        match clock_id {
            EMMC => "emmc",
            UART => "uart",
            ARM => "arm",
            CORE => "core",
            EMMC2 => "emmc2",
            _ => "clock",
        }
    }

    /// The clocks the conditions of a run report before and after: the ARM's, the core's (the
    /// BCM2835 sdhost's base clock) and the SD hosts' (EMMC for the Arasan, EMMC2 for BCM2711).
    pub const REPORTED: [u32; 4] = [ARM, CORE, EMMC, EMMC2];
}

/// Words in a property buffer: enough for a 2 KiB command line plus headers.
pub const BUFFER_WORDS: usize = 540;

/// The memory the firmware reads the request from and writes the answer into.
#[repr(C, align(16))]
#[derive(Clone)]
pub struct PropertyBuffer {
    pub words: [u32; BUFFER_WORDS],
}

impl Default for PropertyBuffer {
    fn default() -> Self {
        PropertyBuffer { words: [0; BUFFER_WORDS] }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxError {
    /// The write mailbox stayed full.
    WriteTimeout { status: u32 },
    /// No answer arrived in time.
    ReadTimeout { status: u32 },
    /// The firmware answered with something other than success in the buffer header.
    RequestFailed { response_code: u32 },
    /// The firmware did not mark the tag as answered.
    TagNotAnswered { tag: u32 },
    /// The request does not fit in a [`PropertyBuffer`].
    BufferTooSmall,
}

impl fmt::Display for MailboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MailboxError::WriteTimeout { status } => {
                write!(f, "mailbox write stayed full (status {status:#010x})")
            }
            MailboxError::ReadTimeout { status } => {
                write!(f, "no mailbox answer (status {status:#010x})")
            }
            MailboxError::RequestFailed { response_code } => {
                write!(f, "firmware refused the request (code {response_code:#010x})")
            }
            MailboxError::TagNotAnswered { tag } => match tags::name(*tag) {
                Some(name) => write!(f, "firmware did not answer {name} ({tag:#010x})"),
                None => write!(f, "firmware did not answer tag {tag:#010x}"),
            },
            MailboxError::BufferTooSmall => write!(f, "property request too large"),
        }
    }
}

impl PropertyBuffer {
    /// Lays out one tag: header, `request` words, room for `response_words` words, end tag.
    /// Returns the index of the tag's first value word.
    pub fn prepare_single_tag(
        &mut self,
        tag: u32,
        request: &[u32],
        response_words: usize,
    ) -> Result<usize, MailboxError> {
        let value_words = request.len().max(response_words);
        let total_words = 2 + 3 + value_words + 1;
        if total_words > BUFFER_WORDS {
            return Err(MailboxError::BufferTooSmall);
        }
        self.words = [0; BUFFER_WORDS];
        self.words[0] = (total_words * 4) as u32;
        self.words[1] = REQUEST_CODE;
        self.words[2] = tag;
        self.words[3] = (value_words * 4) as u32;
        self.words[4] = (request.len() * 4) as u32;
        self.words[5..5 + request.len()].copy_from_slice(request);
        self.words[total_words - 1] = 0;
        Ok(5)
    }

    /// The answer to the tag laid out by [`PropertyBuffer::prepare_single_tag`]: its value words
    /// (as many as the firmware says it wrote, up to the room there was), judged by `rules`.
    pub fn single_tag_response(&self, rules: CallRules) -> Result<&[u32], MailboxError> {
        if self.words[1] != RESPONSE_SUCCESS {
            return Err(MailboxError::RequestFailed { response_code: self.words[1] });
        }
        let length_word = self.words[4];
        if length_word & TAG_RESPONSE_BIT == 0 {
            if rules.tag_response_required {
                return Err(MailboxError::TagNotAnswered { tag: self.words[2] });
            }
            return Ok(&self.words[5..5]);
        }
        let room_words = (self.words[3] / 4) as usize;
        let answered_words = ((length_word & !TAG_RESPONSE_BIT) as usize).div_ceil(4).min(room_words);
        Ok(&self.words[5..5 + answered_words])
    }
}

/// The mailbox registers.
pub struct Mailbox<R: RegisterIo> {
    registers: R,
}

/// How long one property call may take; the firmware answers most tags in microseconds.
pub const CALL_TIMEOUT_US: u64 = 100_000;

/// How a property call is waited for and judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallRules {
    pub timeout_us: u64,
    /// The tag's response bit (bit 31 of its length word) must be set; otherwise only the
    /// buffer's status decides.
    pub tag_response_required: bool,
}

/// Most tags: [`CALL_TIMEOUT_US`], and the tag must say it was answered.
pub const DEFAULT_RULES: CallRules = CallRules { timeout_us: CALL_TIMEOUT_US, tag_response_required: true };

/// NOTIFY_XHCI_RESET makes the VideoCore load the VL805's firmware before it answers, which
/// takes longer than other tags; Linux waits up to a second for any call and judges it by the
/// buffer's status word alone (`drivers/firmware/raspberrypi.c`, `rpi_firmware_transaction`:
/// `wait_for_completion_timeout(.., HZ)`, then only `buf[1]`). Whether the load worked is then
/// read from the VL805 itself (`pci::vl805`).
pub const NOTIFY_XHCI_RESET_RULES: CallRules =
    CallRules { timeout_us: 1_000_000, tag_response_required: false };

/// The rules a tag is called with.
pub fn rules_for(tag: u32) -> CallRules {
    match tag {
        tags::NOTIFY_XHCI_RESET => NOTIFY_XHCI_RESET_RULES,
        _ => DEFAULT_RULES,
    }
}

impl<R: RegisterIo> Mailbox<R> {
    pub fn new(registers: R) -> Self {
        Mailbox { registers }
    }

    /// Sends the buffer at `buffer_bus_address` (as the VideoCore sees it; 16-byte aligned) on
    /// the property channel and waits up to `timeout_us` for the answer. The caller makes the
    /// buffer visible to the VideoCore before (cache clean) and to the CPU after (cache
    /// invalidate).
    pub fn call<C: Clock + ?Sized>(
        &self,
        clock: &C,
        buffer_bus_address: u32,
        timeout_us: u64,
    ) -> Result<(), MailboxError> {
        barrier::full();
        // Drop stale answers left by the firmware or an earlier stage.
        let mut stale = 0;
        while self.registers.read32(offsets::READ_STATUS) & STATUS_EMPTY == 0 && stale < 64 {
            self.registers.read32(offsets::READ);
            stale += 1;
        }
        if !wait_until(clock, timeout_us, || self.registers.read32(offsets::WRITE_STATUS) & STATUS_FULL == 0)
        {
            return Err(MailboxError::WriteTimeout { status: self.registers.read32(offsets::WRITE_STATUS) });
        }
        let message = (buffer_bus_address & !0xf) | PROPERTY_CHANNEL;
        self.registers.write32(offsets::WRITE, message);
        let answered = wait_until(clock, timeout_us, || {
            self.registers.read32(offsets::READ_STATUS) & STATUS_EMPTY == 0
                && self.registers.read32(offsets::READ) == message
        });
        barrier::full();
        if answered {
            Ok(())
        } else {
            Err(MailboxError::ReadTimeout { status: self.registers.read32(offsets::READ_STATUS) })
        }
    }
}

/// Something that answers property tags one at a time: the kernel's firmware, or a test double.
pub trait PropertyTags {
    /// Sends `tag` with `request` and room for `response.len()` answer words; returns how many
    /// answer words the firmware wrote into `response`.
    fn call_tag(&self, tag: u32, request: &[u32], response: &mut [u32]) -> Result<usize, MailboxError>;
}

/// A clock's rate from GET_CLOCK_RATE or GET_MAX_CLOCK_RATE: the answer is {clock id, Hz}, and a
/// rate of 0 means the clock does not exist.
pub fn clock_rate_hz(firmware: &impl PropertyTags, tag: u32, clock_id: u32) -> Result<u32, MailboxError> {
    let mut answer = [0u32; 2];
    match firmware.call_tag(tag, &[clock_id], &mut answer)? {
        2.. if answer[1] > 0 => Ok(answer[1]),
        _ => Err(MailboxError::TagNotAnswered { tag }),
    }
}

/// SET_CLOCK_RATE with turbo settings applied (skip-turbo 0, as circle's `CCPUThrottle` does for
/// its maximum); the firmware answers the rate it set.
pub fn set_clock_rate(
    firmware: &impl PropertyTags,
    clock_id: u32,
    rate_hz: u32,
) -> Result<u32, MailboxError> {
    let mut answer = [0u32; 2];
    match firmware.call_tag(tags::SET_CLOCK_RATE, &[clock_id, rate_hz, 0], &mut answer)? {
        2.. if answer[1] > 0 => Ok(answer[1]),
        _ => Err(MailboxError::TagNotAnswered { tag: tags::SET_CLOCK_RATE }),
    }
}

/// GET_CLOCK_RATE_MEASURED: the rate the firmware measures on `clock_id`, where GET_CLOCK_RATE
/// answers the rate last requested (raspberrypi/firmware #1521 and #1619; circle's
/// `machineinfo.cpp` asks for it). Not rounded: a measured rate is rarely a whole MHz.
pub fn measured_clock_rate_hz(firmware: &impl PropertyTags, clock_id: u32) -> Result<u32, MailboxError> {
    clock_rate_hz(firmware, tags::GET_CLOCK_RATE_MEASURED, clock_id)
}

/// A clock as the firmware reports it: the rate last requested and the rate it measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    pub clock_id: u32,
    pub requested_hz: Result<u32, MailboxError>,
    pub measured_hz: Result<u32, MailboxError>,
}

impl ClockReading {
    pub fn read(firmware: &impl PropertyTags, clock_id: u32) -> ClockReading {
        ClockReading {
            clock_id,
            requested_hz: clock_rate_hz(firmware, tags::GET_CLOCK_RATE, clock_id),
            measured_hz: measured_clock_rate_hz(firmware, clock_id),
        }
    }
}

/// The request word of GET_THROTTLED that has the firmware clear its sticky ("has occurred")
/// bits once it has answered, as Linux's `drivers/hwmon/raspberrypi-hwmon.c` asks on every poll:
/// each answer then tells what happened since the previous one.
pub const CLEAR_STICKY_THROTTLE_BITS: u32 = 0xffff;

/// GET_THROTTLED, clearing the sticky bits after the answer.
pub fn throttled_flags(firmware: &impl PropertyTags) -> Result<u32, MailboxError> {
    let mut answer = [0u32; 1];
    match firmware.call_tag(tags::GET_THROTTLED, &[CLEAR_STICKY_THROTTLE_BITS], &mut answer)? {
        1.. => Ok(answer[0]),
        0 => Err(MailboxError::TagNotAnswered { tag: tags::GET_THROTTLED }),
    }
}

/// GET_TEMPERATURE or GET_MAX_TEMPERATURE for sensor 0 (the SoC's): thousandths of a °C.
pub fn temperature_millicelsius(firmware: &impl PropertyTags, tag: u32) -> Result<u32, MailboxError> {
    let mut answer = [0u32; 2];
    match firmware.call_tag(tag, &[0], &mut answer)? {
        2.. => Ok(answer[1]),
        _ => Err(MailboxError::TagNotAnswered { tag }),
    }
}

/// SET_GPIO_STATE {gpio, state}: drives a line of the firmware's GPIO expander (the firmware
/// numbers them from 128: Linux `drivers/gpio/gpio-raspberrypi-exp.c` RPI_EXP_GPIO_BASE).
pub fn set_gpio_state(firmware: &impl PropertyTags, gpio: u32, high: bool) -> Result<(), MailboxError> {
    let mut answer = [0u32; 2];
    firmware.call_tag(tags::SET_GPIO_STATE, &[gpio, u32::from(high)], &mut answer).map(|_| ())
}

/// How long a clock change takes to settle before it is read back (Linux
/// `bcm2835-cpufreq.c` transition latency, as circle's `cputhrottle.cpp` uses it).
pub const CLOCK_TRANSITION_US: u64 = 355;

/// The ARM clock after asking the firmware to run it at its maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuClock {
    /// The rate read back after the change (GET_CLOCK_RATE: what was requested).
    pub current_hz: Result<u32, MailboxError>,
    /// The rate the firmware measures (GET_CLOCK_RATE_MEASURED: what runs).
    pub measured_hz: Result<u32, MailboxError>,
    pub max_hz: Result<u32, MailboxError>,
    /// The SET_CLOCK_RATE outcome; `None` when the maximum was unknown and nothing was set.
    pub raised: Option<Result<u32, MailboxError>>,
}

impl CpuClock {
    /// The firmware leaves the ARM at its low clock until an OS raises it; this raises it to the
    /// maximum (GET_MAX_CLOCK_RATE, SET_CLOCK_RATE, clock 3), waits `settle`, and reads back
    /// the requested and the measured rate.
    pub fn raise_to_maximum(firmware: &impl PropertyTags, settle: impl FnOnce()) -> CpuClock {
        let max_hz = clock_rate_hz(firmware, tags::GET_MAX_CLOCK_RATE, clocks::ARM);
        let raised = max_hz.as_ref().ok().map(|max| set_clock_rate(firmware, clocks::ARM, *max));
        if matches!(raised, Some(Ok(_))) {
            settle();
        }
        let reading = ClockReading::read(firmware, clocks::ARM);
        CpuClock { current_hz: reading.requested_hz, measured_hz: reading.measured_hz, max_hz, raised }
    }
}

/// `cpu clock 1500 MHz (measured 1499.9 MHz; max 1500 MHz)`, naming whatever is unknown and
/// which tag the firmware did not answer.
impl fmt::Display for CpuClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.current_hz {
            Ok(hz) => write!(f, "cpu clock {} MHz", hz / 1_000_000)?,
            Err(error) => write!(f, "cpu clock unknown ({error})")?,
        }
        match self.measured_hz {
            Ok(hz) => write!(f, " (measured {}; ", MegahertzText(hz))?,
            Err(error) => write!(f, " (measured: {error}; ")?,
        }
        match self.max_hz {
            Ok(hz) => write!(f, "max {} MHz", hz / 1_000_000)?,
            Err(error) => return write!(f, "max unknown: {error}; not raised)"),
        }
        match (self.raised, self.current_hz, self.max_hz) {
            (Some(Err(error)), _, _) => write!(f, "; raising it failed: {error})"),
            (_, Ok(current), Ok(max)) if current < max => write!(f, "; the firmware kept it lower)"),
            _ => write!(f, ")"),
        }
    }
}

/// A rate in MHz with one decimal (`1499.9 MHz`), for measured rates, which are rarely whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MegahertzText(pub u32);

impl fmt::Display for MegahertzText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (u64::from(self.0) + 50_000) / 100_000;
        write!(f, "{}.{} MHz", tenths / 10, tenths % 10)
    }
}

/// QEMU's model of the firmware answers GET_FIRMWARE_REVISION with this fixed number (QEMU
/// `hw/misc/bcm2835_property.c`); the real firmware answers its build time in Unix seconds.
pub const QEMU_FIRMWARE_REVISION: u32 = 346_337;

/// The firmware's answer to GET_FIRMWARE_REVISION.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareRevision(pub u32);

impl FirmwareRevision {
    /// Whether this is QEMU's raspi machine rather than a Pi (docs/qemu.md §8).
    pub fn is_qemu_model(self) -> bool {
        self.0 == QEMU_FIRMWARE_REVISION
    }
}

/// The revision code's fields (Raspberry Pi documentation, "Raspberry Pi revision codes", new
/// style with bit 23 set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardRevision(pub u32);

impl BoardRevision {
    pub fn is_new_style(self) -> bool {
        self.0 & (1 << 23) != 0
    }

    pub fn model_name(self) -> Option<&'static str> {
        if !self.is_new_style() {
            return None;
        }
        Some(match (self.0 >> 4) & 0xff {
            0x00 => "Raspberry Pi Model A",
            0x01 => "Raspberry Pi Model B",
            0x02 => "Raspberry Pi Model A+",
            0x03 => "Raspberry Pi Model B+",
            0x04 => "Raspberry Pi 2 Model B",
            0x06 => "Raspberry Pi Compute Module 1",
            0x09 => "Raspberry Pi Zero",
            0x0c => "Raspberry Pi Zero W",
            0x08 => "Raspberry Pi 3 Model B",
            0x0a => "Raspberry Pi Compute Module 3",
            0x0d => "Raspberry Pi 3 Model B+",
            0x0e => "Raspberry Pi 3 Model A+",
            0x10 => "Raspberry Pi Compute Module 3+",
            0x11 => "Raspberry Pi 4 Model B",
            0x12 => "Raspberry Pi Zero 2 W",
            0x13 => "Raspberry Pi 400",
            0x14 => "Raspberry Pi Compute Module 4",
            0x15 => "Raspberry Pi Compute Module 4S",
            0x17 => "Raspberry Pi 5",
            0x18 => "Raspberry Pi Compute Module 5",
            0x19 => "Raspberry Pi 500",
            0x1a => "Raspberry Pi Compute Module 5 Lite",
            _ => return None,
        })
    }

    pub fn processor_name(self) -> Option<&'static str> {
        if !self.is_new_style() {
            return None;
        }
        Some(match (self.0 >> 12) & 0xf {
            0 => "BCM2835",
            1 => "BCM2836",
            2 => "BCM2837",
            3 => "BCM2711",
            4 => "BCM2712",
            _ => return None,
        })
    }

    pub fn memory_bytes(self) -> Option<u64> {
        if !self.is_new_style() {
            return None;
        }
        let code = (self.0 >> 20) & 0x7;
        Some((256u64 << 20) << code)
    }

    /// PCB revision 1.x (Pi 4B boards from 1.4 on carry the C0 stepping: docs/hardware.md §1.4).
    pub fn pcb_revision(self) -> u32 {
        self.0 & 0xf
    }

    /// The BCM2711 stepping the revision implies: Pi 400, CM4 and CM4S are C0; a Pi 4B is C0 from
    /// PCB revision 1.4 (circle `machineinfo.cpp`; raspberrypi/firmware#1704). `None` for
    /// other SoCs and unknown BCM2711 boards.
    pub fn bcm2711_stepping(self) -> Option<Bcm2711Stepping> {
        if self.processor_name() != Some("BCM2711") {
            return None;
        }
        match (self.0 >> 4) & 0xff {
            0x11 if self.pcb_revision() < 4 => Some(Bcm2711Stepping::B0),
            0x11 | 0x13 | 0x14 | 0x15 => Some(Bcm2711Stepping::C0),
            _ => None,
        }
    }
}

/// BCM2711's steppings, which differ in how their DMA masters see RAM (docs/hardware.md §1.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bcm2711Stepping {
    B0,
    C0,
}

impl Bcm2711Stepping {
    pub fn name(self) -> &'static str {
        match self {
            Bcm2711Stepping::B0 => "B0",
            Bcm2711Stepping::C0 => "C0",
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use blockdev::testing::SteppingClock;
    use core::cell::{Cell, RefCell};
    use std::collections::VecDeque;
    use std::string::ToString;

    #[test]
    fn qemu_board_revisions_decode() {
        // QEMU raspi3b and raspi4b answer 0xa02082 and 0xb03115 (docs/qemu.md §1).
        let pi3 = BoardRevision(0x00a0_2082);
        assert_eq!(pi3.model_name(), Some("Raspberry Pi 3 Model B"));
        assert_eq!(pi3.processor_name(), Some("BCM2837"));
        assert_eq!(pi3.memory_bytes(), Some(1 << 30));
        let pi4 = BoardRevision(0x00b0_3115);
        assert_eq!(pi4.model_name(), Some("Raspberry Pi 4 Model B"));
        assert_eq!(pi4.processor_name(), Some("BCM2711"));
        assert_eq!(pi4.memory_bytes(), Some(2 << 30));
        assert_eq!(pi4.pcb_revision(), 5);
        // Pi 5 8 GB: c04170.
        assert_eq!(BoardRevision(0x00d0_4170).model_name(), Some("Raspberry Pi 5"));
        assert_eq!(BoardRevision(0x00d0_4170).memory_bytes(), Some(8 << 30));
        assert_eq!(BoardRevision(0x000e).model_name(), None);
        // QEMU's raspi0, raspi1ap and raspi2b (docs/aarch32-pis.md §1).
        for (revision, model, soc) in [
            (0x0092_0092, "Raspberry Pi Zero", "BCM2835"),
            (0x0090_0021, "Raspberry Pi Model A+", "BCM2835"),
            (0x00a2_1041, "Raspberry Pi 2 Model B", "BCM2836"),
            (0x0090_00c1, "Raspberry Pi Zero W", "BCM2835"),
        ] {
            assert_eq!(BoardRevision(revision).model_name(), Some(model));
            assert_eq!(BoardRevision(revision).processor_name(), Some(soc));
        }
    }

    #[test]
    fn buffer_layout_and_answer() {
        let mut buffer = PropertyBuffer::default();
        let value_index = buffer.prepare_single_tag(tags::GET_CLOCK_RATE, &[clocks::EMMC2], 2).unwrap();
        assert_eq!(value_index, 5);
        assert_eq!(&buffer.words[..8], &[32, 0, tags::GET_CLOCK_RATE, 8, 4, 12, 0, 0]);
        assert_eq!(
            buffer.single_tag_response(DEFAULT_RULES),
            Err(MailboxError::RequestFailed { response_code: 0 })
        );
        buffer.words[1] = RESPONSE_SUCCESS;
        assert_eq!(
            buffer.single_tag_response(DEFAULT_RULES),
            Err(MailboxError::TagNotAnswered { tag: tags::GET_CLOCK_RATE })
        );
        buffer.words[4] = TAG_RESPONSE_BIT | 8;
        buffer.words[6] = 100_000_000;
        assert_eq!(buffer.single_tag_response(DEFAULT_RULES).unwrap(), &[12, 100_000_000]);
        assert_eq!(
            buffer.prepare_single_tag(tags::GET_COMMAND_LINE, &[], BUFFER_WORDS),
            Err(MailboxError::BufferTooSmall)
        );
    }

    /// A firmware that answers clock tags like QEMU's model (`set_echoes`: SET_CLOCK_RATE
    /// leaves the request in the buffer) or like a Pi's (the ARM runs at `current` until set).
    struct FakeFirmware {
        max_hz: Option<u32>,
        current_hz: Cell<u32>,
        set_answers: bool,
        calls: RefCell<std::vec::Vec<(u32, std::vec::Vec<u32>)>>,
    }
    impl PropertyTags for FakeFirmware {
        fn call_tag(&self, tag: u32, request: &[u32], response: &mut [u32]) -> Result<usize, MailboxError> {
            self.calls.borrow_mut().push((tag, request.to_vec()));
            let answer = match tag {
                tags::GET_MAX_CLOCK_RATE => self.max_hz.map(|hz| [request[0], hz]),
                tags::GET_CLOCK_RATE | tags::GET_CLOCK_RATE_MEASURED => {
                    Some([request[0], self.current_hz.get()])
                }
                tags::SET_CLOCK_RATE if self.set_answers => {
                    self.current_hz.set(request[1]);
                    Some([request[0], request[1]])
                }
                _ => None,
            };
            let answer = answer.ok_or(MailboxError::TagNotAnswered { tag })?;
            response[..2].copy_from_slice(&answer);
            Ok(2)
        }
    }

    fn fake(max_hz: Option<u32>, current_hz: u32, set_answers: bool) -> FakeFirmware {
        FakeFirmware { max_hz, current_hz: Cell::new(current_hz), set_answers, calls: RefCell::default() }
    }

    #[test]
    fn the_arm_clock_is_raised_to_the_maximum_and_read_back() {
        // A Pi 4 whose firmware left the ARM at 600 MHz.
        let firmware = fake(Some(1_500_000_000), 600_000_000, true);
        let settled = Cell::new(false);
        let clock = CpuClock::raise_to_maximum(&firmware, || settled.set(true));
        assert_eq!(clock.current_hz, Ok(1_500_000_000));
        assert_eq!(clock.max_hz, Ok(1_500_000_000));
        assert!(settled.get());
        assert_eq!(clock.to_string(), "cpu clock 1500 MHz (measured 1500.0 MHz; max 1500 MHz)");
        let calls = firmware.calls.borrow();
        assert_eq!(calls[0], (tags::GET_MAX_CLOCK_RATE, std::vec![clocks::ARM]));
        assert_eq!(calls[1], (tags::SET_CLOCK_RATE, std::vec![clocks::ARM, 1_500_000_000, 0]));
        assert_eq!(calls[2], (tags::GET_CLOCK_RATE, std::vec![clocks::ARM]));
        assert_eq!(calls[3], (tags::GET_CLOCK_RATE_MEASURED, std::vec![clocks::ARM]));
    }

    #[test]
    fn what_the_firmware_does_not_answer_is_named() {
        // QEMU answers 700 MHz for everything and does not implement SET (it echoes).
        let qemu = fake(Some(700_000_000), 700_000_000, true);
        assert_eq!(
            CpuClock::raise_to_maximum(&qemu, || {}).to_string(),
            "cpu clock 700 MHz (measured 700.0 MHz; max 700 MHz)"
        );
        let no_max = fake(None, 600_000_000, true);
        let clock = CpuClock::raise_to_maximum(&no_max, || panic!("nothing was set"));
        assert_eq!(clock.raised, None);
        assert_eq!(
            clock.to_string(),
            "cpu clock 600 MHz (measured 600.0 MHz; max unknown: firmware did not answer GET_MAX_CLOCK_RATE (0x00030004); not raised)"
        );
        let refused = fake(Some(1_800_000_000), 600_000_000, false);
        assert_eq!(
            CpuClock::raise_to_maximum(&refused, || {}).to_string(),
            "cpu clock 600 MHz (measured 600.0 MHz; max 1800 MHz; raising it failed: firmware did not answer SET_CLOCK_RATE (0x00038002))"
        );
        let kept_lower =
            FakeFirmware { current_hz: Cell::new(1_000_000_000), ..fake(Some(1_800_000_000), 0, false) };
        let clock = CpuClock {
            current_hz: clock_rate_hz(&kept_lower, tags::GET_CLOCK_RATE, clocks::ARM),
            measured_hz: measured_clock_rate_hz(&kept_lower, clocks::ARM),
            max_hz: Ok(1_800_000_000),
            raised: Some(Ok(1_800_000_000)),
        };
        assert_eq!(
            clock.to_string(),
            "cpu clock 1000 MHz (measured 1000.0 MHz; max 1800 MHz; the firmware kept it lower)"
        );
        let silent = CpuClock {
            current_hz: Err(MailboxError::ReadTimeout { status: 0x4000_0000 }),
            measured_hz: Err(MailboxError::ReadTimeout { status: 0x4000_0000 }),
            max_hz: Err(MailboxError::ReadTimeout { status: 0x4000_0000 }),
            raised: None,
        };
        assert!(silent.to_string().starts_with("cpu clock unknown (no mailbox answer"), "{silent}");
        // A rate of 0 means no such clock, for GET and for SET.
        let zero = fake(Some(0), 0, true);
        assert!(clock_rate_hz(&zero, tags::GET_MAX_CLOCK_RATE, clocks::ARM).is_err());
        assert_eq!(
            set_clock_rate(&zero, clocks::ARM, 0),
            Err(MailboxError::TagNotAnswered { tag: tags::SET_CLOCK_RATE })
        );
        assert_eq!(set_clock_rate(&qemu, clocks::ARM, 1), Ok(1));
    }

    #[test]
    fn tags_are_named_when_unanswered_and_measured_rates_keep_a_decimal() {
        assert_eq!(
            MailboxError::TagNotAnswered { tag: tags::GET_THROTTLED }.to_string(),
            "firmware did not answer GET_THROTTLED (0x00030046)"
        );
        assert_eq!(
            MailboxError::TagNotAnswered { tag: 0x0003_0099 }.to_string(),
            "firmware did not answer tag 0x00030099"
        );
        assert_eq!(MegahertzText(1_499_949_999).to_string(), "1499.9 MHz");
        assert_eq!(MegahertzText(1_499_950_000).to_string(), "1500.0 MHz");
        assert_eq!(MegahertzText(0).to_string(), "0.0 MHz");
        assert_eq!(clocks::name(clocks::EMMC2), "emmc2");
        assert_eq!(clocks::REPORTED, [clocks::ARM, clocks::CORE, clocks::EMMC, clocks::EMMC2]);
    }

    #[test]
    fn qemus_firmware_model_is_recognised_by_its_revision() {
        // QEMU answers 346337 (0x548e1); a real firmware its build time, e.g. 2023-10-17.
        assert!(FirmwareRevision(0x0005_48e1).is_qemu_model());
        assert!(!FirmwareRevision(1_697_544_000).is_qemu_model());
    }

    /// A mailbox that answers every write after `delay_reads` status reads.
    struct FakeMailbox {
        answers: RefCell<VecDeque<u32>>,
        answer_after_reads: Cell<u32>,
        respond: bool,
    }
    impl RegisterIo for FakeMailbox {
        fn read32(&self, offset_bytes: usize) -> u32 {
            match offset_bytes {
                offsets::READ_STATUS => {
                    let remaining = self.answer_after_reads.get();
                    if remaining > 0 {
                        self.answer_after_reads.set(remaining - 1);
                        return STATUS_EMPTY;
                    }
                    if self.answers.borrow().is_empty() {
                        STATUS_EMPTY
                    } else {
                        0
                    }
                }
                offsets::READ => self.answers.borrow_mut().pop_front().unwrap_or(0),
                _ => 0,
            }
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            if offset_bytes == offsets::WRITE && self.respond {
                self.answers.borrow_mut().push_back(value);
            }
        }
    }

    #[test]
    fn call_skips_stale_answers_and_times_out_without_one() {
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        let mailbox = Mailbox::new(FakeMailbox {
            answers: RefCell::new(VecDeque::from([0x1234_5678])),
            answer_after_reads: Cell::new(0),
            respond: true,
        });
        assert_eq!(mailbox.call(&clock, 0xc000_1000, CALL_TIMEOUT_US), Ok(()));
        let silent = Mailbox::new(FakeMailbox {
            answers: RefCell::new(VecDeque::new()),
            answer_after_reads: Cell::new(3),
            respond: false,
        });
        assert!(matches!(
            silent.call(&clock, 0xc000_1000, CALL_TIMEOUT_US),
            Err(MailboxError::ReadTimeout { .. })
        ));
    }

    #[test]
    fn the_vl805_reload_call_waits_a_second_and_reads_only_the_buffer_status() {
        // The VideoCore answers 400 ms after the call (the status register reads "empty" that
        // long: one read per microsecond of the clock).
        let slow = || {
            Mailbox::new(FakeMailbox {
                answers: RefCell::new(VecDeque::new()),
                answer_after_reads: Cell::new(400_000),
                respond: true,
            })
        };
        let rules = rules_for(tags::NOTIFY_XHCI_RESET);
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        assert_eq!(slow().call(&clock, 0xc000_1000, rules.timeout_us), Ok(()));
        // Any other tag still gives up after 100 ms.
        let other = rules_for(tags::GET_BOARD_REVISION);
        assert!(matches!(
            slow().call(&clock, 0xc000_1000, other.timeout_us),
            Err(MailboxError::ReadTimeout { .. })
        ));
        // An answer whose tag response bit is clear: fine for the reload (the VL805's version
        // decides), a failure for tags whose values are read.
        let mut buffer = PropertyBuffer::default();
        buffer.prepare_single_tag(tags::NOTIFY_XHCI_RESET, &[0x10_0000], 1).unwrap();
        buffer.words[1] = RESPONSE_SUCCESS;
        assert_eq!(buffer.single_tag_response(rules), Ok(&[][..]));
        assert_eq!(
            buffer.single_tag_response(other),
            Err(MailboxError::TagNotAnswered { tag: tags::NOTIFY_XHCI_RESET })
        );
        buffer.words[1] = 0x8000_0001;
        assert_eq!(
            buffer.single_tag_response(rules),
            Err(MailboxError::RequestFailed { response_code: 0x8000_0001 })
        );
    }
}
