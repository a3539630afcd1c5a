//! Bakes libtorch's directory into the rpath of this crate's executables, and compiles the
//! autocast shim.
//!
//! torch-sys links libtorch but adds no rpath, so without this `tune-worker` dies at start
//! with "libtorch_cpu.so: cannot open shared object file" unless the user sets
//! LD_LIBRARY_PATH. Because torch-sys declares `links = "tch"`, its `libtorch_lib`
//! metadata reaches only direct dependents (as DEP_TCH_LIBTORCH_LIB): that is why
//! `torch-sys` is a direct dependency of this crate.
//!
//! Link arguments a build script prints apply to its own package's targets only, never to a
//! package that depends on it, and `tune` does not even depend on this crate: nothing here
//! reaches the `tune` binary. The rpath goes to every executable of this crate (`tune-worker`,
//! and the unit tests, integration tests and benchmark that link the trainer and would not
//! start without it); the CUDA arguments go to `tune-worker` alone (see below).
//!
//! The CUDA caching allocator's statistics and `emptyCache` (`src/cuda_shim.cpp`) go through
//! c10's device-generic interface, so they compile against any libtorch's headers; so do the
//! streams and events of the streaming data loader (`src/stream_shim.cpp`).
//!
//! `tch::autocast` is CUDA-only; CPU autocast needs libtorch's own
//! C++ API, so a few lines of C++ (`src/autocast_shim.cpp`) are compiled against the
//! headers that sit beside that library directory. So are the multi-tensor optimizer kernels
//! that tch's generated bindings leave out (`src/optim_shim.cpp`) and the autograd Function of
//! gradient checkpointing (`src/checkpoint_shim.cpp`), and the optimizer and generator state
//! a trial snapshot saves (`src/snapshot_shim.cpp`).
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=src/autocast_shim.cpp");
    println!("cargo:rerun-if-changed=src/checkpoint_shim.cpp");
    println!("cargo:rerun-if-changed=src/cuda_shim.cpp");
    println!("cargo:rerun-if-changed=src/optim_shim.cpp");
    println!("cargo:rerun-if-changed=src/snapshot_shim.cpp");
    println!("cargo:rerun-if-changed=src/graph_shim.cpp");
    println!("cargo:rerun-if-env-changed=TUNE_CUDA_INCLUDE");
    println!("cargo:rerun-if-changed=src/stream_shim.cpp");
    println!("cargo:rerun-if-changed=src/shim_error.h");
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
        .file("src/autocast_shim.cpp")
        .file("src/checkpoint_shim.cpp")
        .file("src/cuda_shim.cpp")
        .file("src/optim_shim.cpp")
        .file("src/snapshot_shim.cpp")
        .file("src/stream_shim.cpp")
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
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        compile_graph_shim(&root, &include);
    }

    // Opt-in: keep libtorch_cuda in the link although no symbol of it is named (tch-rs #980,
    // #907), so that CUDA is found at run time. Needs the full CUDA libtorch. Only the worker
    // trains on a GPU, so only `tune-worker` gets these (`rustc-link-arg-bin`, never
    // `rustc-link-arg`, which would load the CUDA libraries into every executable): the tests
    // and the in-process benchmark run on the CPU, and `tune bench trainer` measures through
    // `tune-worker bench`. `--allow-shlib-undefined`: libtorch_cuda's own dependencies (the
    // nvidia-* wheels' libcudart, cublas, cudnn…) are found at run time through its rpath
    // (`$ORIGIN/../../nvidia/…`), which the link-time search does not follow.
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        for arg in [
            "-Wl,--allow-shlib-undefined",
            "-Wl,--no-as-needed",
            "-ltorch",
            "-ltorch_cuda",
            "-Wl,--as-needed",
        ] {
            println!("cargo:rustc-link-arg-bin=tune-worker={arg}");
        }
    }
}

/// The CUDA-graph shim (`src/graph_shim.cpp`): only with the `cuda` feature, since it names
/// symbols of libtorch_cuda and libc10_cuda and includes the CUDA runtime's headers. Every
/// executable of the crate then links those two libraries (the shim is in the library, so the
/// tests would not link without them); `--allow-shlib-undefined` as for `tune-worker` below.
fn compile_graph_shim(root: &Path, include: &Path) {
    let cuda_include = match cuda_headers(root) {
        Ok(dirs) => dirs,
        Err(missing) => panic!(
            "--features cuda: {missing}. The CUDA-graph shim includes libtorch's CUDA headers, \
             which include cuda_runtime.h: install the nvidia-cuda-runtime and nvidia-cuda-crt \
             wheels of your torch's CUDA beside it (./scripts/setup.sh --libtorch does), or set \
             TUNE_CUDA_INCLUDE to the directories (a path list) that hold cuda_runtime_api.h \
             and crt/host_config.h"
        ),
    };
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .file("src/graph_shim.cpp")
        .include(include)
        .include(include.join("torch/csrc/api/include"));
    for dir in &cuda_include {
        build.include(dir);
    }
    build
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .opt_level(2)
        .warnings(false)
        .compile("tune_graph_shim");
    println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
    println!("cargo:rustc-link-lib=dylib=torch_cuda");
    println!("cargo:rustc-link-lib=dylib=c10_cuda");
}

/// The include directories that hold the CUDA runtime's API (`cuda_runtime_api.h`, the
/// nvidia-cuda-runtime wheel) and its compiler configuration (`crt/host_config.h`, which
/// `cuda_runtime.h` includes; the nvidia-cuda-crt wheel since CUDA 13): the directories of
/// `TUNE_CUDA_INCLUDE` (a path list), else the include folders of the nvidia-* wheels beside
/// torch (`<site-packages>/nvidia/cu13/include` for CUDA 13, `nvidia/cuda_runtime/include` for
/// CUDA 12), where libtorch is `<site-packages>/torch`. On failure, what is missing and where
/// it was looked for.
fn cuda_headers(root: &Path) -> Result<Vec<PathBuf>, String> {
    let (candidates, looked) = match std::env::var_os("TUNE_CUDA_INCLUDE") {
        Some(list) => (
            std::env::split_paths(&list).collect::<Vec<_>>(),
            format!("TUNE_CUDA_INCLUDE={}", list.to_string_lossy()),
        ),
        None => {
            let nvidia = root.parent().map(|p| p.join("nvidia")).unwrap_or_default();
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&nvidia)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .map(|e| e.path().join("include"))
                        .collect()
                })
                .unwrap_or_default();
            dirs.sort();
            (dirs, format!("{}/*/include", nvidia.display()))
        }
    };
    let mut found = Vec::new();
    for header in ["cuda_runtime_api.h", "crt/host_config.h"] {
        match candidates.iter().find(|d| d.join(header).is_file()) {
            Some(d) if found.contains(d) => {}
            Some(d) => found.push(d.clone()),
            None => return Err(format!("no {header} in {looked}")),
        }
    }
    Ok(found)
}
