//! End-to-end: PCIe enumeration on QEMU virt: the ECAM host comes from the device tree
//! (high or low ECAM), every function is listed with its class and assigned BARs, 64-bit BARs use
//! the 64-bit window when there is one, functions behind a bridge get their own bus, and both
//! ends of a link get the payload sizes negotiated after the walk. On
//! raspi4b, which models no PCIe root complex (docs/qemu.md §9), the kernel says the link is down
//! at once and runs the benchmark on the SD card; `pcie=off` and bad `pcie.` settings are named.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{Machine, Run, TestImage};
use std::time::Duration;

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
    assert!(out.contains("class 06:04:00 (PCI bridge), PCIe max payload 128 bytes (128 supported)"), "{out}");
    // The payload both ends of the root port's link got. QEMU's devices support 128 bytes
    // (hw/pci/pcie.c leaves Max Payload Size Supported at 0) and keep Device Control's size
    // fields read-only, so the NVMe keeps its 128-byte read requests and the summary names it.
    assert!(
        out.contains(
            "pci        01:00.0 1b36:0010 class 01:08:02 (NVMe controller), PCIe max payload 128 bytes (128 supported), read request 128 bytes"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "pci        max payload 128 bytes (the smallest supported in the hierarchy, 01:00.0), read request 512 bytes; 1 function kept other sizes (first 01:00.0)"
        ),
        "{out}"
    );
    assert!(out.contains("pci          BAR0 64-bit memory at 0x8000000000, 16 KiB"), "{out}");
}

/// The EMMC2 card of raspi4b (QEMU attaches it only when asked: docs/qemu.md §2).
fn emmc2_card(run: Run, image: &TestImage) -> Run {
    run.args(&["-drive", &format!("if=none,id=e2,{}", image.drive())])
        .args(&["-device", "sd-card,drive=e2,bus=/generic-sdhci/sd-bus"])
}

#[test]
fn raspi4b_reports_pcie0_link_down_at_once_and_still_runs_the_benchmark() {
    let image = TestImage::full("pci-raspi4b", 8 << 20);
    let run = emmc2_card(Run::new(Machine::Raspi4b), &image)
        .append("exit=semihosting jobs=randread:4k:1 ramp=50ms runtime=200ms runs=1 offset=0 size=4m progress=off")
        .timeout(Duration::from_secs(120))
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(
        out.contains(
            "pcie0      BCM2711 root complex at 0xfd500000 (board table): inbound pci 0x400000000 -> cpu 0x0 (4 GiB), Gen2 limit, PERST# extra 0 ms"
        ),
        "{out}"
    );
    // QEMU's raspi4b answers board revision 0xb03115, a C0 Pi 4B: without a device tree the
    // inbound window is the one the firmware gives C0 boards.
    assert!(out.contains("pcie0      no device tree: board revision 0xb03115 is a C0 BCM2711"), "{out}");
    let link = out
        .lines()
        .position(|l| l.starts_with("pcie0      link down: nothing answers at 0xfd500000"))
        .expect(out);
    let sd = out.lines().position(|l| l.starts_with("sdhci at 0xfe340000")).expect(out);
    assert!(link < sd, "PCIe is tried before the SD cards:\n{out}");
    assert!(
        out.contains("reading RGR1_SW_INIT_1 at 0xfd509210 raised a synchronous external abort"),
        "{out}"
    );
    assert!(out.contains("nvme       no PCIe devices; no NVMe controllers"), "{out}");
    assert!(
        out.contains("usb        the Pi 4's USB 3 controller (VL805) is behind pcie0, which is not up (see the pcie0 line); no USB drives"),
        "{out}"
    );
    assert!(!out.contains("EXCEPTION"), "{out}");
    assert!(out.contains("results for randread:4k:1"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("sd0") && l.contains("randread:4k:1")), "{out}");
}

#[test]
fn raspi4b_pcie_settings_are_named_and_pcie_off_leaves_the_root_complex_alone() {
    let run = Run::new(Machine::Raspi4b)
        .append("exit=semihosting jobs=none pcie=off pcie.gen=4 pcie.perst-ms=soon pcie.ready-ms=forever")
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("warning: bad driver option pcie.gen=4: expected 1, 2 or 3"), "{out}");
    assert!(
        out.contains("warning: bad driver option pcie.perst-ms=soon: expected milliseconds from 0 to 10000"),
        "{out}"
    );
    assert!(
        out.contains(
            "warning: bad driver option pcie.ready-ms=forever: expected milliseconds from 0 to 60000"
        ),
        "{out}"
    );
    assert!(
        out.contains("pcie0      off (pcie=off): the root complex is left as the firmware left it"),
        "{out}"
    );
    assert!(!out.contains("link down"), "{out}");

    let run = Run::new(Machine::Raspi4b).append("exit=semihosting jobs=none pcie=maybe").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("warning: bad setting pcie=maybe: expected on or off"), "{out}");
    assert!(out.contains("pcie0      link down"), "{out}");
}
