//! An Avro schema (`.avsc`, JSON) parsed into a tree whose named types
//! (records, enums, fixed) live in one table, so a recursive schema is a
//! finite value. Parsing follows the specification's rules for names
//! (namespaces inherited, full names resolved); what a schema may not be
//! (an unknown type, a duplicate name, a union inside a union) is refused
//! with the place it was found.

use std::collections::HashMap;

use serde_json::Value;

/// How deep a schema's JSON may nest: a writer schema comes from the
/// registry, which anyone who may register a subject writes.
const MAX_DEPTH: usize = 64;

/// A logical type the host maps to JSON (see `decode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logical {
    /// `decimal` on bytes or fixed: the unscaled two's-complement integer.
    Decimal {
        scale: u32,
    },
    Date,
    TimeMillis,
    TimeMicros,
    TimestampMillis,
    TimestampMicros,
    LocalTimestampMillis,
    LocalTimestampMicros,
}

/// One node of a schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Boolean,
    Int(Option<Logical>),
    Long(Option<Logical>),
    Float,
    Double,
    Bytes(Option<Logical>),
    String,
    Array(Box<Node>),
    Map(Box<Node>),
    Union(Vec<Node>),
    /// A record, enum or fixed: its index in [`Schema::named`].
    Named(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub aliases: Vec<String>,
    pub node: Node,
    pub default: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NamedKind {
    Record(Vec<Field>),
    Enum { symbols: Vec<String>, default: Option<String> },
    Fixed { size: usize, logical: Option<Logical> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    /// The full name (`namespace.name`).
    pub name: String,
    pub aliases: Vec<String>,
    pub kind: NamedKind,
}

impl Named {
    /// The name without its namespace: what resolution matches on.
    pub fn short(&self) -> &str {
        short(&self.name)
    }

    /// Whether `other` (a full name) is this type's name or one of its aliases, unqualified.
    pub fn answers_to(&self, other: &str) -> bool {
        let other = short(other);
        self.short() == other || self.aliases.iter().any(|a| short(a) == other)
    }
}

fn short(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// A parsed schema: its root and the named types it declares.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub root: Node,
    pub named: Vec<Named>,
}

/// What is wrong with a schema, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(pub String);

impl Schema {
    pub fn parse(text: &str) -> Result<Self, SchemaError> {
        let json: Value = serde_json::from_str(text).map_err(|e| SchemaError(format!("not JSON: {e}")))?;
        let mut parser = Parser { named: Vec::new(), names: HashMap::new() };
        let root = parser.node(&json, "", 0)?;
        Ok(Self { root, named: parser.named })
    }
}

struct Parser {
    named: Vec<Named>,
    names: HashMap<String, usize>,
}

impl Parser {
    fn node(&mut self, json: &Value, namespace: &str, depth: usize) -> Result<Node, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        match json {
            Value::String(name) => self.reference(name, namespace, None),
            Value::Array(branches) => {
                let mut nodes = Vec::with_capacity(branches.len());
                for branch in branches {
                    let node = self.node(branch, namespace, depth + 1)?;
                    if matches!(node, Node::Union(_)) {
                        return Err(SchemaError("a union holds another union".into()));
                    }
                    if nodes.iter().any(|n| same_branch(n, &node)) {
                        return Err(SchemaError(format!("a union holds {} twice", self.describe(&node))));
                    }
                    nodes.push(node);
                }
                Ok(Node::Union(nodes))
            }
            Value::Object(object) => self.complex(object, namespace, depth),
            other => Err(SchemaError(format!("`{other}` is not a schema"))),
        }
    }

    fn complex(
        &mut self,
        object: &serde_json::Map<String, Value>,
        namespace: &str,
        depth: usize,
    ) -> Result<Node, SchemaError> {
        let logical = logical(object)?;
        let kind = match object.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(nested) => return self.node(nested, namespace, depth + 1),
            None => return Err(SchemaError("an object schema without `type`".into())),
        };
        match kind {
            "record" | "error" | "enum" | "fixed" => self.named(kind, object, namespace, depth, logical),
            "array" => {
                let items = object.get("items").ok_or_else(|| SchemaError("an array without `items`".into()))?;
                Ok(Node::Array(Box::new(self.node(items, namespace, depth + 1)?)))
            }
            "map" => {
                let values = object.get("values").ok_or_else(|| SchemaError("a map without `values`".into()))?;
                Ok(Node::Map(Box::new(self.node(values, namespace, depth + 1)?)))
            }
            name => self.reference(name, namespace, logical),
        }
    }

    /// A primitive type's name, or a named type declared before.
    fn reference(&self, name: &str, namespace: &str, logical: Option<Logical>) -> Result<Node, SchemaError> {
        let node = match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int(logical.filter(|l| matches!(l, Logical::Date | Logical::TimeMillis))),
            "long" => Node::Long(logical.filter(|l| !matches!(l, Logical::Decimal { .. } | Logical::Date))),
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes(logical.filter(|l| matches!(l, Logical::Decimal { .. }))),
            "string" => Node::String,
            name => {
                let index =
                    self.names.get(&full_name(name, namespace)).or_else(|| self.names.get(name)).ok_or_else(|| {
                        SchemaError(format!("`{name}` is neither a primitive type nor a type declared before"))
                    })?;
                Node::Named(*index)
            }
        };
        Ok(node)
    }

    fn named(
        &mut self,
        kind: &str,
        object: &serde_json::Map<String, Value>,
        namespace: &str,
        depth: usize,
        logical: Option<Logical>,
    ) -> Result<Node, SchemaError> {
        let name = text(object, "name", kind)?;
        let namespace = match object.get("namespace") {
            Some(Value::String(ns)) if !name.contains('.') => ns.as_str(),
            _ => namespace,
        };
        let full = full_name(name, namespace);
        let own_namespace = full.rsplit_once('.').map_or("", |(ns, _)| ns).to_owned();
        if self.names.contains_key(&full) {
            return Err(SchemaError(format!("`{full}` is declared twice")));
        }
        let aliases = strings(object, "aliases")?.into_iter().map(|a| full_name(&a, &own_namespace)).collect();
        let index = self.named.len();
        // Declared before its fields are read: a field may refer to the record itself.
        self.names.insert(full.clone(), index);
        let placeholder = NamedKind::Fixed { size: 0, logical: None };
        self.named.push(Named { name: full.clone(), aliases, kind: placeholder });
        let kind = match kind {
            "enum" => {
                let symbols = strings(object, "symbols")?;
                let default = object.get("default").and_then(Value::as_str).map(str::to_owned);
                if let Some(d) = &default
                    && !symbols.contains(d)
                {
                    return Err(SchemaError(format!("enum `{full}`'s default `{d}` is not one of its symbols")));
                }
                NamedKind::Enum { symbols, default }
            }
            "fixed" => {
                let size = object
                    .get("size")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| SchemaError(format!("fixed `{full}` has no `size` (a non-negative integer)")))?;
                let size = usize::try_from(size).map_err(|_| SchemaError(format!("fixed `{full}` is too large")))?;
                NamedKind::Fixed { size, logical: logical.filter(|l| matches!(l, Logical::Decimal { .. })) }
            }
            _ => NamedKind::Record(self.fields(object, &full, &own_namespace, depth)?),
        };
        self.named[index].kind = kind;
        Ok(Node::Named(index))
    }

    fn fields(
        &mut self,
        object: &serde_json::Map<String, Value>,
        record: &str,
        namespace: &str,
        depth: usize,
    ) -> Result<Vec<Field>, SchemaError> {
        let Some(Value::Array(list)) = object.get("fields") else {
            return Err(SchemaError(format!("record `{record}` has no `fields` list")));
        };
        let mut fields: Vec<Field> = Vec::with_capacity(list.len());
        for field in list {
            let Value::Object(field) = field else {
                return Err(SchemaError(format!("record `{record}` has a field that is not an object")));
            };
            let name = text(field, "name", "field")?.to_owned();
            if fields.iter().any(|f| f.name == name) {
                return Err(SchemaError(format!("record `{record}` declares field `{name}` twice")));
            }
            let json =
                field.get("type").ok_or_else(|| SchemaError(format!("field `{record}.{name}` has no `type`")))?;
            let node = self
                .node(json, namespace, depth + 1)
                .map_err(|e| SchemaError(format!("field `{record}.{name}`: {e}")))?;
            let aliases = strings(field, "aliases")?;
            fields.push(Field { name, aliases, node, default: field.get("default").cloned() });
        }
        Ok(fields)
    }

    /// A branch's name, for a message.
    fn describe(&self, node: &Node) -> String {
        type_name(node, &self.named)
    }
}

