//! Command queueing against the simulated controller and an A2 card (`sim.rs`, `sim/queue.rs`):
//! what a card advertises (or that QEMU's card has no queue), switching the queue on, several
//! reads and writes in flight as tasks the card runs in its own order, a task the card refuses
//! failing alone, and a card whose queue is left off answering exactly as before (SD Physical
//! Layer 6.00 command queue; crate::sd::command_queue).
#![forbid(unsafe_code)]

extern crate std;

use super::super::device::SdCard;
use super::super::sim::{SimHost, TestPlatform};
use crate::sd::command_queue::QueueSupport;
use crate::sd::options::{Cmd23Request, ModeRequest};
use crate::sd::sim_card::{QueueOrder, SimCard, SimQueue};
use blockdev::{BlockDevice, Completion, DmaBuffer, IoErrorKind, Operation, Request};
use hal::platform::Platform;
use std::string::ToString;
use std::vec::Vec;

type Device = SdCard<'static, &'static SimHost<'static>, TestPlatform>;

const CAPACITY_BYTES: u64 = 64 << 20;
const MAX_POLLS: u32 = 10_000_000;

fn setup(card: SimCard, mode: ModeRequest) -> (&'static TestPlatform, &'static SimHost<'static>, Device) {
    super::writes::setup(card, mode, Cmd23Request::Auto)
}

fn queued_card(order: QueueOrder, failing_lba: Option<u64>) -> SimCard {
    SimCard::with_command_queue(CAPACITY_BYTES, SimQueue { depth: 8, order, failing_lba })
}

/// Submits every request, kicks once, and polls until each has completed; the completions in
/// the order they came.
fn run_all(device: &mut Device, requests: &[Request]) -> Vec<Completion> {
    for request in requests {
        device.submit(*request).unwrap();
    }
    device.kick();
    let mut done = Vec::new();
    let mut completions = [Completion::default(); 4];
    for _ in 0..MAX_POLLS {
        let count = device.poll(&mut completions);
        done.extend_from_slice(&completions[..count]);
        if done.len() == requests.len() {
            return done;
        }
    }
    panic!("{} of {} requests completed", done.len(), requests.len());
}

/// Eight requests of `blocks` blocks, 1 MiB apart, each with a buffer of its own.
fn requests(platform: &TestPlatform, operation: Operation, blocks: u32) -> Vec<Request> {
    (0..8u32)
        .map(|tag| {
            let buffer = platform.allocate_dma(blocks as usize * 512, 4096).unwrap();
            Request { tag, operation, lba: u64::from(tag) * 2048 + 8, block_count: blocks, buffer }
        })
        .collect()
}

fn assert_pattern(platform: &TestPlatform, buffer: &DmaBuffer, lba: u64) {
    let bytes = platform.cpu_read(buffer);
    assert_eq!(blockdev::pattern::first_mismatch(lba * 512, &bytes), None, "LBA {lba}");
}

fn enable(device: &mut Device) -> u8 {
    let support = device.command_queue_support();
    assert_eq!(support.depth(), 8, "{support}");
    device.enable_command_queue(support).unwrap()
}

#[test]
fn qemus_card_has_no_queue_and_reads_one_request_at_a_time_as_before() {
    let (platform, sim, mut device) = setup(SimCard::qemu_like(CAPACITY_BYTES), ModeRequest::Auto);
    let support = device.command_queue_support();
    assert_eq!(support, QueueSupport::NoExtensionRegisters);
    assert_eq!(
        support.to_string(),
        "the card has no command queue (no extension registers: SCR CMD48/49 bit clear)"
    );
    assert!(device.enable_command_queue(support).is_err());
    assert_eq!(device.command_queue_depth(), None);
    assert_eq!(device.geometry().max_in_flight, 1);
    let requests = requests(platform, Operation::Read, 16);
    device.submit(requests[0]).unwrap();
    assert!(device.submit(requests[1]).is_err(), "one request in flight");
    let mut completions = [Completion::default(); 1];
    device.kick();
    while device.poll(&mut completions) == 0 {}
    assert_pattern(platform, &requests[0].buffer, requests[0].lba);
    // Nothing of the queue was ever sent: the reads are CMD18s, as today.
    let indices = sim.command_indices();
    assert!(!indices.iter().any(|index| (43..=49).contains(index)), "{indices:?}");
    assert!(indices.contains(&18));
}

#[test]
fn an_a2_card_runs_tasks_out_of_order_and_every_read_is_right() {
    let (platform, sim, mut device) = setup(queued_card(QueueOrder::Newest, None), ModeRequest::Auto);
    let support = device.command_queue_support();
    assert!(
        matches!(support, QueueSupport::Performance { depth: 8, enabled: false, cache: true, .. }),
        "{support:?}"
    );
    assert_eq!(
        support.to_string(),
        "the card advertises command queueing, depth 8, cache supported (Performance Enhancement register)"
    );
    assert_eq!(enable(&mut device), 8);
    assert!(sim.state.borrow().queue.enabled, "byte 262 switched the queue on");
    let geometry = device.geometry();
    assert_eq!((geometry.max_in_flight, geometry.max_request_blocks), (8, 65_535));
    let requests = requests(platform, Operation::Read, 16);
    let completions = run_all(&mut device, &requests);
    // The card made the newest task ready each time: the reads completed last to first.
    let tags: Vec<u32> = completions.iter().map(|completion| completion.tag).collect();
    assert_eq!(tags, [7, 6, 5, 4, 3, 2, 1, 0]);
    assert!(completions.iter().all(|completion| completion.result.is_ok()));
    for request in &requests {
        assert_pattern(platform, &request.buffer, request.lba);
    }
    let state = sim.state.borrow();
    assert_eq!(state.queue.run_order, [7, 6, 5, 4, 3, 2, 1, 0]);
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    // Each task: CMD44 and CMD45, then CMD13 (queue status) and CMD46; no CMD18, CMD23 or CMD12.
    let indices: Vec<u8> = state.log.iter().map(|(index, _, _)| *index).collect();
    assert_eq!(indices.iter().filter(|&&index| index == 44).count(), 8);
    assert_eq!(indices.iter().filter(|&&index| index == 46).count(), 8);
    assert!(!indices.iter().any(|index| matches!(index, 18 | 23 | 12)), "{indices:?}");
}

