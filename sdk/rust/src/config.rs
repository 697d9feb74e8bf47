//! The handler's configuration: the key/values under `[handler.config]` in
//! the host's config file.

use crate::bindings::idem::handler::config as wit;
use crate::error::Error;

/// The value configured for `key`, if any.
pub fn get(key: &str) -> Option<String> {
    wit::get(key)
}

/// The value configured for `key`; a missing key is a permanent error that
/// names it (retrying will not make the operator add it).
pub fn require(key: &str) -> Result<String, Error> {
    get(key).ok_or_else(|| Error::permanent(format!("config key `{key}` is not set for this handler")))
}
