//! fio-plot's input layout: `<dir>/fio/<device>/<bs>/<rw>-<iodepth>-<numjobs>.json`, one fio
//! document per job and device, as fio-plot's own `bench-fio` writes them, so that
//! `fio-plot -i <dir>/fio/nvme0/4k -l|-H|-C …` reads barebench results directly (fio-plot 1.1.21
//! `fio_plot/fiolib/jsonimport.py`, `bench_fio/benchlib/supporting.py`; docs/fio-json.md §7).
//!
//! Each file holds the job's median run (by IOPS; for an even count the lower middle one), with
//! the document's `fio version`, `global options` and the other top-level keys fio writes. A job
//! its device ran at another queue depth than asked (an SD host runs `randread:4k:32` at QD1)
//! keeps a file of its own in a directory that names the depth asked,
//! `sd0/4k-asked-qd32/randread-1-1.json`: fio-plot reads every `*.json` of a directory and takes
//! depth and `numjobs` from the document, never from the name (`jsonimport.py`
//! `list_json_files`, `filter_json_files`), and two files of one depth in one directory make its
//! `-C` and `-l` charts fail; in a directory of its own the job is one more `-i` to compare
//! (`-i fio/sd0/4k fio/sd0/4k-asked-qd32 -C`). Linux fio
//! JSON is split the same way, its device being the base name of `filename`; `numjobs` is added
//! to the job options when fio left it out (fio-plot skips a file without it; fio's default is 1).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bench::fio_json::{extract_json_from_log, parse_fio_json, FioJob, FioReport};
use bench::{JSON_BEGIN_MARKER, JSON_END_MARKER};
use serde_json::{Map, Value};

use super::{format_block, Report, ReportError};

/// The top-level keys copied into every per-job document, in fio's order.
const DOCUMENT_KEYS: [&str; 5] = ["fio version", "timestamp", "timestamp_ms", "time", "global options"];

/// Where one job goes and which run fills it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct FileKey {
    device: String,
    block: String,
    rw: String,
    /// The depth the device ran the job at (the document's `iodepth`).
    iodepth: u32,
    /// The depth the job asked for.
    requested_iodepth: u32,
}

impl FileKey {
    fn path(&self, root: &Path) -> PathBuf {
        let block = if self.requested_iodepth == self.iodepth {
            self.block.clone()
        } else {
            format!("{}-asked-qd{}", self.block, self.requested_iodepth)
        };
        root.join(&self.device).join(block).join(format!("{}-{}-1.json", self.rw, self.iodepth))
    }
}

/// A candidate run for a file: its index in the document's jobs and its IOPS.
struct Candidate {
    job_index: usize,
    iops: f64,
}

/// The JSON document of an input: a whole fio JSON file, or the block of a serial log.
fn document_text(path: &Path) -> Option<String> {
    let text = String::from_utf8_lossy(&fs::read(path).ok()?).into_owned();
    let is_log = text.contains(JSON_BEGIN_MARKER) || text.contains(JSON_END_MARKER);
    if is_log {
        extract_json_from_log(&text).ok()
    } else {
        Some(text)
    }
}

/// The device directory of a job: barebench's device name, or the base name of fio's filename.
fn device_of(job: &FioJob) -> Option<String> {
    let device = job.settings.device.as_deref()?;
    let base = device.rsplit('/').next().unwrap_or(device);
    let safe: String =
        base.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    (!safe.is_empty()).then_some(safe)
}

fn key_of(job: &FioJob) -> Option<FileKey> {
    let settings = &job.settings;
    let block = job.job_options.get("bs").map(|bs| bs.to_lowercase());
    Some(FileKey {
        device: device_of(job)?,
        block: block.unwrap_or_else(|| format_block(settings.block_bytes).to_lowercase()),
        rw: settings.rw.clone(),
        iodepth: settings.queue_depth,
        // Linux fio runs at the depth it was given; barebench says what was asked (0: a log too
        // old to say).
        requested_iodepth: job
            .barebench
            .as_ref()
            .map(|facts| facts.requested_queue_depth)
            .filter(|&requested| requested > 0)
            .unwrap_or(settings.queue_depth),
    })
}

