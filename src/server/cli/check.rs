//! `mountfs check [the flags of serving]`: validates a configuration without serving (issue 30).
//!
//! One item per line, in the order a start meets them: each mount (reachable, and writable when
//! declared so), the overlay layers' files, the HTTP token file (present, parsable, private),
//! the OAuth issuer (its discovery document and JWKS reached), the audit log, and the sandbox
//! of `execute` (Landlock and namespaces) when `--allow-exec`
//! asks for it. The first failure ends the check: what was wrong and how to fix it.
//!
//! Nothing is served and nothing the agent sees changes: writability is probed with an unnamed
//! file (`O_TMPFILE`, gone when closed) or `access(2)`, stores are opened as a start opens them
//! (a SQLite file that does not exist yet is not created: its directory is checked instead).

use std::path::{Path, PathBuf};

use crate::ground::config::{BackendSpec, MountSpec, OverlaySpec};
use crate::storage::audit::{AuditLog, AuditTarget};
use crate::storage::backend::{DiskBackend, DiskOptions};
use crate::storage::exec::ExecMode;
use crate::storage::store::{PostgresStore, SqliteStore};

/// What `mountfs check` was given: the flags a start would get.
#[derive(Debug)]
pub struct CheckRequest<'a> {
    /// The mount table.
    pub mounts: &'a [MountSpec],
    /// `--http` was given.
    pub http: bool,
    /// `--token-file`.
    pub token_file: Option<&'a Path>,
    /// `--oauth-issuer`.
    pub oauth_issuer: Option<&'a str>,
    /// `--allow-exec`.
    pub exec: Option<ExecMode>,
    /// `--exec-env`.
    pub exec_env: &'a [crate::storage::exec::env::ExtraVar],
    /// The audit log (`None`: off).
    pub audit: Option<&'a AuditTarget>,
    /// `--confirm` (issue 46).
    pub confirm: Option<&'a crate::ground::confirm_policy::ConfirmPolicy>,
    /// The server's own files (data directory, databases, token file): a disk mount that
    /// covers one is warned about (they are hidden from every tool, see
    /// `backend::disk::own_files`).
    pub own_files: &'a [PathBuf],
    /// The grants of `--grant`, `--grant-file` and the token file (issue 43), or why they do
    /// not parse.
    pub grants: Result<crate::ground::grants::Grants, String>,
}

/// What an [`Item`] that only warns starts with: it passes, its line says `WARN`.
const WARNING: &str = "warning: ";

/// One checked item: what, and what was found (`Err`: why it fails and how to fix it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// What was checked, e.g. `mount /docs/`.
    pub what: String,
    /// What was found.
    pub outcome: Result<String, String>,
}

impl Item {
    /// The line `mountfs check` prints.
    pub fn line(&self) -> String {
        match &self.outcome {
            Ok(found) if self.what.starts_with(WARNING) => {
                format!("WARN  {}: {found}", &self.what[WARNING.len()..])
            }
            Ok(found) => format!("ok    {}: {found}", self.what),
            Err(why) => format!("FAIL  {}: {why}", self.what),
        }
    }
}

