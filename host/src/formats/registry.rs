//! The schema registry's client: a writer schema by id
//! (`GET /schemas/ids/{id}`, its references by subject and version), over
//! Confluent's REST API. What can go wrong is told apart the way the
//! pipeline needs it: the registry does not answer, answers 5xx, 408, 429
//! or refuses idem's credentials, or something else answers 404 for it →
//! an [`Outage`] (the record waits, nothing is spent); the registry says
//! the id does not exist, or answers what cannot be used → [`Lookup`]'s
//! `Missing` and `Unusable` (the record is invalid).

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
struct Latest {
    id: u32,
    #[serde(flatten)]
    answer: Answer,
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

    /// Schema `id` and the schemas it references.
    pub async fn schema(&self, id: u32) -> Result<Lookup, Outage> {
        match self.get_json::<Answer>(&format!("{}/schemas/ids/{id}", self.base)).await? {
            Got::Found(answer) => self.with_references(answer).await,
            Got::Missing => Ok(Lookup::Missing),
            Got::Bad(why) => Ok(Lookup::Unusable(why)),
        }
    }

    /// The latest version of `subject`: its schema id and schema.
    pub async fn latest(&self, subject: &str) -> Result<(Option<u32>, Lookup), Outage> {
        let url = format!("{}/subjects/{}/versions/latest", self.base, encode(subject));
        match self.get_json::<Latest>(&url).await? {
            Got::Found(Latest { id, answer }) => Ok((Some(id), self.with_references(answer).await?)),
            Got::Missing => Ok((None, Lookup::Missing)),
            Got::Bad(why) => Ok((None, Lookup::Unusable(why))),
        }
    }

    /// `answer` with the schemas it references fetched.
    async fn with_references(&self, answer: Answer) -> Result<Lookup, Outage> {
        let mut references = Vec::new();
        let mut queue: Vec<Reference> = answer.references;
        let mut asked = 0;
        while let Some(reference) = queue.pop() {
            if references.iter().any(|(name, _)| *name == reference.name) {
                continue;
            }
            asked += 1;
            if asked > MAX_REFERENCES {
                return Ok(Lookup::Unusable(format!("it references more than {MAX_REFERENCES} schemas")));
            }
            let url = format!("{}/subjects/{}/versions/{}", self.base, encode(&reference.subject), reference.version);
            match self.get_json::<Answer>(&url).await? {
                Got::Found(found) => {
                    queue.extend(found.references);
                    references.push((reference.name, found.schema));
                }
                Got::Missing => {
                    return Ok(Lookup::MissingReference(format!(
                        "it references `{}` (subject `{}` version {}), which is not in the registry",
                        reference.name, reference.subject, reference.version
                    )));
                }
                Got::Bad(why) => return Ok(Lookup::Unusable(why)),
            }
        }
        let kind = answer.schema_type.unwrap_or_else(|| "AVRO".into());
        Ok(Lookup::Found(Fetched { kind, text: answer.schema, references }))
    }

    /// Every version of `subject` with its schema id, oldest first (none:
    /// the registry has no such subject).
    pub async fn versions(&self, subject: &str) -> Result<Vec<(i64, u32)>, Outage> {
        let url = format!("{}/subjects/{}/versions", self.base, encode(subject));
        let numbers = match self.get_json::<Vec<i64>>(&url).await? {
            Got::Found(numbers) => numbers,
            Got::Missing => return Ok(Vec::new()),
            Got::Bad(why) => return Err(Outage(why)),
        };
        let mut out = Vec::with_capacity(numbers.len());
        for version in numbers {
            let url = format!("{}/subjects/{}/versions/{version}", self.base, encode(subject));
            match self.get_json::<Version>(&url).await? {
                Got::Found(found) => out.push((version, found.id)),
                Got::Missing => {}
                Got::Bad(why) => return Err(Outage(why)),
            }
        }
        Ok(out)
    }

    /// Registers `text` (a schema of `kind`: `AVRO`, `PROTOBUF`, `JSON`,
    /// without references) under `subject`, or finds it registered there
    /// already: its id. What `[[handler.emit]] register` asks for. The
    /// registry applies the subject's compatibility rule: a schema it
    /// refuses is `Ok(Err(why))`, in its words.
    pub async fn register(&self, subject: &str, kind: &str, text: &str) -> Result<Result<u32, String>, Outage> {
        let url = format!("{}/subjects/{}/versions", self.base, encode(subject));
        let body = serde_json::json!({ "schemaType": kind, "schema": text });
        let request = self.http.post(&url).json(&body);
        match self.answer::<Version>(request, &url).await? {
            Got::Found(Version { id }) => Ok(Ok(id)),
            Got::Missing => Ok(Err(format!("{url} answered that there is no such subject"))),
            Got::Bad(why) => Ok(Err(why)),
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<Got<T>, Outage> {
        self.answer(self.http.get(url), url).await
    }

    /// A request's answer, told apart: the registry's own "not found" (its
    /// error codes 40401 to 40403) from a 404 of something else in the way
    /// (an outage: a wrong path or a proxy answers for it), a definite
    /// refusal of the request (with the registry's message) or a bad
    /// answer from one that may pass.
    async fn answer<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<Got<T>, Outage> {
        let request = request.header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        let request = match &self.auth {
            Auth::None => request,
            Auth::Basic(user, password) => request.basic_auth(user, Some(password)),
            Auth::Bearer(token) => request.bearer_auth(token),
        };
        let mut response = request.send().await.map_err(|e| Outage(format!("no answer from {}: {e}", self.base)))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| Outage(format!("{url}: {e}")))? {
            if body.len() + chunk.len() > MAX_SCHEMA_BYTES {
                return Ok(Got::Bad(format!("{url} answered more than {MAX_SCHEMA_BYTES} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        let code = status.as_u16();
        if code == 404 {
            let error: Option<Refusal> = serde_json::from_slice(&body).ok();
            return match error.map(|e| e.error_code) {
                Some(40401..=40403) => Ok(Got::Missing),
                _ => Err(Outage(format!(
                    "{url} answered 404 without the registry's error code: is [registry] url right?"
                ))),
            };
        }
        if status.is_server_error() || matches!(code, 401 | 403 | 408 | 429) {
            return Err(Outage(format!("{url} answered {status}")));
        }
        if !status.is_success() {
            let said = serde_json::from_slice::<Refusal>(&body).ok().and_then(|r| r.message);
            let said = said.map(|m| format!(": {}", crate::text::shown(&m, 500))).unwrap_or_default();
            return Ok(Got::Bad(format!("{url} answered {status}{said}")));
        }
        Ok(match serde_json::from_slice(&body) {
            Ok(found) => Got::Found(found),
            Err(e) => Got::Bad(format!("{url} answered what is not a registry's answer: {e}")),
        })
    }
}

/// What the registry says of a schema id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Found(Fetched),
    /// It has no such id. Not kept: an id registered a moment ago may
    /// reach this host before the registry's replica has it.
    Missing,
    /// It has the id, not a schema the id references: which. Not kept either.
    MissingReference(String),
    /// Its answer cannot be used (too large, malformed, refused): why.
    Unusable(String),
}

enum Got<T> {
    Found(T),
    Missing,
    Bad(String),
}

#[derive(Deserialize)]
struct Refusal {
    error_code: i64,
    #[serde(default)]
    message: Option<String>,
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
