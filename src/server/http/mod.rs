//! Streamable HTTP (`--http ADDR`): one server for many agents.
//!
//! `/mcp` is rmcp's own Streamable HTTP service (MCP 2025-11-25 sessions via `Mcp-Session-Id`,
//! and stateless MCP 2026-07-28 requests), behind the [`gate`] (Origin, bearer tokens, session
//! ownership, body cap, JSON-RPC errors for malformed bodies, session limit). `GET /healthz`
//! answers load balancers without a token. Each MCP session, or each principal's stateless
//! requests, has its own workspace (`workspace.rs`). On the shutdown signal the server refuses
//! new requests, lets the calls in flight finish, then closes the streams and exits.
//!
//! [`auth`] owns tokens; [`conns`] the connections (accept loop, header timeout, connection cap,
//! open-files limit); this file owns the flags, binding, the router and the shutdown order.

pub mod auth;
pub mod conns;
pub mod gate;
pub mod oauth;

pub use crate::ground::time::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{any, get, post};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::ground::grants::{GrantError, Grants};
use crate::server::handler::MountfsServer;
use crate::server::mounts::MountTable;
use crate::server::registry::Registry;
use crate::server::workspace::{WorkspaceLimits, Workspaces};
use crate::state::session::WriteOptions;

use self::auth::{TOKEN_ENV, TokenError, Tokens};
use self::gate::Gate;

/// Default `--idle-timeout`.
pub const DEFAULT_IDLE_TIMEOUT: &str = "30m";
/// Default `--max-sessions`.
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Default `--max-body` (bytes): room for a `write_file` of a few MiB of JSON-escaped text.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Default `--body-timeout`.
pub const DEFAULT_BODY_TIMEOUT: &str = "30s";
/// Default `--max-body-total` (bytes): two bodies of the default `--max-body` at once. A
/// request holds about five times its body while it runs (the body, the MCP library's parse of
/// it, the tool's and the audit log's copies), so this bounds big writes to ~170 MiB above the
/// server's base (docs/http.md, "Connections and memory").
pub const DEFAULT_MAX_BODY_TOTAL_BYTES: usize = 2 * DEFAULT_MAX_BODY_BYTES;
/// How long shutdown waits for the calls in flight before closing anyway.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// The HTTP flags of the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Serve MCP over Streamable HTTP at ADDR (e.g. 127.0.0.1:8765), endpoint /mcp, instead
    /// of stdio. GET /healthz answers load balancers.
    #[arg(global = true, long, value_name = "ADDR")]
    pub http: Option<String>,

    /// With --http: accepted bearer tokens, one `NAME TOKEN` per line (NAME is the agent's
    /// principal; # starts a comment). Without it, MOUNTFS_TOKEN is the one token; without
    /// either, a token is generated and printed once, and only loopback addresses may be served.
    #[arg(global = true, long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,

    /// With --http: a browser Origin allowed to call /mcp (e.g. https://app.example.com or
    /// http://localhost:*); repeatable. Requests carrying any other Origin get 403.
    #[arg(
        global = true,
        long = "allow-origin",
        value_name = "ORIGIN",
        requires = "http"
    )]
    pub allow_origins: Vec<String>,

    /// With --http: drop a session's or principal's workspace (memory mounts, read ledger, undo
    /// history) after this long unused: 90s, 30m, 2h.
    #[arg(global = true, long, value_name = "DURATION", default_value = DEFAULT_IDLE_TIMEOUT, value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// With --http: at most this many MCP sessions at once; more get 503.
    #[arg(global = true, long, value_name = "N", default_value_t = DEFAULT_MAX_SESSIONS, value_parser = parse_positive)]
    pub max_sessions: usize,

    /// With --http: largest request body in bytes; larger ones get 413.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body: usize,

    /// With --http: longest wait for a request's whole body once its headers arrived (90s,
    /// 2m); a slower body gets 408 and nothing runs.
    #[arg(global = true, long, value_name = "DURATION", default_value = DEFAULT_BODY_TIMEOUT, value_parser = parse_duration)]
    pub body_timeout: Duration,

    /// With --http: the most request-body bytes held at once across all requests; a body
    /// that would go beyond gets 503 with Retry-After (bodies of at most 64 KiB, every
    /// ordinary call, are never refused). At least --max-body.
    #[arg(global = true, long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY_TOTAL_BYTES, value_parser = parse_positive)]
    pub max_body_total: usize,

    /// With --http: at most this many open connections. When full, the oldest connection
    /// that has not yet sent a request with a valid token is closed for the new one (lowered to
    /// fit the open-files limit, which is raised to its hard limit at start-up).
    #[arg(global = true, long, value_name = "N", default_value_t = conns::DEFAULT_MAX_CONNECTIONS, value_parser = parse_positive)]
    pub max_connections: usize,

    /// With --http: longest wait for a request's headers (and for the next request on an
    /// idle keep-alive connection); a slower client's connection is closed.
    #[arg(global = true, long, value_name = "DURATION", default_value = conns::DEFAULT_HEADER_TIMEOUT, value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// With --http and no --mount: mount MCP client roots, but only those inside DIR (a
    /// directory on this server). Without it, HTTP clients' roots are never mounted: a remote
    /// client's file:// roots name its own machine, not this one.
    #[arg(global = true, long, value_name = "DIR", requires = "http")]
    pub http_roots_under: Option<PathBuf>,

    /// With --http: grant principal NAME the mounts at PREFIX... (`:rw` when no mode is
    /// given; NAME `*` is everyone, `scope:SCOPE` every OAuth token with that scope);
    /// repeatable. Once any grant is given (here, in --grant-file or as `grant` lines of the
    /// token file), each principal sees only its granted mounts.
    #[arg(
        global = true,
        long = "grant",
        value_name = "NAME=PREFIX[:ro|:rw][,PREFIX...]",
        requires = "http"
    )]
    pub grants: Vec<String>,

    /// With --http: a policy file of grants, one `grant NAME=PREFIX[:ro|:rw][,...]` per line
    /// (# starts a comment), read with --grant's.
    #[arg(global = true, long, value_name = "FILE", requires = "http")]
    pub grant_file: Option<PathBuf>,

    /// The OAuth 2.1 resource server's flags.
    #[command(flatten)]
    pub oauth: oauth::OAuthArgs,
}

