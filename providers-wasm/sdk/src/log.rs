//! Logging through the host, which attributes every line to this provider.
//!
//! ```ignore
//! capstan_provider_sdk::info!("launched {} in {}", name, zone);
//! capstan_provider_sdk::log!(capstan_provider_sdk::log::Level::Debug, "cache miss");
//! ```

pub use crate::bindings::capstan::provider::host::LogLevel as Level;

/// Writes one line at `level`.
pub fn write(level: Level, message: &str) {
    crate::bindings::capstan::provider::host::log(level, message);
}

/// Logs a formatted line at a [`Level`](crate::log::Level).
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log::write($level, &::std::format!($($arg)+))
    };
}

/// Logs a formatted line at `trace`.
#[macro_export]
macro_rules! trace {
    ($($arg:tt)+) => { $crate::log!($crate::log::Level::Trace, $($arg)+) };
}

/// Logs a formatted line at `debug`.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!($crate::log::Level::Debug, $($arg)+) };
}

/// Logs a formatted line at `info`.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!($crate::log::Level::Info, $($arg)+) };
}

/// Logs a formatted line at `warn`.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!($crate::log::Level::Warn, $($arg)+) };
}

/// Logs a formatted line at `error`.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!($crate::log::Level::Error, $($arg)+) };
}