/// Checks `request` item by item, telling `report` each one as it is done; stops at the first
/// failure. Returns whether every item passed.
pub async fn check(request: &CheckRequest<'_>, mut report: impl FnMut(&Item)) -> bool {
    let mut items = Vec::new();
    for spec in request.mounts {
        items.push(check_mount(spec).await);
        if items.last().is_some_and(|i| i.outcome.is_err()) {
            break;
        }
        if let BackendSpec::Disk {
            overlay: Some(OverlaySpec::Sqlite(file)),
            ..
        } = &spec.backend
        {
            items.push(Item {
                what: format!("overlay layers of {}", spec.display_prefix()),
                outcome: check_sqlite_file(file, true).await,
            });
        }
        if items.last().is_some_and(|i| i.outcome.is_err()) {
            break;
        }
    }
    let passed = |items: &[Item]| items.iter().all(|i| i.outcome.is_ok());
    if passed(&items) && request.http {
        items.push(Item {
            what: "token file".to_owned(),
            outcome: match (request.token_file, request.oauth_issuer) {
                (None, Some(_)) => Ok(
                    "none: OAuth access tokens only (--oauth-issuer); no static token is accepted unless MOUNTFS_TOKEN is set".to_owned(),
                ),
                (file, _) => check_token_file(file),
            },
        });
    }
    if passed(&items) && request.http {
        items.push(Item {
            what: "grants".to_owned(),
            outcome: check_grants(request),
        });
    }
    if passed(&items)
        && request.http
        && let Some(issuer) = request.oauth_issuer
    {
        items.push(Item {
            what: "OAuth issuer".to_owned(),
            outcome: check_oauth_issuer(issuer).await,
        });
    }
    if passed(&items)
        && let Some(target) = request.audit
    {
        items.push(Item {
            what: "audit log".to_owned(),
            outcome: check_audit(target).await,
        });
    }
    if passed(&items)
        && let Some(mode) = request.exec
    {
        items.push(Item {
            what: "execute".to_owned(),
            outcome: check_exec(mode),
        });
        if passed(&items) {
            items.push(Item {
                what: "execute environment".to_owned(),
                outcome: Ok(crate::storage::exec::env::described(request.exec_env)),
            });
            let shells: Vec<String> = request
                .mounts
                .iter()
                .filter(|spec| matches!(spec.backend, BackendSpec::Shell { .. }))
                .map(MountSpec::display_prefix)
                .collect();
            if !shells.is_empty() {
                items.push(Item {
                    what: format!("execute on shell mounts {}", shells.join(", ")),
                    outcome: Ok("commands with their cwd there run on the target, NOT sandboxed, with the full rights of the account the --shell command logs in as".to_owned()),
                });
            }
        }
    }
    if passed(&items)
        && let Some(policy) = request.confirm
    {
        items.push(Item {
            what: "confirm".to_owned(),
            outcome: Ok(format!(
                "the person is asked (MCP elicitation) before {}; a client that cannot elicit is refused those calls",
                policy.describe()
            )),
        });
    }
    // Warnings last: they pass, and the items above keep their places.
    if passed(&items) {
        for spec in request.mounts {
            if let BackendSpec::Disk { dir, .. } = &spec.backend {
                let covered = covered_own_files(dir, request.own_files);
                if !covered.is_empty() {
                    items.push(Item {
                        what: format!("{WARNING}mount {}", spec.display_prefix()),
                        outcome: Ok(format!(
                            "it covers the server's own files ({}); no tool shows, reads or writes them (they answer \"not found\"), but consider mounting a directory that does not hold them",
                            covered
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    });
                }
            }
        }
    }
    for item in &items {
        report(item);
    }
    passed(&items)
}

/// The files of `own` that exist and lie inside `dir`: by path once symbolic links are
/// resolved, or by identity (the mount's directory, by device and inode, among their
/// ancestors: a bind mount of a parent).
fn covered_own_files(dir: &Path, own: &[PathBuf]) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let (Ok(root), Ok(meta)) = (std::fs::canonicalize(dir), std::fs::metadata(dir)) else {
        return Vec::new();
    };
    let root_id = (meta.dev(), meta.ino());
    own.iter()
        .filter(|file| {
            let Ok(real) = std::fs::canonicalize(file) else {
                return false;
            };
            real.starts_with(&root)
                || real
                    .ancestors()
                    .any(|up| std::fs::metadata(up).is_ok_and(|m| (m.dev(), m.ino()) == root_id))
        })
        .cloned()
        .collect()
}

/// One mount: opened as a start opens it, and writable unless `,ro`.
async fn check_mount(spec: &MountSpec) -> Item {
    let what = format!("mount {}", spec.display_prefix());
    let outcome = match &spec.backend {
        BackendSpec::Memory => Ok("memory, one per workspace".to_owned()),
        BackendSpec::Disk { dir, overlay, .. } => {
            check_disk(dir, spec.read_only, overlay.is_some())
        }
        BackendSpec::Sqlite { file, namespace } => check_sqlite_file(file, !spec.read_only)
            .await
            .map(|found| format!("{found}, namespace {namespace}")),
        BackendSpec::Shell { name, dir, command } => {
            check_shell(name, dir, command, spec.read_only).await
        }
        BackendSpec::Object(object) => check_object(object, spec.read_only).await,
        BackendSpec::Postgres { url, namespace } => match PostgresStore::connect(url).await {
            Ok(_) => Ok(format!("PostgreSQL answers, namespace {namespace}")),
            Err(error) => Err(format!(
                "{error}. Start PostgreSQL or fix the URL (user, host, port, database)"
            )),
        },
    };
    Item { what, outcome }
}

/// An object mount: the client configured from the environment, the bucket listed under the
/// prefix (reachable, credentials valid). Writability is not probed: that would write a key.
async fn check_object(
    spec: &crate::ground::config::ObjectSpec,
    read_only: bool,
) -> Result<String, String> {
    let backend = crate::storage::backend::ObjectBackend::open(spec)?;
    backend.probe().await.map_err(|error| {
        format!(
            "{}. Check the bucket name, the endpoint and the credentials in the environment",
            error.to_string().trim_start_matches("Error: ")
        )
    })?;
    Ok(format!(
        "{} reachable, credentials accepted{}",
        spec.url(),
        if read_only {
            ", read-only as declared"
        } else {
            " (writes are checked on the first write)"
        }
    ))
}

/// A shell mount: its command started and the directory entered as a start does, and the
/// directory writable by the target's user unless `,ro`.
async fn check_shell(
    name: &str,
    dir: &str,
    command: &[String],
    read_only: bool,
) -> Result<String, String> {
    let backend = crate::storage::backend::ShellBackend::new(name, command.to_vec(), dir);
    let probe = backend.probe().await.map_err(|error| {
        format!(
            "{error}. Check that `{}` starts a POSIX sh reading commands on its standard input, and that {dir} exists in the target",
            command.join(" ")
        )
    })?;
    let tools = format!(
        "{}{}",
        if probe.rg { "rg" } else { "grep" },
        if probe.stat {
            ", stat -c"
        } else {
            ", no stat -c (no times in listings)"
        }
    );
    if read_only {
        return Ok(format!(
            "shell {name}: {} reachable, read-only as declared ({tools})",
            probe.root
        ));
    }
    if !probe.writable {
        return Err(format!(
            "shell {name}: {} is mounted writable but the target's user cannot write it. Give that user write permission, or add ,ro to the mount",
            probe.root
        ));
    }
    Ok(format!(
        "shell {name}: {} reachable, writable ({tools})",
        probe.root
    ))
}

/// A disk mount's directory: opened as a start opens it (without resolving a crash's journal,
/// which a start does), and writable unless `,ro` (an overlay's commit writes it too).
fn check_disk(dir: &Path, read_only: bool, overlay: bool) -> Result<String, String> {
    DiskBackend::open_without_sweep(dir, DiskOptions::default())
        .map_err(|error| format!("{error}. Create the directory or fix the path"))?;
    let shown = dir.display();
    if read_only {
        return Ok(format!("directory {shown}, read-only as declared"));
    }
    writable_dir(dir).map_err(|error| {
        format!(
            "directory {shown} is mounted writable but this user cannot write it ({error}). Give the user write permission, or add ,ro to the mount"
        )
    })?;
    Ok(format!(
        "directory {shown}, writable{}",
        if overlay {
            " (changes kept in layers until commit)"
        } else {
            ""
        }
    ))
}

/// Whether this process can create files in `dir`: an unnamed file (gone when closed), or where
/// the file system has none, `access(2)`.
fn writable_dir(dir: &Path) -> Result<(), String> {
    use rustix::fs::{Mode, OFlags};
    match rustix::fs::open(
        dir,
        OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(_) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR) => {
            rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).map_err(|e| e.to_string())
        }
        Err(errno) => Err(std::io::Error::from(errno).to_string()),
    }
}

