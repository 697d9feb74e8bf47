//! How many events one instance serves when the config does not say
//! (`events_per_instance` not set): chosen from the component itself.
//!
//! A component built by componentize-py (the Python SDK) or ComponentizeJS
//! (the TypeScript SDK) carries a whole interpreter, whose start costs
//! milliseconds per event (a Python billing handler ran at 191 events/s
//! with a fresh instance per event, 0.37× the seed's own consumer, and at
//! 6.4× it with 1000 events per instance: issue 47). Their SDKs keep no
//! state between events, so those get 1000. Any other component gets a
//! fresh instance per event, the isolation the config's doc describes, and
//! a warning when it is large enough for that to cost.
//!
//! A component may also declare itself reusable: a custom section
//! `idem:instances` holding `reusable`, which the Rust SDK's
//! `handler!(f, reusable)` writes. Its author says the handler keeps
//! nothing in memory between events; it gets [`REUSABLE`] events per
//! instance. Measured by the benchmark (docs/benchmark.md, variants a and
//! n), kept instances cost the host 40 µs of CPU per event for the billing
//! example, against 57 µs with a fresh instance per event.
//!
//! The toolchains name themselves in the component's `producers` custom
//! sections (`processed-by`); a component that claims a producer it was
//! not built by, or declares itself reusable, gains nothing but kept
//! instances of its own: what one of its events leaves in memory reaches
//! only its own later events.

/// Events per instance for an interpreter's component.
pub const INTERPRETED: u32 = 1000;
/// Events per instance for a component that declares itself reusable.
pub const REUSABLE: u32 = 1000;
/// The custom section of the declaration, and what it holds.
const DECLARATION: (&str, &[u8]) = ("idem:instances", b"reusable");
/// A component this large (bytes) run with a fresh instance per event is
/// warned about: instantiating it is most of an event's cost.
const LARGE: usize = 8 << 20;

/// The toolchains whose components carry an interpreter, as they name
/// themselves in `processed-by`.
const INTERPRETERS: &[&str] = &["componentize-py", "ComponentizeJS", "componentize-js", "StarlingMonkey"];

/// `configured` (0: not set) resolved for the component `bytes`, and
/// what to tell the operator about the choice.
pub(crate) fn events_per_instance(configured: u32, bytes: &[u8], handler: &str) -> u32 {
    if configured > 1 {
        return configured;
    }
    if configured == 0 {
        if let Some(by) = INTERPRETERS.iter().find(|name| contains(bytes, name.as_bytes())) {
            tracing::info!(
                handler,
                "events_per_instance not set: {INTERPRETED} for a component built by {by} (its interpreter takes \
                 milliseconds to start; set events_per_instance = 1 for a fresh instance per event)"
            );
            return INTERPRETED;
        }
        if declared_reusable(bytes) {
            tracing::info!(
                handler,
                "events_per_instance not set: {REUSABLE} for a component that declares itself reusable (set \
                 events_per_instance = 1 for a fresh instance per event)"
            );
            return REUSABLE;
        }
    }
    if bytes.len() >= LARGE {
        tracing::warn!(
            handler,
            "a fresh instance per event for a component of {} MiB: instantiating it is most of each event's \
             cost; set events_per_instance (docs/configuration.md) if the handler keeps no state in memory",
            bytes.len() >> 20
        );
    }
    1
}

/// Whether the component, or a core module in it, holds the declaration
/// (`handler!(f, reusable)`). A component that cannot be parsed declares
/// nothing (it is refused when compiled anyway).
fn declared_reusable(bytes: &[u8]) -> bool {
    let (name, holds) = DECLARATION;
    wasmparser::Parser::new(0).parse_all(bytes).map_while(Result::ok).any(|payload| {
        matches!(payload, wasmparser::Payload::CustomSection(section) if section.name() == name && section.data() == holds)
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::{INTERPRETED, REUSABLE, events_per_instance};

    #[test]
    fn an_interpreters_component_keeps_instances_unless_the_config_says() {
        let python = b"\0asm....producers\x0cprocessed-by\x0fcomponentize-py\x060.25.1";
        assert_eq!(events_per_instance(0, python, "h"), INTERPRETED);
        assert_eq!(events_per_instance(1, python, "h"), 1, "the config wins");
        assert_eq!(events_per_instance(5, python, "h"), 5);
        let rust = b"\0asm....producers\x0cprocessed-by\x05rustc";
        assert_eq!(events_per_instance(0, rust, "h"), 1);
        assert_eq!(events_per_instance(20, rust, "h"), 20);
    }

    /// A core module with the custom section `name` holding `data`.
    fn module_with(name: &str, data: &[u8]) -> Vec<u8> {
        let mut section = vec![u8::try_from(name.len()).unwrap()];
        section.extend_from_slice(name.as_bytes());
        section.extend_from_slice(data);
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        bytes.push(0);
        bytes.push(u8::try_from(section.len()).unwrap());
        bytes.extend(section);
        bytes
    }

    #[test]
    fn a_component_that_declares_itself_reusable_keeps_instances_unless_the_config_says() {
        let declared = module_with("idem:instances", b"reusable");
        assert_eq!(events_per_instance(0, &declared, "h"), REUSABLE);
        assert_eq!(events_per_instance(1, &declared, "h"), 1, "the config wins");
        assert_eq!(events_per_instance(7, &declared, "h"), 7);
        assert_eq!(events_per_instance(0, &module_with("idem:instances", b"fresh"), "h"), 1, "another value");
        assert_eq!(events_per_instance(0, &module_with("idem:other", b"reusable"), "h"), 1, "another section");
        let mut named_in_data = module_with("name", b"");
        named_in_data.extend_from_slice(b"idem:instances reusable");
        assert_eq!(events_per_instance(0, &named_in_data, "h"), 1, "the words elsewhere are not the section");
    }
}
