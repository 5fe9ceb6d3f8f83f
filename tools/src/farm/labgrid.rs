//! The labgrid side of a farm run: where labgrid is installed, the places an environment file
//! names, locking and unlocking with `labgrid-client` (labgrid's `acquire`/`release`), and the
//! place driver (tools/farm/labgrid_place.py, compiled into this program and written next to
//! the logs) that runs one place through labgrid's library (docs/farm.md).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde::Deserialize;

/// The place driver's source.
pub const PLACE_DRIVER_SOURCE: &str = include_str!("../../farm/labgrid_place.py");
/// The file name it is written under.
pub const PLACE_DRIVER_FILE: &str = "labgrid_place.py";
/// The environment variable naming labgrid's virtual environment.
pub const VENV_VARIABLE: &str = "BAREBENCH_LABGRID_VENV";
/// labgrid-client reads these when they are set; a farm run gives every command its place.
const CLIENT_VARIABLES_TO_CLEAR: [&str; 3] = ["LG_ENV", "LG_PLACE", "LG_STATE"];

/// Errors finding or running labgrid.
#[derive(Debug, thiserror::Error)]
pub enum LabgridError {
    #[error("cannot run {program}: {source} (install labgrid: `make deps` puts it in ~/.cache/barebench/labgrid-venv; or give --labgrid-venv DIR)")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("reading the places of {env} failed: {message}")]
    Describe { env: PathBuf, message: String },
    #[error("{venv} holds no Python virtual environment (no bin/python): make one with `python3 -m venv {venv}` and `{venv}/bin/pip install labgrid`")]
    NoVenv { venv: PathBuf },
}

/// One place of the environment file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EnvPlace {
    /// The environment's target name.
    pub target: String,
    /// The coordinator's place (the target's RemotePlace).
    pub place: String,
    /// The target's `barebench_settings` option: settings for this place only.
    pub settings: String,
    /// The target's `barebench_timeout` option: this place's console timeout in seconds.
    #[serde(default)]
    pub timeout: Option<u64>,
}

/// The programs a farm run uses.
#[derive(Debug, Clone)]
pub struct LabgridTools {
    /// A Python that can `import labgrid`.
    pub python: PathBuf,
    pub client: PathBuf,
    /// Where the place driver is written.
    pub driver: PathBuf,
    /// `LG_COORDINATOR` for every labgrid command, when given.
    pub coordinator: Option<String>,
}

