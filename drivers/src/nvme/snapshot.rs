//! The NVMe controller registers `regs=DEV` prints (NVMe Base Specification 1.4 §3.1: CAP
//! §3.1.1, VS §3.1.2, INTMS §3.1.3, CC §3.1.5, CSTS §3.1.6, AQA §3.1.8, ASQ §3.1.9, ACQ §3.1.10),
//! with the doorbell stride CAP.DSTRD gives (§3.1.1: 4 << DSTRD bytes).
//!
//! Only reads, and none with a side effect: the doorbells (0x1000 on) are never read (§3.1.24-25
//! leave their read value undefined), INTMS is read as the mask it holds (polled, MSI-X never
//! configured: §3.1.3 forbids the access only under MSI-X), and 64-bit registers go through the
//! caller's [`RegisterIo`], which splits them into 32-bit halves where the bus needs it
//! (docs/pcie-brcmstb.md §6).
#![forbid(unsafe_code)]

use super::regs::{offsets, Capabilities};
use crate::snapshot::RegisterSnapshot;
use hal::mmio::RegisterIo;

/// Reads the controller's registers into a snapshot.
pub fn snapshot<R: RegisterIo>(registers: &R) -> RegisterSnapshot {
    let mut snapshot = RegisterSnapshot::default();
    let cap = registers.read64(offsets::CAP);
    snapshot.push("CAP", offsets::CAP, 64, cap);
    let capabilities = Capabilities::decode(cap);
    snapshot.push_derived(
        "doorbell stride",
        offsets::CAP,
        capabilities.doorbell_stride_bytes as u64,
        "bytes between doorbells, 4 << CAP.DSTRD",
    );
    snapshot.push("VS", offsets::VS, 32, u64::from(registers.read32(offsets::VS)));
    snapshot.push("INTMS", offsets::INTMS, 32, u64::from(registers.read32(offsets::INTMS)));
    snapshot.push("CC", offsets::CC, 32, u64::from(registers.read32(offsets::CC)));
    snapshot.push("CSTS", offsets::CSTS, 32, u64::from(registers.read32(offsets::CSTS)));
    snapshot.push("AQA", offsets::AQA, 32, u64::from(registers.read32(offsets::AQA)));
    snapshot.push("ASQ", offsets::ASQ, 64, registers.read64(offsets::ASQ));
    snapshot.push("ACQ", offsets::ACQ, 64, registers.read64(offsets::ACQ));
    snapshot
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::events::DiscardEvents;
    use super::super::sim::{NvmeArena, SimConfig, SimController, SimPlatform};
    use super::super::Controller;
    use super::*;
    use crate::snapshot::AccessLog;
    use hal::mmio::{BusRegisters, WideAccess};
    use std::string::ToString;

    #[test]
    fn snapshot_reads_each_register_once_and_never_a_doorbell() {
        let platform = SimPlatform::for_nvme(32 << 20);
        let config = SimConfig { dstrd: 2, ..SimConfig::default() };
        let (cap, version) = (config.cap(), config.version);
        let sim = SimController::new(&platform, config);
        let before = snapshot(&&sim);
        assert_eq!(before.value("CC"), Some(0), "nothing enabled before bring-up");
        let controller = Controller::bring_up(
            &sim,
            sim.register_bytes(),
            &platform,
            platform.translation(),
            &DiscardEvents,
            "nvme".to_string(),
        )
        .unwrap();
        // Behind BCM2711's root complex: 64-bit registers as two 32-bit halves.
        let log = AccessLog::new(BusRegisters::new(&sim, WideAccess::Split32));
        let after = snapshot(&log);
        assert!(log.writes.borrow().is_empty());
        let mut reads = log.reads.borrow().clone();
        assert!(reads.iter().all(|&offset| offset < offsets::DOORBELLS));
        reads.sort_unstable();
        reads.dedup();
        assert_eq!(reads.len(), log.reads.borrow().len(), "a register read twice: {:?}", log.reads.borrow());
        assert_eq!(after.value("CAP"), Some(cap));
        assert_eq!(after.value("doorbell stride"), Some(16));
        assert_eq!(after.value("VS"), Some(u64::from(version)));
        assert_eq!(after.value("CC").map(|cc| cc & 1), Some(1));
        assert_eq!(after.value("CSTS").map(|csts| csts & 0b11), Some(0b01), "ready, not fatal");
        assert_eq!(after.value("INTMS"), Some(u64::from(sim.interrupt_mask())));
        assert_ne!(after.value("AQA"), Some(0));
        assert_ne!(after.value("ASQ"), Some(0));
        assert_ne!(after.value("ACQ"), after.value("ASQ"));
        drop(controller);
        sim.assert_no_violations();
    }
}
