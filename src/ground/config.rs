//! The mount grammar (CONTRACT §2): `--mount PREFIX=SPEC` text → validated [`MountSpec`]s.
//!
//! ```text
//! PREFIX=SPEC[,ro][,namespace=NAME][,no-ignore][,overlay[=sqlite:FILE]]
//! SPEC  = memory | disk:DIR | store:sqlite:FILE | store:postgres:URL | shell:NAME:DIR
//!       | object:s3://BUCKET[/KEYPREFIX] (also gs://, az://)[,endpoint=URL][,region=R][,allow_http]
//! ```
//! A `shell:NAME:DIR` mount names a sandbox given by `--shell NAME=COMMAND` ([`parse_shell`],
//! [`attach_shells`]): COMMAND is split as a POSIX shell splits words, nothing expanded.
//! Prefixes are normalised to `/x/` form; two mounts at one prefix is an error. Building the
//! backends from specs is `mounts.rs`'s job; this module only parses.

use std::path::PathBuf;

use thiserror::Error;

use crate::ground::path::VirtualPath;

/// The grammar, shown with every mount error and in `--help`.
pub const MOUNT_GRAMMAR: &str = "\
mount grammar: --mount PREFIX=SPEC[,ro][,namespace=NAME][,no-ignore][,overlay[=sqlite:FILE]]
  SPEC is one of:
    memory                  per-session scratch files, gone when the session ends
    disk:DIR                a real directory (DIR relative to the working directory)
    store:sqlite:FILE       files persisted in an embedded SQLite database
    store:postgres:URL      files persisted in PostgreSQL (shared by many servers)
    shell:NAME:DIR          the absolute directory DIR inside a container or remote machine,
                            reached through one long-lived sh started by --shell NAME=COMMAND
                            (e.g. --shell dev='ssh -T dev@host sh' --mount /dev/=shell:dev:/srv/app)
    object:s3://BUCKET[/KEYPREFIX]  keys under a bucket prefix (also gs://, az://CONTAINER);
                            credentials from the cloud's standard environment (AWS_ACCESS_KEY_ID,
                            GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME, ...), never
                            the command line; options endpoint=URL, region=R, allow_http
  options: ro (read-only), namespace=NAME (stores only), no-ignore (disk: ignore .gitignore),
    overlay (disk: changes go to a per-workspace layer, reviewed with changes/commit/discard;
    overlay=sqlite:FILE keeps the layers in FILE across restarts)
  examples: --mount /=disk:. --mount /memories/=store:sqlite:mem.db --mount /scratch/=memory
    --mount /=disk:.,overlay";

/// A mount spec that could not be parsed. Display quotes it and shows the grammar.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid mount '{spec}': {reason}\n{MOUNT_GRAMMAR}")]
pub struct MountError {
    /// The text as given.
    pub spec: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Which backend a mount uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSpec {
    /// Per-session memory.
    Memory,
    /// A directory on disk.
    Disk {
        /// The directory, as given.
        dir: PathBuf,
        /// Do not honour `.gitignore` in glob/grep.
        no_ignore: bool,
        /// Keep changes in a per-workspace layer instead of writing the directory.
        overlay: Option<OverlaySpec>,
    },
    /// An SQLite store file.
    Sqlite {
        /// The database file, as given.
        file: PathBuf,
        /// The namespace inside the store.
        namespace: String,
    },
    /// A directory inside a target reached through a long-lived POSIX `sh` (issue 27).
    Shell {
        /// The name of the `--shell NAME=COMMAND` that reaches the target.
        name: String,
        /// The absolute directory in the target.
        dir: String,
        /// The command's words, filled in from `--shell` by [`attach_shells`] (empty until then).
        command: Vec<String>,
    },
    /// Keys under a bucket prefix of S3, GCS or Azure, through `object_store` (issue 44).
    Object(ObjectSpec),
    /// A PostgreSQL store.
    Postgres {
        /// The connection URL.
        url: String,
        /// The namespace inside the store.
        namespace: String,
    },
}

/// Which cloud's API an object mount speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectCloud {
    /// Amazon S3 and S3-compatible servers (MinIO, R2, a local emulator): `s3://`.
    S3,
    /// Google Cloud Storage: `gs://`.
    Gcs,
    /// Azure Blob Storage: `az://CONTAINER`.
    Azure,
}

