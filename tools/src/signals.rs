//! Signals for `barebench farm`: to a whole process group (how it stops a place driver together
//! with whatever that started, POSIX kill(2) with a negative pid), and from the user (Ctrl-C or
//! SIGTERM ask the farm to stop: every place powers off and unlocks first; a second one ends the
//! program at once).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by the first SIGINT or SIGTERM after [`catch_interrupts`].
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// The exit status of a program ended by a second interrupt (128 + SIGINT, the shell's habit).
const SECOND_INTERRUPT_EXIT_STATUS: libc::c_int = 130;

extern "C" fn on_interrupt(_signal: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit(2) is async-signal-safe and takes no pointer.
        unsafe { libc::_exit(SECOND_INTERRUPT_EXIT_STATUS) };
    }
}

/// From now on SIGINT and SIGTERM set [`interrupted`] instead of ending the program; a second
/// one ends it.
pub fn catch_interrupts() -> io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: signal(2) installs a handler that only touches an atomic and calls _exit, both
        // async-signal-safe; the handler is a plain function that lives as long as the program.
        if unsafe { libc::signal(signal, handler) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether the user asked the program to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

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
    fn an_interrupt_is_recorded_instead_of_ending_the_program() {
        catch_interrupts().unwrap();
        assert!(!interrupted());
        // SAFETY: raise(3) sends this process a signal whose handler was just installed.
        assert_eq!(unsafe { libc::raise(libc::SIGINT) }, 0);
        assert!(interrupted());
    }

    #[test]
    fn the_special_groups_are_refused() {
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(1, 0).is_err());
    }
}
