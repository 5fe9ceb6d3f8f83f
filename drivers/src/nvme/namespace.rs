//! An NVMe namespace as one block device spread over one or more I/O queue pairs (NVMe Base
//! Specification 1.4 §1.6.23 namespace, §4.1 queues: any SQ may carry commands for any
//! namespace).
//!
//! Spreading: each request goes to the queue pair with the fewest requests in flight; ties go
//! round robin, starting after the pair used last. At queue depth N over Q pairs each pair holds
//! about N/Q requests, and a pair slowed by large split requests does not hold up the others.
//! `max_in_flight` is the sum over the pairs; `kick()` rings each pair's doorbell (one write per
//! pair with new commands) and `poll()` visits the pairs round robin.
#![forbid(unsafe_code)]

use super::identify::NamespaceIdentity;
use super::io_queue::{IoQueuePair, QueueStatistics};
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::{check_request, BlockDevice, CommandDetail, Completion, Geometry, Request, SubmitError};
use hal::mmio::RegisterIo;
use hal::platform::Platform;

pub struct NamespaceDevice<'p, R: RegisterIo, P: Platform> {
    name: String,
    identity: NamespaceIdentity,
    pairs: Vec<IoQueuePair<'p, R, P>>,
    geometry: Geometry,
    next_pair: usize,
    next_poll: usize,
}

impl<'p, R: RegisterIo, P: Platform> NamespaceDevice<'p, R, P> {
    /// `pairs` must be non-empty and all read `identity`'s namespace.
    pub fn new(name: String, identity: NamespaceIdentity, pairs: Vec<IoQueuePair<'p, R, P>>) -> Self {
        assert!(!pairs.is_empty(), "a namespace device needs a queue pair");
        let mut geometry = pairs[0].geometry();
        geometry.max_in_flight = pairs.iter().map(|p| p.geometry().max_in_flight).sum();
        NamespaceDevice { name, identity, pairs, geometry, next_pair: 0, next_poll: 0 }
    }

    pub fn identity(&self) -> &NamespaceIdentity {
        &self.identity
    }

    pub fn pairs(&self) -> &[IoQueuePair<'p, R, P>] {
        &self.pairs
    }

    /// The pairs' counters added up.
    pub fn statistics(&self) -> QueueStatistics {
        let mut total = QueueStatistics::default();
        for pair in &self.pairs {
            total.add(pair.statistics());
        }
        total
    }

    /// `submit` over several pairs (out of line: a namespace on one pair, the usual case, goes
    /// straight to it with no more saved registers than that path needs).
    #[inline(never)]
    fn submit_spread(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        let index = self.least_busy_pair();
        self.pairs[index].submit_checked(request)?;
        self.next_pair = (index + 1) % self.pairs.len();
        Ok(())
    }

    /// `kick` over several pairs: one doorbell write per pair with new commands.
    #[inline(never)]
    fn kick_each(&mut self) {
        for pair in &mut self.pairs {
            pair.kick();
        }
    }

    /// `poll_detailed` over several pairs, round robin.
    #[inline(never)]
    fn poll_each(&mut self, completions: &mut [Completion], details: &mut [CommandDetail]) -> usize {
        let count = self.pairs.len();
        let mut produced = 0;
        for step in 0..count {
            if produced == completions.len() {
                break;
            }
            let index = (self.next_poll + step) % count;
            let details = details.get_mut(produced..).unwrap_or_default();
            produced += self.pairs[index].poll_detailed(&mut completions[produced..], details);
        }
        self.next_poll = (self.next_poll + 1) % count;
        produced
    }

    fn least_busy_pair(&self) -> usize {
        let count = self.pairs.len();
        (0..count)
            .map(|step| (self.next_pair + step) % count)
            .min_by_key(|index| self.pairs[*index].requests_in_flight())
            .unwrap_or(0)
    }
}

