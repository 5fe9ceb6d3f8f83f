//! barebench's QEMU TCG plugin, `libbarebench_profile.so`: the QEMU side of the instruction
//! profile (`barebench qemu --profile`, docs/measurement.md §18; the accounting is the
//! `profiler` crate's). Here are the plugin API's C declarations (the subset used, written from
//! QEMU's plugin documentation, docs/devel/tcg-plugins.rst and include/qemu/qemu-plugin.h, API
//! version 4 as in QEMU 9.2 to 10.x), the two symbols QEMU looks up (`qemu_plugin_version`,
//! `qemu_plugin_install`) and the callbacks, which hand everything to [`Profiler`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Mutex;

use profiler::accounting::{BlockShape, Profiler};
use profiler::arm64;
use profiler::format::HEADER;
use profiler::options::Options;

type PluginId = u64;

/// Opaque QEMU handles.
#[repr(C)]
struct TranslationBlock {
    _opaque: [u8; 0],
}
#[repr(C)]
struct Instruction {
    _opaque: [u8; 0],
}
#[repr(C)]
struct Scoreboard {
    _opaque: [u8; 0],
}
#[repr(C)]
struct RegisterHandle {
    _opaque: [u8; 0],
}

/// `qemu_plugin_u64`: one u64 in each vCPU's scoreboard entry.
#[repr(C)]
#[derive(Clone, Copy)]
struct ScoreboardU64 {
    score: *mut Scoreboard,
    offset: usize,
}

/// GLib's `GArray` and `GByteArray` headers.
#[repr(C)]
struct GArray {
    data: *mut c_char,
    len: c_uint,
}
#[repr(C)]
struct GByteArray {
    data: *mut u8,
    len: c_uint,
}

/// `qemu_plugin_reg_descriptor`.
#[repr(C)]
struct RegisterDescriptor {
    handle: *mut RegisterHandle,
    name: *const c_char,
    feature: *const c_char,
}

/// `qemu_info_t` for system emulation.
#[repr(C)]
pub struct QemuInfo {
    target_name: *const c_char,
    version_min: c_int,
    version_current: c_int,
    system_emulation: bool,
    smp_vcpus: c_int,
    max_vcpus: c_int,
}

/// `enum qemu_plugin_cb_flags`.
const CALLBACK_NO_REGISTERS: c_uint = 0;
const CALLBACK_READS_REGISTERS: c_uint = 1;
/// `enum qemu_plugin_op`: `QEMU_PLUGIN_INLINE_STORE_U64`.
const INLINE_STORE_U64: c_uint = 1;

type VcpuCallback = extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void);

extern "C" {
    fn qemu_plugin_register_vcpu_init_cb(id: PluginId, callback: extern "C" fn(PluginId, c_uint));
    fn qemu_plugin_register_vcpu_tb_trans_cb(
        id: PluginId,
        callback: extern "C" fn(PluginId, *mut TranslationBlock),
    );
    fn qemu_plugin_register_vcpu_tb_exec_cb(
        block: *mut TranslationBlock,
        callback: VcpuCallback,
        flags: c_uint,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_insn_exec_cb(
        instruction: *mut Instruction,
        callback: VcpuCallback,
        flags: c_uint,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
        instruction: *mut Instruction,
        operation: c_uint,
        entry: ScoreboardU64,
        immediate: u64,
    );
    fn qemu_plugin_tb_n_insns(block: *const TranslationBlock) -> usize;
    fn qemu_plugin_tb_vaddr(block: *const TranslationBlock) -> u64;
    fn qemu_plugin_tb_get_insn(block: *const TranslationBlock, index: usize) -> *mut Instruction;
    fn qemu_plugin_insn_data(
        instruction: *const Instruction,
        destination: *mut c_void,
        length: usize,
    ) -> usize;
    fn qemu_plugin_insn_vaddr(instruction: *const Instruction) -> u64;
    fn qemu_plugin_scoreboard_new(element_size: usize) -> *mut Scoreboard;
    fn qemu_plugin_u64_get(entry: ScoreboardU64, vcpu_index: c_uint) -> u64;
    fn qemu_plugin_get_registers() -> *mut GArray;
    fn qemu_plugin_read_register(handle: *mut RegisterHandle, buffer: *mut GByteArray) -> c_int;
    fn g_byte_array_new() -> *mut GByteArray;
    fn g_byte_array_set_size(array: *mut GByteArray, length: c_uint) -> *mut GByteArray;
    fn g_array_free(array: *mut GArray, free_segment: c_int) -> *mut c_char;
}

/// The plugin API version this plugin is written against (QEMU refuses it when outside the
/// range it supports, and says which).
#[no_mangle]
pub static qemu_plugin_version: c_int = 4;

/// The meter's instructions the profiler is told about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    LapEntry = 1,
    LapReturn = 2,
    RunEnd = 3,
}

