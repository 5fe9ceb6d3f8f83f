//! Host tests of the bus walk and BAR assignment against a simulated configuration space.
#![forbid(unsafe_code)]

extern crate std;

use super::ecam::Ecam;
use super::ranges;
use super::sim::SimulatedFunction;
use super::*;
use blockdev::testing::SteppingClock;
use blockdev::Clock;
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use std::collections::BTreeMap;
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// Functions behind each bridge: (device, function, configuration space).
type BehindBridge = BTreeMap<(u8, u8, u8), Vec<(u8, u8, SimulatedFunction)>>;

struct SimulatedBus {
    functions: RefCell<BTreeMap<(u8, u8, u8), SimulatedFunction>>,
    /// Bridges forward config cycles to their secondary bus: (bridge address) -> functions behind.
    behind_bridge: RefCell<BehindBridge>,
    /// Time for functions that answer "retry" for a while (10 µs per read).
    clock: SteppingClock,
    /// Accesses a function still answering "retry" could not have completed.
    violations: RefCell<Vec<String>>,
}

impl SimulatedBus {
    fn key(address: FunctionAddress) -> (u8, u8, u8) {
        (address.bus, address.device, address.function)
    }

    /// Moves functions behind a bridge to the bus number the enumerator gave it.
    fn route_bridges(&self) {
        let behind = self.behind_bridge.borrow();
        let mut functions = self.functions.borrow_mut();
        for (bridge, children) in behind.iter() {
            let secondary = ((functions[bridge].registers[6] >> 8) & 0xff) as u8;
            if secondary == 0 {
                continue;
            }
            for (device, function, simulated) in children {
                functions.entry((secondary, *device, *function)).or_insert_with(|| simulated.clone());
            }
        }
    }
}

impl SimulatedBus {
    fn new(functions: BTreeMap<(u8, u8, u8), SimulatedFunction>) -> Self {
        SimulatedBus {
            functions: RefCell::new(functions),
            behind_bridge: RefCell::new(BTreeMap::new()),
            clock: SteppingClock::new(1_000_000_000, 10_000),
            violations: RefCell::new(Vec::new()),
        }
    }

    /// Whether the function answers "retry" now (CRS software visibility assumed on, as the
    /// Broadcom root complex driver sets it and ECAM hosts report it).
    fn retrying(&self, function: &SimulatedFunction) -> bool {
        self.clock.now_ns() < function.retry_until_ns
    }
}

impl ConfigAccess for SimulatedBus {
    fn read32(&self, function: FunctionAddress, offset: u16) -> u32 {
        self.route_bridges();
        let functions = self.functions.borrow();
        let Some(found) = functions.get(&Self::key(function)) else {
            return 0xffff_ffff;
        };
        if self.retrying(found) {
            if offset != offsets::VENDOR_DEVICE {
                self.violations
                    .borrow_mut()
                    .push(format!("{function} register {offset:#x} read while it answers retry"));
                return 0xffff_ffff;
            }
            return 0xffff_0000 | u32::from(ready::CRS_VENDOR_ID);
        }
        found.read(offset)
    }

    fn write32(&self, function: FunctionAddress, offset: u16, value: u32) {
        let retrying = self.functions.borrow().get(&Self::key(function)).is_some_and(|f| self.retrying(f));
        if retrying {
            self.violations
                .borrow_mut()
                .push(format!("{function} register {offset:#x} written while it answers retry"));
            return;
        }
        if let Some(f) = self.functions.borrow_mut().get_mut(&Self::key(function)) {
            f.write(offset, value);
        }
    }

    fn first_bus(&self) -> u8 {
        0
    }

    fn last_bus(&self) -> u8 {
        255
    }
}

fn virt_like_windows() -> HostWindows {
    HostWindows {
        memory32: Some(Window {
            cpu_base: 0x1000_0000,
            pci_base: 0x1000_0000,
            size_bytes: 0x2eff_0000,
            prefetchable: false,
        }),
        memory64: Some(Window {
            cpu_base: 0x80_0000_0000,
            pci_base: 0x80_0000_0000,
            size_bytes: 0x80_0000_0000,
            prefetchable: false,
        }),
    }
}

