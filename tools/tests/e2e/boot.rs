//! End-to-end: boot the real kernel images under QEMU raspi3b, raspi4b and virt, and check the
//! banner against what each machine is (docs/qemu.md §1), the exit status, the exception report and
//! the handling of a malformed command line.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{Machine, Run};

fn field<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name).map(str::trim))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{output}"))
}

#[test]
fn raspi3b_banner_describes_a_pi3() {
    let run = Run::new(Machine::Raspi3b).append("exit=semihosting jobs=none").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(
        out.lines().find(|l| !l.trim().is_empty()).unwrap().starts_with("barebench "),
        "banner first:\n{out}"
    );
    assert!(field(out, "board").starts_with("Raspberry Pi 3 Model B (revision 0xa02082)"), "{out}");
    assert_eq!(field(out, "soc"), "BCM2837");
    assert!(field(out, "cpu").starts_with("Cortex-A53 r0p4 (MIDR 0x410fd034), 4 cores"), "{out}");
    assert!(field(out, "timer").starts_with("62.500 MHz"), "{out}");
    assert_eq!(field(out, "entry"), "EL2");
    assert_eq!(field(out, "config"), "ATAGS at 0x100 (no device tree)");
    assert_eq!(field(out, "cmdline"), "\"exit=semihosting jobs=none\"");
    assert!(field(out, "ram").starts_with("960 MiB"), "{out}");
    assert!(field(out, "memory").starts_with("MMU on"), "{out}");
}

#[test]
fn raspi4b_banner_describes_a_pi4() {
    let run = Run::new(Machine::Raspi4b).append("exit=semihosting").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(field(out, "board").starts_with("Raspberry Pi 4 Model B (revision 0xb03115)"), "{out}");
    assert_eq!(field(out, "soc"), "BCM2711");
    assert!(field(out, "cpu").starts_with("Cortex-A72 r0p3 (MIDR 0x410fd083), 4 cores"), "{out}");
    assert!(field(out, "timer").starts_with("62.500 MHz"), "{out}");
    assert_eq!(field(out, "entry"), "EL2");
}

#[test]
fn raspi4b_with_a_device_tree_takes_model_memory_and_command_line_from_it() {
    let blob = kernel::devicetree::builder::pi4_like("placeholder");
    let run = Run::new(Machine::Raspi4b).append("exit=semihosting from-dtb=yes").device_tree(&blob).go();
    run.assert_status(0);
    let out = &run.output;
    // QEMU puts the tree at 0x0800_0000 and replaces /chosen/bootargs with -append (docs/qemu.md §1).
    assert!(field(out, "config").starts_with("device tree at 0x8000000"), "{out}");
    assert!(field(out, "board").starts_with("Raspberry Pi 4 Model B Rev 1.5"), "{out}");
    // QEMU also rewrites /memory with the machine's RAM (hw/arm/boot.c), so this is its value.
    assert!(field(out, "ram").starts_with("960 MiB [0x0-0x3c000000]"), "{out}");
    assert_eq!(field(out, "cmdline"), "\"exit=semihosting from-dtb=yes\"");
}

#[test]
fn raspi3b_elf_starts_at_el3_on_every_core_and_asks_the_firmware() {
    let run = Run::new(Machine::Raspi3b).elf().append("exit=semihosting via=mailbox").go();
    run.assert_status(0);
    let out = &run.output;
    assert_eq!(field(out, "entry"), "EL3");
    assert!(field(out, "config").starts_with("board table and VideoCore mailbox"), "{out}");
    // The command line reaches an ELF kernel only through the mailbox (docs/qemu.md §1).
    assert_eq!(field(out, "cmdline"), "\"exit=semihosting via=mailbox\"");
    assert_eq!(
        out.matches(": bare-metal storage benchmark").count(),
        1,
        "only core 0 runs the kernel:\n{out}"
    );
}

#[test]
fn virt_banner_reads_the_device_tree() {
    let run = Run::new(Machine::Virt).cpu("cortex-a53").smp(2).append("exit=semihosting").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(field(out, "config").starts_with("device tree at 0x48000000"), "{out}");
    assert!(field(out, "cpu").starts_with("Cortex-A53 r0p4 (MIDR 0x410fd034), 2 cores"), "{out}");
    assert!(field(out, "ram").starts_with("1024 MiB [0x40000000-0x80000000]"), "{out}");
    assert_eq!(field(out, "entry"), "EL1");
    assert_eq!(field(out, "compatible"), "linux,dummy-virt");
}