impl HttpArgs {
    /// Every grant given: `--grant`, `--grant-file`, and the token file's `grant` lines.
    pub fn grants(&self) -> Result<Grants, GrantError> {
        let mut all = Vec::new();
        for grant in &self.grants {
            all.extend(crate::ground::grants::parse(grant)?);
        }
        for (file, only_grants) in [(&self.grant_file, true), (&self.token_file, false)] {
            let Some(file) = file else { continue };
            let shown = file.display().to_string();
            let text = std::fs::read_to_string(file).map_err(|error| GrantError {
                text: shown.clone(),
                problem: format!("cannot read it: {error}"),
            })?;
            all.extend(crate::ground::grants::parse_lines(
                &text,
                &shown,
                only_grants,
            )?);
        }
        Ok(Grants::new(all))
    }
}

/// The grants of `grants` naming a prefix that is no mount of `table` (as written).
pub fn grants_without_mount(grants: &Grants, table: &MountTable) -> Vec<String> {
    let prefixes = table.prefixes();
    grants
        .all()
        .iter()
        .filter(|g| !prefixes.contains(&g.prefix))
        .map(crate::ground::grants::Grant::written)
        .collect()
}

/// A count above zero.
pub fn parse_positive(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) | Err(_) => Err(format!("{text:?}: give a whole number above zero")),
        Ok(n) => Ok(n),
    }
}

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The token configuration is unusable.
    #[error(transparent)]
    Tokens(#[from] TokenError),
    /// A non-loopback address without configured tokens.
    #[error(
        "--http {0} is reachable from other machines, so it needs configured tokens: pass --token-file FILE (lines `NAME TOKEN`) or set {TOKEN_ENV}, or serve a loopback address such as 127.0.0.1:8765"
    )]
    OpenWithoutTokens(String),
    /// The address could not be resolved or bound.
    #[error("cannot listen on {addr}: {reason}")]
    Bind {
        /// The address as given.
        addr: String,
        /// Why.
        reason: String,
    },
    /// The OAuth configuration is unusable.
    #[error(transparent)]
    OAuth(#[from] oauth::OAuthError),
    /// The tool registry is broken.
    #[error("tool registry: {0}")]
    Registry(#[from] crate::server::registry::DefinitionError),
    /// Serving failed.
    #[error("HTTP server: {0}")]
    Serve(String),
    /// `--http-roots-under` is not a usable directory.
    #[error("--http-roots-under {dir}: {reason}. Give an existing directory on this server")]
    RootsUnder {
        /// The directory as given.
        dir: String,
        /// Why.
        reason: String,
    },
    /// A grant does not parse, or names no mount.
    #[error(transparent)]
    Grants(#[from] GrantError),
    /// A grant names a prefix that is no mount.
    #[error(
        "grant {0} names no mount: a grant's PREFIX is a mount's prefix exactly (see --mount); mount the directory to grant it"
    )]
    GrantWithoutMount(String),
    /// A granted mount's directory holds the directory of a mount granted less.
    #[error("grants: {0}")]
    NestedGrant(String),
    /// `--max-body-total` below `--max-body`.
    #[error(
        "--max-body-total {total} is below --max-body {max}: one largest body could never be read. Raise --max-body-total or lower --max-body"
    )]
    BodyTotal {
        /// `--max-body-total`.
        total: usize,
        /// `--max-body`.
        max: usize,
    },
}

