use serde_json::json;

use super::*;
use crate::formats::avro::resolve::resolve;
use crate::formats::avro::schema::Schema;

/// Avro's encoding of a long.
fn long(n: i64) -> Vec<u8> {
    #[expect(clippy::cast_sign_loss, reason = "zig-zag encoding works on the bits")]
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let byte = u8::try_from(v & 0x7f).expect("7 bits");
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn string(s: &str) -> Vec<u8> {
    let mut out = long(i64::try_from(s.len()).expect("short"));
    out.extend_from_slice(s.as_bytes());
    out
}

fn plan(writer: &str, reader: &str) -> Resolved {
    resolve(&Schema::parse(writer).expect("writer"), &Schema::parse(reader).expect("reader")).expect("resolves")
}

const ORDER: &str = r#"{"type":"record","name":"Order","fields":[
    {"name":"eventId","type":{"type":"string","logicalType":"uuid"}},
    {"name":"occurredAt","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
    {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
    {"name":"tags","type":{"type":"array","items":"string"}},
    {"name":"note","type":["null","string"]},
    {"name":"raw","type":"bytes"},
    {"name":"day","type":{"type":"int","logicalType":"date"}}]}"#;

fn order_bytes() -> Vec<u8> {
    let mut b = string("0190f0c2-0000-7000-8000-000000000001");
    b.extend(long(1_765_000_000_123));
    b.extend(long(2)); // the decimal's two bytes: -1234 → 0xfb2e
    b.extend([0xfb, 0x2e]);
    b.extend(long(1)); // PAID
    b.extend(long(2));
    b.extend(string("a"));
    b.extend(string("b"));
    b.extend(long(0));
    b.extend(long(1)); // the union's string branch
    b.extend(string("leave at door"));
    b.extend(long(3));
    b.extend([0, 1, 2]);
    b.extend(long(20_000));
    b
}

#[test]
fn a_record_reads_as_the_documented_json() {
    let value = decode(&plan(ORDER, ORDER), &order_bytes()).expect("decodes");
    assert_eq!(
        value,
        json!({
            "eventId": "0190f0c2-0000-7000-8000-000000000001",
            "occurredAt": "2025-12-06T05:46:40.123Z",
            "amount": "-12.34",
            "status": "PAID",
            "tags": ["a", "b"],
            "note": "leave at door",
            "raw": "AAEC",
            "day": "2024-10-04",
        })
    );
}

#[test]
fn an_evolved_reader_gets_defaults_and_drops_what_it_lacks() {
    let reader = r#"{"type":"record","name":"Order","fields":[
        {"name":"eventId","type":"string"},
        {"name":"occurredAt","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW"],"default":"NEW"}},
        {"name":"channel","type":"string","default":"web"}]}"#;
    let value = decode(&plan(ORDER, reader), &order_bytes()).expect("decodes");
    assert_eq!(
        value,
        json!({"eventId": "0190f0c2-0000-7000-8000-000000000001", "occurredAt": "2025-12-06T05:46:40.123Z",
               "status": "NEW", "channel": "web"})
    );
}

#[test]
fn hostile_bytes_are_refused_with_a_reason_and_bounded_work() {
    let order = plan(ORDER, ORDER);
    let cut = order_bytes()[..30].to_vec();
    let long_varint = vec![0xff; 11];
    let mut huge_length = long(1 << 40);
    huge_length.push(b'x');
    let mut bad_utf8 = string("0190f0c2-0000-7000-8000-000000000001");
    bad_utf8[5] = 0xff;
    let mut trailing = order_bytes();
    trailing.push(0);
    let mut bad_branch = order_bytes();
    let at = bad_branch.len() - 22; // the union's index, after tags
    bad_branch[at] = 0x08;
    for (name, bytes, expected) in [
        ("cut short", cut, "cut short"),
        ("an 11-byte varint", long_varint, "longer than 10 bytes"),
        ("a huge length", huge_length, "bytes are needed where"),
        ("bad UTF-8", bad_utf8, "not UTF-8"),
        ("trailing bytes", trailing, "left after the record"),
        ("an unknown union branch", bad_branch, "union branch 4 does not exist"),
    ] {
        let error = decode(&order, &bytes).expect_err(name).to_string();
        assert!(error.contains(expected), "{name}: {error}");
    }
    let nulls = plan(r#"{"type":"array","items":"null"}"#, r#"{"type":"array","items":"null"}"#);
    let mut billion = long(1_000_000_000);
    billion.extend(long(0));
    let error = decode(&nulls, &billion).expect_err("a billion nulls").to_string();
    assert!(error.contains("more values than its bytes can hold"), "{error}");
}

#[test]
fn nesting_is_bounded_even_under_a_recursive_schema() {
    let list = r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#;
    let resolved = plan(list, list);
    let mut ten = vec![2u8; 10]; // branch 1 (Node), ten times
    ten.push(0); // then null
    assert!(decode(&resolved, &ten).is_ok());
    let deep = vec![2u8; 1_000_000];
    let error = decode(&resolved, &deep).expect_err("too deep").to_string();
    assert!(error.contains("nest deeper than 128"), "{error}");
}
