//! `barebench farm`: the benchmark on every place of a labgrid board farm at once, one report
//! for all of them (docs/farm.md). For each place, in parallel: build its card image
//! (crate::image::build_card, the settings plus the place's own), lock the place with
//! `labgrid-client`, run the place driver (labgrid.rs: power off, card to the host, write,
//! card to the board, power on, console), read the console until the results block ends or the
//! time runs out (crate::serial::capture, the stage from stage.rs), stop the driver (it powers
//! the board off) and unlock. One place failing (lock refused, a step of its driver, no console
//! output, a timeout) is reported by name and stops no other. Finally every log goes through
//! `barebench report` (crate::report) into one report.
#![forbid(unsafe_code)]

pub mod labgrid;
pub mod stage;

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::image::{build_card, CardRequest};
use crate::serial::{self, CaptureEnd, SerialSource};
use labgrid::{EnvPlace, LabgridTools};
use stage::{ConsoleProgress, StageTracker};

/// The place driver's prefix on standard error (tools/farm/labgrid_place.py `say`).
const DRIVER_PREFIX: &str = "barebench-farm: ";
/// The driver stage after which console bytes flow.
const CONSOLE_OPEN_STAGE: &str = "console open";
/// How long the driver may take to power off and exit once told to.
const DRIVER_STOP_WAIT: Duration = Duration::from_secs(60);
/// After SIGTERM, how long before SIGKILL.
const DRIVER_KILL_WAIT: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(100);
/// What an interrupted place says.
const INTERRUPTED_DETAIL: &str = "interrupted (Ctrl-C or SIGTERM): stopped, powered off and unlocked";

/// Errors that stop the whole farm run (a place's own failures never do).
#[derive(Debug, thiserror::Error)]
pub enum FarmError {
    #[error(transparent)]
    Labgrid(#[from] labgrid::LabgridError),
    #[error("the environment {env} names no place {place} (it names: {known})")]
    UnknownPlace { env: PathBuf, place: String, known: String },
    #[error("the environment {env} names no places")]
    NoPlaces { env: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

/// What a farm run needs.
#[derive(Debug, Clone)]
pub struct FarmOptions {
    /// The labgrid environment file (one target per place).
    pub env: PathBuf,
    /// The places to run, by coordinator name; `None`: every place of the environment.
    pub places: Option<Vec<String>>,
    /// Where logs, cards and the report go.
    pub output: PathBuf,
    /// The card every place gets: its settings are the farm's, plus the place's own.
    pub card: CardRequest,
    /// From power-on to the end of the results.
    pub console_timeout: Duration,
    /// From the start of the place driver to the console: power, card switching and writing.
    pub prepare_timeout: Duration,
}

/// How a place ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaceStatus {
    /// The results block ended.
    Complete,
    /// The console time ran out.
    TimedOut,
    /// The console closed before the results ended.
    ConsoleClosed,
    /// A step before the console failed (card, lock, power, driver).
    Failed,
}

impl PlaceStatus {
    pub fn name(self) -> &'static str {
        match self {
            PlaceStatus::Complete => "complete",
            PlaceStatus::TimedOut => "TIMED OUT",
            PlaceStatus::ConsoleClosed => "CONSOLE CLOSED",
            PlaceStatus::Failed => "FAILED",
        }
    }
}

/// One place's result.
#[derive(Debug, Clone)]
pub struct PlaceOutcome {
    pub place: String,
    pub status: PlaceStatus,
    /// The last stage reached (the driver's before the console, the console's after).
    pub stage: String,
    /// What went wrong, or what is worth knowing.
    pub detail: String,
    /// The console log (absent when the console never opened).
    pub log: PathBuf,
    /// The banner's board, when it came.
    pub board: Option<String>,
    pub elapsed: Duration,
}

/// The whole run's result.
#[derive(Debug, Clone)]
pub struct FarmOutcome {
    pub places: Vec<PlaceOutcome>,
    /// The merged report's Markdown table, as `barebench report` prints it.
    pub report_markdown: String,
    pub written: Vec<PathBuf>,
}

/// A place's line on the terminal: a spinner when standard error is a terminal, else a line
/// per stage.
#[derive(Clone)]
struct PlaceLine {
    name: String,
    width: usize,
    bar: Option<indicatif::ProgressBar>,
}

impl PlaceLine {
    fn show(&self, stage: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(stage.to_string()),
            None => eprintln!("farm: {:<width$} {stage}", self.name, width = self.width),
        }
    }

