//! The MCP handler: `tools/list` from the registry, `tools/call` → validate → dispatch → result.
//!
//! Over stdio one handler is one session (one connection) with one workspace; over HTTP each
//! call finds its workspace from the request (see `workspace.rs`). Tool failures are results with
//! `isError: true`; only protocol faults (an unknown tool name: -32602, as the MCP spec asks)
//! are JSON-RPC errors. Each call runs in its own task so that even a panic in a tool becomes an
//! error result and the server keeps serving.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    InitializeRequestParams, InitializeResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceTemplate, ResourceUpdatedNotificationParam,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, SubscriptionFilter,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::broadcast::Receiver;
use tokio_util::sync::CancellationToken;

use crate::change::confirm::{Asker, Confirmer};
use crate::change::error_kind::ErrorKind;
use crate::ground::path::VirtualPath;
use crate::observers::changes::{
    Change, ChangeHub, Interests, LegacySubscriptions, MAX_INTERESTS, Notifier, Subscriber,
    session_origin,
};
use crate::observers::resources::{self, ResourceError};
use crate::server::elicitation;
use crate::server::registry::Registry;
use crate::server::roots::RootsFollower;
use crate::server::workspace::{Principal, Workspaces};
use crate::state::arrival::{Turn, turn_of};
use crate::state::call_trail::{CallTrail, Collected, Touched};
use crate::state::session::Session;
use crate::tools::{self, CallContext, ProgressReporter, ToolError, ToolReply};

/// Whose session state a call uses.
#[derive(Debug, Clone)]
enum WorkspaceSource {
    /// The one session of a stdio process (or a test).
    Fixed(Arc<Session>),
    /// Per HTTP request: its MCP session's, else its principal's.
    PerRequest(Arc<Workspaces>),
}

/// The MCP server of one session.
#[derive(Debug, Clone)]
pub struct MountfsServer {
    registry: Arc<Registry>,
    workspace: WorkspaceSource,
    instructions: String,
    /// The client's roots, mounted when the table follows them (see `roots.rs`).
    roots: Arc<RootsFollower>,
    /// Where changes are announced and subscriptions listen.
    changes: Arc<ChangeHub>,
    /// This connection's `resources/subscribe` subscriptions.
    legacy: Arc<LegacySubscriptions>,
    /// Receivers taken when a `subscriptions/listen` was accepted, before its acknowledgement,
    /// for its `listen` to use: a change made right after the acknowledgement is not missed.
    /// (Any earlier receiver serves any later listen: it only sees more.)
    early_receivers: Arc<std::sync::Mutex<std::collections::VecDeque<Receiver<Change>>>>,
}

/// Receivers kept for listens that have not started (a few at most: one per listen request).
const MAX_EARLY_RECEIVERS: usize = 16;

pub use crate::server::roots::ROOTS_NOTE;

impl MountfsServer {
    /// A handler serving `session` with the tools of `registry`. `instructions` tell the client
    /// what is mounted where.
    pub fn new(
        registry: Arc<Registry>,
        session: Arc<Session>,
        instructions: String,
        changes: Arc<ChangeHub>,
    ) -> Self {
        Self {
            registry,
            workspace: WorkspaceSource::Fixed(session),
            instructions,
            roots: Arc::new(RootsFollower::disabled()),
            changes,
            legacy: Arc::default(),
            early_receivers: Arc::default(),
        }
    }

    /// Mounts the client's roots as `roots` says (stdio: the default table follows them).
    pub fn with_roots(mut self, roots: RootsFollower) -> Self {
        self.roots = Arc::new(roots);
        self
    }

    /// A handler for HTTP requests: each call runs in the workspace of its request's MCP
    /// session, or of its principal when it has none (stateless MCP 2026-07-28).
    pub fn over_http(
        registry: Arc<Registry>,
        workspaces: Arc<Workspaces>,
        instructions: String,
        changes: Arc<ChangeHub>,
        roots_under: Option<&std::path::Path>,
    ) -> Self {
        let roots = Arc::new(RootsFollower::for_http(workspaces.table(), roots_under));
        Self {
            registry,
            workspace: WorkspaceSource::PerRequest(workspaces),
            instructions,
            roots,
            changes,
            legacy: Arc::default(),
            early_receivers: Arc::default(),
        }
    }

