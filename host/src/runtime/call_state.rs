//! The data of one call's [`wasmtime::Store`]: a WASI context with nothing in it, the limiter,
//! the provider's capabilities, the tail of the guest's stderr, and for contract 0.2 the
//! `wasi:http` hooks and the `wasi:config` values of this call.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::capability::Capabilities;
use crate::capability::kube::{KubeCallError, KubeProxy};
use crate::capability::outbound_http::OutboundHttp;
use crate::runtime::limits::{CallLimiter, Limits};

/// How much of a guest's stderr is kept (the end of it: a panic message comes last).
pub const STDERR_TAIL: usize = 4096;

/// The store data of one call.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    pub(crate) caps: Arc<Capabilities>,
    pub(crate) stderr: StderrTail,
    /// Epoch ticks in which the guest ran.
    pub(crate) cpu_ticks: u64,
    /// Whether the CPU budget ran out.
    pub(crate) cpu_exhausted: bool,
    http: WasiHttpCtx,
    http_hooks: OutboundHttp,
    /// The provider's configuration as this call started (a rotated Secret reaches the next call).
    pub(crate) config: WasiConfigVariables,
    /// The NodeClaim this call launches (a `create` call): the `kube` import lets an `owned`
    /// grant create a Node only then.
    pub(crate) launching: Option<String>,
}

impl CallState {
    /// Fresh state: no files, no environment, no arguments, no network, no stdin; stdout
    /// discarded; stderr kept in a bounded buffer.
    pub(crate) fn new(caps: Arc<Capabilities>, limits: &Limits) -> Self {
        let stderr = StderrTail::default();
        let wasi = WasiCtxBuilder::new().stderr(stderr.clone()).build();
        let http_hooks = caps.outbound_http();
        let config = caps.config().current().to_wasi();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: CallLimiter::new(limits),
            caps,
            stderr,
            cpu_ticks: 0,
            cpu_exhausted: false,
            http: WasiHttpCtx::new(),
            http_hooks,
            config,
            launching: None,
        }
    }
}

impl CallState {
    /// Runs one `kube` import call whose request body holds `request_bytes`, counting the
    /// host's buffers for it (that body, then the response) against the call's memory limit with
    /// the guest's own memory: a request that does not fit is `invalid`, a response that does
    /// not is `other`.
    pub(crate) async fn kube_call(
        &mut self,
        request_bytes: usize,
        call: impl AsyncFnOnce(&KubeProxy) -> Result<String, KubeCallError>,
    ) -> Result<String, KubeCallError> {
        self.limiter
            .check_host_buffers(request_bytes)
            .map_err(|why| KubeCallError::Invalid(format!("the request {why}")))?;
        let caps = Arc::clone(&self.caps);
        let response = call(caps.kube()).await?;
        self.limiter
            .check_host_buffers(response.len())
            .map_err(|why| KubeCallError::Other(format!("the response {why}")))?;
        Ok(response)
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            hooks: &mut self.http_hooks,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

/// The last [`STDERR_TAIL`] bytes a guest wrote to stderr. Writing never fails and never blocks.
#[derive(Clone, Default)]
pub(crate) struct StderrTail {
    buffer: Arc<Mutex<Vec<u8>>>,
}

impl StderrTail {
    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.buffer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(&self, bytes: &[u8]) {
        let mut buffer = self.lock();
        buffer.extend_from_slice(bytes);
        if buffer.len() > 2 * STDERR_TAIL {
            let excess = buffer.len() - STDERR_TAIL;
            buffer.drain(..excess);
        }
    }

    /// The kept text (lossy UTF-8), trimmed.
    pub(crate) fn text(&self) -> String {
        let buffer = self.lock();
        let start = buffer.len().saturating_sub(STDERR_TAIL);
        String::from_utf8_lossy(&buffer[start..]).trim().to_owned()
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.append(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_tail() {
        let tail = StderrTail::default();
        tail.append(&vec![b'a'; 3 * STDERR_TAIL]);
        tail.append(b"panicked at the end");
        let text = tail.text();
        assert_eq!(text.len(), STDERR_TAIL);
        assert!(text.ends_with("panicked at the end"));
    }
}
