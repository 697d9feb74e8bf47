//! Log through the host, which tags every line with the handler and event.

use crate::bindings::idem::handler::log::{self as wit, Level};

pub fn debug(message: impl AsRef<str>) {
    wit::log(Level::Debug, message.as_ref());
}

pub fn info(message: impl AsRef<str>) {
    wit::log(Level::Info, message.as_ref());
}

pub fn warn(message: impl AsRef<str>) {
    wit::log(Level::Warn, message.as_ref());
}

pub fn error(message: impl AsRef<str>) {
    wit::log(Level::Error, message.as_ref());
}
