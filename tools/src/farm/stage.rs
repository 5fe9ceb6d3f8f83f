//! How far a board got, read from its console as it arrives: the stage a place's progress line
//! shows and a timed-out place is reported with. The console lines it knows are the kernel's
//! (kernel/src/runtime: the banner and its `board` line, the `stage:` markers before each
//! bring-up step that can hang (docs/hardware.md §4.8), `devices:`, each job's `job N/M: SPEC`
//! and each run's `run I/N: ...`; bench's result markers).
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use bench::{JSON_BEGIN_MARKER, JSON_END_MARKER};

/// The longest line kept while waiting for its end.
const MAX_LINE_BYTES: usize = 4096;

/// What the console has shown so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsoleProgress {
    pub bytes: u64,
    /// The banner's `board` line (model and revision).
    pub board: Option<String>,
    /// The last bring-up step the kernel began (`stage: STEP`, e.g. `pcie1 bring-up`).
    pub kernel_stage: Option<String>,
    /// The devices the benchmark runs on (`devices:` line).
    pub devices: Option<String>,
    /// The current job, e.g. `job 3/12: randread:4k:64`.
    pub job: Option<String>,
    /// The current run of that job, e.g. `run 1/3: randread 4k qd1 on sd0`.
    pub run: Option<String>,
    pub results_begun: bool,
    pub results_ended: bool,
    /// The last non-empty line.
    pub last_line: Option<String>,
}

impl ConsoleProgress {
    /// The stage in a few words: what the progress line and a timeout report say.
    pub fn stage(&self) -> String {
        if self.results_ended {
            return "results complete".to_string();
        }
        if self.results_begun {
            return "printing the results".to_string();
        }
        match (&self.job, &self.run, &self.devices, &self.board) {
            (Some(job), Some(run), _, _) => format!("{job}, {run}"),
            (Some(job), None, _, _) => job.clone(),
            (None, _, Some(devices), _) => format!("devices found ({devices})"),
            (None, _, None, Some(board)) => match &self.kernel_stage {
                Some(step) => format!("booted on {board}, stage: {step}"),
                None => format!("booted on {board}, bringing up devices"),
            },
            _ if self.bytes > 0 => "console output, no banner yet".to_string(),
            _ => "no console output yet".to_string(),
        }
    }

    fn take_line(&mut self, line: &str) {
        let line = line.trim_matches(|c: char| c == '\r' || c.is_whitespace());
        if line.is_empty() {
            return;
        }
        if !self.results_begun || self.results_ended {
            self.last_line = Some(line.chars().take(160).collect());
        }
        if line.contains(JSON_BEGIN_MARKER) {
            self.results_begun = true;
        } else if line.contains(JSON_END_MARKER) {
            self.results_ended = true;
        } else if let Some(board) = line.strip_prefix("board ") {
            self.board = Some(board.trim().to_string());
        } else if let Some(step) = line.strip_prefix("stage: ") {
            self.kernel_stage = Some(step.trim().to_string());
        } else if let Some(devices) = line.strip_prefix("devices:") {
            self.devices = Some(devices.trim().to_string());
        } else if line.starts_with("job ") && line.contains(": ") {
            self.job = Some(line.to_string());
            self.run = None;
        } else if line.starts_with("run ") && line.contains(": ") {
            // `run 1/3: read 4k qd1 on sd0, region 64m at offset 0, ...`: up to the region.
            let short = line.split(", region").next().unwrap_or(line);
            self.run = Some(short.to_string());
        }
    }
}

/// A [`Write`] sink for the console that keeps [`ConsoleProgress`] up to date (shared with the
/// progress display) and calls `on_change` whenever the stage changes.
pub struct StageTracker {
    progress: Arc<Mutex<ConsoleProgress>>,
    line: Vec<u8>,
    on_change: Box<dyn FnMut(&str) + Send>,
}

