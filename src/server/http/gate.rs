//! The gate in front of rmcp's Streamable HTTP service: everything a request to `/mcp` must pass
//! before the MCP library sees it, and the bookkeeping after.
//!
//! In order: refuse while shutting down (503); refuse a present `Origin` not allowed (403, the
//! MCP spec's DNS-rebinding rule); refuse a missing or wrong bearer token (401 with
//! `WWW-Authenticate`; a valid one marks the connection proven, see `conns`); refuse a session
//! id this principal did not open (404, so the client starts a new session); read the body up
//! to the cap (413), within the room all requests' bodies share (503, [`BodyBudget`]), and
//! answer malformed JSON-RPC with the JSON-RPC error it deserves (-32700 / -32600 / -32602,
//! classified by `transport::message` exactly as stdio lines are) instead of the library's
//! plain-text 415; refuse a new session over `--max-sessions` or while the `--memory-budget` is
//! used up (503, with `Retry-After`); give a file call its arrival turn (as the stdio reader
//! does, see `transport::arrival`). After the library answers, a new session is recorded as
//! owned by its principal, and a closed one is dropped.
//!
//! Every refusal happens before anything is touched, and none logs the token.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::auth::{Tokens, bearer_token};
use super::conns::ConnMark;
use super::oauth::{Refusal, ResourceServer};
use crate::server::handler::MountfsServer;
use crate::server::transport::message::{self, Incoming};
use crate::server::workspace::{Principal, Workspaces};

pub use crate::server::transport::SESSION_HEADER;

/// JSON-RPC implementation-defined: refused by the server (auth, origin, limits, shutdown).
const SERVER_REFUSED: i64 = -32000;
/// JSON-RPC "Internal error".
const INTERNAL_ERROR: i64 = -32603;
/// JSON-RPC implementation-defined: unknown session (the code other MCP SDKs use).
const SESSION_NOT_FOUND: i64 = -32001;

/// What the gate needs, shared by every request.
pub struct Gate {
    /// The MCP library's service.
    pub mcp: StreamableHttpService<MountfsServer, LocalSessionManager>,
    /// The library's sessions (closed here when their workspace expires).
    pub sessions: Arc<LocalSessionManager>,
    /// Every workspace.
    pub workspaces: Arc<Workspaces>,
    /// The accepted static tokens.
    pub tokens: Tokens,
    /// The OAuth resource server (`--oauth-issuer`), when configured.
    pub oauth: Option<Arc<ResourceServer>>,
    /// `--allow-origin` entries.
    pub allowed_origins: Vec<String>,
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// Longest wait for a whole request body once its headers arrived (`--body-timeout`): a
    /// client trickling a body in holds a connection, its buffer and shutdown no longer than this.
    pub body_timeout: std::time::Duration,
    /// The request-body bytes all requests may hold at once (`--max-body-total`).
    pub bodies: BodyBudget,
    /// Set when shutdown starts: new requests are refused.
    pub draining: AtomicBool,
    /// POST requests whose answer is not yet fully sent.
    pub in_flight: AtomicUsize,
    /// Signalled when `in_flight` drops to zero.
    pub idle: Notify,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("tokens", &self.tokens)
            .field("allowed_origins", &self.allowed_origins)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

/// Bodies of at most this many bytes (every ordinary call) are read without asking the
/// [`BodyBudget`]: big writes holding it cannot keep other agents' calls out. Their sum is
/// bounded by the connection cap (`--max-connections` × 64 KiB).
pub const SMALL_BODY_BYTES: usize = 64 * 1024;

/// How many seconds a client refused for want of body room is told to wait.
const BODY_RETRY_SECONDS: &str = "1";

/// The request-body bytes held at once across all requests (`--max-body-total`), counted in
/// KiB. A body larger than [`SMALL_BODY_BYTES`] takes its room before it is read (by its
/// `Content-Length`) or as it streams in, and keeps it until its answer has been sent: the
/// parsed request and the work it starts live that long. A body that finds no room is refused
/// at once (503 with `Retry-After`) rather than queued, so that its connection is not held.
#[derive(Debug)]
pub struct BodyBudget {
    room: Arc<tokio::sync::Semaphore>,
    total_bytes: usize,
}

/// Room taken from the [`BodyBudget`], given back when dropped.
pub type BodyRoom = Option<tokio::sync::OwnedSemaphorePermit>;

impl BodyBudget {
    /// A budget of `total_bytes`.
    pub fn new(total_bytes: usize) -> Self {
        let kib = total_bytes
            .div_ceil(1024)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            room: Arc::new(tokio::sync::Semaphore::new(kib)),
            total_bytes,
        }
    }

