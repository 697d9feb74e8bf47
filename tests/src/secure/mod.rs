//! A Kafka listener that requires TLS and/or SASL (PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512), as managed Kafka services do, in front of a mock
//! cluster of its own.
//!
//! librdkafka's mock cluster speaks plaintext only and has no SASL, so the
//! listener terminates both: it accepts TLS with a certificate from a CA
//! made for the test, answers ApiVersions with the SASL APIs added, runs
//! the SASL exchange itself (refusing any other request before it
//! succeeds, and closing the connection when it fails, as a broker does),
//! then forwards the authenticated connection to the mock broker. The mock
//! broker advertises the listener's address, so every connection a client
//! makes after bootstrap comes back through it.

mod frames;
mod scram;

use std::ffi::CString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, Producer as _};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use frames::{Request, read_frame, write_frame};

/// The SASL mechanisms the listener can require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// What a listener requires of its clients.
#[derive(Debug, Clone, Copy)]
pub struct Requires {
    pub tls: bool,
    pub sasl: Option<Mechanism>,
}

/// What the listener saw, for tests to assert on.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections that completed the SASL exchange (or TLS, without SASL).
    pub authenticated: AtomicU64,
    /// SASL exchanges refused: wrong mechanism, user or password.
    pub failed_authentications: AtomicU64,
    /// Connections closed because a request came before authentication.
    pub unauthenticated_requests: AtomicU64,
    /// TLS handshakes that failed (a plaintext client, an untrusted CA, …).
    pub tls_failures: AtomicU64,
}

impl ListenerStats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }
}

type CreateTopic = (String, i32, mpsc::Sender<Result<(), String>>);

/// A mock cluster reachable only through a listener that requires TLS
/// and/or SASL.
pub struct SecureBroker {
    /// `host:port` of the listener: the only bootstrap server.
    pub address: String,
    pub requires: Requires,
    pub user: String,
    pub password: String,
    /// The CA that signed the listener's certificate (PEM).
    pub ca_file: PathBuf,
    pub stats: Arc<ListenerStats>,
    create: mpsc::Sender<CreateTopic>,
}

impl std::fmt::Debug for SecureBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureBroker").field("address", &self.address).field("requires", &self.requires).finish()
    }
}

impl SecureBroker {
    /// Starts a mock cluster and its listener on a thread that owns both
    /// for the rest of the process.
    pub fn start(requires: Requires) -> Self {
        let dir = std::env::temp_dir().join(crate::unique_name("idem_tls"));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("tls dir: {e}"));
        let (ca_pem, tls) = tls::server_config();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap_or_else(|e| panic!("write CA: {e}"));
        let user = "idem-consumer".to_owned();
        let password = format!("pw-{}", uuid::Uuid::now_v7().simple());
        let stats = Arc::new(ListenerStats::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("listener bind: {e}"));
        let address = listener.local_addr().unwrap_or_else(|e| panic!("listener address: {e}"));
        let (ready_tx, ready_rx) = mpsc::channel::<SocketAddr>();
        let (create, create_rx) = mpsc::channel::<CreateTopic>();
        let auth = Auth { requires, user: user.clone(), password: password.clone() };
        let thread_stats = stats.clone();
        std::thread::Builder::new()
            .name("kafka-secure".into())
            .spawn(move || {
                let owner: BaseProducer = ClientConfig::new()
                    .set("test.mock.num.brokers", "1")
                    .create()
                    .unwrap_or_else(|e| panic!("mock cluster: {e}"));
                let cluster = owner.client().mock_cluster().unwrap_or_else(|| panic!("no mock cluster"));
                let upstream: SocketAddr = cluster
                    .bootstrap_servers()
                    .split(',')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("mock cluster address"));
                advertise(&owner, &address);
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| panic!("listener runtime: {e}"));
                runtime.spawn(accept(listener, upstream, auth, tls, thread_stats));
                let _ = ready_tx.send(upstream);
                for (name, partitions, answer) in create_rx {
                    let _ = answer.send(cluster.create_topic(&name, partitions, 1).map_err(|e| e.to_string()));
                }
            })
            .unwrap_or_else(|e| panic!("spawn the secure broker: {e}"));
        ready_rx.recv().unwrap_or_else(|e| panic!("secure broker did not start: {e}"));
        Self { address: address.to_string(), requires, user, password, ca_file, stats, create }
    }

    /// Creates a topic with a random name, and the billing handler's
    /// dead-letter topic for it (`<topic>.billing.dlq`).
    pub fn create_topic(&self, partitions: i32) -> String {
        let name = crate::unique_name("idem_topic");
        self.create_named_topic(&name, partitions);
        self.create_named_topic(&format!("{name}.billing.dlq"), partitions);
        name
    }

    pub fn create_named_topic(&self, name: &str, partitions: i32) {
        let (tx, rx) = mpsc::channel();
        self.create.send((name.to_owned(), partitions, tx)).unwrap_or_else(|e| panic!("secure broker gone: {e}"));
        rx.recv().unwrap_or_else(|e| panic!("secure broker gone: {e}")).unwrap_or_else(|e| panic!("topic: {e}"));
    }

    /// The librdkafka properties a client needs here, except the password.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let protocol = match (self.requires.tls, self.requires.sasl.is_some()) {
            (true, true) => "SASL_SSL",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (false, false) => "PLAINTEXT",
        };
        let mut properties = vec![("security.protocol", protocol.to_owned())];
        if self.requires.tls {
            properties.push(("ssl.ca.location", self.ca_file.display().to_string()));
        }
        if let Some(mechanism) = self.requires.sasl {
            properties.push(("sasl.mechanism", mechanism.name().to_owned()));
            properties.push(("sasl.username", self.user.clone()));
        }
        properties
    }

    /// A complete client configuration, password included.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.address);
        for (key, value) in self.properties() {
            config.set(key, value);
        }
        if self.requires.sasl.is_some() {
            config.set("sasl.password", &self.password);
        }
        config
    }
}