impl<R: RegisterIo, P: Platform> BlockDevice for NamespaceDevice<'_, R, P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if let Err(error) = check_request(&self.geometry, &request) {
            return Err((request, error));
        }
        // Checked once here: every pair has the namespace's blocks and request limit.
        if let [pair] = self.pairs.as_mut_slice() {
            return pair.submit_checked(request);
        }
        self.submit_spread(request)
    }

    fn take_unreported_failures(&mut self) -> u64 {
        self.pairs.iter_mut().map(|pair| pair.take_unreported_failures()).sum()
    }

    /// NVMe Flush acts on the namespace, whichever queue carries it (NVMe 1.4 §6.8).
    fn flush_support(&self) -> blockdev::FlushSupport {
        blockdev::FlushSupport::Command
    }

    fn kick(&mut self) {
        if let [pair] = self.pairs.as_mut_slice() {
            return pair.kick();
        }
        self.kick_each();
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        if let [pair] = self.pairs.as_mut_slice() {
            return pair.poll_detailed(completions, &mut []);
        }
        self.poll_each(completions, &mut [])
    }

    fn poll_detailed(&mut self, completions: &mut [Completion], details: &mut [CommandDetail]) -> usize {
        if let [pair] = self.pairs.as_mut_slice() {
            return pair.poll_detailed(completions, details);
        }
        self.poll_each(completions, details)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::super::controller::{Controller, DepthChoice};
    use super::super::events::DiscardEvents;
    use super::super::sim::{pattern_bytes, NvmeArena, SimConfig, SimController, SimPlatform};
    use super::*;
    use blockdev::{Clock, DmaBuffer, Operation};
    use std::string::ToString;
    use std::vec::Vec as StdVec;

    #[test]
    fn writes_and_flushes_pass_through_the_namespace() {
        let platform = SimPlatform::for_nvme(64 << 20);
        let sim = SimController::new(&platform, SimConfig { accept_writes: true, ..SimConfig::default() });
        let mut controller = Controller::bring_up(
            &sim,
            sim.register_bytes(),
            &platform,
            platform.translation(),
            &DiscardEvents,
            "nvme 00:02.0".to_string(),
        )
        .unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(1).unwrap();
        let depth = DepthChoice::new(8, controller.capabilities());
        let pair = controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string()).unwrap();
        let mut device = NamespaceDevice::new("nvme0".to_string(), namespaces[0], alloc::vec![pair]);
        let buffer = platform.allocate_dma(4096, 4096).unwrap();
        platform.cpu_write(&buffer, &[0x5A; 4096]);
        device
            .submit(Request { tag: 1, operation: Operation::Write, lba: 8, block_count: 8, buffer })
            .unwrap();
        let flush = DmaBuffer { length_bytes: 0, ..buffer };
        device
            .submit(Request { tag: 2, operation: Operation::Flush, lba: 0, block_count: 0, buffer: flush })
            .unwrap();
        device.kick();
        let mut out = [Completion::default(); 4];
        let mut done = 0;
        for _ in 0..100_000 {
            platform.now_ticks();
            done += device.poll(&mut out[done..]);
            if done == 2 {
                break;
            }
        }
        assert_eq!(done, 2);
        assert_eq!(sim.written_block(1, 15), Some(alloc::vec![0x5A; 512]));
        assert_eq!(sim.statistics().flushes, 1);
        assert_eq!(device.flush_support(), blockdev::FlushSupport::Command);
        sim.assert_no_violations();
    }

    #[test]
    fn requests_spread_over_the_pairs_and_all_come_back_right() {
        let platform = SimPlatform::for_nvme(64 << 20);
        let sim = SimController::new(&platform, SimConfig::default());
        let mut controller = Controller::bring_up(
            &sim,
            sim.register_bytes(),
            &platform,
            platform.translation(),
            &DiscardEvents,
            "nvme 00:02.0".to_string(),
        )
        .unwrap();
        let namespaces = controller.active_namespaces().unwrap();
        controller.request_io_queues(2).unwrap();
        let depth = DepthChoice::new(9, controller.capabilities());
        let pairs = (0..2)
            .map(|_| controller.create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string()).unwrap())
            .collect();
        let mut device = NamespaceDevice::new("nvme0".to_string(), namespaces[0], pairs);
        assert_eq!(device.geometry().max_in_flight, 16, "two pairs of 8");
        let buffer = platform.allocate_dma(16 * 65536, 4096).unwrap();
        let slot = |index: usize| buffer.slice(index * 65536, 65536).unwrap();
        let request = |tag: u32, data: DmaBuffer| Request {
            tag,
            operation: Operation::Read,
            lba: u64::from(tag) * 128,
            block_count: 128,
            buffer: data,
        };
        // Which buffer slot each tag reads into; a finished tag's slot goes to the next tag.
        let mut slot_of = [0usize; 64];
        sim.reset_statistics();
        sim.hold_io_completions(true);
        for tag in 0..16u32 {
            slot_of[tag as usize] = tag as usize;
            device.submit(request(tag, slot(tag as usize))).unwrap();
        }
        assert_eq!(device.submit(request(99, slot(0))).unwrap_err().1, SubmitError::QueueFull);
        assert_eq!(device.pairs()[0].requests_in_flight(), 8);
        assert_eq!(device.pairs()[1].requests_in_flight(), 8);
        device.kick();
        assert_eq!(sim.statistics().sq_doorbell_writes, 2, "one per pair");
        let mut out = [Completion::default(); 4];
        let mut seen = StdVec::new();
        let mut next_tag = 16u32;
        let mut polls = 0;
        while seen.len() < 64 {
            polls += 1;
            assert!(polls < 100_000, "stuck after {} completions", seen.len());
            sim.release_held(3);
            let n = device.poll(&mut out);
            for completion in &out[..n] {
                assert_eq!(completion.result, Ok(()));
                let free_slot = slot_of[completion.tag as usize];
                let data = platform.bytes_of(&slot(free_slot));
                assert!(
                    data == pattern_bytes(u64::from(completion.tag) * 65536, 65536),
                    "tag {}",
                    completion.tag
                );
                seen.push(completion.tag);
                if next_tag < 64 {
                    slot_of[next_tag as usize] = free_slot;
                    device.submit(request(next_tag, slot(free_slot))).unwrap();
                    next_tag += 1;
                }
            }
            device.kick();
        }
        let per_queue = sim.statistics().reads_per_queue;
        assert_eq!(per_queue.len(), 2);
        for (queue, reads) in per_queue {
            assert!((24..=40).contains(&reads), "queue {queue}: {reads} reads");
        }
        assert_eq!(device.statistics().requests_completed, 64);
        sim.assert_no_violations();
    }
}
