//! Avro schema resolution (the specification's "Schema Resolution"): how
//! data written with the writer's schema is read as the reader's. Worked
//! out once per writer schema id into a [`Resolved`] plan that decoding
//! follows: fields matched by name or the reader's aliases, the writer's
//! extra fields skipped, the reader's missing ones filled from their
//! defaults, numbers promoted (int → long → float → double), strings and
//! bytes read as each other, enum symbols mapped, union branches chosen.
//!
//! A writer union's branch the reader cannot take is not an error of the
//! schema pair: only a record that uses it is invalid (the specification's
//! rule), so such a branch keeps its reason for the decoder.

use std::collections::HashMap;

use serde_json::Value;

use super::schema::{Logical, NamedKind, Node, Schema};

/// What to do with one writer value.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Null,
    Boolean,
    /// A writer int, read as the reader's int or long (with its logical
    /// type), or as a float or double (`None`).
    Int(Option<Option<Logical>>),
    /// A writer long, read as a long (with its logical type) or a float/double (`None`).
    Long(Option<Option<Logical>>),
    Float,
    Double,
    /// Writer bytes: base64, the reader's decimal, or (read as a string) text.
    Bytes {
        logical: Option<Logical>,
        as_string: bool,
    },
    /// A writer string: text, or (read as bytes) base64 of its bytes.
    String {
        as_bytes: bool,
    },
    Array(Box<Plan>),
    Map(Box<Plan>),
    /// A writer union: per branch, its plan or why the reader cannot take it.
    Union(Vec<Result<Plan, String>>),
    /// A record: its plan's index in [`Resolved::records`].
    Record(usize),
    /// An enum: per writer symbol, the reader's symbol it becomes (`None`:
    /// the reader has neither it nor a default).
    Enum {
        writer: Vec<String>,
        reader: Vec<Option<String>>,
    },
    Fixed {
        size: usize,
        logical: Option<Logical>,
    },
}

/// One field of the writer's record, in the writer's order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Read into the reader's field of this name.
    Read(String, Plan),
    /// The reader has no such field: decoded and dropped.
    Skip(Node),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RecordPlan {
    pub name: String,
    pub steps: Vec<Step>,
    /// The reader's fields the writer lacks, with their defaults as JSON.
    pub defaults: Vec<(String, Value)>,
}

/// A writer schema resolved against a reader schema.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub root: Plan,
    pub records: Vec<RecordPlan>,
    /// The writer's schema: skipped fields are decoded by it.
    pub writer: Schema,
}

/// Why the reader cannot read the writer's data: the first incompatibility
/// found, with the field it is at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Incompatible(pub String);

pub fn resolve(writer: &Schema, reader: &Schema) -> Result<Resolved, Incompatible> {
    let mut resolver = Resolver { writer, reader, records: Vec::new(), memo: HashMap::new(), depth: 0 };
    let root = resolver.plan(&writer.root, &reader.root).map_err(Incompatible)?;
    Ok(Resolved { root, records: resolver.records, writer: writer.clone() })
}

struct Resolver<'a> {
    writer: &'a Schema,
    reader: &'a Schema,
    records: Vec<RecordPlan>,
    /// (writer record, reader record) → its plan: a recursive record is
    /// planned once.
    memo: HashMap<(usize, usize), usize>,
    /// How deep the resolution is now: a writer schema may chain
    /// thousands of distinct records that match a recursive reader's.
    depth: usize,
}

/// How deep the schemas' types may nest as they are resolved.
const MAX_DEPTH: usize = 64;