#[test]
fn tasks_write_and_read_back_through_the_queue_by_pio_too() {
    let (platform, sim, mut device) = setup(queued_card(QueueOrder::Oldest, None), ModeRequest::Pio);
    enable(&mut device);
    let writes = requests(platform, Operation::Write, 4);
    for (index, request) in writes.iter().enumerate() {
        let bytes: Vec<u8> =
            (0..request.buffer.length_bytes).map(|i| (i as u8) ^ (index as u8).wrapping_mul(37)).collect();
        platform.cpu_write(&request.buffer, &bytes);
    }
    let completions = run_all(&mut device, &writes);
    assert!(completions.iter().all(|completion| completion.result.is_ok()));
    let tags: Vec<u32> = completions.iter().map(|completion| completion.tag).collect();
    assert_eq!(tags, [0, 1, 2, 3, 4, 5, 6, 7], "the oldest task first");
    let reads = requests(platform, Operation::Read, 4);
    run_all(&mut device, &reads);
    for (write, read) in writes.iter().zip(&reads) {
        assert_eq!(platform.cpu_read(&write.buffer), platform.cpu_read(&read.buffer));
    }
    let state = sim.state.borrow();
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    assert_eq!(state.log.iter().filter(|(index, _, _)| *index == 47).count(), 8);
}

#[test]
fn a_task_the_card_refuses_fails_alone_and_is_aborted() {
    let failing = 3 * 2048 + 8;
    let (platform, sim, mut device) =
        setup(queued_card(QueueOrder::Newest, Some(failing)), ModeRequest::Auto);
    enable(&mut device);
    let requests = requests(platform, Operation::Read, 8);
    let completions = run_all(&mut device, &requests);
    let failed: Vec<&Completion> =
        completions.iter().filter(|completion| completion.result.is_err()).collect();
    assert_eq!(failed.len(), 1, "{completions:?}");
    assert_eq!(failed[0].tag, 3);
    assert_eq!(failed[0].result.unwrap_err().kind, IoErrorKind::DeviceStatus);
    for request in requests.iter().filter(|request| request.tag != 3) {
        assert_pattern(platform, &request.buffer, request.lba);
    }
    let state = sim.state.borrow();
    assert!(
        state.log.iter().any(|(index, argument, _)| *index == 43 && argument >> 16 == 3),
        "CMD43 aborted task 3"
    );
    assert!(state.violations.is_empty(), "{:?}", state.violations);
    drop(state);
    // The queue goes on: the next reads are fine.
    let again = run_all(&mut device, &requests[..2]);
    assert!(again.iter().all(|completion| completion.result.is_ok()));
}

/// One read of 16 blocks at LBA 8, polled to its end; the commands it sent (index, argument,
/// transfer mode).
fn one_read(platform: &TestPlatform, sim: &SimHost<'_>, device: &mut Device) -> Vec<(u8, u32, u16)> {
    let logged_before = sim.state.borrow().log.len();
    let request = requests(platform, Operation::Read, 16)[0];
    device.submit(request).unwrap();
    device.kick();
    let mut completions = [Completion::default(); 1];
    while device.poll(&mut completions) == 0 {}
    assert!(completions[0].result.is_ok(), "{completions:?}");
    assert_pattern(platform, &request.buffer, request.lba);
    sim.state.borrow().log[logged_before..].to_vec()
}

#[test]
fn an_a2_card_with_its_queue_left_off_reads_as_today() {
    // sd.cq=off: the kernel still asks what the card advertises (CMD48, reads only), then reads
    // it with the very commands a card without a queue gets.
    let (platform, sim, mut device) = setup(queued_card(QueueOrder::Newest, None), ModeRequest::Auto);
    let support = device.command_queue_support();
    assert!(matches!(support, QueueSupport::Performance { depth: 8, enabled: false, .. }), "{support:?}");
    assert_eq!(device.geometry().max_in_flight, 1, "sd.cq=off: one request in flight");
    let queued_card_read = one_read(platform, sim, &mut device);
    // The same card without extension registers: SCR lists CMD23 (bit 33) but not CMD48/49.
    let mut plain_card = SimCard::qemu_like(CAPACITY_BYTES);
    plain_card.scr[3] |= 0x02;
    let (platform, plain_sim, mut plain) = setup(plain_card, ModeRequest::Auto);
    assert_eq!(queued_card_read, one_read(platform, plain_sim, &mut plain));
    let indices: Vec<u8> = queued_card_read.iter().map(|(index, _, _)| *index).collect();
    assert!(indices.contains(&18) && indices.contains(&23), "CMD23 and CMD18: {indices:?}");
    let state = sim.state.borrow();
    assert!(!state.log.iter().any(|(index, _, _)| (43..=47).contains(index) || *index == 49));
    assert!(!state.queue.enabled);
}
