//! The `mountfs` binary: parse the mount table and flags, open the mounts, serve MCP over stdio.
//! stdout carries only JSON-RPC; logs go to stderr through `tracing` (`RUST_LOG`).

use std::process::ExitCode;

use clap::Parser;
use mountfs::ground::config::{self, MOUNT_GRAMMAR};
use mountfs::server::mounts::MountTable;
use mountfs::state::session::WriteOptions;

/// The mount table used when no --mount is given (CONTRACT §2); `{data}` is the user's data
/// directory.
const DEFAULT_MOUNTS: &[&str] = &[
    "/=disk:.",
    "/memories/=store:sqlite:{data}/mountfs/memories.db",
    "/scratch/=memory",
];

/// [`DEFAULT_MOUNTS`] with the data directory filled in: `$XDG_DATA_HOME` or
/// `~/.local/share` on Linux, `~/Library/Application Support` on macOS, `%APPDATA%` on
/// Windows (the `dirs` crate knows each platform's rule). Without one, `/memories/` is left out
/// with a warning rather than written somewhere surprising.
///
/// The working directory is not mounted when it is the file-system root or the user's home
/// directory (a client that starts servers there would otherwise hand the agent the whole disk
/// or every personal file, writable): then a warning goes to stderr and the instructions say how
/// to mount a directory.
fn default_mounts() -> Vec<String> {
    let data = dirs::data_dir();
    if data.is_none() {
        tracing::warn!("no user data directory found; the default /memories/ mount is left out");
    }
    let unsafe_cwd = unsafe_working_directory();
    if let Some(dir) = &unsafe_cwd {
        let warning = mountfs::unmounted_cwd_warning(dir);
        eprintln!("mountfs: warning: {warning}");
        mountfs::set_startup_note(warning);
    }
    DEFAULT_MOUNTS
        .iter()
        .filter(|mount| unsafe_cwd.is_none() || !mount.contains("disk:."))
        .filter_map(|mount| match (&data, mount.contains("{data}")) {
            (_, false) => Some((*mount).to_owned()),
            (Some(dir), true) => Some(mount.replace("{data}", &dir.to_string_lossy())),
            (None, true) => None,
        })
        .collect()
}

/// The working directory when it must not be the default `/` mount: the file-system root or
/// the user's home directory (compared after resolving symbolic links).
fn unsafe_working_directory() -> Option<std::path::PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let resolved = std::fs::canonicalize(&cwd).unwrap_or_else(|_| cwd.clone());
    let home = dirs::home_dir().map(|home| std::fs::canonicalize(&home).unwrap_or(home));
    (resolved.parent().is_none() || home.as_deref() == Some(resolved.as_path())).then_some(resolved)
}

#[derive(Debug, Parser)]
#[command(
    name = "mountfs",
    version,
    about = "An MCP server (stdio, or Streamable HTTP with --http) giving AI agents one file system made of several stores.",
    after_help = format!("{MOUNT_GRAMMAR}\n\ndefault mount table (when no --mount is given): {}\n  ({{data}} is the user's data directory: $XDG_DATA_HOME or ~/.local/share on Linux)\n  /=disk:. is left out when the working directory is the file-system root or your home\n  directory (a warning says so): give --mount /=disk:DIR to serve a directory there.\n  A client offering MCP roots gets its root directories mounted in place of /=disk:.\n  (one root at /, several at /<root name>/), following roots/list_changed; a root that\n  is the file-system root or your home directory (or holds it) is refused.\n  With --mount, roots are ignored. Over --http, roots are mounted only with\n  --http-roots-under DIR, and only those inside DIR.", DEFAULT_MOUNTS.join(" "))
)]
struct Cli {
    /// A mount, PREFIX=SPEC[,ro][,namespace=NAME][,no-ignore]; repeatable.
    #[arg(long = "mount", value_name = "PREFIX=SPEC", global = true)]
    mounts: Vec<String>,
    /// How to reach a sandbox for shell:NAME:DIR mounts: NAME=COMMAND, COMMAND split into words
    /// as a POSIX shell would (quotes, backslashes; nothing expanded) and run directly; it must
    /// start a POSIX sh reading commands on its standard input in the target, e.g.
    /// dev='ssh -T dev@host sh', ci='docker exec -i runner sh', pod='kubectl exec -i web-0 -- sh'.
    /// Repeatable.
    #[arg(long = "shell", value_name = "NAME=COMMAND", global = true)]
    shells: Vec<String>,