impl ObjectCloud {
    /// The URL scheme (`s3`, `gs`, `az`).
    pub fn scheme(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gcs => "gs",
            Self::Azure => "az",
        }
    }
}

/// An object mount: `object:s3://BUCKET[/KEYPREFIX]` and its options. Credentials are never
/// part of it: they come from the cloud's standard environment when the mount is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSpec {
    /// Which cloud.
    pub cloud: ObjectCloud,
    /// The bucket (Azure: the container).
    pub bucket: String,
    /// The key prefix under which the mount's files lie, without slashes at its ends (`""`:
    /// the whole bucket).
    pub key_prefix: String,
    /// `endpoint=URL`: an S3-compatible server, an emulator (else the environment's).
    pub endpoint: Option<String>,
    /// `region=R` (else the environment's).
    pub region: Option<String>,
    /// `allow_http`: plain HTTP to the endpoint (a local server).
    pub allow_http: bool,
}

impl ObjectSpec {
    /// `s3://BUCKET/KEYPREFIX`, as errors name the mount.
    pub fn url(&self) -> String {
        let scheme = self.cloud.scheme();
        if self.key_prefix.is_empty() {
            format!("{scheme}://{}", self.bucket)
        } else {
            format!("{scheme}://{}/{}", self.bucket, self.key_prefix)
        }
    }
}

/// Parses `s3://BUCKET[/KEYPREFIX]` (also `gs://`, `az://`) with the options peeled off.
fn parse_object(
    url: &str,
    endpoint: Option<String>,
    region: Option<String>,
    allow_http: bool,
) -> Result<ObjectSpec, String> {
    let (cloud, rest) = if let Some(rest) = url.strip_prefix("s3://") {
        (ObjectCloud::S3, rest)
    } else if let Some(rest) = url.strip_prefix("gs://") {
        (ObjectCloud::Gcs, rest)
    } else if let Some(rest) = url.strip_prefix("az://") {
        (ObjectCloud::Azure, rest)
    } else {
        return Err(format!(
            "object: needs s3://BUCKET[/KEYPREFIX], gs://BUCKET[/KEYPREFIX] or az://CONTAINER[/KEYPREFIX] (got '{url}')"
        ));
    };
    let (bucket, key_prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let valid_bucket = !bucket.is_empty()
        && bucket.len() <= 255
        && bucket
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid_bucket {
        return Err(format!(
            "bucket '{bucket}' is not valid: use letters, digits, '-', '_' or '.'"
        ));
    }
    let key_prefix = key_prefix.trim_matches('/');
    if !key_prefix.is_empty() {
        for segment in key_prefix.split('/') {
            if segment.is_empty() || segment == "." || segment == ".." {
                return Err(format!(
                    "key prefix '{key_prefix}' is not valid: no empty, '.' or '..' segment"
                ));
            }
            if segment.chars().any(char::is_control) {
                return Err(format!(
                    "key prefix '{key_prefix}' is not valid: it holds a control character"
                ));
            }
        }
    }
    if let Some(endpoint) = &endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        return Err(format!(
            "endpoint '{endpoint}' is not a URL: write endpoint=https://HOST[:PORT]"
        ));
    }
    if let Some(endpoint) = &endpoint
        && endpoint.contains('@')
    {
        return Err(
            "endpoint= may not carry credentials; they come from the environment only".into(),
        );
    }
    Ok(ObjectSpec {
        cloud,
        bucket: bucket.to_owned(),
        key_prefix: key_prefix.to_owned(),
        endpoint,
        region,
        allow_http,
    })
}

/// Where an overlay mount keeps its layers (`,overlay` / `,overlay=sqlite:FILE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlaySpec {
    /// In memory: a workspace's layer ends with it.
    Memory,
    /// In a SQLite file, one layer per workspace name, kept across restarts.
    Sqlite(PathBuf),
}

/// One parsed mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// Where it is mounted.
    pub prefix: VirtualPath,
    /// What serves it.
    pub backend: BackendSpec,
    /// Refuse writes.
    pub read_only: bool,
}

impl MountSpec {
    /// The prefix as users see it: `/` or `/x/`.
    pub fn display_prefix(&self) -> String {
        display_prefix(&self.prefix)
    }
}