impl Hook {
    fn from_userdata(value: usize) -> Option<Hook> {
        [Hook::LapEntry, Hook::LapReturn, Hook::RunEnd].into_iter().find(|hook| *hook as usize == value)
    }
}

struct Plugin {
    options: Options,
    profiler: Profiler,
    output: BufWriter<File>,
    /// Per vCPU: the 1-based index of the last instruction of the current block that started.
    progress: ScoreboardU64,
    /// `x0` and `x1` of the vCPU, found when it starts.
    registers: Option<[*mut RegisterHandle; 2]>,
    buffer: *mut GByteArray,
    failed: bool,
}

// SAFETY: the raw pointers are QEMU's and GLib's handles, valid for the life of the process and
// only used while holding `PLUGIN`'s lock.
unsafe impl Send for Plugin {}

static PLUGIN: Mutex<Option<Plugin>> = Mutex::new(None);

fn with_plugin(action: impl FnOnce(&mut Plugin)) {
    let mut guard = PLUGIN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(plugin) = guard.as_mut().filter(|plugin| !plugin.failed) {
        action(plugin);
    }
}

impl Plugin {
    /// Which hook, if any, instruction `word` at `address` is.
    fn hook_at(&self, address: u64, word: u32) -> Option<Hook> {
        let options = &self.options;
        if address == options.lap.start {
            Some(Hook::LapEntry)
        } else if options.lap.contains(&address) && arm64::is_return(word) {
            Some(Hook::LapReturn)
        } else if address == options.run_end {
            Some(Hook::RunEnd)
        } else {
            None
        }
    }

    /// `x<index>` of the vCPU now (inside a callback registered as reading registers).
    fn register(&self, index: usize) -> Option<u64> {
        let handle = self.registers?[index];
        // SAFETY: `buffer` is the GByteArray made at vCPU start; the handle is one QEMU gave for
        // this vCPU; QEMU allows reading registers from callbacks registered with
        // QEMU_PLUGIN_CB_R_REGS, the only ones that call this. The array holds `len` bytes.
        unsafe {
            g_byte_array_set_size(self.buffer, 0);
            let size = qemu_plugin_read_register(handle, self.buffer);
            if size < 8 || (*self.buffer).len < 8 {
                return None;
            }
            let bytes = std::slice::from_raw_parts((*self.buffer).data, 8);
            Some(u64::from_le_bytes(bytes.try_into().ok()?))
        }
    }

    fn hook(&mut self, hook: Hook) {
        let argument = match hook {
            Hook::LapEntry => self.register(1),
            Hook::LapReturn | Hook::RunEnd => self.register(0),
        };
        let Some(value) = argument else {
            eprintln!("barebench profile: cannot read the guest's registers; the profile stops here");
            self.failed = true;
            return;
        };
        match hook {
            Hook::LapEntry => self.profiler.lap_entered(value),
            Hook::LapReturn => self.profiler.lap_returned(value),
            Hook::RunEnd => {
                let record = self.profiler.run_finished(value);
                let written =
                    self.output.write_all(record.to_text().as_bytes()).and_then(|()| self.output.flush());
                if let Err(error) = written {
                    eprintln!("barebench profile: cannot write {}: {error}", self.options.output);
                    self.failed = true;
                }
            }
        }
    }
}

extern "C" fn on_vcpu_init(_id: PluginId, _vcpu_index: c_uint) {
    with_plugin(|plugin| {
        // SAFETY: called by QEMU in the new vCPU's context, where qemu_plugin_get_registers is
        // allowed; the GArray holds `len` descriptors whose names are NUL-terminated strings
        // that live as long as QEMU; the array is freed once, after use.
        unsafe {
            let list = qemu_plugin_get_registers();
            if list.is_null() {
                return;
            }
            let descriptors =
                std::slice::from_raw_parts((*list).data as *const RegisterDescriptor, (*list).len as usize);
            let find = |wanted: &str| {
                descriptors
                    .iter()
                    .find(|descriptor| {
                        !descriptor.name.is_null()
                            && CStr::from_ptr(descriptor.name).to_bytes() == wanted.as_bytes()
                    })
                    .map(|descriptor| descriptor.handle)
            };
            if let (Some(x0), Some(x1)) = (find("x0"), find("x1")) {
                plugin.registers = Some([x0, x1]);
            }
            g_array_free(list, 1);
            plugin.buffer = g_byte_array_new();
        }
        if plugin.registers.is_none() {
            eprintln!("barebench profile: the vCPU has no registers x0/x1 (not AArch64?); no profile");
            plugin.failed = true;
        }
    });
}