    /// Grows `held` (room for `held_kib` KiB) to room for `bytes`; whether there was room.
    fn reserve(&self, held: &mut BodyRoom, held_kib: &mut usize, bytes: usize) -> bool {
        let wanted = bytes.div_ceil(1024);
        if wanted <= *held_kib {
            return true;
        }
        let Ok(more) = u32::try_from(wanted - *held_kib) else {
            return false;
        };
        match self.room.clone().try_acquire_many_owned(more) {
            Ok(permit) => {
                match held {
                    Some(held) => held.merge(permit),
                    None => *held = Some(permit),
                }
                *held_kib = wanted;
                true
            }
            Err(_) => false,
        }
    }

    /// The 503 of a body that found no room.
    fn busy(&self) -> Response {
        tracing::info!(
            total = self.total_bytes,
            "refused a request body: --max-body-total is held by other requests"
        );
        let mut response = jsonrpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::Null,
            SERVER_REFUSED,
            &format!(
                "Server busy: the request bodies being handled already hold this server's limit of {} bytes (--max-body-total); nothing was run. Send the request again after the Retry-After seconds",
                self.total_bytes
            ),
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(BODY_RETRY_SECONDS),
        );
        response
    }
}

/// A JSON-RPC error answer with an HTTP status.
pub fn jsonrpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    json_response(status, &body)
}

/// `body` as an `application/json` answer with `status`.
fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Whether `origin` is one of `allowed`: equal to an entry (ASCII case ignored), or matching an
/// entry `scheme://host:*` on any port.
pub fn origin_is_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    allowed.iter().any(|entry| {
        let entry = entry.trim().trim_end_matches('/').to_ascii_lowercase();
        if let Some(base) = entry.strip_suffix(":*") {
            origin == base
                || origin
                    .strip_prefix(base)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|port| {
                        !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
                    })
        } else {
            origin == entry
        }
    })
}

/// The `/mcp` endpoint: the gate, then the MCP library.
pub async fn mcp_endpoint(State(gate): State<Arc<Gate>>, request: Request) -> Response {
    let (mut parts, body) = request.into_parts();
    let admitted = match admit(&gate, &parts.headers, parts.extensions.get::<ConnMark>()).await {
        Ok(admitted) => admitted,
        Err(refusal) => return *refusal,
    };
    parts.extensions.insert(admitted.principal.clone());
    if parts.method == Method::POST {
        post(&gate, admitted, parts, body).await
    } else {
        other(&gate, admitted, parts, body).await
    }
}

/// Who sent a request, and in which session, once the gate has let it in.
struct Admitted {
    principal: Principal,
    session_id: Option<String>,
    /// The session's workspace, when the request names a session.
    workspace: Option<Arc<crate::state::session::Session>>,
}

