//! `barebench serial`: captures the kernel's serial console (115200 8N1, docs/ecosystem.md §4.1),
//! shows it live, saves it, and stops at the end-of-results marker line (docs/architecture.md "Output").
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The line the kernel prints after the machine-readable results block.
pub const END_MARKER: &str = "==== barebench results: fio-compatible JSON end ====";
/// The console's default speed (docs/ecosystem.md §4.1).
pub const DEFAULT_BAUD: u32 = 115_200;
/// How long one read waits before the loop checks the overall timeout.
const READ_POLL: Duration = Duration::from_millis(100);
/// The longest partial line kept while looking for the marker.
const MAX_LINE_BYTES: usize = 4096;

/// Errors opening a port.
#[derive(Debug, thiserror::Error)]
pub enum SerialError {
    #[error("cannot open {port}: {message}{hint}")]
    Open { port: String, message: String, hint: String },
    #[error("cannot write the log {path}: {source}")]
    Log { path: PathBuf, source: io::Error },
}

/// The exact picocom command for the same port and speed (docs/ecosystem.md §4.1).
pub fn picocom_command(port: &str, baud: u32) -> String {
    format!("picocom -b {baud} {port}")
}

/// Opens `port` as 8N1 without flow control.
pub fn open_port(port: &str, baud: u32) -> Result<serialport::TTYPort, SerialError> {
    serialport::new(port, baud)
        .data_bits(serialport::DataBits::Eight)
        .parity(serialport::Parity::None)
        .stop_bits(serialport::StopBits::One)
        .flow_control(serialport::FlowControl::None)
        .timeout(READ_POLL)
        .open_native()
        .map_err(|error| {
            let hint = match error.kind() {
                serialport::ErrorKind::NoDevice | serialport::ErrorKind::Io(io::ErrorKind::NotFound) => {
                    let ports = serialport::available_ports()
                        .map(|ports| {
                            ports.into_iter().map(|port| port.port_name).collect::<Vec<_>>().join(", ")
                        })
                        .unwrap_or_default();
                    if ports.is_empty() {
                        " (no serial ports found: is the USB-UART plugged in?)".to_string()
                    } else {
                        format!(" (ports present: {ports})")
                    }
                }
                serialport::ErrorKind::Io(io::ErrorKind::PermissionDenied) => {
                    " (add yourself to the dialout group: sudo adduser $USER dialout, then log in again)"
                        .to_string()
                }
                _ => String::new(),
            };
            SerialError::Open { port: port.to_string(), message: error.to_string(), hint }
        })
}

/// Somewhere console bytes come from.
pub trait SerialSource {
    /// Reads what is available; `Err(TimedOut)` means nothing arrived within the poll time.
    /// Any other error, or `Ok(0)`, is a hang-up: Linux flushes a tty's input buffer when it
    /// hangs up (a closed pty master reads as POLLHUP with nothing left), so nothing more
    /// can be read after it.
    fn read_chunk(&mut self, buffer: &mut [u8]) -> io::Result<usize>;
}

impl SerialSource for serialport::TTYPort {
    fn read_chunk(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        io::Read::read(self, buffer)
    }
}

/// Finds the marker line in a byte stream that arrives in arbitrary pieces.
#[derive(Debug, Default)]
pub struct MarkerScanner {
    line: Vec<u8>,
}

impl MarkerScanner {
    /// Feeds bytes; true once a complete line equal to [`END_MARKER`] (ignoring `\r` and
    /// surrounding spaces) has gone by.
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut seen = false;
        for byte in bytes {
            if *byte == b'\n' {
                seen |= String::from_utf8_lossy(&self.line).trim() == END_MARKER;
                self.line.clear();
            } else if self.line.len() < MAX_LINE_BYTES {
                self.line.push(*byte);
            }
        }
        seen
    }
}

/// Why a capture stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureEnd {
    /// The end-of-results marker went by.
    EndMarker,
    /// The port went away (unplugged adapter, closed pty).
    Disconnected { reason: String },
    /// The overall time limit passed.
    TimedOut,
}

/// The result of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureOutcome {
    pub end: CaptureEnd,
    pub bytes_captured: u64,
}

/// Copies console bytes to `live` and `log` (flushed after every chunk, so a crash or Ctrl-C
/// keeps the log so far) until the marker, a disconnect or `timeout`.
pub fn capture(
    source: &mut dyn SerialSource,
    live: &mut dyn Write,
    log: &mut dyn Write,
    timeout: Option<Duration>,
) -> io::Result<CaptureOutcome> {
    let started = Instant::now();
    let mut scanner = MarkerScanner::default();
    let mut bytes_captured = 0u64;
    let mut buffer = [0u8; 4096];
    let mut record = |bytes: &[u8], bytes_captured: &mut u64| -> io::Result<bool> {
        log.write_all(bytes)?;
        log.flush()?;
        // The live view is best effort; the log is what matters.
        let _ = live.write_all(bytes).and_then(|_| live.flush());
        *bytes_captured += bytes.len() as u64;
        Ok(scanner.feed(bytes))
    };
    loop {
        if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
            return Ok(CaptureOutcome { end: CaptureEnd::TimedOut, bytes_captured });
        }
        let hangup_reason = match source.read_chunk(&mut buffer) {
            Ok(0) => "end of file".to_string(),
            Ok(count) => {
                if record(&buffer[..count], &mut bytes_captured)? {
                    return Ok(CaptureOutcome { end: CaptureEnd::EndMarker, bytes_captured });
                }
                continue;
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(error) => error.to_string(),
        };
        return Ok(CaptureOutcome {
            end: CaptureEnd::Disconnected { reason: hangup_reason },
            bytes_captured,
        });
    }
}