/// Makes the mock broker advertise `address` in its metadata, so that
/// clients connect to the listener rather than to the broker itself. The
/// rdkafka crate does not wrap this part of librdkafka's mock API.
#[expect(unsafe_code, reason = "librdkafka's mock API has no safe wrapper for the advertised address")]
fn advertise(owner: &BaseProducer, address: &SocketAddr) {
    let host = CString::new(address.ip().to_string()).unwrap_or_else(|e| panic!("host: {e}"));
    // SAFETY: the client owns its mock cluster and outlives this call; the
    // function copies the host string under the cluster's lock.
    unsafe {
        let cluster = rdkafka::bindings::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
        assert!(!cluster.is_null(), "the client has no mock cluster");
        rdkafka::bindings::rd_kafka_mock_broker_set_host_port(cluster, 1, host.as_ptr(), i32::from(address.port()));
    }
}

/// Who may pass.
#[derive(Debug, Clone)]
struct Auth {
    requires: Requires,
    user: String,
    password: String,
}

async fn accept(
    listener: std::net::TcpListener,
    upstream: SocketAddr,
    auth: Auth,
    tls: Arc<rustls::ServerConfig>,
    stats: Arc<ListenerStats>,
) {
    let _ = listener.set_nonblocking(true);
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    while let Ok((client, _)) = listener.accept().await {
        let (auth, stats, acceptor) = (auth.clone(), stats.clone(), acceptor.clone());
        tokio::spawn(async move {
            if auth.requires.tls {
                match acceptor.accept(client).await {
                    Ok(stream) => serve(stream, upstream, &auth, &stats).await,
                    Err(_) => {
                        stats.tls_failures.fetch_add(1, Ordering::SeqCst);
                    }
                }
            } else {
                serve(client, upstream, &auth, &stats).await;
            }
        });
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut client: S,
    upstream: SocketAddr,
    auth: &Auth,
    stats: &ListenerStats,
) {
    let Ok(mut broker) = TcpStream::connect(upstream).await else { return };
    if let Some(mechanism) = auth.requires.sasl
        && !matches!(authenticate(&mut client, &mut broker, mechanism, auth, stats).await, Ok(true))
    {
        return;
    }
    stats.authenticated.fetch_add(u64::from(auth.requires.sasl.is_none()), Ordering::SeqCst);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
}

/// Runs the connection's SASL exchange; `Ok(true)` once the client proved
/// who it is. Anything else closes the connection.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    broker: &mut TcpStream,
    mechanism: Mechanism,
    auth: &Auth,
    stats: &ListenerStats,
) -> std::io::Result<bool> {
    let mut handshaken = false;
    let mut exchange = match mechanism {
        Mechanism::ScramSha256 => Some(scram::Exchange::new(scram::Hash::Sha256, &auth.user, &auth.password)),
        Mechanism::ScramSha512 => Some(scram::Exchange::new(scram::Hash::Sha512, &auth.user, &auth.password)),
        Mechanism::Plain => None,
    };
    let mut first_done = false;
    loop {
        let frame = read_frame(client).await?;
        let Some(request) = frames::parse_request(&frame) else { return Ok(false) };
        match request.api_key {
            frames::API_VERSIONS => {
                write_frame(broker, &frame).await?;
                let response = read_frame(broker).await?;
                let patched = frames::add_sasl_apis(request.api_version, &response).unwrap_or(response);
                write_frame(client, &patched).await?;
            }
            frames::SASL_HANDSHAKE if !handshaken => {
                let asked = frames::string(request.body).unwrap_or_default();
                let ok = asked == mechanism.name();
                let error = if ok { 0 } else { frames::UNSUPPORTED_SASL_MECHANISM };
                write_frame(client, &frames::handshake_response(request.correlation_id, error, mechanism.name()))
                    .await?;
                if !ok {
                    stats.failed_authentications.fetch_add(1, Ordering::SeqCst);
                    return Ok(false);
                }
                handshaken = true;
            }
            frames::SASL_AUTHENTICATE if handshaken => {
                let bytes = frames::bytes(request.body).unwrap_or_default();
                let message = String::from_utf8_lossy(&bytes).into_owned();
                let step = match &mut exchange {
                    None => plain(&message, auth).map(|()| (Vec::new(), true)),
                    Some(exchange) if !first_done => exchange.first(&message).map(|reply| (reply.into_bytes(), false)),
                    Some(exchange) => exchange.last(&message).map(|reply| (reply.into_bytes(), true)),
                };
                match step {
                    Ok((reply, done)) => {
                        write_frame(client, &frames::authenticate_response(&request, 0, None, &reply)).await?;
                        first_done = true;
                        if done {
                            stats.authenticated.fetch_add(1, Ordering::SeqCst);
                            return Ok(true);
                        }
                    }
                    Err(why) => {
                        let message = format!("Authentication failed: {why} (SASL mechanism {})", mechanism.name());
                        reject(client, &request, &message).await?;
                        stats.failed_authentications.fetch_add(1, Ordering::SeqCst);
                        return Ok(false);
                    }
                }
            }
            _ => {
                stats.unauthenticated_requests.fetch_add(1, Ordering::SeqCst);
                return Ok(false);
            }
        }
    }
}

