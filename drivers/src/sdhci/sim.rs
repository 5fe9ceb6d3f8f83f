//! A simulated SDHCI controller with a simulated SD card, for host tests: registers as the
//! SDHCI specification lays them out, commands executed when word 0x0C is written, PIO through
//! the data port, ADMA2 descriptor walking over test memory through the board's DMA window,
//! error injection, and checks of the rules the driver must keep (write spacing at slow clocks,
//! no write to register 0x00, UHS Mode Select only with the SD clock stopped).
//!
//! Writes (CMD24/CMD25) go into a store of written sectors that later reads return: by PIO
//! only after Buffer Write Ready and a block at a time, by ADMA2 from memory the CPU cleaned
//! and fenced before the command; after the last block the card programs its flash for
//! [`PROGRAMMING_READS`] register reads, with Command Inhibit (DAT) set and DAT0 low, and only
//! then does Transfer Complete show (SDHCI §2.2.9 DAT Line Active, §2.2.17). A command other
//! than CMD13 while the card programs, a data port write without room, or a write whose
//! Transfer Mode says "read" is a violation.
//!
//! It is at least as strict as the silicon where the driver's correctness depends on it: a
//! tuning command raises Buffer Read Ready only (SDHCI §2.2.24), tuning succeeds only when the
//! driver follows the specification's sequence (the card's tuning command, CMD19 or CMD21, a
//! single-block read without DMA of the card's tuning block size; every command it sent is in
//! `tuning_log`, every setup fault in the violations), data at more than 50 MHz without a tuned
//! sampling clock (or through the BCM2712's 50 MHz-limited PHY) fails its CRC, and DMA outside
//! the window fails with an ADMA error. Capabilities come per board ([`SimBoard`]).
//! The card behaves like QEMU's (`hw/sd/sd.c`, as docs/qemu.md §2 describes it) unless told otherwise.
#![forbid(unsafe_code)]

extern crate std;

use super::quirks::bcm2712_config;
use super::regs::{interrupt, offsets};
use crate::sd::card_registers::ocr;
use crate::sd::sim_card::SimCard;
use blockdev::Clock;
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use hal::platform::BusTranslation;
use hal::testing::ByteRange;
use std::collections::VecDeque;
use std::vec;
use std::vec::Vec;

mod queue;

/// Error Interrupt Status bits of the CMD line (§2.2.18: command timeout, CRC, end bit, index),
/// in their word-0x30 positions.
const COMMAND_LINE_ERRORS: u32 = 0x000f_0000;

/// The shared test arena (a 1 GHz clock stepping 1 µs per read, so waits end quickly).
pub type TestPlatform = hal::testing::ArenaPlatform;

/// Where an injected error strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectAt {
    /// The command itself fails (no response / bad response).
    Command,
    /// The data phase fails after this many blocks.
    Data { after_blocks: u32 },
    /// The data phase stops without any status (the card went silent).
    Stall { after_blocks: u32 },
}

#[derive(Clone, Copy, Debug)]
pub struct Injection {
    pub command_index: u8,
    /// Error Interrupt Status bits in their word-0x30 positions (e.g. `interrupt::DATA_CRC`).
    pub error_bits: u32,
    pub at: InjectAt,
    /// How many commands it affects.
    pub times: u32,
}

/// The controller as one board has it: what its Capabilities and Version registers read, the
/// real frequency of its base clock, how its DMA sees memory, and whether it has the BCM2712
/// cfg block at +0x400. The Pi values are modelled on what the drivers known to work do with
/// these hosts (docs/hardware.md §2), not register dumps.
#[derive(Clone, Copy, Debug)]
pub struct SimBoard {
    pub capabilities: (u32, u32),
    pub version_word: u32,
    pub base_clock_hz: u32,
    /// Bus addresses the DMA engine can reach: bus `bus_base ..` is test memory `cpu_base ..`.
    pub dma_window: BusTranslation,
    pub config_block: bool,
    /// Whether an ADMA2 descriptor with length 0 moves 65536 bytes (SDHCI §1.13.4; QEMU's
    /// `sdhci.c`). Without it such a descriptor is an ADMA error, as the hosts Linux marks
    /// `SDHCI_QUIRK_BROKEN_ADMA_ZEROLEN_DESC` misbehave.
    pub zero_length_descriptor_is_64k: bool,
}

/// The spec-version field of the Version register for 3.00 (SDHCI §2.2.34).
const VERSION_3_00: u32 = 0x0002_0000;

impl SimBoard {
    /// QEMU's raspi Arasan and EMMC2 (docs/qemu.md §2): 52 MHz, high speed, no DMA.
    pub const QEMU_RASPI: SimBoard = SimBoard {
        capabilities: (0x0521_34b4, 0),
        version_word: 0x2402_0000,
        base_clock_hz: 52_000_000,
        dma_window: BusTranslation::IDENTITY,
        config_block: false,
        zero_length_descriptor_is_64k: true,
    };
    /// QEMU's `sdhci-pci` with `sd-spec-version=3`: SDMA, ADMA2 (32-bit).
    pub const QEMU_PCI: SimBoard = SimBoard { capabilities: (0x0578_34b4, 0), ..SimBoard::QEMU_RASPI };
    /// The Pi 3 Arasan: the Capabilities register reads 0 (Linux supplies the values); the
    /// firmware runs the EMMC clock at 200 MHz (docs/hardware.md §2.2).
    pub const PI3_ARASAN: SimBoard = SimBoard {
        capabilities: (0, 0),
        version_word: VERSION_3_00,
        base_clock_hz: 200_000_000,
        dma_window: BusTranslation::IDENTITY,
        config_block: false,
        zero_length_descriptor_is_64k: true,
    };
    /// The Pi 4 EMMC2 as its register reads (0x45EE_6432, raspberrypi/linux #2392): 100 MHz
    /// base clock, 2 KiB blocks, 8-bit bus, ADMA2/SDMA, high speed, 3.3 and 1.8 V; SDR50 and
    /// DDR50. Its DMA sees the test memory at bus 0xC000_0000 as the B0 stepping sees RAM
    /// (docs/hardware.md §1.4).
    pub const PI4_EMMC2_B0: SimBoard = SimBoard {
        capabilities: (0x45ee_6432, 0b101),
        version_word: VERSION_3_00,
        base_clock_hz: 100_000_000,
        dma_window: BusTranslation {
            cpu_base: hal::testing::PHYSICAL_BASE,
            bus_base: 0xc000_0000,
            size_bytes: 256 << 20,
        },
        config_block: false,
        zero_length_descriptor_is_64k: true,
    };
    /// The Pi 5 sdio1: 200 MHz base clock, ADMA2 with 64-bit addressing, 3.3 and 1.8 V, no UHS
    /// modes in the register (Linux takes them from the device tree), cfg block with the
    /// 50 MHz strap set; AXI DMA is the identity (docs/hardware.md §2.4, §2.7).
    pub const PI5_SDHCI: SimBoard = SimBoard {
        capabilities: (
            (200 << 8) | (1 << 16) | (1 << 19) | (1 << 21) | (1 << 22) | (1 << 24) | (1 << 26) | (1 << 28),
            0,
        ),
        version_word: VERSION_3_00,
        base_clock_hz: 200_000_000,
        dma_window: BusTranslation::IDENTITY,
        config_block: true,
        zero_length_descriptor_is_64k: true,
    };
}

/// Register reads after a command is written before its completion (or error) shows.
pub const COMMAND_LATENCY_READS: u32 = 3;
/// Register reads after Command Complete before an ADMA2 transfer has run and Transfer Complete
/// shows.
pub const DMA_LATENCY_READS: u32 = 3;
/// Register reads a card stays busy programming after the last block of a write.
pub const PROGRAMMING_READS: u32 = 6;
/// CMD19s the simulated controller needs before it has found a sampling point.
pub const TUNING_PASSES: u32 = 4;
/// Interrupt-status polls before a tuning block has arrived (it takes 64 bytes on the bus).
const TUNING_BLOCK_POLLS: u32 = 2;
/// The highest SDCLK at which data arrives intact without a tuned sampling clock.
const UNTUNED_LIMIT_HZ: u32 = 50_000_000;

/// Host Control 2 bits (SDHCI §2.2.24), in word 0x3C.
const UHS_MODE_MASK: u32 = 0b111 << 16;
const SIGNALING_1V8: u32 = 1 << 19;
const EXECUTE_TUNING: u32 = 1 << 22;
const SAMPLING_CLOCK_SELECT: u32 = 1 << 23;
const SD_CLOCK_ENABLE: u32 = 1 << 2;

/// Transfer Mode and Command bits (SDHCI §2.2.5, §2.2.6), in word 0x0C.
const TRANSFER_MODE_DMA: u32 = 1 << 0;
const TRANSFER_MODE_READ: u32 = 1 << 4;
const TRANSFER_MODE_MULTI_BLOCK: u32 = 1 << 5;
const COMMAND_DATA_PRESENT: u32 = 1 << 21;

/// Card states (SD §4.10.1), as the simulation tracks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Ready,
    Identification,
    StandBy,
    Transfer,
    SendingData,
    ReceiveData,
    Programming,
}

impl State {
    fn bits(self) -> u32 {
        match self {
            State::Idle => 0,
            State::Ready => 1,
            State::Identification => 2,
            State::StandBy => 3,
            State::Transfer => 4,
            State::SendingData => 5,
            State::ReceiveData => 6,
            State::Programming => 7,
        }
    }
}

/// Where the data of a running transfer comes from.
#[derive(Clone, Debug)]
enum Source {
    Bytes(Vec<u8>),
    Sectors {
        first_sector: u64,
    },
    /// An eMMC's CMD19 BUS_TEST_W block (JESD84-B51 §6.4.5).
    BusTest,
    /// CMD49's block, for the extension register its argument names ([`queue`]).
    Extension {
        argument: u32,
    },
}