/// The checks on headers alone, in order (see the module doc): shutdown, Origin, token,
/// session ownership. A valid token proves the connection (`conns`): it is no longer closed
/// to make room for new ones.
async fn admit(
    gate: &Gate,
    headers: &http::HeaderMap,
    mark: Option<&ConnMark>,
) -> Result<Admitted, Box<Response>> {
    if gate.draining.load(Ordering::SeqCst) {
        let mut response = jsonrpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            Value::Null,
            SERVER_REFUSED,
            "Server is shutting down: calls in flight finish, new ones are refused. Retry on another instance or after the restart",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return Err(Box::new(response));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|origin| origin_is_allowed(origin, &gate.allowed_origins));
        if !allowed {
            tracing::warn!(origin = ?origin, "refused a request from an Origin not allowed");
            return Err(Box::new(jsonrpc_error(
                StatusCode::FORBIDDEN,
                Value::Null,
                SERVER_REFUSED,
                "Forbidden: this Origin is not allowed. The operator can allow it with --allow-origin",
            )));
        }
    }
    let principal = authenticate(gate, headers.get(header::AUTHORIZATION)).await?;
    if let Some(mark) = mark {
        mark.prove();
    }
    let session_id = match headers.get(SESSION_HEADER).map(HeaderValue::to_str) {
        None => None,
        Some(Ok(id)) => Some(id.to_owned()),
        Some(Err(_)) => return Err(Box::new(unknown_session())),
    };
    let workspace = match &session_id {
        Some(id) => match gate.workspaces.session(id, &principal) {
            Ok(workspace) => Some(workspace),
            Err(crate::server::workspace::WorkspaceError::Regranted) => {
                // The MCP session goes too, and with it any subscription (and its stream)
                // still following what the old grants showed.
                tracing::info!(%principal, "closed a session opened under other grants");
                close_sessions(&gate.sessions, vec![Arc::from(id.as_str())]).await;
                return Err(Box::new(unknown_session()));
            }
            Err(_) => return Err(Box::new(unknown_session())),
        },
        None => None,
    };
    Ok(Admitted {
        principal,
        session_id,
        workspace,
    })
}

/// The principal of the request's bearer token: a static token's (compared first, in constant
/// time), else, with `--oauth-issuer`, an OAuth access token's; else the refusal.
async fn authenticate(
    gate: &Gate,
    authorization: Option<&HeaderValue>,
) -> Result<Principal, Box<Response>> {
    let value = authorization.map(HeaderValue::as_bytes);
    if let Some(principal) = gate.tokens.principal_of(value) {
        return Ok(principal);
    }
    let Some(oauth) = &gate.oauth else {
        return Err(Box::new(unauthorized(authorization.is_some())));
    };
    let Some(token) = value.and_then(bearer_token) else {
        tracing::info!(
            had_header = authorization.is_some(),
            "refused a request without a bearer token"
        );
        return Err(Box::new(oauth_refusal(oauth, None)));
    };
    if let Some(principal) = oauth.cached_principal(token) {
        return Ok(principal);
    }
    match oauth.principal_of(token).await {
        Ok(principal) => Ok(principal),
        Err(refusal) => {
            // The reason only: the token, even a forged one, is never logged.
            tracing::info!(reason = %refusal, "refused an OAuth access token");
            Err(Box::new(oauth_refusal(oauth, Some(&refusal))))
        }
    }
}

