//! The rows `barebench compare-linux` compares, the fio job file and barebench settings that run
//! them, and the table of the two sides' figures (docs/linux-compare.md §3).
#![forbid(unsafe_code)]

use bench::fio_json::{FioJob, FioReport};

/// A device class, the same emulated device on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKind {
    Nvme,
    Sd,
    Usb,
}

impl DeviceKind {
    /// The block device Linux makes of it.
    pub fn linux_path(self) -> &'static str {
        match self {
            DeviceKind::Nvme => "/dev/nvme0n1",
            DeviceKind::Sd => "/dev/mmcblk0",
            DeviceKind::Usb => "/dev/sda",
        }
    }

    /// barebench's name of it (docs/settings.md §3).
    pub fn barebench_name(self) -> &'static str {
        match self {
            DeviceKind::Nvme => "nvme0",
            DeviceKind::Sd => "sd0",
            DeviceKind::Usb => "usb0",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            DeviceKind::Nvme => "NVMe",
            DeviceKind::Sd => "SD",
            DeviceKind::Usb => "USB BOT",
        }
    }

    /// `nvme`, `sd`, `usb` as `--devices` takes them.
    pub fn parse(text: &str) -> Option<DeviceKind> {
        match text {
            "nvme" => Some(DeviceKind::Nvme),
            "sd" => Some(DeviceKind::Sd),
            "usb" => Some(DeviceKind::Usb),
            _ => None,
        }
    }
}

/// One compared row: a read job on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub device: DeviceKind,
    /// `randread` or `read`, as fio and barebench both spell it.
    pub rw: &'static str,
    pub block_bytes: u64,
    pub queue_depth: u32,
    /// Linux polls for the completion (fio `hipri=1` on an NVMe poll queue, `poll_queues=1`)
    /// instead of waiting for its interrupt; barebench runs the same job either way.
    pub linux_polled: bool,
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

/// The rows, in table order.
pub const JOBS: &[Job] = &[
    Job {
        device: DeviceKind::Nvme,
        rw: "randread",
        block_bytes: 4 * KIB,
        queue_depth: 1,
        linux_polled: false,
    },
    Job {
        device: DeviceKind::Nvme,
        rw: "randread",
        block_bytes: 4 * KIB,
        queue_depth: 1,
        linux_polled: true,
    },
    Job {
        device: DeviceKind::Nvme,
        rw: "randread",
        block_bytes: 4 * KIB,
        queue_depth: 32,
        linux_polled: false,
    },
    Job {
        device: DeviceKind::Nvme,
        rw: "randread",
        block_bytes: 4 * KIB,
        queue_depth: 32,
        linux_polled: true,
    },
    Job { device: DeviceKind::Sd, rw: "randread", block_bytes: 4 * KIB, queue_depth: 1, linux_polled: false },
    Job { device: DeviceKind::Sd, rw: "read", block_bytes: MIB, queue_depth: 1, linux_polled: false },
    Job {
        device: DeviceKind::Usb,
        rw: "randread",
        block_bytes: 4 * KIB,
        queue_depth: 1,
        linux_polled: false,
    },
];

fn size_text(bytes: u64) -> String {
    if bytes.is_multiple_of(MIB) {
        format!("{}m", bytes / MIB)
    } else {
        format!("{}k", bytes / KIB)
    }
}

impl Job {
    /// fio's job name (`nvme0-randread-4k-qd1-polled-run1`).
    fn fio_name(&self, run: u32) -> String {
        let polled = if self.linux_polled { "-polled" } else { "" };
        let (device, rw, size) = (self.device.barebench_name(), self.rw, size_text(self.block_bytes));
        format!("{device}-{rw}-{size}-qd{}{polled}-run{run}", self.queue_depth)
    }

    /// barebench's `jobs=` entry (`randread:4k:1`).
    pub fn barebench_spec(&self) -> String {
        format!("{}:{}:{}", self.rw, size_text(self.block_bytes), self.queue_depth)
    }

    pub fn label(&self) -> String {
        let what = if self.rw == "randread" { "random read" } else { "sequential read" };
        let size = if self.block_bytes.is_multiple_of(MIB) {
            format!("{} MiB", self.block_bytes / MIB)
        } else {
            format!("{} KiB", self.block_bytes / KIB)
        };
        let polled = if self.linux_polled { " (Linux polled)" } else { "" };
        format!("{} {size} {what} QD{}{polled}", self.device.label(), self.queue_depth)
    }