#[test]
fn virt_timer_frequency_is_read_at_run_time() {
    // QEMU gives `-cpu max` a 1 GHz counter and other models 62.5 MHz (docs/qemu.md §1).
    let run = Run::new(Machine::Virt).cpu("max").append("exit=semihosting").go();
    run.assert_status(0);
    assert!(field(&run.output, "timer").starts_with("1000.000 MHz"), "{}", run.output);
}

#[test]
fn virt_can_power_off_through_psci() {
    let run = Run::new(Machine::Virt).append("exit=psci").go();
    run.assert_status(0);
    assert!(run.output.contains("powering off"), "{}", run.output);
}

#[test]
fn data_abort_is_reported_and_exits_non_zero() {
    let run = Run::new(Machine::Virt).append("exit=semihosting test-fault=data-abort").go();
    run.assert_status(3);
    let out = &run.output;
    assert!(out.contains("*** EXCEPTION: synchronous exception from current EL with SP_ELx"), "{out}");
    assert!(out.contains("EC 0x25: data abort without a change of EL (translation fault, read)"), "{out}");
    assert!(out.contains("FAR    0x0000700000000000"), "{out}");
    for register in ["ESR ", "ELR ", "SPSR "] {
        assert!(out.contains(register), "{register} missing:\n{out}");
    }
}

#[test]
fn undefined_instruction_on_a_pi_is_reported() {
    let run = Run::new(Machine::Raspi3b).append("exit=semihosting test-fault=undefined-instruction").go();
    run.assert_status(3);
    assert!(run.output.contains("EC 0x00: unknown reason"), "{}", run.output);
}

#[test]
fn panic_is_reported_with_its_own_status() {
    let run = Run::new(Machine::Raspi4b).append("exit=semihosting test-fault=panic").go();
    run.assert_status(4);
    assert!(run.output.contains("*** PANIC"), "{}", run.output);
    assert!(run.output.contains("test-fault=panic asked for a panic"), "{}", run.output);
}

#[test]
fn malformed_command_line_names_each_bad_setting_and_carries_on() {
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting frobnicate=1 test-fault=sideways lonely crc=sd0:12 runtime=ten coherent_pool=1M 8250.nr_uarts=1")
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("unknown setting frobnicate=1; accepted keys: jobs, ramp"), "{out}");
    assert!(out.contains("bad setting runtime=ten: expected"), "{out}");
    assert!(
        out.contains(
            "bad setting test-fault=sideways: expected data-abort, undefined-instruction, panic or throttled"
        ),
        "{out}"
    );
    assert!(out.contains("bad setting lonely: expected key=value"), "{out}");
    assert!(out.contains("bad setting crc=sd0:12: expected DEV:LBA:COUNT"), "{out}");
    assert!(out.contains("2 firmware/Linux settings ignored"), "{out}");
    assert!(out.contains("benchmark  no devices to measure; not run"), "the run went on:\n{out}");
}

#[test]
fn an_unknown_board_is_named_by_its_midr_and_nothing_is_touched() {
    // A device tree that names no board we know, on a core we do not know (Neoverse-N1): the
    // kernel must say so on the PL011 the tree names and stop with status 5.
    let mut tree = kernel::devicetree::builder::Builder::new();
    tree.begin("")
        .cells("#address-cells", &[2])
        .cells("#size-cells", &[2])
        .strings("compatible", &["acme,toaster"]);
    tree.begin("chosen").string("bootargs", "").end();
    tree.begin("memory@40000000")
        .string("device_type", "memory")
        .cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
        .end();
    tree.begin("pl011@9000000")
        .strings("compatible", &["arm,pl011", "arm,primecell"])
        .cells("reg", &[0, 0x0900_0000, 0, 0x1000])
        .end();
    tree.end();
    let run = Run::new(Machine::Virt)
        .cpu("neoverse-n1")
        .device_tree(&tree.finish())
        .append("exit=semihosting")
        .go();
    run.assert_status(5);
    assert!(run.output.contains("unknown board (MIDR 0x414fd0c1"), "{}", run.output);
    assert!(run.output.contains("\"acme,toaster\""), "{}", run.output);
    assert!(run.output.contains("stopping without touching any device"), "{}", run.output);
}

#[test]
fn a_long_command_line_reaches_the_kernel_whole_on_raspi() {
    // QEMU's ATAGS copy of a line this long runs into its secondary-core stub at 0x300; the kernel
    // must still see every setting (it asks the mailbox).
    let filler: Vec<String> = (0..100).map(|i| format!("module.filler{i}=1")).collect();
    let line = format!("exit=semihosting jobs=none {} runs=7", filler.join(" "));
    assert!(line.len() > 1000);
    let run = Run::new(Machine::Raspi3b).append(&line).go();
    run.assert_status(0);
    assert!(field(&run.output, "cmdline").ends_with("runs=7\""), "{}", run.output);
}