#[derive(Clone, Debug)]
struct Transfer {
    source: Source,
    block_bytes: usize,
    blocks: u32,
    blocks_sent: u32,
    /// A multi-block read neither announced by CMD23 nor ended by auto-CMD12: the card goes on
    /// sending after the host has its blocks (SD §4.3.3), until CMD12.
    open_ended: bool,
    command_index: u8,
    /// Host to card (CMD24/CMD25): the words of the block being received by PIO, and whether
    /// the buffer has room for them (Buffer Write Enable, SDHCI §2.2.9).
    write: bool,
    received: Vec<u32>,
    room: bool,
}

pub struct SimState {
    pub registers: [u32; 64],
    pub card: SimCard,
    state: State,
    app_command: bool,
    pending_errors: u32,
    acmd41_polls: u32,
    block_count_from_cmd23: Option<u32>,
    buffer: VecDeque<u32>,
    transfer: Option<Transfer>,
    pub injections: Vec<Injection>,
    /// Every command seen: (index, argument, transfer mode).
    pub log: Vec<(u8, u32, u16)>,
    /// The SD clock each command of `log` went out at, in Hz.
    pub command_clocks_hz: Vec<u32>,
    pub sdma_address_written: bool,
    /// Argument 2 (the SDMA address register, 0x00) was written since the last command: what
    /// Auto CMD23 sends (SDHCI §2.2.1).
    argument2_written: bool,
    /// Auto CMD23s the host sent before their data commands.
    pub auto_cmd23s: u32,
    /// The data command that started the running transfer was announced by CMD23.
    announced: bool,
    /// The host drops Auto CMD Enable = 10b, as QEMU 10.0's `sdhci.c` does (it masks Transfer
    /// Mode with 0x37): no CMD23 goes out and the read runs open-ended.
    pub ignores_auto_cmd23: bool,
    /// Smallest gap between two non-data register writes while SDCLK ≤ 400 kHz, in ns.
    pub min_slow_write_gap_ns: u64,
    last_write_ns: Option<u64>,
    pub line_resets: u32,
    /// The line-reset bits of every Software Reset write that had any (0b010 CMD, 0b100 DAT).
    pub line_reset_log: Vec<u8>,
    /// A command-line error was raised and the CMD line has not been reset since.
    cmd_reset_due: bool,
    pub dma_transfers: u32,
    pub signal_1v8_requested: bool,
    dat_low: bool,
    stalled: bool,
    /// CMD19s seen in the running tuning procedure, and whether each followed the sequence.
    tuning: Option<Tuning>,
    /// Status polls left before the tuning block of the last CMD19 arrives.
    tuning_block_due: Option<u32>,
    /// The tuning commands the controller sent (with Execute Tuning set), in order.
    pub tuning_log: Vec<TuningCommandSeen>,
    pub base_clock_hz: u32,
    pub dma_window: BusTranslation,
    pub zero_length_descriptor_is_64k: bool,
    /// The byte counts of the descriptors of the last ADMA2 transfer, in order.
    pub descriptor_lengths: Vec<usize>,
    /// The BCM2712 cfg block (128 words at +0x400), when the board has one.
    pub config_block: Option<Vec<u32>>,
    /// Rules of the specification the driver broke, in order.
    pub violations: Vec<&'static str>,
    /// The SD clock glitched (a UHS mode change while it ran): the next command is garbled.
    glitched: bool,
    /// Status bits the last command raised that the driver cannot see yet, and the register
    /// reads left until it can ([`COMMAND_LATENCY_READS`]; 0: no command in flight).
    unseen_status: u32,
    command_reads_left: u32,
    /// Raising unseen bits (inside a command's execution).
    deferring: bool,
    /// An ADMA2 transfer waits for its command's completion, then this many reads.
    adma_due: bool,
    adma_reads_left: Option<u32>,
    /// Register reads since the last command was written (how long the driver looked at the
    /// controller after handing it the command).
    pub reads_since_command: u32,
    /// The platform log's length when the last command was written: the handover of its DMA.
    command_event: usize,
    /// Sectors written by the driver (what later reads return instead of the pattern).
    pub written: std::collections::BTreeMap<u64, Vec<u8>>,
    /// Register reads left while the card programs after a write (`None`: not busy).
    programming_reads_left: Option<u32>,
    /// The fastest SD clock the card's timing allows (SD §3.9.1): 25 MHz until CMD6 switches it.
    pub card_clock_limit_hz: u32,
    /// The platform time at the last register access that looked at it, ns.
    now_ns: u64,
    /// When the card answered CMD11: it drives DAT[3:0] low `dat_low_after_cmd11_ns` later.
    cmd11_at_ns: Option<u64>,
    /// When SD Clock Enable was last cleared (the switch needs it gated 5 ms: SD §4.2.4.2).
    sd_clock_stopped_at_ns: Option<u64>,
    /// The card failed a 1.8 V switch: it holds DAT[3:0] low and answers nothing until its power
    /// is cycled (SD §4.2.4.2).
    switch_failed: bool,
    /// Card power cycles the board made (`SimHost::power_cycle_card`).
    pub power_cycles: u32,
    /// The controller raises a spurious Data End Bit Error with each tuning block; a driver that
    /// enables only Buffer Read Ready during tuning (Linux `sdhci_start_tuning`) never sees it.
    pub spurious_tuning_error: bool,
    /// The least time between two CMD19s for the procedure to find a sampling point (Linux
    /// `sdhci_execute_tuning` waits 1 ms, `tuning_delay`, for CMD19; none for CMD21).
    pub tuning_command_gap_ns: u64,
    last_tuning_command_ns: Option<u64>,
    /// Tuning procedures that ended with a sampling point.
    pub tunings_completed: u32,
    /// The tuned sampling point no longer holds (temperature, voltage): data fails its CRC until
    /// the host tunes again.
    pub drifted: bool,
    /// What the last eMMC bus test (CMD19 BUS_TEST_W) left for CMD14 to return.
    bus_test_echo: Vec<u8>,
    /// The card's command queue and extension registers ([`queue`]).
    pub queue: queue::CardQueue,
}

/// Register reads an eMMC stays busy after a SWITCH (CMD6, R1b).
pub const SWITCH_BUSY_READS: u32 = 4;

/// EXT_CSD bytes the simulated eMMC acts on (JESD84-B51 §7.4).
const EXT_CSD_HS_TIMING: usize = 185;
const EXT_CSD_BUS_WIDTH: usize = 183;
const EXT_CSD_DEVICE_TYPE: usize = 196;

/// A card's clock ceiling at Default Speed (SD §3.9.1).
const DEFAULT_SPEED_LIMIT_HZ: u32 = 25_000_000;

/// A command the controller sent with Execute Tuning set: its index, and the transfer block
/// size the Block Size register held when it went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TuningCommandSeen {
    pub index: u8,
    pub block_bytes: u32,
}

#[derive(Clone, Copy, Debug)]
struct Tuning {
    commands: u32,
    in_sequence: bool,
}

/// The simulated controller.
pub struct SimHost<'a> {
    pub state: RefCell<SimState>,
    platform: &'a TestPlatform,
}

impl<'a> SimHost<'a> {
    /// A controller as `board` has it, card attached.
    pub fn new(platform: &'a TestPlatform, board: SimBoard, card: SimCard) -> Self {
        let mut registers = [0u32; 64];
        registers[offsets::CAPABILITIES / 4] = board.capabilities.0;
        registers[offsets::CAPABILITIES_HIGH / 4] = board.capabilities.1;
        registers[offsets::SLOT_STATUS_VERSION / 4] = board.version_word;
        let config_block = board.config_block.then(|| {
            let mut words = vec![0u32; bcm2712_config::BLOCK_BYTES / 4];
            // The strap's reset state: the PHY limited to 50 MHz.
            words[bcm2712_config::MAX_50MHZ_MODE / 4] = bcm2712_config::MAX_50MHZ_MODE_ENABLE;
            words
        });
        SimHost {
            state: RefCell::new(SimState {
                registers,
                card,
                state: State::Idle,
                app_command: false,
                pending_errors: 0,
                acmd41_polls: 0,
                block_count_from_cmd23: None,
                buffer: VecDeque::new(),
                transfer: None,
                injections: Vec::new(),
                log: Vec::new(),
                command_clocks_hz: Vec::new(),
                sdma_address_written: false,
                argument2_written: false,
                auto_cmd23s: 0,
                ignores_auto_cmd23: false,
                announced: false,
                min_slow_write_gap_ns: u64::MAX,
                last_write_ns: None,
                line_resets: 0,
                line_reset_log: Vec::new(),
                cmd_reset_due: false,
                dma_transfers: 0,
                signal_1v8_requested: false,
                dat_low: false,
                stalled: false,
                tuning: None,
                tuning_block_due: None,
                tuning_log: Vec::new(),
                base_clock_hz: board.base_clock_hz,
                dma_window: board.dma_window,
                zero_length_descriptor_is_64k: board.zero_length_descriptor_is_64k,
                descriptor_lengths: Vec::new(),
                config_block,
                violations: Vec::new(),
                glitched: false,
                unseen_status: 0,
                command_reads_left: 0,
                deferring: false,
                adma_due: false,
                adma_reads_left: None,
                reads_since_command: 0,
                command_event: 0,
                written: std::collections::BTreeMap::new(),
                programming_reads_left: None,
                card_clock_limit_hz: DEFAULT_SPEED_LIMIT_HZ,
                now_ns: 0,
                cmd11_at_ns: None,
                sd_clock_stopped_at_ns: None,
                switch_failed: false,
                power_cycles: 0,
                spurious_tuning_error: true,
                tuning_command_gap_ns: 1_000_000,
                last_tuning_command_ns: None,
                tunings_completed: 0,
                drifted: false,
                bus_test_echo: Vec::new(),
                queue: queue::CardQueue::default(),
            }),
            platform,
        }
    }

