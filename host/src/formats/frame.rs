//! The schema registry's framing (Confluent's wire format, which Apicurio's
//! Confluent-compatible serdes write too): a magic byte 0, the writer
//! schema's id as a big-endian 4-byte integer, then the encoded record; a
//! Protobuf record has the path of its message in the schema file between
//! the id and the message (a zig-zag varint count, then as many indexes; a
//! lone 0 for the file's first message).

use super::Unreadable;

/// Message indexes one record may carry: a path into nested messages.
const MAX_INDEXES: usize = 32;

/// A framed record's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framed<'a> {
    pub schema_id: u32,
    pub body: &'a [u8],
}

/// The schema id and what follows it. Ids are positive 32-bit integers:
/// 0 and the negative ones are refused without asking the registry.
pub fn split(payload: &[u8]) -> Result<Framed<'_>, Unreadable> {
    let bad = |what: String| Err(Unreadable::Frame(what));
    let Some((&magic, rest)) = payload.split_first() else { return bad("the payload is empty".into()) };
    if magic != 0 {
        return bad(format!("its first byte is {magic}, not the magic byte 0"));
    }
    let Some((id, body)) = rest.split_first_chunk::<4>() else {
        return bad(format!("{} bytes, too short for a schema id", payload.len()));
    };
    let id = i32::from_be_bytes(*id);
    match u32::try_from(id) {
        Ok(schema_id) if schema_id > 0 => Ok(Framed { schema_id, body }),
        _ => Err(Unreadable::Frame(format!("schema id {id} is not a positive number"))),
    }
}

/// A Protobuf record's message indexes, and the message's bytes.
pub fn message_indexes(body: &[u8]) -> Result<(Vec<usize>, &[u8]), Unreadable> {
    let (count, mut rest) = varint(body)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|n| *n <= MAX_INDEXES)
        .ok_or_else(|| Unreadable::Frame(format!("{count} message indexes (at most {MAX_INDEXES})")))?;
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let (index, after) = varint(rest)?;
        let index = usize::try_from(index).map_err(|_| Unreadable::Frame(format!("message index {index}")))?;
        indexes.push(index);
        rest = after;
    }
    Ok((indexes, rest))
}

/// A zig-zag varint of at most 10 bytes.
fn varint(bytes: &[u8]) -> Result<(i64, &[u8]), Unreadable> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            #[expect(clippy::cast_possible_wrap, reason = "zig-zag decoding works on the bits")]
            let n = (value >> 1) as i64 ^ -((value & 1) as i64);
            return Ok((n, &bytes[i + 1..]));
        }
    }
    Err(Unreadable::Frame("the message indexes are cut short or longer than 10 bytes".into()))
}

/// `body` framed for schema `id` (what `idem test` and the outbox write).
pub fn frame(id: u32, indexes: Option<&[usize]>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 6);
    out.push(0);
    out.extend_from_slice(&id.to_be_bytes());
    if let Some(indexes) = indexes {
        if indexes == [0] {
            out.push(0);
        } else {
            for n in std::iter::once(indexes.len()).chain(indexes.iter().copied()) {
                let mut v = u64::try_from(n).unwrap_or(0) << 1;
                while v >= 0x80 {
                    out.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
                    v >>= 7;
                }
                out.push(u8::try_from(v).unwrap_or(0));
            }
        }
    }
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_splits_into_its_id_and_body_and_back() {
        let framed = frame(7, None, b"xy");
        assert_eq!(split(&framed), Ok(Framed { schema_id: 7, body: b"xy" }));
        let nested = frame(9, Some(&[1, 2]), b"m");
        let Framed { body, .. } = split(&nested).expect("framed");
        assert_eq!(message_indexes(body), Ok((vec![1, 2], &b"m"[..])));
        assert_eq!(message_indexes(&frame(9, Some(&[0]), b"m")[5..]), Ok((vec![0], &b"m"[..])));
    }

    #[test]
    fn what_is_not_a_frame_is_named() {
        for (bytes, expected) in [
            (vec![], "empty"),
            (vec![1, 0, 0, 0, 1], "not the magic byte 0"),
            (vec![0, 0, 0], "too short"),
            (vec![0, 0, 0, 0, 0, 1], "schema id 0 is not a positive number"),
            (vec![0, 0xff, 0xff, 0xff, 0xff], "schema id -1 is not a positive number"),
        ] {
            let Err(Unreadable::Frame(error)) = split(&bytes) else { panic!("{bytes:?} refused") };
            assert!(error.contains(expected), "{bytes:?}: {error}");
        }
        assert!(message_indexes(&[0x80; 12]).is_err(), "an endless varint");
        assert!(message_indexes(&[200, 1]).is_err(), "a hundred indexes");
    }
}
