//! The checks of the operator's librdkafka properties (`[kafka.properties]`
//! and each handler's): no secret in the file, none of the properties idem
//! owns. How a client is then built from them is `kafka_client`'s.

use std::collections::BTreeMap;

use anyhow::bail;

/// librdkafka properties idem owns: it commits explicit offsets itself.
const OWNED_PROPERTIES: &[&str] = &["enable.auto.commit", "enable.auto.offset.store", "group.id"];

/// Whether a librdkafka property holds a secret: librdkafka's sensitive
/// properties, and anything named like a password, secret or private key.
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key == "sasl.oauthbearer.client.credentials.client.id" {
        return false; // an alias of the (public) client id
    }
    matches!(
        key.as_str(),
        "ssl.key.pem"
            | "ssl_key"
            | "sasl.jaas.config"
            | "sasl.oauthbearer.config"
            | "sasl.oauthbearer.assertion.private.key.pem"
    ) || ["password", "secret", "passphrase", "credential"].iter().any(|word| key.contains(word))
}

/// Checks one `properties` table and its `properties_env` companion; `at`
/// names the table for messages. Values of secrets never appear in them.
pub(super) fn check_properties(
    at: &str,
    properties: &BTreeMap<String, String>,
    from_env: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for (key, value) in properties {
        if is_secret(key) {
            bail!(
                "{at}: `{key}` holds a secret and is refused here; name the environment variable that holds it \
                 in the `properties_env` table instead (e.g. \"{key}\" = \"KAFKA_SASL_PASSWORD\")"
            );
        }
        check_owned(at, key, value)?;
    }
    for (key, variable) in from_env {
        if properties.contains_key(key) {
            bail!("{at}: `{key}` is set both in properties and in properties_env");
        }
        match crate::env::get(variable) {
            Some(value) => check_owned(at, key, &value)?,
            None => bail!("{at}: properties_env `{key}` reads the environment variable {variable}, which is not set"),
        }
    }
    Ok(())
}

/// The slowest `statistics.interval.ms` idem takes: the lag metric and a
/// consumer's signs of health (`pipeline::stall`) come from librdkafka's
/// statistics.
const SLOWEST_STATISTICS_MS: u64 = 5_000;

fn check_owned(at: &str, key: &str, value: &str) -> anyhow::Result<()> {
    if key == "statistics.interval.ms" {
        match value.trim().parse::<u64>() {
            Ok(ms) if (1..=SLOWEST_STATISTICS_MS).contains(&ms) => return Ok(()),
            _ => bail!(
                "{at}: `statistics.interval.ms = {value}` is refused: idem reads librdkafka's statistics for the \
                 lag metric and to tell a stalled consumer, so it must be 1 to {SLOWEST_STATISTICS_MS} ms \
                 (default 1000)"
            ),
        }
    }
    let harmless = key != "group.id" && value == "false";
    if OWNED_PROPERTIES.contains(&key) && !harmless {
        bail!(
            "{at}: `{key} = {value}` is refused: idem commits offsets itself, only after each event's \
             transaction (enable.auto.commit and enable.auto.offset.store stay false; group.id is `group_id`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_that_would_stop_or_slow_past_five_seconds_are_refused() {
        for bad in ["0", "60000", "soon"] {
            let error = check_owned("[kafka.properties]", "statistics.interval.ms", bad).unwrap_err().to_string();
            assert!(error.contains("statistics.interval.ms") && error.contains("1 to 5000 ms"), "{error}");
        }
        for good in ["1", "1000", "5000"] {
            check_owned("[kafka.properties]", "statistics.interval.ms", good).unwrap();
        }
    }

    fn table(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn secrets_are_refused_in_properties_and_their_values_never_reach_a_message() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
        ] {
            let err = check_properties("[kafka.properties]", &table(&[(key, "hunter2-secret")]), &BTreeMap::new())
                .expect_err("a literal secret is refused");
            let message = format!("{err:#}");
            assert!(message.contains(key) && message.contains("properties_env"), "{message}");
            assert!(!message.contains("hunter2"), "the value is not printed: {message}");
        }
        for key in ["sasl.username", "sasl.mechanism", "security.protocol", "ssl.ca.location", "ssl.certificate.pem"] {
            assert!(!is_secret(key), "{key} is not a secret");
        }
    }

    #[test]
    fn properties_env_needs_its_variable_and_one_source_per_key() {
        let missing = table(&[("sasl.password", "IDEM_TEST_SURELY_UNSET_VARIABLE")]);
        let err = check_properties("[kafka.properties]", &BTreeMap::new(), &missing).expect_err("unset variable");
        assert!(format!("{err:#}").contains("IDEM_TEST_SURELY_UNSET_VARIABLE"), "{err:#}");
        let both = table(&[("sasl.username", "PATH")]);
        let err = check_properties("[kafka.properties]", &table(&[("sasl.username", "u")]), &both).expect_err("twice");
        assert!(format!("{err:#}").contains("both"), "{err:#}");
        assert!(check_properties("[kafka.properties]", &BTreeMap::new(), &both).is_ok(), "PATH is set");
    }
}