impl Resolver<'_> {
    fn plan(&mut self, w: &Node, r: &Node) -> Result<Plan, String> {
        if self.depth >= MAX_DEPTH {
            return Err(format!("the schemas nest deeper than {MAX_DEPTH} levels"));
        }
        self.depth += 1;
        let plan = self.plan_within(w, r);
        self.depth -= 1;
        plan
    }

    fn plan_within(&mut self, w: &Node, r: &Node) -> Result<Plan, String> {
        if let Node::Union(branches) = w {
            let plans = branches.iter().map(|b| self.plan(b, r)).collect();
            return Ok(Plan::Union(plans));
        }
        if let Node::Union(branches) = r {
            // The first branch of the same type that resolves, else the
            // first the writer's promotes to (a failed try keeps nothing).
            let (exact, rest): (Vec<&Node>, Vec<&Node>) = branches.iter().partition(|b| self.same_type(w, b));
            let mut why = None;
            for branch in exact.into_iter().chain(rest) {
                match self.plan(w, branch) {
                    Ok(plan) => return Ok(plan),
                    Err(e) => _ = why.get_or_insert(e),
                }
            }
            let name = self.name(w, true);
            return Err(match why {
                Some(why) if self.same_type_in(w, branches) => format!("the reader's union's {name}: {why}"),
                _ => format!("the writer's {name} is none of the reader's union's branches"),
            });
        }
        if let (Some(wl), Some(rl)) = (logical(w, self.writer), logical(r, self.reader))
            && wl != rl
        {
            return Err(format!("the writer's {wl:?} cannot be read as the reader's {rl:?}"));
        }
        let plan = match (w, r) {
            (Node::Null, Node::Null) => Plan::Null,
            (Node::Boolean, Node::Boolean) => Plan::Boolean,
            (Node::Int(_), Node::Int(l) | Node::Long(l)) => Plan::Int(Some(*l)),
            (Node::Int(_), Node::Float | Node::Double) => Plan::Int(None),
            (Node::Long(_), Node::Long(l)) => Plan::Long(Some(*l)),
            (Node::Long(_), Node::Float | Node::Double) => Plan::Long(None),
            (Node::Float, Node::Float | Node::Double) => Plan::Float,
            (Node::Double, Node::Double) => Plan::Double,
            (Node::Bytes(_), Node::Bytes(l)) => Plan::Bytes { logical: *l, as_string: false },
            (Node::Bytes(_), Node::String) => Plan::Bytes { logical: None, as_string: true },
            (Node::String, Node::String) => Plan::String { as_bytes: false },
            (Node::String, Node::Bytes(None)) => Plan::String { as_bytes: true },
            (Node::Array(wi), Node::Array(ri)) => Plan::Array(Box::new(self.plan(wi, ri)?)),
            (Node::Map(wv), Node::Map(rv)) => Plan::Map(Box::new(self.plan(wv, rv)?)),
            (Node::Named(wi), Node::Named(ri)) => self.named(*wi, *ri)?,
            _ => {
                return Err(format!(
                    "the writer's {} cannot be read as the reader's {}",
                    self.name(w, true),
                    self.name(r, false)
                ));
            }
        };
        Ok(plan)
    }

    fn same_type_in(&self, w: &Node, branches: &[Node]) -> bool {
        branches.iter().any(|b| self.same_type(w, b))
    }

    fn same_type(&self, w: &Node, r: &Node) -> bool {
        match (w, r) {
            (Node::Named(wi), Node::Named(ri)) => self.reader.named[*ri].answers_to(&self.writer.named[*wi].name),
            (Node::Array(_), Node::Array(_)) | (Node::Map(_), Node::Map(_)) => true,
            (w, r) => std::mem::discriminant(w) == std::mem::discriminant(r),
        }
    }

    fn named(&mut self, wi: usize, ri: usize) -> Result<Plan, String> {
        let (wn, rn) = (&self.writer.named[wi], &self.reader.named[ri]);
        if !rn.answers_to(&wn.name) {
            return Err(format!(
                "the writer's `{}` is not the reader's `{}` (nor one of its aliases)",
                wn.name, rn.name
            ));
        }
        match (&wn.kind, &rn.kind) {
            (NamedKind::Record(_), NamedKind::Record(_)) => self.record(wi, ri),
            (NamedKind::Enum { symbols: ws, .. }, NamedKind::Enum { symbols: rs, default }) => {
                let reader =
                    ws.iter().map(|s| if rs.contains(s) { Some(s.clone()) } else { default.clone() }).collect();
                Ok(Plan::Enum { writer: ws.clone(), reader })
            }
            (NamedKind::Fixed { size: w, .. }, NamedKind::Fixed { size: r, logical }) if w == r => {
                Ok(Plan::Fixed { size: *w, logical: *logical })
            }
            (NamedKind::Fixed { size: w, .. }, NamedKind::Fixed { size: r, .. }) => {
                Err(format!("fixed `{}` has {w} bytes in the writer's schema and {r} in the reader's", rn.name))
            }
            _ => Err(format!("`{}` is a different kind of type in the writer's schema and the reader's", rn.name)),
        }
    }

    /// A record pair's plan; on failure nothing it planned is kept (a
    /// writer union keeps the failure as its branch's, and a later meeting
    /// of the pair must fail the same way, not find a half-made plan).
    fn record(&mut self, wi: usize, ri: usize) -> Result<Plan, String> {
        if let Some(index) = self.memo.get(&(wi, ri)) {
            return Ok(Plan::Record(*index));
        }
        let index = self.records.len();
        let planned = self.record_fields(wi, ri);
        if planned.is_err() {
            self.records.truncate(index);
            self.memo.retain(|_, at| *at < index);
        }
        planned
    }

    fn record_fields(&mut self, wi: usize, ri: usize) -> Result<Plan, String> {
        let (NamedKind::Record(wf), NamedKind::Record(rf)) = (&self.writer.named[wi].kind, &self.reader.named[ri].kind)
        else {
            return Err("not records".into());
        };
        let name = self.reader.named[ri].name.clone();
        let index = self.records.len();
        self.memo.insert((wi, ri), index);
        self.records.push(RecordPlan { name: name.clone(), steps: Vec::new(), defaults: Vec::new() });
        let mut steps = Vec::with_capacity(wf.len());
        let mut taken = vec![false; rf.len()];
        for field in wf {
            let found = rf.iter().position(|r| r.name == field.name || r.aliases.contains(&field.name));
            match found {
                Some(at) => {
                    taken[at] = true;
                    let plan = self
                        .plan(&field.node, &rf[at].node)
                        .map_err(|e| format!("field `{name}.{}`: {e}", rf[at].name))?;
                    steps.push(Step::Read(rf[at].name.clone(), plan));
                }
                None => steps.push(Step::Skip(field.node.clone())),
            }
        }
        let mut defaults = Vec::new();
        for (field, _) in rf.iter().zip(&taken).filter(|(_, taken)| !**taken) {
            let Some(default) = &field.default else {
                return Err(format!(
                    "field `{name}.{}`: the writer has no such field and the reader's has no default",
                    field.name
                ));
            };
            defaults.push((field.name.clone(), default_json(self.reader, &field.node, default)));
        }
        self.records[index] = RecordPlan { name, steps, defaults };
        Ok(Plan::Record(index))
    }

    fn name(&self, node: &Node, writer: bool) -> String {
        let schema = if writer { self.writer } else { self.reader };
        super::schema::type_name(node, &schema.named)
    }
}

