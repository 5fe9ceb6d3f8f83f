//! The barriers the built kernels really contain on the NVMe paths (Arm ARM DDI 0487 C6.2 DMB,
//! DSB; docs/nvme-and-fio.md §1.8): `dmb oshst` before doorbells, `dmb oshld` after the phase
//! bit, and no DSB except the one that completes a cache-maintenance loop (`dc cvac`/`dc civac`
//! by line) for memory outside the non-cacheable DMA pool. Host tests see the driver's barrier
//! calls in order, but not which instructions they and the kernel's platform become; this reads
//! `build/kernel-virt.elf` and `build/kernel8.elf` (built by `make`) with `llvm-objdump`.
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
            functions.push(Function { name: name.to_string(), instructions: Vec::new() });
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