fn qemu_virt_bus() -> SimulatedBus {
    let mut functions = BTreeMap::new();
    // 00:00.0 gpex host bridge, 00:01.0 NVMe (64-bit 16 KiB BAR0 + 32-bit BAR... none), 00:02.0 sdhci-pci (32-bit 256 B BAR0).
    functions.insert((0, 0, 0), SimulatedFunction::endpoint(0x1b36, 0x0008, 0x06_00_00, &[]));
    functions.insert(
        (0, 1, 0),
        SimulatedFunction::endpoint(0x1b36, 0x0010, 0x01_08_02, &[(0, 0x4000, 0b100), (1, 0, 0)]),
    );
    functions
        .insert((0, 2, 0), SimulatedFunction::endpoint(0x1b36, 0x0007, 0x08_05_01, &[(0, 0x100, 0b000)]));
    SimulatedBus::new(functions)
}

#[test]
fn bar_sizing_decodes_32_and_64_bit_bars() {
    assert_eq!(
        decode_bar_sizing(0xffff_ff00, None),
        Some(Ok(BarSizing { size_bytes: 256, is_64_bit: false, prefetchable: false }))
    );
    assert_eq!(
        decode_bar_sizing(0xffff_c004, Some(0xffff_ffff)),
        Some(Ok(BarSizing { size_bytes: 16 << 10, is_64_bit: true, prefetchable: false }))
    );
    assert_eq!(
        decode_bar_sizing(0x0000_000c, Some(0xffff_fff0)),
        Some(Ok(BarSizing { size_bytes: 64 << 30, is_64_bit: true, prefetchable: true }))
    );
    assert_eq!(decode_bar_sizing(0, None), None);
    assert_eq!(decode_bar_sizing(0xffff_0f00, None), Some(Err(0xffff_0f00)));
}

#[test]
fn walk_assigns_bars_in_the_right_windows_and_enables_functions() {
    let bus = qemu_virt_bus();
    let topology = Enumerator::new(&bus, virt_like_windows()).run();
    assert_eq!(topology.functions.len(), 3);
    let nvme = topology.with_class(ClassCode::NVME).next().unwrap();
    assert_eq!(nvme.address, FunctionAddress { bus: 0, device: 1, function: 0 });
    let bar0 = nvme.bar(0).unwrap();
    assert!(bar0.is_64_bit);
    assert_eq!((bar0.cpu_address, bar0.size_bytes), (0x80_0000_0000, 0x4000));
    assert!(nvme.bar(1).is_none(), "the upper half of a 64-bit BAR is not a BAR");
    let sdhci = topology.with_class(ClassCode::SDHCI).next().unwrap();
    let sd_bar = sdhci.bar(0).unwrap();
    assert_eq!(sd_bar.cpu_address, 0x1000_0000);
    assert_eq!(sd_bar.size_bytes, 0x100);
    // What the hardware now holds: the addresses and memory + bus master enabled.
    let functions = bus.functions.borrow();
    assert_eq!(functions[&(0, 1, 0)].registers[4], 0x0000_0004);
    assert_eq!(functions[&(0, 1, 0)].registers[5], 0x80);
    assert_eq!(functions[&(0, 2, 0)].registers[4], 0x1000_0000);
    for key in [(0, 1, 0), (0, 2, 0)] {
        let command = functions[&key].registers[1];
        assert_eq!(command & 0b110, 0b110, "{key:?} command {command:#x}");
    }
}

#[test]
fn without_a_64_bit_window_everything_lands_below_4_gib() {
    let bus = qemu_virt_bus();
    let windows = HostWindows { memory64: None, ..virt_like_windows() };
    let topology = Enumerator::new(&bus, windows).run();
    let nvme = topology.with_class(ClassCode::NVME).next().unwrap().bar(0).unwrap();
    let sdhci = topology.with_class(ClassCode::SDHCI).next().unwrap().bar(0).unwrap();
    assert_eq!(nvme.cpu_address, 0x1000_0000);
    // Aligned to its own size after the 16 KiB BAR.
    assert_eq!(sdhci.cpu_address, 0x1000_4000);
}

#[test]
fn a_window_too_small_leaves_the_bar_unassigned_and_says_why() {
    let bus = qemu_virt_bus();
    let windows = HostWindows {
        memory32: Some(Window {
            cpu_base: 0x1000_0000,
            pci_base: 0x1000_0000,
            size_bytes: 0x1000,
            prefetchable: false,
        }),
        memory64: None,
    };
    let topology = Enumerator::new(&bus, windows).run();
    let nvme = topology.with_class(ClassCode::NVME).next().unwrap();
    assert!(nvme.bar(0).is_none());
    assert_eq!(
        nvme.bar_problems[0],
        Some(BarProblem::NoRoom { index: 0, size_bytes: 0x4000, is_64_bit: true })
    );
    // The function without memory is not given bus mastering.
    assert_eq!(bus.functions.borrow()[&(0, 1, 0)].registers[1] & COMMAND_BUS_MASTER, 0);
}