    fn finish(&self, outcome: &PlaceOutcome) {
        let text =
            format!("{}: {} ({:.1} s)", outcome.status.name(), outcome.stage, outcome.elapsed.as_secs_f64());
        match &self.bar {
            Some(bar) => bar.finish_with_message(text),
            None => eprintln!("farm: {:<width$} {text}", self.name, width = self.width),
        }
    }
}

/// Runs the farm: cards, places in parallel, report. A place's failure is in its outcome.
pub fn run(options: &FarmOptions, tools: &LabgridTools) -> Result<FarmOutcome, FarmError> {
    let write_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| FarmError::Write { path, source }
    };
    fs::create_dir_all(&options.output).map_err(write_error(&options.output))?;
    let places = chosen_places(options, tools.describe(&options.env)?)?;
    let width = places.iter().map(|place| place.place.len()).max().unwrap_or(0);
    let terminal = io::IsTerminal::is_terminal(&io::stderr());
    let multi = indicatif::MultiProgress::new();
    let lines: Vec<PlaceLine> = places
        .iter()
        .map(|place| {
            let bar = terminal.then(|| {
                let bar = multi.add(indicatif::ProgressBar::new_spinner());
                let template = format!("{{prefix:{width}}} {{elapsed:>4}} {{msg}}");
                bar.set_style(
                    indicatif::ProgressStyle::with_template(&template)
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
                );
                bar.set_prefix(place.place.clone());
                bar.enable_steady_tick(Duration::from_millis(500));
                bar
            });
            PlaceLine { name: place.place.clone(), width, bar }
        })
        .collect();
    // One card at a time: the first build may fill the Debian firmware cache the others read.
    let card_builds = Mutex::new(());
    let outcomes: Vec<PlaceOutcome> = thread::scope(|scope| {
        let card_builds = &card_builds;
        let handles: Vec<_> = places
            .iter()
            .zip(&lines)
            .map(|(place, line)| scope.spawn(move || run_place(options, tools, place, line, card_builds)))
            .collect();
        handles
            .into_iter()
            .zip(&places)
            .map(|(handle, place)| {
                handle.join().unwrap_or_else(|_| PlaceOutcome {
                    place: place.place.clone(),
                    status: PlaceStatus::Failed,
                    stage: "farm".to_string(),
                    detail: "the farm's thread for this place panicked".to_string(),
                    log: log_path(options, place),
                    board: None,
                    elapsed: Duration::ZERO,
                })
            })
            .collect()
    });
    let logs: Vec<PathBuf> =
        outcomes.iter().map(|outcome| outcome.log.clone()).filter(|log| log.exists()).collect();
    let report = crate::report::build_report(&logs);
    let mut written = crate::report::write_report(&report, &options.output)?;
    let summary_path = options.output.join("farm.md");
    fs::write(&summary_path, summary_markdown(&outcomes)).map_err(write_error(&summary_path))?;
    written.push(summary_path);
    Ok(FarmOutcome { places: outcomes, report_markdown: crate::report::markdown(&report), written })
}

/// The places to run, in the order asked (or the environment's), each known to the environment.
fn chosen_places(options: &FarmOptions, known: Vec<EnvPlace>) -> Result<Vec<EnvPlace>, FarmError> {
    let Some(names) = &options.places else {
        if known.is_empty() {
            return Err(FarmError::NoPlaces { env: options.env.clone() });
        }
        return Ok(known);
    };
    names
        .iter()
        .map(|name| {
            known.iter().find(|place| &place.place == name).cloned().ok_or_else(|| FarmError::UnknownPlace {
                env: options.env.clone(),
                place: name.clone(),
                known: known.iter().map(|place| place.place.as_str()).collect::<Vec<_>>().join(", "),
            })
        })
        .collect()
}