async fn reject<S: AsyncWrite + Unpin>(client: &mut S, request: &Request<'_>, message: &str) -> std::io::Result<()> {
    let response = frames::authenticate_response(request, frames::SASL_AUTHENTICATION_FAILED, Some(message), &[]);
    write_frame(client, &response).await
}

/// SASL/PLAIN: `authzid NUL user NUL password`.
fn plain(message: &str, auth: &Auth) -> Result<(), String> {
    let mut parts = message.split('\0');
    let (_authzid, user, password) = (parts.next(), parts.next(), parts.next());
    if user == Some(auth.user.as_str()) && password == Some(auth.password.as_str()) {
        Ok(())
    } else {
        Err("invalid credentials".into())
    }
}

mod tls {
    use std::sync::Arc;

    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

    /// A CA made for this listener (PEM) and the listener's TLS config:
    /// a certificate for 127.0.0.1 and localhost signed by that CA.
    pub fn server_config() -> (String, Arc<rustls::ServerConfig>) {
        let ca_key = KeyPair::generate().unwrap_or_else(|e| panic!("CA key: {e}"));
        let mut ca_params = CertificateParams::new(Vec::new()).unwrap_or_else(|e| panic!("CA params: {e}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names: a leaf whose subject equals its issuer would be
        // taken for self-signed.
        ca_params.distinguished_name.push(DnType::CommonName, "idem test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap_or_else(|e| panic!("CA: {e}"));
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap_or_else(|e| panic!("params: {e}"));
        params.distinguished_name.push(DnType::CommonName, "idem test broker");
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap_or_else(|e| panic!("certificate: {e}"));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap_or_else(|e| panic!("TLS versions: {e}"))
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone(), ca.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap_or_else(|e| panic!("TLS config: {e}"));
        (ca.pem(), Arc::new(config))
    }
}