impl StageTracker {
    pub fn new(progress: Arc<Mutex<ConsoleProgress>>, on_change: Box<dyn FnMut(&str) + Send>) -> Self {
        StageTracker { progress, line: Vec::new(), on_change }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConsoleProgress> {
        // A panic elsewhere while holding the lock leaves a usable value: keep going with it.
        self.progress.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Write for StageTracker {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let before = self.lock().stage();
        let mut lines = Vec::new();
        for byte in bytes {
            if *byte == b'\n' {
                lines.push(String::from_utf8_lossy(&self.line).into_owned());
                self.line.clear();
            } else if self.line.len() < MAX_LINE_BYTES {
                self.line.push(*byte);
            }
        }
        let after = {
            let mut progress = self.lock();
            progress.bytes += bytes.len() as u64;
            for line in &lines {
                progress.take_line(line);
            }
            progress.stage()
        };
        if after != before {
            (self.on_change)(&after);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(text: &str) -> (ConsoleProgress, Vec<String>) {
        let progress = Arc::new(Mutex::new(ConsoleProgress::default()));
        let changes = Arc::new(Mutex::new(Vec::new()));
        let seen = changes.clone();
        let mut tracker = StageTracker::new(
            progress.clone(),
            Box::new(move |stage| seen.lock().unwrap().push(stage.to_string())),
        );
        // In pieces that cut lines, as a serial port delivers them.
        for chunk in text.as_bytes().chunks(7) {
            tracker.write_all(chunk).unwrap();
        }
        let progress = progress.lock().unwrap().clone();
        let changes = changes.lock().unwrap().clone();
        (progress, changes)
    }

    const BOOT: &str = "\r\nbarebench 0.1.0: bare-metal storage benchmark\r\n\
        board      Raspberry Pi 3 Model B (revision 0xa02082)\r\nfamily     Raspberry Pi 3 / Zero 2 W\r\n";

    #[test]
    fn the_stage_follows_the_banner_the_devices_the_jobs_and_the_runs() {
        let (progress, changes) = feed(&format!(
            "{BOOT}devices: sd0\r\n\r\njob 1/12: read:4k:64\r\nsd0 has no command queueing\r\n\
             run 1/1: read 4k qd1 on sd0, region 64m at offset 0, ramp 100ms then 200ms measured\r\n"
        ));
        assert_eq!(progress.board.as_deref(), Some("Raspberry Pi 3 Model B (revision 0xa02082)"));
        assert_eq!(progress.stage(), "job 1/12: read:4k:64, run 1/1: read 4k qd1 on sd0");
        assert_eq!(
            changes,
            [
                "console output, no banner yet",
                "booted on Raspberry Pi 3 Model B (revision 0xa02082), bringing up devices",
                "devices found (sd0)",
                "job 1/12: read:4k:64",
                "job 1/12: read:4k:64, run 1/1: read 4k qd1 on sd0",
            ]
        );
        assert!(progress.last_line.unwrap().starts_with("run 1/1: read 4k qd1 on sd0, region 64m"));
    }

    #[test]
    fn the_kernels_stage_markers_name_the_bring_up_step_a_board_is_in() {
        let (progress, changes) =
            feed(&format!("{BOOT}stage: memory map\r\nmemory     MMU on\r\nstage: pcie0 bring-up\r\n"));
        assert_eq!(progress.kernel_stage.as_deref(), Some("pcie0 bring-up"));
        assert_eq!(
            changes,
            [
                "console output, no banner yet",
                "booted on Raspberry Pi 3 Model B (revision 0xa02082), bringing up devices",
                "booted on Raspberry Pi 3 Model B (revision 0xa02082), stage: memory map",
                "booted on Raspberry Pi 3 Model B (revision 0xa02082), stage: pcie0 bring-up",
            ]
        );
        let (progress, _) = feed(&format!("{BOOT}stage: benchmark\r\ndevices: sd0\r\n"));
        assert_eq!(progress.stage(), "devices found (sd0)");
    }

    #[test]
    fn a_new_job_forgets_the_previous_run_and_the_markers_end_it() {
        let (progress, _) = feed(&format!(
            "{BOOT}devices: sd0\r\njob 1/2: read:4k:64\r\nrun 1/1: read 4k qd1 on sd0, region 1m\r\njob 2/2: write:4k:64\r\n"
        ));
        assert_eq!(progress.stage(), "job 2/2: write:4k:64");
        let (progress, _) = feed(&format!("{BOOT}{JSON_BEGIN_MARKER}\r\n{{\r\n"));
        assert_eq!(progress.stage(), "printing the results");
        assert_eq!(progress.last_line.as_deref(), Some(JSON_BEGIN_MARKER), "JSON lines are not last lines");
        let (progress, _) = feed(&format!("{BOOT}{JSON_BEGIN_MARKER}\r\n{{}}\r\n{JSON_END_MARKER}\r\n"));
        assert_eq!(progress.stage(), "results complete");
    }

    #[test]
    fn silence_and_noise_before_the_banner_are_told_apart() {
        assert_eq!(ConsoleProgress::default().stage(), "no console output yet");
        let (progress, _) = feed("\u{0}\u{0}garbage from the firmware\r\n");
        assert_eq!(progress.stage(), "console output, no banner yet");
        assert_eq!(progress.last_line.as_deref(), Some("\u{0}\u{0}garbage from the firmware"));
    }
}