/// A bound, not yet serving, HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    listener: tokio::net::TcpListener,
    args: HttpArgs,
    tokens: Tokens,
    generated_token: Option<String>,
    /// `--http-roots-under`, resolved.
    roots_under: Option<PathBuf>,
    /// `--oauth-issuer`'s resource server.
    oauth: Option<Arc<oauth::ResourceServer>>,
}

impl HttpServer {
    /// How many distinct principals may call this server (see [`Tokens::principal_count`]);
    /// with OAuth, any number ([`usize::MAX`]).
    pub fn principal_count(&self) -> usize {
        if self.oauth.is_some() {
            return usize::MAX;
        }
        self.tokens.principal_count()
    }

    /// Resolves and binds `args.http`, with tokens from `--token-file`, else `env_token`
    /// (`MOUNTFS_TOKEN`), else generated (loopback only).
    pub async fn bind(args: HttpArgs, env_token: Option<String>) -> Result<Self, HttpError> {
        let addr = args.http.clone().unwrap_or_default();
        let bind_error = |reason: String| HttpError::Bind {
            addr: addr.clone(),
            reason,
        };
        if args.max_body_total < args.max_body {
            return Err(HttpError::BodyTotal {
                total: args.max_body_total,
                max: args.max_body,
            });
        }
        let roots_under = match &args.http_roots_under {
            Some(dir) => Some(resolve_roots_under(dir)?),
            None => None,
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&addr)
            .await
            .map_err(|e| bind_error(format!("{e} (give HOST:PORT, e.g. 127.0.0.1:8765)")))?
            .collect();
        let Some(first) = addrs.first().copied() else {
            return Err(bind_error("the name resolves to no address".to_owned()));
        };
        let configured = match (&args.token_file, env_token.filter(|t| !t.is_empty())) {
            (Some(file), _) => Some(Tokens::from_file(file)?),
            (None, Some(token)) => Some(Tokens::single(&token)?),
            (None, None) => None,
        };
        let oauth = oauth::ResourceServer::new(&args.oauth, first)?.map(Arc::new);
        let (tokens, generated_token) = match configured {
            Some(tokens) => (tokens, None),
            // OAuth access tokens alone open the server.
            None if oauth.is_some() => (Tokens::none(), None),
            None if first.ip().is_loopback() => {
                let (tokens, token) = Tokens::generate();
                (tokens, Some(token))
            }
            None => return Err(HttpError::OpenWithoutTokens(addr)),
        };
        let listener = tokio::net::TcpListener::bind(first)
            .await
            .map_err(|e| bind_error(e.to_string()))?;
        // Port 0 (tests): the resource is the URL of the port actually bound.
        let oauth = match oauth {
            Some(_) if first.port() == 0 => {
                let local = listener
                    .local_addr()
                    .map_err(|e| bind_error(e.to_string()))?;
                oauth::ResourceServer::new(&args.oauth, local)?.map(Arc::new)
            }
            oauth => oauth,
        };
        if let Some(oauth) = &oauth {
            match oauth.prefetch().await {
                Ok(found) => tracing::info!(
                    document = %found.document,
                    jwks = %found.jwks_uri,
                    resource = %oauth.resource(),
                    audience = %oauth.audience(),
                    "OAuth issuer discovered"
                ),
                // Served anyway: the keys are fetched again when the first token arrives.
                Err(error) => tracing::warn!(
                    %error,
                    "the OAuth issuer could not be reached; OAuth tokens are refused until it answers"
                ),
            }
        }
        Ok(Self {
            listener,
            args,
            tokens,
            generated_token,
            roots_under,
            oauth,
        })
    }

    /// The address served.
    pub fn local_addr(&self) -> Result<SocketAddr, HttpError> {
        self.listener
            .local_addr()
            .map_err(|e| HttpError::Serve(e.to_string()))
    }