/// The answer to a request whose OAuth token is missing (`None`) or refused: 401 with the
/// challenge naming the metadata and scope (RFC 9728 §5.1, MCP's authorization spec); 403
/// `insufficient_scope` for a valid token without the scope (RFC 6750 §3.1); 503 while the
/// issuer's keys cannot be had.
fn oauth_refusal(oauth: &ResourceServer, refusal: Option<&Refusal>) -> Response {
    let (status, message) = match refusal {
        None => (
            StatusCode::UNAUTHORIZED,
            format!(
                "Unauthorized: send `Authorization: Bearer <token>` with an OAuth access token for this server (its metadata: {}), or a static token from the server's --token-file",
                oauth.metadata_url()
            ),
        ),
        Some(refusal @ Refusal::InsufficientScope(_)) => (
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden: {refusal}. Ask the authorization server for a token with that scope"
            ),
        ),
        Some(refusal @ Refusal::KeysUnavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("Service unavailable: {refusal}"),
        ),
        Some(refusal) => (
            StatusCode::UNAUTHORIZED,
            format!(
                "Unauthorized: {refusal}. Get a new access token from the authorization server"
            ),
        ),
    };
    let mut response = jsonrpc_error(status, Value::Null, SERVER_REFUSED, &message);
    if let Ok(challenge) = HeaderValue::from_str(&oauth.challenge(refusal)) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
    }
    response
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the RFC 9728 metadata, with
/// `--oauth-issuer`; 404 without (this server then takes static tokens only).
pub async fn resource_metadata(State(gate): State<Arc<Gate>>) -> Response {
    match &gate.oauth {
        Some(oauth) => json_response(StatusCode::OK, &oauth.metadata()),
        None => {
            let mut response = Response::new(Body::from(
                "no OAuth: this server takes static bearer tokens from its --token-file\n",
            ));
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
}

/// 401, with the challenge RFC 6750 asks for.
fn unauthorized(had_token: bool) -> Response {
    let challenge = if had_token {
        r#"Bearer realm="mountfs", error="invalid_token", error_description="the token is not valid for this server""#
    } else {
        r#"Bearer realm="mountfs""#
    };
    // Nothing of the header is logged: it may hold a near-miss of a real token.
    tracing::info!(had_token, "refused a request without a valid bearer token");
    let mut response = jsonrpc_error(
        StatusCode::UNAUTHORIZED,
        Value::Null,
        SERVER_REFUSED,
        "Unauthorized: send the header `Authorization: Bearer <token>` with a token from the server's --token-file or MOUNTFS_TOKEN",
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// GET (the server's event stream) and DELETE (closing a session) go to the library as they
/// are; a closed session's workspace is dropped.
async fn other(
    gate: &Gate,
    admitted: Admitted,
    parts: http::request::Parts,
    body: Body,
) -> Response {
    let method = parts.method.clone();
    drop(admitted.workspace);
    let mut response = gate.mcp.handle(Request::from_parts(parts, body)).await;
    if method == Method::DELETE
        && response.status().is_success()
        && let Some(id) = &admitted.session_id
    {
        gate.workspaces.close_session(id);
        // The library answers 202; clients (the Python SDK) expect 200 or 204 for a session
        // that is now closed.
        *response.status_mut() = StatusCode::OK;
    }
    response.map(Body::new)
}

/// A JSON-RPC message: body cap, classification, session limit, arrival turn, then the
/// library; a new session is recorded as its principal's.
async fn post(
    gate: &Arc<Gate>,
    admitted: Admitted,
    mut parts: http::request::Parts,
    body: Body,
) -> Response {
    let in_flight = InFlight::enter(gate);
    let (body, room) = match read_body(&parts.headers, body, gate).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let classified = message::classify(&body);
    // The body as received goes as soon as it is parsed: a big write holds as few copies of its
    // body at once as can be (issue 25: the body budget counts one).
    let received = body.len();
    drop(body);
    let mut message = match classified {
        Incoming::Message(message) => *message,
        Incoming::Answer(answer) => return json_response(StatusCode::BAD_REQUEST, &answer),
        Incoming::Dropped(reason) => {
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                message::INVALID_REQUEST,
                &format!(
                    "Invalid Request: {reason}; send one JSON-RPC 2.0 request, notification or response"
                ),
            );
        }
    };
    let is_initialize = admitted.session_id.is_none()
        && matches!(&message, JsonRpcMessage::Request(request)
            if matches!(request.request, ClientRequest::InitializeRequest(_)));
    if is_initialize && let Err(error) = gate.workspaces.check_session_room() {
        tracing::warn!(%error, "refused a new session");
        let id = match &message {
            JsonRpcMessage::Request(request) => {
                serde_json::to_value(&request.id).unwrap_or_default()
            }
            _ => Value::Null,
        };
        return too_many_sessions(id, &error);
    }
    let principal = admitted.principal;
    take_turn(
        &mut message,
        admitted.workspace,
        gate,
        &principal,
        &mut parts,
    );
    // The library parses the body again itself: hand it the message as classified (a byte-order
    // mark, stray CRs and the like are gone), with the turn travelling in `parts`. Sized from
    // the body received, so the buffer is not grown (and copied) as it fills.
    let mut normalised = Vec::with_capacity(received.saturating_add(256));
    if let Err(error) = serde_json::to_writer(&mut normalised, &message) {
        return jsonrpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            Value::Null,
            INTERNAL_ERROR,
            &format!(
                "Internal error: the request could not be passed on ({error}); nothing was run. Send it again"
            ),
        );
    }
    drop(message);
    let body = Bytes::from(normalised);
    let response = gate
        .mcp
        .handle(Request::from_parts(parts, http_body_util::Full::new(body)))
        .await;
    if is_initialize
        && let Some(id) = response.headers().get(SESSION_HEADER)
        && let Ok(id) = id.to_str()
    {
        if let Err(error) = gate.workspaces.open_session(id, &principal) {
            tracing::warn!(%error, "refused a new session");
            close_sessions(&gate.sessions, vec![Arc::from(id)]).await;
            return too_many_sessions(Value::Null, &error);
        }
        tracing::info!(%principal, "session opened");
    }
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(InFlightBody {
            inner: Body::new(body),
            _in_flight: in_flight,
            _room: room,
        }),
    )
}

fn too_many_sessions(id: Value, error: &crate::server::workspace::WorkspaceError) -> Response {
    let mut response = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        id,
        SERVER_REFUSED,
        &error.to_string(),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("30"));
    response
}