    pub fn inject(&self, injection: Injection) {
        self.state.borrow_mut().injections.push(injection);
    }

    /// The card pulled out now: Card Inserted and Card Detect Pin Level clear, Card Removal
    /// raised (when enabled: SDHCI 3.00 §2.2.9, §2.2.17). A transfer under way never finishes
    /// (no Transfer Complete; Command Inhibit (DAT) held until the DAT line reset), and every
    /// later command goes unanswered (Command Timeout).
    pub fn remove_card(&self) {
        let mut state = self.state.borrow_mut();
        state.card.present = false;
        let transferring = state.transfer.is_some() || state.adma_due || state.adma_reads_left.is_some();
        if transferring {
            state.stalled = true;
        }
        state.transfer = None;
        state.buffer.clear();
        state.adma_due = false;
        state.adma_reads_left = None;
        state.unseen_status &= !interrupt::TRANSFER_COMPLETE;
        state.raise(interrupt::CARD_REMOVAL);
    }

    /// The board removes the card's power and restores it: the card is back in the idle state at
    /// 3.3 V signalling, whatever it was doing (SD §6.4.1.2).
    pub fn power_cycle_card(&self) {
        let mut state = self.state.borrow_mut();
        state.power_cycles += 1;
        state.card.left_at_1v8 = false;
        state.switch_failed = false;
        state.dat_low = false;
        state.cmd11_at_ns = None;
        state.state = State::Idle;
        state.app_command = false;
        state.acmd41_polls = 0;
        state.card_clock_limit_hz = DEFAULT_SPEED_LIMIT_HZ;
        state.transfer = None;
        state.buffer.clear();
        if let Some(emmc) = state.card.emmc.as_mut() {
            emmc.ext_csd[EXT_CSD_HS_TIMING] = 0;
            emmc.ext_csd[EXT_CSD_BUS_WIDTH] = 0;
        }
    }

    /// The tuned sampling point stops holding.
    pub fn drift(&self) {
        self.state.borrow_mut().drifted = true;
    }

    /// Commands seen, by index (ACMDs appear after their CMD55).
    pub fn command_indices(&self) -> Vec<u8> {
        self.state.borrow().log.iter().map(|(index, _, _)| *index).collect()
    }
}

impl SimState {
    fn register(&self, offset: usize) -> u32 {
        self.registers[offset / 4]
    }

    fn sd_clock_hz(&self) -> u32 {
        let word = self.register(offsets::CLOCK_TIMEOUT_RESET);
        if word & SD_CLOCK_ENABLE == 0 {
            return 0;
        }
        let divider = ((word >> 8) & 0xff) | (((word >> 6) & 0b11) << 8);
        if divider == 0 {
            self.base_clock_hz
        } else {
            self.base_clock_hz / (2 * divider)
        }
    }

    fn host_control2(&self) -> u32 {
        self.register(offsets::AUTO_CMD_ERROR_HOST_CONTROL2)
    }

    /// The card pulls DAT[3:0] low `dat_low_after_cmd11_ns` after its CMD11 response.
    fn update_dat_lines(&mut self) {
        if let Some(at) = self.cmd11_at_ns {
            if self.now_ns >= at + self.card.dat_low_after_cmd11_ns {
                self.dat_low = true;
                self.cmd11_at_ns = None;
            }
        }
    }

    /// A divider changed while the internal clock runs glitches it: Linux's `sdhci_set_clock`
    /// and `sdhci_bcm2712_set_clock` write 0 to Clock Control before a new divider, as SDHCI
    /// §3.2.3 stops the internal clock before changing the frequency.
    fn check_clock_change(&mut self, old: u32, new: u32) {
        const INTERNAL_CLOCK_ENABLE: u32 = 1;
        const DIVIDER_BITS: u32 = 0xffc0;
        if old & new & INTERNAL_CLOCK_ENABLE != 0 && (old ^ new) & DIVIDER_BITS != 0 {
            self.violations
                .push("Clock Control's divider changed while the internal clock ran (SDHCI §3.2.3)");
            self.glitched = true;
        }
    }

    /// SD Clock Enable turned off or on. Turned back on during a 1.8 V switch (DAT[3:0] low,
    /// 1.8 V signalling set) it ends the switch: the card releases DAT[3:0] if the clock was
    /// gated for the 5 ms SD §4.2.4.2 asks and it takes the switch; otherwise it holds them low
    /// (the failure indication of step 8) until its power is cycled.
    fn sd_clock_switched(&mut self, old: u32, new: u32) {
        let (was_on, is_on) = (old & SD_CLOCK_ENABLE != 0, new & SD_CLOCK_ENABLE != 0);
        if was_on && !is_on {
            self.sd_clock_stopped_at_ns = Some(self.now_ns);
        }
        if was_on || !is_on || !self.dat_low || self.host_control2() & SIGNALING_1V8 == 0 {
            return;
        }
        let gated_ns = self.sd_clock_stopped_at_ns.map_or(0, |stopped| self.now_ns - stopped);
        if gated_ns < 5_000_000 || self.card.refused_1v8_switches > 0 {
            self.card.refused_1v8_switches = self.card.refused_1v8_switches.saturating_sub(1);
            self.switch_failed = true;
        } else {
            self.dat_low = false;
        }
    }

    /// The BCM2712 PHY without its delay line cannot go above 50 MHz (docs/hardware.md §2.6).
    fn phy_limited_to_50mhz(&self) -> bool {
        use bcm2712_config::*;
        self.config_block.as_ref().is_some_and(|words| {
            let mode = words[MAX_50MHZ_MODE / 4];
            mode & MAX_50MHZ_MODE_ENABLE != 0 || mode & MAX_50MHZ_MODE_STRAP_OVERRIDE == 0
        })
    }

    /// Whether data on the bus arrives garbled: above 50 MHz through a limited PHY, or in a mode
    /// that needs tuning (SDR104; SDR50 when the capabilities say so) without a tuned clock.
    fn data_unreliable(&self) -> bool {
        if self.drifted && self.host_control2() & SAMPLING_CLOCK_SELECT != 0 {
            return true;
        }
        if self.sd_clock_hz() <= UNTUNED_LIMIT_HZ {
            return false;
        }
        let mode = (self.host_control2() & UHS_MODE_MASK) >> 16;
        let sdr50_tuned = self.register(offsets::CAPABILITIES_HIGH) & (1 << 13) != 0;
        let needs_tuning = mode == 3 || (mode == 2 && sdr50_tuned);
        self.phy_limited_to_50mhz() || (needs_tuning && self.host_control2() & SAMPLING_CLOCK_SELECT == 0)
    }

    /// Bus address `bus .. bus + length` as a test-memory physical address, if the DMA window
    /// covers it.
    fn bus_to_physical(&self, bus: u64, length: usize) -> Option<u64> {
        let window = self.dma_window;
        let offset = bus.checked_sub(window.bus_base)?;
        (offset.checked_add(length as u64)? <= window.size_bytes).then(|| window.cpu_base + offset)
    }

    fn raise(&mut self, bits: u32) {
        if bits & COMMAND_LINE_ERRORS != 0 {
            self.cmd_reset_due = true;
        }
        if self.deferring {
            self.unseen_status |= bits;
            return;
        }
        let enabled = self.register(offsets::INTERRUPT_STATUS_ENABLE);
        let mut status = self.register(offsets::INTERRUPT_STATUS) | (bits & enabled);
        if status & 0xffff_0000 != 0 {
            status |= interrupt::ERROR_INTERRUPT;
        }
        self.registers[offsets::INTERRUPT_STATUS / 4] = status;
    }

    fn present_state(&self) -> u32 {
        let mut value = 0;
        // Card Inserted (16) and Card Detect Pin Level (18) follow the card; Card State
        // Stable (17) is set once the debounce is over (SDHCI 3.00 §2.2.9; QEMU's sdhci shows
        // 0x01ff0000 inserted, 0x01fa0000 removed).
        if self.card_detect_says_present() {
            value |= 1 << 16 | 1 << 18;
        }
        value |= 1 << 17;
        if !self.dat_low {
            value |= 0xf << 20;
        }
        value |= 1 << 24;
        if !self.buffer.is_empty() {
            value |= 1 << 11 | 1 << 9 | 1 << 1;
        }
        // Command Inhibit (CMD) until the command completes; Command Inhibit (DAT) while a
        // transfer runs (SDHCI §2.2.9).
        if self.command_reads_left > 0 {
            value |= 1 << 0;
        }
        // A transfer the card stopped (`stalled`) holds the DAT line until its reset (§3.10.1).
        if self.transfer.is_some() || self.adma_due || self.adma_reads_left.is_some() || self.stalled {
            value |= 1 << 1;
        }
        // A write: DAT Line Active while it runs and the card is busy, DAT0 low while busy,
        // Buffer Write Enable while a block fits.
        if self.transfer.as_ref().is_some_and(|t| t.write) || self.programming_reads_left.is_some() {
            value |= 1 << 1 | 1 << 2;
        }
        if self.programming_reads_left.is_some() {
            value &= !(1 << 20);
        }
        if self.transfer.as_ref().is_some_and(|t| t.write && t.room) {
            value |= 1 << 10;
        }
        value
    }