    /// Mounts the roots the client offers now in the session of `context` (see `roots.rs`).
    /// `first`: the update `initialize` announced.
    async fn follow_roots(&self, context: NotificationContext<RoleServer>, first: bool) {
        let info = context.peer.peer_info();
        if !self
            .roots
            .follows(info.as_ref().map(|info| &info.capabilities))
        {
            return;
        }
        match self.session_for(&context.extensions) {
            Ok(session) => self.roots.update(&session, &context.peer, first).await,
            Err(error) => {
                tracing::warn!(%error, "roots not mounted: no workspace for the notification");
                if first {
                    self.roots.abandon_first_update();
                }
            }
        }
    }

    /// The instructions of a principal whose grants hide mounts (issue 43): only the mounts
    /// it sees; `None` for everyone else (the table's own).
    fn seen_instructions(&self, extensions: &rmcp::model::Extensions) -> Option<String> {
        let WorkspaceSource::PerRequest(workspaces) = &self.workspace else {
            return None;
        };
        let principal = extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>())?;
        let view = workspaces.view_of(principal)?;
        Some(workspaces.table().instructions_seen(Some(&view)))
    }

    /// The session a call with these request `extensions` runs in.
    fn session_for(&self, extensions: &rmcp::model::Extensions) -> Result<Arc<Session>, McpError> {
        let workspaces = match &self.workspace {
            WorkspaceSource::Fixed(session) => return Ok(session.clone()),
            WorkspaceSource::PerRequest(workspaces) => workspaces,
        };
        // The HTTP gate put the principal into the request's parts before the library saw it.
        let parts = extensions.get::<http::request::Parts>();
        let principal = parts.and_then(|parts| parts.extensions.get::<Principal>());
        let Some(principal) = principal else {
            return Err(McpError::internal_error(
                "request reached the handler without an authenticated principal",
                None,
            ));
        };
        let session_id = parts
            .and_then(|parts| parts.headers.get(crate::server::transport::SESSION_HEADER))
            .and_then(|id| id.to_str().ok());
        match session_id {
            Some(id) => workspaces
                .session(id, principal)
                .map_err(|error| McpError::invalid_request(error.to_string(), None)),
            None => Ok(workspaces.principal(principal)),
        }
    }

    /// Runs a tool call to a result (never a protocol error): validation first, then dispatch in
    /// a task of its own so a panic cannot take the connection down.
    ///
    /// `turn` is the call's place in its file's arrival order (see `transport::arrival`); it is released
    /// when the call ends, however it ends.
    pub async fn run_tool(
        &self,
        name: &str,
        arguments: Value,
        turn: Option<Arc<Turn>>,
    ) -> Result<CallToolResult, McpError> {
        let session = self.session_for(&Default::default())?;
        let context = CallContext {
            turn,
            ..CallContext::default()
        };
        match self.run_tool_in(session, name, arguments, context).await? {
            CallToolResponse::Complete(result) => Ok(result),
            _ => Err(McpError::internal_error(
                "a call without a request asked for input",
                None,
            )),
        }
    }

    /// [`Self::run_tool`] in `session`, with the request's cancellation, progress token and
    /// arrival turn.
    async fn run_tool_in(
        &self,
        session: Arc<Session>,
        name: &str,
        arguments: Value,
        context: CallContext,
    ) -> Result<CallToolResponse, McpError> {
        let Some(definition) = self.registry.get(name) else {
            return Err(McpError::invalid_params(
                format!(
                    "Unknown tool: {name}. Available tools: {}",
                    self.registry
                        .tools()
                        .map(|t| t.name().to_owned())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            ));
        };
        if let Err(message) = definition.validate(&arguments) {
            return Ok(failure(ErrorKind::InvalidArguments, message).into());
        }
        let origin = session_origin(&session);
        let tool = name.to_owned();
        let audit = session
            .audit()
            .filter(|_| tools::table::changes_files(name))
            .cloned()
            .map(|log| (log, context.origin.clone()));
        // What the call changed is reported by the change primitive and the tool into the
        // call's trail (see `call_trail`) and logged in the call's own task: a client that stops
        // waiting cannot leave a change unlogged.
        let trail = Arc::new(CallTrail::new(audit.is_some()));
        let context = CallContext {
            trail: Some(trail.clone()),
            ..context
        };
        let changes = self.changes.clone();
        let session_origin = origin;
        let run = async move {
            let outcome = tools::call_in(&tool, arguments, &session, &context).await;
            let mut changed = trail.take();
            let touched = std::mem::take(&mut changed.touched);
            let private = |path: &str| {
                // A path that does not parse names no shared file: kept private.
                VirtualPath::parse(path).map_or(true, |path| {
                    changes.private_to_session(session_origin, &path, &tool)
                })
            };
            let outcome = match outcome {
                Ok(mut reply) => {
                    if let Some((log, origin)) = audit {
                        log_change(&log, &tool, &mut reply, changed, &touched, &origin, private)
                            .await;
                    }
                    Ok(reply)
                }
                Err(error) => {
                    // A change the person did not confirm is logged too: asked, not done. Its
                    // question may name a layer's uncommitted files (a declined `commit`), so
                    // it is always private to the workspace that asked (attack review).
                    if let (Some((log, origin)), ToolError::Declined { .. }) = (&audit, &error)
                        && let Some(mut entry) = crate::observers::audit_record::unconfirmed_change(
                            &tool, changed, origin,
                        )
                    {
                        entry.private = true;
                        if let Err(log_error) = log.record(&entry).await {
                            tracing::warn!(tool, error = %log_error, "a declined change was not written to the audit log");
                        }
                    }
                    Err(error)
                }
            };
            (outcome, touched)
        };
        let task = tokio::spawn(run);
        let (outcome, touched) = match task.await {
            Ok(done) => done,
            Err(join_error) => {
                tracing::error!(tool = name, error = %join_error, "tool task failed");
                return Ok(failure(
                    ErrorKind::Internal,
                    format!(
                        "Error: internal error while running {name}; nothing was changed by the failed step. Retry, or report this bug"
                    ),
                )
                .into());
            }
        };
        // Every path the call changed, as the change primitive recorded it: also those of a
        // call that failed part-way (what landed is announced), none of one that changed nothing.
        for touched in touched {
            let private = self.changes.private_to_session(origin, &touched.path, name);
            self.changes.publish(Change {
                path: touched.path,
                listing: touched.listing,
                origin: Some(origin),
                private,
            });
        }
        let mut result = match outcome {
            Ok(reply) => {
                let file = reply.file.clone();
                let mut result = success(name, reply);
                if let Some(entry) = file.filter(|entry| !entry.is_dir()) {
                    result
                        .content
                        .push(ContentBlock::resource_link(resources::resource_of(&entry)));
                }
                result
            }
            Err(ToolError::InputRequired {
                question,
                request_state,
                ..
            }) => {
                return Ok(elicitation::input_required(&question, request_state).into());
            }
            Err(error) => {
                tracing::debug!(tool = name, %error, "tool error");
                failure(error.kind(), error.to_string())
            }
        };
        // A change a crash cut short, resolved when the mounts were opened: told once, ahead
        // of the answer (its structured content stays the tool's own).
        if let Some(note) = crate::server::mounts::take_recovery_notes() {
            result.content.insert(0, ContentBlock::text(note));
        }
        Ok(result.into())
    }
}

