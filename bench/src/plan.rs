//! How a job runs on one device: the block size, queue depth and region fitted to what the
//! device reports, every change described, and the DMA buffer area the jobs need
//! (docs/architecture.md "What is measured").

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{DmaBuffer, Geometry};

use crate::region::Region;
use crate::settings::{Config, JobSpec};
use crate::units::SizeText;

/// How one job runs on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePlan {
    pub block_bytes: u64,
    pub blocks_per_request: u32,
    pub queue_depth: u32,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Whole blocks of `block_bytes` in the region (offsets are `region_offset + k × block_bytes`).
    pub block_slots: u64,
}

/// Why a job cannot run on a device at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JobPlanError {
    /// The geometry describes no readable blocks.
    #[error("the device reports {block_count} blocks of {logical_block_bytes} bytes; nothing to read")]
    NoBlocks { block_count: u64, logical_block_bytes: u32 },
    /// The geometry allows no request at all.
    #[error(
        "the device accepts requests of at most {max_request_blocks} blocks with {max_in_flight} in flight"
    )]
    NoRequests { max_request_blocks: u32, max_in_flight: u32 },
    /// The region (after fitting it to the device) holds no whole block.
    #[error(
        "the region of {region_size_bytes} bytes at {region_offset_bytes} holds no whole block of {}",
        SizeText(*.block_bytes)
    )]
    RegionTooSmall { region_offset_bytes: u64, region_size_bytes: u64, block_bytes: u64 },
    /// The DMA buffer area cannot hold one block.
    #[error("the buffer area of {buffer_bytes} bytes cannot hold one block of {}", SizeText(*.block_bytes))]
    BufferTooSmall { buffer_bytes: usize, block_bytes: u64 },
}