    /// Card detect as the controller sees it: the card, unless the BCM2712 cfg block forces the
    /// level (SDIO_CFG_CTRL SDCD_N_TEST_EN with SDCD_N_TEST_LEV: the active-low signal's level).
    fn card_detect_says_present(&self) -> bool {
        use bcm2712_config::*;
        match &self.config_block {
            Some(words) if words[CTRL / 4] & CTRL_CARD_DETECT_TEST_ENABLE != 0 => {
                words[CTRL / 4] & CTRL_CARD_DETECT_TEST_LEVEL == 0
            }
            _ => self.card.present,
        }
    }

    fn card_status(&mut self) -> u32 {
        let mut status = self.state.bits() << 9 | 1 << 8 | self.pending_errors;
        if self.app_command {
            status |= 1 << 5;
        }
        self.pending_errors = 0;
        status
    }

    fn take_injection(&mut self, index: u8, data: bool) -> Option<Injection> {
        let position = self
            .injections
            .iter()
            .position(|i| i.command_index == index && i.times > 0 && (i.at != InjectAt::Command) == data)?;
        self.injections[position].times -= 1;
        Some(self.injections[position])
    }

    /// A command written: it runs at once, but what it raises shows only after
    /// [`COMMAND_LATENCY_READS`] register reads, and its ADMA2 transfer runs
    /// [`DMA_LATENCY_READS`] reads after that (a real host takes the card's response time and
    /// the bus time; QEMU's sdhci runs five descriptors in the write and the rest from a timer).
    fn execute(&mut self, platform: &TestPlatform) {
        self.deferring = true;
        self.execute_now(platform);
        self.deferring = false;
        self.command_reads_left = COMMAND_LATENCY_READS;
        self.reads_since_command = 0;
    }

    /// One register read's worth of the controller's time passes.
    fn tick(&mut self, platform: &TestPlatform) {
        self.reads_since_command = self.reads_since_command.saturating_add(1);
        self.tick_programming();
        if self.command_reads_left > 0 {
            self.command_reads_left -= 1;
            if self.command_reads_left == 0 {
                let bits = core::mem::take(&mut self.unseen_status);
                self.raise(bits);
                if std::mem::take(&mut self.adma_due) {
                    self.adma_reads_left = Some(DMA_LATENCY_READS);
                }
            }
            return;
        }
        match self.adma_reads_left {
            Some(reads) if reads > 1 => self.adma_reads_left = Some(reads - 1),
            Some(_) => {
                self.adma_reads_left = None;
                self.run_adma(platform);
            }
            None => {}
        }
    }

    /// One read's worth of the card's programming; at its end the card is back in Transfer
    /// state and the host raises Transfer Complete.
    fn tick_programming(&mut self) {
        match self.programming_reads_left {
            Some(reads) if reads > 1 => self.programming_reads_left = Some(reads - 1),
            Some(_) => {
                self.programming_reads_left = None;
                self.state = State::Transfer;
                self.raise(interrupt::TRANSFER_COMPLETE);
            }
            None => {}
        }
    }

    /// The last block of a write arrived: the card programs it (busy on DAT0).
    fn start_programming(&mut self) {
        self.transfer = None;
        self.state = State::Programming;
        self.programming_reads_left = Some(PROGRAMMING_READS);
    }

    /// Stores one block written by the driver, sector by sector.
    fn store_block(&mut self, transfer: &Transfer, block: u32, bytes: &[u8]) {
        if let Source::BusTest = transfer.source {
            self.bus_test_echo = self.bus_test_answer(bytes);
            return;
        }
        if let Source::Extension { argument } = transfer.source {
            return self.extension_written(argument, bytes);
        }
        let Source::Sectors { first_sector } = transfer.source else {
            return;
        };
        let first = first_sector + u64::from(block) * (transfer.block_bytes as u64 / 512);
        for (i, sector) in bytes.chunks(512).enumerate() {
            self.written.insert(first + i as u64, sector.to_vec());
        }
    }

    /// A word written to the data port: accepted only while a PIO write has room for it.
    fn receive_word(&mut self, word: u32) {
        let Some(mut transfer) = self.transfer.take().filter(|t| t.write && t.room) else {
            self.violations.push("data port written without Buffer Write Ready (no room for a block)");
            return;
        };
        transfer.received.push(word);
        if transfer.received.len() * 4 < transfer.block_bytes {
            self.transfer = Some(transfer);
            return;
        }
        let bytes: Vec<u8> = transfer.received.drain(..).flat_map(u32::to_le_bytes).collect();
        transfer.room = false;
        let index = transfer.command_index;
        let due = self.injections.iter().any(|i| {
            i.command_index == index
                && i.times > 0
                && matches!(i.at, InjectAt::Data { after_blocks } if after_blocks <= transfer.blocks_sent)
        });
        if let Some(injection) = due.then(|| self.take_injection(index, true)).flatten() {
            self.raise(injection.error_bits);
            return;
        }
        self.store_block(&transfer, transfer.blocks_sent, &bytes);
        transfer.blocks_sent += 1;
        if transfer.blocks_sent == transfer.blocks && matches!(transfer.source, Source::BusTest) {
            // The bus test programs nothing: the transfer ends with the block.
            self.finish_transfer(&transfer);
            return;
        }
        if transfer.blocks_sent == transfer.blocks {
            self.start_programming();
            return;
        }
        transfer.room = true;
        self.transfer = Some(transfer);
        self.raise(interrupt::BUFFER_WRITE_READY);
    }

    /// A DMA access of the running transfer, checked against the platform's ordered log: what
    /// the CPU wrote there must have been cleaned and fenced by a store barrier before the
    /// command that started the transfer was written, and not touched since (descriptors must
    /// have been written at all). A mistake is a violation in the log.
    fn check_dma(&self, platform: &TestPlatform, range: ByteRange, descriptor: bool) {
        let log = platform.log();
        if let Err(violation) = log.check_device_access(range, self.command_event, log.len(), descriptor) {
            let what = if descriptor { "ADMA2 descriptor fetch" } else { "ADMA2 data access" };
            log.add_violation(std::format!("{what}: {violation}"));
        }
    }

    /// Whether a command has been written whose completion the driver cannot see yet.
    pub fn command_in_flight(&self) -> bool {
        self.command_reads_left > 0
    }

    fn execute_now(&mut self, platform: &TestPlatform) {
        let word = self.register(offsets::TRANSFER_MODE_COMMAND);
        let mode = (word & 0xffff) as u16;
        let index = ((word >> 24) & 0x3f) as u8;
        let argument = self.register(offsets::ARGUMENT);
        let data_present = word & (1 << 21) != 0;
        self.log.push((index, argument, mode));
        let clock_hz = self.sd_clock_hz();
        self.command_clocks_hz.push(clock_hz);
        let application = self.app_command;
        self.app_command = false;
        if self.programming_reads_left.is_some() && (application || index != 13) {
            // SD §4.3.4: a card programming answers CMD13 only; the host shows the busy as
            // Command Inhibit (DAT) (SDHCI §2.2.9), which the driver must wait out.
            self.violations.push("command issued while the card was busy programming a write");
            self.raise(interrupt::COMMAND_TIMEOUT);
            return;
        }
        if !self.card.present || self.register(offsets::HOST_CONTROL_POWER) & 0x100 == 0 {
            // A command without response "completes" with nobody listening.
            self.raise(if index == 0 { interrupt::COMMAND_COMPLETE } else { interrupt::COMMAND_TIMEOUT });
            return;
        }
        if let Some(injection) = self.take_injection(index, false) {
            self.raise(injection.error_bits);
            return;
        }
        if std::mem::take(&mut self.glitched) {
            self.raise(interrupt::COMMAND_CRC);
            return;
        }
        if self.switch_failed {
            // A failed 1.8 V switch: DAT[3:0] held low, nothing answered until a power cycle.
            self.raise(if index == 0 { interrupt::COMMAND_COMPLETE } else { interrupt::COMMAND_TIMEOUT });
            return;
        }
        if self.card.left_at_1v8 && self.host_control2() & SIGNALING_1V8 == 0 && index != 0 {
            // A card at 1.8 V signalling sampled at 3.3 V: every answer garbled.
            self.raise(interrupt::COMMAND_CRC);
            return;
        }
        if matches!(index, 19 | 21) && self.host_control2() & EXECUTE_TUNING != 0 {
            self.tuning_command(index, word);
            return;
        }
        if data_present && (mode >> 2) & 0b11 == 0b10 && !self.ignores_auto_cmd23 && !self.auto_cmd23() {
            return;
        }
        let response = if self.card.emmc.is_some() {
            self.respond_emmc(index, argument, application)
        } else {
            self.respond(index, argument, application)
        };
        let Some(response) = response else {
            if index != 0 {
                self.raise(interrupt::COMMAND_TIMEOUT);
            } else {
                self.raise(interrupt::COMMAND_COMPLETE);
            }
            return;
        };
        match response {
            Response::Short(value) => self.registers[offsets::RESPONSE0 / 4] = value,
            Response::Long(register) => {
                let bits = register >> 8;
                for i in 0..4 {
                    self.registers[offsets::RESPONSE0 / 4 + i] = (bits >> (32 * i)) as u32;
                }
            }
        }
        self.raise(interrupt::COMMAND_COMPLETE);
        if matches!(index, 7 | 12 | 43) {
            self.raise(interrupt::TRANSFER_COMPLETE);
        }
        if index == 6 && self.card.emmc.is_some() {
            // SWITCH is R1b: the device is busy until the new setting holds.
            self.state = State::Programming;
            self.programming_reads_left = Some(SWITCH_BUSY_READS);
        }
        if data_present && !matches!(index, 14 | 19 | 21) {
            if let Some(mismatch) = self.emmc_bus_mismatch() {
                self.violations.push(mismatch);
                self.raise(interrupt::DATA_CRC);
                return;
            }
        }
        if data_present {
            if clock_hz > self.card_clock_limit_hz {
                self.violations.push("data clocked faster than the card's timing allows (SD §3.9.1)");
                self.raise(interrupt::DATA_CRC);
                return;
            }
            if self.data_unreliable() {
                self.raise(interrupt::DATA_CRC);
                return;
            }
            self.start_data(index, argument, mode, application, platform);
        }
    }

