//! End-to-end: PCIe enumeration on QEMU virt: the ECAM host comes from the device tree
//! (high or low ECAM), every function is listed with its class and assigned BARs, 64-bit BARs use
//! the 64-bit window when there is one, and functions behind a bridge get their own bus.
#![cfg(feature = "e2e")]

mod qemu_harness;

use qemu_harness::{Machine, Run};

fn pci_lines(output: &str) -> Vec<&str> {
    output.lines().filter(|l| l.starts_with("pci ")).collect()
}

#[test]
fn virt_lists_nvme_and_sdhci_with_their_bars() {
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting")
        .args(&["-device", "nvme,serial=pci-e2e,id=nvme-ctrl", "-device", "sdhci-pci"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("pci        ECAM host at 0x4010000000, buses 0-255, 3 functions"), "{out}");
    assert!(out.contains("pci        00:01.0 1b36:0010 class 01:08:02 (NVMe controller)"), "{out}");
    assert!(out.contains("pci          BAR0 64-bit memory at 0x8000000000, 16 KiB"), "{out}");
    assert!(out.contains("pci        00:02.0 1b36:0007 class 08:05:01 (SD host controller)"), "{out}");
    assert!(out.contains("pci          BAR0 32-bit memory at 0x10000000, 256 bytes"), "{out}");
}

#[test]
fn low_ecam_and_no_64_bit_window_with_highmem_off() {
    // highmem=off moves the ECAM to 0x3f00_0000 (16 buses) and removes the 64-bit window
    // (docs/qemu.md §3): both must be read from the device tree.
    let run = Run::new(Machine::Virt)
        .machine_options("highmem=off")
        .append("exit=semihosting")
        .args(&["-device", "nvme,serial=pci-low"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("pci        ECAM host at 0x3f000000, buses 0-15, 2 functions"), "{out}");
    assert!(
        out.contains("pci          BAR0 64-bit memory at 0x10000000, 16 KiB"),
        "{}",
        pci_lines(out).join("\n")
    );
}

#[test]
fn a_function_behind_a_root_port_gets_bus_1() {
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting")
        .args(&["-device", "pcie-root-port,id=rp0,chassis=1", "-device", "nvme,serial=behind,bus=rp0"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("class 06:04:00 (PCI bridge)"), "{out}");
    assert!(out.contains("pci        01:00.0 1b36:0010 class 01:08:02 (NVMe controller)"), "{out}");
    assert!(out.contains("pci          BAR0 64-bit memory at 0x8000000000, 16 KiB"), "{out}");
}
