//! The runner with a [`ConditionsSource`] (crate::conditions): readings before the first job,
//! after every run and at the end; a run after which the firmware reports throttling is flagged
//! on the console, in its notes, in the summary and in the JSON; `cooldown=` waits before runs;
//! the heartbeat is told inside the window and between runs; the boot times reach the JSON.

use alloc::string::String;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};

use blockdev::testing::SteppingClock;
use blockdev::{BlockDevice, DmaBuffer};

use crate::cmdline::{Config, JobOperation, JobSpec, Preset};
use crate::conditions::{
    BootTimes, ClockSample, ConditionsReading, ConditionsSettings, ConditionsSource, ThrottleFlags,
};
use crate::cpu_cost::NoCpuCounters;
use crate::fio_json::{extract_json_from_log, parse_fio_json};
use crate::plan::tests::nvme_geometry;
use crate::results::{BenchmarkResults, ReportContext};
use crate::run::RunEnvironment;
use crate::runner::run_benchmark;
use crate::sim::{SimBehaviour, SimDevice};

const GHZ: u64 = 1_000_000_000;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// A machine whose throttle word is scripted reading by reading (0 once the script ends) and
/// whose temperature falls 5 °C per `cooldown=` poll from 62 °C.
struct ScriptedMachine {
    throttle_words: RefCell<Vec<u32>>,
    reads: Cell<u32>,
    temperature: Cell<u32>,
    settings: ConditionsSettings,
    heartbeats_in_window: Cell<u32>,
    between_runs: Cell<u32>,
}

impl ScriptedMachine {
    fn new(throttle_words: &[u32], settings: ConditionsSettings) -> Self {
        ScriptedMachine {
            throttle_words: RefCell::new(throttle_words.iter().rev().copied().collect()),
            reads: Cell::new(0),
            temperature: Cell::new(62_000),
            settings,
            heartbeats_in_window: Cell::new(0),
            between_runs: Cell::new(0),
        }
    }
}

impl ConditionsSource for ScriptedMachine {
    fn read(&self, with_clocks: bool) -> ConditionsReading {
        self.reads.set(self.reads.get() + 1);
        let word = self.throttle_words.borrow_mut().pop().unwrap_or(0);
        ConditionsReading {
            throttled: Some(ThrottleFlags(word)),
            temperature_millic: Some(48_500),
            temperature_limit_millic: Some(85_000),
            clocks: if with_clocks {
                alloc::vec![ClockSample {
                    name: "arm",
                    requested_hz: Some(1_500_000_000),
                    measured_hz: Some(1_499_900_000)
                }]
            } else {
                Vec::new()
            },
            not_answered: Vec::new(),
        }
    }
    fn temperature_millic(&self) -> Option<u32> {
        let now = self.temperature.get();
        self.temperature.set(now.saturating_sub(5_000));
        Some(now)
    }
    fn settings(&self) -> ConditionsSettings {
        self.settings
    }
    fn boot(&self) -> Option<BootTimes> {
        Some(BootTimes {
            firmware_counter: "test counter",
            firmware_ns: Some(2_500_000_000),
            entry_ticks: 0,
            banner_ticks: 3 * MS,
            ticks_per_second: GHZ,
            led_ns: 0,
        })
    }
    fn between_runs(&self) {
        self.between_runs.set(self.between_runs.get() + 1);
    }
    fn in_window_heartbeat(&self) {
        self.heartbeats_in_window.set(self.heartbeats_in_window.get() + 1);
    }
}

/// One randread job, two runs of 1.2 s on a simulated NVMe drive.
fn run(machine: &ScriptedMachine) -> (BenchmarkResults, String) {
    let clock = SteppingClock::new(GHZ, 1_000);
    let mut config = Config::for_preset(Preset::Quick);
    config.jobs = alloc::vec![JobSpec::new(JobOperation::RandRead, 4096, 1)];
    (config.ramp_ns, config.runtime_ns, config.runs) = (200 * MS, MS * 1_000, 2);
    (config.offset_bytes, config.size_bytes) = (0, 1 << 20);
    let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 100 * US), &clock);
    let context = ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
    let counters = NoCpuCounters("host test");
    let environment = RunEnvironment {
        clock: &clock,
        cpu_counters: &counters,
        buffer_area: DmaBuffer {
            cpu_address: 0x4000_0000,
            physical_address: 0x4000_0000,
            length_bytes: 1 << 20,
        },
        memory: None,
        writes: None,
        conditions: Some(machine),
    };
    let mut console = String::new();
    let results = {
        let devices: &mut [&mut dyn BlockDevice] = &mut [&mut device];
        run_benchmark(&config, devices, &environment, &context, &mut console)
    };
    (results, console)
}