/// A node's type as a message names it: `int`, `array`, `` `shop.Order` ``.
pub fn type_name(node: &Node, named: &[Named]) -> String {
    let name = match node {
        Node::Named(i) => return format!("`{}`", named[*i].name),
        Node::Null => "null",
        Node::Boolean => "boolean",
        Node::Int(_) => "int",
        Node::Long(_) => "long",
        Node::Float => "float",
        Node::Double => "double",
        Node::Bytes(_) => "bytes",
        Node::String => "string",
        Node::Array(_) => "array",
        Node::Map(_) => "map",
        Node::Union(_) => "union",
    };
    name.to_owned()
}

/// Two branches a union may not both hold: the same primitive, array or
/// map, or the same named type.
fn same_branch(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Named(x), Node::Named(y)) => x == y,
        (Node::Array(_), Node::Array(_)) | (Node::Map(_), Node::Map(_)) => true,
        (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
    }
}

fn full_name(name: &str, namespace: &str) -> String {
    if name.contains('.') || namespace.is_empty() { name.to_owned() } else { format!("{namespace}.{name}") }
}

fn text<'a>(object: &'a serde_json::Map<String, Value>, key: &str, what: &str) -> Result<&'a str, SchemaError> {
    object.get(key).and_then(Value::as_str).ok_or_else(|| SchemaError(format!("a {what} without a `{key}` string")))
}

