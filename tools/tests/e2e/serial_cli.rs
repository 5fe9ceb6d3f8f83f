//! `barebench serial` on a pseudo-terminal: prints the picocom line, saves the console and
//! stops at the end-of-results marker; keeps the log when the port goes away.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// How long the tool may take to open the port (a loaded machine; the tool itself takes ms).
const PORT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

use serialport::{SerialPort, TTYPort};

#[test]
fn serial_stops_at_the_marker_and_saves_the_log() {
    let (mut master, slave) = TTYPort::pair().expect("pty pair");
    let port = slave.name().expect("pty name");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serial.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["serial", &port, "--timeout", "30", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr_pipe = child.stderr.take().unwrap();
    let (sender, stderr_lines) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    // The kernel "talks" only once the tool says it has the port open and is waiting.
    let mut stderr = String::new();
    loop {
        let line = stderr_lines.recv_timeout(PORT_OPEN_TIMEOUT).unwrap_or_else(|_| {
            panic!("no `waiting for the results` within {PORT_OPEN_TIMEOUT:?}:\n{stderr}")
        });
        stderr.push_str(&line);
        stderr.push('\n');
        if line.contains("waiting for the results") {
            break;
        }
    }
    master.write_all(b"barebench 0.1.0\r\n{\"jobs\": []}\r\n").unwrap();
    master.write_all(tools::serial::END_MARKER.as_bytes()).unwrap();
    master.write_all(b"\r\n").unwrap();
    let output = child.wait_with_output().unwrap();
    drop(slave);
    reader.join().unwrap();
    for line in stderr_lines.try_iter() {
        stderr.push_str(&line);
        stderr.push('\n');
    }
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("picocom -b 115200 {port}")), "{stderr}");
    let saved = std::fs::read_to_string(&log).unwrap();
    assert!(saved.starts_with("barebench 0.1.0"), "{saved:?}");
    assert!(saved.contains(tools::serial::END_MARKER));
    assert!(String::from_utf8_lossy(&output.stdout).contains("barebench 0.1.0"));
}

#[test]
fn serial_on_a_missing_port_fails_clearly() {
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["serial", "/dev/ttyDOESNOTEXIST", "--log"])
        .arg(std::env::temp_dir().join("barebench-missing-port.log"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot open /dev/ttyDOESNOTEXIST"), "{stderr}");
}
