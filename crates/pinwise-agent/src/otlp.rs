//! OTLP metrics push (`pinwise agent --otlp URL`): the same families, labels and numbers
//! as `/metrics` ([`crate::metrics::families`]), sent to an OpenTelemetry collector over
//! HTTP/protobuf by the official `opentelemetry`, `opentelemetry_sdk` and
//! `opentelemetry-otlp` crates.
//!
//! Each family is an observable instrument (counters: monotonic cumulative sums; gauges:
//! gauges) named as in Prometheus without the `_total` suffix (a collector's Prometheus
//! exporter adds it back). The SDK's periodic reader collects every
//! [`OtlpConfig::interval`] on a thread of its own; a collection takes one snapshot of the
//! table for all instruments. The resource carries `service.name = pinwise-agent`. A
//! collector that is down costs a failed request per interval, logged (`tracing`, warn)
//! and counted (`pinwise_otlp_exports_total{result="failed"}`, in both exports), never a
//! wait in the traced programs (they never wait for the agent). On stop, a last push
//! carries the final numbers.
//!
//! Points per instrument: the SDK's cardinality limit is raised to what
//! `--max-series-processes` allows, so the cap of [`crate::metrics`] is the only one.
//!
//! Transport: HTTP/protobuf only (`http://`; the port of a collector's OTLP/HTTP receiver
//! is 4318). gRPC and TLS are not built in: they would bring tonic and a TLS stack; run a
//! collector on the node or as a sidecar.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{
    Instrument, PeriodicReader, SdkMeterProvider, Stream, Temporality,
};
use opentelemetry_sdk::Resource;
use parking_lot::Mutex;

use crate::agent::SnapshotSource;
use crate::error::AgentError;
use crate::metrics::{families, Kind, Value, FAMILIES};

/// Where and how often to push.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// The collector: `http://host:4318` (then `/v1/metrics` is appended) or a full URL
    /// with a path, used as given.
    pub endpoint: String,
    /// Time between pushes.
    pub interval: Duration,
}

/// The URL the metrics are posted to: `endpoint` with `/v1/metrics` appended when it has
/// no path. Errors name what is wrong.
pub fn metrics_url(endpoint: &str) -> Result<String, String> {
    let rest = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint}: only http:// URLs are supported (OTLP/HTTP)"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{endpoint}: no host"));
    }
    Ok(match rest.find('/') {
        Some(at) if &rest[at..] != "/" => endpoint.to_string(),
        Some(_) => format!("{endpoint}v1/metrics"),
        None => format!("{endpoint}/v1/metrics"),
    })
}

/// Samples of every family as OTLP attributes, from one snapshot.
type Owned = Vec<Vec<(Vec<KeyValue>, Value)>>;

/// One snapshot shared by the callbacks of one collection (they run one after another on
/// the reader's thread): taken again when older than `ttl`.
struct Cache {
    source: SnapshotSource,
    ttl: Duration,
    last: Mutex<Option<(Instant, Arc<Owned>)>>,
}

impl Cache {
    fn get(&self) -> Arc<Owned> {
        let mut last = self.last.lock();
        if let Some((t, v)) = &*last {
            if t.elapsed() < self.ttl {
                return Arc::clone(v);
            }
        }
        let snap = self.source.snapshot();
        let owned: Owned = families(&snap)
            .into_iter()
            .map(|f| {
                f.samples
                    .into_iter()
                    .map(|s| {
                        let attrs = s
                            .labels
                            .iter()
                            .map(|(k, v)| KeyValue::new(*k, v.to_string()))
                            .collect();
                        (attrs, s.value)
                    })
                    .collect()
            })
            .collect();
        let owned = Arc::new(owned);
        *last = Some((Instant::now(), Arc::clone(&owned)));
        owned
    }
}

/// Pushes that succeeded and failed so far (shared with the snapshots).
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Requests the collector accepted.
    pub ok: AtomicU64,
    /// Requests that failed (collector down, refused, timed out).
    pub failed: AtomicU64,
}