#[test]
fn functions_behind_a_bridge_get_a_bus_number_and_a_forwarding_window() {
    let bus = qemu_virt_bus();
    bus.functions.borrow_mut().insert((0, 3, 0), SimulatedFunction::bridge());
    bus.behind_bridge.borrow_mut().insert(
        (0, 3, 0),
        vec![(0, 0, SimulatedFunction::endpoint(0x1b36, 0x0010, 0x01_08_02, &[(0, 0x4000, 0b000)]))],
    );
    let topology = Enumerator::new(&bus, virt_like_windows()).run();
    let behind = topology.functions.iter().find(|f| f.address.bus == 1).expect("function behind the bridge");
    assert_eq!(behind.class, ClassCode::NVME);
    let bar = behind.bar(0).unwrap();
    let functions = bus.functions.borrow();
    let bridge = &functions[&(0, 3, 0)];
    assert_eq!(bridge.registers[6] & 0x00ff_ffff, 0x01_01_00, "primary 0, secondary 1, subordinate 1");
    let window = bridge.registers[8];
    let base = u64::from(window & 0xfff0) << 16;
    let limit = (u64::from(window >> 20) << 20) | 0xf_ffff;
    assert!(
        bar.pci_address >= base && bar.pci_address + bar.size_bytes - 1 <= limit,
        "{window:#x} vs {bar:?}"
    );
}

#[test]
fn ecam_addresses_functions_and_refuses_other_buses() {
    struct Recorder(RefCell<Vec<usize>>);
    impl RegisterIo for Recorder {
        fn read32(&self, offset_bytes: usize) -> u32 {
            self.0.borrow_mut().push(offset_bytes);
            0x1234
        }
        fn write32(&self, offset_bytes: usize, _value: u32) {
            self.0.borrow_mut().push(offset_bytes);
        }
    }
    let ecam = Ecam::new(Recorder(RefCell::new(Vec::new())), 0, 15);
    assert_eq!(ecam.read32(FunctionAddress { bus: 2, device: 3, function: 4 }, 0x10), 0x1234);
    assert_eq!(ecam.read32(FunctionAddress { bus: 16, device: 0, function: 0 }, 0), 0xffff_ffff);
    let recorded = ecam.region().0.borrow().clone();
    assert_eq!(recorded, [(2 << 20) | (3 << 15) | (4 << 12) | 0x10]);
}

