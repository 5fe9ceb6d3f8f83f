//! End-to-end: SD cards under QEMU. raspi3b's Arasan SDHCI (SDSC image, PIO) and its sdhost
//! (the slot's controller unless `sd.host=arasan`), raspi4b's
//! EMMC2 and legacy Arasan together, raspi4b booted with Debian's Pi 4 device tree as shipped
//! (B0 `dma-ranges`) and as a C0 board's firmware edits it, and `sdhci-pci` on virt (SDHC image,
//! ADMA2 and forced PIO).
//! Images are sparse files of a power-of-two size with the test pattern written where the tests
//! read (start, end, pseudo-random places); the kernel's `crc=` results are compared with CRCs
//! the host computes from the image file (crc32fast), and `verify=` checks every byte.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{Machine, Run, TestImage as Image, SECTOR};

const MIB: u64 = 1 << 20;

/// Ranges to read: the start, the end, and pseudo-random places (a fixed-seed LCG, so a failure
/// can be reproduced), single blocks and multi-block runs.
fn ranges(blocks: u64, seed: u64) -> Vec<(u64, u64)> {
    let mut ranges =
        vec![(0, 1), (0, 16), (1, 2048), (blocks - 1, 1), (blocks - 2048, 2048), (blocks - 9, 8)];
    let mut state = seed;
    for count in [1, 7, 64, 1, 300] {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let lba = (state >> 11) % (blocks - count);
        ranges.push((lba, count));
    }
    ranges
}

/// `crc=` for every range on `device`, `verify=` for the first `verified` ones. The line may be
/// long: on raspi the kernel reads it from the mailbox when QEMU's ATAGS copy is cut short
/// (boot.rs `a_long_command_line_reaches_the_kernel_whole_on_raspi`).
fn checks(device: &str, ranges: &[(u64, u64)], verified: usize) -> String {
    let crcs = ranges.iter().map(|(lba, count)| format!("crc={device}:{lba}:{count}"));
    let verifies = ranges.iter().take(verified).map(|(lba, count)| format!("verify={device}:{lba}:{count}"));
    crcs.chain(verifies).collect::<Vec<_>>().join(" ")
}

fn assert_checks(output: &str, device: &str, image: &Image, ranges: &[(u64, u64)], verified: usize) {
    for &(lba, count) in ranges {
        let expected = format!("crc {device} {lba} {count} {:#010x}", image.crc(lba, count));
        assert!(output.lines().any(|line| line == expected), "missing `{expected}` in:\n{output}");
    }
    for &(lba, count) in ranges.iter().take(verified) {
        let verified = format!("verify {device} {lba} {count} ok");
        assert!(output.lines().any(|line| line == verified), "missing `{verified}` in:\n{output}");
    }
}

fn line_with<'a>(output: &'a str, prefix: &str) -> &'a str {
    output
        .lines()
        .find(|line| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{output}"))
}

/// The kernel's bring-up timing line, echoed so `cargo test -- --nocapture` shows the figures.
fn report_timing(output: &str, label: &str, device: &str) {
    let line = line_with(output, &format!("{device}: 1 MiB read in "));
    println!("{label}: {line}");
}

#[test]
fn raspi3b_arasan_reads_an_sdsc_card_by_pio() {
    let blocks = (1u64 << 30) / SECTOR;
    let ranges = ranges(blocks, 3);
    let image = Image::new("sd-raspi3b", 1 << 30, &ranges);
    let run = Run::new(Machine::Raspi3b)
        .append(&format!(
            "exit=semihosting jobs=none sd.mode=adma2 sd.host=arasan {}",
            checks("sd0", &ranges, 5)
        ))
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(line_with(out, "sdhci at 0x3f300000:").contains("Arasan EMMC"), "{out}");
    // QEMU's mailbox answers 700 MHz for the ARM clock and its maximum.
    assert!(out.lines().any(|line| line == "           cpu clock 700 MHz (measured: firmware did not answer GET_CLOCK_RATE_MEASURED (0x00030047); max 700 MHz)"), "{out}");
    assert!(out.contains("SD pins GPIO 48-53 routed to this SDHCI"), "{out}");
    let card = line_with(out, "sd0        card");
    assert!(card.contains("MID 0xaa OEM \"XY\" product \"QEMU!\""), "{card}");
    let capacity = line_with(out, "sd0        capacity");
    assert!(
        capacity.starts_with("sd0        capacity 1073741824 bytes (1.00 GiB), CSD 1.0, SDSC"),
        "{capacity}"
    );
    let mode = line_with(out, "sd0        mode");
    assert!(mode.contains("4-bit bus") && mode.contains("High Speed (HS)") && mode.contains("PIO"), "{mode}");
    // QEMU's raspi hosts advertise no DMA: ADMA2 asked for, PIO used, and said so.
    assert!(
        out.contains("sd0        sd.mode=adma2 asked for, but this host advertises no ADMA2: using PIO"),
        "{out}"
    );
    assert_eq!(image.blocks, blocks);
    assert_checks(out, "sd0", &image, &ranges, 5);
    report_timing(out, "raspi3b PIO", "sd0");
}

