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
        // The trace channel's interned strings (defmt's `.defmt` info section, docs/ecosystem.md §2.2).
        println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        println!("cargo:rustc-link-arg-bin=kernel32=-Tpi32.ld");
    }
}