fn strings(object: &serde_json::Map<String, Value>, key: &str) -> Result<Vec<String>, SchemaError> {
    match object.get(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| SchemaError(format!("`{key}` holds a non-string"))))
            .collect(),
        Some(_) => Err(SchemaError(format!("`{key}` is not a list of strings"))),
    }
}

/// The node's `logicalType`, if it is one the host maps; an unknown one is
/// ignored, as the specification says (the underlying type is read).
fn logical(object: &serde_json::Map<String, Value>) -> Result<Option<Logical>, SchemaError> {
    let Some(name) = object.get("logicalType").and_then(Value::as_str) else { return Ok(None) };
    Ok(match name {
        "decimal" => {
            let scale = object.get("scale").and_then(Value::as_u64).unwrap_or(0);
            let scale = u32::try_from(scale)
                .ok()
                .filter(|s| *s <= 1000)
                .ok_or_else(|| SchemaError(format!("a decimal's scale {scale} is out of range (0 to 1000)")))?;
            Some(Logical::Decimal { scale })
        }
        "date" => Some(Logical::Date),
        "time-millis" => Some(Logical::TimeMillis),
        "time-micros" => Some(Logical::TimeMicros),
        "timestamp-millis" => Some(Logical::TimestampMillis),
        "timestamp-micros" => Some(Logical::TimestampMicros),
        "local-timestamp-millis" => Some(Logical::LocalTimestampMillis),
        "local-timestamp-micros" => Some(Logical::LocalTimestampMicros),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recursive_record_refers_to_itself_by_index() {
        let schema = Schema::parse(
            r#"{"type":"record","name":"Node","namespace":"t","fields":[
                {"name":"value","type":"long"},
                {"name":"next","type":["null","Node"],"default":null}]}"#,
        )
        .expect("parses");
        assert_eq!(schema.root, Node::Named(0));
        let NamedKind::Record(fields) = &schema.named[0].kind else { panic!("a record") };
        assert_eq!(fields[1].node, Node::Union(vec![Node::Null, Node::Named(0)]));
        assert_eq!(schema.named[0].name, "t.Node");
    }

    #[test]
    fn what_a_schema_may_not_be_is_named() {
        for (text, expected) in [
            (r#""Missing""#, "`Missing` is neither a primitive type"),
            (r#"["int","int"]"#, "a union holds int twice"),
            (r#"["int",["string"]]"#, "a union holds another union"),
            (r#"{"type":"enum","name":"E","symbols":["A"],"default":"B"}"#, "default `B` is not one of its symbols"),
            (r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"a","type":"int"}]}"#, "twice"),
            (r#"{"type":"fixed","name":"F"}"#, "has no `size`"),
        ] {
            let error = Schema::parse(text).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let deep = format!("{}\"int\"{}", "{\"type\":\"array\",\"items\":".repeat(100), "}".repeat(100));
        assert!(Schema::parse(&deep).expect_err("too deep").to_string().contains("nested deeper"));
    }
}
