//! What the scan, the sustained write and hdparm's `-t` share before they stream: which job on
//! which device, the request size and queue depth fitted to the device, and whether each request
//! in flight has a buffer of its own (docs/surface-and-sustained.md §1).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::Geometry;

use crate::plan::{check_geometry, fit_queue_depth, DevicePlan, JobPlanError};
use crate::settings::JobSpec;
use crate::units::SizeText;

/// Which job, on which device.
#[derive(Clone, Copy)]
pub(crate) struct StreamLabel<'a> {
    pub job_index: usize,
    pub job: &'a JobSpec,
    pub device_index: usize,
}

/// A request size and queue depth for streaming `job` through `region` of a device: requests
/// of `job.block_bytes` (whole logical blocks) or of the most one request may carry, the queue
/// depth clamped to what the device keeps in flight; each change is said in `notes`.
pub(crate) fn fit_stream(
    job: &JobSpec,
    geometry: &Geometry,
    (region_offset_bytes, region_size_bytes): (u64, u64),
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<DevicePlan, JobPlanError> {
    check_geometry(geometry)?;
    let logical = u64::from(geometry.logical_block_bytes);
    let unit_bytes = job.block_bytes.div_ceil(logical) * logical;
    let request_bytes = unit_bytes.min(u64::from(geometry.max_request_blocks) * logical);
    if request_bytes < unit_bytes {
        notes.push(format!(
            "{device_name}: each {} is read or written in requests of {} (the most one request may carry)",
            SizeText(unit_bytes),
            SizeText(request_bytes)
        ));
    }
    let queue_depth = fit_queue_depth(job.queue_depth, geometry, device_name, notes);
    let start = region_offset_bytes.div_ceil(logical) * logical;
    let end = (region_offset_bytes + region_size_bytes) / logical * logical;
    if end <= start {
        return Err(JobPlanError::RegionTooSmall {
            region_offset_bytes,
            region_size_bytes,
            block_bytes: logical,
        });
    }
    Ok(DevicePlan {
        block_bytes: request_bytes,
        blocks_per_request: (request_bytes / logical) as u32,
        queue_depth,
        region_offset_bytes: start,
        region_size_bytes: end - start,
        block_slots: (end - start).div_ceil(request_bytes),
    })
}

/// Whether every request in flight has a buffer of its own in `buffer_bytes`; `Err` when not
/// even one request fits.
pub(crate) fn own_buffers(plan: &DevicePlan, buffer_bytes: usize) -> Result<bool, JobPlanError> {
    let buffers = buffer_bytes as u64 / plan.block_bytes;
    if buffers == 0 {
        return Err(JobPlanError::BufferTooSmall { buffer_bytes, block_bytes: plan.block_bytes });
    }
    Ok(buffers >= u64::from(plan.queue_depth))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::{nvme_geometry, sd_geometry};
    use crate::settings::JobOperation;
    use crate::units::MIB;

    #[test]
    fn requests_and_depth_fit_the_device_and_the_region_whole_blocks() {
        let mut notes = Vec::new();
        let scan = JobSpec::new(JobOperation::Scan, 4 * MIB, 16);
        let plan = fit_stream(&scan, &nvme_geometry(), (1000, 8 * MIB), "nvme0", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.queue_depth), (128 << 10, 16));
        assert_eq!((plan.region_offset_bytes, plan.region_size_bytes), (1024, 8 * MIB + 1000 - 1024 - 488));
        assert!(notes[0].contains("each 4m is read or written in requests of 128k"), "{notes:?}");
        notes.clear();
        let plan = fit_stream(&scan, &sd_geometry(), (0, 64 * MIB), "sd0", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.queue_depth), (4 * MIB, 1));
        assert!(
            notes[0].contains(
                "sd0 has no command queueing (one request in flight): running at queue depth 1 instead of 16"
            ),
            "{notes:?}"
        );
        assert!(fit_stream(&scan, &sd_geometry(), (100, 200), "sd0", &mut notes).is_err());
        assert_eq!(own_buffers(&plan, 4 * MIB as usize), Ok(true));
        assert!(own_buffers(&plan, 4096).is_err());
    }
}