/// Logs the change a successful call made (into the audit log's spool, see `audit::spool`). A
/// failure to log never fails the call, whose change has landed: it is a warning on stderr, a
/// counter, and a note in the answer saying the change was not logged. A change that waits for
/// a database that does not answer is logged later; its answer says so.
async fn log_change(
    log: &crate::storage::audit::AuditLog,
    tool: &str,
    reply: &mut ToolReply,
    changed: Collected,
    touched: &[Touched],
    origin: &crate::storage::audit::Origin,
    in_private_mount: impl Fn(&str) -> bool,
) {
    let Some(mut change) =
        crate::observers::audit_record::change_of(tool, reply, changed, touched, origin)
    else {
        return;
    };
    crate::observers::audit_record::mark_private(&mut change, touched, in_private_mount);
    match log.record(&change).await {
        Ok(None) => {}
        Ok(Some(waiting)) => {
            reply.text.push_str(&format!(
                "\nNote: the change was made; the audit log's database {waiting}."
            ));
        }
        Err(error) => {
            let failures = log.count_failure();
            tracing::warn!(tool, %error, failures, "change made but not written to the audit log");
            reply.text.push_str(&format!(
                "\nNote: the change was made, but it could not be written to the audit log ({error}); {failures} change(s) not logged since the server started."
            ));
        }
    }
}

