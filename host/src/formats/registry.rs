//! The schema registry's client: a writer schema by id
//! (`GET /schemas/ids/{id}`, its references by subject and version), over
//! Confluent's REST API. What can go wrong is told apart the way the
//! pipeline needs it: the registry does not answer, answers 5xx or refuses
//! idem's credentials → an [`Outage`] (the record waits, nothing is spent);
//! the registry says the id does not exist → `Ok(None)` (the record is
//! invalid).

use std::time::Duration;

use anyhow::Context as _;
use serde::Deserialize;

use crate::config::RegistryConfig;

/// The longest schema (or answer) read from the registry.
const MAX_SCHEMA_BYTES: usize = 1 << 20;
/// Schemas one writer schema may pull in through its references, in all:
/// a cycle or a flood of them ends here.
const MAX_REFERENCES: usize = 32;

/// The registry cannot answer now: whatever needed it waits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the schema registry: {0}")]
pub struct Outage(pub String);

/// A schema as the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub kind: String,
    pub text: String,
    /// The schemas it imports, by the name it imports them under.
    pub references: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct Answer {
    schema: String,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
}

#[derive(Deserialize)]
struct Version {
    id: u32,
}

#[derive(Deserialize)]
struct Reference {
    name: String,
    subject: String,
    version: i64,
}

enum Auth {
    None,
    Basic(String, String),
    Bearer(String),
}

pub struct Registry {
    http: reqwest::Client,
    base: String,
    auth: Auth,
    /// Writer schemas each handler keeps (`[registry] cached_schemas`).
    cached: usize,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("base", &self.base).finish_non_exhaustive()
    }
}

impl Registry {
    /// The client `config` describes; its credentials read from the
    /// environment now (a variable named and unset is an error, at start-up).
    pub fn new(config: &RegistryConfig) -> anyhow::Result<Self> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let mut builder = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout);
        if let Some(ca) = &config.ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("[registry] ca_file {}", ca.display()))?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .with_context(|| format!("[registry] ca_file {} is not a PEM certificate", ca.display()))?;
            builder = builder.add_root_certificate(cert);
        }
        let variable = |name: &str| {
            crate::env::non_blank(name)
                .with_context(|| format!("[registry] names the variable {name}, which is not set"))
        };
        let auth = match (&config.username_env, &config.password_env, &config.token_env) {
            (Some(user), Some(password), _) => Auth::Basic(variable(user)?, variable(password)?),
            (_, _, Some(token)) => Auth::Bearer(variable(token)?),
            _ => Auth::None,
        };
        let http = builder.build().context("failed to build the registry's HTTP client")?;
        Ok(Self { http, base: config.url.trim_end_matches('/').to_owned(), auth, cached: config.cached_schemas })
    }

    /// Writer schemas each handler keeps.
    pub fn cached_schemas(&self) -> usize {
        self.cached
    }

    /// Schema `id` and the schemas it references; `None`: the registry has no such id.
    pub async fn schema(&self, id: u32) -> Result<Option<Fetched>, Outage> {
        let Some(answer) = self.get(&format!("{}/schemas/ids/{id}", self.base)).await? else { return Ok(None) };
        let mut references = Vec::new();
        let mut queue: Vec<Reference> = answer.references;
        while let Some(reference) = queue.pop() {
            // Past the limit, or not in the registry: left out, so the
            // schema does not compile and says which import it lacks.
            if references.len() >= MAX_REFERENCES || references.iter().any(|(name, _)| *name == reference.name) {
                continue;
            }
            let url = format!("{}/subjects/{}/versions/{}", self.base, encode(&reference.subject), reference.version);
            let Some(found) = self.get(&url).await? else { continue };
            queue.extend(found.references);
            references.push((reference.name, found.schema));
        }
        let kind = answer.schema_type.unwrap_or_else(|| "AVRO".into());
        Ok(Some(Fetched { kind, text: answer.schema, references }))
    }

    /// Every version of `subject` with its schema id, oldest first (none:
    /// the registry has no such subject).
    pub async fn versions(&self, subject: &str) -> Result<Vec<(i64, u32)>, Outage> {
        let url = format!("{}/subjects/{}/versions", self.base, encode(subject));
        let Some(numbers) = self.get_json::<Vec<i64>>(&url).await? else { return Ok(Vec::new()) };
        let mut out = Vec::with_capacity(numbers.len());
        for version in numbers {
            let url = format!("{}/subjects/{}/versions/{version}", self.base, encode(subject));
            let Some(found) = self.get_json::<Version>(&url).await? else { continue };
            out.push((version, found.id));
        }
        Ok(out)
    }

    async fn get(&self, url: &str) -> Result<Option<Answer>, Outage> {
        self.get_json(url).await
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<Option<T>, Outage> {
        let request = self.http.get(url).header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        let request = match &self.auth {
            Auth::None => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        let mut response = request.send().await.map_err(|e| Outage(format!("no answer from {}: {e}", self.base)))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(Outage(format!("{url} answered {status}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| Outage(format!("{url}: {e}")))? {
            if body.len() + chunk.len() > MAX_SCHEMA_BYTES {
                return Err(Outage(format!("{url} answered more than {MAX_SCHEMA_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map(Some).map_err(|e| Outage(format!("{url} answered what is not a schema: {e}")))
    }
}

/// A subject in a URL path: anything but unreserved characters escaped.
fn encode(subject: &str) -> String {
    subject
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}
