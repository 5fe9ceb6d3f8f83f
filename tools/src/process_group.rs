//! Signals to a whole process group: how `barebench farm` stops a place driver together with
//! whatever it started (a power command, an SSH session), POSIX kill(2) with a negative pid.

use std::io;

/// Sends `signal` (e.g. `libc::SIGTERM`) to every process of the group `group_id`.
pub fn signal_group(group_id: u32, signal: libc::c_int) -> io::Result<()> {
    let group = libc::pid_t::try_from(group_id).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    if group <= 1 {
        // 0 would be this program's own group, 1 (as -1) every process it may signal.
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: kill(2) takes two integers and touches no memory of this process; a negative pid
    // names the process group, and `group` > 1 keeps it away from the special values 0 and -1.
    let result = unsafe { libc::kill(-group, signal) };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Whether `pid` is gone or a zombie (killed, not yet reaped by its new parent).
    fn is_dead(pid: u32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        }
    }

    #[test]
    fn a_group_signal_reaches_the_child_and_its_own_children() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        assert!(!is_dead(grandchild));
        signal_group(child.id(), libc::SIGKILL).unwrap();
        assert!(!child.wait().unwrap().success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !is_dead(grandchild) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(is_dead(grandchild), "the background sleep was in the group too");
    }

    #[test]
    fn the_special_groups_are_refused() {
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(1, 0).is_err());
    }
}