fn unknown_session() -> Response {
    jsonrpc_error(
        StatusCode::NOT_FOUND,
        Value::Null,
        SESSION_NOT_FOUND,
        &crate::server::workspace::WorkspaceError::UnknownSession.to_string(),
    )
}

/// Reads the body, refusing one over `--max-body` bytes (by `Content-Length` before reading,
/// or as it streams in; 413), one not complete within `--body-timeout` (408), and one that
/// finds no room in the [`BodyBudget`] (503). Returns the body and the room it holds.
async fn read_body(
    headers: &http::HeaderMap,
    mut body: Body,
    gate: &Gate,
) -> Result<(Bytes, BodyRoom), Response> {
    let max = gate.max_body_bytes;
    let timeout = gate.body_timeout;
    let too_large = |size: Option<u64>| {
        let size = size.map_or_else(|| "over".to_owned(), |n| format!("{n} bytes,"));
        jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            Value::Null,
            message::INVALID_REQUEST,
            &format!(
                "Request too large: the body is {size} above this server's limit of {max} bytes (--max-body). Send smaller pieces: write a big file in parts with edit_file, or ask the operator to raise --max-body"
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared
        && length > max as u64
    {
        return Err(too_large(Some(length)));
    }
    let declared = declared.and_then(|n| usize::try_from(n).ok());
    let mut room: BodyRoom = None;
    let mut room_kib = 0;
    // A body that finds no room is still read to its end, and thrown away as it comes: the
    // client then gets the 503 and its Retry-After on a connection still usable, instead of a
    // broken pipe in the middle of its upload.
    let mut refused = declared.is_some_and(|length| {
        length > SMALL_BODY_BYTES && !gate.bodies.reserve(&mut room, &mut room_kib, length)
    });
    let capacity = if refused {
        0
    } else {
        declared.unwrap_or(0).min(max)
    };
    let mut collected = bytes::BytesMut::with_capacity(capacity);
    let mut received = 0usize;
    let read = tokio::time::timeout(timeout, async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| {
                jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    Value::Null,
                    message::INVALID_REQUEST,
                    &format!("The request body could not be read ({error}); send it again"),
                )
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            received += data.len();
            if received > max {
                return Err(too_large(None));
            }
            if !refused
                && received > SMALL_BODY_BYTES
                && !gate.bodies.reserve(&mut room, &mut room_kib, received)
            {
                refused = true;
                room = None;
                collected = bytes::BytesMut::new();
            }
            if !refused {
                collected.extend_from_slice(&data);
            }
        }
        Ok(())
    })
    .await;
    match read {
        Ok(Ok(())) if refused => Err(gate.bodies.busy()),
        Ok(Ok(())) => Ok((collected.freeze(), room)),
        Ok(Err(response)) => Err(response),
        Err(_) => Err(jsonrpc_error(
            StatusCode::REQUEST_TIMEOUT,
            Value::Null,
            message::INVALID_REQUEST,
            &format!(
                "Request timeout: the body did not arrive whole within {} s (--body-timeout); nothing was run. Send the request again in one piece",
                timeout.as_secs_f64()
            ),
        )),
    }
}