fn log_path(options: &FarmOptions, place: &EnvPlace) -> PathBuf {
    options.output.join(format!("{}.log", place.place))
}

/// The settings of one place's card: the farm's, then the place's own (later ones win).
pub fn place_settings(farm: &[String], place: &EnvPlace) -> Vec<String> {
    farm.iter().cloned().chain(place.settings.split_whitespace().map(str::to_string)).collect()
}

fn run_place(
    options: &FarmOptions,
    tools: &LabgridTools,
    place: &EnvPlace,
    line: &PlaceLine,
    card_builds: &Mutex<()>,
) -> PlaceOutcome {
    let started = Instant::now();
    let mut outcome = PlaceOutcome {
        place: place.place.clone(),
        status: PlaceStatus::Failed,
        stage: "building the card".to_string(),
        detail: String::new(),
        log: log_path(options, place),
        board: None,
        elapsed: Duration::ZERO,
    };
    // A log from an earlier run must not pass for this one's.
    let _ = fs::remove_file(&outcome.log);
    line.show("building the card");
    let card = options.output.join("cards").join(format!("{}.img", place.place));
    let mut request = options.card.clone();
    request.image.output = card.clone();
    request.image.settings = place_settings(&options.card.image.settings, place);
    let built = {
        let _one_at_a_time = card_builds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        fs::create_dir_all(options.output.join("cards"))
            .map_err(|error| error.to_string())
            .and_then(|_| build_card(&request, &mut |_| {}).map_err(|error| error.to_string()))
    };
    if let Err(error) = built {
        outcome.detail = error;
        return finished(outcome, started, line);
    }
    if crate::signals::interrupted() {
        outcome.detail = INTERRUPTED_DETAIL.to_string();
        return finished(outcome, started, line);
    }
    outcome.stage = "locking the place".to_string();
    line.show(&outcome.stage);
    match tools.client(&place.place, "lock") {
        Err(error) => outcome.detail = error.to_string(),
        Ok(Err(said)) => outcome.detail = format!("labgrid-client lock: {said}"),
        Ok(Ok(())) => {
            drive(options, tools, place, &card, line, &mut outcome);
            line.show("unlocking the place");
            let unlocked = tools.client(&place.place, "unlock").map_err(|error| error.to_string());
            if let Some(problem) =
                unlocked.and_then(|said| said.map_err(|said| format!("labgrid-client unlock: {said}"))).err()
            {
                append_detail(&mut outcome.detail, &problem);
            }
        }
    }
    finished(outcome, started, line)
}

fn finished(mut outcome: PlaceOutcome, started: Instant, line: &PlaceLine) -> PlaceOutcome {
    outcome.elapsed = started.elapsed();
    line.finish(&outcome);
    outcome
}

fn append_detail(detail: &mut String, more: &str) {
    if !detail.is_empty() {
        detail.push_str("; ");
    }
    detail.push_str(more);
}

/// What the place driver says on standard error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DriverEvent {
    Stage(String),
    Error(String),
}

/// Reads the driver's standard error: every line into its log, stages and errors onto the channel.
fn spawn_driver_reader(stderr: impl io::Read + Send + 'static, mut log: File) -> Receiver<DriverEvent> {
    let (sender, receiver) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            let event = match line.strip_prefix(DRIVER_PREFIX) {
                Some(rest) => match rest.split_once(' ') {
                    Some(("stage", text)) => Some(DriverEvent::Stage(text.to_string())),
                    Some(("error", text)) => Some(DriverEvent::Error(text.to_string())),
                    _ => None,
                },
                None => None,
            };
            if let Some(event) = event {
                if sender.send(event).is_err() {
                    break;
                }
            }
        }
    });
    receiver
}