extern "C" fn on_translate(_id: PluginId, block: *mut TranslationBlock) {
    with_plugin(|plugin| {
        // SAFETY: QEMU passes a block handle valid during this callback; every instruction index
        // is below qemu_plugin_tb_n_insns; qemu_plugin_insn_data copies at most 4 bytes into
        // `word`; the callbacks and inline operations registered are the API's, with userdata
        // that is a plain number, not a pointer.
        unsafe {
            let count = qemu_plugin_tb_n_insns(block);
            let start = qemu_plugin_tb_vaddr(block);
            let mut last_word = 0u32;
            for index in 0..count {
                let instruction = qemu_plugin_tb_get_insn(block, index);
                qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                    instruction,
                    INLINE_STORE_U64,
                    plugin.progress,
                    index as u64 + 1,
                );
                let mut word = 0u32;
                qemu_plugin_insn_data(instruction, (&mut word as *mut u32).cast(), 4);
                last_word = u32::from_le(word);
                if let Some(hook) = plugin.hook_at(qemu_plugin_insn_vaddr(instruction), last_word) {
                    qemu_plugin_register_vcpu_insn_exec_cb(
                        instruction,
                        on_hook,
                        CALLBACK_READS_REGISTERS,
                        hook as usize as *mut c_void,
                    );
                }
            }
            let shape = BlockShape { start, instructions: count as u32, end: arm64::block_end(last_word) };
            let id = plugin.profiler.block_id(shape);
            qemu_plugin_register_vcpu_tb_exec_cb(
                block,
                on_block,
                CALLBACK_NO_REGISTERS,
                id as usize as *mut c_void,
            );
        }
    });
}

extern "C" fn on_block(vcpu_index: c_uint, userdata: *mut c_void) {
    with_plugin(|plugin| {
        // SAFETY: `progress` is the scoreboard entry made at install; QEMU keeps one per vCPU.
        let executed_before = unsafe { qemu_plugin_u64_get(plugin.progress, vcpu_index) };
        plugin.profiler.block_started(userdata as usize as u32, executed_before);
    });
}

extern "C" fn on_hook(_vcpu_index: c_uint, userdata: *mut c_void) {
    if let Some(hook) = Hook::from_userdata(userdata as usize) {
        with_plugin(|plugin| plugin.hook(hook));
    }
}

/// Called by QEMU when it loads the plugin: checks the machine, parses the arguments, opens the
/// output and registers the callbacks. Non-zero refuses the plugin (QEMU then stops).
///
/// # Safety
/// QEMU's contract: `info` points to its system information and `argv` to `argc` NUL-terminated
/// argument strings, all valid during the call.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const QemuInfo,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU's contract above.
    let (target, vcpus, arguments) = unsafe {
        let info = &*info;
        let target = if info.target_name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(info.target_name).to_string_lossy().into_owned()
        };
        let arguments: Vec<String> = (0..argc.max(0) as usize)
            .map(|index| CStr::from_ptr(*argv.add(index)).to_string_lossy().into_owned())
            .collect();
        (target, if info.system_emulation { info.smp_vcpus } else { 0 }, arguments)
    };
    match install(id, &target, vcpus, &arguments) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("barebench profile: {message}");
            -1
        }
    }
}

fn install(id: PluginId, target: &str, vcpus: c_int, arguments: &[String]) -> Result<(), String> {
    if target != "aarch64" {
        return Err(format!("profiles AArch64 kernels only, not {target:?}"));
    }
    if vcpus != 1 {
        return Err(format!("needs a system emulation with one vCPU (the kernel runs on one), not {vcpus}"));
    }
    let options = Options::parse(arguments.iter().map(String::as_str))?;
    let mut output = File::create(&options.output)
        .map(BufWriter::new)
        .map_err(|error| format!("cannot create {}: {error}", options.output))?;
    writeln!(output, "{HEADER}").map_err(|error| format!("cannot write {}: {error}", options.output))?;
    // SAFETY: a scoreboard of one u64 per vCPU, made once and never freed (it lives as long as the
    // callbacks that use it).
    let progress = ScoreboardU64 { score: unsafe { qemu_plugin_scoreboard_new(8) }, offset: 0 };
    let profiler = Profiler::new(options.lap.start);
    *PLUGIN.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(Plugin {
        options,
        profiler,
        output,
        progress,
        registers: None,
        buffer: std::ptr::null_mut(),
        failed: false,
    });
    // SAFETY: registering callbacks with the id QEMU gave this plugin, from its install function.
    unsafe {
        qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
        qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    }
    Ok(())
}
