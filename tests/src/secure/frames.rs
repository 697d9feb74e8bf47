//! The few pieces of Kafka's wire protocol the secure listener speaks
//! itself: size-prefixed frames, request headers, the ApiVersions answer
//! (extended with the SASL APIs the mock cluster lacks), and the
//! SaslHandshake and SaslAuthenticate responses.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

pub const API_VERSIONS: i16 = 18;
pub const SASL_HANDSHAKE: i16 = 17;
pub const SASL_AUTHENTICATE: i16 = 36;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

const MAX_FRAME: usize = 64 << 20;

pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Vec<u8>> {
    let len = usize::try_from(reader.read_u32().await?).unwrap_or(usize::MAX);
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("frame of {len} bytes")));
    }
    let mut frame = vec![0; len];
    reader.read_exact(&mut frame).await?;
    Ok(frame)
}

pub async fn write_frame<W: AsyncWrite + Unpin>(writer: &mut W, frame: &[u8]) -> io::Result<()> {
    let len = u32::try_from(frame.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "frame too large"))?;
    writer.write_u32(len).await?;
    writer.write_all(frame).await?;
    writer.flush().await
}

/// A request's header (v1: no tagged fields) and what follows it.
#[derive(Debug)]
pub struct Request<'a> {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    /// The body, for the non-flexible versions this listener parses.
    pub body: &'a [u8],
}

pub fn parse_request(frame: &[u8]) -> Option<Request<'_>> {
    let mut r = Reader(frame);
    let api_key = r.i16()?;
    let api_version = r.i16()?;
    let correlation_id = r.i32()?;
    let client_id = r.i16()?;
    if client_id > 0 {
        r.take(usize::try_from(client_id).ok()?)?;
    }
    Some(Request { api_key, api_version, correlation_id, body: r.0 })
}

/// A Kafka `STRING` (SaslHandshake's mechanism).
pub fn string(body: &[u8]) -> Option<String> {
    let mut r = Reader(body);
    let len = usize::try_from(r.i16()?).ok()?;
    String::from_utf8(r.take(len)?.to_vec()).ok()
}

/// A Kafka `BYTES` (SaslAuthenticate's auth_bytes).
pub fn bytes(body: &[u8]) -> Option<Vec<u8>> {
    let mut r = Reader(body);
    let len = usize::try_from(r.i32()?).ok()?;
    Some(r.take(len)?.to_vec())
}

pub fn handshake_response(correlation_id: i32, error: i16, mechanism: &str) -> Vec<u8> {
    let mut out = correlation_id.to_be_bytes().to_vec();
    out.extend(error.to_be_bytes());
    out.extend(1i32.to_be_bytes());
    put_string(&mut out, mechanism);
    out
}

pub fn authenticate_response(request: &Request<'_>, error: i16, message: Option<&str>, auth: &[u8]) -> Vec<u8> {
    let mut out = request.correlation_id.to_be_bytes().to_vec();
    out.extend(error.to_be_bytes());
    match message {
        Some(m) => put_string(&mut out, m),
        None => out.extend((-1i16).to_be_bytes()),
    }
    out.extend(i32::try_from(auth.len()).unwrap_or(0).to_be_bytes());
    out.extend(auth);
    if request.api_version >= 1 {
        out.extend(0i64.to_be_bytes()); // session_lifetime_ms: no re-authentication
    }
    out
}

/// The broker's ApiVersions response with SaslHandshake v0–1 and
/// SaslAuthenticate v0–1 added, so that clients go through SASL. The
/// response header is v0 (correlation id only) for every version; the body
/// is flexible (compact array, tagged fields) from v3.
pub fn add_sasl_apis(version: i16, response: &[u8]) -> Option<Vec<u8>> {
    let mut r = Reader(response);
    let correlation_id = r.i32()?;
    let error = r.i16()?;
    if error != 0 {
        return Some(response.to_vec());
    }
    let flexible = version >= 3;
    let count =
        if flexible { usize::try_from(r.uvarint()?.checked_sub(1)?).ok()? } else { usize::try_from(r.i32()?).ok()? };
    let entries_start = response.len() - r.0.len();
    for _ in 0..count {
        r.take(6)?;
        if flexible {
            r.skip_tags()?;
        }
    }
    let entries_end = response.len() - r.0.len();
    let mut out = correlation_id.to_be_bytes().to_vec();
    out.extend(error.to_be_bytes());
    if flexible {
        put_uvarint(&mut out, u64::try_from(count + 3).ok()?);
    } else {
        out.extend(i32::try_from(count + 2).ok()?.to_be_bytes());
    }
    out.extend(&response[entries_start..entries_end]);
    for key in [SASL_HANDSHAKE, SASL_AUTHENTICATE] {
        out.extend(key.to_be_bytes());
        out.extend(0i16.to_be_bytes());
        out.extend(1i16.to_be_bytes());
        if flexible {
            out.push(0); // no tagged fields
        }
    }
    out.extend(&response[entries_end..]);
    Some(out)
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend(i16::try_from(s.len()).unwrap_or(0).to_be_bytes());
    out.extend(s.as_bytes());
}

fn put_uvarint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    fn skip_tags(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }
}