/// The driver's standard output (the console) as a serial source.
struct PipeSource {
    chunks: Receiver<Vec<u8>>,
    leftover: Vec<u8>,
}

impl SerialSource for PipeSource {
    fn read_chunk(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if crate::signals::interrupted() {
            return Err(io::Error::other(INTERRUPTED_DETAIL));
        }
        if self.leftover.is_empty() {
            match self.chunks.recv_timeout(POLL) {
                Ok(chunk) => self.leftover = chunk,
                Err(RecvTimeoutError::Timeout) => return Err(io::ErrorKind::TimedOut.into()),
                Err(RecvTimeoutError::Disconnected) => return Ok(0),
            }
        }
        let count = buffer.len().min(self.leftover.len());
        buffer[..count].copy_from_slice(&self.leftover[..count]);
        self.leftover.drain(..count);
        Ok(count)
    }
}

/// Everything between lock and unlock.
fn drive(
    options: &FarmOptions,
    tools: &LabgridTools,
    place: &EnvPlace,
    card: &Path,
    line: &PlaceLine,
    outcome: &mut PlaceOutcome,
) {
    outcome.stage = "starting the place driver".to_string();
    let driver_log_path = options.output.join(format!("{}.labgrid.log", place.place));
    let driver_log = match File::create(&driver_log_path) {
        Ok(file) => file,
        Err(error) => {
            outcome.detail = format!("cannot write {}: {error}", driver_log_path.display());
            return;
        }
    };
    let mut child = match tools.spawn_run(&options.env, &place.place, card) {
        Ok(child) => child,
        Err(error) => {
            outcome.detail = error.to_string();
            return;
        }
    };
    let stdin = child.stdin.take();
    let console = crate::qemu::spawn_pipe_reader(child.stdout.take());
    let events = match child.stderr.take() {
        Some(stderr) => spawn_driver_reader(stderr, driver_log),
        None => mpsc::channel().1,
    };
    let mut errors = Vec::new();
    if wait_for_console(options, &events, line, outcome, &mut errors) {
        let timeout = place.timeout.map_or(options.console_timeout, Duration::from_secs);
        read_console(timeout, console, line, outcome);
    }
    stop_driver(tools, &options.env, place, child, stdin, outcome);
    errors.extend(events.try_iter().filter_map(|event| match event {
        DriverEvent::Error(text) => Some(text),
        DriverEvent::Stage(_) => None,
    }));
    if outcome.status != PlaceStatus::Complete {
        for error in errors {
            append_detail(&mut outcome.detail, &error);
        }
        append_detail(&mut outcome.detail, &format!("labgrid log {}", driver_log_path.display()));
    }
}

/// Follows the driver's stages until the console opens (true), the driver ends or the
/// preparation time runs out (false, with the outcome filled in).
fn wait_for_console(
    options: &FarmOptions,
    events: &Receiver<DriverEvent>,
    line: &PlaceLine,
    outcome: &mut PlaceOutcome,
    errors: &mut Vec<String>,
) -> bool {
    let deadline = Instant::now() + options.prepare_timeout;
    loop {
        match events.recv_timeout(POLL) {
            Ok(DriverEvent::Stage(stage)) => {
                line.show(&stage);
                let open = stage == CONSOLE_OPEN_STAGE;
                outcome.stage = stage;
                if open {
                    return true;
                }
            }
            Ok(DriverEvent::Error(text)) => errors.push(text),
            Err(RecvTimeoutError::Disconnected) => {
                outcome.detail = "the place driver stopped before the console opened".to_string();
                return false;
            }
            Err(RecvTimeoutError::Timeout) => {
                if crate::signals::interrupted() {
                    outcome.detail = INTERRUPTED_DETAIL.to_string();
                    return false;
                }
                if Instant::now() >= deadline {
                    outcome.detail = format!(
                        "still at this stage after {} s (--prepare-timeout)",
                        options.prepare_timeout.as_secs()
                    );
                    return false;
                }
            }
        }
    }
}