    fn matches(&self, rw: &str, block_bytes: u64, queue_depth: u32) -> bool {
        self.rw == rw && self.block_bytes == block_bytes && self.queue_depth == queue_depth
    }
}

/// What both sides run: window, region and repetitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub ramp_ms: u64,
    pub runtime_ms: u64,
    pub runs: u32,
    pub offset_bytes: u64,
    pub size_bytes: u64,
}

/// fio's job file for `jobs` (one device): each job `runs` times, one after the other
/// (`stonewall`), O_DIRECT through io_uring, over the same region and window as barebench.
pub fn fio_job_file(jobs: &[Job], window: &Window) -> String {
    let mut text = format!(
        "[global]\nioengine=io_uring\ndirect=1\ntime_based=1\nramp_time={}ms\nruntime={}ms\n\
         offset={}\nsize={}\nnorandommap=1\nrandrepeat=0\n",
        window.ramp_ms, window.runtime_ms, window.offset_bytes, window.size_bytes
    );
    for run in 1..=window.runs {
        for job in jobs {
            text.push_str(&format!(
                "\n[{}]\nfilename={}\nrw={}\nbs={}\niodepth={}\n{}stonewall\n",
                job.fio_name(run),
                job.device.linux_path(),
                job.rw,
                job.block_bytes,
                job.queue_depth,
                if job.linux_polled { "hipri=1\n" } else { "" }
            ));
        }
    }
    text
}

