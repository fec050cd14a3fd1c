//! Status codes, errors, and the string and version helpers every module uses.

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::c_char;
use std::sync::{Mutex, MutexGuard};

use crate::*;

/// The ABI major this crate was written against (FX_VERSION_MAJOR).
pub(crate) const ABI_MAJOR: u32 = 0;

// ------------------------------------------------------------------ errors --

/// A status code of ferrox.h (`fx_status`). A newtype rather than an enum:
/// the library only appends codes, and one this crate does not know must
/// still be representable.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub i32);

pub(crate) const STATUS_NAMES: [&str; 26] = [
    "OK",
    "INVALID_ARG",
    "NOMEM",
    "IO",
    "UNSUPPORTED",
    "TRUNCATED",
    "BAD_MAGIC",
    "BAD_VERSION",
    "TOO_LARGE",
    "BAD_TYPE",
    "BAD_TENSOR",
    "BAD_OFFSET",
    "BAD_ALIGNMENT",
    "DUPLICATE",
    "MISSING",
    "BAD_SHAPE",
    "BAD_HPARAMS",
    "BUFFER_TOO_SMALL",
    "BAD_VOCAB",
    "BAD_TEMPLATE",
    "STALE_HANDLE",
    "REENTRANT",
    "NO_ROOM",
    "INTERNAL",
    "GRAMMAR",
    "ALL_BANNED",
];

#[allow(missing_docs)]
impl Status {
    pub const OK: Status = Status(0);
    pub const INVALID_ARG: Status = Status(1);
    pub const NOMEM: Status = Status(2);
    pub const IO: Status = Status(3);
    pub const UNSUPPORTED: Status = Status(4);
    pub const TRUNCATED: Status = Status(5);
    pub const BAD_MAGIC: Status = Status(6);
    pub const BAD_VERSION: Status = Status(7);
    pub const TOO_LARGE: Status = Status(8);
    pub const BAD_TYPE: Status = Status(9);
    pub const BAD_TENSOR: Status = Status(10);
    pub const BAD_OFFSET: Status = Status(11);
    pub const BAD_ALIGNMENT: Status = Status(12);
    pub const DUPLICATE: Status = Status(13);
    pub const MISSING: Status = Status(14);
    pub const BAD_SHAPE: Status = Status(15);
    pub const BAD_HPARAMS: Status = Status(16);
    pub const BUFFER_TOO_SMALL: Status = Status(17);
    pub const BAD_VOCAB: Status = Status(18);
    pub const BAD_TEMPLATE: Status = Status(19);
    pub const STALE_HANDLE: Status = Status(20);
    pub const REENTRANT: Status = Status(21);
    pub const NO_ROOM: Status = Status(22);
    pub const INTERNAL: Status = Status(23);
    pub const GRAMMAR: Status = Status(24);
    pub const ALL_BANNED: Status = Status(25);

    /// The library's short description ("truncated file").
    pub fn description(self) -> &'static str {
        // fx_status_str returns a static string for every value.
        unsafe { static_str(sys::fx_status_str(self.0)) }
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match STATUS_NAMES.get(self.0 as usize) {
            Some(name) if self.0 >= 0 => f.write_str(name),
            _ => write!(f, "Status({})", self.0),
        }
    }
}

/// A failed call: its status and the library's message.
#[derive(Clone, Debug)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub(crate) fn new(status: i32, message: impl Into<String>) -> Error {
        Error {
            status: Status(status),
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ferrox: {:?} ({})",
            self.status,
            self.status.description()
        )?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// # Safety
/// `p` is NULL or a NUL-terminated string that lives for the program.
pub(crate) unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    CStr::from_ptr(p).to_str().unwrap_or("")
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for this call.
pub(crate) unsafe fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(1, "a string contains a NUL byte"))
}

pub(crate) fn errbuf_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The linked library's version string, e.g. "0.1.0".
pub fn version() -> &'static str {
    unsafe { static_str(sys::fx_version_string()) }
}

pub(crate) fn check_version() -> Result<()> {
    if unsafe { sys::fx_version_number() } / 1_000_000 != ABI_MAJOR {
        return Err(Error::new(
            4,
            format!("library {} has another ABI major", version()),
        ));
    }
    Ok(())
}

/// Ignores mutex poisoning: the guarded data stays consistent because no
/// code path panics half-way through changing it, and a panic elsewhere
/// must not make every later call fail.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
