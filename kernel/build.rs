//! Passes each image its linker script (docs/ecosystem.md §3.3: from build.rs, so the build works from
//! any directory). Only the bare-metal target links with them.
fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let linker_dir = std::path::Path::new(&manifest_dir).join("..").join("linker");
    println!("cargo:rerun-if-changed={}", linker_dir.display());
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-search={}", linker_dir.display());
        println!("cargo:rustc-link-arg-bin=kernel8=-Tpi.ld");
        println!("cargo:rustc-link-arg-bin=kernel-virt=-Tvirt.ld");
        println!("cargo:rustc-link-arg-bin=kernel32=-Tpi32.ld");
    }
}
