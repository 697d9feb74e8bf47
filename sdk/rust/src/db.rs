//! The database handle, bound to the host's transaction for this event.
//!
//! Parameters are PostgreSQL's `$1, $2, …`, passed as `&[&dyn ToValue]`:
//!
//! ```no_run
//! # fn f(db: &idem_guest::Db, event: &idem_guest::Event) -> idem_guest::Result {
//! use idem_guest::db::Numeric;
//! db.execute(
//!     "INSERT INTO billing.charge (event_id, amount) VALUES ($1, $2)",
//!     &[&event.id(), &Numeric("12.50".into())],
//! )?;
//! let rows = db.query("SELECT amount::text AS amount FROM billing.charge WHERE event_id = $1", &[&event.id()])?;
//! let amount: Option<String> = rows.first().map(|r| r.get("amount")).transpose()?;
//! # Ok(()) }
//! ```

use crate::bindings::idem::handler::db as wit;
use crate::error::Error;

pub use wit::{DbError, SqlError, Value};

/// A handle on the event's transaction. Every statement runs under its own
/// savepoint: one that fails is undone alone, and the handler may go on.
#[derive(Debug)]
pub struct Db {
    _bound: (),
}

impl Db {
    pub(crate) fn new() -> Self {
        Self { _bound: () }
    }

    /// Runs one statement and returns how many rows it affected.
    pub fn execute(&self, statement: &str, params: &[&dyn ToValue]) -> Result<u64, DbError> {
        wit::execute(statement, &to_values(params))
    }

    /// Runs one statement and returns its rows.
    pub fn query(&self, statement: &str, params: &[&dyn ToValue]) -> Result<Rows, DbError> {
        wit::query(statement, &to_values(params)).map(Rows::from)
    }
}

fn to_values(params: &[&dyn ToValue]) -> Vec<Value> {
    params.iter().map(|p| p.to_value()).collect()
}

impl From<DbError> for Error {
    fn from(e: DbError) -> Self {
        let retryable = matches!(e, DbError::Transient(_));
        Error::classified(retryable, format!("database: {}", describe(&e)))
    }
}

/// A one-line account of `e` (the generated `Display` is only `Debug`).
pub(crate) fn describe(e: &DbError) -> String {
    match e {
        DbError::UniqueViolation(e) => format!("unique violation: {}", e.message),
        DbError::Transient(e) => format!("transient error {}: {}", e.code, e.message),
        DbError::Other(e) => format!("error {}: {}", e.code, e.message),
        DbError::Refused(why) => format!("statement refused: {why}"),
        DbError::InvalidValue(why) => format!("invalid value: {why}"),
    }
}

/// The rows a query returned.
#[derive(Debug, Clone)]
pub struct Rows {
    columns: std::rc::Rc<[String]>,
    rows: Vec<Vec<Value>>,
}

impl From<wit::Rows> for Rows {
    fn from(raw: wit::Rows) -> Self {
        Self { columns: raw.columns.into(), rows: raw.rows }
    }
}

impl Rows {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    pub fn first(&self) -> Option<Row<'_>> {
        self.iter().next()
    }

    pub fn iter(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|values| Row { columns: &self.columns, values })
    }
}

/// One row; read columns by name with [`Row::get`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl Row<'_> {
    /// The value of column `name`, converted to `T`. A missing column or a
    /// value of another type is a permanent error naming the column.
    pub fn get<T: FromValue>(&self, name: &str) -> Result<T, Error> {
        let index = self
            .columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| Error::permanent(format!("no column `{name}` in the result")))?;
        T::from_value(&self.values[index])
            .map_err(|want| Error::permanent(format!("column `{name}`: expected {want}, got {:?}", self.values[index])))
    }
}

/// A Rust value that binds as a statement parameter.
pub trait ToValue {
    fn to_value(&self) -> Value;
}

/// A Rust value that a column converts into; `Err` names the expected type.
pub trait FromValue: Sized {
    fn from_value(value: &Value) -> Result<Self, &'static str>;
}

/// A decimal in text form, bound as `numeric` (exact, unlike `f64`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Numeric(pub String);

/// JSON text, bound as `jsonb`.
#[derive(Debug, Clone, PartialEq)]
pub struct Json(pub serde_json::Value);

/// An RFC 3339 timestamp, bound as `timestamptz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timestamp(pub String);

/// A UUID in text form, bound as `uuid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uuid(pub String);

macro_rules! to_value {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {
        $(impl ToValue for $t {
            fn to_value(&self) -> Value {
                let $v = self;
                $e
            }
        })*
    };
}

to_value! {
    bool => |v| Value::Boolean(*v),
    i16 => |v| Value::Int64(i64::from(*v)),
    i32 => |v| Value::Int64(i64::from(*v)),
    i64 => |v| Value::Int64(*v),
    u32 => |v| Value::Int64(i64::from(*v)),
    f32 => |v| Value::Float64(f64::from(*v)),
    f64 => |v| Value::Float64(*v),
    str => |v| Value::Text(v.to_owned()),
    String => |v| Value::Text(v.clone()),
    [u8] => |v| Value::Bytes(v.to_vec()),
    Vec<u8> => |v| Value::Bytes(v.clone()),
    Numeric => |v| Value::Numeric(v.0.clone()),
    Json => |v| Value::Json(v.0.to_string()),
    serde_json::Value => |v| Value::Json(v.to_string()),
    Timestamp => |v| Value::Timestamp(v.0.clone()),
    Uuid => |v| Value::Uuid(v.0.clone()),
    Value => |v| v.clone(),
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Int64(v) => Ok(*v),
            _ => Err("an integer"),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Float64(v) => Ok(*v),
            Value::Int64(v) => Ok(*v as f64),
            _ => Err("a float"),
        }
    }
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Boolean(v) => Ok(*v),
            _ => Err("a boolean"),
        }
    }
}

/// Text, and every type the host renders as text (uuid, timestamp, numeric, json).
impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Text(v) | Value::Uuid(v) | Value::Timestamp(v) | Value::Numeric(v) | Value::Json(v) => Ok(v.clone()),
            _ => Err("text"),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Bytes(v) => Ok(v.clone()),
            _ => Err("bytes"),
        }
    }
}

impl FromValue for serde_json::Value {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Json(v) => serde_json::from_str(v).map_err(|_| "valid JSON"),
            _ => Err("json"),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, &'static str> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}
