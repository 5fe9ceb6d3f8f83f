//! The barriers the built kernels really contain on the NVMe paths (Arm ARM DDI 0487 C6.2 DMB,
//! DSB; docs/nvme-and-fio.md §1.8): `dmb oshst` before doorbells, `dmb oshld` after the phase
//! bit, and no DSB except the one that completes a cache-maintenance loop (`dc cvac`/`dc civac`
//! by line) for memory outside the non-cacheable DMA pool. Host tests see the driver's barrier
//! calls in order, but not which instructions they and the kernel's platform become; this reads
//! `build/kernel-virt.elf` and `build/kernel8.elf` (built by `make`) with `llvm-objdump`.
//!
//! The 32-bit kernel (`build/kernel.elf`) has no DMB/DSB instructions of ARMv7: its barriers are
//! CP15 operations the ARM1176 and the Cortex-A7 share (`mcr p15, 0, rN, c7, c10, 4` = DSB,
//! `c7, c10, 5` = DMB; ARM1176JZF-S TRM §3.2.22). Checked there: the firmware mailbox call is
//! fenced by DSBs of its own (not only the DSB that ends a cache-maintenance loop), the SDHCI
//! ADMA2 doorbell has its DSB, and the sdhost's poll path has DMBs where it moves between the
//! system timer and the controller (BCM2835 ARM Peripherals §1.3).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::path::Path;
use std::process::Command;

/// Instructions a DSB may follow its cache-maintenance instruction by (the loop's add, compare
/// and branch, and a reload).
const MAINTENANCE_LOOP_INSTRUCTIONS: usize = 6;

struct Function {
    name: String,
    instructions: Vec<String>,
}

fn disassemble(image: &str) -> Vec<Function> {
    let elf = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("build").join(image);
    assert!(elf.exists(), "{} is missing: run `make kernel` first", elf.display());
    let output = Command::new("llvm-objdump")
        .args(["-d", "--no-show-raw-insn", "-C"])
        .arg(&elf)
        .output()
        .unwrap_or_else(|error| panic!("llvm-objdump could not run ({error}): install llvm (`make deps`)"));
    assert!(output.status.success(), "llvm-objdump failed: {}", String::from_utf8_lossy(&output.stderr));
    let mut functions: Vec<Function> = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if let Some(name) =
            line.strip_suffix(">:").and_then(|head| head.split_once(" <")).map(|(_, name)| name)
        {
            // ARM mapping symbols ($a code, $d data, $t Thumb) mark ranges inside a function.
            if !name.starts_with('$') {
                functions.push(Function { name: name.to_string(), instructions: Vec::new() });
            }
        } else if let (Some(function), Some((address, instruction))) =
            (functions.last_mut(), line.split_once(':'))
        {
            let address = address.trim();
            if !address.is_empty() && address.chars().all(|c| c.is_ascii_hexdigit()) {
                function.instructions.push(instruction.split_whitespace().collect::<Vec<_>>().join(" "));
            }
        }
    }
    functions
}

fn nvme_functions(functions: &[Function]) -> Vec<&Function> {
    functions.iter().filter(|function| function.name.contains("nvme")).collect()
}

/// DSBs that do not complete a cache-maintenance loop: `(function, index)`.
fn bare_dsbs<'a>(functions: &[&'a Function]) -> Vec<(&'a str, usize)> {
    let mut bare = Vec::new();
    for function in functions {
        let mut since_maintenance = usize::MAX;
        for (index, instruction) in function.instructions.iter().enumerate() {
            if instruction.starts_with("dc ") {
                since_maintenance = 0;
            } else if instruction.starts_with("dsb ") {
                if since_maintenance > MAINTENANCE_LOOP_INSTRUCTIONS {
                    bare.push((function.name.as_str(), index));
                }
                since_maintenance = usize::MAX;
            } else {
                since_maintenance = since_maintenance.saturating_add(1);
            }
        }
    }
    bare
}

fn count(functions: &[&Function], instruction: &str) -> usize {
    functions
        .iter()
        .flat_map(|function| &function.instructions)
        .filter(|line| line.as_str() == instruction)
        .count()
}

