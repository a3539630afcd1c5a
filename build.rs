//! Bakes libtorch's directory into the binary's rpath.
//!
//! torch-sys links libtorch but adds no rpath, so without this the binary dies at start
//! with "libtorch_cpu.so: cannot open shared object file" unless the user sets
//! LD_LIBRARY_PATH. Because torch-sys declares `links = "tch"`, its `libtorch_lib`
//! metadata reaches only direct dependents (as DEP_TCH_LIBTORCH_LIB): that is why
//! `torch-sys` is a direct dependency of this crate.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    if let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
}