    /// Auto CMD23 (Transfer Mode Auto CMD Enable = 10b, SDHCI §1.15, §2.2.5): the host sends
    /// CMD23 with Argument 2 before the data command. It needs a 3.00 host, a multi-block
    /// transfer, Argument 2 written since the last command and not SDMA (whose address shares
    /// the register). `false` when the card refused it (Auto CMD Error).
    fn auto_cmd23(&mut self) -> bool {
        let word = self.register(offsets::TRANSFER_MODE_COMMAND);
        if (self.register(offsets::SLOT_STATUS_VERSION) >> 16) & 0xff < 2 {
            self.violations.push("Auto CMD23 on a host before SDHCI 3.00");
        }
        if word & (1 << 5) == 0 {
            self.violations.push("Auto CMD23 for a single-block command");
        }
        if word & 1 != 0 && (self.register(offsets::HOST_CONTROL_POWER) >> 3) & 0b11 == 0 {
            self.violations.push("Auto CMD23 with SDMA selected: Argument 2 is the SDMA address");
        }
        if !std::mem::take(&mut self.argument2_written) {
            self.violations.push("Auto CMD23 without Argument 2 written for this command");
        }
        let count = self.register(offsets::SDMA_ADDRESS);
        self.auto_cmd23s += 1;
        // On the bus CMD23 goes before the data command, which `execute_now` logged already.
        let before_data_command = self.log.len().saturating_sub(1);
        self.log.insert(before_data_command, (23, count, 0));
        let clock = self.sd_clock_hz();
        self.command_clocks_hz.insert(before_data_command, clock);
        let answered = if self.card.emmc.is_some() {
            self.respond_emmc(23, count, false)
        } else {
            self.respond(23, count, false)
        };
        if answered.is_none() {
            // Auto CMD Error Status: Auto CMD Timeout Error (bit 1).
            self.registers[offsets::AUTO_CMD_ERROR_HOST_CONTROL2 / 4] |= 1 << 1;
            self.raise(interrupt::AUTO_COMMAND);
            return false;
        }
        true
    }

    /// One tuning command (SDHCI §2.2.24; CMD19 for an SD card, CMD21 for an eMMC in HS200): the
    /// card sends the tuning block, the controller keeps it and, once it has arrived (a few status
    /// polls later), raises Buffer Read Ready only — no Command Complete, no Transfer Complete, no
    /// data in the buffer. After [`TUNING_PASSES`] blocks it clears Execute Tuning and sets
    /// Sampling Clock Select if every command came in sequence (1.8 V, a tuned mode with the
    /// clock running, the previous block arrived and its Buffer Read Ready cleared, spaced as the
    /// controller needs) with the setup [`Self::tuning_setup_faults`] checks, and a sampling
    /// point exists. A command the card does not answer with a tuning block (CMD21 to an SD card,
    /// CMD19 = BUSTEST_W to an eMMC) brings no block: no Buffer Read Ready ever shows.
    fn tuning_command(&mut self, index: u8, word: u32) {
        let block_bytes = self.register(offsets::BLOCK_SIZE_COUNT) & 0xfff;
        self.tuning_log.push(TuningCommandSeen { index, block_bytes });
        let faults = self.tuning_setup_faults(index, word);
        self.violations.extend_from_slice(&faults);
        let control2 = self.host_control2();
        let uhs_mode = (control2 & UHS_MODE_MASK) >> 16;
        let previous_taken = self.tuning_block_due.is_none()
            && self.register(offsets::INTERRUPT_STATUS) & interrupt::BUFFER_READ_READY == 0;
        if !previous_taken {
            self.violations.push(
                "tuning command issued before the last tuning block's Buffer Read Ready was seen and cleared",
            );
        }
        let (tuned_modes, gap_ns): (&[u32], u64) =
            if self.card.emmc.is_some() { (&[3], 0) } else { (&[2, 3, 4], self.tuning_command_gap_ns) };
        let spaced = self.last_tuning_command_ns.is_none_or(|last| self.now_ns - last >= gap_ns);
        self.last_tuning_command_ns = Some(self.now_ns);
        let in_sequence = control2 & SIGNALING_1V8 != 0
            && tuned_modes.contains(&uhs_mode)
            && self.sd_clock_hz() > 0
            && faults.is_empty()
            && previous_taken
            && spaced;
        let tuning = self.tuning.get_or_insert(Tuning { commands: 0, in_sequence: true });
        tuning.in_sequence &= in_sequence;
        if index != self.card_tuning_command_index() {
            return;
        }
        self.tuning_block_due = Some(TUNING_BLOCK_POLLS);
        if self.spurious_tuning_error {
            // At once, before the block: a driver that enabled the error bits sees it first.
            let deferring = core::mem::replace(&mut self.deferring, false);
            self.raise(interrupt::DATA_END_BIT);
            self.deferring = deferring;
        }
    }

    /// CMD19 SEND_TUNING_BLOCK for an SD card (SD §4.2.4.5), CMD21 SEND_TUNING_BLOCK for an eMMC
    /// (JESD84-B51 §6.6.5).
    fn card_tuning_command_index(&self) -> u8 {
        if self.card.emmc.is_some() {
            21
        } else {
            19
        }
    }

