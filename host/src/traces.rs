//! OpenTelemetry traces, exported over OTLP/HTTP (JSON) when the standard
//! environment names an endpoint (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; `OTEL_SERVICE_NAME`, default `idem`;
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off).
//!
//! Each record gets a span `idem.event` whose parent is the W3C
//! `traceparent` header of the Kafka record when it has one (else a new
//! trace starts); under it `idem.validate`, `idem.claim`, `idem.handler`
//! (with `idem.db` per guest statement and `idem.http` per request) and
//! `idem.commit`. The outgoing request carries the `idem.http` span's
//! `traceparent`, so the provider's trace joins the producer's.
//!
//! The spans are `tracing` spans of target [`TARGET`] at TRACE level. With
//! no endpoint no layer enables them, so each call site is disabled once
//! and costs a relaxed load from then on.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target every idem span has.
pub const TARGET: &str = "idem::trace";

/// Whether the environment asks for traces.
pub fn wanted() -> bool {
    let set = |name: &str| crate::env::non_blank(name).is_some();
    let off = crate::env::get(crate::env::OTEL_SDK_DISABLED).is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || crate::env::get(crate::env::OTEL_TRACES_EXPORTER).is_some_and(|v| v.eq_ignore_ascii_case("none"));
    !off && (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

/// The provider exporting spans; kept so that `shutdown` flushes them.
pub type Provider = opentelemetry_sdk::trace::SdkTracerProvider;

/// A `tracing` layer exporting idem's spans, and its provider; `None` when
/// no endpoint is configured.
pub fn layer<S>() -> anyhow::Result<Option<(impl tracing_subscriber::Layer<S>, Provider)>>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    if !wanted() {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpJson)
        .build()?;
    let service = crate::env::get(crate::env::OTEL_SERVICE_NAME).unwrap_or_else(|| "idem".to_owned());
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
    let provider = Provider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("idem");
    let filter = tracing_subscriber::filter::Targets::new().with_target(TARGET, tracing::Level::TRACE);
    let layer = tracing_subscriber::Layer::with_filter(tracing_opentelemetry::layer().with_tracer(tracer), filter);
    Ok(Some((layer, provider)))
}

/// Record headers as the propagator reads them.
struct Headers<'a>(&'a [(String, Option<Vec<u8>>)]);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// Makes `span` continue the trace of a record's `traceparent` header, if
/// it has a valid one.
pub fn continue_from(span: &tracing::Span, headers: &[(String, Option<Vec<u8>>)]) {
    if span.is_disabled() || !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("traceparent")) {
        return;
    }
    let context = TraceContextPropagator::new().extract(&Headers(headers));
    let _ = span.set_parent(context);
}

struct Outgoing<'a>(&'a mut Vec<(String, String)>);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.push((key.to_owned(), value));
    }
}

/// The `traceparent` of `span`, for an outgoing request; empty when tracing
/// is off. `tracestate` is not forwarded: it comes from whoever produced
/// the record, and a malformed one would make the request fail (the W3C
/// recommendation lets a participant drop it).
pub fn propagation_headers(span: &tracing::Span) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    if span.is_disabled() {
        return headers;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut Outgoing(&mut headers));
    headers.retain(|(name, value)| {
        name.eq_ignore_ascii_case("traceparent") && reqwest::header::HeaderValue::from_str(value).is_ok()
    });
    headers
}
