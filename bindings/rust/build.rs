//! Links the ferrox C library.
//!
//! 1. `pkg-config ferrox` (the program; `PKG_CONFIG` names another): the
//!    ferrox.pc that `cmake --install` writes, found through
//!    PKG_CONFIG_PATH for a prefix outside the default search path.
//! 2. Otherwise FERROX_LIB_DIR: the directory holding libferrox (a build
//!    tree's lib/ or an install's libdir).
//! 3. Otherwise the linker's default paths.
//!
//! Static linking: the `static` feature or FERROX_STATIC=1 links
//! libferrox.a, with the libraries it needs (pkg-config's Libs.private, or
//! the list below without pkg-config).

use std::env;
use std::process::Command;

/// libferrox.a's own dependencies, for a static link without pkg-config
/// (the Libs.private of ferrox.pc.in as lib/CMakeLists.txt fills it).
const STATIC_DEPS: &[&str] = &["m", "dl", "utf8proc"];

fn main() {
    for var in ["FERROX_LIB_DIR", "FERROX_STATIC", "PKG_CONFIG", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    let static_link = env::var_os("CARGO_FEATURE_STATIC").is_some()
        || env::var("FERROX_STATIC").map(|v| v == "1").unwrap_or(false);

    if let Some(flags) = pkg_config(static_link) {
        let mut dirs = Vec::new();
        for flag in flags.split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={}", dir);
                dirs.push(dir);
            } else if let Some(lib) = flag.strip_prefix("-l") {
                let kind = if lib == "ferrox" && static_link { "static" } else { "dylib" };
                println!("cargo:rustc-link-lib={}={}", kind, lib);
            }
        }
        if !static_link {
            rpath(dirs);
        }
        return;
    }

    let dir = env::var("FERROX_LIB_DIR").ok();
    if let Some(dir) = &dir {
        println!("cargo:rustc-link-search=native={}", dir);
    }
    if static_link {
        println!("cargo:rustc-link-lib=static=ferrox");
        for lib in STATIC_DEPS {
            println!("cargo:rustc-link-lib=dylib={}", lib);
        }
    } else {
        println!("cargo:rustc-link-lib=dylib=ferrox");
        rpath(dir.as_deref());
    }
}

/// The flags of `pkg-config --libs ferrox` (with --static for a static
/// link), or None when the program or the package is missing.
fn pkg_config(static_link: bool) -> Option<String> {
    let program = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    let mut cmd = Command::new(program);
    cmd.arg("--libs");
    if static_link {
        cmd.arg("--static");
    }
    let out = cmd.arg("ferrox").output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}

/// So that this crate's own tests and examples find a shared library
/// outside the loader's path without LD_LIBRARY_PATH. rustc-link-arg
/// reaches only this package's binaries, never a crate that depends on it.
fn rpath<'a>(dirs: impl IntoIterator<Item = &'a str>) {
    for dir in dirs {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
}