    /// What is wrong with tuning command `index` (command word `word`) as the controller and the
    /// card need it; empty when nothing is. The controller samples the tuning block only as the
    /// read data of the command (SDHCI §2.2.24; Linux `sdhci_send_tuning`: Data Present Select,
    /// Transfer Mode = read only, "DMA Enable and Multi Block Select ... 0"), whose length it
    /// takes from Block Size, written before the command: 64 bytes for CMD19 (SD §4.2.4.5), for
    /// CMD21 128 bytes on an 8-bit bus and 64 on a 4-bit bus (JESD84-B51 §6.6.5; Linux
    /// `mmc_send_tuning`). An eMMC answers CMD21 only in HS200 (HS_TIMING = 2), with the bus
    /// width it was switched to.
    fn tuning_setup_faults(&self, index: u8, word: u32) -> Vec<&'static str> {
        let mut faults = Vec::new();
        let emmc = self.card.emmc.as_ref();
        if index != self.card_tuning_command_index() {
            faults.push(if emmc.is_some() {
                "CMD19 (BUSTEST_W) sent to tune an eMMC: its tuning command is CMD21"
            } else {
                "CMD21 sent to tune an SD card: its tuning command is CMD19"
            });
        }
        let eight_bit_bus = self.register(offsets::HOST_CONTROL_POWER) & (1 << 5) != 0;
        let expected_block_bytes = if emmc.is_some() && eight_bit_bus { 128 } else { 64 };
        if self.register(offsets::BLOCK_SIZE_COUNT) & 0xfff != expected_block_bytes {
            faults.push(if expected_block_bytes == 128 {
                "tuning block size is not 128 bytes (CMD21 on an 8-bit bus)"
            } else {
                "tuning block size is not 64 bytes (CMD19, or CMD21 on a 4-bit bus)"
            });
        }
        if word & COMMAND_DATA_PRESENT == 0 {
            faults.push("tuning command without Data Present Select: the controller expects no block");
        }
        if word & TRANSFER_MODE_READ == 0 {
            faults.push("tuning command with Transfer Mode direction write: the block is read");
        }
        if word & (TRANSFER_MODE_MULTI_BLOCK | TRANSFER_MODE_DMA) != 0 {
            faults.push("tuning command with Multi Block Select or DMA Enable set");
        }
        if let Some(emmc) = emmc {
            if index == 21 && emmc.ext_csd[EXT_CSD_HS_TIMING] & 0xf != 2 {
                faults.push("CMD21 to an eMMC not switched to HS200 (HS_TIMING): an illegal command");
            }
            if let Some(mismatch) = self.emmc_bus_mismatch() {
                faults.push(mismatch);
            }
        }
        faults
    }

    /// Counts a poll of the interrupt status towards the arrival of the pending tuning block;
    /// when it arrives, raises Buffer Read Ready and, after the last block, ends tuning.
    fn poll_tuning_block(&mut self) {
        let Some(polls) = self.tuning_block_due else {
            return;
        };
        if polls > 1 {
            self.tuning_block_due = Some(polls - 1);
            return;
        }
        self.tuning_block_due = None;
        self.raise(interrupt::BUFFER_READ_READY);
        let Some(tuning) = self.tuning.as_mut() else {
            return;
        };
        tuning.commands += 1;
        let Tuning { commands, in_sequence } = *tuning;
        if commands >= TUNING_PASSES {
            let found = in_sequence && self.card.tunable && !self.phy_limited_to_50mhz();
            let mut control2 = self.host_control2() & !(EXECUTE_TUNING | SAMPLING_CLOCK_SELECT);
            if found {
                control2 |= SAMPLING_CLOCK_SELECT;
                self.tunings_completed += 1;
                self.drifted = false;
            }
            self.registers[offsets::AUTO_CMD_ERROR_HOST_CONTROL2 / 4] = control2;
            self.tuning = None;
        }
    }

    /// A write to Host Control 2: a UHS mode change while SDCLK runs glitches the clock
    /// (SDHCI §2.2.24); setting Execute Tuning starts the procedure with Sampling Clock Select
    /// cleared, clearing it abandons the procedure.
    fn write_host_control2(&mut self, value: u32) {
        let old = self.host_control2();
        let mut new = value & 0xffff_0000;
        if (old ^ new) & UHS_MODE_MASK != 0
            && self.register(offsets::CLOCK_TIMEOUT_RESET) & SD_CLOCK_ENABLE != 0
        {
            self.violations.push("UHS Mode Select changed while the SD clock ran");
            self.glitched = true;
        }
        if new & EXECUTE_TUNING != 0 && old & EXECUTE_TUNING == 0 {
            new &= !SAMPLING_CLOCK_SELECT;
            self.tuning = Some(Tuning { commands: 0, in_sequence: true });
            self.last_tuning_command_ns = None;
        }
        if new & EXECUTE_TUNING == 0 {
            self.tuning = None;
            self.tuning_block_due = None;
        }
        if new & SIGNALING_1V8 != 0 {
            self.signal_1v8_requested = true;
        }
        self.registers[offsets::AUTO_CMD_ERROR_HOST_CONTROL2 / 4] = new;
    }

    fn start_data(
        &mut self,
        index: u8,
        argument: u32,
        mode: u16,
        application: bool,
        platform: &TestPlatform,
    ) {
        let _ = platform;
        let block_size_count = self.register(offsets::BLOCK_SIZE_COUNT);
        let block_bytes = (block_size_count & 0xfff) as usize;
        let multi = mode & (1 << 5) != 0;
        let mut blocks = if multi { block_size_count >> 16 } else { 1 };
        let emmc = self.card.emmc.clone();
        let source = match (application, index, emmc) {
            (false, 8, Some(emmc)) => Source::Bytes(emmc.ext_csd.to_vec()),
            (false, 14, Some(_)) => Source::Bytes(self.bus_test_echo.clone()),
            (false, 19, Some(_)) => Source::BusTest,
            (false, 21, Some(_)) => Source::Bytes(vec![0x5a; 128]),
            (_, _, Some(_)) if !matches!(index, 17 | 18 | 24 | 25) => return,
            _ => match self.sd_data_source(index, argument, mode, application, &mut blocks) {
                Some(source) => source,
                None => return,
            },
        };
        let write =
            matches!((application, index), (false, 24 | 25 | 47 | 49)) || matches!(source, Source::BusTest);
        self.begin_transfer(source, write, index, mode, block_bytes, blocks, multi);
    }

    /// An SD card's data for `index`: a register block, or sectors from the data address.
    fn sd_data_source(
        &mut self,
        index: u8,
        argument: u32,
        mode: u16,
        application: bool,
        blocks: &mut u32,
    ) -> Option<Source> {
        let source = match (application, index) {
            (true, 51) => Source::Bytes(self.card.scr.to_vec()),
            (true, 13) => Source::Bytes(self.card.ssr.to_vec()),
            (false, 6) => {
                let mut status = vec![0u8; 64];
                status[12..14].copy_from_slice(&self.card.switch_support.to_be_bytes());
                let function = (argument & 0xf) as u16;
                let selected = if function == 0xf {
                    0
                } else if self.card.switch_support & (1 << function) != 0 {
                    function as u8
                } else {
                    0xf
                };
                status[16] = selected;
                if argument & 0x8000_0000 != 0 && selected != 0xf {
                    // SD §3.9.1, §4.3.10.3: SDR12, SDR25/HS, SDR50, SDR104, DDR50.
                    self.card_clock_limit_hz = [25_000_000, 50_000_000, 100_000_000, 208_000_000, 50_000_000]
                        [usize::from(selected).min(4)];
                }
                Source::Bytes(status)
            }
            // Without Execute Tuning CMD19 is an ordinary read of the tuning block (as in QEMU).
            (false, 19) => Source::Bytes(vec![0x5a; 64]),
            (false, 17 | 18 | 24 | 25) => {
                let sector =
                    if self.card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                self.announced = false;
                if let Some(count) = self.block_count_from_cmd23.take() {
                    *blocks = count;
                    self.announced = true;
                }
                Source::Sectors { first_sector: sector }
            }
            (false, 46..=49) => self.queue_data_source(index, argument, mode, blocks)?,
            _ => return None,
        };
        Some(source)
    }

    /// Starts the data phase of command `index`: by ADMA2 when the Transfer Mode asks for DMA and
    /// ADMA2 is selected, else by PIO, a block at a time.
    #[allow(clippy::too_many_arguments)]
    fn begin_transfer(
        &mut self,
        source: Source,
        write: bool,
        index: u8,
        mode: u16,
        block_bytes: usize,
        blocks: u32,
        multi: bool,
    ) {
        let direction_read = mode & (1 << 4) != 0;
        if write == direction_read {
            self.violations.push("Transfer Mode direction does not match the command (read vs write)");
        }
        let auto_cmd12 = multi && (mode >> 2) & 0b11 == 1;
        // CMD18 only: a queued task's count is the card's (CMD44), never open-ended.
        let open_ended = index == 18 && !auto_cmd12 && !std::mem::take(&mut self.announced);
        if write && index == 25 && !auto_cmd12 && self.log.iter().rev().nth(1).is_none_or(|c| c.0 != 23) {
            self.violations.push("CMD25 neither announced by CMD23 nor ended by auto-CMD12");
        }
        self.state = if write { State::ReceiveData } else { State::SendingData };
        let transfer = Transfer {
            source,
            block_bytes,
            blocks,
            blocks_sent: 0,
            open_ended,
            command_index: index,
            write,
            received: Vec::new(),
            room: false,
        };
        let adma_capable = self.register(offsets::CAPABILITIES) & (1 << 19) != 0;
        let adma_selected = (self.register(offsets::HOST_CONTROL_POWER) >> 3) & 0b11 >= 2;
        self.transfer = Some(transfer);
        if mode & 1 != 0 && adma_capable && adma_selected {
            self.adma_due = true;
        } else if write {
            if let Some(transfer) = self.transfer.as_mut() {
                transfer.room = true;
            }
            self.raise(interrupt::BUFFER_WRITE_READY);
        } else {
            self.load_next_block();
        }
    }

    fn block_bytes_at(&self, transfer: &Transfer, block: u32) -> Vec<u8> {
        match &transfer.source {
            Source::Bytes(bytes) => bytes.clone(),
            Source::BusTest => vec![0u8; transfer.block_bytes],
            Source::Extension { .. } => vec![0u8; transfer.block_bytes],
            Source::Sectors { first_sector } => {
                let mut out = vec![0u8; transfer.block_bytes];
                for (i, chunk) in out.chunks_mut(512).enumerate() {
                    let number = first_sector + u64::from(block) + i as u64;
                    let mut sector = [0u8; 512];
                    match self.written.get(&number) {
                        Some(bytes) => sector.copy_from_slice(bytes),
                        None => blockdev::pattern::fill_sector(number, &mut sector),
                    }
                    chunk.copy_from_slice(&sector[..chunk.len()]);
                }
                out
            }
        }
    }

    /// Loads the next PIO block into the buffer, or finishes the transfer.
    fn load_next_block(&mut self) {
        let Some(transfer) = self.transfer.clone() else {
            return;
        };
        if transfer.blocks_sent == transfer.blocks {
            self.finish_transfer(&transfer);
            return;
        }
        if let Some(injection) = self.take_injection(transfer.command_index, true) {
            match injection.at {
                InjectAt::Data { after_blocks } if after_blocks <= transfer.blocks_sent => {
                    self.raise(injection.error_bits);
                    self.transfer = None;
                    return;
                }
                InjectAt::Stall { after_blocks } if after_blocks <= transfer.blocks_sent => {
                    self.stalled = true;
                    self.transfer = None;
                    return;
                }
                _ => {
                    // Not yet: put it back for a later block.
                    if let Some(i) = self
                        .injections
                        .iter_mut()
                        .find(|i| i.command_index == injection.command_index && i.at == injection.at)
                    {
                        i.times += 1;
                    }
                }
            }
        }
        let bytes = self.block_bytes_at(&transfer, transfer.blocks_sent);
        for word in bytes.chunks(4) {
            let mut padded = [0u8; 4];
            padded[..word.len()].copy_from_slice(word);
            self.buffer.push_back(u32::from_le_bytes(padded));
        }
        if let Some(t) = self.transfer.as_mut() {
            t.blocks_sent += 1;
        }
        self.raise(interrupt::BUFFER_READ_READY);
    }

    fn finish_transfer(&mut self, transfer: &Transfer) {
        self.transfer = None;
        self.state = if transfer.open_ended { State::SendingData } else { State::Transfer };
        self.raise(interrupt::TRANSFER_COMPLETE);
    }

    /// Walks the ADMA2 descriptor table (32- or 64-bit per DMA Select) and writes the data.
    fn run_adma(&mut self, platform: &TestPlatform) {
        let Some(transfer) = self.transfer.clone() else {
            return;
        };
        self.dma_transfers += 1;
        let wide = (self.register(offsets::HOST_CONTROL_POWER) >> 3) & 0b11 == 3;
        let mut descriptor = u64::from(self.register(offsets::ADMA_SYSTEM_ADDRESS));
        if wide {
            descriptor |= u64::from(self.register(offsets::ADMA_SYSTEM_ADDRESS_HIGH)) << 32;
        }
        let total = transfer.block_bytes * transfer.blocks as usize;
        let mut data = Vec::with_capacity(total);
        if transfer.write {
            data.resize(total, 0);
        } else {
            for block in 0..transfer.blocks {
                data.extend(self.block_bytes_at(&transfer, block));
            }
        }
        if let Some(injection) = self.take_injection(transfer.command_index, true) {
            if let InjectAt::Data { .. } = injection.at {
                self.raise(injection.error_bits);
                self.transfer = None;
                return;
            }
            self.stalled = true;
            self.transfer = None;
            return;
        }
        let stride = if wide { 12 } else { 8 };
        let mut written = 0usize;
        self.descriptor_lengths.clear();
        for _ in 0..4096 {
            let mut entry = [0u8; 12];
            let fetched = self.bus_to_physical(descriptor, stride).filter(|&physical| {
                self.check_dma(platform, ByteRange::new(physical, stride as u64), true);
                platform.device_read(physical, &mut entry[..stride])
            });
            if fetched.is_none() {
                self.registers[offsets::ADMA_ERROR_STATUS / 4] = 1;
                self.raise(interrupt::ADMA);
                return;
            }
            let attributes = u32::from_le_bytes(entry[0..4].try_into().unwrap());
            let length = (attributes >> 16) as usize;
            let address = if wide {
                u64::from_le_bytes(entry[4..12].try_into().unwrap())
            } else {
                u64::from(u32::from_le_bytes(entry[4..8].try_into().unwrap()))
            };
            assert_eq!(attributes & 1, 1, "descriptor not valid");
            assert_eq!((attributes >> 4) & 0b11, 0b10, "descriptor action is not Tran");
            if length == 0 && !self.zero_length_descriptor_is_64k {
                self.registers[offsets::ADMA_ERROR_STATUS / 4] = 4;
                self.raise(interrupt::ADMA);
                return;
            }
            let length = if length == 0 { 65_536 } else { length };
            self.descriptor_lengths.push(length);
            let chunk = length.min(total - written);
            let stored = self.bus_to_physical(address, chunk).filter(|&physical| {
                self.check_dma(platform, ByteRange::new(physical, chunk as u64), false);
                if transfer.write {
                    platform.device_read(physical, &mut data[written..written + chunk])
                } else {
                    platform.device_write(physical, &data[written..written + chunk])
                }
            });
            if stored.is_none() {
                self.registers[offsets::ADMA_ERROR_STATUS / 4] = 2;
                self.raise(interrupt::ADMA);
                return;
            }
            written += chunk;
            if attributes & 0b10 != 0 {
                break;
            }
            descriptor += stride as u64;
        }
        assert_eq!(written, total, "descriptors do not cover the transfer");
        if transfer.write {
            for (block, bytes) in data.chunks(transfer.block_bytes).enumerate() {
                self.store_block(&transfer, block as u32, bytes);
            }
            self.start_programming();
        } else {
            self.finish_transfer(&transfer);
        }
    }

    fn respond(&mut self, index: u8, argument: u32, application: bool) -> Option<Response> {
        if let Some(response) = self.queue_respond(index, argument, application) {
            return response;
        }
        let card = self.card.clone();
        match (application, index) {
            (_, 0) => {
                self.state = State::Idle;
                self.acmd41_polls = 0;
                self.card_clock_limit_hz = DEFAULT_SPEED_LIMIT_HZ;
                None
            }
            (false, 8) => card.answers_cmd8.then_some(Response::Short(argument & 0xfff)),
            (_, 55) => {
                let status = self.card_status() | 1 << 5;
                self.app_command = true;
                Some(Response::Short(status))
            }
            (true, 41) => {
                self.acmd41_polls += 1;
                let mut value = 0x00ff_8000;
                if self.acmd41_polls > card.busy_polls {
                    value |= ocr::POWER_UP_DONE;
                    if card.block_addressed {
                        value |= ocr::CARD_CAPACITY_STATUS;
                    }
                    if card.accepts_1v8 && argument & ocr::SWITCHING_TO_1V8_REQUEST != 0 {
                        value |= ocr::SWITCHING_TO_1V8_ACCEPTED;
                    }
                    self.state = State::Ready;
                }
                Some(Response::Short(value))
            }
            (false, 11) => {
                if !card.accepts_1v8 {
                    return None;
                }
                self.cmd11_at_ns = Some(self.now_ns);
                Some(Response::Short(self.card_status()))
            }
            (false, 2) => {
                self.state = State::Identification;
                Some(Response::Long(card.cid))
            }
            (false, 3) => {
                self.state = State::StandBy;
                Some(Response::Short(u32::from(card.rca) << 16 | 0x0500))
            }
            (false, 9) if argument >> 16 == u32::from(card.rca) => Some(Response::Long(card.csd)),
            (false, 7) if argument >> 16 == u32::from(card.rca) => {
                let status = self.card_status();
                self.state = State::Transfer;
                Some(Response::Short(status))
            }
            (false, 13) => Some(Response::Short(self.card_status())),
            (false, 12) => {
                if !matches!(self.state, State::SendingData | State::ReceiveData) {
                    self.pending_errors |= 1 << 22;
                    return None;
                }
                let status = self.card_status();
                self.state = State::Transfer;
                self.transfer = None;
                self.buffer.clear();
                Some(Response::Short(status))
            }
            (false, 16) => Some(Response::Short(self.card_status())),
            (false, 23) if card.accepts_cmd23 => {
                self.block_count_from_cmd23 = Some(argument);
                Some(Response::Short(self.card_status()))
            }
            (false, 17 | 18 | 24 | 25) if self.state == State::SendingData => {
                // Still sending an open-ended read: not a command of this state (SD §4.8).
                self.pending_errors |= 1 << 22;
                None
            }
            (false, 17 | 18 | 24 | 25) => {
                let sector =
                    if card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                if sector * 512 >= card.capacity_bytes {
                    return Some(Response::Short(self.card_status() | 1 << 31));
                }
                Some(Response::Short(self.card_status()))
            }
            (false, 6 | 19) | (true, 6 | 13 | 51) => Some(Response::Short(self.card_status())),
            _ => {
                self.pending_errors |= 1 << 22;
                None
            }
        }
    }
}