/// Opens the log for a capture (parent directories created).
pub fn create_log(path: &Path) -> Result<std::fs::File, SerialError> {
    let log_error = |source| SerialError::Log { path: path.to_path_buf(), source };
    if let Some(parent) = path.parent().filter(|parent| !parent.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(log_error)?;
    }
    std::fs::File::create(path).map_err(log_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serialport::SerialPort;
    use std::collections::VecDeque;
    use std::thread;

    struct ScriptedSource {
        steps: VecDeque<io::Result<Vec<u8>>>,
    }

    impl SerialSource for ScriptedSource {
        fn read_chunk(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            match self.steps.pop_front() {
                Some(Ok(bytes)) => {
                    buffer[..bytes.len()].copy_from_slice(&bytes);
                    Ok(bytes.len())
                }
                Some(Err(error)) => Err(error),
                None => Err(io::Error::new(io::ErrorKind::BrokenPipe, "gone")),
            }
        }
    }

    fn scripted(steps: Vec<io::Result<Vec<u8>>>) -> ScriptedSource {
        ScriptedSource { steps: steps.into() }
    }

    #[test]
    fn marker_is_found_across_chunk_borders_and_with_crlf() {
        let mut scanner = MarkerScanner::default();
        assert!(!scanner.feed(b"results\r\n==== barebench results: fio-compat"));
        assert!(scanner.feed(b"ible JSON end ====\r\n"));
        let mut scanner = MarkerScanner::default();
        assert!(!scanner.feed(b"x ==== barebench results: fio-compatible JSON end ====\n"));
        assert!(!scanner.feed(END_MARKER.as_bytes()), "no line end yet");
    }

    #[test]
    fn capture_stops_at_the_marker_and_keeps_everything_before() {
        let text = format!("banner\n{{\"jobs\": []}}\n{END_MARKER}\n");
        let mut source = scripted(vec![
            Ok(text.as_bytes()[..10].to_vec()),
            Err(io::Error::new(io::ErrorKind::TimedOut, "quiet")),
            Ok(text.as_bytes()[10..].to_vec()),
            Ok(b"never read\n".to_vec()),
        ]);
        let (mut live, mut log) = (Vec::new(), Vec::new());
        let outcome = capture(&mut source, &mut live, &mut log, None).unwrap();
        assert_eq!(outcome.end, CaptureEnd::EndMarker);
        assert_eq!(log, text.as_bytes());
        assert_eq!(live, log);
        assert_eq!(outcome.bytes_captured, text.len() as u64);
    }

    #[test]
    fn a_disconnect_keeps_the_log() {
        let mut source = scripted(vec![
            Ok(b"partial results\n".to_vec()),
            Err(io::Error::new(io::ErrorKind::BrokenPipe, "Broken pipe")),
        ]);
        let (mut live, mut log) = (Vec::new(), Vec::new());
        let outcome = capture(&mut source, &mut live, &mut log, None).unwrap();
        assert!(
            matches!(outcome.end, CaptureEnd::Disconnected { ref reason } if reason.contains("Broken pipe"))
        );
        assert_eq!(log, b"partial results\n");
    }

    #[test]
    fn a_silent_port_times_out() {
        let steps = (0..1000).map(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "quiet"))).collect();
        let mut source = scripted(steps);
        let outcome = capture(&mut source, &mut io::sink(), &mut io::sink(), Some(Duration::ZERO)).unwrap();
        assert_eq!(outcome.end, CaptureEnd::TimedOut);
    }

    #[test]
    fn picocom_line_names_port_and_speed() {
        assert_eq!(picocom_command("/dev/ttyUSB0", 115_200), "picocom -b 115200 /dev/ttyUSB0");
    }

    #[test]
    fn pty_capture_reaches_the_marker() {
        let (mut master, mut slave) = serialport::TTYPort::pair().expect("pty pair");
        slave.set_timeout(READ_POLL).unwrap();
        let writer = thread::spawn(move || {
            for piece in ["booting\r\n", "{\"jobs\": []}\r\n", END_MARKER, "\r\n", "after\r\n"] {
                io::Write::write_all(&mut master, piece.as_bytes()).unwrap();
                thread::sleep(Duration::from_millis(20));
            }
            master
        });
        let mut log = Vec::new();
        let outcome = capture(&mut slave, &mut io::sink(), &mut log, Some(Duration::from_secs(20))).unwrap();
        let _master = writer.join().unwrap();
        assert_eq!(outcome.end, CaptureEnd::EndMarker);
        let text = String::from_utf8(log).unwrap();
        assert!(text.starts_with("booting"), "{text:?}");
        assert!(text.contains(END_MARKER));
    }

    #[test]
    fn pty_that_disappears_mid_run_keeps_the_log() {
        let (mut master, mut slave) = serialport::TTYPort::pair().expect("pty pair");
        slave.set_timeout(READ_POLL).unwrap();
        let writer = thread::spawn(move || {
            io::Write::write_all(&mut master, b"seq-read 1M: 42.0 MiB/s\r\n").unwrap();
            thread::sleep(Duration::from_millis(50));
            drop(master);
        });
        let mut log = Vec::new();
        let outcome = capture(&mut slave, &mut io::sink(), &mut log, Some(Duration::from_secs(20))).unwrap();
        writer.join().unwrap();
        assert!(matches!(outcome.end, CaptureEnd::Disconnected { .. }), "{outcome:?}");
        assert!(String::from_utf8(log).unwrap().contains("42.0 MiB/s"));
    }
}
