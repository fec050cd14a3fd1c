//! Links the ferrox C library. FERROX_LIB_DIR names the directory holding
//! libferrox.so (a build tree's lib/ or an install's libdir); without it
//! the linker's default paths are searched.

use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=FERROX_LIB_DIR");
    if let Ok(dir) = env::var("FERROX_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
        // So that this crate's own tests and examples find the library at
        // run time without LD_LIBRARY_PATH. rustc-link-arg reaches only
        // this package's binaries, never a crate that depends on it.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=ferrox");
}
