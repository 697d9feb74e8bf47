//! A handler's consumer-group protocol: Kafka's classic protocol (the
//! client's assignor, client-side session timeouts) or KIP-848's `consumer`
//! protocol (GA in Kafka 4.0 and librdkafka 2.12: the broker assigns, and
//! the session timeout and heartbeat interval are the broker's). Each one
//! ignores, or librdkafka refuses, the other's settings: `check` names the
//! setting and what replaces it, before any client is made.

use std::collections::BTreeMap;

use anyhow::bail;
use serde::Deserialize;

/// `group_protocol` of a `[[handler]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupProtocol {
    /// JoinGroup/SyncGroup; `assignor` is the client's
    /// `partition.assignment.strategy` (default `cooperative-sticky`).
    #[default]
    Classic,
    /// KIP-848; `assignor` is `group.remote.assignor` (`uniform`, the
    /// broker's default, or `range`).
    Consumer,
}

impl GroupProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
        }
    }

    /// The assignor used when the handler names none (`None`: the broker's).
    pub fn default_assignor(self) -> Option<&'static str> {
        match self {
            Self::Classic => Some("cooperative-sticky"),
            Self::Consumer => None,
        }
    }
}

/// Properties a handler's group settings own: set through `group_protocol`
/// and `assignor`, never as librdkafka properties.
const OWNED: &[(&str, &str)] = &[
    ("group.protocol", "group_protocol"),
    ("group.remote.assignor", "assignor"),
    ("partition.assignment.strategy", "assignor"),
    ("group.instance.id", "[kafka] instance_id"),
];

/// Classic-protocol properties that librdkafka refuses under the
/// `consumer` protocol, and what replaces each there.
const CLASSIC_ONLY: &[(&str, &str)] = &[
    ("session.timeout.ms", "the broker's group.consumer.session.timeout.ms"),
    ("heartbeat.interval.ms", "the broker's group.consumer.heartbeat.interval.ms"),
    ("group.protocol.type", "nothing (the consumer protocol has one type)"),
];

/// Checks `assignor` and the handler's properties (`layers`: every table of
/// librdkafka properties that reaches its consumer, with its name) against
/// `protocol`.
pub(super) fn check(
    at: &str,
    protocol: GroupProtocol,
    assignor: Option<&str>,
    layers: &[(&str, &BTreeMap<String, String>)],
) -> anyhow::Result<()> {
    for (table, properties) in layers {
        for key in properties.keys() {
            if let Some((_, ours)) = OWNED.iter().find(|(k, _)| k == key) {
                let whose = if ours.starts_with('[') { "" } else { "the handler's " };
                bail!("{at}: {table} `{key}` is refused: set {whose}`{ours}` instead");
            }
            if protocol == GroupProtocol::Consumer
                && let Some((_, instead)) = CLASSIC_ONLY.iter().find(|(k, _)| k == key)
            {
                bail!(
                    "{at}: {table} `{key}` belongs to the classic group protocol, and this handler has \
                     group_protocol = \"consumer\" (KIP-848), where it is {instead}; remove it"
                );
            }
        }
    }
    match (protocol, assignor) {
        (_, None) => Ok(()),
        (GroupProtocol::Classic, Some("cooperative-sticky" | "range" | "roundrobin")) => Ok(()),
        (GroupProtocol::Consumer, Some("uniform" | "range")) => Ok(()),
        (GroupProtocol::Classic, Some(other)) => bail!(
            "{at}: assignor `{other}`: under group_protocol = \"classic\" use cooperative-sticky, range or roundrobin{}",
            if other == "uniform" {
                " (uniform is the consumer protocol's: set group_protocol = \"consumer\")"
            } else {
                ""
            }
        ),
        (GroupProtocol::Consumer, Some(other)) => bail!(
            "{at}: assignor `{other}` is a client-side assignor, which group_protocol = \"consumer\" (KIP-848) \
             does not use: the broker assigns, with assignor = \"uniform\" (its default, incremental like \
             cooperative-sticky) or \"range\""
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(keys: &[&str]) -> BTreeMap<String, String> {
        keys.iter().map(|k| ((*k).to_owned(), "1".to_owned())).collect()
    }

    #[test]
    fn each_protocol_refuses_the_others_settings_naming_the_replacement() {
        let none = table(&[]);
        let at = "handler `h`";
        let ok = |p, a| check(at, p, a, &[("[kafka.properties]", &none)]).is_ok();
        assert!(ok(GroupProtocol::Classic, Some("cooperative-sticky")));
        assert!(ok(GroupProtocol::Consumer, Some("uniform")));
        assert!(ok(GroupProtocol::Consumer, None));
        let refused = |p, a, props: &BTreeMap<String, String>| {
            check(at, p, a, &[("[kafka.properties]", props)]).map_err(|e| e.to_string()).err().unwrap_or_default()
        };
        let e = refused(GroupProtocol::Consumer, Some("cooperative-sticky"), &none);
        assert!(e.contains("assignor = \"uniform\""), "{e}");
        let e = refused(GroupProtocol::Classic, Some("uniform"), &none);
        assert!(e.contains("group_protocol = \"consumer\""), "{e}");
        let e = refused(GroupProtocol::Consumer, None, &table(&["session.timeout.ms"]));
        assert!(e.contains("group.consumer.session.timeout.ms") && e.contains("[kafka.properties]"), "{e}");
        let e = refused(GroupProtocol::Consumer, None, &table(&["heartbeat.interval.ms"]));
        assert!(e.contains("group.consumer.heartbeat.interval.ms"), "{e}");
        let e = refused(GroupProtocol::Classic, None, &table(&["group.protocol"]));
        assert!(e.contains("`group_protocol`"), "{e}");
        let e = refused(GroupProtocol::Classic, None, &table(&["partition.assignment.strategy"]));
        assert!(e.contains("`assignor`"), "{e}");
        // The classic protocol keeps its own timeouts.
        assert!(check(at, GroupProtocol::Classic, None, &[("p", &table(&["session.timeout.ms"]))]).is_ok());
    }
}