#[test]
fn raspi3b_slot_goes_to_the_sdhost_unless_asked_otherwise() {
    let blocks = (256u64 << 20) / SECTOR;
    let ranges = ranges(blocks, 8);
    let image = Image::new("sd-raspi3b-sdhost", 256 << 20, &ranges);
    let run = Run::new(Machine::Raspi3b)
        .append(&format!("exit=semihosting jobs=none {}", checks("sd0", &ranges, 3)))
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(line_with(out, "sdhost at 0x3f202000:").contains("BCM2835 sdhost"), "{out}");
    assert!(
        out.contains("sdhci at 0x3f300000: not probed: GPIO 48-53 give the SD slot to the sdhost"),
        "{out}"
    );
    let mode = line_with(out, "sd0        mode");
    assert!(
        mode.contains("High Speed (HS)") && mode.contains("PIO") && mode.ends_with("end by CMD12"),
        "{mode}"
    );
    assert_checks(out, "sd0", &image, &ranges, 3);
    report_timing(out, "raspi3b sdhost PIO", "sd0");
}

#[test]
fn raspi4b_names_emmc2_first_and_reads_both_cards() {
    let sdhc_blocks = (8u64 << 30) / SECTOR;
    let sdsc_blocks = (2u64 << 30) / SECTOR;
    let sdhc_ranges: Vec<(u64, u64)> = ranges(sdhc_blocks, 4).into_iter().take(8).collect();
    let sdsc_ranges = vec![(0, 16), (sdsc_blocks - 1, 1), (sdsc_blocks - 64, 64), (1_000_003, 5)];
    let emmc2 = Image::new("sd-raspi4b-emmc2", 8 << 30, &sdhc_ranges);
    let arasan = Image::new("sd-raspi4b-arasan", 2 << 30, &sdsc_ranges);
    let run = Run::new(Machine::Raspi4b)
        .append(&format!(
            "exit=semihosting jobs=none {} {}",
            checks("sd0", &sdhc_ranges, 2),
            checks("sd1", &sdsc_ranges, 2)
        ))
        .arg("-drive")
        .arg(&format!("if=sd,{}", arasan.drive()))
        .arg("-drive")
        .arg(&format!("if=none,id=e2,{}", emmc2.drive()))
        .arg("-device")
        .arg("sd-card,drive=e2,bus=/generic-sdhci/sd-bus")
        .go();
    run.assert_status(0);
    let out = &run.output;
    // The board table lists the SD slot (EMMC2) first.
    assert!(out.lines().any(|line| line == "           cpu clock 700 MHz (measured: firmware did not answer GET_CLOCK_RATE_MEASURED (0x00030047); max 700 MHz)"), "{out}");
    // Without a device tree the board revision names the EMMC2 window (b03115: rev 1.5, C0).
    assert!(
        line_with(out, "sdhci at 0xfe340000:")
            .ends_with("dma-offset 0x0 (board revision 0xb03115: C0 stepping)"),
        "{out}"
    );
    let emmc2_at = out.find("sdhci at 0xfe340000: BCM2711 EMMC2").expect(out);
    let arasan_at = out.find("sdhci at 0xfe300000: Arasan EMMC").expect(out);
    assert!(emmc2_at < arasan_at);
    assert!(
        line_with(out, "sd0        capacity").contains("8589934592 bytes (8.00 GiB), CSD 2.0, SDHC"),
        "{out}"
    );
    assert!(
        line_with(out, "sd1        capacity").contains("2147483648 bytes (2.00 GiB), CSD 1.0, SDSC"),
        "{out}"
    );
    assert!(line_with(out, "sd0        mode").contains("PIO"), "{out}");
    assert_checks(out, "sd0", &emmc2, &sdhc_ranges, 2);
    assert_checks(out, "sd1", &arasan, &sdsc_ranges, 2);
    report_timing(out, "raspi4b EMMC2 PIO", "sd0");
    report_timing(out, "raspi4b Arasan PIO", "sd1");
}

