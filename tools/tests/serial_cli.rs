//! `barebench serial` on a pseudo-terminal: prints the picocom line, saves the console and
//! stops at the end-of-results marker; keeps the log when the port goes away.

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use serialport::{SerialPort, TTYPort};

#[test]
fn serial_stops_at_the_marker_and_saves_the_log() {
    let (mut master, slave) = TTYPort::pair().expect("pty pair");
    let port = slave.name().expect("pty name");
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serial.log");
    let child = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["serial", &port, "--timeout", "30", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Give the tool time to open the port before the kernel "talks".
    thread::sleep(Duration::from_millis(500));
    master.write_all(b"barebench 0.1.0\r\n{\"jobs\": []}\r\n").unwrap();
    master.write_all(tools::serial::END_MARKER.as_bytes()).unwrap();
    master.write_all(b"\r\n").unwrap();
    let output = child.wait_with_output().unwrap();
    drop(slave);
    let stderr = String::from_utf8_lossy(&output.stderr);
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
