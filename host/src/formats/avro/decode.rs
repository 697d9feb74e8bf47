//! Avro's binary encoding read into JSON, following a [`Resolved`] plan.
//! The bytes are a stranger's: every length is checked against what is
//! left, nesting is bounded, and so is the number of values one record may
//! declare (an array of a billion nulls takes no bytes), so a record costs
//! at most a few times its own size in memory.
//!
//! The JSON the guest reads (docs/formats.md): longs and ints as numbers,
//! floats and doubles as numbers (NaN and the infinities as strings),
//! bytes and fixed as base64, decimals as decimal strings, dates as
//! `YYYY-MM-DD`, times and timestamps as RFC 3339 (UTC ones with `Z`),
//! enums as their symbol, a union as its branch's value.

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::resolve::{Plan, Resolved, Step};
use super::schema::{Logical, NamedKind, Node};

/// Values nested deeper than this (records, arrays, maps, unions) are
/// refused: a recursive schema allows any depth, the stack does not.
pub const MAX_NESTING: usize = 128;
/// Values beyond the record's bytes (each value takes a byte or more, but
/// a null none): this many more.
const SPARE_VALUES: usize = 1024;
/// The longest decimal read (its unscaled value's bytes): 77 digits.
const MAX_DECIMAL_BYTES: usize = 32;

/// Why bytes are not a value of the writer's schema, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    path: Vec<String>,
    what: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            return f.write_str(&self.what);
        }
        let path: Vec<&str> = self.path.iter().rev().map(String::as_str).collect();
        write!(f, "at `{}`: {}", path.join("."), self.what)
    }
}

/// The reader's symbol for the writer's symbol `index`.
fn enum_symbol(index: i32, writer: &[String], reader: &[Option<String>]) -> Result<Value, DecodeError> {
    let at = usize::try_from(index).ok().filter(|i| *i < writer.len());
    let Some(at) = at else {
        return fail(format!("enum symbol {index} does not exist ({} symbols)", writer.len()));
    };
    match &reader[at] {
        Some(symbol) => Ok(Value::String(symbol.clone())),
        None => fail(format!("enum symbol `{}` is not one the reader knows", writer[at])),
    }
}

fn fail<T>(what: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError { path: Vec::new(), what: what.into() })
}

