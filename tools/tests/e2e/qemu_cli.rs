//! `barebench qemu` picks the NVMe drive's `aio=` backend the host allows: io_uring, or the
//! thread pool with a message where io_uring_setup(2) is refused, as under a container's default
//! seccomp profile. A stand-in QEMU records the command line; the refusal is made real with a
//! seccomp filter on the `barebench` process (seccomp(2), SECCOMP_MODE_FILTER).

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

/// `AUDIT_ARCH_*` of this machine (include/uapi/linux/audit.h), which the filter checks first.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Makes every later io_uring_setup(2) of this process and its children fail with EPERM, the
/// answer of Docker's default profile (moby/moby #46762). Classic BPF as in seccomp(2): load
/// `seccomp_data.arch` (offset 4) and `.nr` (offset 0), compare, return.
fn refuse_io_uring_setup() -> io::Result<()> {
    const LOAD_WORD: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const ALLOW: u32 = 0x7fff_0000; // SECCOMP_RET_ALLOW
    const ERRNO: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    let instruction = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let filter = [
        instruction(LOAD_WORD, 0, 0, 4),
        instruction(JUMP_IF_EQUAL, 1, 0, AUDIT_ARCH),
        instruction(RETURN, 0, 0, ALLOW),
        instruction(LOAD_WORD, 0, 0, 0),
        instruction(JUMP_IF_EQUAL, 0, 1, libc::SYS_io_uring_setup as u32),
        instruction(RETURN, 0, 0, ERRNO | libc::EPERM as u32),
        instruction(RETURN, 0, 0, ALLOW),
    ];
    let program = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: prctl with PR_SET_NO_NEW_PRIVS takes plain integers and changes only this process.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `program` points at `filter`, both alive for the call; the kernel copies them.
    let installed = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
            0,
            0,
        )
    };
    if installed != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `barebench qemu` with an NVMe drive against a stand-in QEMU; returns the CLI's output and
/// the arguments QEMU got, one per line.
fn run_with_nvme(dir: &Path, refuse_io_uring: bool, extra: &[&str]) -> (Output, String) {
    let qemu = dir.join("qemu-standin");
    let recorded = dir.join("qemu-args");
    fs::write(&qemu, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n", recorded.display())).unwrap();
    fs::set_permissions(&qemu, fs::Permissions::from_mode(0o755)).unwrap();
    let kernel = dir.join("kernel.img");
    fs::write(&kernel, [0u8; 4]).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_barebench"));
    command.arg("qemu").arg("--qemu").arg(&qemu).arg("--kernel").arg(&kernel);
    command.arg("--workdir").arg(dir).arg("--log").arg(dir.join("serial.log"));
    command.args(["--nvme", "1M:zeros"]).args(extra);
    if refuse_io_uring {
        // SAFETY: the closure runs in the child between fork and exec and only makes two prctl
        // calls, which are async-signal-safe.
        unsafe { command.pre_exec(refuse_io_uring_setup) };
    }
    let output = command.output().unwrap();
    let arguments = fs::read_to_string(&recorded).unwrap_or_default();
    (output, arguments)
}

fn nvme_drive(arguments: &str) -> &str {
    arguments.lines().find(|line| line.starts_with("if=none,id=nv,")).expect("an NVMe -drive")
}

#[test]
fn where_io_uring_is_refused_the_drive_uses_the_thread_pool_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (output, arguments) = run_with_nvme(dir.path(), true, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(nvme_drive(&arguments).ends_with(",aio=threads"), "{arguments}");
    assert!(
        stderr.contains("io_uring is not available here (io_uring_setup: Operation not permitted"),
        "{stderr}"
    );
    assert!(stderr.contains("the NVMe drive uses aio=threads"), "{stderr}");
}

#[test]
fn where_io_uring_works_the_drive_uses_it_and_an_explicit_backend_wins() {
    let dir = tempfile::tempdir().unwrap();
    let (output, arguments) = run_with_nvme(dir.path(), false, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let expected = tools::qemu::host_nvme_aio().backend;
    assert!(nvme_drive(&arguments).ends_with(&format!(",aio={expected}")), "{arguments}");
    assert_eq!(stderr.contains("io_uring is not available"), expected != "io_uring", "{stderr}");

    let (output, arguments) = run_with_nvme(dir.path(), true, &["--nvme-aio", "native"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(nvme_drive(&arguments).ends_with(",aio=native"), "{arguments}");
    assert!(!stderr.contains("io_uring is not available"), "{stderr}");
}

#[test]
fn without_a_machine_it_runs_virt_with_the_default_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let (output, arguments) = run_with_nvme(dir.path(), false, &[]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let arguments: Vec<&str> = arguments.lines().collect();
    assert!(arguments.windows(2).any(|pair| pair == ["-M", "virt"]), "{arguments:?}");
    assert!(arguments.windows(2).any(|pair| pair == ["-cpu", "cortex-a72"]), "{arguments:?}");
}