/// Debian's `bcm2711-rpi-4-b.dtb` from the download cache the card-image code keeps (the image
/// tests and `barebench image` fill it; nothing is downloaded when it is complete).
fn debian_pi4_device_tree() -> Vec<u8> {
    use tools::image::firmware::DebianFetch;
    let cache = DebianFetch::default_cache_dir();
    let set = DebianFetch::new(cache.clone()).fetch(&mut |_| {}).unwrap_or_else(|error| {
        panic!(
            "Debian's device trees are not in {} and could not be fetched ({error}); run \
             `cargo test -p tools --features e2e --test e2e image_e2e::` (or `barebench image`) once with network access",
            cache.display()
        )
    });
    let file = set.files.iter().find(|file| file.path == "bcm2711-rpi-4-b.dtb");
    file.unwrap_or_else(|| panic!("{} has no bcm2711-rpi-4-b.dtb", set.origin)).bytes.clone()
}

#[test]
fn raspi4b_emmc2_dma_offset_comes_from_debians_device_tree_as_b0_and_as_c0() {
    use kernel::devicetree::builder::{with_property_value, EMMC2_C0_DMA_RANGES};
    let shipped = debian_pi4_device_tree();
    // A C0 board's firmware rewrites emmc2bus dma-ranges to the identity below 0xFC00_0000.
    let c0 = with_property_value(&shipped, "/emmc2bus", "dma-ranges", &EMMC2_C0_DMA_RANGES)
        .expect("Debian's bcm2711-rpi-4-b.dtb has an emmc2bus node with a 5-cell dma-ranges");
    let blocks = (8u64 << 30) / SECTOR;
    let ranges: Vec<(u64, u64)> = ranges(blocks, 9).into_iter().take(8).collect();
    let image = Image::new("sd-raspi4b-dtb", 8 << 30, &ranges);
    for (tree, offset) in [(&shipped, "dma-offset 0xc0000000"), (&c0, "dma-offset 0x0")] {
        let run = Run::new(Machine::Raspi4b)
            .device_tree(tree)
            .append(&format!("exit=semihosting jobs=none {}", checks("sd0", &ranges, 3)))
            .args(&["-drive", &format!("if=none,id=e2,{}", image.drive())])
            .args(&["-device", "sd-card,drive=e2,bus=/generic-sdhci/sd-bus"])
            .go();
        run.assert_status(0);
        let out = &run.output;
        line_with(out, "config     device tree at ");
        let emmc2 = line_with(out, "sdhci at 0xfe340000:");
        assert!(emmc2.ends_with(&format!("{offset} (device tree dma-ranges)")), "{emmc2}");
        assert_checks(out, "sd0", &image, &ranges, 3);
    }
}