/// barebench's settings for `jobs` (one device) over the same window.
pub fn barebench_settings(jobs: &[Job], window: &Window) -> String {
    let mut specs: Vec<String> = Vec::new();
    for spec in jobs.iter().map(Job::barebench_spec) {
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    let device = jobs.first().map_or("none", |job| job.device.barebench_name());
    format!(
        "preset=quick devices={device} jobs={} ramp={}ms runtime={}ms runs={} offset={} size={} check=off \
         progress=off nvme.measure=off",
        specs.join(","),
        window.ramp_ms,
        window.runtime_ms,
        window.runs,
        window.offset_bytes,
        window.size_bytes
    )
}

/// One side's figures for a row: medians over its runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub iops: f64,
    pub bytes_per_second: f64,
    /// Mean of `lat` (submission to completion), ns.
    pub mean_latency_ns: f64,
    pub runs: usize,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

/// The figures of `job` in `report`: its runs' medians, `None` when no run of it is there (or
/// none did any I/O). Jobs are told by device (`/dev/nvme0n1` for fio, `nvme0` for barebench),
/// `rw`, block size and queue depth, and fio's by `hipri` (barebench always polls).
pub fn figures(report: &FioReport, job: &Job) -> Option<Figures> {
    let polled_as_asked = |run: &FioJob| {
        let hipri = run.option(&report.global_options, "hipri").is_some_and(|value| value.trim() == "1");
        report.is_barebench() || hipri == job.linux_polled
    };
    let runs: Vec<&FioJob> = report
        .jobs
        .iter()
        .filter(|run| {
            let settings = &run.settings;
            let device = settings.device.as_deref().unwrap_or_default();
            (device == job.device.linux_path() || device == job.device.barebench_name())
                && job.matches(&settings.rw, settings.block_bytes, settings.queue_depth)
                && polled_as_asked(run)
                && run.error == 0
                && run.read.total_ios > 0
        })
        .collect();
    if runs.is_empty() {
        return None;
    }
    Some(Figures {
        iops: median(runs.iter().map(|run| run.read.iops).collect()),
        bytes_per_second: median(runs.iter().map(|run| run.read.bw_bytes as f64).collect()),
        mean_latency_ns: median(runs.iter().map(|run| run.read.lat_ns.mean).collect()),
        runs: runs.len(),
    })
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub job: Job,
    pub linux: Option<Figures>,
    pub barebench: Option<Figures>,
}

impl Row {
    /// barebench's IOPS over Linux's (> 1: barebench ahead).
    pub fn ratio(&self) -> Option<f64> {
        match (self.linux, self.barebench) {
            (Some(linux), Some(barebench)) if linux.iops > 0.0 => Some(barebench.iops / linux.iops),
            _ => None,
        }
    }

    /// Linux's mean latency over barebench's (> 1: barebench faster per I/O). At QD1 the fairer
    /// rate comparison for long I/Os: fio's bandwidth counts time up to the last completion after
    /// the window, barebench's only the I/Os completed inside it (docs/linux-compare.md §4).
    pub fn latency_ratio(&self) -> Option<f64> {
        match (self.linux, self.barebench) {
            (Some(linux), Some(barebench)) if barebench.mean_latency_ns > 0.0 => {
                Some(linux.mean_latency_ns / barebench.mean_latency_ns)
            }
            _ => None,
        }
    }
}

fn cells(figures: Option<Figures>) -> [String; 3] {
    match figures {
        Some(f) => [
            // Long reads run at a few per second: a decimal tells 2.4 from 2.6.
            if f.iops < 100.0 { format!("{:.1}", f.iops) } else { format!("{:.0}", f.iops) },
            format!("{:.2}", f.bytes_per_second / MIB as f64),
            format!("{:.1}", f.mean_latency_ns / 1000.0),
        ],
        None => ["-".into(), "-".into(), "-".into()],
    }
}

/// The table, as Markdown: row, Linux + fio IOPS, MiB/s and mean latency, barebench's, the
/// ratio of barebench's IOPS to Linux's and that of Linux's mean latency to barebench's.
pub fn render(rows: &[Row]) -> String {
    let mut text = String::from(
        "| row | Linux + fio IOPS | MiB/s | mean lat µs | barebench IOPS | MiB/s | mean lat µs | IOPS barebench / Linux | lat Linux / barebench |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let [linux_iops, linux_mib, linux_lat] = cells(row.linux);
        let [bare_iops, bare_mib, bare_lat] = cells(row.barebench);
        let ratio = |ratio: Option<f64>| ratio.map_or("-".to_string(), |ratio| format!("{ratio:.2}x"));
        let (iops_ratio, latency_ratio) = (ratio(row.ratio()), ratio(row.latency_ratio()));
        text.push_str(&format!(
            "| {} | {linux_iops} | {linux_mib} | {linux_lat} | {bare_iops} | {bare_mib} | {bare_lat} | {iops_ratio} | {latency_ratio} |\n",
            row.job.label()
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::fio_json::parse_fio_json;

    fn fio_document(jobs: &[(&str, &str, &str, u32, f64, u64, f64)]) -> String {
        let jobs: Vec<String> = jobs
            .iter()
            .map(|(filename, rw, bs, iodepth, iops, bw_bytes, lat_mean)| {
                format!(
                    r#"{{"jobname":"j","error":0,"job options":{{"filename":"{filename}","rw":"{rw}","bs":"{bs}","iodepth":"{iodepth}"}},
                    "read":{{"iops":{iops},"bw_bytes":{bw_bytes},"total_ios":100,"lat_ns":{{"mean":{lat_mean}}}}}}}"#
                )
            })
            .collect();
        format!(
            "note: fio printed this first\n{{\"fio version\":\"fio-3.33\",\"global options\":{{\"ioengine\":\"io_uring\"}},\"jobs\":[{}]}}",
            jobs.join(",")
        )
    }

    fn nvme_qd1() -> Job {
        JOBS[0]
    }

    fn row_named(label: &str) -> Job {
        *JOBS.iter().find(|job| job.label() == label).unwrap_or_else(|| panic!("no row {label}"))
    }

    #[test]
    fn fio_runs_of_a_job_give_their_medians_and_other_jobs_are_left_out() {
        let text = fio_document(&[
            ("/dev/nvme0n1", "randread", "4096", 1, 1000.0, 4_096_000, 900_000.0),
            ("/dev/nvme0n1", "randread", "4096", 1, 3000.0, 12_288_000, 300_000.0),
            ("/dev/nvme0n1", "randread", "4096", 1, 2000.0, 8_192_000, 500_000.0),
            ("/dev/nvme0n1", "randread", "4096", 32, 9000.0, 1, 1.0),
            ("/dev/mmcblk0", "randread", "4096", 1, 7.0, 1, 1.0),
        ]);
        let report = parse_fio_json(&text).unwrap();
        let figures = figures(&report, &nvme_qd1()).unwrap();
        assert_eq!(
            figures,
            Figures { iops: 2000.0, bytes_per_second: 8_192_000.0, mean_latency_ns: 500_000.0, runs: 3 }
        );
        assert!(
            super::figures(&report, &row_named("USB BOT 4 KiB random read QD1")).is_none(),
            "no USB job in the document"
        );
    }

    #[test]
    fn fio_s_polled_runs_are_their_own_row_and_barebench_s_one_job_serves_both() {
        let polled = row_named("NVMe 4 KiB random read QD1 (Linux polled)");
        let text = fio_document(&[
            ("/dev/nvme0n1", "randread", "4096", 1, 1000.0, 1, 1.0),
            ("/dev/nvme0n1", "randread", "4096", 1, 4000.0, 1, 1.0),
        ])
        .replacen(r#""iodepth":"1"}"#, r#""iodepth":"1","hipri":"1"}"#, 1);
        let report = parse_fio_json(&text).unwrap();
        assert_eq!(figures(&report, &polled).unwrap().iops, 1000.0);
        assert_eq!(figures(&report, &nvme_qd1()).unwrap().iops, 4000.0);
        let window = Window { ramp_ms: 1, runtime_ms: 1, runs: 1, offset_bytes: 0, size_bytes: MIB };
        let nvme: Vec<Job> = JOBS.iter().copied().filter(|job| job.device == DeviceKind::Nvme).collect();
        assert!(barebench_settings(&nvme, &window).contains(" jobs=randread:4k:1,randread:4k:32 "));
        let fio = fio_job_file(&nvme, &window);
        assert!(fio.contains("[nvme0-randread-4k-qd1-polled-run1]\nfilename=/dev/nvme0n1\nrw=randread\nbs=4096\niodepth=1\nhipri=1\n"), "{fio}");
        assert_eq!(fio.matches("hipri=1").count(), 2);
    }

    #[test]
    fn barebench_jobs_are_matched_by_its_device_name_and_its_used_sizes() {
        let text = r#"{"fio version":"barebench-0.1.0","jobs":[
            {"jobname":"sd0-read-1m-qd16","job options":{"rw":"read","bs":"1m","iodepth":"16"},
             "read":{"iops":5.0,"bw_bytes":5242880,"total_ios":10,"lat_ns":{"mean":2.0e8}},
             "barebench":{"device":"sd0","run":1,"block_bytes":1048576,"queue_depth":1}}]}"#;
        let report = parse_fio_json(text).unwrap();
        // The SD host clamps QD16 to 1: the row is the QD1 one.
        let figures = figures(&report, &row_named("SD 1 MiB sequential read QD1")).unwrap();
        assert_eq!(figures.iops, 5.0);
        assert_eq!(figures.runs, 1);
    }

    #[test]
    fn the_table_gives_both_sides_and_the_ratio_and_a_dash_for_what_is_missing() {
        let linux =
            Figures { iops: 2000.0, bytes_per_second: 8.0 * MIB as f64, mean_latency_ns: 480_000.0, runs: 1 };
        let barebench = Figures {
            iops: 3000.0,
            bytes_per_second: 12.0 * MIB as f64,
            mean_latency_ns: 320_500.0,
            runs: 1,
        };
        let rows = [
            Row { job: nvme_qd1(), linux: Some(linux), barebench: Some(barebench) },
            Row { job: row_named("SD 1 MiB sequential read QD1"), linux: Some(linux), barebench: None },
        ];
        assert_eq!(rows[0].ratio(), Some(1.5));
        assert_eq!(cells(Some(Figures { iops: 2.44, ..linux }))[0], "2.4");
        assert_eq!(rows[0].latency_ratio(), Some(480_000.0 / 320_500.0));
        let table = render(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(
            lines[2],
            "| NVMe 4 KiB random read QD1 | 2000 | 8.00 | 480.0 | 3000 | 12.00 | 320.5 | 1.50x | 1.50x |"
        );
        assert_eq!(lines[3], "| SD 1 MiB sequential read QD1 | 2000 | 8.00 | 480.0 | - | - | - | - | - |");
    }

    #[test]
    fn both_sides_get_the_same_jobs_window_and_region() {
        let window =
            Window { ramp_ms: 500, runtime_ms: 2000, runs: 2, offset_bytes: 0, size_bytes: 256 * MIB };
        let sd: Vec<Job> = JOBS.iter().copied().filter(|job| job.device == DeviceKind::Sd).collect();
        let settings = barebench_settings(&sd, &window);
        assert!(
            settings.contains("devices=sd0 jobs=randread:4k:1,read:1m:1 ramp=500ms runtime=2000ms runs=2"),
            "{settings}"
        );
        assert!(settings.contains("offset=0 size=268435456 check=off"), "{settings}");
        let fio = fio_job_file(&sd, &window);
        assert!(fio.contains("ramp_time=500ms\nruntime=2000ms\noffset=0\nsize=268435456\n"), "{fio}");
        assert!(fio.contains("direct=1") && fio.contains("ioengine=io_uring"));
        assert_eq!(fio.matches("filename=/dev/mmcblk0").count(), 4);
        assert_eq!(fio.matches("stonewall").count(), 4);
        assert!(
            fio.contains("[sd0-read-1m-qd1-run2]\nfilename=/dev/mmcblk0\nrw=read\nbs=1048576\niodepth=1\n")
        );
    }
}
