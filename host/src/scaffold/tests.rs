//! What `idem new` writes, short of building it (`tests/tests/scaffold.rs`
//! builds and loads each language's project).

use std::path::PathBuf;

use super::{Lang, new_project};

fn fresh(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("idem-scaffold-{tag}-{}", uuid::Uuid::now_v7().simple()))
}

fn read(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn names_are_checked() {
    for good in ["a", "orders", "order-audit", "order_audit2", &"x".repeat(63)] {
        assert!(super::check_name(good).is_ok(), "{good}");
    }
    for bad in ["", "Orders", "1orders", "-x", "_x", "a.b", "a b", "ä", "idem", "pg-stats", "public", &"x".repeat(64)]
    {
        let err = super::check_name(bad).expect_err(bad).to_string();
        assert!(err.contains(&format!("`{bad}`")), "{err}");
    }
    assert_eq!("typescript".parse::<Lang>().ok(), Some(Lang::Ts));
    assert!("go".parse::<Lang>().is_err());
}

#[test]
fn an_existing_path_is_refused_and_left_alone() {
    let dir = fresh("exists");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let err = new_project("orders", Lang::Rust, &dir).expect_err("exists").to_string();
    assert!(err.contains(&dir.display().to_string()) && err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_dir(&dir).expect("read").count(), 0, "nothing written");
    std::fs::remove_dir(&dir).expect("rmdir");
    let err = new_project("Orders", Lang::Rust, &dir).expect_err("bad name").to_string();
    assert!(err.contains("`Orders`") && !dir.exists(), "{err}");
}

#[test]
fn each_project_is_complete_and_its_config_loads() {
    for (lang, source) in [(Lang::Rust, "src/lib.rs"), (Lang::Python, "app.py"), (Lang::Ts, "handler.ts")] {
        let dir = fresh("complete");
        let written = new_project("order-audit", lang, &dir).expect("new project");
        for file in
            [source, "idem.toml", "events.jsonl", "build.sh", "test.sh", "README.md", "migrations/0001_init.sql"]
        {
            assert!(written.contains(&dir.join(file)), "{lang:?}: {file} written");
        }
        assert!(read(&dir, source).contains("INSERT INTO order_audit.item"), "{lang:?}");
        let wit = ".idem/wit/world.wit";
        assert!(dir.join(wit).is_file(), "{lang:?}: {wit}");
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&dir.join("build.sh").metadata().expect("build.sh").permissions());
        assert_eq!(mode & 0o111, 0o111, "build.sh is executable");

        let config = crate::config::Config::load(&dir.join("idem.toml")).unwrap_or_else(|e| panic!("{lang:?}: {e:#}"));
        let handler = &config.handlers[0];
        assert_eq!((handler.name.as_str(), handler.schema_name().as_str()), ("order-audit", "order_audit"));
        assert_eq!(handler.events_per_instance, if lang == Lang::Rust { None } else { Some(1000) });
        assert_eq!(handler.component.as_deref(), Some(dir.join("order-audit.wasm").as_path()));

        let schema: serde_json::Value =
            serde_json::from_str(&read(&dir, "schema/item-created.v1.schema.json")).expect("json");
        let validator = jsonschema::draft202012::new(&schema).expect("a schema");
        let events = read(&dir, "events.jsonl");
        let mut valid = Vec::new();
        let mut expect = None;
        for line in events.lines() {
            if let Some(comment) = line.strip_prefix('#') {
                expect = comment.trim().strip_prefix("expect:").map(|w| w.trim().to_owned()).or(expect);
                continue;
            }
            let event: serde_json::Value = serde_json::from_str(line).expect("an event");
            let marked_invalid = expect.take().as_deref() == Some("invalid");
            assert_eq!(validator.is_valid(&event), !marked_invalid, "{line}");
            let id: uuid::Uuid = event["eventId"].as_str().unwrap_or_default().parse().expect("a uuid");
            assert_eq!(id.get_version_num(), 7, "{line}");
            valid.push(!marked_invalid);
        }
        assert_eq!(valid, [true, true, false], "two samples, and one the schema refuses, marked so");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}

#[test]
fn the_rust_sdk_manifest_is_concrete_and_the_lock_pins_it() {
    let dir = fresh("rust");
    new_project("orders", Lang::Rust, &dir).expect("new project");
    let sdk: toml::Table = toml::from_str(&read(&dir, ".idem/sdk/rust/Cargo.toml")).expect("toml");
    assert!(!sdk.to_string().contains("workspace"), "no inherited key left:\n{sdk}");
    assert_eq!(sdk["package"]["name"].as_str(), Some("idem-guest"));
    assert!(sdk["dependencies"]["wit-bindgen"]["version"].as_str().is_some_and(|v| v.starts_with("0.")), "{sdk}");
    let project: toml::Table = toml::from_str(&read(&dir, "Cargo.toml")).expect("toml");
    assert!(project["workspace"].as_table().is_some_and(|t| t.is_empty()), "a workspace of its own");
    assert_eq!(project["dependencies"]["serde"]["features"].as_array().map(Vec::len), Some(1));
    let lock = read(&dir, "Cargo.lock");
    for package in ["name = \"idem-guest\"", "name = \"wit-bindgen\"", "name = \"serde_json\""] {
        assert!(lock.contains(package), "{package} in the lock");
    }
    assert!(!lock.contains("name = \"wasmtime\""), "only the SDK's closure");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

#[tokio::test]
async fn an_avro_or_protobuf_project_reads_its_samples_with_its_reader_schema() {
    use super::RecordFormat;
    for format in [RecordFormat::Avro, RecordFormat::Protobuf] {
        let dir = fresh("format");
        super::new_project_reading("order-audit", Lang::Rust, format, &dir).expect("new project");
        let config = crate::config::Config::load(&dir.join("idem.toml")).unwrap_or_else(|e| panic!("{format:?}: {e:#}"));
        assert!(config.registry.is_some(), "{format:?}: a [registry]");
        let validators = crate::validate::Validator::for_config(&config).unwrap_or_else(|e| panic!("{format:?}: {e:#}"));
        let reading = validators[0].reading().expect("a registry format");
        let sampler = reading.sampler(None).await.expect("no registry asked").expect("a sampler");
        let mut outcomes = Vec::new();
        for line in read(&dir, "events.jsonl").lines().filter(|l| !l.starts_with('#')) {
            let valid = sampler.record(line.as_bytes()).ok().is_some_and(|framed| {
                let record = crate::validate::Record {
                    topic: "item.created".into(),
                    partition: 0,
                    offset: 0,
                    key: None,
                    payload: Some(framed),
                    headers: vec![],
                    timestamp: None,
                };
                validators[0].validate(&record).is_ok()
            });
            outcomes.push(valid);
        }
        assert_eq!(outcomes, [true, true, false], "{format:?}: two samples, and the one marked invalid");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
