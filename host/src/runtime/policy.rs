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
//! The toolchains name themselves in the component's `producers` custom
//! sections (`processed-by`); a component that claims a producer it was
//! not built by gains nothing but kept instances of its own.

/// Events per instance for an interpreter's component.
pub const INTERPRETED: u32 = 1000;
/// A component this large (bytes) run with a fresh instance per event is
/// warned about: instantiating it is most of an event's cost.
const LARGE: usize = 8 << 20;

/// The toolchains whose components carry an interpreter, as they name
/// themselves in `processed-by`.
const INTERPRETERS: &[&str] = &["componentize-py", "ComponentizeJS", "componentize-js", "StarlingMonkey"];

/// `configured` (0: not set) resolved for the component `bytes`, and
/// what to tell the operator about the choice.
pub(crate) fn events_per_instance(configured: u32, bytes: &[u8], handler: &str) -> u32 {
    let interpreter =
        if configured == 0 { INTERPRETERS.iter().find(|name| contains(bytes, name.as_bytes())) } else { None };
    match (configured, interpreter) {
        (0, Some(by)) => {
            tracing::info!(
                handler,
                "events_per_instance not set: {INTERPRETED} for a component built by {by} (its interpreter takes \
                 milliseconds to start; set events_per_instance = 1 for a fresh instance per event)"
            );
            INTERPRETED
        }
        (0 | 1, _) => {
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
        (n, _) => n,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::{INTERPRETED, events_per_instance};

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
}
