//! End-to-end: the conditions of a run under QEMU raspi3b and raspi4b, whose firmware model
//! answers GET_TEMPERATURE 25.0 °C, GET_MAX_TEMPERATURE 99.0 °C and GET_THROTTLED 0 and leaves
//! GET_CLOCK_RATE_MEASURED unanswered (docs/qemu.md §8): `throttle=fail` on a machine made to
//! look throttled (`test-fault=throttled`) ending with exit status 2, flagged on the console, in
//! the JSON and in `barebench report`'s Throttled column; the activity LED's stage and error
//! patterns in guest time under `-icount` (`led=trace`), with QEMU showing the line move (the
//! mailbox trace on raspi3b, GPLEV1 through the monitor on raspi4b); and a log cut after a stage
//! marker explained by `barebench report`. The calm
//! machine's sentence, JSON keys and report column are checked on the raspi4b benchmark run
//! (`benchmark.rs`).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::qemu_harness::{
    monitor_socket, report_markdown, sample_register_bit, scratch_dir, Machine, Run, TestImage,
};
use bench::fio_json::extract_json_from_log;
use drivers::activity_led::{decode, Signal};

/// Two short runs of one job (about 1 s of benchmark).
const SHORT: &str = "jobs=randread:4k:1 ramp=100ms runtime=200ms runs=2 offset=0 size=4m progress=off";

fn json_of(output: &str) -> serde_json::Value {
    let json = extract_json_from_log(output).unwrap_or_else(|e| panic!("{e:?} in:\n{output}"));
    serde_json::from_str(&json).unwrap()
}

#[test]
fn raspi3b_throttled_with_throttle_fail_ends_with_status_2_and_a_log_cut_is_explained() {
    let image = TestImage::full("conditions-raspi3b", 16 << 20);
    let run = Run::new(Machine::Raspi3b)
        .append(&format!("exit=semihosting test-fault=throttled throttle=fail {SHORT}"))
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    run.assert_status(2);
    let out = &run.output;
    assert!(out.contains("warning: the firmware reports under-voltage now, throttled now, under-voltage occurred, throttling occurred before the first job (since boot)"), "{out}");
    assert!(
        out.contains("warning: sd0 run 2/2 of randread:4k:1: the firmware reports under-voltage now"),
        "{out}"
    );
    assert!(out.contains("sd0      randread:4k:1        run 1 ran throttled: "), "{out}");
    assert!(out.contains("conditions: throttling flags before the tests: under-voltage now, throttled now, under-voltage occurred, throttling occurred (since boot); 2 of 2 runs ran throttled"), "{out}");
    assert!(
        out.contains(
            "throttle=fail: the SoC was throttled or under-voltage during the benchmark; exit status 2"
        ),
        "{out}"
    );
    let value = json_of(out);
    assert_eq!(value["barebench"]["conditions"]["throttled_runs"], 2);
    assert_eq!(value["barebench"]["conditions"]["throttle"], "fail");
    assert_eq!(value["barebench medians"][0]["throttled_runs"], 2);
    assert_eq!(
        value["jobs"][0]["barebench"]["conditions"]["after"]["throttle_flags"][0],
        "under_voltage_now"
    );
    let (markdown, _) = report_markdown("conditions-raspi3b", out);
    assert!(markdown.contains("| **yes** (2 of 2 runs) |"), "{markdown}");
    // The same log cut just after the SD host's marker, as a board that hung there would leave it.
    let marker = "stage: sd bring-up (sdhost at 0x3f202000)";
    let cut = &out[..out.find(marker).expect(out) + marker.len() + 1];
    let (_, problems) = report_markdown("conditions-cut", cut);
    assert!(
        problems.iter().any(|p| p.starts_with(
            "the log ends in `stage: sd bring-up (sdhost at 0x3f202000)` (the kernel powers the SD card"
        )),
        "{problems:?}"
    );
    assert!(problems.iter().any(|p| p.contains("`sd.mode=pio`")), "{problems:?}");
}

/// How many SET_GPIO_STATE calls QEMU's mailbox trace shows: the first puts the LED out, then
/// one per change (the driver writes only changes).
fn expander_writes(trace: &str) -> usize {
    trace
        .lines()
        .filter(|line| line.contains("bcm2835_mbox_property") && line.contains("tag:0x00038041"))
        .count()
}