/// A node's logical type, if it has one (a fixed's too).
fn logical(node: &Node, schema: &Schema) -> Option<Logical> {
    match node {
        Node::Int(l) | Node::Long(l) | Node::Bytes(l) => *l,
        Node::Named(i) => match schema.named[*i].kind {
            NamedKind::Fixed { logical, .. } => logical,
            _ => None,
        },
        _ => None,
    }
}

/// A reader field's default as the guest would see the value: bytes and
/// fixed (a string of code points 0–255 in the schema) as base64, a union's
/// (its first branch's) as that branch; the rest as written.
fn default_json(schema: &Schema, node: &Node, default: &Value) -> Value {
    use base64::Engine as _;
    let bytes = |text: &str| -> Vec<u8> { text.chars().map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?')).collect() };
    match (node, default) {
        (Node::Union(branches), d) => branches.first().map_or(Value::Null, |b| default_json(schema, b, d)),
        (Node::Bytes(None), Value::String(text)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes(text)))
        }
        (Node::Named(i), Value::String(text))
            if matches!(schema.named[*i].kind, NamedKind::Fixed { logical: None, .. }) =>
        {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes(text)))
        }
        (_, d) => d.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(text: &str) -> Schema {
        Schema::parse(text).expect("a schema")
    }

    const V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"string"},{"name":"amount","type":"int"},{"name":"note","type":["null","string"],"default":null}]}"#;

    #[test]
    fn an_added_field_with_a_default_and_a_removed_optional_one_resolve() {
        let v2 = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"id","type":"string"},{"name":"amount","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}"#;
        let resolved = resolve(&schema(V1), &schema(v2)).expect("compatible");
        let record = &resolved.records[0];
        assert_eq!(record.defaults, vec![("currency".to_owned(), Value::String("EUR".into()))]);
        assert!(matches!(record.steps[2], Step::Skip(_)), "the writer's note is skipped");
        assert_eq!(record.steps[1], Step::Read("amount".into(), Plan::Int(Some(None))), "int promoted to long");
    }

    #[test]
    fn the_first_incompatibility_names_its_field() {
        let v3 = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
            {"name":"id","type":"string"},{"name":"amount","type":"string"}]}"#;
        let error = resolve(&schema(V1), &schema(v3)).expect_err("a type change").to_string();
        assert_eq!(error, "field `shop.Order.amount`: the writer's int cannot be read as the reader's string");
        let needs = r#"{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"sku","type":"string"}]}"#;
        let error = resolve(&schema(V1), &schema(needs)).expect_err("no default").to_string();
        assert!(error.contains("field `shop.Order.sku`: the writer has no such field"), "{error}");
    }

    #[test]
    fn a_chain_of_records_deeper_than_the_bound_is_refused_not_followed() {
        // 200 distinct writer records, each declared flat in the root's
        // skipped fields, each one's `next` the one before: a chain that a
        // recursive reader's `Node` matches at every link.
        let mut fields =
            vec![r#"{"name":"f0","type":{"type":"record","name":"Node","namespace":"a0","fields":[]}}"#.to_owned()];
        for i in 1..200 {
            let prev = i - 1;
            fields.push(format!(
                r#"{{"name":"f{i}","type":{{"type":"record","name":"Node","namespace":"a{i}","fields":[{{"name":"next","type":["null","a{prev}.Node"]}}]}}}}"#
            ));
        }
        fields.push(r#"{"name":"next","type":["null","a199.Node"]}"#.to_owned());
        let writer = format!(r#"{{"type":"record","name":"Root","fields":[{}]}}"#, fields.join(","));
        let reader = r#"{"type":"record","name":"Root","fields":[{"name":"next","type":["null",
            {"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"],"default":null}]}]}]}"#;
        // Resolved as deep as the bound, the link past it a union branch
        // that fails: only a record that goes that deep is refused.
        let resolved =
            resolve(&schema(&writer), &schema(reader)).expect("the failure is deferred to the union's branch");
        let mut bytes = vec![0u8; 199]; // f1..f199: `next` null
        bytes.extend([2u8; 100]); // then 100 links
        bytes.push(0);
        let error = super::super::decode::decode(&resolved, &bytes).expect_err("too deep").to_string();
        assert!(error.contains("nest deeper than 64"), "{error}");
        let mut shallow = vec![0u8; 199];
        shallow.extend([2u8; 10]);
        shallow.push(0);
        assert!(super::super::decode::decode(&resolved, &shallow).is_ok(), "10 links are fine");
    }

    #[test]
    fn a_record_pair_that_fails_once_fails_everywhere_it_is_met() {
        let writer = r#"{"type":"record","name":"Order","fields":[
            {"name":"a","type":["null",{"type":"record","name":"Item","fields":[{"name":"x","type":"string"}]}]},
            {"name":"b","type":["null","Item"]}]}"#;
        let reader = r#"{"type":"record","name":"Order","fields":[
            {"name":"a","type":["null",{"type":"record","name":"Item","fields":[{"name":"x","type":"int"}]}],"default":null},
            {"name":"b","type":["null","Item"],"default":null}]}"#;
        let resolved = resolve(&schema(writer), &schema(reader)).expect("unions defer their branches' failures");
        let error = super::super::decode::decode(&resolved, &[0, 2]).expect_err("b's Item cannot be read");
        assert!(error.to_string().contains("union branch 1"), "{error}");
    }
}