/// A legacy subscription's notifications, sent to the connection's peer.
struct PeerNotifier(rmcp::Peer<RoleServer>);

#[async_trait::async_trait]
impl Notifier for PeerNotifier {
    async fn updated(&self, uri: String) -> Result<(), String> {
        self.0
            .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
            .await
            .map_err(|e| e.to_string())
    }

    async fn list_changed(&self) -> Result<(), String> {
        self.0
            .notify_resource_list_changed()
            .await
            .map_err(|e| e.to_string())
    }
}

/// A `subscriptions/listen` stream's notifications.
struct SinkNotifier(rmcp::service::SubscriptionSink);

#[async_trait::async_trait]
impl Notifier for SinkNotifier {
    async fn updated(&self, uri: String) -> Result<(), String> {
        self.0
            .notify_resource_updated(uri)
            .await
            .map_err(|e| e.to_string())
    }

    async fn list_changed(&self) -> Result<(), String> {
        self.0
            .notify_resource_list_changed()
            .await
            .map_err(|e| e.to_string())
    }
}

/// Who puts `--confirm` questions to the person behind this request (see `elicitation`): the
/// peer of the request on MCP 2025-11-25, an input-required result on 2026-07-28, nobody when
/// the client did not declare elicitation.
fn asker_for(
    request: &mut CallToolRequestParams,
    arguments: &Value,
    context: &RequestContext<RoleServer>,
    origin: &crate::storage::audit::Origin,
    timeout: std::time::Duration,
) -> Arc<dyn Asker> {
    let modern = context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
    let capabilities = if modern {
        context.meta.client_capabilities()
    } else {
        context
            .peer
            .peer_info()
            .map(|info| info.capabilities.clone())
    };
    if let Some(why) = elicitation::cannot_ask(capabilities.as_ref()) {
        return elicitation::shared(elicitation::Unable(why));
    }
    if modern {
        let who = if origin.principal.is_empty() {
            "stdio".to_owned()
        } else {
            origin.principal.clone()
        };
        elicitation::shared(elicitation::RetryAsker {
            responses: request.input_responses.take(),
            state: request.request_state.take(),
            who: format!("{who}\0{}", request.name),
            arguments: elicitation::arguments_digest(arguments),
            timeout,
        })
    } else {
        elicitation::shared(elicitation::PeerAsker(context.peer.clone()))
    }
}

