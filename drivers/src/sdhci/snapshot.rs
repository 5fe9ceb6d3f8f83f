//! The SDHCI registers `regs=DEV` prints, by the specification's names (SD Host Controller
//! Simplified Specification v4.20 §2.1.2 register map, §2.2.9 Present State, §2.2.10-11 Host
//! Control 1 and Power Control, §2.2.14-16 Clock, Timeout Control and Software Reset, §2.2.17-21
//! interrupt status and enables, §2.2.24 Host Control 2, §2.2.26 Capabilities, §2.2.30 ADMA Error
//! Status, §2.2.31 ADMA System Address, §2.2.34 Host Controller Version).
//!
//! Only whole 32-bit words are read (the BCM2835/2837 Arasan and BCM2711 EMMC2 accept nothing
//! else: docs/hardware.md §2.3), each once, and none with a side effect: the Buffer Data Port
//! (0x20), whose read consumes data, is never touched, and nothing is written (interrupt status
//! bits are read, never cleared).
#![forbid(unsafe_code)]

use super::regs::offsets;
use crate::snapshot::RegisterSnapshot;
use hal::mmio::RegisterIo;

/// Reads the host's registers into a snapshot.
pub fn snapshot<R: RegisterIo>(registers: &R) -> RegisterSnapshot {
    let word = |offset| registers.read32(offset);
    let mut snapshot = RegisterSnapshot::default();
    let capabilities =
        u64::from(word(offsets::CAPABILITIES)) | (u64::from(word(offsets::CAPABILITIES_HIGH)) << 32);
    snapshot.push("capabilities", offsets::CAPABILITIES, 64, capabilities);
    let version = word(offsets::SLOT_STATUS_VERSION);
    snapshot.push("host controller version", offsets::SLOT_STATUS_VERSION + 2, 16, u64::from(version >> 16));
    snapshot.push("present state", offsets::PRESENT_STATE, 32, u64::from(word(offsets::PRESENT_STATE)));
    let host_power = word(offsets::HOST_CONTROL_POWER);
    snapshot.push("host control 1", offsets::HOST_CONTROL_POWER, 8, u64::from(host_power & 0xff));
    snapshot.push("power control", offsets::HOST_CONTROL_POWER + 1, 8, u64::from((host_power >> 8) & 0xff));
    let auto_cmd_host2 = word(offsets::AUTO_CMD_ERROR_HOST_CONTROL2);
    snapshot.push(
        "host control 2",
        offsets::AUTO_CMD_ERROR_HOST_CONTROL2 + 2,
        16,
        u64::from(auto_cmd_host2 >> 16),
    );
    snapshot.push(
        "auto CMD error status",
        offsets::AUTO_CMD_ERROR_HOST_CONTROL2,
        16,
        u64::from(auto_cmd_host2 & 0xffff),
    );
    let clock = word(offsets::CLOCK_TIMEOUT_RESET);
    snapshot.push("clock control", offsets::CLOCK_TIMEOUT_RESET, 16, u64::from(clock & 0xffff));
    snapshot.push("timeout control", offsets::CLOCK_TIMEOUT_RESET + 2, 8, u64::from((clock >> 16) & 0xff));
    let status = word(offsets::INTERRUPT_STATUS);
    snapshot.push("normal interrupt status", offsets::INTERRUPT_STATUS, 16, u64::from(status & 0xffff));
    snapshot.push("error interrupt status", offsets::INTERRUPT_STATUS + 2, 16, u64::from(status >> 16));
    let enable = word(offsets::INTERRUPT_STATUS_ENABLE);
    snapshot.push("interrupt status enable", offsets::INTERRUPT_STATUS_ENABLE, 32, u64::from(enable));
    let signal = word(offsets::INTERRUPT_SIGNAL_ENABLE);
    snapshot.push("interrupt signal enable", offsets::INTERRUPT_SIGNAL_ENABLE, 32, u64::from(signal));
    // As Linux's sdhci_dumpregs (drivers/mmc/host/sdhci.c): the ADMA registers only where the
    // capabilities register advertises ADMA2 (the BCM2835 Arasan documents nothing at 0x54-0x5C).
    if capabilities & ADMA2_SUPPORT != 0 {
        read_adma(registers, &mut snapshot);
    }
    let block = word(offsets::BLOCK_SIZE_COUNT);
    snapshot.push("block size", offsets::BLOCK_SIZE_COUNT, 16, u64::from(block & 0xffff));
    snapshot.push("block count", offsets::BLOCK_SIZE_COUNT + 2, 16, u64::from(block >> 16));
    snapshot
}