    /// The `/mcp` URL clients use.
    pub fn url(&self) -> Result<String, HttpError> {
        Ok(format!("http://{}/mcp", self.local_addr()?))
    }

    /// When no token was configured: the `mcp.json` entry holding the generated token, to show
    /// the operator once (and nowhere else).
    pub fn generated_client_config(&self) -> Option<String> {
        let token = self.generated_token.as_ref()?;
        let url = self.url().ok()?;
        let config = serde_json::json!({
            "mcpServers": {"mountfs": {
                "type": "http",
                "url": url,
                "headers": {"Authorization": format!("Bearer {token}")}
            }}
        });
        serde_json::to_string_pretty(&config).ok()
    }

    /// How many tokens are accepted.
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Serves until `shutdown` resolves, then drains (see the module doc).
    pub async fn serve(
        self,
        table: MountTable,
        write_options: WriteOptions,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), HttpError> {
        let registry = Registry::listing(crate::server::registry::Listing {
            exec: write_options.exec,
            audit: table.audit().is_some(),
            overlay: table.has_overlay(),
        })?;
        let registry = Arc::new(registry);
        let instructions = crate::server::serve::instructions(&table);
        let limits = WorkspaceLimits {
            idle_timeout: self.args.idle_timeout,
            max_sessions: self.args.max_sessions,
        };
        let grants = self.args.grants()?;
        if let Some(first) = grants_without_mount(&grants, &table).into_iter().next() {
            return Err(HttpError::GrantWithoutMount(first));
        }
        if let Some(conflict) = grants.nested_conflict(&table.host_dirs()) {
            return Err(HttpError::NestedGrant(conflict));
        }
        if !grants.is_empty() {
            tracing::info!(
                grants = grants.all().len(),
                "grants given: each principal sees only its granted mounts"
            );
        }
        let changes = table.changes().clone();
        let table_follows_roots = table.follows_client_roots();
        let workspaces =
            Arc::new(Workspaces::new(table, write_options, limits).with_grants(grants));
        let local = self.local_addr()?;
        let stop_streams = CancellationToken::new();

        let mut session_config =
            rmcp::transport::streamable_http_server::session::local::SessionConfig::default();
        // The workspace sweep below closes idle sessions; the library's own timer is only a
        // safety net for a session whose workspace is gone.
        session_config.keep_alive = Some(self.args.idle_timeout + Duration::from_secs(60));
        let mut sessions = LocalSessionManager::default();
        sessions.session_config = session_config;
        let sessions = Arc::new(sessions);
        let mut config =
            StreamableHttpServerConfig::default().with_cancellation_token(stop_streams.clone());
        config.max_request_body_bytes = self.args.max_body;
        // Host validation (the library's DNS-rebinding guard) fits a loopback server; one
        // reachable from other machines is reached under names we cannot know, and is guarded
        // by its configured tokens and the Origin check instead.
        if !local.ip().is_loopback() {
            config = config.disable_allowed_hosts();
        }
        if !table_follows_roots && self.roots_under.is_some() {
            tracing::warn!(
                "--http-roots-under has no effect with --mount: a table the operator gave is never widened by client roots"
            );
        } else if table_follows_roots && self.roots_under.is_none() {
            tracing::info!(
                "HTTP clients' roots are not mounted (no --http-roots-under): every client sees the mount table"
            );
        }
        let factory_workspaces = workspaces.clone();
        let roots_under = self.roots_under.clone();
        let factory = move || {
            Ok(MountfsServer::over_http(
                registry.clone(),
                factory_workspaces.clone(),
                instructions.clone(),
                changes.clone(),
                roots_under.as_deref(),
            ))
        };
        let mcp = StreamableHttpService::new(factory, sessions.clone(), config);
        let gate = Arc::new(Gate {
            mcp,
            sessions: sessions.clone(),
            workspaces: workspaces.clone(),
            tokens: self.tokens.clone(),
            oauth: self.oauth.clone(),
            allowed_origins: self.args.allow_origins.clone(),
            max_body_bytes: self.args.max_body,
            body_timeout: self.args.body_timeout,
            bodies: gate::BodyBudget::new(self.args.max_body_total),
            draining: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
        });

        let sweeper = tokio::spawn(sweep_idle(gate.clone()));
        let app = Router::new()
            .route("/mcp", any(gate::mcp_endpoint))
            .route("/healthz", get(healthz))
            .route("/register", post(no_oauth_registration))
            .route(oauth::METADATA_PATH, get(gate::resource_metadata))
            .route(
                &format!("{}/mcp", oauth::METADATA_PATH),
                get(gate::resource_metadata),
            )
            .with_state(gate.clone());
        let drain_gate = gate.clone();
        let graceful = async move {
            shutdown.await;
            drain(&drain_gate).await;
            stop_streams.cancel();
        };
        let open_files = conns::raise_open_files_limit();
        let limits = conns::ConnLimits {
            max_connections: conns::effective_cap(self.args.max_connections, open_files),
            header_timeout: self.args.header_timeout,
        };
        let connections = Arc::new(conns::Connections::new(limits.max_connections));
        tracing::info!(
            url = %format!("http://{local}/mcp"),
            tokens = self.tokens.len(),
            max_connections = limits.max_connections,
            open_files,
            "serving MCP over Streamable HTTP"
        );
        conns::serve(self.listener, app, limits, connections, graceful).await;
        sweeper.abort();
        Ok(())
    }
}