/// Saves the console until the results end, it closes or the time runs out.
fn read_console(timeout: Duration, console: Receiver<Vec<u8>>, line: &PlaceLine, outcome: &mut PlaceOutcome) {
    let mut log = match serial::create_log(&outcome.log) {
        Ok(file) => file,
        Err(error) => {
            outcome.detail = error.to_string();
            return;
        }
    };
    let progress = Arc::new(Mutex::new(ConsoleProgress::default()));
    let shown = line.clone();
    let mut tracker = StageTracker::new(progress.clone(), Box::new(move |stage| shown.show(stage)));
    let mut source = PipeSource { chunks: console, leftover: Vec::new() };
    let end = serial::capture(&mut source, &mut tracker, &mut log, Some(timeout));
    let progress = progress.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone();
    outcome.stage = progress.stage();
    outcome.board = progress.board.clone();
    let last_line = progress
        .last_line
        .as_deref()
        .map(|text| format!("; last console line: {text:?}"))
        .unwrap_or_default();
    match end {
        Ok(capture) => match capture.end {
            CaptureEnd::EndMarker => outcome.status = PlaceStatus::Complete,
            CaptureEnd::TimedOut => {
                outcome.status = PlaceStatus::TimedOut;
                outcome.detail = format!(
                    "no end of the results within {} s of power-on ({} console bytes){last_line}",
                    timeout.as_secs(),
                    capture.bytes_captured
                );
            }
            CaptureEnd::Disconnected { .. } if crate::signals::interrupted() => {
                outcome.detail = INTERRUPTED_DETAIL.to_string();
            }
            CaptureEnd::Disconnected { reason } => {
                outcome.status = PlaceStatus::ConsoleClosed;
                outcome.detail = format!(
                    "the console closed before the results ended ({reason}, {} console bytes){last_line}",
                    capture.bytes_captured
                );
            }
        },
        Err(error) => outcome.detail = format!("cannot write {}: {error}", outcome.log.display()),
    }
}

/// Tells the driver to finish (it powers the board off); one that does not is stopped by
/// signal with its whole process group, and the board powered off again.
fn stop_driver(
    tools: &LabgridTools,
    env: &Path,
    place: &EnvPlace,
    mut child: Child,
    stdin: Option<ChildStdin>,
    outcome: &mut PlaceOutcome,
) {
    drop(stdin);
    if wait_child(&mut child, DRIVER_STOP_WAIT) {
        return;
    }
    let _ = crate::signals::signal_group(child.id(), libc::SIGTERM);
    if !wait_child(&mut child, DRIVER_KILL_WAIT) {
        let _ = crate::signals::signal_group(child.id(), libc::SIGKILL);
        let _ = child.wait();
    }
    append_detail(&mut outcome.detail, "the place driver had to be stopped by signal");
    match tools.power_off(env, &place.place) {
        Ok(Ok(())) => {}
        Ok(Err(said)) => append_detail(&mut outcome.detail, &format!("powering off failed: {said}")),
        Err(error) => append_detail(&mut outcome.detail, &format!("powering off failed: {error}")),
    }
}

/// Waits up to `limit` for the child to exit; true when it did (and was reaped).
fn wait_child(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => thread::sleep(POLL),
            Ok(None) => return false,
            Err(_) => return false,
        }
    }
}

