//! The jobs that are not fio's: the whole-surface scan, the sustained write and hdparm's figures
//! (docs/surface-and-sustained.md). Each runs once per device (hdparm `runs=` times) as a
//! [`crate::stream`] with an observer of its own, keeps a bounded record and prints it; the
//! runner hands them over from its job loop ([`crate::runner`]).

use blockdev::BlockDevice;

use crate::console::Console;
use crate::results::{BenchmarkResults, RunEnd};
use crate::run_loop::RunEnvironment;
use crate::settings::{Config, JobOperation};
use crate::stream_plan::StreamLabel;

/// Runs a scan, sustained or hdparm job on one device and keeps its results; returns how the
/// last stream ended early, if it did (the runner then stops using the device or the clock).
pub(crate) fn run_on_device(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    config: &Config,
    label: &StreamLabel<'_>,
    results: &mut BenchmarkResults,
    console: &mut dyn Console,
) -> Option<RunEnd> {
    match label.job.operation {
        JobOperation::Scan => {
            let (scan, ended) = crate::scan::run(device, environment, config, label, console)?;
            results.scans.push(scan);
            ended
        }
        JobOperation::Sustained => {
            let (sustained, ended) = crate::sustained::run(device, environment, config, label, console)?;
            results.sustained.push(sustained);
            ended
        }
        JobOperation::Hdparm => {
            for run in 1..=config.runs {
                let (hdparm, ended) = crate::hdparm::run(device, environment, label, run, console)?;
                results.hdparm.push(hdparm);
                if ended.is_some() {
                    return ended;
                }
            }
            None
        }
        _ => None,
    }
}