/// `/` → `/`, `/x` → `/x/`.
pub fn display_prefix(prefix: &VirtualPath) -> String {
    if prefix.is_root() {
        "/".to_owned()
    } else {
        format!("{prefix}/")
    }
}

/// The default namespace of a store mount.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The environment variable holding the one token of a single-principal HTTP server (read by
/// `http::auth`, withheld from `execute`'s commands by `exec::env`).
pub const TOKEN_ENV: &str = "MOUNTFS_TOKEN";

/// Whether a namespace name is acceptable: 1–64 of `[A-Za-z0-9_.-]`, not starting with `.`.
pub fn valid_namespace(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Parses one `PREFIX=SPEC[,options]`.
pub fn parse_mount(text: &str) -> Result<MountSpec, MountError> {
    let fail = |reason: &str| MountError {
        spec: text.to_owned(),
        reason: reason.to_owned(),
    };
    let (prefix_text, rest) = text
        .split_once('=')
        .ok_or_else(|| fail("expected PREFIX=SPEC (no '=' found)"))?;
    if !prefix_text.starts_with('/') {
        return Err(fail(
            "the prefix must be an absolute virtual path such as / or /memories/",
        ));
    }
    let prefix = VirtualPath::parse(prefix_text).map_err(|e| fail(&format!("bad prefix: {e}")))?;

    // Options are trailing comma-separated words; peel known ones off the end so that a DIR or
    // URL may itself contain commas.
    let mut body = rest;
    let mut read_only = false;
    let mut namespace: Option<String> = None;
    let mut no_ignore = false;
    let mut overlay: Option<OverlaySpec> = None;
    let mut endpoint: Option<String> = None;
    let mut region: Option<String> = None;
    let mut allow_http = false;
    while let Some((head, option)) = body.rsplit_once(',') {
        match option {
            "ro" => read_only = true,
            "allow_http" => allow_http = true,
            _ if option.starts_with("endpoint=") => {
                endpoint = Some(option["endpoint=".len()..].to_owned());
            }
            _ if option.starts_with("region=") => {
                let name = &option["region=".len()..];
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(fail(&format!(
                        "region '{name}' is not valid: use letters, digits, '-' or '_' (e.g. region=eu-west-1)"
                    )));
                }
                region = Some(name.to_owned());
            }
            "no-ignore" => no_ignore = true,
            "overlay" => overlay = Some(OverlaySpec::Memory),
            _ if option.starts_with("overlay=") => {
                let Some(file) = option["overlay=".len()..].strip_prefix("sqlite:") else {
                    return Err(fail(
                        "overlay= takes sqlite:FILE (e.g. overlay=sqlite:layers.db), or write overlay alone for layers in memory",
                    ));
                };
                if file.is_empty() {
                    return Err(fail(
                        "overlay=sqlite: needs a database file, e.g. overlay=sqlite:layers.db",
                    ));
                }
                overlay = Some(OverlaySpec::Sqlite(PathBuf::from(file)));
            }
            _ if option.starts_with("namespace=") => {
                let name = &option["namespace=".len()..];
                if !valid_namespace(name) {
                    return Err(fail(&format!(
                        "namespace '{name}' is not valid: use 1-64 letters, digits, '_', '-' or '.'"
                    )));
                }
                namespace = Some(name.to_owned());
            }
            _ if option
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-') =>
            {
                return Err(fail(&format!(
                    "unknown option '{option}' (known: ro, namespace=NAME, no-ignore, overlay, overlay=sqlite:FILE, endpoint=URL, region=R, allow_http)"
                )));
            }
            _ => break,
        }
        body = head;
    }

    let backend = if body == "memory" {
        BackendSpec::Memory
    } else if let Some(dir) = body.strip_prefix("disk:") {
        if dir.is_empty() {
            return Err(fail("disk: needs a directory, e.g. disk:."));
        }
        BackendSpec::Disk {
            dir: PathBuf::from(dir),
            no_ignore,
            overlay: overlay.clone(),
        }
    } else if let Some(file) = body.strip_prefix("store:sqlite:") {
        if file.is_empty() {
            return Err(fail(
                "store:sqlite: needs a database file, e.g. store:sqlite:memories.db",
            ));
        }
        BackendSpec::Sqlite {
            file: PathBuf::from(file),
            namespace: namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
        }
    } else if let Some(rest) = body.strip_prefix("shell:") {
        let Some((name, dir)) = rest.split_once(':') else {
            return Err(fail(
                "shell: needs NAME:DIR, e.g. shell:dev:/srv/app (with --shell dev='ssh -T dev@host sh')",
            ));
        };
        if !valid_shell_name(name) {
            return Err(fail(&format!(
                "shell name '{name}' is not valid: use 1-64 letters, digits, '_', '-' or '.'"
            )));
        }
        if !dir.starts_with('/') {
            return Err(fail(&format!(
                "shell:{name}: DIR must be an absolute directory in the target, e.g. /srv/app (got '{dir}')"
            )));
        }
        if dir.contains('\n') || dir.contains('\0') {
            return Err(fail("shell: DIR may not contain a newline or NUL"));
        }
        BackendSpec::Shell {
            name: name.to_owned(),
            dir: dir.to_owned(),
            command: Vec::new(),
        }
    } else if let Some(url) = body.strip_prefix("object:") {
        BackendSpec::Object(
            parse_object(url, endpoint.clone(), region.clone(), allow_http)
                .map_err(|reason| fail(&reason))?,
        )
    } else if let Some(url) = body.strip_prefix("store:postgres:") {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(fail(
                "store:postgres: needs a URL such as postgres://user@host:5432/db",
            ));
        }
        BackendSpec::Postgres {
            url: url.to_owned(),
            namespace: namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned()),
        }
    } else {
        return Err(fail(&format!("unknown backend '{body}'")));
    };
    if namespace.is_some()
        && !matches!(
            backend,
            BackendSpec::Sqlite { .. } | BackendSpec::Postgres { .. }
        )
    {
        return Err(fail("namespace= applies only to store mounts"));
    }
    if (endpoint.is_some() || region.is_some() || allow_http)
        && !matches!(backend, BackendSpec::Object(_))
    {
        return Err(fail(
            "endpoint=, region= and allow_http apply only to object mounts",
        ));
    }
    if no_ignore && !matches!(backend, BackendSpec::Disk { .. }) {
        return Err(fail("no-ignore applies only to disk mounts"));
    }
    if overlay.is_some() && !matches!(backend, BackendSpec::Disk { .. }) {
        return Err(fail("overlay applies only to disk mounts"));
    }
    if overlay.is_some() && read_only {
        return Err(fail(
            "overlay and ro exclude each other: an overlay mount takes changes into its layer",
        ));
    }
    Ok(MountSpec {
        prefix,
        backend,
        read_only,
    })
}

