//! Link settings of the `mountfs` executable.
//!
//! On Linux with glibc the executable is linked with packed relative relocations
//! (`-z pack-relative-relocs`, `DT_RELR`; GNU ld 2.38+, lld 15+, glibc 2.36+). The executable is
//! position-independent, and its table of relative relocations (`.rela.dyn`, 24 bytes per
//! pointer in vtables, string tables, …) is read whole by the dynamic loader at every start,
//! so all of it stays resident: 2–5 MB, as large as the code a busy server runs (issue 45:
//! most of what the `release` profile's peak had over `dist`'s). Packed, the table is a few
//! kilobytes. A linker that does not know the option warns and links as before; one whose C
//! library lacks `DT_RELR` support leaves the relocations unpacked.
//!
//! The option is passed here, not in `.cargo/config.toml`, so that `cargo install mountfs`
//! (which reads no configuration from the package) links the same way.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