/// `bytes` (one datum, nothing after it) as the reader's JSON.
pub fn decode(resolved: &Resolved, bytes: &[u8]) -> Result<Value, DecodeError> {
    let mut reader = Reader { bytes, at: 0, budget: bytes.len() + SPARE_VALUES, depth: 0, resolved };
    let value = reader.value(&resolved.root)?;
    match bytes.len() - reader.at {
        0 => Ok(value),
        left => fail(format!("{left} bytes are left after the record: it was not written with this schema")),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    budget: usize,
    depth: usize,
    resolved: &'a Resolved,
}

impl<'a> Reader<'a> {
    fn value(&mut self, plan: &Plan) -> Result<Value, DecodeError> {
        self.budget = self.budget.checked_sub(1).ok_or_else(too_many)?;
        self.deeper()?;
        let value = self.value_within(plan);
        self.depth -= 1;
        value
    }

    /// One level deeper, refused past [`MAX_NESTING`].
    fn deeper(&mut self) -> Result<(), DecodeError> {
        if self.depth >= MAX_NESTING {
            return fail(format!("values nest deeper than {MAX_NESTING} levels"));
        }
        self.depth += 1;
        Ok(())
    }

    fn value_within(&mut self, plan: &Plan) -> Result<Value, DecodeError> {
        Ok(match plan {
            Plan::Null => Value::Null,
            Plan::Boolean => match self.byte()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => return fail(format!("a boolean is 0 or 1, not {other}")),
            },
            Plan::Int(out) => {
                let n = self.int()?;
                match out {
                    Some(logical) => logical_number(i64::from(n), *logical)?,
                    None => float(f64::from(n)),
                }
            }
            Plan::Long(out) => {
                let n = self.long()?;
                match out {
                    Some(logical) => logical_number(n, *logical)?,
                    #[expect(clippy::cast_precision_loss, reason = "the specification's promotion of long to float")]
                    None => float(n as f64),
                }
            }
            Plan::Float => float(f64::from(f32::from_le_bytes(self.array()?))),
            Plan::Double => float(f64::from_le_bytes(self.array()?)),
            Plan::Bytes { logical, as_string } => {
                let bytes = self.sized()?;
                match (logical, as_string) {
                    (_, true) => Value::String(text(bytes)?),
                    (Some(Logical::Decimal { scale }), _) => decimal(bytes, *scale)?,
                    _ => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
                }
            }
            Plan::String { as_bytes } => {
                let bytes = self.sized()?;
                let text = text(bytes)?;
                if *as_bytes {
                    Value::String(base64::engine::general_purpose::STANDARD.encode(text))
                } else {
                    Value::String(text)
                }
            }
            Plan::Array(items) => self.array_of(items)?,
            Plan::Map(values) => self.map_of(values)?,
            Plan::Union(branches) => self.union_of(branches)?,
            Plan::Record(index) => self.record(*index)?,
            Plan::Enum { writer, reader } => enum_symbol(self.int()?, writer, reader)?,
            Plan::Fixed { size, logical } => {
                let bytes = self.take(*size)?;
                match logical {
                    Some(Logical::Decimal { scale }) => decimal(bytes, *scale)?,
                    _ => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
                }
            }
        })
    }

    fn array_of(&mut self, items: &Plan) -> Result<Value, DecodeError> {
        let mut list = Vec::new();
        self.blocks(|reader| {
            list.push(reader.value(items)?);
            Ok(())
        })?;
        Ok(Value::Array(list))
    }

    fn map_of(&mut self, values: &Plan) -> Result<Value, DecodeError> {
        let mut map = Map::new();
        self.blocks(|reader| {
            let key = text(reader.sized()?)?;
            let value = reader.value(values).map_err(|e| within(e, &key))?;
            map.insert(key, value);
            Ok(())
        })?;
        Ok(Value::Object(map))
    }

    /// The branch the writer chose, read with its plan (or why the reader
    /// cannot read it).
    fn union_of(&mut self, branches: &[Result<Plan, String>]) -> Result<Value, DecodeError> {
        let index = self.long()?;
        match usize::try_from(index).ok().and_then(|i| branches.get(i)) {
            Some(Ok(plan)) => self.value(plan),
            Some(Err(why)) => fail(format!("union branch {index}: {why}")),
            None => fail(format!("union branch {index} does not exist ({} branches)", branches.len())),
        }
    }

    fn record(&mut self, index: usize) -> Result<Value, DecodeError> {
        let plan = &self.resolved.records[index];
        // The defaults are values the record's bytes do not hold.
        self.budget = self.budget.checked_sub(plan.defaults.len()).ok_or_else(too_many)?;
        let mut object = Map::new();
        for step in &plan.steps {
            match step {
                Step::Read(name, field) => {
                    let value = self.value(field).map_err(|e| within(e, name))?;
                    object.insert(name.clone(), value);
                }
                Step::Skip(node) => self.skip(node)?,
            }
        }
        for (name, default) in &plan.defaults {
            object.insert(name.clone(), default.clone());
        }
        Ok(Value::Object(object))
    }

    /// Reads a writer value the reader has no field for, keeping nothing.
    fn skip(&mut self, node: &Node) -> Result<(), DecodeError> {
        self.budget = self.budget.checked_sub(1).ok_or_else(too_many)?;
        self.deeper()?;
        let skipped = self.skip_within(node);
        self.depth -= 1;
        skipped
    }

    fn skip_within(&mut self, node: &Node) -> Result<(), DecodeError> {
        match node {
            Node::Null => {}
            Node::Boolean => _ = self.byte()?,
            Node::Int(_) => _ = self.int()?,
            Node::Long(_) => _ = self.long()?,
            Node::Float => _ = self.take(4)?,
            Node::Double => _ = self.take(8)?,
            Node::Bytes(_) | Node::String => _ = self.sized()?,
            Node::Array(items) => self.blocks(|reader| reader.skip(items))?,
            Node::Map(values) => self.blocks(|reader| {
                reader.sized()?;
                reader.skip(values)
            })?,
            Node::Union(branches) => {
                let index = self.long()?;
                let Some(branch) = usize::try_from(index).ok().and_then(|i| branches.get(i)) else {
                    return fail(format!("union branch {index} does not exist ({} branches)", branches.len()));
                };
                self.skip(branch)?;
            }
            Node::Named(index) => {
                let writer = &self.resolved.writer;
                match &writer.named[*index].kind {
                    NamedKind::Fixed { size, .. } => _ = self.take(*size)?,
                    NamedKind::Enum { .. } => _ = self.int()?,
                    NamedKind::Record(fields) => {
                        for field in fields {
                            self.skip(&field.node)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// An array's or a map's blocks: a count (negative: followed by the
    /// block's size in bytes), its items, until a zero count.
    fn blocks(&mut self, mut item: impl FnMut(&mut Self) -> Result<(), DecodeError>) -> Result<(), DecodeError> {
        loop {
            let count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                let _size = self.long()?;
            }
            let count = count.checked_abs().ok_or_else(too_many)?;
            if usize::try_from(count).map_or(true, |n| n > self.budget) {
                return Err(too_many());
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let left = self.bytes.len() - self.at;
        if n > left {
            return fail(format!("{n} bytes are needed where {left} are left: the record is cut short"));
        }
        let bytes: &'a [u8] = self.bytes;
        let out = &bytes[self.at..self.at + n];
        self.at += n;
        Ok(out)
    }

    /// A length, then that many bytes.
    fn sized(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.long()?;
        let n = usize::try_from(n).or_else(|_| fail(format!("a negative length ({n})")))?;
        self.take(n)
    }

    fn int(&mut self) -> Result<i32, DecodeError> {
        let n = self.long()?;
        i32::try_from(n).or_else(|_| fail(format!("{n} does not fit an int")))
    }

    /// A zig-zag varint of at most 10 bytes.
    fn long(&mut self) -> Result<i64, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            let byte = self.byte().or_else(|_| fail("a number is cut short"))?;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                #[expect(clippy::cast_possible_wrap, reason = "zig-zag decoding works on the bits")]
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        fail("a number's varint is longer than 10 bytes")
    }
}

fn text(bytes: &[u8]) -> Result<String, DecodeError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => fail(format!("a string is not UTF-8 ({e})")),
    }
}

fn too_many() -> DecodeError {
    DecodeError { path: Vec::new(), what: "the record declares more values than its bytes can hold".into() }
}

fn within(mut error: DecodeError, name: &str) -> DecodeError {
    error.path.push(name.to_owned());
    error
}

fn float(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// An int or long under the reader's logical type.
fn logical_number(n: i64, logical: Option<Logical>) -> Result<Value, DecodeError> {
    use chrono::{DateTime, NaiveDate, NaiveTime, SecondsFormat};
    let out_of_range = || DecodeError { path: Vec::new(), what: format!("{n} is out of range for its logical type") };
    let stamp = |t: Option<DateTime<chrono::Utc>>, format: SecondsFormat, utc: bool| {
        // RFC 3339 has four-digit years.
        let t = t.filter(|t| (0..=9999).contains(&chrono::Datelike::year(t))).ok_or_else(out_of_range)?;
        let text = if utc {
            t.to_rfc3339_opts(format, true)
        } else {
            t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.f").to_string()
        };
        Ok::<_, DecodeError>(Value::String(text))
    };
    match logical {
        None | Some(Logical::Decimal { .. }) => Ok(Value::Number(n.into())),
        Some(Logical::Date) => {
            let days = i32::try_from(n).ok().and_then(|d| d.checked_add(719_163));
            let date = days.and_then(NaiveDate::from_num_days_from_ce_opt).ok_or_else(out_of_range)?;
            Ok(Value::String(date.format("%Y-%m-%d").to_string()))
        }
        Some(Logical::TimeMillis | Logical::TimeMicros) => {
            let micros = if logical == Some(Logical::TimeMillis) { n.checked_mul(1000) } else { Some(n) };
            let micros = micros.filter(|m| (0..86_400_000_000).contains(m)).ok_or_else(out_of_range)?;
            let seconds = u32::try_from(micros / 1_000_000).map_err(|_| out_of_range())?;
            let nanos = u32::try_from(micros % 1_000_000 * 1000).map_err(|_| out_of_range())?;
            let time = NaiveTime::from_num_seconds_from_midnight_opt(seconds, nanos).ok_or_else(out_of_range)?;
            Ok(Value::String(time.format("%H:%M:%S%.f").to_string()))
        }
        Some(Logical::TimestampMillis) => stamp(DateTime::from_timestamp_millis(n), SecondsFormat::Millis, true),
        Some(Logical::TimestampMicros) => stamp(DateTime::from_timestamp_micros(n), SecondsFormat::Micros, true),
        Some(Logical::LocalTimestampMillis) => stamp(DateTime::from_timestamp_millis(n), SecondsFormat::Millis, false),
        Some(Logical::LocalTimestampMicros) => stamp(DateTime::from_timestamp_micros(n), SecondsFormat::Micros, false),
    }
}

/// A decimal's unscaled big-endian two's-complement bytes, as a decimal string.
fn decimal(bytes: &[u8], scale: u32) -> Result<Value, DecodeError> {
    if bytes.len() > MAX_DECIMAL_BYTES {
        return fail(format!("a decimal of {} bytes (at most {MAX_DECIMAL_BYTES})", bytes.len()));
    }
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    // The magnitude, big-endian: the two's complement undone.
    let mut magnitude: Vec<u8> = if negative { bytes.iter().map(|b| !b).collect() } else { bytes.to_vec() };
    if negative {
        for byte in magnitude.iter_mut().rev() {
            let (sum, carry) = byte.overflowing_add(1);
            *byte = sum;
            if !carry {
                break;
            }
        }
    }
    let mut digits = Vec::new();
    while magnitude.iter().any(|b| *b != 0) {
        let mut remainder = 0u32;
        for byte in &mut magnitude {
            let current = (remainder << 8) | u32::from(*byte);
            *byte = u8::try_from(current / 10).unwrap_or(0);
            remainder = current % 10;
        }
        digits.push(char::from(b'0' + u8::try_from(remainder).unwrap_or(0)));
    }
    let scale = usize::try_from(scale).unwrap_or(usize::MAX);
    while digits.len() <= scale {
        digits.push('0');
    }
    let mut text = String::with_capacity(digits.len() + 2);
    if negative {
        text.push('-');
    }
    for (i, digit) in digits.iter().rev().enumerate() {
        if scale > 0 && i == digits.len() - scale {
            text.push('.');
        }
        text.push(*digit);
    }
    Ok(Value::String(text))
}

#[cfg(test)]
mod tests;
