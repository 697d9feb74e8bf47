//! Dead-letter records are authenticated: anyone who can produce to a DLQ
//! topic could otherwise make `idem dlq replay` apply an event that never
//! was on the source topic, a different payload under a real event's id,
//! or a copy that supersedes a genuine dead letter.
//!
//! The seal is HMAC-SHA256, keyed by `[dlq] key_env`'s key, over the
//! record's key, value and every header before it (names and values, in
//! order, each length-prefixed so no two records encode alike). It is the
//! record's last header, `idem.seal: v1:<hex>`. Whatever a forger changes,
//! adds or reorders, the seal no longer verifies; copying a genuine sealed
//! record only repeats a dead letter idem wrote (its event id deduplicates).

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::config::DlqConfig;

type HmacSha256 = Hmac<Sha256>;

const VERSION: &str = "v1:";
const MIN_KEY_BYTES: usize = 32;

/// What a DLQ record's seal says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authenticity {
    /// Sealed with the current or the previous key: idem wrote it.
    Sealed,
    /// No seal: written before seals existed, or by someone else.
    Unsealed,
    /// A seal that does not verify (or several): forged or damaged.
    Forged,
}

/// The keys records are sealed and verified with (each an HMAC state,
/// keyed once).
#[derive(Clone)]
pub struct Keys {
    current: HmacSha256,
    previous: Option<HmacSha256>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys { .. }")
    }
}

/// One header of a record, as the seal covers it.
pub type Field<'a> = (&'a str, Option<&'a [u8]>);

impl Keys {
    /// The keys `config` names (a file, or else a variable). The current
    /// key is required; errors name the variable or file, never a key.
    pub fn load(config: &DlqConfig) -> anyhow::Result<Self> {
        let current = match &config.key_file {
            Some(file) => Some(read_file(file)?),
            None => read_env(&config.key_env),
        };
        let Some((what, current)) = current else {
            anyhow::bail!(
                "${} is not set: a handler has on_failure = \"dlq\", and dead-letter records are sealed with this \
                 key so that replay applies only records idem wrote; set it to 64 or more hex digits (e.g. \
                 `openssl rand -hex 32`), the same on every host of the group ([dlq] key_env names another \
                 variable, key_file a file)",
                config.key_env
            );
        };
        let previous = match &config.previous_key_file {
            Some(file) => Some(read_file(file)?),
            None => read_env(&config.previous_key_env),
        };
        let previous = previous.map(|(what, hex)| keyed(&what, &hex)).transpose()?;
        Ok(Self { current: keyed(&what, &current)?, previous })
    }

    /// Keys from hex text (the harness's; the host reads files).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn from_hex(current: &str, previous: Option<&str>) -> anyhow::Result<Self> {
        let previous = previous.map(|p| keyed("the previous key", p)).transpose()?;
        Ok(Self { current: keyed("the key", current)?, previous })
    }

    /// The `idem.seal` value of a record with this key, value and headers.
    pub fn seal<'a>(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = Field<'a>>,
    ) -> String {
        let mut m = self.current.clone();
        feed(&mut m, key, value, headers);
        format!("{VERSION}{}", hex::encode(m.finalize().into_bytes()))
    }

    /// Checks a record read back: all its headers in order, the seal among them.
    pub fn verify(&self, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Field<'_>]) -> Authenticity {
        let is_seal = |(name, _): &&Field<'_>| *name == super::headers::SEAL;
        let seal = match headers.iter().filter(is_seal).collect::<Vec<_>>().as_slice() {
            [] => return Authenticity::Unsealed,
            [(_, one)] => *one,
            _ => return Authenticity::Forged,
        };
        let given = seal
            .and_then(|s| std::str::from_utf8(s).ok())
            .and_then(|s| s.strip_prefix(VERSION))
            .and_then(|s| hex::decode(s).ok());
        let Some(given) = given else { return Authenticity::Forged };
        let verifies = std::iter::once(&self.current).chain(self.previous.as_ref()).any(|k| {
            let mut m = k.clone();
            feed(&mut m, key, value, headers.iter().filter(|h| !is_seal(h)).copied());
            m.verify_slice(&given).is_ok()
        });
        if verifies { Authenticity::Sealed } else { Authenticity::Forged }
    }
}

/// A key from the environment: (what to call it in errors, its text).
fn read_env(var: &str) -> Option<(String, String)> {
    crate::env::non_blank(var).map(|v| (format!("${var}"), v))
}

fn read_file(file: &std::path::Path) -> anyhow::Result<(String, String)> {
    let text = crate::files::read_text(file).map_err(|e| anyhow::anyhow!("[dlq] key file {}: {e}", file.display()))?;
    Ok((format!("[dlq] key file {}", file.display()), text))
}

/// An HMAC keyed by `hex` (at least 32 bytes); errors name `what`.
fn keyed(what: &str, hex: &str) -> anyhow::Result<HmacSha256> {
    let bytes = hex::decode(hex.trim()).map_err(|_| anyhow::anyhow!("{what} is not hex digits"))?;
    if bytes.len() < MIN_KEY_BYTES {
        anyhow::bail!("{what} is {} bytes: a DLQ key needs at least {MIN_KEY_BYTES} (64 hex digits)", bytes.len());
    }
    HmacSha256::new_from_slice(&bytes).map_err(|e| anyhow::anyhow!("{what}: {e}"))
}

/// The record's canonical bytes: each field absent (0xff) or present (0x00,
/// its length as 8 bytes, its bytes).
fn feed<'a>(
    m: &mut HmacSha256,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl IntoIterator<Item = Field<'a>>,
) {
    let mut field = |bytes: Option<&[u8]>| match bytes {
        None => m.update(&[0xff]),
        Some(b) => {
            m.update(&[0x00]);
            m.update(&(b.len() as u64).to_be_bytes());
            m.update(b);
        }
    };
    field(Some(b"idem.dlq.v1"));
    field(key);
    field(value);
    for (name, v) in headers {
        field(Some(name.as_bytes()));
        field(v);
    }
}

#[cfg(test)]
mod tests;
