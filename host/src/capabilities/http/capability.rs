//! The `http` import as a [`Capability`]: its settings (`[handler.http]`
//! and the requests' cap, checked by `check`), its state per invocation, what it says after
//! the call.

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use super::{HttpCapability, HttpPolicy};
use crate::capabilities::allowance::Allowance;
use crate::capabilities::{After, Call, Capability, HasCapabilities};
use crate::config::HandlerConfig;
use crate::error::ExecError;

impl Capability for HttpCapability {
    const INTERFACE: &'static str = "http";
    type Settings = HttpPolicy;
    /// Its requests (host, status), when kept (`idem test`); a shadow
    /// run's, each as a line (`HttpCapability::recorded`).
    type Left = Vec<(String, Option<u16>)>;

    fn check(handler: &HandlerConfig) -> anyhow::Result<()> {
        super::check::check(handler)
    }

    fn settings(handler: &HandlerConfig) -> anyhow::Result<HttpPolicy> {
        Ok(HttpPolicy::of(&handler.http, handler.limits.max_http_requests))
    }

    fn prepare(settings: &Arc<HttpPolicy>, call: &Call<'_>) -> Self {
        let mut http = Self::new(
            call.shared.http_client.clone(),
            settings.clone(),
            call.event_id.to_owned(),
            settings.max_requests,
            call.deadline,
        );
        http.sent_keys = call.shared.sent_keys.clone();
        http.throttles = call.shared.throttles.clone();
        http.keep = call.transcript;
        http.recording = call.shared.recording;
        http.tape = call.tape.clone();
        http
    }

    /// The same client and no allowance.
    fn husk(&self) -> Self {
        let mut husk =
            Self::new(self.client.clone(), self.policy.clone(), String::new(), 0, tokio::time::Instant::now());
        husk.throttles = self.throttles.clone();
        husk
    }

    /// Whatever the guest made of the refusal, an event that sent a
    /// different request under a key used before fails.
    fn finish(&mut self, after: &mut After<'_>) -> Self::Left {
        if let Some(stats) = after.stats {
            for (host, status) in &self.sent {
                stats.http_request(host, *status);
            }
            for (host, reason) in &self.resent {
                stats.http_retry(host, reason);
            }
        }
        if let Some(key) = self.changed_key.take() {
            after.veto(ExecError::RequestChanged(key));
        }
        if let Some(why) = self.throttled.take() {
            after.excuse(ExecError::Throttled(why));
        }
        if self.keep || self.recording { std::mem::take(&mut self.sent) } else { Vec::new() }
    }

    fn link<T: HasCapabilities>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
        crate::wit::http::add_to_linker::<T, HasSelf<Self>>(linker, |t| &mut t.capabilities().http)
    }
}

impl HttpCapability {
    pub(crate) fn new(
        client: reqwest::Client,
        policy: Arc<HttpPolicy>,
        event_id: String,
        max_requests: u32,
        deadline: tokio::time::Instant,
    ) -> Self {
        let requests = Allowance::new(max_requests, "max_http_requests");
        let (used, sent, resent) = (HashMap::new(), Vec::new(), Vec::new());
        Self {
            client,
            policy,
            event_id,
            used,
            requests,
            sent,
            resent,
            deadline,
            sent_keys: None,
            changed_key: None,
            keep: false,
            recording: false,
            throttles: Arc::default(),
            throttled: None,
            tape: None,
        }
    }
}