impl SimState {
    /// An eMMC's answers (JESD84-B51 §6.4 identification, §6.6 data transfer mode, §6.10
    /// command classes): CMD1 with its busy loop, CMD3 taking the host's RCA, CMD8 as
    /// SEND_EXT_CSD, SWITCH writing EXT_CSD bytes (or SWITCH_ERROR), the bus test; no answer to
    /// SD-only commands (CMD8 in the idle state, CMD55, CMD11).
    fn respond_emmc(&mut self, index: u8, argument: u32, application: bool) -> Option<Response> {
        let card = self.card.clone();
        let emmc = card.emmc.as_ref()?;
        if application {
            return None;
        }
        let for_us = argument >> 16 == u32::from(card.rca);
        match index {
            0 => {
                // GO_IDLE_STATE resets the device, its status bits included.
                self.state = State::Idle;
                self.pending_errors = 0;
                self.acmd41_polls = 0;
                self.card_clock_limit_hz = MMC_LEGACY_LIMIT_HZ;
                if let Some(emmc) = self.card.emmc.as_mut() {
                    emmc.ext_csd[EXT_CSD_HS_TIMING] = 0;
                    emmc.ext_csd[EXT_CSD_BUS_WIDTH] = 0;
                }
                None
            }
            1 if matches!(self.state, State::Idle | State::Ready) => {
                self.acmd41_polls += 1;
                let mut value = MMC_OCR_VOLTAGES;
                if card.block_addressed {
                    value |= MMC_OCR_SECTOR_MODE;
                }
                if self.acmd41_polls > emmc.busy_polls {
                    value |= ocr::POWER_UP_DONE;
                    self.state = State::Ready;
                }
                Some(Response::Short(value))
            }
            2 if self.state == State::Ready => {
                self.state = State::Identification;
                Some(Response::Long(card.cid))
            }
            3 if self.state == State::Identification => {
                let status = self.card_status();
                self.card.rca = (argument >> 16) as u16;
                self.state = State::StandBy;
                Some(Response::Short(status))
            }
            9 if for_us && self.state == State::StandBy => Some(Response::Long(card.csd)),
            7 if for_us => {
                let status = self.card_status();
                self.state = State::Transfer;
                Some(Response::Short(status))
            }
            6 if self.state == State::Transfer => {
                let status = self.card_status();
                self.emmc_switch(argument);
                Some(Response::Short(status))
            }
            8 | 14 | 16 | 19 | 21 if self.state == State::Transfer => {
                Some(Response::Short(self.card_status()))
            }
            13 if for_us => Some(Response::Short(self.card_status())),
            12 if matches!(self.state, State::SendingData | State::ReceiveData) => {
                let status = self.card_status();
                self.state = State::Transfer;
                self.transfer = None;
                self.buffer.clear();
                Some(Response::Short(status))
            }
            23 if self.state == State::Transfer => {
                self.block_count_from_cmd23 = Some(argument & 0xffff);
                Some(Response::Short(self.card_status()))
            }
            17 | 18 | 24 | 25 if self.state == State::Transfer => {
                let sector =
                    if card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                if sector * 512 >= card.capacity_bytes {
                    return Some(Response::Short(self.card_status() | 1 << 31));
                }
                Some(Response::Short(self.card_status()))
            }
            _ => {
                self.pending_errors |= 1 << 22;
                None
            }
        }
    }