    /// Add a final newline to text files written without one.
    #[arg(long, global = true)]
    ensure_final_newline: bool,

    /// The largest JSON-RPC message read from stdin, in bytes; a longer line is skipped and
    /// answered with error -32600.
    #[arg(long, value_name = "BYTES", default_value_t = mountfs::server::transport::DEFAULT_MAX_MESSAGE_BYTES, global = true)]
    max_message_bytes: usize,

    /// Serve only these tools (comma-separated, e.g. ls,read_file,glob,grep); with ,ro
    /// mounts this makes a read-only server. Unknown names stop start-up. Default: all tools.
    #[arg(long = "tools", value_name = "NAME,NAME,...", global = true)]
    tools: Option<String>,

    /// Offer the `execute` tool (a shell command in a disk mount, or on a shell mount's
    /// target). Commands in a disk mount run sandboxed in their own user, mount, PID and IPC
    /// namespaces with Landlock: the host read-only, the writable disk mounts writable, a
    /// private /tmp, the server's files hidden, nothing left running after the call; where the
    /// kernel lacks Landlock or user namespaces the server refuses to start. Pass
    /// --allow-exec=unsandboxed to run commands with the server's full rights instead. A
    /// command with its cwd in a shell mount runs on that target with the rights of the user
    /// --shell logs in as, never in this sandbox.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "sandboxed", require_equals = true, global = true)]
    allow_exec: Option<mountfs::storage::exec::ExecMode>,

    /// With --allow-exec: a variable commands get beside their minimal environment (PATH, HOME,
    /// USER, LOGNAME, LANG, LC_*, TZ, TMPDIR and the non-interactive ones; never the rest of
    /// the server's environment, such as PGPASSWORD, AWS_* or DATABASE_URL). NAME passes the
    /// server's value, NAME=VALUE sets one; repeatable. Also given to the --shell commands
    /// that reach shell mounts' targets.
    #[arg(long = "exec-env", value_name = "NAME[=VALUE]", global = true)]
    exec_env: Vec<mountfs::storage::exec::env::ExtraVar>,

    /// With --allow-exec on an --http server of several principals (a token file naming more
    /// than one NAME), where commands may read only the system directories (/usr /bin /lib
    /// /etc /opt ...) and the mounts: one more directory they may read, e.g. a toolchain
    /// (~/.cargo, ~/.rustup); repeatable.
    #[arg(long = "exec-read", value_name = "DIR", global = true)]
    exec_read: Vec<std::path::PathBuf>,

    /// Where every change made through the tools is logged: sqlite:FILE, postgres:URL (one
    /// log shared by every instance), or off. Default: sqlite:{data}/mountfs/audit.db, beside
    /// the default /memories/ store. `mountfs log` reads it; the history tool shows it.
    #[arg(long, value_name = "TARGET", global = true)]
    audit: Option<String>,

    /// Delete audit log entries older than DAYS (at start-up, then hourly). Default: keep all.
    #[arg(long, value_name = "DAYS", global = true)]
    audit_keep: Option<u32>,

    /// Changes are logged through a spool file (beside a SQLite log, under the data directory
    /// for a PostgreSQL log) so an edit never waits for the database; while the database does
    /// not answer they wait there, up to this many MiB, and are written when it is back.
    #[arg(long, value_name = "MIB", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    audit_spool_max: u64,

    /// Ask the person before these tools change anything, through MCP elicitation: a message
    /// naming what will happen (paths, how many files, the command and its directory) and a
    /// yes/no form. Tool names (write_file, edit_file, multi_edit, delete, move, undo_edit,
    /// apply_patch, execute, commit, discard: every call) and/or destructive (delete; move and
    /// write_file over an existing file; apply_patch deleting files; commit; discard; execute).
    /// Declined, cancelled, unanswered, or a client without the elicitation capability: the
    /// call changes nothing and says so. On MCP 2026-07-28 (stateless) requests the question
    /// is an input-required result the client answers on its retry.
    #[arg(long = "confirm", value_name = "TOOL,...|destructive", global = true)]
    confirm: Option<String>,

