//! `tools/scripts/deps.sh` changes system packages only on Debian 12: elsewhere it lists what is
//! missing and stops. Runs the real script with a PATH of stand-ins (rustup, rustc, QEMU, the
//! test tools, apt-get, sudo, tee) that record every call instead of touching the machine, and a
//! made-up os-release.
#![forbid(unsafe_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::repository_root;

/// Where a real system tool lives, for the stand-in PATH.
fn real_tool(name: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("{name} not found"))
}

fn write_script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    fs::write(&path, format!("#!{}\n{body}\n", real_tool("bash").display())).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A machine as the script sees it.
struct FakeMachine {
    dir: tempfile::TempDir,
}

impl FakeMachine {
    /// `os_release` is the os-release text; `qemu_version` the `--version` line's number (None:
    /// no QEMU); `present_tools` the test tools that exist.
    fn new(os_release: &str, qemu_version: Option<&str>, present_tools: &[&str]) -> FakeMachine {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        for tool in ["bash", "env", "sed", "grep", "cut", "head", "dirname", "basename", "id", "cat"] {
            std::os::unix::fs::symlink(real_tool(tool), bin.join(tool)).unwrap();
        }
        let calls = dir.path().join("calls.log");
        let record = format!("echo \"$(basename \"$0\") $*\" >> {}", calls.display());
        let channel = fs::read_to_string(repository_root().join("rust-toolchain.toml"))
            .unwrap()
            .lines()
            .find_map(|line| {
                line.strip_prefix("channel = \"").map(|rest| rest.trim_end_matches('"').to_string())
            })
            .unwrap();
        write_script(
            &bin,
            "rustup",
            &format!(
                "case \"$1 $2\" in\n\
                 'toolchain list') echo '{channel}-x86_64-unknown-linux-gnu' ;;\n\
                 'target list') printf 'aarch64-unknown-none\\narmv7a-none-eabi\\n' ;;\n\
                 'component list') printf 'clippy-x86_64-unknown-linux-gnu\\nrustfmt-x86_64-unknown-linux-gnu\\nrust-src\\n' ;;\n\
                 *) {record} ;;\n\
                 esac"
            ),
        );
        write_script(&bin, "rustc", &format!("echo 'rustc {channel} (0000000 2026-01-01)'"));
        if let Some(version) = qemu_version {
            for binary in ["qemu-system-aarch64", "qemu-system-arm"] {
                write_script(&bin, binary, &format!("echo 'QEMU emulator version {version}'"));
            }
        }
        for tool in present_tools {
            write_script(&bin, tool, "exit 0");
        }
        for tool in ["apt-get", "sudo"] {
            write_script(&bin, tool, &record);
        }
        write_script(&bin, "tee", &format!("cat > /dev/null; {record}"));
        fs::write(dir.path().join("os-release"), os_release).unwrap();
        FakeMachine { dir }
    }

    fn run_deps(&self) -> Output {
        Command::new(real_tool("bash"))
            .arg(repository_root().join("tools/scripts/deps.sh"))
            .arg("--test-tools")
            .env_clear()
            .env("PATH", self.dir.path().join("bin"))
            .env("BAREBENCH_OS_RELEASE", self.dir.path().join("os-release"))
            .output()
            .unwrap()
    }

    /// Every apt-get, sudo and tee call the script made, one per line.
    fn system_calls(&self) -> String {
        fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
    }
}

const FEDORA: &str = "NAME=\"Fedora Linux\"\nID=fedora\nVERSION_ID=40\n";
const DEBIAN_12: &str = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n";
const UBUNTU: &str = "NAME=\"Ubuntu\"\nID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n";