/// A SQLite file of a store or of overlay layers: opened when it exists (and, when `write`, its
/// file and directory writable: SQLite writes a journal beside it); else its directory, where a
/// start creates it.
async fn check_sqlite_file(file: &Path, write: bool) -> Result<String, String> {
    let shown = file.display();
    if !file.exists() {
        let dir = nearest_existing_dir(file);
        writable_dir(&dir).map_err(|error| {
            format!(
                "SQLite file {shown} does not exist and cannot be created: {} is not writable ({error}). Choose another path or give write permission",
                dir.display()
            )
        })?;
        return Ok(format!("SQLite file {shown} is created at start"));
    }
    if write {
        rustix::fs::access(file, rustix::fs::Access::WRITE_OK).map_err(|error| {
            format!(
                "SQLite file {shown} is not writable ({error}). Give write permission, or add ,ro to the mount"
            )
        })?;
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            writable_dir(dir).map_err(|error| {
                format!(
                    "the directory of SQLite file {shown} is not writable ({error}): SQLite keeps its write-ahead log there. Give write permission"
                )
            })?;
        }
    }
    SqliteStore::open(file)
        .await
        .map(|_| format!("SQLite file {shown}"))
        .map_err(|error| format!("{error}. Is it a mountfs SQLite file, not damaged?"))
}

/// The nearest ancestor of `file` that exists (where a start would create its directories).
fn nearest_existing_dir(file: &Path) -> PathBuf {
    let mut at = file.parent();
    while let Some(dir) = at {
        if dir.as_os_str().is_empty() {
            return PathBuf::from(".");
        }
        if dir.is_dir() {
            return dir.to_path_buf();
        }
        at = dir.parent();
    }
    PathBuf::from(".")
}

/// The HTTP token file: present, parsable, a regular file of this user that no one else may
/// read (it holds every principal's bearer token).
fn check_token_file(file: Option<&Path>) -> Result<String, String> {
    use std::os::unix::fs::MetadataExt;
    let Some(file) = file else {
        return Ok(format!(
            "none: {} or a token generated per run (loopback only)",
            crate::server::http::auth::TOKEN_ENV
        ));
    };
    let shown = file.display();
    let meta = std::fs::metadata(file).map_err(|error| {
        format!("{shown}: {error}. Create it with one `NAME TOKEN` line per principal, mode 600")
    })?;
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{shown} has mode {mode:o}: others may read the bearer tokens. Run chmod 600 {shown}"
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "{shown} belongs to user {} but the server runs as user {me}: another user could change who may connect. Run chown to the server's user",
            meta.uid()
        ));
    }
    let tokens =
        crate::server::http::auth::Tokens::from_file(file).map_err(|error| error.to_string())?;
    Ok(format!(
        "{shown}, private, {} principal(s)",
        tokens.principal_count()
    ))
}

