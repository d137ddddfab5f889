//! lowp-core: low-precision number formats, correct rounding, and the array
//! kernels built on them. Pure Rust; the Python bindings live in `lowp-python`.

pub mod convert;
pub mod format;
pub mod fpenv;
pub mod gemm;
pub mod parallel;
pub mod round;
pub mod sparse;
pub mod tables;

pub use format::{FloatFormat, Format, IntFormat, NanPolicy, PositFormat};
pub use round::{Mode, RoundOpts, SeedKey};

use std::fmt;

/// What went wrong, in words that name the offending argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// An invalid value (maps to Python's ValueError).
    Value(String),
    /// An unsupported type (maps to Python's TypeError).
    Type(String),
    /// Memory that could not be had (maps to Python's MemoryError).
    Memory(String),
}

impl Error {
    pub fn value(msg: impl Into<String>) -> Self {
        Error::Value(msg.into())
    }
    pub fn type_(msg: impl Into<String>) -> Self {
        Error::Type(msg.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Value(m) | Error::Type(m) | Error::Memory(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// `len` copies of `v` in a new vector, or [`Error::Memory`] where the memory is not
/// to be had (the allocator's failure would abort the process): for buffers whose
/// size follows the inputs' shapes, which broadcast views make any size.
pub fn try_filled<T: Clone>(v: T, len: usize) -> Result<Vec<T>> {
    let mut x = Vec::new();
    if x.try_reserve_exact(len).is_err() {
        let bytes = (len as u128) * std::mem::size_of::<T>() as u128;
        return Err(Error::Memory(format!("cannot allocate a work buffer of {bytes} bytes")));
    }
    x.resize(len, v);
    Ok(x)
}

pub type Result<T> = std::result::Result<T, Error>;

/// Process-wide settings (the SIMD path, the thread count) under test: tests
/// that change them hold the write lock, tests whose outcome depends on them
/// the read lock, so that tests running in parallel never see each other's
/// settings.
#[cfg(test)]
static SETTINGS: std::sync::RwLock<()> = std::sync::RwLock::new(());

#[cfg(test)]
pub(crate) fn settings_write() -> std::sync::RwLockWriteGuard<'static, ()> {
    SETTINGS.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
pub(crate) fn settings_read() -> std::sync::RwLockReadGuard<'static, ()> {
    SETTINGS.read().unwrap_or_else(|e| e.into_inner())
}