fn check(image: &str) {
    let functions = disassemble(image);
    let nvme = nvme_functions(&functions);
    assert!(nvme.len() > 5, "{image}: NVMe driver functions not found");
    assert!(count(&nvme, "dmb oshst") > 0, "{image}: no `dmb oshst` before an NVMe doorbell");
    assert!(count(&nvme, "dmb oshld") >= 2, "{image}: no `dmb oshld` after the phase and before the CQ head");
    assert_eq!(bare_dsbs(&nvme), [], "{image}: DSBs on the NVMe paths that complete no cache maintenance");
}

#[test]
fn nvme_paths_use_dmb_and_no_bare_dsb_on_virt() {
    check("kernel-virt.elf");
}

#[test]
fn nvme_paths_use_dmb_and_no_bare_dsb_on_the_pi_image() {
    check("kernel8.elf");
}

/// The CP15 barrier operations of the 32-bit kernel, and the cache maintenance by address a DSB
/// completes (c7, c10, 1 clean; c7, c14, 1 clean and invalidate; c7, c6, 1 invalidate).
const CP15_DSB: &str = "c7, c10, #4";
const CP15_DMB: &str = "c7, c10, #5";
const CP15_MAINTENANCE: [&str; 3] = ["c7, c10, #1", "c7, c14, #1", "c7, c6, #1"];

fn is_cp15(instruction: &str, operation: &str) -> bool {
    instruction.starts_with("mcr p15, #0,") && instruction.ends_with(operation)
}

/// CP15 DSBs of a 32-bit function that complete no cache-maintenance loop.
fn bare_cp15_dsbs(function: &Function) -> usize {
    let mut since_maintenance = usize::MAX;
    let mut bare = 0;
    for instruction in &function.instructions {
        if CP15_MAINTENANCE.iter().any(|operation| is_cp15(instruction, operation)) {
            since_maintenance = 0;
        } else if is_cp15(instruction, CP15_DSB) {
            if since_maintenance > MAINTENANCE_LOOP_INSTRUCTIONS {
                bare += 1;
            }
            since_maintenance = usize::MAX;
        } else {
            since_maintenance = since_maintenance.saturating_add(1);
        }
    }
    bare
}

fn cp15_count(function: &Function, operation: &str) -> usize {
    function.instructions.iter().filter(|instruction| is_cp15(instruction, operation)).count()
}

fn functions_named<'a>(functions: &'a [Function], part: &str) -> Vec<&'a Function> {
    functions.iter().filter(|function| function.name.contains(part)).collect()
}

#[test]
fn the_32_bit_kernel_keeps_its_cp15_barriers() {
    let functions = disassemble("kernel.elf");
    // The mailbox call: a DSB before the request and after the answer (`barrier::full`).
    let property = functions_named(&functions, "kernel::runtime::firmware::Firmware>::property");
    assert!(!property.is_empty(), "Firmware::property not found in kernel.elf");
    let bare: usize = property.iter().map(|function| bare_cp15_dsbs(function)).sum();
    assert!(bare >= 2, "Firmware::property: {bare} DSBs of its own, expected the mailbox's two");
    // The ADMA2 doorbell (`barrier::store_before_doorbell`).
    let doorbell = functions_named(
        &functions,
        "SdCard<hal::mmio::Mmio, kernel::runtime::platform::KernelPlatform>>::issue_data_command",
    );
    assert!(!doorbell.is_empty(), "SdCard::issue_data_command not found in kernel.elf");
    assert!(doorbell.iter().any(|function| bare_cp15_dsbs(function) >= 1), "no DSB before the ADMA2 command");
    // The kernel's clock on the ARM1176 is the system timer, read by every deadline of the
    // sdhost's poll between FIFO reads: fenced by DMBs on both sides
    // (`barrier::between_peripherals` in `SystemTimer::ticks`).
    let clock =
        functions_named(&functions, "<kernel::runtime::timer::KernelTimer as blockdev::Clock>::now_ticks");
    assert!(!clock.is_empty(), "KernelTimer::now_ticks not found in kernel.elf");
    let dmbs: usize = clock.iter().map(|function| cp15_count(function, CP15_DMB)).sum();
    assert!(
        dmbs >= 2,
        "KernelTimer::now_ticks: {dmbs} DMBs around the system timer's reads, expected 2 or more"
    );
}
