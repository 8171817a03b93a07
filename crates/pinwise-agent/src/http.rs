//! The HTTP endpoint: `GET /metrics` (the registry, encoded at each request),
//! `GET /healthz`. One thread; a scrape takes the table's lock only to copy numbers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use prometheus_client::registry::Registry;

/// Content type of the OpenMetrics text `prometheus-client` writes (Prometheus reads it).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A running metrics server.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Listens on `addr` and serves `registry`.
    pub fn start(addr: SocketAddr, registry: Registry) -> std::io::Result<MetricsServer> {
        let server = tiny_http::Server::http(addr).map_err(std::io::Error::other)?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| std::io::Error::other("the metrics server has no IP address"))?;
        let server = Arc::new(server);
        let thread = {
            let server = Arc::clone(&server);
            std::thread::Builder::new()
                .name("pinwise-metrics".into())
                .spawn(move || serve(&server, &registry))?
        };
        Ok(MetricsServer {
            server,
            addr,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(server: &tiny_http::Server, registry: &Registry) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("");
        let response = match (request.method(), path) {
            (tiny_http::Method::Get, "/metrics") => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, registry) {
                    Ok(()) => {
                        tiny_http::Response::from_string(body).with_header(header(CONTENT_TYPE))
                    }
                    Err(e) => tiny_http::Response::from_string(format!("encoding failed: {e}"))
                        .with_status_code(500),
                }
            }
            (tiny_http::Method::Get, "/healthz") => tiny_http::Response::from_string("ok\n"),
            (tiny_http::Method::Get, "/") => {
                tiny_http::Response::from_string("pinwise agent: metrics at /metrics\n")
            }
            _ => tiny_http::Response::from_string("not found\n").with_status_code(404),
        };
        if let Err(e) = request.respond(response) {
            tracing::debug!("metrics response: {e}");
        }
    }
}

fn header(content_type: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(&b"Content-Type"[..], content_type.as_bytes())
        .expect("a valid header")
}
