use super::{Authenticity, Keys};

const A: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const B: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn sealed(keys: &Keys, key: &[u8], value: &[u8], headers: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    let seal = keys.seal(Some(key), Some(value), headers.iter().map(|(n, v)| (*n, Some(*v))));
    let mut all: Vec<(String, Vec<u8>)> = headers.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
    all.push(("idem.seal".into(), seal.into_bytes()));
    all
}

fn check(keys: &Keys, key: &[u8], value: &[u8], headers: &[(String, Vec<u8>)]) -> Authenticity {
    let fields: Vec<_> = headers.iter().map(|(n, v)| (n.as_str(), Some(v.as_slice()))).collect();
    keys.verify(Some(key), Some(value), &fields)
}

#[test]
fn a_sealed_record_verifies_and_any_change_to_it_is_forged() {
    let keys = Keys::from_hex(A, None).expect("key");
    let headers = [("traceparent", b"00-abc".as_slice()), ("idem.handler", b"billing"), ("idem.replay.count", b"1")];
    let record = sealed(&keys, b"k", b"{\"eventId\":1}", &headers);
    assert_eq!(check(&keys, b"k", b"{\"eventId\":1}", &record), Authenticity::Sealed);

    assert_eq!(check(&keys, b"k", b"{\"eventId\":2}", &record), Authenticity::Forged, "another value");
    assert_eq!(check(&keys, b"j", b"{\"eventId\":1}", &record), Authenticity::Forged, "another key");
    let mut changed = record.clone();
    changed[1].1 = b"notification".to_vec();
    assert_eq!(check(&keys, b"k", b"{\"eventId\":1}", &changed), Authenticity::Forged, "another handler");
    let mut added = record.clone();
    added.insert(0, ("idem.replay.count".into(), b"9".to_vec()));
    assert_eq!(check(&keys, b"k", b"{\"eventId\":1}", &added), Authenticity::Forged, "a header added");
    let mut swapped = record.clone();
    swapped.swap(0, 1);
    assert_eq!(check(&keys, b"k", b"{\"eventId\":1}", &swapped), Authenticity::Forged, "headers reordered");
    let mut twice = record.clone();
    twice.push(record[3].clone());
    assert_eq!(check(&keys, b"k", b"{\"eventId\":1}", &twice), Authenticity::Forged, "two seals");
    // Moving bytes between a name and a value changes the encoding.
    let shifted = sealed(&keys, b"k", b"v", &[("ab", b"c")]);
    let moved = vec![("a".to_string(), b"bc".to_vec()), shifted[1].clone()];
    assert_eq!(check(&keys, b"k", b"v", &moved), Authenticity::Forged, "bytes moved across fields");
}

#[test]
fn records_without_a_seal_are_unsealed_and_other_keys_do_not_verify() {
    let (a, b) = (Keys::from_hex(A, None).expect("a"), Keys::from_hex(B, None).expect("b"));
    let record = sealed(&a, b"k", b"v", &[("h", b"1")]);
    assert_eq!(check(&b, b"k", b"v", &record), Authenticity::Forged, "another key's seal");
    assert_eq!(check(&a, b"k", b"v", &record[..1]), Authenticity::Unsealed);
    let mut garbage = record.clone();
    garbage[1].1 = b"v1:zz".to_vec();
    assert_eq!(check(&a, b"k", b"v", &garbage), Authenticity::Forged);
}

#[test]
fn a_rotation_verifies_the_previous_keys_records_and_seals_with_the_new() {
    let old = Keys::from_hex(A, None).expect("old");
    let rotated = Keys::from_hex(B, Some(A)).expect("rotated");
    let before = sealed(&old, b"k", b"v", &[("h", b"1")]);
    assert_eq!(check(&rotated, b"k", b"v", &before), Authenticity::Sealed);
    let after = sealed(&rotated, b"k", b"v", &[("h", b"1")]);
    assert_eq!(check(&old, b"k", b"v", &after), Authenticity::Forged, "sealed with the new key");
}

#[test]
fn short_or_non_hex_keys_are_refused_naming_what_is_wrong() {
    let short = Keys::from_hex("00112233", None).expect_err("short");
    assert!(short.to_string().contains("at least 32"), "{short}");
    let text = Keys::from_hex(&"xy".repeat(40), None).expect_err("text");
    assert!(text.to_string().contains("not hex"), "{text}");
}