/// `--http-roots-under DIR` resolved: an existing directory, symbolic links followed (roots are
/// compared with it after resolving theirs).
fn resolve_roots_under(dir: &std::path::Path) -> Result<PathBuf, HttpError> {
    let error = |reason: String| HttpError::RootsUnder {
        dir: dir.display().to_string(),
        reason,
    };
    let resolved = std::fs::canonicalize(dir).map_err(|e| error(e.to_string()))?;
    if !resolved.is_dir() {
        return Err(error("not a directory".to_owned()));
    }
    Ok(resolved)
}

/// `GET /healthz`: 200 while serving, 503 once shutdown has begun (so a load balancer stops
/// sending new work here).
async fn healthz(State(gate): State<Arc<Gate>>) -> (StatusCode, &'static str) {
    if gate.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

/// What an OAuth client is told when it tries to register (`POST /register`, the path a client
/// of MCP's authorization falls back to after a 401 when the server publishes no OAuth
/// metadata): an RFC 7591 error whose description says that this server takes no OAuth, only
/// a bearer token from its token file — the one thing a person reading the client's log needs
/// after a wrong token (mcp-remote prints it: "Dynamic Client Registration rejected (HTTP 400):
/// …"). Nothing about the server or its tokens is in it.
async fn no_oauth_registration() -> (
    StatusCode,
    [(axum::http::HeaderName, &'static str); 1],
    String,
) {
    let body = serde_json::json!({
        "error": "invalid_client_metadata",
        "error_description": format!(
            "mountfs takes no OAuth: a client sends the header `Authorization: Bearer <token>` with a token from the server's --token-file (or {TOKEN_ENV}). The token this client sent was missing or is not one of them: check it (mcp-remote: --header \"Authorization:Bearer <token>\")."
        ),
    });
    (
        StatusCode::BAD_REQUEST,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

/// Refuses new requests, then waits (at most [`DRAIN_LIMIT`]) for those in flight.
async fn drain(gate: &Gate) {
    gate.draining.store(true, Ordering::SeqCst);
    let in_flight = gate.in_flight.load(Ordering::SeqCst);
    tracing::info!(
        in_flight,
        "shutting down: refusing new requests, finishing those in flight"
    );
    let finished = tokio::time::timeout(DRAIN_LIMIT, async {
        loop {
            let idle = gate.idle.notified();
            if gate.in_flight.load(Ordering::SeqCst) == 0 {
                break;
            }
            idle.await;
        }
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            in_flight = gate.in_flight.load(Ordering::SeqCst),
            "calls still running after {DRAIN_LIMIT:?}; closing anyway"
        );
    }
}

/// Drops idle workspaces (and their MCP sessions), and the workspaces of sessions the library
/// has ended, every so often.
async fn sweep_idle(gate: Arc<Gate>) {
    let every = (gate.workspaces.limits().idle_timeout / 10)
        .clamp(Duration::from_millis(200), Duration::from_secs(60));
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        let closed = gate.workspaces.sweep(Instant::now());
        gate::close_sessions(&gate.sessions, closed).await;
        // Sessions the library ended by itself (an initialize never completed, its own
        // keep-alive) no longer count against --max-sessions.
        let ended: Vec<Arc<str>> = {
            let live = gate.sessions.sessions.read().await;
            gate.workspaces
                .session_ids()
                .into_iter()
                .filter(|id| !live.contains_key(id))
                .collect()
        };
        for id in ended {
            gate.workspaces.close_session(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5d").unwrap_err().contains("s, m or h"));
        assert!(parse_duration("m").is_err());
    }
}