#[test]
fn elsewhere_it_lists_what_is_missing_and_changes_nothing() {
    for os_release in [FEDORA, UBUNTU] {
        let machine = FakeMachine::new(os_release, Some("7.2.0"), &["mdir", "llvm-objcopy"]);
        let output = machine.run_deps();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("this is not Debian 12"), "{stderr}");
        assert!(
            stderr.contains(
                "qemu-system-aarch64 >= 9.0 and qemu-system-arm (raspi0, raspi1ap, raspi2b), found: QEMU emulator version 7.2.0"
            ),
            "{stderr}"
        );
        assert!(stderr.contains("fsck.fat (package dosfstools)"), "{stderr}");
        assert!(stderr.contains("fio_jsonplus_clat2csv (package fio)"), "{stderr}");
        assert!(stderr.contains("python3 with its venv module (packages python3, python3-venv)"), "{stderr}");
        assert!(!stderr.contains("mtools") && !stderr.contains("llvm-objcopy"), "{stderr}");
        assert_eq!(machine.system_calls(), "", "no apt-get, sudo or tee elsewhere");
    }
}

#[test]
fn elsewhere_with_everything_present_it_succeeds_quietly() {
    let machine = FakeMachine::new(
        FEDORA,
        Some("10.0.2"),
        &["fsck.fat", "mdir", "llvm-objcopy", "fio_jsonplus_clat2csv", "python3"],
    );
    let output = machine.run_deps();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("ready: QEMU emulator version 10.0.2"), "{stderr}");
    assert_eq!(machine.system_calls(), "");
}

#[test]
fn without_an_os_release_it_changes_nothing() {
    let machine = FakeMachine::new(FEDORA, None, &["fsck.fat", "mdir", "llvm-objcopy"]);
    fs::remove_file(machine.dir.path().join("os-release")).unwrap();
    let output = machine.run_deps();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ID=? VERSION_ID=?"), "{stderr}");
    assert!(stderr.contains("found: none"), "{stderr}");
    assert_eq!(machine.system_calls(), "");
}

#[test]
fn on_debian_12_it_installs_qemu_from_bookworm_backports() {
    let machine = FakeMachine::new(DEBIAN_12, Some("7.2.0"), &["fsck.fat", "mdir", "llvm-objcopy"]);
    let output = machine.run_deps();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let calls = machine.system_calls();
    assert!(calls.contains("-t bookworm-backports qemu-system-arm"), "{calls}\n{stderr}");
    // The stand-in QEMU stays at 7.2, so the script says so and fails.
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("still older than 9.0"), "{stderr}");
}

#[test]
fn the_32_bit_target_rust_src_and_qemu_system_arm_are_asked_for() {
    let machine = FakeMachine::new(FEDORA, Some("10.0.2"), &["fsck.fat", "mdir", "llvm-objcopy"]);
    let bin = machine.dir.path().join("bin");
    let calls = machine.dir.path().join("calls.log");
    let record = format!("echo \"$(basename \"$0\") $*\" >> {}", calls.display());
    let channel = fs::read_to_string(repository_root().join("rust-toolchain.toml"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("channel = \"").map(|rest| rest.trim_end_matches('"').to_string()))
        .unwrap();
    // Only the AArch64 target and no rust-src: both are added with rustup.
    write_script(
        &bin,
        "rustup",
        &format!(
            "case \"$1 $2\" in\n\
             'toolchain list') echo '{channel}-x86_64-unknown-linux-gnu' ;;\n\
             'target list') echo aarch64-unknown-none ;;\n\
             'component list') printf 'clippy-x86_64-unknown-linux-gnu\\nrustfmt-x86_64-unknown-linux-gnu\\n' ;;\n\
             *) {record} ;;\n\
             esac"
        ),
    );
    // QEMU 10 without qemu-system-arm: named as missing.
    fs::remove_file(bin.join("qemu-system-arm")).unwrap();
    let output = machine.run_deps();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let calls = machine.system_calls();
    assert!(calls.contains("rustup target add armv7a-none-eabi"), "{calls}\n{stderr}");
    assert!(calls.contains("rustup component add rust-src"), "{calls}\n{stderr}");
    assert!(!calls.contains("target add aarch64"), "{calls}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("qemu-system-arm (raspi0, raspi1ap, raspi2b)"), "{stderr}");
}