/// The jobs of one document grouped by file, each group's chosen run.
fn chosen_runs(report: &FioReport) -> BTreeMap<FileKey, usize> {
    let mut groups: BTreeMap<FileKey, Vec<Candidate>> = BTreeMap::new();
    for (job_index, job) in report.jobs.iter().enumerate() {
        let Some(key) = key_of(job) else {
            continue;
        };
        let iops = job.read.iops + job.write.iops;
        groups.entry(key).or_default().push(Candidate { job_index, iops });
    }
    groups
        .into_iter()
        .map(|(key, mut candidates)| {
            candidates.sort_by(|a, b| a.iops.total_cmp(&b.iops));
            (key, candidates[(candidates.len() - 1) / 2].job_index)
        })
        .collect()
}

/// One fio document holding `job` alone, with `numjobs` among its options.
fn single_job_document(document: &Map<String, Value>, job: &Value) -> Value {
    let mut single = Map::new();
    for key in DOCUMENT_KEYS {
        if let Some(value) = document.get(key) {
            single.insert(key.to_string(), value.clone());
        }
    }
    let mut job = job.clone();
    let has_numjobs = |options: Option<&Value>| options.and_then(|o| o.get("numjobs")).is_some();
    if !has_numjobs(job.get("job options")) && !has_numjobs(document.get("global options")) {
        if let Some(options) =
            job.as_object_mut().map(|job| job.entry("job options").or_insert(Value::Object(Map::new())))
        {
            if let Some(options) = options.as_object_mut() {
                options.insert("numjobs".to_string(), Value::String("1".to_string()));
            }
        }
    }
    single.insert("jobs".to_string(), Value::Array(vec![job]));
    single
        .insert("disk_util".to_string(), document.get("disk_util").cloned().unwrap_or(Value::Array(vec![])));
    if let Some(info) = document.get("barebench") {
        single.insert("barebench".to_string(), info.clone());
    }
    Value::Object(single)
}