impl LabgridTools {
    /// The tools of the virtual environment `venv` (`--labgrid-venv`, else $BAREBENCH_LABGRID_VENV,
    /// else ~/.cache/barebench/labgrid-venv when it exists), or `python3` and `labgrid-client`
    /// from PATH; the place driver is written into `work_dir`.
    pub fn find(
        venv: Option<&Path>,
        work_dir: &Path,
        coordinator: Option<String>,
    ) -> Result<Self, LabgridError> {
        if let Some(venv) = venv.filter(|dir| !dir.join("bin/python").exists()) {
            return Err(LabgridError::NoVenv { venv: venv.to_path_buf() });
        }
        let default_venv = std::env::var_os(VENV_VARIABLE).map(PathBuf::from).or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/barebench/labgrid-venv"))
        });
        let venv = venv.map(Path::to_path_buf).or(default_venv.filter(|dir| dir.join("bin/python").exists()));
        let (python, client) = match venv {
            Some(dir) => (dir.join("bin/python"), dir.join("bin/labgrid-client")),
            None => (PathBuf::from("python3"), PathBuf::from("labgrid-client")),
        };
        let driver = work_dir.join(PLACE_DRIVER_FILE);
        fs::create_dir_all(work_dir)
            .map_err(|source| LabgridError::Write { path: work_dir.to_path_buf(), source })?;
        fs::write(&driver, PLACE_DRIVER_SOURCE)
            .map_err(|source| LabgridError::Write { path: driver.clone(), source })?;
        Ok(LabgridTools { python, client, driver, coordinator })
    }

    fn command(&self, program: &Path) -> Command {
        let mut command = Command::new(program);
        for variable in CLIENT_VARIABLES_TO_CLEAR {
            command.env_remove(variable);
        }
        if let Some(address) = &self.coordinator {
            command.env("LG_COORDINATOR", address);
        }
        command.stdin(Stdio::null());
        command
    }

    /// The place driver with `arguments`.
    pub fn driver_command(&self, arguments: &[OsString]) -> Command {
        let mut command = self.command(&self.python);
        command.arg(&self.driver).args(arguments);
        command
    }

    fn output(&self, mut command: Command, program: &Path) -> Result<Output, LabgridError> {
        command.output().map_err(|source| LabgridError::Spawn { program: program.to_path_buf(), source })
    }

    /// The places `env` names, with their own settings.
    pub fn describe(&self, env: &Path) -> Result<Vec<EnvPlace>, LabgridError> {
        let command = self.driver_command(&["describe".into(), "--env".into(), env.into()]);
        let output = self.output(command, &self.python)?;
        let describe_error = |message: String| LabgridError::Describe { env: env.to_path_buf(), message };
        if !output.status.success() {
            return Err(describe_error(last_lines(&output.stderr, 3)));
        }
        serde_json::from_slice(&output.stdout).map_err(|error| describe_error(error.to_string()))
    }

    /// `labgrid-client -p PLACE ACTION` (`lock` or `unlock`): Ok, or what it said.
    pub fn client(&self, place: &str, action: &str) -> Result<Result<(), String>, LabgridError> {
        let mut command = self.command(&self.client);
        command.args(["-p", place, action]);
        let output = self.output(command, &self.client)?;
        Ok(if output.status.success() {
            Ok(())
        } else {
            Err(last_lines(&[output.stdout, output.stderr].concat(), 2))
        })
    }

    /// Starts the place driver's `run` for `place` in a process group of its own, its three
    /// standard streams piped.
    pub fn spawn_run(&self, env: &Path, place: &str, image: &Path) -> Result<Child, LabgridError> {
        use std::os::unix::process::CommandExt;
        let arguments: Vec<OsString> = vec![
            "run".into(),
            "--env".into(),
            env.into(),
            "--place".into(),
            place.into(),
            "--image".into(),
            image.into(),
        ];
        let mut command = self.driver_command(&arguments);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        command.spawn().map_err(|source| LabgridError::Spawn { program: self.python.clone(), source })
    }

    /// The place driver's `power-off` (after a driver that had to be killed): Ok, or what it said.
    pub fn power_off(&self, env: &Path, place: &str) -> Result<Result<(), String>, LabgridError> {
        let arguments: Vec<OsString> =
            vec!["power-off".into(), "--env".into(), env.into(), "--place".into(), place.into()];
        let output = self.output(self.driver_command(&arguments), &self.python)?;
        Ok(if output.status.success() { Ok(()) } else { Err(last_lines(&output.stderr, 2)) })
    }
}

/// The last `count` non-empty lines of a program's output, joined.
pub fn last_lines(bytes: &[u8], count: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|line| !line.is_empty()).collect();
    lines[lines.len().saturating_sub(count)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_driver_is_written_next_to_the_logs_and_a_named_venv_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let missing = LabgridTools::find(Some(&dir.path().join("no-venv")), dir.path(), None).unwrap_err();
        assert!(missing.to_string().contains("pip install labgrid"), "{missing}");
        let venv = dir.path().join("venv");
        fs::create_dir_all(venv.join("bin")).unwrap();
        fs::write(venv.join("bin/python"), "").unwrap();
        let tools = LabgridTools::find(Some(&venv), dir.path(), Some("127.0.0.1:1".into())).unwrap();
        assert_eq!(fs::read_to_string(&tools.driver).unwrap(), PLACE_DRIVER_SOURCE);
        assert_eq!(tools.python, venv.join("bin/python"));
        assert_eq!(tools.client, venv.join("bin/labgrid-client"));
        let command = tools.driver_command(&["describe".into()]);
        let variables: Vec<_> = command.get_envs().collect();
        assert!(variables
            .contains(&(std::ffi::OsStr::new("LG_COORDINATOR"), Some(std::ffi::OsStr::new("127.0.0.1:1")))));
        assert!(variables.contains(&(std::ffi::OsStr::new("LG_ENV"), None)), "{variables:?}");
    }

    #[test]
    fn last_lines_skip_blank_ones() {
        assert_eq!(last_lines(b"one\n\ntwo\nthree\n\n", 2), "two / three");
        assert_eq!(last_lines(b"", 2), "");
    }
}
