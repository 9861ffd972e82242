//! The status page, JSON API, live updates (SSE), Prometheus metrics and probes, served on hyper.
//!
//! The web layer only reads the [`StatusModel`]; state changes go through the [`Actions`] the
//! supervisor hands in, behind a bearer token and Host/Origin checks.
//!
//! Routes: `/` (the page and its assets), `/api/v1/*` (see `docs/openapi.yaml`), `/metrics`,
//! `/healthz`, `/readyz`.

mod actions;
pub mod cli;
mod guard;
mod history;
mod mdns;
mod metrics;
mod response;
mod router;
mod server;
mod snapshot;
mod sse;
mod token;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use actions::{
    Accepted, ActionError, ActionFuture, Actions, FanMode, NoActions, OtaApplyRequest, PinRequest,
};
pub use guard::AllowedHosts;
pub use server::Limits;
pub use token::{ApiToken, TokenError, TOKEN_FILE};

use crate::config::Config;
use crate::status::StatusModel;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("web: cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("web: {0}")]
    Token(#[from] TokenError),
    #[error("web: accepting connections: {0}")]
    Accept(std::io::Error),
}

/// What the server needs besides the status and the actions.
#[derive(Debug, Clone)]
pub struct WebSettings {
    pub token: ApiToken,
    pub limits: Limits,
    pub allowed_hosts: AllowedHosts,
    /// Advertise `_http._tcp` on the LAN.
    pub mdns: bool,
}

impl WebSettings {
    /// Settings from the configuration: loads the API token (creating it on first start).
    pub fn from_config(config: &Config) -> Result<Self, WebError> {
        let (token, created) = ApiToken::load_or_create(&config.state_dir)?;
        if created {
            // The secret stays in its 0600 file: a journal is readable by more people.
            tracing::info!(path = %token.path().display(), "created the API token; `lucebox token` prints it");
        }
        Ok(Self {
            token,
            limits: Limits::default(),
            allowed_hosts: AllowedHosts::for_this_host(),
            mdns: config.web.mdns,
        })
    }
}

/// Serves on `config.web.bind:config.web.port` until `cancel` fires.
pub async fn serve(
    config: &Config,
    status: StatusModel,
    actions: Arc<dyn Actions>,
    cancel: CancellationToken,
) -> Result<(), WebError> {
    let settings = WebSettings::from_config(config)?;
    let addr = SocketAddr::new(config.web.bind, config.web.port);
    let listener = TcpListener::bind(addr).await.map_err(|source| WebError::Bind { addr, source })?;
    serve_on(listener, settings, status, actions, cancel).await
}

/// Serves on an already-bound listener (tests bind port 0 and read the address first).
pub async fn serve_on(
    listener: TcpListener,
    settings: WebSettings,
    status: StatusModel,
    actions: Arc<dyn Actions>,
    cancel: CancellationToken,
) -> Result<(), WebError> {
    let advert = match (settings.mdns, listener.local_addr()) {
        (true, Ok(addr)) => mdns::Advert::start(addr),
        _ => None,
    };
    let history = history::History::spawn(status.clone(), cancel.clone());
    let app = Arc::new(router::App::new(status, actions, settings.clone(), history));
    let result = server::run(listener, app, settings.limits, cancel).await;
    if let Some(advert) = advert {
        advert.stop();
    }
    result
}