/// What a tool sees of its request: cancellation, progress token (from the call's `_meta`),
/// request id.
fn call_context(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> CallContext {
    let token = request
        .meta
        .as_ref()
        .and_then(|meta| meta.get_progress_token())
        .or_else(|| context.meta.get_progress_token());
    CallContext {
        cancel: context.ct.clone(),
        progress: token.map(|token| ProgressReporter::new(token, context.peer.clone())),
        request_id: Some(context.id.to_string()),
        turn: turn_of(&context.extensions),
        origin: origin_of(context),
        trail: None,
        confirm: None,
    }
}

/// Who sends a request, for the audit log: the HTTP principal and MCP session (or the stdio
/// process), and the client as it named itself in the request's `_meta` (`server/discover`,
/// stateless MCP) or at `initialize`.
fn origin_of(context: &RequestContext<RoleServer>) -> crate::storage::audit::Origin {
    let mut origin = crate::storage::audit::Origin {
        request_id: context.id.to_string(),
        ..Default::default()
    };
    let client = context.meta.client_info().or_else(|| {
        context
            .peer
            .peer_info()
            .map(|info| info.client_info.clone())
    });
    if let Some(client) = client {
        origin.client = crate::storage::audit::ClientInfo {
            name: client.name,
            version: client.version,
        };
    }
    let parts = context.extensions.get::<http::request::Parts>();
    if let Some(principal) = parts.and_then(|parts| parts.extensions.get::<Principal>()) {
        origin.principal = principal.to_string();
        origin.workspace = match parts
            .and_then(|parts| parts.headers.get(crate::server::transport::SESSION_HEADER))
            .and_then(|id| id.to_str().ok())
        {
            Some(session) => format!("session {session}"),
            None => format!("principal {principal}"),
        };
    }
    origin
}

/// The JSON-RPC error of a resource request: unknown files are MCP's resource-not-found, bad
/// URIs and cursors invalid parameters, the rest internal errors (the text says which).
fn resource_error(error: ResourceError) -> McpError {
    let message = error.to_string();
    match error {
        ResourceError::NotFound { .. } => McpError::resource_not_found(message, None),
        ResourceError::InvalidUri { .. }
        | ResourceError::InvalidCursor(_)
        | ResourceError::IsADirectory { .. }
        | ResourceError::TooLarge { .. } => McpError::invalid_params(message, None),
        ResourceError::Backend(_) => McpError::internal_error(message, None),
    }
}

fn success(tool: &str, reply: ToolReply) -> CallToolResult {
    if reply.structured.is_none() {
        tracing::error!(
            tool,
            text = %reply.text.chars().take(200).collect::<String>(),
            "a tool answered without structured content; its output schema requires some (bug)"
        );
    }
    let mut content = vec![ContentBlock::text(reply.text)];
    if let Some((data, mime)) = reply.image {
        content.push(ContentBlock::image(data, mime));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = reply.structured;
    result
}

/// A failed call: its text for the agent, and the same text with its kind as structured
/// content (`$defs/error` of every output schema).
fn failure(kind: ErrorKind, message: String) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    result.structured_content = Some(kind.structured(&message));
    result
}

impl ServerHandler for MountfsServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("mountfs", env!("CARGO_PKG_VERSION")))
        .with_instructions(self.instructions.clone())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        context.peer.set_peer_info(request.clone());
        let mut result = self.negotiate_initialize(&request)?;
        if self.roots.follows(Some(&request.capabilities)) {
            // Calls wait until the roots asked for after `initialized` are mounted.
            self.roots.expect_first_update();
        }
        let instructions = self
            .seen_instructions(&context.extensions)
            .unwrap_or_else(|| self.instructions.clone());
        if let Some(note) = self.roots.client_note(Some(&request.capabilities)) {
            result.instructions = Some(format!("{instructions}\n{note}"));
        } else if result.instructions.as_deref() != Some(instructions.as_str()) {
            result.instructions = Some(instructions);
        }
        Ok(result)
    }

    /// `server/discover` (MCP 2026-07-28): the instructions name only the mounts the
    /// principal's grants let it see, and are then its own to cache.
    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        let mut result = rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        );
        if let Some(instructions) = self.seen_instructions(&context.extensions) {
            result.instructions = Some(instructions);
            result.cache_scope = rmcp::model::CacheScope::Private;
        }
        Ok(result)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.follow_roots(context, true).await;
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.follow_roots(context, false).await;
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        // A principal whose grants let it change nothing is offered the reading tools only.
        let reads_only = match &self.workspace {
            WorkspaceSource::Fixed(_) => false,
            WorkspaceSource::PerRequest(_) => self
                .session_for(&context.extensions)?
                .view()
                .is_some_and(|view| !view.writes_anywhere()),
        };
        Ok(ListToolsResult::with_all_items(
            self.registry
                .tools()
                .filter(|t| !reads_only || t.reads_only())
                .map(|t| t.tool.clone())
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut call = call_context(&request, &context);
        let arguments = request
            .arguments
            .take()
            .map_or(Value::Object(Default::default()), Value::Object);
        self.roots.settled().await;
        let session = self.session_for(&context.extensions)?;
        // One `Option` check when `--confirm` is not given (issue 46).
        if let Some(policy) = &session.write_options.confirm
            && let Some(scope) = policy.scope(&request.name)
        {
            call.confirm = Some(Confirmer {
                scope,
                timeout: policy.timeout,
                asker: asker_for(
                    &mut request,
                    &arguments,
                    &context,
                    &call.origin,
                    policy.timeout,
                ),
            });
        }
        drop(context);
        self.run_tool_in(session, &request.name, arguments, call)
            .await
    }

    /// Every file of every mount, a page at a time in path order (see `resources`).
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.roots.settled().await;
        let session = self.session_for(&context.extensions)?;
        let cursor = request.and_then(|request| request.cursor);
        let (resources, next_cursor) = resources::list_page(&*session.backend(), cursor.as_deref())
            .await
            .map_err(resource_error)?;
        let mut result = ListResourcesResult::with_all_items(resources);
        result.next_cursor = next_cursor;
        Ok(result)
    }

    /// `mountfs:///{+path}`: any file by its virtual path.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let template = ResourceTemplate::new(resources::URI_TEMPLATE, "file")
            .with_title("A file of any mount")
            .with_description(
                "Any file by its absolute virtual path, e.g. mountfs:///src/main.rs (segments percent-encoded)",
            );
        Ok(ListResourceTemplatesResult::with_all_items(vec![template]))
    }

    /// One file: text (UTF-8) or a base64 blob; larger files point to `read_file` windows.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.roots.settled().await;
        let session = self.session_for(&context.extensions)?;
        let contents = resources::read(&*session.backend(), &request.uri)
            .await
            .map_err(resource_error)?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    /// Follows a file or a directory (legacy subscriptions, MCP 2025-11-25): its changes, by
    /// anyone, arrive as `notifications/resources/updated`.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let path = resources::path_of(&request.uri).map_err(resource_error)?;
        // The client's roots decide what a path is, and their directories are watched too.
        self.roots.settled().await;
        let session = self.session_for(&context.extensions)?;
        if !self.legacy.add(path) {
            return Err(McpError::invalid_params(
                format!(
                    "too many subscriptions: a session may follow at most {MAX_INTERESTS} files or directories; unsubscribe from some, or subscribe to a directory that holds them"
                ),
                None,
            ));
        }
        let hub = self.changes.clone();
        let peer = context.peer.clone();
        self.legacy.ensure_running(
            session_origin(&session),
            session.view().cloned(),
            move |subscriber, stop| {
                let changes = hub.receiver();
                tokio::spawn(subscriber.run(hub, changes, PeerNotifier(peer), stop));
            },
        );
        // Answered once the file watchers see changes: nothing after the answer is missed.
        self.changes.ready().await;
        Ok(())
    }

    /// Stops following a file or directory.
    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let path = resources::path_of(&request.uri).map_err(resource_error)?;
        self.legacy.remove(&path);
        Ok(())
    }

    /// `subscriptions/listen` (MCP 2026-07-28): resource subscriptions to `mountfs:///` URIs
    /// (at most [`MAX_INTERESTS`]) and the resource list's changes.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut early = self
            .early_receivers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if early.len() >= MAX_EARLY_RECEIVERS {
            early.pop_front();
        }
        early.push_back(self.changes.receiver());
        drop(early);
        // The acknowledgement follows this answer: wait until the file watchers see changes, so
        // that nothing after it is missed (off the async threads where the runtime allows it).
        if let Ok(runtime) = tokio::runtime::Handle::try_current()
            && runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        {
            tokio::task::block_in_place(|| runtime.block_on(self.changes.ready()));
        }
        let mut accepted = SubscriptionFilter::new();
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| resources::path_of(uri).is_ok())
                .take(MAX_INTERESTS)
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.roots.settled().await;
        self.changes.ready().await;
        let session = self.session_for(&context.request_context().extensions)?;
        let mut interests = Interests::default();
        for uri in context.accepted().resource_subscriptions.iter().flatten() {
            if let Ok(path) = resources::path_of(uri) {
                interests.add(path);
            }
        }
        let subscriber = Subscriber {
            interests: Arc::new(std::sync::Mutex::new(interests)),
            exact: true,
            list_changed: context.accepted().resources_list_changed == Some(true),
            origin: session_origin(&session),
            view: session.view().cloned(),
        };
        let stop = CancellationToken::new();
        let early = self
            .early_receivers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop_front();
        let changes = early.unwrap_or_else(|| self.changes.receiver());
        let run = subscriber.run(
            self.changes.clone(),
            changes,
            SinkNotifier(context.sink().clone()),
            stop.clone(),
        );
        tokio::select! {
            () = context.cancelled() => stop.cancel(),
            () = run => {}
        }
        Ok(())
    }

    /// A method MCP does not define (JSON-RPC -32601), named, with where to look.
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "Method not found: {}. The initialize result lists what this server serves (tools: tools/list, tools/call)",
                request.method
            ),
            None,
        ))
    }
}