/// The LED's changes `(ms, lit)` as the kernel timed them (`led=trace`).
///
/// The patterns are decoded in guest time under `-icount`: QEMU's own timestamps (the trace's
/// `-msg timestamp=on`, the monitor sampler's clock) are the host's, and without `-icount` the
/// guest's clock is the host's too, so a host that deschedules QEMU for 100 ms stretches a
/// 100 ms blink past the 300 ms of a long one (seen at load averages of 9 to 11). Under
/// `-icount` the guest's clock counts its instructions, and the delays between the changes are
/// exact whatever the host's load. QEMU's side still checks that the line really
/// moves: the expander's mailbox calls, the GPIO level through the monitor.
fn guest_led_changes(output: &str) -> Vec<(u64, bool)> {
    let line = output
        .lines()
        .find_map(|line| line.strip_prefix("led        trace (ms on the kernel's timer, 1 lit, 0 dark):"))
        .unwrap_or_else(|| panic!("no led=trace line in:\n{output}"));
    line.split_whitespace()
        .map(|change| {
            let (ms, lit) = change.split_once(':').unwrap_or_else(|| panic!("{change:?} in {line:?}"));
            (ms.parse().unwrap(), lit == "1")
        })
        .collect()
}

/// The LED tests run under `-icount shift=4` (16 ns of guest time per instruction, a 62.5 MHz
/// guest: the patterns' 6 s take a few seconds of host time); see [`guest_led_changes`]. With
/// QEMU 10.0.2, `shift=0` stalls raspi3b's boot before the console (not investigated).
const GUEST_CLOCK: [&str; 2] = ["-icount", "shift=4"];

#[test]
fn raspi3b_led_shows_each_stage_reached_through_the_firmware_expander() {
    let image = TestImage::full("led-raspi3b", 16 << 20);
    let trace = scratch_dir().join(format!("led-trace-{}.log", std::process::id()));
    let run = Run::new(Machine::Raspi3b)
        .append("exit=semihosting jobs=none led=trace")
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .args(&GUEST_CLOCK)
        .args(&["-trace", "bcm2835_mbox_property", "-D", &trace.display().to_string()])
        .go();
    run.assert_status(0);
    let log = std::fs::read_to_string(&trace).unwrap_or_default();
    let _ = std::fs::remove_file(&trace);
    let out = &run.output;
    assert!(out.contains("led        activity LED on firmware expander line 130"), "{out}");
    let changes = guest_led_changes(out);
    // Boot, console up, SD card found, benchmark done (no jobs: done at once).
    assert_eq!(
        decode(&changes),
        [Signal::Stage(1), Signal::Stage(2), Signal::Stage(3), Signal::Stage(5)],
        "{changes:?}"
    );
    // A mailbox call per change, after the one that puts the LED out when the kernel takes it.
    assert_eq!(expander_writes(&log), 1 + changes.len(), "{changes:?}\n{log}");
}

#[test]
fn raspi4b_led_shows_the_stages_then_the_exception_code_on_gpio_42() {
    let socket = monitor_socket("led-raspi4b");
    // GPLEV1 (0xfe200038) bit 10 is GPIO 42, the Pi 4's LED (active high).
    let sampler = sample_register_bit(socket.clone(), 0xfe20_0038, 10, Duration::from_secs(60));
    let run = Run::new(Machine::Raspi4b)
        .append("exit=semihosting jobs=none led=trace test-fault=data-abort")
        .args(&GUEST_CLOCK)
        .args(&["-S", "-monitor", &format!("unix:{},server,nowait", socket.display())])
        .go();
    run.assert_status(3);
    let sampled = sampler.join().unwrap();
    let _ = std::fs::remove_file(&socket);
    let changes = guest_led_changes(&run.output);
    assert_eq!(decode(&changes), [Signal::Stage(1), Signal::Stage(2), Signal::Error(3)], "{changes:?}");
    // The line itself moved: the monitor saw GPIO 42 lit and dark again (its host-timed samples
    // may miss a blink on a loaded host, never add one).
    let lit_samples = sampled.iter().filter(|(_, lit)| *lit).count();
    let lit_changes = changes.iter().filter(|(_, lit)| *lit).count();
    assert!(lit_samples >= 1 && lit_samples <= lit_changes, "{sampled:?} against {changes:?}");
}