    /// How long a --confirm question waits for the person; unanswered, it counts as declined.
    #[arg(long, value_name = "SECS", default_value_t = mountfs::ground::confirm_policy::DEFAULT_CONFIRM_TIMEOUT_SECS, value_parser = clap::value_parser!(u64).range(1..=86400), global = true)]
    confirm_timeout: u64,

    #[command(subcommand)]
    command: Option<Command>,

    #[command(flatten)]
    limits: mountfs::ground::limits::Limits,

    #[command(flatten)]
    http: mountfs::server::http::HttpArgs,
}

/// What to do instead of serving.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the tool definitions the server would serve with the same flags (--tools,
    /// --allow-exec), for agents that take their tools in a system prompt, and exit.
    Tools {
        /// json: the `tools` array of a tools/list answer; xml: a system-prompt section.
        #[arg(long, value_enum, default_value = "json")]
        format: mountfs::server::prompt::PromptFormat,
        /// With grants (--grant, --grant-file, the token file's): the tools offered to this
        /// principal (an OAuth one as oauth:NAME) — only the reading tools when it may change
        /// no mount.
        #[arg(long, value_name = "NAME")]
        principal: Option<String>,
        /// With --principal: an OAuth scope its token holds (repeatable), for scope: grants.
        #[arg(long = "scope", value_name = "SCOPE", requires = "principal")]
        scopes: Vec<String>,
    },
    /// Check a configuration without serving: give it the flags you serve with (--mount,
    /// --http, --token-file, --audit, --allow-exec). Prints one line per item (each mount
    /// reachable and writable as declared, overlay layer files, token file present and
    /// private, audit log, execute's sandbox) and exits with status 1 at the first failure.
    Check,
    /// Copy a whole tree between two mounts of any kind, byte for byte: SPEC is the right
    /// side of --mount (disk:DIR, store:sqlite:FILE[,namespace=NAME],
    /// store:postgres:URL[,namespace=NAME], shell:NAME:DIR with --shell). Files existing at the
    /// destination are refused unless --overwrite; each file is written whole or not at all,
    /// streamed in 4 MiB chunks (memory does not grow with the file). A progress line shows on
    /// a terminal; exit status 1 with one message at the first failure (2 for a SPEC that does
    /// not parse).
    Cp {
        /// The tree to copy from.
        #[arg(long, value_name = "SPEC")]
        from: String,
        /// The tree to copy into (a directory is created when missing).
        #[arg(long, value_name = "SPEC")]
        to: String,
        /// Replace files that exist at the destination (files only there are left alone).
        #[arg(long)]
        overwrite: bool,
    },
    /// Print the audit log (--audit, or the default file): one line per change, newest first,
    /// like the history tool; --json prints one JSON object per line (for jq).
    Log {
        /// Only changes to this file or under this directory.
        #[arg(long, value_name = "PATH", default_value = "/")]
        path: String,
        /// Only changes at or after TIME: 2026-11-23, 2026-11-23T12:00:00Z, or an age (90m, 6h, 2d).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// At most this many entries, newest first.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        /// Show this one entry in full, with its diff.
        #[arg(long, value_name = "ID")]
        id: Option<i64>,
        /// One JSON object per entry and line, as the history tool's structured result.
        #[arg(long)]
        json: bool,
    },
}

/// At most this many glibc malloc arenas. glibc gives each thread that allocates an arena of
/// its own, up to 8 per core; a burst of concurrent searches (walker and blocking-pool threads)
/// then leaves memory spread over many arenas: ~4.6 MB of a 21.8 MB peak under 16 concurrent
/// greps (issue 6's target is 20 MiB). Two arenas cost no measurable speed on two cores.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: libc::c_int = 2;

/// Allocations of at least this many bytes are mapped on their own and unmapped when freed.
/// glibc's default threshold rises (up to 32 MiB) each time such a block is freed, after which
/// grep's line buffers (up to `--grep-max-line-bytes`) come from the arenas and stay resident
/// when freed: 16 concurrent greps over a 256 MiB line peaked at 111-146 MB instead of ~40 MB.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_MMAP_THRESHOLD: libc::c_int = 1024 * 1024;