/// The places as a Markdown table: status, last stage, time, board, log, what went wrong.
pub fn summary_markdown(outcomes: &[PlaceOutcome]) -> String {
    let mut text = String::from("# barebench farm\n\n");
    text.push_str("| Place | Status | Last stage | Time (s) | Board | Log | Detail |\n");
    text.push_str("|---|---|---|---:|---|---|---|\n");
    for outcome in outcomes {
        let _ = writeln!(
            text,
            "| {} | {} | {} | {:.1} | {} | `{}` | {} |",
            outcome.place,
            outcome.status.name(),
            outcome.stage,
            outcome.elapsed.as_secs_f64(),
            outcome.board.as_deref().unwrap_or("-"),
            outcome.log.display(),
            outcome.detail.replace('|', "\\|")
        );
    }
    let complete = outcomes.iter().filter(|outcome| outcome.status == PlaceStatus::Complete).count();
    let _ = writeln!(text, "\n{complete} of {} places complete.", outcomes.len());
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(name: &str, settings: &str) -> EnvPlace {
        EnvPlace {
            target: name.to_string(),
            place: name.to_string(),
            settings: settings.to_string(),
            timeout: None,
        }
    }

    #[test]
    fn a_place_s_own_settings_come_after_the_farm_s() {
        let settings = place_settings(
            &["preset=matrix".into(), "write=sd0".into()],
            &place("pi2", " sd.host=arasan  runs=1"),
        );
        assert_eq!(settings, ["preset=matrix", "write=sd0", "sd.host=arasan", "runs=1"]);
    }

    #[test]
    fn an_unknown_place_is_refused_with_the_ones_the_environment_names() {
        let options = FarmOptions {
            env: PathBuf::from("lab.yaml"),
            places: Some(vec!["pi4".into(), "pi9".into()]),
            output: PathBuf::from("out"),
            card: CardRequest {
                image: crate::image::ImageRequest {
                    output: PathBuf::new(),
                    kernel: PathBuf::new(),
                    kernel32: PathBuf::new(),
                    settings: vec![],
                    size_bytes: None,
                    firmware: crate::image::FirmwareSource::Directory(PathBuf::new()),
                    firmware_boot_log: false,
                    pi5_console: crate::image::config::Pi5Console::Debug,
                },
                pattern_bytes: None,
                scratch_bytes: None,
            },
            console_timeout: Duration::from_secs(1),
            prepare_timeout: Duration::from_secs(1),
        };
        let known = vec![place("pi4", ""), place("pi5", "")];
        let error = chosen_places(&options, known.clone()).unwrap_err();
        assert_eq!(error.to_string(), "the environment lab.yaml names no place pi9 (it names: pi4, pi5)");
        let all = FarmOptions { places: None, ..options.clone() };
        assert_eq!(chosen_places(&all, known).unwrap().len(), 2);
        assert!(matches!(chosen_places(&all, vec![]), Err(FarmError::NoPlaces { .. })));
    }

    #[test]
    fn driver_lines_become_stages_and_errors_and_all_go_to_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("driver.log");
        let stderr = b"barebench-farm: stage powering on\nsome labgrid warning\nbarebench-farm: error ExecutionError: no\n";
        let events = spawn_driver_reader(io::Cursor::new(stderr.to_vec()), File::create(&log_path).unwrap());
        let events: Vec<DriverEvent> = events.iter().collect();
        assert_eq!(
            events,
            [DriverEvent::Stage("powering on".into()), DriverEvent::Error("ExecutionError: no".into())]
        );
        assert_eq!(fs::read(&log_path).unwrap(), stderr);
    }

    #[test]
    fn the_summary_names_every_place_with_its_status_and_stage() {
        let outcome = |place: &str, status, stage: &str| PlaceOutcome {
            place: place.to_string(),
            status,
            stage: stage.to_string(),
            detail: "a | b".to_string(),
            log: PathBuf::from(format!("build/farm/{place}.log")),
            board: Some("Raspberry Pi 3 Model B".to_string()),
            elapsed: Duration::from_millis(12_345),
        };
        let text = summary_markdown(&[
            outcome("raspi3b", PlaceStatus::Complete, "results complete"),
            outcome(
                "raspi3b-hang",
                PlaceStatus::TimedOut,
                "job 1/12: read:4k:64, run 1/1: read 4k qd1 on sd0",
            ),
        ]);
        assert!(text.contains(
            "| raspi3b-hang | TIMED OUT | job 1/12: read:4k:64, run 1/1: read 4k qd1 on sd0 | 12.3 | Raspberry Pi 3 Model B | `build/farm/raspi3b-hang.log` | a \\| b |"
        ), "{text}");
        assert!(text.contains("1 of 2 places complete."));
    }
}