    /// SWITCH with Write Byte access: HS_TIMING only to a timing DEVICE_TYPE lists, BUS_WIDTH's
    /// DDR values only with DDR52 support and HS_TIMING 1 (JESD84-B51 §6.6.4, §7.4.65); anything
    /// else is SWITCH_ERROR in the next status.
    fn emmc_switch(&mut self, argument: u32) {
        let access = (argument >> 24) & 0b11;
        let index = ((argument >> 16) & 0xff) as usize;
        let value = ((argument >> 8) & 0xff) as u8;
        let Some(emmc) = self.card.emmc.as_mut() else {
            return;
        };
        let device_type = emmc.ext_csd[EXT_CSD_DEVICE_TYPE];
        let allowed = access == 0b11
            && match index {
                EXT_CSD_HS_TIMING => match value {
                    0 => true,
                    1 => device_type & 0b11 != 0,
                    2 => device_type & (1 << 4) != 0,
                    _ => false,
                },
                EXT_CSD_BUS_WIDTH => match value {
                    0..=2 => true,
                    5 | 6 => device_type & (1 << 2) != 0 && emmc.ext_csd[EXT_CSD_HS_TIMING] == 1,
                    _ => false,
                },
                // The modes segment (bytes 0-191) is writable; the properties segment is not.
                _ => index < 192,
            };
        if !allowed {
            self.pending_errors |= MMC_SWITCH_ERROR;
            return;
        }
        emmc.ext_csd[index] = value;
        if index == EXT_CSD_HS_TIMING {
            self.card_clock_limit_hz = match value {
                0 => MMC_LEGACY_LIMIT_HZ,
                1 => 52_000_000,
                _ => 200_000_000,
            };
        }
    }

    /// Why data on the bus garbles for an eMMC: the host's width or DDR setting not the
    /// device's (EXT_CSD BUS_WIDTH), or lines the board does not wire.
    fn emmc_bus_mismatch(&self) -> Option<&'static str> {
        let emmc = self.card.emmc.as_ref()?;
        let control = self.register(offsets::HOST_CONTROL_POWER);
        let host_bits = if control & (1 << 5) != 0 {
            8
        } else if control & (1 << 1) != 0 {
            4
        } else {
            1
        };
        let host_ddr = (self.host_control2() & UHS_MODE_MASK) >> 16 == 4;
        let (device_bits, device_ddr) = match emmc.ext_csd[EXT_CSD_BUS_WIDTH] {
            1 => (4, false),
            2 => (8, false),
            5 => (4, true),
            6 => (8, true),
            _ => (1, false),
        };
        if host_bits != device_bits {
            return Some("eMMC data on a bus width the device was not switched to");
        }
        if host_ddr != device_ddr {
            return Some("eMMC data with DDR on one side of the bus only");
        }
        (device_bits > emmc.wired_width_bits).then_some("eMMC data on lines the board does not wire")
    }

    /// CMD14's answer to the bus test block `sent`: every bit inverted, on the lines the board
    /// wires; a line that is not wired reads high both ways (JESD84-B51 §6.4.5).
    fn bus_test_answer(&self, sent: &[u8]) -> Vec<u8> {
        let wired = self.card.emmc.as_ref().map_or(8, |emmc| emmc.wired_width_bits);
        let eight_bit_host = self.register(offsets::HOST_CONTROL_POWER) & (1 << 5) != 0;
        let floating: u8 = if eight_bit_host && wired < 8 { 0xf0 } else { 0 };
        sent.iter().map(|byte| (!(byte | floating)) | floating).collect()
    }
}

/// eMMC OCR bits (JESD84-B51 §7.1): both voltage windows, sector mode; and the ceiling of the
/// backward-compatible timing, and SWITCH_ERROR in the card status.
const MMC_OCR_VOLTAGES: u32 = 0x00ff_8080;
const MMC_OCR_SECTOR_MODE: u32 = 1 << 30;
const MMC_LEGACY_LIMIT_HZ: u32 = 26_000_000;
const MMC_SWITCH_ERROR: u32 = 1 << 7;

enum Response {
    Short(u32),
    Long(u128),
}

/// The board's card power, I/O rail and card-detect line, wired to a simulated host's card: a
/// power cycle resets the card (`SimHost::power_cycle_card`).
pub struct SimBoardHooks<'a> {
    pub sim: &'a SimHost<'a>,
    pub io_1v8: core::cell::Cell<Option<bool>>,
    /// What the board's card-detect line says (Pi 5: AON GPIO 5); `None`: no such line.
    pub card_detect: Option<bool>,
}

impl<'a> SimBoardHooks<'a> {
    pub fn new(sim: &'a SimHost<'a>) -> Self {
        SimBoardHooks { sim, io_1v8: core::cell::Cell::new(None), card_detect: None }
    }
}

impl crate::sd::signalling::BoardSignalling for SimBoardHooks<'_> {
    fn set_io_1v8(&self, enable: bool) -> Result<(), crate::sd::error::SdError> {
        self.io_1v8.set(Some(enable));
        Ok(())
    }
    fn power_cycle_card(&self) -> Result<(), crate::sd::error::SdError> {
        self.sim.power_cycle_card();
        Ok(())
    }
    fn card_present(&self) -> Option<bool> {
        self.card_detect
    }
}

/// Where the BCM2712 cfg block sits in the host's register window (docs/hardware.md §2.7).
const CONFIG_BLOCK_OFFSET: usize = 0x400;

impl SimState {
    /// A word of the cfg block; an access where the board has none is a driver bug.
    fn config_word(&mut self, offset_bytes: usize) -> &mut u32 {
        let words = self.config_block.as_mut().expect("no cfg block on this board");
        &mut words[(offset_bytes - CONFIG_BLOCK_OFFSET) / 4]
    }
}

impl RegisterIo for SimHost<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        // The DAT lines move with time (after CMD11): Present State reads look at the clock.
        let now = (offset_bytes == offsets::PRESENT_STATE).then(|| self.platform.now_ticks());
        let mut state = self.state.borrow_mut();
        state.tick(self.platform);
        match offset_bytes {
            offsets::PRESENT_STATE => {
                state.now_ns = now.unwrap_or(state.now_ns);
                state.update_dat_lines();
                state.present_state()
            }
            offsets::INTERRUPT_STATUS => {
                state.poll_tuning_block();
                state.register(offsets::INTERRUPT_STATUS)
            }
            offsets::BUFFER_DATA_PORT => {
                let word = state.buffer.pop_front().unwrap_or(0);
                if state.buffer.is_empty() {
                    state.load_next_block();
                }
                word
            }
            CONFIG_BLOCK_OFFSET.. => *state.config_word(offset_bytes),
            _ => state.register(offset_bytes),
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let now = self.platform.now_ticks();
        let mut state = self.state.borrow_mut();
        state.now_ns = now;
        if offset_bytes != offsets::BUFFER_DATA_PORT {
            let clock = state.sd_clock_hz();
            if clock <= 400_000 {
                if let Some(last) = state.last_write_ns {
                    state.min_slow_write_gap_ns = state.min_slow_write_gap_ns.min(now - last);
                }
            }
            state.last_write_ns = Some(now);
        }
        let index = offset_bytes / 4;
        match offset_bytes {
            offsets::SDMA_ADDRESS => {
                state.sdma_address_written = true;
                state.argument2_written = true;
                state.registers[index] = value;
            }
            offsets::BUFFER_DATA_PORT => state.receive_word(value),
            offsets::TRANSFER_MODE_COMMAND => {
                state.registers[index] = value;
                state.command_event = self.platform.log().len();
                drop(state);
                self.state.borrow_mut().execute(self.platform);
            }
            offsets::CLOCK_TIMEOUT_RESET => {
                let resets = value >> 24;
                let old = state.register(offsets::CLOCK_TIMEOUT_RESET);
                state.check_clock_change(old, value);
                let mut value = value & 0x00ff_ffff;
                if resets & 1 != 0 {
                    let keep =
                        [offsets::CAPABILITIES, offsets::CAPABILITIES_HIGH, offsets::SLOT_STATUS_VERSION];
                    for (i, register) in state.registers.iter_mut().enumerate() {
                        if !keep.contains(&(i * 4)) {
                            *register = 0;
                        }
                    }
                    state.buffer.clear();
                    state.transfer = None;
                    state.tuning = None;
                    state.tuning_block_due = None;
                    state.glitched = false;
                    state.unseen_status = 0;
                    state.command_reads_left = 0;
                    state.adma_due = false;
                    state.adma_reads_left = None;
                    value = 0;
                }
                if resets & 0b110 == 0b110 {
                    // §3.10.1 resets the CMD line, waits for it, then the DAT line.
                    state.violations.push(
                        "CMD and DAT line resets in one write (SDHCI §3.10.1: CMD line first, then DAT)",
                    );
                } else if resets & 0b100 != 0 && state.cmd_reset_due {
                    state.violations.push(
                        "DAT line reset before the CMD line reset after a command error (SDHCI §3.10.1)",
                    );
                }
                if resets & 0b110 != 0 {
                    state.line_resets += 1;
                    state.line_reset_log.push((resets & 0b110) as u8);
                }
                if resets & 0b010 != 0 {
                    // The CMD line only: a transfer the card abandoned is still held.
                    state.unseen_status = 0;
                    state.command_reads_left = 0;
                    state.cmd_reset_due = false;
                }
                if resets & 0b100 != 0 {
                    state.buffer.clear();
                    state.transfer = None;
                    state.stalled = false;
                    state.adma_due = false;
                    state.adma_reads_left = None;
                }
                if value & 1 != 0 {
                    value |= 0b10;
                }
                state.registers[index] = value;
                state.sd_clock_switched(old, value);
            }
            offsets::INTERRUPT_STATUS => {
                let status = state.register(offsets::INTERRUPT_STATUS) & !value;
                let status =
                    if status & 0xffff_0000 == 0 { status & !interrupt::ERROR_INTERRUPT } else { status };
                state.registers[index] = status;
            }
            offsets::AUTO_CMD_ERROR_HOST_CONTROL2 => state.write_host_control2(value),
            offsets::CAPABILITIES | offsets::CAPABILITIES_HIGH | offsets::SLOT_STATUS_VERSION => {}
            CONFIG_BLOCK_OFFSET.. => *state.config_word(offset_bytes) = value,
            _ => state.registers[index] = value,
        }
    }
}