fn main() -> ExitCode {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a malloc parameter; it runs first in main, before any other
    // thread exists. A refusal (return 0) leaves glibc's default, which is harmless.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD);
    }
    let cli = Cli::parse();
    mountfs::storage::exec::env::set_extra(cli.exec_env.clone());
    // `cp` speaks to a person at a terminal and says itself what failed: only errors among its
    // logs, so that a failure is the one message it prints (a database's notices, or a
    // warning about the same unwritable directory, would bury it).
    let default_level = if matches!(cli.command, Some(Command::Cp { .. })) {
        "error"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    refuse_inspection();
    if let Some(text) = &cli.tools {
        match mountfs::server::registry::parse_allow_list(text) {
            Ok(names) => mountfs::server::registry::allow_only(names),
            Err(error) => {
                eprintln!("mountfs: {error}");
                return ExitCode::from(2);
            }
        }
    }
    let confirm = match confirm_policy(cli.confirm.as_deref(), cli.confirm_timeout) {
        Ok(policy) => policy,
        Err(error) => {
            eprintln!("mountfs: {error}");
            return ExitCode::from(2);
        }
    };
    let audit_target = match audit_target(cli.audit.as_deref()) {
        Ok(target) => target,
        Err(error) => {
            eprintln!("mountfs: {error}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Some(Command::Tools {
            format,
            ref principal,
            ref scopes,
        }) => {
            let reads_only = match principal {
                None => false,
                Some(name) => match reads_only_for(&cli, name, scopes) {
                    Ok(reads_only) => reads_only,
                    Err(error) => {
                        eprintln!("mountfs: {error}");
                        return ExitCode::from(2);
                    }
                },
            };
            return print_tools(cli.allow_exec, audit_target.is_some(), format, reads_only);
        }
        Some(Command::Log {
            path,
            since,
            limit,
            id,
            json,
        }) => {
            let request = mountfs::storage::audit::cli::LogRequest {
                path,
                since,
                limit,
                id,
                json,
            };
            return print_log(audit_target, cli.audit_keep, &request);
        }
        Some(Command::Check) => {
            return run_check(&cli, audit_target.as_ref(), confirm.as_deref());
        }
        Some(Command::Cp {
            from,
            to,
            overwrite,
        }) => {
            install_recovery_key();
            mountfs::storage::backend::disk::own_files::install(server_files(
                &[],
                audit_target.as_ref(),
                cli.http.token_file.as_deref(),
            ));
            return run_cp(&mountfs::server::cli::cp::CopyRequest {
                from: &from,
                to: &to,
                overwrite,
                shells: &cli.shells,
            });
        }
        None => {}
    }
    if cli.allow_exec == Some(mountfs::storage::exec::ExecMode::Sandboxed)
        && let Err(error) = mountfs::storage::exec::sandbox::probe()
    {
        eprintln!(
            "mountfs: --allow-exec: cannot sandbox commands: {error}. Start without --allow-exec, or pass --allow-exec=unsandboxed to let commands run with the server's full rights"
        );
        return ExitCode::from(2);
    }
    install_recovery_key();
    let default_table = cli.mounts.is_empty();
    let texts: Vec<String> = if default_table {
        default_mounts()
    } else {
        cli.mounts
    };
    let mut specs = match config::parse_table(&texts) {
        Ok(specs) => specs,
        Err(error) => {
            eprintln!("mountfs: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = config::attach_shells(&mut specs, &cli.shells) {
        eprintln!("mountfs: {error}");
        return ExitCode::from(2);
    }
    let runtime = match serving_runtime(cli.http.http.is_some()) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mountfs: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let specs_kept = specs.clone();
    let audit_kept = audit_target.clone();
    runtime.block_on(async {
        let audit = match audit_target {
            Some(target) => match open_audit(&target, cli.audit_keep, cli.audit_spool_max).await {
                Ok(log) => log.map(std::sync::Arc::new),
                Err(error) => {
                    eprintln!("mountfs: {error}");
                    return ExitCode::from(2);
                }
            },
            None => None,
        };
        if let Some(log) = &audit {
            tracing::info!(log = %log.describe(), "audit log on");
            mountfs::storage::audit::spawn_pruning(log);
        }
        let audit_log = audit.clone();
        let memory_budget = cli.limits.memory_budget;
        let table = match MountTable::open(specs).await {
            // Client roots replace the working directory of the default table only: never
            // widen a table the operator gave.
            Ok(table) if default_table => table.follow_client_roots().with_audit(audit),
            Ok(table) => table.with_audit(audit),
            Err(error) => {
                eprintln!("mountfs: {error}");
                return ExitCode::from(2);
            }
        };
        let table = table.with_memory_budget(memory_budget);
        if let Some(log) = &audit_log {
            record_recoveries(log).await;
        }
        let hidden = server_files(
            &specs_kept,
            audit_kept.as_ref(),
            cli.http.token_file.as_deref(),
        );
        // No tool reaches them through a disk mount either (by device and inode).
        mountfs::storage::backend::disk::own_files::install(hidden.clone());
        let options = WriteOptions {
            ensure_final_newline: cli.ensure_final_newline,
            limits: cli.limits,
            exec: cli.allow_exec,
            sandbox: mountfs::storage::exec::namespace::SandboxPolicy {
                hidden: std::sync::Arc::new(hidden),
                reads: None,
            },
            confirm,
        };
        if let Some(policy) = &options.confirm {
            tracing::info!(asks = %policy.describe(), "--confirm: a person confirms changes");
        }
        // Start-up is over once the server serves: its code need not stay resident.
        // (MOUNTFS_KEEP_CODE_PAGES=1 keeps it, to measure the difference: BENCHMARKS.md.)
        if std::env::var_os("MOUNTFS_KEEP_CODE_PAGES").is_none() {
            mountfs::server::cli::code_pages::forget_start_up_code_after(
                mountfs::server::cli::code_pages::AFTER_START,
            );
        }
        let served = if cli.http.http.is_some() {
            serve_http(cli.http, table, options, cli.exec_read).await
        } else {
            tracing::info!(mounts = %table.describe().replace('\n', "; "), "serving MCP on stdio");
            match mountfs::serve_stdio(&table, options, cli.max_message_bytes).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("mountfs: {error}");
                    ExitCode::FAILURE
                }
            }
        };
        if let Some(log) = &audit_log {
            log.drain(AUDIT_DRAIN_WAIT).await;
        }
        served
    })
}

