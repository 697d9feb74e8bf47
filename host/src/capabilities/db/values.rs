//! Guest values to PostgreSQL parameters and back.
//!
//! Parameters are declared with the type their variant names (`int64` as
//! `int8`, `numeric` as `numeric`, …); `null` is declared untyped so the
//! server infers it. Columns come back by their type; a type without a
//! variant is an error that tells the guest to cast it to text.

use std::str::FromStr as _;

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgArgumentBuffer, PgArguments, PgConnection, PgRow, PgTypeInfo};
use sqlx::types::chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use sqlx::types::{BigDecimal, Uuid};
use sqlx::{Arguments as _, Column as _, Postgres, Row as _, TypeInfo as _, ValueRef as _};

use crate::wit::db::{Rows, Value};

/// The longest numeric parameter accepted, in characters.
const MAX_NUMERIC_CHARS: usize = 1_000;

/// A statement with its parameters bound.
pub(crate) struct Bound {
    sql: String,
    args: PgArguments,
}

impl Bound {
    /// The statement's text (what a scripted transaction records).
    #[cfg(test)]
    pub(super) fn sql(&self) -> &str {
        &self.sql
    }

    pub(super) async fn execute(self, conn: &mut PgConnection) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query_with(&self.sql, self.args).execute(conn).await?.rows_affected())
    }

    /// The statement's rows, unless together they are larger than
    /// `max_bytes` (then `None`: the rest is never buffered).
    pub(super) async fn fetch_capped(
        self,
        conn: &mut PgConnection,
        max_bytes: usize,
    ) -> Result<Option<Vec<PgRow>>, sqlx::Error> {
        use futures::TryStreamExt as _;
        use sqlx::Row as _;
        let mut rows = Vec::new();
        let mut bytes = 0usize;
        let mut stream = sqlx::query_with(&self.sql, self.args).fetch(conn);
        while let Some(row) = stream.try_next().await? {
            for i in 0..row.len() {
                bytes += row.try_get_raw(i).ok().and_then(|v| v.as_bytes().ok()).map_or(0, <[u8]>::len);
            }
            if bytes > max_bytes {
                return Ok(None);
            }
            rows.push(row);
        }
        Ok(Some(rows))
    }
}

/// A NULL whose type the server infers from the statement.
struct UntypedNull;

impl sqlx::Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl sqlx::Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(&self, _: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Ok(IsNull::Yes)
    }
}

/// Binds `params` to `statement`.
///
/// sqlx caches prepared statements by their text alone, with the parameter
/// types of their first use. A guest that runs one statement with, say, a
/// text parameter and later an integer one would then send an integer's
/// bytes for a text parameter. So the cache key carries the parameter types:
/// a trailing comment that PostgreSQL ignores.
pub(super) fn bind(statement: &str, params: Vec<Value>) -> Result<Bound, String> {
    let mut args = PgArguments::default();
    sqlx::Arguments::reserve(&mut args, params.len(), 16 * params.len());
    let mut signature = String::with_capacity(8 * params.len());
    for (i, value) in params.into_iter().enumerate() {
        let n = i + 1;
        let (tag, added) = match value {
            Value::Null => ("null", args.add(UntypedNull)),
            Value::Boolean(v) => ("bool", args.add(v)),
            Value::Int64(v) => ("int8", args.add(v)),
            Value::Float64(v) => ("float8", args.add(v)),
            Value::Text(v) => ("text", args.add(v)),
            Value::Bytes(v) => ("bytea", args.add(v)),
            Value::Json(v) => {
                let json = serde_json::Value::from_str(&v).map_err(|e| format!("parameter ${n}: not JSON: {e}"))?;
                ("jsonb", args.add(sqlx::types::Json(json)))
            }
            Value::Uuid(v) => {
                let uuid = Uuid::parse_str(&v).map_err(|e| format!("parameter ${n}: `{v}` is not a UUID: {e}"))?;
                ("uuid", args.add(uuid))
            }
            Value::Timestamp(v) => {
                let ts = DateTime::parse_from_rfc3339(&v)
                    .map_err(|e| format!("parameter ${n}: `{v}` is not an RFC 3339 timestamp: {e}"))?;
                ("timestamptz", args.add(ts.with_timezone(&Utc)))
            }
            // Parsing a decimal costs time quadratic in its digits.
            Value::Numeric(v) if v.len() > MAX_NUMERIC_CHARS => {
                return Err(format!("parameter ${n}: a numeric of more than {MAX_NUMERIC_CHARS} characters"));
            }
            Value::Numeric(v) => {
                let number = BigDecimal::from_str(&v)
                    .map_err(|e| format!("parameter ${n}: `{v}` is not a decimal number: {e}"))?;
                ("numeric", args.add(number))
            }
        };
        added.map_err(|e| format!("parameter ${n}: {e}"))?;
        signature.push_str(if signature.is_empty() { "" } else { "," });
        signature.push_str(tag);
    }
    // Sized once: `format!` grew it from nothing, a copy each time.
    const NOTE: [&str; 2] = ["\n/* idem params: ", " */"];
    let mut sql = String::with_capacity(statement.len() + NOTE[0].len() + signature.len() + NOTE[1].len());
    sql.push_str(statement);
    if !signature.is_empty() {
        sql.extend([NOTE[0], &signature, NOTE[1]]);
    }
    Ok(Bound { sql, args })
}