/// Writes the layout under `<dir>/fio` for every input of `report` that holds a document;
/// returns the files written. A device name two inputs share gets the second input's label.
pub fn write_fio_layout(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let root = dir.join("fio");
    let mut written = Vec::new();
    let mut device_owner: BTreeMap<String, usize> = BTreeMap::new();
    for (source_index, source) in report.sources.iter().enumerate() {
        let Some(text) = document_text(&source.path) else {
            continue;
        };
        let (Ok(parsed), Ok(Value::Object(document))) =
            (parse_fio_json(&text), serde_json::from_str::<Value>(&text))
        else {
            continue;
        };
        let Some(jobs) = document.get("jobs").and_then(Value::as_array) else {
            continue;
        };
        for (mut key, job_index) in chosen_runs(&parsed) {
            let owner = *device_owner.entry(key.device.clone()).or_insert(source_index);
            if owner != source_index {
                let label: String =
                    source.label.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
                key.device = format!("{}-{label}", key.device);
            }
            let path = key.path(&root);
            let write_error = |source| ReportError::Write { path: path.clone(), source };
            fs::create_dir_all(path.parent().unwrap_or(&root)).map_err(write_error)?;
            let single = single_job_document(&document, &jobs[job_index]);
            let text = serde_json::to_string_pretty(&single).unwrap_or_default();
            fs::write(&path, text).map_err(write_error)?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::build_report;

    const FIO_SAMPLE: &str = include_str!("../../../bench/tests/data/fio-3.36-nvme-randread.json");
    const BAREBENCH_LOG: &str = include_str!("../../tests/data/pi5-synthetic.log");

    fn files_under(root: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    found.push(path.strip_prefix(root).unwrap().display().to_string());
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn each_job_and_device_gets_one_file_with_numjobs() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("pi5.log"), BAREBENCH_LOG).unwrap();
        fs::write(dir.path().join("linux.json"), FIO_SAMPLE).unwrap();
        let report = build_report(&[dir.path().join("pi5.log"), dir.path().join("linux.json")]);
        let out = dir.path().join("out");
        let written = write_fio_layout(&report, &out).unwrap();
        let files = files_under(&out.join("fio"));
        assert_eq!(written.len(), files.len());
        for expected in ["nvme0/4k/randread-1-1.json", "nvme0/4k/randread-32-1.json", "sd0/1m/read-16-1.json"]
        {
            assert!(files.contains(&expected.to_string()), "{expected} in {files:?}");
        }
        // Linux fio's /dev/nvme0n1 by its base name, with the option text as fio wrote it.
        assert!(files.contains(&"nvme0n1/4k/randread-32-1.json".to_string()), "{files:?}");
        assert!(files.contains(&"nvme0n1/1m/read-16-1.json".to_string()), "{files:?}");
        for file in &files {
            let document: Value =
                serde_json::from_str(&fs::read_to_string(out.join("fio").join(file)).unwrap()).unwrap();
            let jobs = document["jobs"].as_array().unwrap();
            assert_eq!(jobs.len(), 1, "{file}");
            assert_eq!(jobs[0]["job options"]["numjobs"], "1", "{file}");
            assert!(document["fio version"].is_string(), "{file}");
        }
    }

    #[test]
    fn the_median_run_fills_the_file_and_a_job_run_at_another_depth_keeps_its_own() {
        let runs = |iops: [f64; 3], requested: u32| -> Vec<Value> {
            iops.iter()
                .enumerate()
                .map(|(index, iops)| {
                    serde_json::json!({
                        "jobname": format!("randread-4k-qd{requested}-sd0-run{}", index + 1),
                        "job options": {"rw": "randread", "bs": "4k", "iodepth": "1", "filename": "sd0"},
                        "read": {"iops": iops},
                        "barebench": {"device": "sd0", "run": index + 1, "block_bytes": 4096,
                                      "queue_depth": 1, "requested_queue_depth": requested}
                    })
                })
                .collect()
        };
        // sd0 ran randread:4k:1 and randread:4k:32 both at QD1, as an SD host does.
        let mut jobs = runs([500.0, 700.0, 600.0], 1);
        jobs.extend(runs([100.0, 300.0, 200.0], 32));
        let document = serde_json::json!({"fio version": "barebench-0.1.0", "jobs": jobs});
        let parsed = parse_fio_json(&document.to_string()).unwrap();
        let chosen = chosen_runs(&parsed);
        let root = Path::new("fio");
        let files: Vec<(PathBuf, usize)> =
            chosen.iter().map(|(key, &index)| (key.path(root), index)).collect();
        assert_eq!(
            files,
            [
                (root.join("sd0/4k/randread-1-1.json"), 2),
                (root.join("sd0/4k-asked-qd32/randread-1-1.json"), 5),
            ],
            "the median of 500, 700, 600 is run 3; of 100, 300, 200 run 3 of the second job"
        );
        // An even count: the lower middle one.
        let two = serde_json::json!({"fio version": "x", "jobs": runs([100.0, 300.0, 200.0], 32)[..2]});
        let chosen = chosen_runs(&parse_fio_json(&two.to_string()).unwrap());
        assert_eq!(chosen.values().next(), Some(&0));
    }

    #[test]
    fn both_jobs_of_a_clamped_device_are_written_and_neither_replaces_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("sd.log");
        let job = |requested: u32, iops: f64| {
            serde_json::json!({
                "jobname": format!("sd0-randread-4k-qd{requested}"),
                "job options": {"rw": "randread", "bs": "4k", "iodepth": "1", "filename": "sd0"},
                "read": {"iops": iops, "bw_bytes": 4096.0 * iops},
                "barebench": {"device": "sd0", "run": 1, "block_bytes": 4096,
                              "queue_depth": 1, "requested_queue_depth": requested}
            })
        };
        let document =
            serde_json::json!({"fio version": "barebench-0.1.0", "jobs": [job(1, 656.0), job(32, 163.0)]});
        fs::write(&log, format!("{JSON_BEGIN_MARKER}\n{document}\n{JSON_END_MARKER}\n")).unwrap();
        let out = dir.path().join("out");
        let written = write_fio_layout(&build_report(&[log]), &out).unwrap();
        assert_eq!(
            files_under(&out.join("fio")),
            ["sd0/4k-asked-qd32/randread-1-1.json", "sd0/4k/randread-1-1.json"]
        );
        assert_eq!(written.len(), 2);
        let iops_in = |name: &str| -> f64 {
            let text = fs::read_to_string(out.join("fio/sd0").join(name)).unwrap();
            serde_json::from_str::<Value>(&text).unwrap()["jobs"][0]["read"]["iops"].as_f64().unwrap()
        };
        assert_eq!(
            (iops_in("4k/randread-1-1.json"), iops_in("4k-asked-qd32/randread-1-1.json")),
            (656.0, 163.0)
        );
    }
}
