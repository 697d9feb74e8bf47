//! The recorder's `https`: a certificate authority made when `idem test`
//! starts and dropped when it ends (its key never touches the disk), a
//! certificate per host it is asked for, and TLS served inside a CONNECT
//! tunnel, where each request is recorded as a plain one would be.
//!
//! Only the handler's client of this `idem test` trusts the authority
//! (`capabilities::http::client_via`), so a certificate it issues is worth
//! nothing elsewhere.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use tokio_rustls::rustls::{self, pki_types::PrivateKeyDer};

use super::Shared;

/// Hosts one run issues certificates for, at most.
const MAX_HOSTS: usize = 256;

/// This run's certificate authority, and the server configurations of the
/// hosts it has issued for.
pub(super) struct Issuer {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
    issued: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl Issuer {
    pub(super) fn new() -> anyhow::Result<Self> {
        let key = KeyPair::generate().context("the recorder's CA key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, "idem test recorder (this run only)");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let der = params.self_signed(&key).context("the recorder's CA certificate")?.der().to_vec();
        Ok(Self { params, key, der, issued: Mutex::default() })
    }

    pub(super) fn ca_der(&self) -> &[u8] {
        &self.der
    }

    /// The server configuration for `host`: a certificate naming it (a
    /// DNS name or an IP address), issued once per run.
    fn config(&self, host: &str) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let mut issued = self.issued.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(config) = issued.get(host) {
            return Ok(config.clone());
        }
        if issued.len() >= MAX_HOSTS {
            anyhow::bail!("more than {MAX_HOSTS} hosts in one test");
        }
        let key = KeyPair::generate()?;
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = CertificateParams::new(vec![host.to_owned()])
            .with_context(|| format!("`{host}` cannot be named in a certificate"))?
            .signed_by(&key, &issuer)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::try_from(key.serialize_der()).map_err(anyhow::Error::msg)?,
            )?;
        let config = Arc::new(config);
        issued.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// Answers a CONNECT: `200`, then, on the upgraded connection, TLS as the
/// requested host and the recorder's own routes with the origin set.
pub(super) fn tunnel(shared: Shared, mut request: Request) -> Response {
    let authority = request.uri().clone();
    let host = authority.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_owned();
    let config = match shared.tls.config(&host) {
        Ok(config) => config,
        Err(e) => {
            super::push(&shared.lines, format!("CONNECT {authority}: not recorded ({e:#})"));
            return (StatusCode::BAD_GATEWAY, "not recorded").into_response();
        }
    };
    let upgrade = hyper::upgrade::on(&mut request);
    let inner = Shared { origin: Some(super::origin(&authority)), ..shared };
    tokio::spawn(async move {
        if let Err(e) = serve_tunnel(upgrade, config, inner).await {
            tracing::warn!("the HTTP recorder's tunnel to {authority}: {e:#}");
        }
    });
    StatusCode::OK.into_response()
}

async fn serve_tunnel(
    upgrade: hyper::upgrade::OnUpgrade,
    config: Arc<rustls::ServerConfig>,
    shared: Shared,
) -> anyhow::Result<()> {
    let upgraded = upgrade.await.context("the tunnel was not opened")?;
    let tls = tokio_rustls::TlsAcceptor::from(config).accept(TokioIo::new(upgraded)).await.context("TLS")?;
    let app = axum::Router::new().fallback(super::record).with_state(shared);
    hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), hyper_util::service::TowerToHyperService::new(app))
        .await
        .context("HTTP inside the tunnel")
}