#[test]
fn virt_sdhci_pci_reads_an_sdhc_card_by_adma2() {
    let blocks = (4u64 << 30) / SECTOR;
    let ranges = ranges(blocks, 5);
    let image = Image::new("sd-virt-adma", 4 << 30, &ranges);
    let run = Run::new(Machine::Virt)
        .append(&format!("exit=semihosting jobs=none {}", checks("sd0", &ranges, 5)))
        .args(&["-drive", &format!("if=none,id=sdc,{}", image.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(line_with(out, "sdhci at ").contains("SDHCI on PCI (PCI), dma-offset 0x0"), "{out}");
    line_with(out, "sdhci        SDHCI 3.00, caps 0x057834b4/0x00000000: ");
    assert!(
        line_with(out, "sd0        capacity").contains("4294967296 bytes (4.00 GiB), CSD 2.0, SDHC"),
        "{out}"
    );
    let mode = line_with(out, "sd0        mode");
    assert!(
        mode.contains("ADMA2 (32-bit) with 64 KiB per descriptor") && mode.contains("auto-CMD12"),
        "{mode}"
    );
    assert_checks(out, "sd0", &image, &ranges, 5);
    report_timing(out, "virt ADMA2", "sd0");
    // ADMA2 with CMD23 announcing the count (QEMU's v3 card accepts it: docs/qemu.md §2).
    let some = &ranges[1..5];
    let run = Run::new(Machine::Virt)
        .append(&format!("exit=semihosting jobs=none sd.cmd23=on {}", checks("sd0", some, 2)))
        .args(&["-drive", &format!("if=none,id=sdc,{}", image.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .go();
    run.assert_status(0);
    let mode = line_with(&run.output, "sd0        mode");
    assert!(mode.contains("ADMA2 (32-bit)") && mode.contains("end by CMD23"), "{mode}");
    assert_checks(&run.output, "sd0", &image, some, 2);
}

#[test]
fn a_benchmark_job_on_sd_says_how_its_data_moved() {
    let image = Image::new("sd-virt-job", 64 * MIB, &[(0, 64 * MIB / SECTOR)]);
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting jobs=read:64k:1 runs=1 ramp=0 runtime=300ms offset=0 size=16m progress=off")
        .args(&["-drive", &format!("if=none,id=sdc,{}", image.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    // Every 64 KiB request is one command whose data moved by ADMA2; none fell back to PIO.
    let path = line_with(out, "sd0      data path: ");
    assert!(path.starts_with("sd0      data path: ADMA2 (32-bit), "), "{path}");
    assert!(path.ends_with(" commands, 0 by PIO instead"), "{path}");
    assert!(!out.contains("by PIO, not"), "{out}");
    let json = bench::fio_json::extract_json_from_log(out).expect("the JSON block");
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let job = &value["jobs"][0]["barebench"];
    assert_eq!(job["data_path"]["mode"], "ADMA2 (32-bit)");
    assert_eq!(job["data_path"]["pio_fallbacks"], 0);
    assert!(job["data_path"]["commands"].as_u64().unwrap() > 0, "{job}");
}

#[test]
fn virt_sdhci_pci_with_forced_pio_cmd23_and_default_speed() {
    let blocks = (4u64 << 30) / SECTOR;
    let ranges = ranges(blocks, 6);
    let image = Image::new("sd-virt-pio", 4 << 30, &ranges);
    let run = Run::new(Machine::Virt)
        .append(&format!(
            "exit=semihosting jobs=none sd.mode=pio sd.cmd23=on sd.speed=default {}",
            checks("sd0", &ranges, 5)
        ))
        .args(&["-drive", &format!("if=none,id=sdc,{}", image.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    let mode = line_with(out, "sd0        mode");
    assert!(mode.contains(", PIO,") && mode.contains("end by CMD23"), "{mode}");
    // sd.speed=default keeps Default Speed: 25 MHz at most from the 52 MHz base, i.e. 13 MHz.
    assert!(mode.contains("13000000 Hz, Default Speed (DS)"), "{mode}");
    assert_checks(out, "sd0", &image, &ranges, 5);
    report_timing(out, "virt PIO", "sd0");
}

#[test]
fn a_read_beyond_the_end_is_refused_with_a_message() {
    let blocks = (64 * MIB) / SECTOR;
    let image = Image::new("sd-beyond", 64 * MIB, &[(blocks - 1, 1)]);
    let run = Run::new(Machine::Raspi3b)
        .append(&format!(
            "exit=semihosting jobs=none crc=sd0:{blocks}:1 crc=sd0:{}:2 crc=sd0:{}:1",
            blocks - 1,
            blocks - 1
        ))
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    // A failed check is exit status 2; the in-range check still ran.
    run.assert_status(2);
    let out = &run.output;
    assert!(
        out.contains(&format!("crc sd0 {blocks} 1: range is beyond the end of the device ({blocks} blocks)")),
        "{out}"
    );
    assert!(out.contains(&format!("crc sd0 {} 2: range is beyond the end", blocks - 1)), "{out}");
    let expected = format!("crc sd0 {} 1 {:#010x}", blocks - 1, image.crc(blocks - 1, 1));
    assert!(out.lines().any(|line| line == expected), "{out}");
}

#[test]
fn empty_slots_are_reported_and_the_run_goes_on() {
    // raspi without -drive: QEMU attaches a card without medium (docs/qemu.md §2).
    let run = Run::new(Machine::Raspi3b).append("exit=semihosting jobs=none sd.mode=bogus").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.lines().any(|line| line == "sdhost at 0x3f202000: no card"), "{out}");
    assert!(!out.contains("sd0 "), "{out}");
    assert!(out.contains("warning: bad setting sd.mode=bogus: expected sd.mode=auto|pio|adma2"), "{out}");
    assert!(out.contains("storage    no usable devices found"), "{out}");
    // raspi4b with only the if=sd card: EMMC2 is empty and unnamed, the Arasan card is sd0.
    let image = Image::new("sd-raspi4b-only-arasan", 64 * MIB, &[(0, 8)]);
    let run = Run::new(Machine::Raspi4b)
        .append("exit=semihosting jobs=none crc=sd0:0:8")
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.lines().any(|line| line == "sdhci at 0xfe340000: no card"), "{out}");
    assert!(line_with(out, "sd0        capacity").contains("67108864 bytes"), "{out}");
    assert!(out.lines().any(|line| line == format!("crc sd0 0 8 {:#010x}", image.crc(0, 8))), "{out}");
    // sdhci-pci on virt with no card behind it.
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting jobs=none")
        .args(&["-device", "sdhci-pci,sd-spec-version=3"])
        .go();
    run.assert_status(0);
    assert!(
        run.output.lines().any(|line| line.starts_with("sdhci at ") && line.ends_with(": no card")),
        "{}",
        run.output
    );
}