/// Adapts `job` to a device: block size rounded up to the logical block and clamped to what one
/// request may carry, queue depth clamped to `max_in_flight`, region moved or shrunk to fit the
/// device and its start aligned to the block size. Every change is described in `notes`.
/// `Err` says why the job cannot run on this device at all.
pub fn plan_job(
    job: &JobSpec,
    config: &Config,
    geometry: &Geometry,
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<DevicePlan, JobPlanError> {
    check_geometry(geometry)?;
    let block_bytes = fit_block_size(job.block_bytes, geometry, device_name, notes);
    let queue_depth = fit_queue_depth(job.queue_depth, geometry, device_name, notes);
    let region = fit_region(config, geometry, device_name, notes);
    let (region, block_slots) = align_region(region, block_bytes, device_name, notes)?;
    Ok(DevicePlan {
        block_bytes,
        blocks_per_request: (block_bytes / u64::from(geometry.logical_block_bytes)) as u32,
        queue_depth,
        region_offset_bytes: region.offset_bytes,
        region_size_bytes: region.size_bytes,
        block_slots,
    })
}

/// The region of `config` on device `device_name` of this geometry, before any job aligns it to
/// its block size (what the kernel samples before the first run); `None` for a device with no
/// blocks.
pub fn device_region(config: &Config, geometry: &Geometry, device_name: &str) -> Option<Region> {
    check_geometry(geometry).ok()?;
    Some(fit_region(config, geometry, device_name, &mut Vec::new()))
}

/// `Err` when the geometry has no blocks or takes no requests (also crate::stream_plan's check).
pub(crate) fn check_geometry(geometry: &Geometry) -> Result<(), JobPlanError> {
    if geometry.logical_block_bytes == 0 || geometry.block_count == 0 {
        return Err(JobPlanError::NoBlocks {
            block_count: geometry.block_count,
            logical_block_bytes: geometry.logical_block_bytes,
        });
    }
    if geometry.max_request_blocks == 0 || geometry.max_in_flight == 0 {
        return Err(JobPlanError::NoRequests {
            max_request_blocks: geometry.max_request_blocks,
            max_in_flight: geometry.max_in_flight,
        });
    }
    Ok(())
}

/// The block size rounded up to whole logical blocks, then down to one request's limit.
fn fit_block_size(asked_bytes: u64, geometry: &Geometry, device_name: &str, notes: &mut Vec<String>) -> u64 {
    let logical_block_bytes = u64::from(geometry.logical_block_bytes);
    let mut block_bytes = asked_bytes;
    if !block_bytes.is_multiple_of(logical_block_bytes) {
        let rounded = block_bytes.div_ceil(logical_block_bytes) * logical_block_bytes;
        notes.push(format!(
            "{device_name}: block size {} is not a multiple of its {logical_block_bytes}-byte \
             logical block; using {}",
            SizeText(block_bytes),
            SizeText(rounded)
        ));
        block_bytes = rounded;
    }
    let max_request_bytes = u64::from(geometry.max_request_blocks) * logical_block_bytes;
    if block_bytes > max_request_bytes {
        notes.push(format!(
            "{device_name}: block size {} is more than one request may carry ({} = {} blocks of \
             {logical_block_bytes} bytes); using {}",
            SizeText(block_bytes),
            SizeText(max_request_bytes),
            geometry.max_request_blocks,
            SizeText(max_request_bytes)
        ));
        block_bytes = max_request_bytes;
    }
    block_bytes
}

/// The queue depth clamped to what the device keeps in flight (also crate::stream_plan's).
pub(crate) fn fit_queue_depth(
    asked: u32,
    geometry: &Geometry,
    device_name: &str,
    notes: &mut Vec<String>,
) -> u32 {
    let queue_depth = asked.min(geometry.max_in_flight);
    if queue_depth == asked {
        return queue_depth;
    }
    if queue_depth == 1 {
        notes.push(format!(
            "{device_name} has no command queueing (one request in flight): running at queue \
             depth 1 instead of {asked}"
        ));
    } else {
        notes.push(format!(
            "{device_name}: queue depth {asked} is more than the {queue_depth} requests it can \
             have in flight; using {queue_depth}"
        ));
    }
    queue_depth
}

/// The configured region, shrunk to the whole device or moved to end at its end when it does
/// not fit. On a device with a pattern region (`Config::pattern_regions`) "the device" is that
/// region: `offset=` counts from its start and the region stays inside it.
fn fit_region(config: &Config, geometry: &Geometry, device_name: &str, notes: &mut Vec<String>) -> Region {
    let capacity_bytes = geometry.capacity_bytes();
    let bounds = config
        .pattern_region(device_name)
        .filter(|pattern| {
            pattern.size_bytes > 0 && pattern.offset_bytes + pattern.size_bytes <= capacity_bytes
        })
        .unwrap_or(Region { offset_bytes: 0, size_bytes: capacity_bytes });
    let whole = if bounds.offset_bytes == 0 && bounds.size_bytes == capacity_bytes {
        "the whole device"
    } else {
        "the whole pattern region"
    };
    let (offset_bytes, size_bytes) = (config.offset_bytes, config.size_bytes);
    if size_bytes >= bounds.size_bytes {
        if (offset_bytes, size_bytes) != (0, bounds.size_bytes) {
            notes.push(format!(
                "{device_name}: region {} at {} does not fit its {}; using {whole}",
                SizeText(size_bytes),
                SizeText(offset_bytes),
                SizeText(bounds.size_bytes)
            ));
        }
        return bounds;
    }
    if offset_bytes > bounds.size_bytes - size_bytes {
        let moved = bounds.size_bytes - size_bytes;
        notes.push(format!(
            "{device_name}: region {} at {} ends beyond its {}; moved to start at {} bytes",
            SizeText(size_bytes),
            SizeText(offset_bytes),
            SizeText(bounds.size_bytes),
            bounds.offset_bytes + moved
        ));
        return Region { offset_bytes: bounds.offset_bytes + moved, size_bytes };
    }
    Region { offset_bytes: bounds.offset_bytes + offset_bytes, size_bytes }
}

/// The region's start aligned up to the block size and its size cut to whole blocks; returns
/// the region and its number of blocks.
fn align_region(
    region: Region,
    block_bytes: u64,
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<(Region, u64), JobPlanError> {
    let region_end = region.offset_bytes + region.size_bytes;
    let aligned_offset = region.offset_bytes.div_ceil(block_bytes) * block_bytes;
    let block_slots = region_end.saturating_sub(aligned_offset) / block_bytes;
    if block_slots == 0 {
        return Err(JobPlanError::RegionTooSmall {
            region_offset_bytes: region.offset_bytes,
            region_size_bytes: region.size_bytes,
            block_bytes,
        });
    }
    if aligned_offset != region.offset_bytes {
        notes.push(format!(
            "{device_name}: region start {} aligned up to {aligned_offset} (a multiple of the \
             block size)",
            region.offset_bytes
        ));
    }
    Ok((Region { offset_bytes: aligned_offset, size_bytes: block_slots * block_bytes }, block_slots))
}

/// Checks that the buffer area holds at least one block, and says when requests must share.
pub fn fit_buffer(
    plan: &DevicePlan,
    buffer_area: &DmaBuffer,
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<DevicePlan, JobPlanError> {
    let buffers = buffer_area.length_bytes as u64 / plan.block_bytes;
    if buffers == 0 {
        return Err(JobPlanError::BufferTooSmall {
            buffer_bytes: buffer_area.length_bytes,
            block_bytes: plan.block_bytes,
        });
    }
    if buffers < u64::from(plan.queue_depth) {
        notes.push(format!(
            "{device_name}: requests share {buffers} buffers of {} (the buffer area is {} bytes; \
             queue depth {} × {} would need {}); reads only, so this does not change what is \
             measured",
            SizeText(plan.block_bytes),
            buffer_area.length_bytes,
            plan.queue_depth,
            SizeText(plan.block_bytes),
            u64::from(plan.queue_depth) * plan.block_bytes
        ));
    }
    Ok(*plan)
}

/// The DMA buffer area that lets every request of every job have a buffer of its own: the
/// largest queue depth × block size over the jobs and the given devices. A smaller area
/// works (requests then share buffers), down to [`minimum_buffer_bytes`].
pub fn buffer_bytes_needed(config: &Config, geometries: &[Geometry]) -> usize {
    largest_plan_bytes(config, geometries, |plan| {
        plan.block_bytes.saturating_mul(u64::from(plan.queue_depth))
    })
}

/// The smallest DMA buffer area with which every job can run: its largest block size.
pub fn minimum_buffer_bytes(config: &Config, geometries: &[Geometry]) -> usize {
    largest_plan_bytes(config, geometries, |plan| plan.block_bytes)
}

fn largest_plan_bytes(
    config: &Config,
    geometries: &[Geometry],
    bytes_of: impl Fn(&DevicePlan) -> u64,
) -> usize {
    let mut ignored_notes = Vec::new();
    let mut largest = 0u64;
    for job in &config.jobs {
        for geometry in geometries {
            if let Ok(plan) = plan_job(job, config, geometry, "", &mut ignored_notes) {
                largest = largest.max(bytes_of(&plan));
            }
            ignored_notes.clear();
        }
    }
    usize::try_from(largest).unwrap_or(usize::MAX)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::{JobOperation, Preset};
    use alloc::string::ToString;
    use std::vec;

    pub(crate) fn nvme_geometry() -> Geometry {
        Geometry {
            logical_block_bytes: 512,
            block_count: 8 << 21, // 8 GiB
            max_request_blocks: 256,
            max_in_flight: 63,
        }
    }

    pub(crate) fn sd_geometry() -> Geometry {
        Geometry {
            logical_block_bytes: 512,
            block_count: 1 << 21, // 1 GiB
            max_request_blocks: 65_535,
            max_in_flight: 1,
        }
    }

    fn config() -> Config {
        let mut config = Config::for_preset(Preset::Reference);
        config.offset_bytes = 0;
        config.size_bytes = 64 << 20;
        config
    }

    #[test]
    fn jobs_are_adapted_to_each_device_with_a_message() {
        let config = config();
        let mut notes = Vec::new();
        let sd_job = JobSpec::new(JobOperation::RandRead, 4096, 32);
        let plan = plan_job(&sd_job, &config, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!(plan.queue_depth, 1);
        assert_eq!(
            notes,
            vec![String::from(
                "sd0 has no command queueing (one request in flight): running at queue depth 1 \
                 instead of 32"
            )]
        );

        notes.clear();
        let big = JobSpec::new(JobOperation::Read, 1 << 20, 100);
        let plan = plan_job(&big, &config, &nvme_geometry(), "nvme0", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.blocks_per_request), (128 << 10, 256));
        assert_eq!(plan.queue_depth, 63);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("more than one request may carry (128k = 256 blocks"));
        assert!(notes[1].contains("queue depth 100 is more than the 63 requests"));

        notes.clear();
        let mut four_k = nvme_geometry();
        four_k.logical_block_bytes = 4096;
        let small = JobSpec::new(JobOperation::RandRead, 512, 1);
        let plan = plan_job(&small, &config, &four_k, "nvme1", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.blocks_per_request), (4096, 1));
        assert!(notes[0].contains("block size 512 is not a multiple of its 4096-byte"));
    }

    #[test]
    fn regions_are_fitted_to_the_device_and_aligned_to_the_block_size() {
        let config = config();
        let sd_job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let big = JobSpec::new(JobOperation::Read, 1 << 20, 100);
        let mut notes = Vec::new();
        // The reference region (2 GiB at 1 GiB) on a 1 GiB card: the whole card.
        let reference = Config::default();
        let plan = plan_job(&sd_job, &reference, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!((plan.region_offset_bytes, plan.region_size_bytes), (0, 1 << 30));
        assert_eq!(
            notes,
            vec![String::from("sd0: region 2g at 1g does not fit its 1g; using the whole device")]
        );
        assert_eq!(
            device_region(&reference, &sd_geometry(), "sd0"),
            Some(Region { offset_bytes: 0, size_bytes: 1 << 30 })
        );

        // 256 MiB at 900 MiB on a 1 GiB card: moved to end at the end of the card.
        notes.clear();
        let mut shifted = config.clone();
        shifted.offset_bytes = 900 << 20;
        shifted.size_bytes = 256 << 20;
        let plan = plan_job(&sd_job, &shifted, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!(plan.region_offset_bytes, 768 << 20);
        assert_eq!(plan.block_slots, (256 << 20) / 4096);
        assert!(notes[0].contains("moved to start at 805306368 bytes"));

        // An unaligned region start is aligned up to the block size.
        notes.clear();
        let mut unaligned = config.clone();
        unaligned.offset_bytes = 1000;
        let plan = plan_job(&big, &unaligned, &nvme_geometry(), "nvme0", &mut notes).unwrap();
        assert_eq!(plan.region_offset_bytes, 128 << 10);
        assert!(notes.iter().any(|n| n.contains("region start 1000 aligned up to 131072")));
        // The sampled region is the one asked for, before any job's alignment.
        assert_eq!(
            device_region(&unaligned, &nvme_geometry(), "nvme0"),
            Some(Region { offset_bytes: 1000, size_bytes: 64 << 20 })
        );
    }

    #[test]
    fn a_device_with_a_pattern_region_reads_inside_it() {
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let mut notes = Vec::new();
        let mut config = config();
        let pattern = Region { offset_bytes: 300 << 20, size_bytes: 200 << 20 };
        config.pattern_regions.push((String::from("sd0"), pattern));
        // offset= counts from the pattern region's start.
        config.offset_bytes = 16 << 20;
        config.size_bytes = 64 << 20;
        let plan = plan_job(&job, &config, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!((plan.region_offset_bytes, plan.region_size_bytes), (316 << 20, 64 << 20));
        // Another device keeps the configured region.
        let plan = plan_job(&job, &config, &sd_geometry(), "sd1", &mut notes).unwrap();
        assert_eq!(plan.region_offset_bytes, 16 << 20);
        // Too big for the pattern region: the whole of it, said so.
        config.size_bytes = 1 << 30;
        assert_eq!(device_region(&config, &sd_geometry(), "sd0"), Some(pattern));
        plan_job(&job, &config, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert!(
            notes.last().unwrap().ends_with("does not fit its 200m; using the whole pattern region"),
            "{notes:?}"
        );
        // Ending past the pattern region: moved to end at its end.
        config.size_bytes = 100 << 20;
        config.offset_bytes = 150 << 20;
        assert_eq!(
            device_region(&config, &sd_geometry(), "sd0"),
            Some(Region { offset_bytes: 400 << 20, size_bytes: 100 << 20 })
        );
        // A pattern region that does not fit the device is ignored.
        config.pattern_regions[0].1 = Region { offset_bytes: 1 << 30, size_bytes: 1 << 20 };
        assert_eq!(device_region(&config, &sd_geometry(), "sd0").unwrap().offset_bytes, 150 << 20);
    }

    #[test]
    fn impossible_plans_say_why() {
        let config = config();
        let big = JobSpec::new(JobOperation::Read, 1 << 20, 100);
        let mut notes = Vec::new();
        let mut tiny = config.clone();
        tiny.size_bytes = 4096;
        let error = plan_job(&big, &tiny, &nvme_geometry(), "nvme0", &mut notes).unwrap_err();
        assert_eq!(
            error,
            JobPlanError::RegionTooSmall {
                region_offset_bytes: 0,
                region_size_bytes: 4096,
                block_bytes: 128 << 10
            }
        );
        assert!(error.to_string().contains("holds no whole block of 128k"));
        let broken = Geometry { max_in_flight: 0, ..nvme_geometry() };
        assert_eq!(
            plan_job(&big, &config, &broken, "x", &mut notes),
            Err(JobPlanError::NoRequests { max_request_blocks: 256, max_in_flight: 0 })
        );
        let empty = Geometry { block_count: 0, ..nvme_geometry() };
        assert!(matches!(
            plan_job(&big, &config, &empty, "x", &mut notes),
            Err(JobPlanError::NoBlocks { block_count: 0, .. })
        ));
        assert_eq!(device_region(&config, &empty, "sd0"), None);
    }

    #[test]
    fn buffer_sizes_cover_the_deepest_job_or_at_least_one_block() {
        let mut config = config();
        config.jobs = vec![JobSpec::new(JobOperation::Read, 64 << 10, 16)];
        let geometries = [nvme_geometry(), sd_geometry()];
        assert_eq!(buffer_bytes_needed(&config, &geometries), 16 * (64 << 10));
        assert_eq!(minimum_buffer_bytes(&config, &geometries), 64 << 10);
        let plan = plan_job(&config.jobs[0], &config, &nvme_geometry(), "nvme0", &mut Vec::new()).unwrap();
        let area = |length_bytes| DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes };
        let mut notes = Vec::new();
        assert_eq!(fit_buffer(&plan, &area(1 << 20), "nvme0", &mut notes), Ok(plan));
        assert!(notes.is_empty());
        assert_eq!(fit_buffer(&plan, &area(4 * (64 << 10)), "nvme0", &mut notes), Ok(plan));
        assert!(notes[0].starts_with("nvme0: requests share 4 buffers of 64k"), "{notes:?}");
        assert_eq!(
            fit_buffer(&plan, &area(1000), "nvme0", &mut notes),
            Err(JobPlanError::BufferTooSmall { buffer_bytes: 1000, block_bytes: 64 << 10 })
        );
    }
}