/// Whether a `--shell` name is acceptable: the same rule as a namespace.
pub fn valid_shell_name(name: &str) -> bool {
    valid_namespace(name)
}

/// A `--shell NAME=COMMAND` that could not be parsed or used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid --shell '{text}': {reason}\n  grammar: --shell NAME=COMMAND, COMMAND starting a POSIX sh that reads commands on its standard input in the target, e.g. --shell dev='ssh -T dev@host sh', --shell ci='docker exec -i runner sh', --shell pod='kubectl exec -i web-0 -- sh', --shell local=sh"
)]
pub struct ShellError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

/// One `--shell NAME=COMMAND`: the name and the command's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellDef {
    /// The name mounts use (`shell:NAME:DIR`).
    pub name: String,
    /// The program and its arguments, split as a POSIX shell would, nothing expanded.
    pub command: Vec<String>,
}

/// Parses one `--shell NAME=COMMAND`.
pub fn parse_shell(text: &str) -> Result<ShellDef, ShellError> {
    let fail = |reason: String| ShellError {
        text: text.to_owned(),
        reason,
    };
    let (name, command) = text
        .split_once('=')
        .ok_or_else(|| fail("expected NAME=COMMAND (no '=' found)".to_owned()))?;
    if !valid_shell_name(name) {
        return Err(fail(format!(
            "the name '{name}' is not valid: use 1-64 letters, digits, '_', '-' or '.'"
        )));
    }
    let words =
        crate::ground::text::shell_words::split(command).map_err(|e| fail(e.to_string()))?;
    if words.is_empty() {
        return Err(fail("the command is empty".to_owned()));
    }
    Ok(ShellDef {
        name: name.to_owned(),
        command: words,
    })
}

