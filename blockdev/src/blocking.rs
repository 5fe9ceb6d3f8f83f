//! One request through the block interface ([`BlockDevice`]: submit, kick, poll), waited
//! for with a deadline: the SD hosts' bring-up measurements, the kernel's read checks and tests,
//! outside the benchmark's queues (docs/architecture.md, "The block interface").
#![forbid(unsafe_code)]

use crate::{BlockDevice, Clock, Completion, IoError, Request, SubmitError};

/// Why a request never came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitError {
    /// The driver refused the request; the device never saw it.
    Refused(SubmitError),
    /// No completion with the request's tag within the timeout.
    Timeout,
}

/// Submits `request`, starts it and polls until its completion (matched by tag) arrives or
/// `timeout_us` passes; returns the device's result. Completions of other tags are dropped, so
/// nothing else may be in flight on `device`.
pub fn complete_one<D: BlockDevice + ?Sized, C: Clock + ?Sized>(
    device: &mut D,
    clock: &C,
    request: Request,
    timeout_us: u64,
) -> Result<Result<(), IoError>, WaitError> {
    device.submit(request).map_err(|(_, error)| WaitError::Refused(error))?;
    device.kick();
    let deadline_ticks = clock.now_ticks().saturating_add(clock.ns_to_ticks(timeout_us.saturating_mul(1000)));
    let mut completions = [Completion::default(); 4];
    loop {
        let finished = device.poll(&mut completions);
        if let Some(completion) = completions[..finished].iter().find(|c| c.tag == request.tag) {
            return Ok(completion.result);
        }
        if clock.now_ticks() >= deadline_ticks {
            return Err(WaitError::Timeout);
        }
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::SteppingClock;
    use crate::{DmaBuffer, Geometry, IoErrorKind, Operation};

    /// Completes its request after `polls_needed` polls, with `result`, after a stray tag.
    struct Slow {
        pending: Option<Request>,
        polls_left: u32,
        result: Result<(), IoError>,
        accept: bool,
    }

    impl BlockDevice for Slow {
        fn name(&self) -> &str {
            "slow0"
        }
        fn geometry(&self) -> Geometry {
            Geometry { logical_block_bytes: 512, block_count: 8, max_request_blocks: 8, max_in_flight: 1 }
        }
        fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
            if !self.accept {
                return Err((request, SubmitError::QueueFull));
            }
            self.pending = Some(request);
            Ok(())
        }
        fn kick(&mut self) {}
        fn poll(&mut self, completions: &mut [Completion]) -> usize {
            if self.polls_left > 0 {
                self.polls_left -= 1;
                return 0;
            }
            let Some(request) = self.pending.take() else {
                return 0;
            };
            completions[0] = Completion { tag: request.tag + 1, result: Ok(()) };
            completions[1] = Completion { tag: request.tag, result: self.result };
            2
        }
    }

    fn request() -> Request {
        let buffer = DmaBuffer { cpu_address: 0, physical_address: 0, length_bytes: 512 };
        Request { tag: 9, operation: Operation::Read, lba: 0, block_count: 1, buffer }
    }

    #[test]
    fn the_result_of_the_request_s_own_tag_comes_back() {
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        let failed = Err(IoError { kind: IoErrorKind::Timeout, code: 7 });
        let mut device = Slow { pending: None, polls_left: 5, result: failed, accept: true };
        assert_eq!(complete_one(&mut device, &clock, request(), 1_000), Ok(failed));
        let mut device = Slow { pending: None, polls_left: 0, result: Ok(()), accept: true };
        assert_eq!(complete_one(&mut device, &clock, request(), 1_000), Ok(Ok(())));
    }

    #[test]
    fn refusals_and_silence_are_told_apart() {
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        let mut refusing = Slow { pending: None, polls_left: 0, result: Ok(()), accept: false };
        assert_eq!(
            complete_one(&mut refusing, &clock, request(), 1_000),
            Err(WaitError::Refused(SubmitError::QueueFull))
        );
        let mut silent = Slow { pending: None, polls_left: u32::MAX, result: Ok(()), accept: true };
        assert_eq!(complete_one(&mut silent, &clock, request(), 50), Err(WaitError::Timeout));
    }
}
