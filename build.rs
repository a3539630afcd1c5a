//! Bakes libtorch's directory into the binary's rpath, and compiles the autocast shim.
//!
//! torch-sys links libtorch but adds no rpath, so without this the binary dies at start
//! with "libtorch_cpu.so: cannot open shared object file" unless the user sets
//! LD_LIBRARY_PATH. Because torch-sys declares `links = "tch"`, its `libtorch_lib`
//! metadata reaches only direct dependents (as DEP_TCH_LIBTORCH_LIB): that is why
//! `torch-sys` is a direct dependency of this crate.
//!
//! `tch::autocast` is CUDA-only (shared/notes/platform.md); CPU autocast needs libtorch's own
//! C++ API, so a few lines of C++ (`src/train/autocast_shim.cpp`) are compiled against the
//! headers that sit beside that library directory.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=src/train/autocast_shim.cpp");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB unset)");
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");

    let root = PathBuf::from(&lib)
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(&lib));
    let include = root.join("include");
    cc::Build::new()
        .cpp(true)
        .file("src/train/autocast_shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .opt_level(2)
        .warnings(false)
        .compile("tune_autocast_shim");
    println!("cargo:rustc-link-lib=dylib=c10");
    println!("cargo:rustc-link-lib=dylib=torch_cpu");

    // Opt-in: keep libtorch_cuda in the link although no symbol of it is named (tch-rs #980,
    // #907), so that CUDA is found at run time. Needs the full CUDA libtorch.
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-ltorch");
        println!("cargo:rustc-link-arg=-ltorch_cuda");
        println!("cargo:rustc-link-arg=-Wl,--as-needed");
    }
}