/// Fills the command of every `shell:NAME:DIR` mount in `specs` from the `--shell` texts,
/// refusing a name given twice and a mount naming a shell nobody gave.
pub fn attach_shells<S: AsRef<str>>(
    specs: &mut [MountSpec],
    shells: &[S],
) -> Result<(), ShellError> {
    let mut defs: Vec<ShellDef> = Vec::new();
    for text in shells {
        let def = parse_shell(text.as_ref())?;
        if defs.iter().any(|d| d.name == def.name) {
            return Err(ShellError {
                text: text.as_ref().to_owned(),
                reason: format!("the name '{}' is given twice", def.name),
            });
        }
        defs.push(def);
    }
    for spec in specs.iter_mut() {
        let prefix = spec.display_prefix();
        if let BackendSpec::Shell { name, command, .. } = &mut spec.backend {
            let Some(def) = defs.iter().find(|d| d.name == *name) else {
                return Err(ShellError {
                    text: format!("{prefix}=shell:{name}:…"),
                    reason: format!(
                        "no --shell {name}=COMMAND was given; add one saying how to reach the target"
                    ),
                });
            };
            command.clone_from(&def.command);
        }
    }
    Ok(())
}

/// Parses a whole table, refusing two mounts at one prefix.
pub fn parse_table<S: AsRef<str>>(texts: &[S]) -> Result<Vec<MountSpec>, MountError> {
    let mut specs: Vec<MountSpec> = Vec::new();
    for text in texts {
        let spec = parse_mount(text.as_ref())?;
        if specs.iter().any(|s| s.prefix == spec.prefix) {
            return Err(MountError {
                spec: text.as_ref().to_owned(),
                reason: format!("two mounts at prefix {}", spec.display_prefix()),
            });
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// The host directories of the disk mounts of `specs` (overlays included: they read theirs),
/// made canonical where they exist, for [`crate::ground::grants::Grants::nested_conflict`].
pub fn host_dirs(specs: &[MountSpec]) -> Vec<(VirtualPath, PathBuf)> {
    specs
        .iter()
        .filter_map(|spec| match &spec.backend {
            BackendSpec::Disk { dir, .. } => {
                let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
                Some((spec.prefix.clone(), dir))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_normalised() {
        let spec = parse_mount("/scratch=memory").unwrap();
        assert_eq!(spec.display_prefix(), "/scratch/");
        let spec = parse_mount("//a//b/=memory,ro").unwrap();
        assert_eq!(spec.display_prefix(), "/a/b/");
        assert!(spec.read_only);
    }

    #[test]
    fn every_backend_kind_parses() {
        assert_eq!(
            parse_mount("/=disk:.,no-ignore").unwrap().backend,
            BackendSpec::Disk {
                dir: PathBuf::from("."),
                no_ignore: true,
                overlay: None,
            }
        );
        assert_eq!(
            parse_mount("/=disk:.,overlay").unwrap().backend,
            BackendSpec::Disk {
                dir: PathBuf::from("."),
                no_ignore: false,
                overlay: Some(OverlaySpec::Memory),
            }
        );
        assert_eq!(
            parse_mount("/=disk:src,no-ignore,overlay=sqlite:/tmp/layers.db")
                .unwrap()
                .backend,
            BackendSpec::Disk {
                dir: PathBuf::from("src"),
                no_ignore: true,
                overlay: Some(OverlaySpec::Sqlite(PathBuf::from("/tmp/layers.db"))),
            }
        );
        assert_eq!(
            parse_mount("/m/=store:sqlite:x.db,namespace=team-1")
                .unwrap()
                .backend,
            BackendSpec::Sqlite {
                file: PathBuf::from("x.db"),
                namespace: "team-1".into()
            }
        );
        let pg = parse_mount("/m/=store:postgres:postgres://u@h:5432/db,ro").unwrap();
        assert!(pg.read_only);
        assert!(
            matches!(pg.backend, BackendSpec::Postgres { ref url, .. } if url == "postgres://u@h:5432/db")
        );
    }

    #[test]
    fn object_mounts_parse_with_their_options_and_refuse_escapes() {
        let spec = parse_mount(
            "/b/=object:s3://team-bucket/docs/2026/,ro,endpoint=http://127.0.0.1:9000,region=eu-west-1,allow_http",
        )
        .unwrap();
        assert!(spec.read_only);
        let BackendSpec::Object(object) = spec.backend else {
            panic!("an object mount")
        };
        assert_eq!(
            object,
            ObjectSpec {
                cloud: ObjectCloud::S3,
                bucket: "team-bucket".into(),
                key_prefix: "docs/2026".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                allow_http: true,
            }
        );
        assert_eq!(object.url(), "s3://team-bucket/docs/2026");
        let BackendSpec::Object(gcs) = parse_mount("/g/=object:gs://b").unwrap().backend else {
            panic!("an object mount")
        };
        assert_eq!(
            (gcs.cloud, gcs.url()),
            (ObjectCloud::Gcs, "gs://b".to_owned())
        );
        let reason = |text: &str| parse_mount(text).unwrap_err().reason;
        assert_eq!(
            reason("/b/=object:s3://b/a/../c"),
            "key prefix 'a/../c' is not valid: no empty, '.' or '..' segment"
        );
        assert_eq!(
            reason("/b/=object:s3://b/a//c"),
            "key prefix 'a//c' is not valid: no empty, '.' or '..' segment"
        );
        assert_eq!(
            reason("/b/=object:s3://"),
            "bucket '' is not valid: use letters, digits, '-', '_' or '.'"
        );
        assert_eq!(
            reason("/b/=object:s3://b,endpoint=http://key:secret@host"),
            "endpoint= may not carry credentials; they come from the environment only"
        );
        assert_eq!(
            reason("/b/=object:ftp://b"),
            "object: needs s3://BUCKET[/KEYPREFIX], gs://BUCKET[/KEYPREFIX] or az://CONTAINER[/KEYPREFIX] (got 'ftp://b')"
        );
        assert_eq!(
            reason("/d/=disk:.,allow_http"),
            "endpoint=, region= and allow_http apply only to object mounts"
        );
    }

    #[test]
    fn bad_specs_quote_the_input_and_show_the_grammar() {
        for bad in [
            "memory",
            "scratch=memory",
            "/x=floppy",
            "/x=memory,bogus",
            "/x=disk:",
            "/x=memory,namespace=a",
            "/x=memory,overlay",
            "/x=disk:.,overlay=postgres:x",
            "/x=shell:dev",
            "/x=shell:dev:relative/dir",
            "/x=shell:bad name:/srv",
            "/x=shell:dev:/srv,namespace=a",
            "/x=disk:.,overlay,ro",
            "/x=store:sqlite:f,namespace=bad name",
            "/a/../b=memory",
        ] {
            let err = parse_mount(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid mount '{bad}': ")),
                "{err}"
            );
            assert!(err.contains("mount grammar: --mount PREFIX=SPEC"), "{err}");
        }
    }

    #[test]
    fn shell_mounts_take_their_command_from_the_named_shell() {
        let mut specs = parse_table(&["/dev/=shell:dev:/srv/my app,ro"]).unwrap();
        assert!(specs[0].read_only);
        attach_shells(&mut specs, &["dev=ssh -T 'dev@host' sh"]).unwrap();
        assert_eq!(
            specs[0].backend,
            BackendSpec::Shell {
                name: "dev".into(),
                dir: "/srv/my app".into(),
                command: vec!["ssh".into(), "-T".into(), "dev@host".into(), "sh".into()],
            }
        );
        let mut specs = parse_table(&["/d/=shell:nobody:/srv"]).unwrap();
        let err = attach_shells(&mut specs, &["dev=sh"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("no --shell nobody=COMMAND was given"), "{err}");
        let err = attach_shells(&mut [], &["a=sh", "a=bash"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("given twice"), "{err}");
        for bad in ["nameless", "=sh", "x=", "x='sh", "bad name=sh"] {
            let err = parse_shell(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid --shell '{bad}': ")),
                "{err}"
            );
        }
    }

    #[test]
    fn duplicate_prefixes_are_refused() {
        let err = parse_table(&["/x=memory", "/x/=memory"]).unwrap_err();
        assert!(err.reason.contains("two mounts at prefix /x/"));
    }
}