/// The OTLP exporter, counting and logging what each push did.
#[derive(Debug)]
struct Counted {
    inner: MetricExporter,
    counts: Arc<ExportCounts>,
}

impl PushMetricExporter for Counted {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let r = self.inner.export(metrics).await;
        match &r {
            Ok(()) => self.counts.ok.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::warn!("OTLP push failed: {e}");
                self.counts.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        r
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// A running push.
pub struct OtlpExporter {
    provider: SdkMeterProvider,
}

impl std::fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OtlpExporter")
    }
}

fn register(meter: &Meter, index: usize, cache: &Arc<Cache>) {
    let d = &FAMILIES[index];
    macro_rules! observe {
        ($builder:ident, $conv:expr) => {{
            let cache = Arc::clone(cache);
            meter
                .$builder(d.name)
                .with_description(d.help)
                .with_unit(d.unit)
                .with_callback(move |o: &dyn AsyncInstrument<_>| {
                    for (attrs, v) in &cache.get()[index] {
                        o.observe($conv(*v), attrs);
                    }
                })
                .build();
        }};
    }
    match (d.kind, d.float) {
        (Kind::Counter, false) => observe!(u64_observable_counter, |v: Value| match v {
            Value::Int(i) => i,
            Value::Float(f) => f as u64,
        }),
        (Kind::Counter, true) => observe!(f64_observable_counter, Value::as_f64),
        (Kind::Gauge, false) => observe!(u64_observable_gauge, |v: Value| match v {
            Value::Int(i) => i,
            Value::Float(f) => f as u64,
        }),
        (Kind::Gauge, true) => observe!(f64_observable_gauge, Value::as_f64),
    }
}

impl OtlpExporter {
    /// Starts pushing what `source` snapshots to `config.endpoint`.
    /// `counts` is where pushes are counted (the snapshots export it).
    pub fn start(
        config: &OtlpConfig,
        source: SnapshotSource,
        counts: Arc<ExportCounts>,
    ) -> Result<Self, AgentError> {
        let url = metrics_url(&config.endpoint).map_err(AgentError::Otlp)?;
        let exporter = MetricExporter::builder()
            .with_http()
            .with_endpoint(url)
            .with_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| AgentError::Otlp(format!("{}: {e}", config.endpoint)))?;
        let exporter = Counted {
            inner: exporter,
            counts,
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(config.interval)
            .build();
        // The SDK's default of 2000 points per instrument would fold some of the
        // `--max-series-processes` series into an overflow point: allow every series the
        // cap allows (each process has at most 4 directions x 5 host kinds of copies).
        let limit = ((source.max_series() + 1) * 20 + 16).max(2000);
        let view =
            move |_: &Instrument| Stream::builder().with_cardinality_limit(limit).build().ok();
        let provider = SdkMeterProvider::builder()
            .with_resource(
                Resource::builder()
                    .with_service_name("pinwise-agent")
                    .build(),
            )
            .with_reader(reader)
            .with_view(view)
            .build();
        let meter = provider.meter("pinwise-agent");
        let cache = Arc::new(Cache {
            source,
            ttl: (config.interval / 2).min(Duration::from_secs(1)),
            last: Mutex::new(None),
        });
        for index in 0..FAMILIES.len() {
            register(&meter, index, &cache);
        }
        Ok(OtlpExporter { provider })
    }

    /// Pushes now (tests).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!("OTLP push: {e}");
        }
    }

    /// Pushes the last numbers and stops.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("OTLP push at stop: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_path_is_appended_to_a_bare_collector_url() {
        assert_eq!(
            metrics_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            metrics_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            metrics_url("http://collector:4318/custom/path").unwrap(),
            "http://collector:4318/custom/path"
        );
        assert!(metrics_url("https://c:4318")
            .unwrap_err()
            .contains("only http://"));
        assert!(metrics_url("collector:4318").is_err());
        assert!(metrics_url("http://").unwrap_err().contains("no host"));
    }
}