/// Gives a file call its place in its file's arrival order (see `transport::arrival`), carried in the
/// request's parts, where the handler finds it.
fn take_turn(
    message: &mut ClientJsonRpcMessage,
    session: Option<Arc<crate::state::session::Session>>,
    gate: &Gate,
    principal: &Principal,
    parts: &mut http::request::Parts,
) {
    let JsonRpcMessage::Request(request) = &*message else {
        return;
    };
    if !matches!(request.request, ClientRequest::CallToolRequest(_)) {
        return;
    }
    // Without a session the workspace is the principal's (stateless MCP 2026-07-28).
    let session = session.unwrap_or_else(|| gate.workspaces.principal(principal));
    crate::state::arrival::take_turn(message, &session.arrival);
    if let JsonRpcMessage::Request(request) = message
        && let ClientRequest::CallToolRequest(call) = &request.request
        && let Some(turn) = crate::state::arrival::turn_of(&call.extensions)
    {
        parts.extensions.insert(turn);
    }
}

/// One POST request in flight (for graceful shutdown).
#[derive(Debug)]
struct InFlight(Arc<Gate>);

impl InFlight {
    fn enter(gate: &Arc<Gate>) -> Self {
        gate.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(gate.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A response body that counts as in flight until it is sent or dropped.
struct InFlightBody {
    inner: Body,
    _in_flight: InFlight,
    /// The request body's room in the [`BodyBudget`], held until the answer is sent.
    _room: BodyRoom,
}

impl http_body::Body for InFlightBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Closes, in the MCP library, the sessions whose workspace the sweep dropped.
pub async fn close_sessions(sessions: &LocalSessionManager, ids: Vec<Arc<str>>) {
    for id in ids {
        tracing::info!("session closed");
        if let Err(error) = sessions.close_session(&id).await {
            tracing::debug!(%error, "closing an idle session");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_budget_grows_refuses_beyond_its_total_and_is_given_back() {
        let budget = BodyBudget::new(100 * 1024);
        let (mut first, mut first_kib) = (None, 0);
        assert!(budget.reserve(&mut first, &mut first_kib, 30 * 1024));
        assert!(budget.reserve(&mut first, &mut first_kib, 60 * 1024 + 1));
        assert_eq!(first_kib, 61);
        let (mut second, mut second_kib) = (None, 0);
        assert!(!budget.reserve(&mut second, &mut second_kib, 40 * 1024));
        assert!(second.is_none());
        assert!(budget.reserve(&mut second, &mut second_kib, 39 * 1024));
        drop(first);
        let (mut third, mut third_kib) = (None, 0);
        assert!(budget.reserve(&mut third, &mut third_kib, 61 * 1024));
        let busy = budget.busy();
        assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn origins_match_exactly_or_on_any_port() {
        let allowed = vec![
            "https://app.example.com".to_owned(),
            "http://localhost:*".to_owned(),
        ];
        for ok in [
            "https://app.example.com",
            "HTTPS://App.Example.com",
            "http://localhost:6274",
            "http://localhost",
        ] {
            assert!(origin_is_allowed(ok, &allowed), "{ok}");
        }
        for refused in [
            "https://app.example.com:8443",
            "http://app.example.com",
            "https://evil.example.com",
            "http://localhost.evil.com",
            "http://localhost:80x",
            "null",
        ] {
            assert!(!origin_is_allowed(refused, &allowed), "{refused}");
        }
        assert!(!origin_is_allowed("http://localhost", &[]));
    }
}