/// Makes the server non-dumpable (attack review of issue 41): another process of its user —
/// a `shell:local` target's command runs unsandboxed as that user — can then neither read
/// `/proc/<server>/environ` or `mem` (its credentials: `PGPASSWORD`, `AWS_SECRET_ACCESS_KEY`,
/// the bearer token) nor ptrace it. Programs the server starts are dumpable again once they
/// execute (the kernel resets it at exec); `execute`'s sandbox makes its namespace's init
/// dumpable only while the maps are written (see `exec::namespace`).
fn refuse_inspection() {
    use rustix::process::{DumpableBehavior, set_dumpable_behavior};
    if let Err(error) = set_dumpable_behavior(DumpableBehavior::NotDumpable) {
        tracing::warn!(%error, "cannot make the server non-dumpable: processes of its user may read its environment");
    }
}

/// Gives the disk mounts the key their recovery records are tagged with (issue 41), from the
/// data directory's `mountfs/recovery.key` (made there on first use; `execute`'s sandbox hides
/// it with the rest of that folder, see [`server_files`]). Without a data directory, or when
/// the key cannot be used, the mounts use a key of this process only: a change a crash cuts
/// short is then left for the operator rather than resolved (the log says so).
fn install_recovery_key() {
    use mountfs::storage::backend::disk::trust::RecoveryKey;
    let Some(data) = dirs::data_dir() else {
        tracing::warn!(
            "no user data directory found; changes of several files cut short by a crash will be left for you to resolve at the next start"
        );
        return;
    };
    match RecoveryKey::in_dir(&data.join("mountfs")) {
        Ok(key) => {
            mountfs::storage::backend::disk::trust::install(key);
        }
        Err(error) => {
            tracing::warn!(%error, "changes of several files cut short by a crash will be left for you to resolve at the next start");
        }
    }
}

