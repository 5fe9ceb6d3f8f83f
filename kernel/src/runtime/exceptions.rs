//! What happens when the CPU takes an exception or the kernel panics: a report on the console
//! (class, ESR, ELR, FAR, SPSR; on AArch32 the vector, mode, DFSR/IFSR and DFAR/IFAR) and a stop with a non-zero status.

use super::console::emergency_writer;
use super::exit::{finish_after_fault, ExitStatus};
#[cfg(target_arch = "aarch64")]
use boot::exception::{ExceptionFrame, ExceptionReport, VectorEntry};
#[cfg(target_arch = "arm")]
use boot::exception_aarch32::{ExceptionFrame, ExceptionReport, VectorEntry};
use core::fmt::Write;

/// Called by the vectors in `boot` with the saved registers and the vector's index.
#[no_mangle]
extern "C" fn barebench_exception(frame: &ExceptionFrame, vector: usize) -> ! {
    let vector = VectorEntry(vector as _);
    if let Some(mut console) = emergency_writer() {
        let report = ExceptionReport { frame, vector };
        let _ = write!(console, "\n{report}\n*** stopping: exit status {}\n", ExitStatus::Exception as u32);
    }
    finish_after_fault(ExitStatus::Exception)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    if let Some(mut console) = emergency_writer() {
        let _ =
            write!(console, "\n*** PANIC: {info}\n*** stopping: exit status {}\n", ExitStatus::Panic as u32);
    }
    finish_after_fault(ExitStatus::Panic)
}