#[test]
fn a_calm_machine_gives_the_published_sentence_and_every_reading() {
    let machine = ScriptedMachine::new(&[], ConditionsSettings::default());
    let (results, console) = run(&machine);
    // Before, after each of the two runs, at the end.
    assert_eq!(machine.reads.get(), 4);
    assert!(console.contains("conditions before the first job: no throttling flags; SoC 48.5 °C (the firmware throttles at 85.0 °C); clocks measured arm 1499.9 MHz (requested arm 1500.0 MHz)"), "{console}");
    assert!(console.contains("\nconditions: no throttling flags before or after the tests; SoC 48.5 °C at the end (max 48.5 °C during)\n"), "{console}");
    assert!(
        console.contains("\nboot: firmware 2500.000 ms before the kernel; kernel 3.000 ms to the banner, "),
        "{console}"
    );
    assert!(!results.throttled_during());
    // The heartbeat: at the progress line's pace inside the windows, and before each run.
    assert!(machine.heartbeats_in_window.get() >= 4, "{}", machine.heartbeats_in_window.get());
    assert_eq!(machine.between_runs.get(), 2);
    let json = extract_json_from_log(&console).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let top = &value["barebench"];
    assert_eq!(top["conditions"]["before"]["throttled"], 0);
    assert_eq!(top["conditions"]["after"]["clocks"]["arm"]["measured_hz"], 1_499_900_000u64);
    assert_eq!(top["conditions"]["throttled_runs"], 0);
    assert_eq!(top["conditions"]["throttle"], "warn");
    assert_eq!(top["boot"]["firmware_ms"], 2500.0);
    assert_eq!(top["boot"]["kernel_to_banner_ms"], 3.0);
    assert!(top["boot"]["kernel_to_first_io_ms"].is_f64(), "{}", top["boot"]);
    let job = &value["jobs"][0]["barebench"]["conditions"];
    assert_eq!(job["throttled_run"], false);
    assert_eq!(job["after"]["temperature_millicelsius"], 48_500);
    assert_eq!(value["barebench medians"][0]["throttled_runs"], 0);
}

#[test]
fn a_run_after_which_the_firmware_reports_under_voltage_is_flagged_everywhere() {
    // Before: nothing; after run 1: nothing; after run 2: under-voltage occurred; end: nothing.
    let machine = ScriptedMachine::new(&[0, 0, 0x1_0000, 0], ConditionsSettings::default());
    let (results, console) = run(&machine);
    assert!(results.throttled_during());
    let flagged: Vec<u32> = results.throttled_runs().map(|run| run.run).collect();
    assert_eq!(flagged, [2]);
    assert!(
        console
            .contains("warning: nvme0 run 2/2 of randread:4k:1: the firmware reports under-voltage occurred"),
        "{console}"
    );
    assert!(results.runs[1].notes.iter().any(|note| note.contains("under-voltage occurred")));
    assert!(
        console.contains("nvme0    randread:4k:1        run 2 ran throttled: under-voltage occurred"),
        "{console}"
    );
    assert!(console.contains("conditions: throttling flags before the tests: none (since boot); 1 of 2 runs ran throttled; at the end: none"), "{console}");
    let report = parse_fio_json(&extract_json_from_log(&console).unwrap()).unwrap();
    assert_eq!(report.barebench_medians[0].throttled_runs, Some(1));
    let throttled: Vec<bool> = report
        .jobs
        .iter()
        .map(|job| job.barebench.as_ref().unwrap().conditions.as_ref().unwrap().throttled_run)
        .collect();
    assert_eq!(throttled, [false, true]);
}

#[test]
fn cooldown_waits_before_each_run_and_the_wait_is_in_the_json() {
    let settings = ConditionsSettings { cooldown_below_millic: Some(50_000), throttle_fails: true };
    let machine = ScriptedMachine::new(&[], settings);
    let (results, console) = run(&machine);
    // 62, 57, 52, 47 °C before the first run; the second starts at once (42 °C).
    assert!(console.contains("cooldown: SoC 62.0 °C, waiting until it is below 50.0 °C"), "{console}");
    let waits: Vec<u32> =
        results.runs.iter().map(|run| run.conditions.as_ref().unwrap().cooldown.unwrap().polls).collect();
    assert_eq!(waits, [4, 1]);
    let conditions = results.conditions.as_ref().unwrap();
    assert_eq!(conditions.highest_millic, Some(62_000), "the polls count as during");
    let json = extract_json_from_log(&console).unwrap();
    assert!(json.contains("\"cooldown_wait_ns\" : "), "{json}");
    assert!(json.contains("\"cooldown_below_millicelsius\" : 50000"), "{json}");
    assert!(json.contains("\"throttle\" : \"fail\""), "{json}");
}