#[test]
fn qemu_virt_ranges_give_both_windows_and_identity_dma() {
    // QEMU virt's /pcie ranges: I/O, 32-bit memory and 64-bit memory (docs/qemu.md §3), with the
    // root's 2 address cells and the node's 2 size cells.
    let words: [u32; 21] = [
        0x0100_0000,
        0,
        0,
        0,
        0x3eff_0000,
        0,
        0x0001_0000,
        0x0200_0000,
        0,
        0x1000_0000,
        0,
        0x1000_0000,
        0,
        0x2eff_0000,
        0x0300_0000,
        0x80,
        0,
        0x80,
        0,
        0x80,
        0,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    let windows = ranges::host_windows(&bytes, 2, 2);
    assert_eq!(windows.memory32.unwrap().cpu_base, 0x1000_0000);
    assert_eq!(windows.memory32.unwrap().size_bytes, 0x2eff_0000);
    assert_eq!(windows.memory64.unwrap().pci_base, 0x80_0000_0000);
    assert_eq!(windows.memory64.unwrap().size_bytes, 0x80_0000_0000);
    assert_eq!(ranges::dma_translation(None, 2, 2), hal::platform::BusTranslation::IDENTITY);
    // A Pi 5 style inbound window: PCI 0x10_0000_0000 -> CPU 0, 64 GiB (docs/hardware.md §1.4).
    let inbound: Vec<u8> =
        [0x0200_0000u32, 0x10, 0, 0, 0, 0x10, 0].iter().flat_map(|w| w.to_be_bytes()).collect();
    let dma = ranges::dma_translation(Some(&inbound), 2, 2);
    assert_eq!(dma.to_bus(0x8_0000, 512), Ok(0x10_0008_0000));
    // With pcie1's MSI window (PCI 0xFF_FFFF_F000 -> 0x10_0013_1000, 4 KiB) listed first, memory
    // is still the 64 GiB entry.
    let with_msi: Vec<u8> = [
        0x0200_0000u32,
        0xff,
        0xffff_f000,
        0x10,
        0x0013_1000,
        0,
        0x1000,
        0x0200_0000,
        0x10,
        0,
        0,
        0,
        0x10,
        0,
    ]
    .iter()
    .flat_map(|w| w.to_be_bytes())
    .collect();
    assert_eq!(ranges::dma_translation(Some(&with_msi), 2, 2), dma);
}

/// An NVMe function that answers "retry" for its first `retry_ms`.
fn slow_nvme(retry_ms: u64) -> SimulatedFunction {
    let mut function =
        SimulatedFunction::endpoint(0x144d, 0xa80a, 0x01_08_02, &[(0, 0x4000, 0b100), (1, 0, 0)]);
    function.retry_until_ns = retry_ms * 1_000_000;
    function
}

/// QEMU virt's bus with an NVMe answering "retry" for `retry_ms`: at 00:04.0, or behind a bridge
/// at 00:03.0 (as 01:00.0). Returns the bus and where the slow function is found.
fn bus_with_slow_function(retry_ms: u64, behind_bridge: bool) -> (SimulatedBus, FunctionAddress) {
    let bus = qemu_virt_bus();
    bus.functions.borrow_mut().insert((0, 3, 0), SimulatedFunction::bridge());
    if behind_bridge {
        bus.behind_bridge.borrow_mut().insert((0, 3, 0), vec![(0, 0, slow_nvme(retry_ms))]);
        (bus, FunctionAddress { bus: 1, device: 0, function: 0 })
    } else {
        bus.functions.borrow_mut().insert((0, 4, 0), slow_nvme(retry_ms));
        (bus, FunctionAddress { bus: 0, device: 4, function: 0 })
    }
}

#[test]
fn functions_answering_retry_for_1_5_s_are_waited_for_on_every_bus() {
    for behind_bridge in [false, true] {
        let (bus, address) = bus_with_slow_function(1500, behind_bridge);
        let events = RefCell::new(Vec::new());
        let report = |event: &ReadyEvent| events.borrow_mut().push(*event);
        let wait = ReadyWait { clock: &bus.clock, limit_ms: ready::DEFAULT_READY_MS, report: &report };
        let topology = Enumerator::new(&bus, virt_like_windows()).with_ready_wait(wait).run();
        let function =
            topology.functions.iter().find(|f| f.address == address).expect("found after its wait");
        assert_eq!((function.vendor_id, function.class), (0x144d, ClassCode::NVME), "{address}");
        assert!(function.bar(0).is_some(), "{address}: its BAR was assigned once it answered");
        assert!(topology.not_ready.is_empty());
        let events = events.borrow();
        let ready = events.iter().find_map(|event| match event {
            ReadyEvent::Ready { address: at, waited_ms } if *at == address => Some(*waited_ms),
            _ => None,
        });
        assert!(ready.is_some_and(|ms| (1400..=1600).contains(&ms)), "{address}: {events:?}");
        assert!(
            events
                .iter()
                .any(|event| matches!(event, ReadyEvent::Waiting { waited_ms, .. } if *waited_ms >= 1000)),
            "a progress line after a second: {events:?}"
        );
        assert!(format!("{}", events[0]).contains("configuration retry"), "{}", events[0]);
        assert!(bus.violations.borrow().is_empty(), "{:?}", bus.violations.borrow());
    }
}

#[test]
fn a_function_still_answering_retry_is_left_out_by_name_never_walked_as_vendor_0001() {
    for (wait_ms, behind_bridge) in [(None, false), (None, true), (Some(1000), false), (Some(1000), true)] {
        let (bus, address) = bus_with_slow_function(1500, behind_bridge);
        let events = RefCell::new(Vec::new());
        let report = |event: &ReadyEvent| events.borrow_mut().push(*event);
        let enumerator = Enumerator::new(&bus, virt_like_windows());
        let enumerator = match wait_ms {
            Some(limit_ms) => {
                enumerator.with_ready_wait(ReadyWait { clock: &bus.clock, limit_ms, report: &report })
            }
            None => enumerator,
        };
        let topology = enumerator.run();
        assert!(
            topology.functions.iter().all(|f| f.vendor_id != ready::CRS_VENDOR_ID && f.class.base != 0xff),
            "{wait_ms:?}"
        );
        assert_eq!(topology.not_ready.as_slice(), [address], "{wait_ms:?}");
        if wait_ms.is_some() {
            let gave_up = events.borrow().iter().filter(|e| matches!(e, ReadyEvent::GaveUp { .. })).count();
            assert_eq!(gave_up, 1);
        }
        assert!(bus.violations.borrow().is_empty(), "{:?}", bus.violations.borrow());
    }
}

#[test]
fn the_payload_is_the_smallest_supported_and_set_on_both_ends_of_every_link() {
    let bus = qemu_virt_bus();
    // 00:01.0 (NVMe, 1024 supported), a root port 00:03.0 (512) with an NVMe (256) behind it;
    // 00:02.0 (sdhci-pci) is conventional PCI and has no PCI Express capability.
    let nvme = |code| {
        SimulatedFunction::endpoint(0x144d, 0xa80a, 0x01_08_02, &[(0, 0x4000, 0b000)])
            .with_pcie_capability(code)
    };
    bus.functions.borrow_mut().insert((0, 1, 0), nvme(3));
    bus.functions.borrow_mut().insert((0, 3, 0), SimulatedFunction::bridge().with_pcie_capability(2));
    bus.behind_bridge.borrow_mut().insert((0, 3, 0), vec![(0, 0, nvme(1))]);
    let topology = Enumerator::new(&bus, virt_like_windows()).run();
    let payload = topology.payload.expect("PCI Express functions were found");
    assert_eq!(
        (payload.max_payload_bytes, payload.max_read_request_bytes, payload.limited_by, payload.functions),
        (256, 512, FunctionAddress { bus: 1, device: 0, function: 0 }, 3)
    );
    let functions = bus.functions.borrow();
    assert_eq!(functions[&(0, 3, 0)].payload_sizes().0, 256, "the root port's end of the link");
    assert_eq!(functions[&(1, 0, 0)].payload_sizes(), (256, 512), "the endpoint's end");
    assert_eq!(functions[&(0, 1, 0)].payload_sizes(), (256, 512));
    let listed = topology.functions.iter().find(|f| f.address.bus == 1).unwrap().pcie.unwrap();
    assert_eq!((listed.max_payload_supported_bytes, listed.max_payload_bytes), (256, 256));
    assert!(topology.functions.iter().find(|f| f.address.device == 2).unwrap().pcie.is_none());
    assert_eq!(
        format!("{payload}"),
        "max payload 256 bytes (the smallest supported in the hierarchy, 01:00.0), read request 512 bytes"
    );
}

#[test]
fn a_function_whose_device_control_keeps_its_sizes_is_named_not_reported_as_set() {
    // QEMU's devices support 128-byte payloads and leave Device Control's size fields read-only:
    // the NVMe keeps 128-byte read requests, and its line and the summary say so.
    let bus = qemu_virt_bus();
    let mut nvme = SimulatedFunction::endpoint(0x1b36, 0x0010, 0x01_08_02, &[(0, 0x4000, 0b000)])
        .with_pcie_capability(0);
    nvme.payload_read_only = true;
    nvme.registers[usize::from(sim::PCIE_CAPABILITY_OFFSET) / 4 + 2] = 0;
    bus.functions.borrow_mut().insert((0, 3, 0), SimulatedFunction::bridge().with_pcie_capability(0));
    bus.behind_bridge.borrow_mut().insert((0, 3, 0), vec![(0, 0, nvme)]);
    let topology = Enumerator::new(&bus, virt_like_windows()).run();
    let payload = topology.payload.expect("PCI Express functions were found");
    let behind = FunctionAddress { bus: 1, device: 0, function: 0 };
    assert_eq!((payload.kept, payload.first_kept), (1, Some(behind)));
    let listed = topology.functions.iter().find(|f| f.address == behind).unwrap().pcie.unwrap();
    assert_eq!((listed.max_payload_bytes, listed.max_read_request_bytes), (128, 128));
    assert_eq!(
        format!("{payload}"),
        "max payload 128 bytes (the smallest supported in the hierarchy, 01:00.0), read request 512 bytes; \
         1 function kept other sizes (first 01:00.0)"
    );
}