/// Capabilities bit 19: ADMA2 support (§2.2.26).
const ADMA2_SUPPORT: u64 = 1 << 19;

fn read_adma<R: RegisterIo>(registers: &R, snapshot: &mut RegisterSnapshot) {
    let word = |offset| registers.read32(offset);
    let adma_error = word(offsets::ADMA_ERROR_STATUS) & 0xff;
    snapshot.push("ADMA error status", offsets::ADMA_ERROR_STATUS, 8, u64::from(adma_error));
    let adma_address = u64::from(word(offsets::ADMA_SYSTEM_ADDRESS))
        | (u64::from(word(offsets::ADMA_SYSTEM_ADDRESS_HIGH)) << 32);
    snapshot.push("ADMA system address", offsets::ADMA_SYSTEM_ADDRESS, 64, adma_address);
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::quirks::{HostQuirks, ARASAN_EMMC, GENERIC_PCI};
    use super::super::sim::{SimBoard, SimHost, TestPlatform};
    use super::super::SdhciHost;
    use super::*;
    use crate::sd::identify::bring_up;
    use crate::sd::sim_card::SimCard;
    use crate::sd::timing::BringUpOptions;
    use crate::snapshot::AccessLog;
    use std::boxed::Box;

    /// A simulated host as `board` has it, brought up with `quirks` (card in transfer state).
    fn brought_up(board: SimBoard, quirks: &'static HostQuirks) -> &'static SimHost<'static> {
        let platform: &'static TestPlatform = Box::leak(Box::new(TestPlatform::new(4 << 20)));
        let sim: &'static SimHost<'static> =
            Box::leak(Box::new(SimHost::new(platform, board, SimCard::qemu_like(64 << 20))));
        let window = sim.state.borrow().dma_window;
        let base_clock = (quirks.name != GENERIC_PCI.name).then_some(board.base_clock_hz);
        let mut host = SdhciHost::new(sim, platform, quirks, base_clock, Some(window)).unwrap();
        bring_up(&mut host, None, BringUpOptions::default()).unwrap();
        sim
    }

    #[test]
    fn snapshot_names_the_state_bring_up_left_and_only_reads() {
        let sim = brought_up(SimBoard::QEMU_PCI, &GENERIC_PCI);
        let log = AccessLog::new(sim);
        let snapshot = snapshot(&log);
        assert!(log.writes.borrow().is_empty(), "{:?}", log.writes.borrow());
        let reads = log.reads.borrow();
        assert!(!reads.contains(&offsets::BUFFER_DATA_PORT));
        assert!(reads.iter().all(|offset| offset % 4 == 0));
        let value = |name| snapshot.value(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(value("capabilities"), 0x0578_34b4);
        assert_eq!(value("host controller version"), 0x2402);
        // 4-bit bus (Host Control 1 bit 1); bus power on at 3.3 V.
        assert_eq!(value("host control 1") & 0b10, 0b10);
        assert_eq!(value("power control"), 0b1111);
        // Internal clock enabled and stable, SD clock on.
        assert_eq!(value("clock control") & 0b111, 0b111);
        // Card inserted, stable, lines idle.
        assert_eq!(value("present state") & 0x3_0003, 0x3_0000);
        assert_eq!(value("interrupt status enable"), u64::from(super::super::regs::interrupt::ENABLED));
        assert_eq!(value("interrupt signal enable"), 0);
        assert_eq!(value("error interrupt status"), 0);
        assert_eq!(value("ADMA error status"), 0);
        assert!(snapshot.value("ADMA system address").is_some());
        assert!(snapshot.value("host control 2").is_some() && snapshot.value("block size").is_some());
    }

    #[test]
    fn a_host_without_adma2_has_its_adma_registers_left_alone() {
        let sim = brought_up(SimBoard::QEMU_RASPI, &ARASAN_EMMC);
        let log = AccessLog::new(sim);
        let snapshot = snapshot(&log);
        let reads = log.reads.borrow();
        for offset in
            [offsets::ADMA_ERROR_STATUS, offsets::ADMA_SYSTEM_ADDRESS, offsets::ADMA_SYSTEM_ADDRESS_HIGH]
        {
            assert!(!reads.contains(&offset), "{offset:#x} read");
        }
        assert_eq!(snapshot.value("ADMA error status"), None);
        assert_eq!(snapshot.value("capabilities"), Some(0x0521_34b4));
        assert!(log.writes.borrow().is_empty());
    }
}