/// The grants: each names a mount, and a principal some token can be (a token-file name,
/// `default` for MOUNTFS_TOKEN, `oauth:…` with an issuer, `*`, `scope:…`).
fn check_grants(request: &CheckRequest<'_>) -> Result<String, String> {
    use crate::ground::grants::Grantee;
    let grants = request.grants.as_ref().map_err(Clone::clone)?;
    if grants.is_empty() {
        return Ok("none: every principal sees every mount (give --grant to restrict)".to_owned());
    }
    let prefixes: Vec<_> = request.mounts.iter().map(|m| m.prefix.clone()).collect();
    let names = match request.token_file {
        Some(file) => crate::server::http::auth::Tokens::from_file(file)
            .map(|tokens| tokens.names())
            .unwrap_or_default(),
        None => vec![crate::server::http::auth::DEFAULT_PRINCIPAL.to_owned()],
    };
    for grant in grants.all() {
        if !prefixes.contains(&grant.prefix) {
            return Err(format!(
                "{} names no mount: a grant's PREFIX is a mount's prefix exactly (mounts: {}); mount the directory to grant it",
                grant.written(),
                request
                    .mounts
                    .iter()
                    .map(MountSpec::display_prefix)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Grantee::Principal(name) = &grant.grantee {
            let oauth = name.starts_with(crate::server::http::oauth::OAUTH_PRINCIPAL_PREFIX);
            if oauth && request.oauth_issuer.is_none() {
                return Err(format!(
                    "{} names an OAuth principal but no --oauth-issuer is given",
                    grant.written()
                ));
            }
            if !oauth && !names.contains(name) {
                return Err(format!(
                    "{} names a principal no token names (token file principals: {}); OAuth principals are written oauth:NAME",
                    grant.written(),
                    names.join(", ")
                ));
            }
        }
    }
    if let Some(conflict) =
        grants.nested_conflict(&crate::ground::config::host_dirs(request.mounts))
    {
        return Err(conflict);
    }
    Ok(format!(
        "{} grant(s); each principal sees only its granted mounts",
        grants.all().len()
    ))
}

/// The OAuth issuer: its discovery document found and naming it, its JWKS fetched and holding
/// at least one signing key, as a start fetches them.
async fn check_oauth_issuer(issuer: &str) -> Result<String, String> {
    use crate::server::http::oauth::keys::Fetcher;
    let fetcher = Fetcher::new().map_err(|error| error.to_string())?;
    let found = fetcher
        .discover(issuer)
        .await
        .map_err(|error| error.to_string())?;
    let keys: jsonwebtoken::jwk::JwkSet = fetcher
        .json(&found.jwks_uri)
        .await
        .map_err(|error| error.to_string())?;
    if keys.keys.is_empty() {
        return Err(format!(
            "the JWKS at {} holds no key: no token could be verified. Check the provider's signing keys",
            found.jwks_uri
        ));
    }
    Ok(format!(
        "discovery at {}, {} key(s) at {}",
        found.document,
        keys.keys.len(),
        found.jwks_uri
    ))
}

/// The audit log: opened (created when missing) as a start opens it.
async fn check_audit(target: &AuditTarget) -> Result<String, String> {
    if let AuditTarget::Sqlite(file) = target
        && !file.exists()
    {
        return check_sqlite_file(file, true).await;
    }
    match AuditLog::open(target, None).await {
        Ok(Some(log)) => Ok(log.describe()),
        Ok(None) => Ok("off".to_owned()),
        Err(error) => Err(format!("{error}. Fix it, or pass --audit off")),
    }
}

/// `execute`'s sandbox: Landlock and namespaces, when asked for.
fn check_exec(mode: ExecMode) -> Result<String, String> {
    match mode {
        ExecMode::Unsandboxed => {
            Ok("commands run with the server's full rights (unsandboxed)".to_owned())
        }
        ExecMode::Sandboxed => match crate::storage::exec::sandbox::probe() {
            Ok(()) => Ok(
                "sandbox available: Landlock and user, mount, PID and IPC namespaces".to_owned(),
            ),
            Err(error) => Err(format!(
                "cannot sandbox commands: {error}. Use a kernel with Landlock (5.13+, enabled in the LSM list) and unprivileged user namespaces, or pass --allow-exec=unsandboxed"
            )),
        },
    }
}