/// The server's own files a command of `execute` must not see, nor any tool through a disk
/// mount (`backend::disk::own_files`): the data directory's
/// `mountfs/` (default store, audit log, spools), the SQLite files of store and overlay mounts
/// and of the audit log (with their journals), the audit spool, the token file.
fn server_files(
    specs: &[config::MountSpec],
    audit: Option<&mountfs::storage::audit::AuditTarget>,
    token_file: Option<&std::path::Path>,
) -> Vec<std::path::PathBuf> {
    use mountfs::storage::audit::AuditTarget;
    use std::path::PathBuf;
    let data = dirs::data_dir();
    let mut files: Vec<PathBuf> = Vec::new();
    let mut sqlite = |file: &std::path::Path| {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = file.as_os_str().to_owned();
            name.push(suffix);
            files.push(PathBuf::from(name));
        }
    };
    for spec in specs {
        match &spec.backend {
            config::BackendSpec::Sqlite { file, .. } => sqlite(file),
            config::BackendSpec::Disk {
                overlay: Some(config::OverlaySpec::Sqlite(file)),
                ..
            } => sqlite(file),
            _ => {}
        }
    }
    if let Some(target) = audit {
        if let AuditTarget::Sqlite(file) = target {
            sqlite(file);
        }
        files.extend(mountfs::storage::audit::spool::dir_for(
            target,
            data.as_deref(),
        ));
    }
    files.extend(data.map(|dir| dir.join("mountfs")));
    files.extend(token_file.map(std::path::Path::to_owned));
    files
}

/// The `--confirm` policy (issue 46): the tools it names must change files (or be `execute`).
fn confirm_policy(
    text: Option<&str>,
    timeout_secs: u64,
) -> Result<
    Option<std::sync::Arc<mountfs::ground::confirm_policy::ConfirmPolicy>>,
    mountfs::ground::confirm_policy::ConfirmListError,
> {
    let Some(text) = text else {
        return Ok(None);
    };
    let change_tools: Vec<&str> = mountfs::tools::table::TOOLS
        .iter()
        .filter(|row| row.changes)
        .map(|row| row.name)
        .collect();
    let timeout = std::time::Duration::from_secs(timeout_secs);
    mountfs::ground::confirm_policy::ConfirmPolicy::parse(text, timeout, &change_tools)
        .map(|policy| Some(std::sync::Arc::new(policy)))
}

