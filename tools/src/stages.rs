//! What the kernel's `stage: <step>` markers mean, for a log that stops before the results
//! (`barebench serial`, `barebench report`): the last step begun and what to check. The same
//! table is in docs/hardware.md §4.8 (a test keeps the two equal).
#![forbid(unsafe_code)]

/// One step the kernel marks before it begins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageAdvice {
    /// The marker without device numbers and details: `pcie bring-up` for `stage: pcie1 bring-up`.
    pub stage: &'static str,
    /// What the kernel does in this step.
    pub step: &'static str,
    /// What to check when the log ends here (settings that exist in this kernel only).
    pub check: &'static str,
}

/// Every step the kernel marks, in the order it reaches them.
pub const STAGES: &[StageAdvice] = &[
    StageAdvice {
        stage: "header console check",
        step: "reads pcie2's reset state, then its link state (Pi 5), before using the header pins' UART",
        check: "nothing of pcie2 is read while it is in reset; with `--pi5-console header`, that config.txt has `pciex4_reset=0` and `enable_rp1_uart=1`",
    },
    StageAdvice {
        stage: "memory map",
        step: "builds the translation tables and turns the MMU and caches on",
        check: "the kernel file for this board (kernel8.img or kernel_2712.img for 64-bit Pis, kernel.img or kernel7.img for 32-bit ones) and the RAM the banner reports",
    },
    StageAdvice {
        stage: "pcie bring-up",
        step: "resets the PCIe root complex (pcie0 on a Pi 4, pcie1 on a Pi 5), trains the link and walks the bus",
        check: "the adapter's cable, the drive's seating and its power (Pi 5: an M.2 HAT+, or `PCIE_PROBE=1` in the EEPROM for other adapters); `pcie.gen=1` for a marginal link, `pcie.perst-ms=` for a slow drive, `pcie=off` to run without PCIe",
    },
    StageAdvice {
        stage: "pci enumeration",
        step: "walks the generic PCIe host's ECAM (QEMU virt)",
        check: "the `-device` options of the QEMU command line",
    },
    StageAdvice {
        stage: "sd bring-up",
        step: "powers the SD card and brings it up, from CMD0 to its bus width and speed",
        check: "the card's seating and the power supply; `sd.speed=default` (no high speed or UHS), `sd.mode=pio` (no DMA), `sd.max-clock-hz=`, on a Pi 1-3 `sd.host=sdhost` or `sd.host=arasan`",
    },
    StageAdvice {
        stage: "nvme bring-up",
        step: "enables an NVMe controller, identifies it and sets up its queues",
        check: "`nvme.timeout-ms=` for a slow controller, `nvme.selftest=off` and `nvme.measure=off` to skip its extra reads, `pcie=off` to run without it",
    },
    StageAdvice {
        stage: "usb bring-up",
        step: "resets an xHCI, powers its ports and attaches their drives",
        check: "a powered hub or a 5 A supply for bus-powered drives; `usb.protocol=bot` for a UAS drive that misbehaves; on a Pi 5, `usb.rp1=off`",
    },
    StageAdvice {
        stage: "scratch scan",
        step: "reads each device's partition table for a marked scratch region",
        check: "the device's first blocks; `devices=` to leave a device out",
    },
    StageAdvice {
        stage: "region sampling",
        step: "reads a few blocks spread over each device's region",
        check: "`offset=` and `size=` inside the device; `devices=` to leave a device out",
    },
    StageAdvice {
        stage: "benchmark",
        step: "runs the jobs",
        check: "the power supply and the cooling (throttling; `cooldown=`), a device that stopped answering (its driver's timeout)",
    },
    StageAdvice {
        stage: "shutdown",
        step: "shuts the devices down after the runs",
        check: "the results were printed before this step: the log was cut after them",
    },
];

/// The table key of a marker's text: details in parentheses dropped, device numbers removed
/// from the first word (`pcie1 bring-up` → `pcie bring-up`).
pub fn stage_key(step: &str) -> String {
    let step = step.split(" (").next().unwrap_or(step).trim();
    match step.split_once(' ') {
        Some((first, rest)) => format!("{} {rest}", first.trim_end_matches(|c: char| c.is_ascii_digit())),
        None => step.trim_end_matches(|c: char| c.is_ascii_digit()).to_string(),
    }
}

/// The text of the last `stage:` marker in a log.
pub fn last_stage(log: &str) -> Option<&str> {
    log.lines().rev().flat_map(|line| line.rsplit('\r')).find_map(|line| line.trim().strip_prefix("stage: "))
}

/// For a log without results: the last step begun, what it does and what to check.
pub fn explain(log: &str) -> Option<String> {
    let step = last_stage(log)?;
    let key = stage_key(step);
    Some(match STAGES.iter().find(|advice| advice.stage == key) {
        Some(advice) => format!(
            "the log ends in `stage: {step}` (the kernel {}); check {} (docs/hardware.md §4.8)",
            advice.step, advice.check
        ),
        None => format!("the log ends in `stage: {step}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_map_to_their_advice() {
        assert_eq!(stage_key("pcie1 bring-up"), "pcie bring-up");
        assert_eq!(stage_key("sd bring-up (sdhci at 0xfe340000)"), "sd bring-up");
        assert_eq!(stage_key("nvme bring-up (01:00.0)"), "nvme bring-up");
        assert_eq!(stage_key("benchmark"), "benchmark");
        let log = "barebench 0.1.0\r\nstage: memory map\r\nmemory MMU on\r\nstage: pcie1 bring-up\r\npcie1 link training\r\n";
        assert_eq!(last_stage(log), Some("pcie1 bring-up"));
        let explained = explain(log).unwrap();
        assert!(
            explained.starts_with(
                "the log ends in `stage: pcie1 bring-up` (the kernel resets the PCIe root complex"
            ),
            "{explained}"
        );
        assert!(explained.contains("`pcie=off`"), "{explained}");
        assert_eq!(explain("no markers here"), None);
        assert_eq!(explain("stage: something new\n").unwrap(), "the log ends in `stage: something new`");
    }

    #[test]
    fn the_table_in_the_hardware_notes_is_this_one() {
        let notes = include_str!("../../docs/hardware.md");
        let section = notes.split("### 4.8 ").nth(1).expect("docs/hardware.md §4.8");
        let rows: Vec<Vec<String>> = section
            .lines()
            .take_while(|line| !line.starts_with("## "))
            .filter(|line| line.starts_with("| `"))
            .map(|line| line.trim_matches('|').split(" | ").map(|cell| cell.trim().to_string()).collect())
            .collect();
        let code: Vec<Vec<String>> = STAGES
            .iter()
            .map(|advice| {
                vec![format!("`{}`", advice.stage), advice.step.to_string(), advice.check.to_string()]
            })
            .collect();
        assert_eq!(rows, code);
    }

    #[test]
    fn every_key_is_unique() {
        for (index, advice) in STAGES.iter().enumerate() {
            assert!(STAGES[index + 1..].iter().all(|other| other.stage != advice.stage), "{}", advice.stage);
            assert_eq!(stage_key(advice.stage), advice.stage);
        }
    }
}
