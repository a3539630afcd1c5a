//! Bakes libtorch's directory into the rpath of `tune-bench` (and of its tests and benches).
//!
//! None of the benchmarks here calls libtorch, but the `tune` library still carries the trainer,
//! so the linker keeps libtorch as a dependency in debug builds; without an rpath the binary
//! dies at start with "libtorch_cpu.so: cannot open shared object file" unless the user sets
//! LD_LIBRARY_PATH. torch-sys publishes libtorch's directory (DEP_TCH_LIBTORCH_LIB) only to
//! its direct dependents, which is why it is one of this crate's dependencies. Both go once the
//! trainer has moved out of `tune` into its own crate (issue 9).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        panic!("torch-sys did not say where libtorch is (DEP_TCH_LIBTORCH_LIB unset)");
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
}