/// Converts fetched rows to the guest's representation.
pub(super) fn rows(fetched: &[PgRow]) -> Result<Rows, String> {
    let columns =
        fetched.first().map(|row| row.columns().iter().map(|c| c.name().to_owned()).collect()).unwrap_or_default();
    let rows = fetched.iter().map(row).collect::<Result<_, _>>()?;
    Ok(Rows { columns, rows })
}

fn row(row: &PgRow) -> Result<Vec<Value>, String> {
    (0..row.columns().len()).map(|i| column(row, i)).collect()
}

fn column(row: &PgRow, i: usize) -> Result<Value, String> {
    let col = &row.columns()[i];
    let type_name = col.type_info().name().to_owned();
    let decode_error = |e: sqlx::Error| format!("column `{}` ({type_name}): {e}", col.name());
    if row.try_get_raw(i).map_err(decode_error)?.is_null() {
        return Ok(Value::Null);
    }
    let value = match type_name.as_str() {
        "BOOL" => Value::Boolean(row.try_get(i).map_err(decode_error)?),
        "INT2" => Value::Int64(row.try_get::<i16, _>(i).map_err(decode_error)?.into()),
        "INT4" => Value::Int64(row.try_get::<i32, _>(i).map_err(decode_error)?.into()),
        "INT8" => Value::Int64(row.try_get(i).map_err(decode_error)?),
        "FLOAT4" => Value::Float64(row.try_get::<f32, _>(i).map_err(decode_error)?.into()),
        "FLOAT8" => Value::Float64(row.try_get(i).map_err(decode_error)?),
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CITEXT" | "UNKNOWN" => {
            Value::Text(row.try_get_unchecked(i).map_err(decode_error)?)
        }
        "BYTEA" => Value::Bytes(row.try_get(i).map_err(decode_error)?),
        "JSON" | "JSONB" => Value::Json(row.try_get::<serde_json::Value, _>(i).map_err(decode_error)?.to_string()),
        "UUID" => Value::Uuid(row.try_get::<Uuid, _>(i).map_err(decode_error)?.to_string()),
        "TIMESTAMPTZ" => Value::Timestamp(
            row.try_get::<DateTime<Utc>, _>(i)
                .map_err(decode_error)?
                .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        ),
        // Without a zone there is no instant: hand it over as text.
        "TIMESTAMP" => Value::Text(
            row.try_get::<NaiveDateTime, _>(i).map_err(decode_error)?.format("%Y-%m-%dT%H:%M:%S%.f").to_string(),
        ),
        "DATE" => Value::Text(row.try_get::<NaiveDate, _>(i).map_err(decode_error)?.to_string()),
        "TIME" => Value::Text(row.try_get::<NaiveTime, _>(i).map_err(decode_error)?.to_string()),
        "NUMERIC" => {
            let raw = row.try_get_raw(i).map_err(decode_error)?;
            let bytes = raw.as_bytes().map_err(|e| format!("column `{}`: {e}", col.name()))?;
            Value::Numeric(numeric_text(bytes).map_err(|e| format!("column `{}`: {e}", col.name()))?)
        }
        other => {
            return Err(format!(
                "column `{}` has type {other}, which handlers cannot receive; cast it in the query (e.g. `{}::text`)",
                col.name(),
                col.name()
            ));
        }
    };
    Ok(value)
}

/// PostgreSQL's text form of a binary `numeric`, display scale included
/// (`numeric(14,2)` 1.5 is `1.50`, as psql shows it).
///
/// The binary form: digit count, weight (of the first base-10000 digit),
/// sign, display scale, then the base-10000 digits.
fn numeric_text(bytes: &[u8]) -> Result<String, String> {
    let word = |at: usize| -> Result<u16, String> {
        bytes.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or_else(|| "truncated numeric".to_owned())
    };
    let (ndigits, weight, sign, dscale) = (word(0)? as usize, word(2)? as i16, word(4)?, word(6)? as usize);
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        _ => {}
    }
    let digits: Vec<u16> = (0..ndigits).map(|j| word(8 + 2 * j)).collect::<Result<_, _>>()?;
    let digit = |j: i32| if j >= 0 { digits.get(j as usize).copied().unwrap_or(0) } else { 0 };
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        text.push_str(&digit(0).to_string());
        for j in 1..=i32::from(weight) {
            text.push_str(&format!("{:04}", digit(j)));
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut g = 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit(i32::from(weight) + g)));
            g += 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::numeric_text;

    fn numeric(ndigits: u16, weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in [ndigits, weight as u16, sign, dscale].into_iter().chain(digits.iter().copied()) {
            b.extend_from_slice(&w.to_be_bytes());
        }
        b
    }

    #[test]
    fn numeric_text_matches_postgres() {
        assert_eq!(numeric_text(&numeric(2, 0, 0, 2, &[1, 5000])).as_deref(), Ok("1.50"));
        assert_eq!(numeric_text(&numeric(1, -1, 0x4000, 3, &[1250])).as_deref(), Ok("-0.125"));
        assert_eq!(numeric_text(&numeric(2, 1, 0, 0, &[12, 3456])).as_deref(), Ok("123456"));
        assert_eq!(numeric_text(&numeric(0, 0, 0, 0, &[])).as_deref(), Ok("0"));
        assert_eq!(numeric_text(&numeric(1, 2, 0, 0, &[7])).as_deref(), Ok("700000000"));
        assert_eq!(numeric_text(&numeric(1, -2, 0, 6, &[5000])).as_deref(), Ok("0.000050"));
        assert_eq!(numeric_text(&numeric(0, 0, 0xC000, 0, &[])).as_deref(), Ok("NaN"));
    }
}
