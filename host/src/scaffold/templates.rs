//! The files every project has, whatever its language, and [`render`],
//! which fills a template's `{{key}}` placeholders.

use anyhow::bail;

use super::{File, Lang, Project, RecordFormat};

const README: &str = include_str!("templates/README.md.tmpl");
const IDEM_TOML: &str = include_str!("templates/idem.toml.tmpl");
const SCHEMA: &str = include_str!("templates/item-created.v1.schema.json.tmpl");
const AVRO_SCHEMA: &str = include_str!("templates/item-created.v1.avsc.tmpl");
const PROTO_SCHEMA: &str = include_str!("templates/item_created.proto.tmpl");
const MIGRATION: &str = include_str!("templates/0001_init.sql.tmpl");
const EVENTS: &str = include_str!("templates/events.jsonl.tmpl");
const TEST_SH: &str = include_str!("templates/test.sh.tmpl");
const GITIGNORE: &str = include_str!("templates/gitignore.tmpl");

/// The event's schema, its table, the config, two sample events, the test
/// script, the README and a `.gitignore`.
pub(super) fn common(p: &Project) -> anyhow::Result<Vec<File>> {
    // Two fresh UUID v7 ids, written literally: the events are as new as the
    // project (the host refuses ids from the future and, after the handler's
    // dedup_retention, treats older ones as stale).
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let (first, second) = (uuid::Uuid::now_v7().to_string(), uuid::Uuid::now_v7().to_string());
    let events =
        [("first_id", first.as_str()), ("first_at", &now), ("second_id", second.as_str()), ("second_at", &now)];
    let (language, source, build, sdk_docs, per_instance) = match p.lang {
        Lang::Rust => (
            "Rust",
            "src/lib.rs",
            "cargo, for wasm32-wasip2: `rustup target add wasm32-wasip2` once",
            "The SDK's reference: `cargo doc -p idem-guest --open`.",
            "",
        ),
        Lang::Python => (
            "Python",
            "app.py",
            "componentize-py 0.25.1 and mypy 2.4.1, installed once per machine into `$IDEM_TOOLS` (default /var/tmp/idem-tools) unless componentize-py is on PATH",
            "The SDK's reference: `PYTHONPATH=.idem/sdk/python python3 -m pydoc idem`.",
            INTERPRETED,
        ),
        Lang::Ts => (
            "TypeScript",
            "handler.ts",
            "tsc, esbuild and componentize-js, pinned, installed once per machine into `$IDEM_TOOLS` (default /var/tmp/idem-tools) by `npm ci` (Node.js 20.6+)",
            "The SDK: `.idem/sdk/typescript/README.md`; its reference: `npm --prefix .idem/sdk/typescript run docs`.",
            INTERPRETED,
        ),
    };
    let readme = [("language", language), ("source", source), ("build", build), ("sdk_docs", sdk_docs)];
    let (schema_file, schema_text, schema_lines) = match p.format {
        RecordFormat::Json => {
            ("schema/item-created.v1.schema.json", SCHEMA, "schema = \"schema/item-created.v1.schema.json\"".to_owned())
        }
        RecordFormat::Avro => (
            "schema/item-created.v1.avsc",
            AVRO_SCHEMA,
            "# Avro records framed for the schema registry, read with this reader schema\n\
             # (idem test encodes events.jsonl with it: no registry needed there).\n\
             format = \"avro\"\nschema = \"schema/item-created.v1.avsc\""
                .to_owned(),
        ),
        RecordFormat::Protobuf => (
            "schema/item_created.proto",
            PROTO_SCHEMA,
            "# Protobuf records framed for the schema registry, read as this message\n\
             # (idem test encodes events.jsonl with it: no registry needed there).\n\
             format = \"protobuf\"\nschema = \"schema/item_created.proto\"\n"
                .to_owned()
                + &format!("message = \"{}.ItemCreated\"", p.snake),
        ),
    };
    let registry = match p.format {
        RecordFormat::Json => "",
        RecordFormat::Avro | RecordFormat::Protobuf => {
            "[registry]\n# The schema registry (Confluent's REST API); IDEM_REGISTRY_URL overrides.\nurl = \"http://127.0.0.1:8081\"\n\n"
        }
    };
    let lines = [("events_per_instance", per_instance), ("schema_lines", schema_lines.as_str()), ("registry", registry)];
    Ok(vec![
        File::text("README.md", render(README, p, &readme)?),
        File::text("idem.toml", render(IDEM_TOML, p, &lines)?),
        File::text(schema_file, render(schema_text, p, &[])?),
        File::text("migrations/0001_init.sql", render(MIGRATION, p, &[])?),
        File::text("events.jsonl", render(EVENTS, p, &events)?),
        File::script("test.sh", render(TEST_SH, p, &[])?),
        File::text(".gitignore", render(GITIGNORE, p, &[])?),
    ])
}

/// An interpreter's instance takes milliseconds to start: one serves many
/// events (each with its own capabilities; keep no state in module variables).
const INTERPRETED: &str =
    "# An interpreter takes milliseconds to start: one instance serves many events.\nevents_per_instance = 1000\n";

/// `template` with `{{name}}`, `{{schema}}` (the name with `_` for `-`),
/// `{{upper}}` (that in capitals) and each of `extra` filled in; a
/// placeholder left over is an error (a bug here, not the user's).
pub(super) fn render(template: &str, p: &Project, extra: &[(&str, &str)]) -> anyhow::Result<String> {
    let mut text = template
        .replace("{{name}}", &p.name)
        .replace("{{schema}}", &p.snake)
        .replace("{{upper}}", &p.snake.to_ascii_uppercase());
    for (key, value) in extra {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    if let Some(at) = text.find("{{") {
        let left: String = text[at..].chars().take(40).collect();
        bail!("a template placeholder was left unfilled: {left}");
    }
    Ok(text)
}