/// `mountfs check`: the same mount table and flags a start would use, checked item by item.
fn run_check(
    cli: &Cli,
    audit: Option<&mountfs::storage::audit::AuditTarget>,
    confirm: Option<&mountfs::ground::confirm_policy::ConfirmPolicy>,
) -> ExitCode {
    let texts: Vec<String> = if cli.mounts.is_empty() {
        default_mounts()
    } else {
        cli.mounts.clone()
    };
    let mut specs = match config::parse_table(&texts) {
        Ok(specs) => specs,
        Err(error) => {
            println!("FAIL  mount table: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = config::attach_shells(&mut specs, &cli.shells) {
        println!("FAIL  mount table: {error}");
        return ExitCode::FAILURE;
    }
    println!("ok    mount table: {} mount(s)", specs.len());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mountfs: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let own_files = server_files(&specs, audit, cli.http.token_file.as_deref());
    let request = mountfs::server::cli::check::CheckRequest {
        mounts: &specs,
        http: cli.http.http.is_some(),
        token_file: cli.http.token_file.as_deref(),
        oauth_issuer: cli.http.oauth.oauth_issuer.as_deref(),
        exec: cli.allow_exec,
        exec_env: &cli.exec_env,
        audit,
        confirm,
        own_files: &own_files,
        grants: cli.http.grants().map_err(|error| error.to_string()),
    };
    let passed = runtime.block_on(mountfs::server::cli::check::check(&request, |item| {
        println!("{}", item.line());
    }));
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `mountfs cp`: the copy, with a progress line on stderr when it is a terminal and a summary
/// on stdout.
fn run_cp(request: &mountfs::server::cli::cp::CopyRequest<'_>) -> ExitCode {
    use std::io::IsTerminal as _;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("mountfs cp: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut line = std::io::stderr()
        .is_terminal()
        .then(|| mountfs::server::cli::cp::ProgressLine::new(std::io::stderr(), terminal_width()));
    // SIGINT/SIGTERM stop the copy between two chunks, so the upload in flight is aborted (its
    // temporary file removed); a second one exits at once.
    let stop = tokio_util::sync::CancellationToken::new();
    runtime.spawn(stop_on_signals(stop.clone()));
    let copied = runtime.block_on(mountfs::server::cli::cp::copy_until(
        request,
        |progress| {
            if let Some(line) = &mut line {
                line.update(progress);
            }
        },
        &stop,
    ));
    if let Some(line) = &mut line {
        line.finish();
    }
    match copied {
        Ok(summary) => {
            for text in summary.lines(request) {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("mountfs cp: {error}");
            if error.is_usage() {
                ExitCode::from(2)
            } else if error.is_interrupted() {
                ExitCode::from(130)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Cancels `stop` at the first SIGINT or SIGTERM (`mountfs cp` then ends between two chunks,
/// aborting its upload); exits with status 130 at the second.
async fn stop_on_signals(stop: tokio_util::sync::CancellationToken) {
    shutdown_signal().await;
    stop.cancel();
    shutdown_signal().await;
    eprintln!(
        "\nmountfs cp: interrupted twice: quit at once; the temporary file of the file in flight may stay at the destination"
    );
    std::process::exit(130);
}

/// The width of the terminal on stderr, 80 when it cannot be told.
fn terminal_width() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which points at one.
    let answered = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) };
    if answered == 0 && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}

/// Records in the audit log each change a crash cut short that opening the mounts resolved
/// (rolled back, or completed when it had been decided): its call never answered, so this is
/// the only entry it gets.
async fn record_recoveries(log: &mountfs::storage::audit::AuditLog) {
    for one in mountfs::server::mounts::take_recoveries() {
        let change = mountfs::observers::audit_record::recovery_change(
            one.tool,
            &one.prefix,
            &one.paths,
            one.rolled_back,
        );
        if let Err(error) = log.record(&change).await {
            tracing::warn!(%error, tool = one.tool, mount = %one.prefix, "a change resolved at start could not be written to the audit log");
        }
    }
}

/// How long a server that stops waits for its logged changes to reach the audit database
/// (what does not, stays in the spool for the next server).
const AUDIT_DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the audit log with its spool (`mountfs::storage::audit::spool`).
async fn open_audit(
    target: &mountfs::storage::audit::AuditTarget,
    keep_days: Option<u32>,
    spool_max_mib: u64,
) -> Result<Option<mountfs::storage::audit::AuditLog>, mountfs::storage::audit::AuditError> {
    let Some(log) = mountfs::storage::audit::AuditLog::open(target, keep_days).await? else {
        return Ok(None);
    };
    let Some(dir) = mountfs::storage::audit::spool::dir_for(target, dirs::data_dir().as_deref())
    else {
        return Ok(Some(log));
    };
    log.with_spool(&dir, spool_max_mib * 1024 * 1024).map(Some)
}

/// Where the audit log is (`--audit`, else the default file in the data directory); `None`:
/// off. Without a data directory the default log is left out with a warning.
fn audit_target(
    flag: Option<&str>,
) -> Result<Option<mountfs::storage::audit::AuditTarget>, mountfs::storage::audit::AuditError> {
    use mountfs::storage::audit::{AuditError, AuditTarget};
    let target = match flag {
        Some(text) => AuditTarget::parse(text)?,
        None => match AuditTarget::default_in(dirs::data_dir().as_deref()) {
            Ok(target) => target,
            Err(AuditError::NoDataDir) => {
                tracing::warn!(
                    "no user data directory found; the audit log is off (give --audit sqlite:FILE to keep one)"
                );
                AuditTarget::Off
            }
            Err(error) => return Err(error),
        },
    };
    Ok((target != AuditTarget::Off).then_some(target))
}

/// The runtime a server runs on. Over HTTP, many clients: a worker thread per core. Over stdio,
/// one client, most often at an agent's pace (a call, then the model thinks): one worker thread
/// does the async work, so a call arriving at an idle server wakes that one thread; with more,
/// every task spawned while one runs wakes another worker to steal it, which finds nothing
/// and sleeps again (issue 31: twice the thread wake-ups per call). What is heavy — searches,
/// file-system work beyond a small read, SQLite, commands — runs on the blocking pool either way.
fn serving_runtime(http: bool) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if !http {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

/// `mountfs log`: the audit log on stdout.
fn print_log(
    target: Option<mountfs::storage::audit::AuditTarget>,
    keep_days: Option<u32>,
    request: &mountfs::storage::audit::cli::LogRequest,
) -> ExitCode {
    let output = tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
        .and_then(|runtime| {
            runtime
                .block_on(mountfs::storage::audit::cli::log_output(
                    target, keep_days, request,
                ))
                .map_err(|e| e.to_string())
        });
    print_output(output, "the log")
}

/// `mountfs tools --principal NAME`: whether the grants let NAME change no mount (it is then
/// offered the reading tools only, as `tools/list` does).
fn reads_only_for(cli: &Cli, name: &str, scopes: &[String]) -> Result<bool, String> {
    let grants = cli.http.grants().map_err(|e| e.to_string())?;
    let texts: Vec<String> = if cli.mounts.is_empty() {
        default_mounts()
    } else {
        cli.mounts.clone()
    };
    let prefixes: Vec<_> = config::parse_table(&texts)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|spec| spec.prefix)
        .collect();
    let scopes = (!scopes.is_empty()).then_some(scopes);
    Ok(grants
        .view(name, scopes, &prefixes)
        .is_some_and(|view| !view.writes_anywhere()))
}

/// `mountfs tools`: the tool definitions on stdout.
fn print_tools(
    exec: Option<mountfs::storage::exec::ExecMode>,
    audit: bool,
    format: mountfs::server::prompt::PromptFormat,
    reads_only: bool,
) -> ExitCode {
    let printed = mountfs::server::registry::Registry::load_for(exec, audit)
        .map(|registry| {
            if reads_only {
                registry.reading_tools()
            } else {
                registry
            }
        })
        .map_err(|e| e.to_string())
        .and_then(|registry| {
            mountfs::server::prompt::tools_prompt(&registry, format).map_err(|e| e.to_string())
        });
    print_output(printed, "the tool definitions")
}

/// Writes a command's `output` (`what` names it) to stdout, or its error to stderr.
fn print_output(output: Result<String, String>, what: &str) -> ExitCode {
    match output {
        Ok(text) => {
            use std::io::Write as _;
            match std::io::stdout().lock().write_all(text.as_bytes()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("mountfs: cannot write {what}: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) => {
            eprintln!("mountfs: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `--http`: binds, shows a generated token's client configuration once, serves until SIGTERM
/// or Ctrl-C.
async fn serve_http(
    args: mountfs::server::http::HttpArgs,
    table: MountTable,
    mut options: WriteOptions,
    exec_read: Vec<std::path::PathBuf>,
) -> ExitCode {
    let env_token = std::env::var(mountfs::server::http::auth::TOKEN_ENV).ok();
    // With grants even one principal must not read, through a command, the host directories of
    // mounts it is not granted (attack review of issue 43); a grant error stops `bind` below.
    let granted = args.grants().is_ok_and(|grants| !grants.is_empty());
    let server = match mountfs::server::http::HttpServer::bind(args, env_token).await {
        Ok(server) => server,
        Err(error) => {
            eprintln!("mountfs: {error}");
            return ExitCode::from(2);
        }
    };
    if server.principal_count() > 1 || granted {
        // Commands of one principal must not read another's files, nor of ungranted mounts:
        // only what a build needs.
        options.sandbox.reads = Some(std::sync::Arc::new(exec_read));
        if options.exec == Some(mountfs::storage::exec::ExecMode::Sandboxed) {
            tracing::info!(
                "several principals or grants: execute's commands may read only the system directories, the granted mounts and --exec-read directories"
            );
        }
    }
    if let Some(config) = server.generated_client_config() {
        // Printed once, for the operator's eyes, never through the log.
        eprintln!(
            "mountfs: no --token-file or {} given; generated a token for this run (loopback only).\nmountfs: client configuration (mcp.json):\n{config}",
            mountfs::server::http::auth::TOKEN_ENV
        );
    }
    match server.url() {
        Ok(url) => eprintln!("mountfs: serving MCP on {url}"),
        Err(error) => {
            eprintln!("mountfs: {error}");
            return ExitCode::FAILURE;
        }
    }
    tracing::info!(mounts = %table.describe().replace('\n', "; "), "mounts");
    match server.serve(table, options, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("mountfs: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGTERM (how service managers and orchestrators stop a server) or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot watch for SIGTERM; only Ctrl-C stops the server gracefully");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown signal received");
}
