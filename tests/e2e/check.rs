//! `mountfs check` (issue 30): a configuration checked without serving, one line per item,
//! exit status 1 at the first failure, with what was wrong and how to fix it — a test for each
//! failure it names: a bad mount table, a missing directory, a directory mounted writable that
//! the user cannot write, a SQLite file that is not a database, PostgreSQL not answering, a token
//! file missing or readable by others; and a configuration that passes, Landlock included.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

use crate::support::postgres_url;

/// `mountfs check ARGS` (as user `uid` when given): exit status and stdout lines.
fn check_as(uid: Option<u32>, args: &[String]) -> (i32, Vec<String>) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_mountfs"));
    command.arg("check").args(args).arg("--audit").arg("off");
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let output = command.output().unwrap();
    let lines = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    (output.status.code().unwrap_or(-1), lines)
}

fn check(args: &[String]) -> (i32, Vec<String>) {
    check_as(None, args)
}

fn mount(spec: String) -> Vec<String> {
    vec!["--mount".to_owned(), spec]
}

/// The last line, which must be the one failure, naming `what` and saying `fix`.
fn assert_fails(outcome: &(i32, Vec<String>), what: &str, fix: &str) {
    let (code, lines) = outcome;
    assert_eq!(*code, 1, "{lines:?}");
    let last = lines.last().unwrap();
    assert!(last.starts_with(&format!("FAIL  {what}")), "{lines:?}");
    assert!(last.contains(fix), "{last}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("FAIL")).count(),
        1,
        "the check stops at the first failure: {lines:?}"
    );
}

#[test]
fn a_good_configuration_passes_item_by_item() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("d")).unwrap();
    let d = dir.path().join("d").display().to_string();
    let mut args = mount(format!("/=disk:{d}"));
    args.extend(mount(format!(
        "/m/=store:sqlite:{}",
        dir.path().join("s.db").display()
    )));
    args.extend(mount(format!(
        "/o=disk:{d},overlay=sqlite:{}",
        dir.path().join("l.db").display()
    )));
    args.extend(mount("/scratch/=memory".to_owned()));
    args.push("--allow-exec".to_owned());
    let (code, lines) = check(&args);
    assert_eq!(code, 0, "{lines:?}");
    let expected = [
        "ok    mount table: 4 mount(s)",
        "ok    mount /: directory",
        "ok    mount /m/: SQLite file",
        "ok    mount /o/: directory",
        "ok    overlay layers of /o/: SQLite file",
        "ok    mount /scratch/: memory",
        "ok    execute: sandbox available: Landlock",
        "ok    execute environment: commands get a minimal environment: PATH, HOME,",
    ];
    assert_eq!(lines.len(), expected.len(), "{lines:?}");
    for (line, start) in lines.iter().zip(expected) {
        assert!(line.starts_with(start), "{line} (expected {start}…)");
    }
    assert!(
        !dir.path().join("s.db").exists() && !dir.path().join("l.db").exists(),
        "nothing is created"
    );
}

#[test]
fn a_bad_mount_table_fails_with_the_grammar() {
    let outcome = check(&mount("/=floppy:x".to_owned()));
    assert_eq!(outcome.0, 1);
    assert!(
        outcome.1[0].starts_with("FAIL  mount table:"),
        "{:?}",
        outcome.1
    );
    assert!(outcome.1.iter().any(|l| l.contains("mount grammar")));
}

#[test]
fn a_missing_directory_fails_and_stops_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = mount(format!("/=disk:{}", dir.path().join("nope").display()));
    args.extend(mount("/scratch/=memory".to_owned()));
    let outcome = check(&args);
    assert_fails(&outcome, "mount /:", "Create the directory or fix the path");
    assert!(
        !outcome.1.iter().any(|l| l.contains("/scratch/")),
        "{:?}",
        outcome.1
    );
}

#[test]
fn a_directory_mounted_writable_that_the_user_cannot_write_fails_unless_ro() {
    // A directory others may enter but not write. As root (which may write anything), the check
    // runs as `nobody`; as anyone else, the directory is made read-only to its owner too.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let root = rustix::process::geteuid().is_root();
    let mode = if root { 0o755 } else { 0o555 };
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(mode)).unwrap();
    let user = root.then_some(65534);
    let outcome = check_as(user, &mount(format!("/=disk:{}", ro.display())));
    assert_fails(&outcome, "mount /:", "add ,ro to the mount");
    let (code, lines) = check_as(user, &mount(format!("/=disk:{},ro", ro.display())));
    assert_eq!(code, 0, "{lines:?}");
    assert!(lines[1].contains("read-only as declared"), "{lines:?}");
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_sqlite_file_that_is_not_a_database_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("s.db");
    std::fs::write(&file, vec![b'x'; 4096]).unwrap();
    let outcome = check(&mount(format!("/m/=store:sqlite:{}", file.display())));
    assert_fails(&outcome, "mount /m/:", "Is it a mountfs SQLite file");
}

#[test]
fn postgresql_not_answering_fails() {
    let outcome = check(&mount(
        "/p/=store:postgres:postgres://postgres@127.0.0.1:1/test".to_owned(),
    ));
    assert_fails(&outcome, "mount /p/:", "Start PostgreSQL or fix the URL");
}

#[test]
fn postgresql_answering_passes() {
    let Some(url) = postgres_url("mountfs check against PostgreSQL") else {
        return;
    };
    let (code, lines) = check(&mount(format!("/p/=store:postgres:{url}")));
    assert_eq!(code, 0, "{lines:?}");
    assert!(
        lines[1].starts_with("ok    mount /p/: PostgreSQL answers"),
        "{lines:?}"
    );
}

fn http_args(dir: &Path, token_file: &Path) -> Vec<String> {
    let mut args = mount(format!("/=disk:{}", dir.display()));
    args.extend([
        "--http".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--token-file".to_owned(),
        token_file.display().to_string(),
    ]);
    args
}

#[test]
fn a_token_file_missing_or_readable_by_others_fails() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let outcome = check(&http_args(dir.path(), &tokens));
    assert_fails(
        &outcome,
        "token file:",
        "Create it with one `NAME TOKEN` line",
    );

    std::fs::write(&tokens, "alice 0123456789abcdef0123456789abcdef\n").unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o644)).unwrap();
    let outcome = check(&http_args(dir.path(), &tokens));
    assert_fails(&outcome, "token file:", "chmod 600");

    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, lines) = check(&http_args(dir.path(), &tokens));
    assert_eq!(code, 0, "{lines:?}");
    assert!(lines[2].contains("private, 1 principal(s)"), "{lines:?}");
}

#[test]
fn grants_naming_no_mount_or_no_principal_fail() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "alice 0123456789abcdef0123456789abcdef\ngrant alice=/:ro\n",
    )
    .unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, lines) = check(&http_args(dir.path(), &tokens));
    assert_eq!(code, 0, "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ok    grants: 1 grant(s)")),
        "{lines:?}"
    );

    let with = |grant: &str| {
        let mut args = http_args(dir.path(), &tokens);
        args.extend(["--grant".to_owned(), grant.to_owned()]);
        check(&args)
    };
    assert_fails(
        &with("alice=/docs/"),
        "grants:",
        "alice=/docs/:rw names no mount",
    );
    assert_fails(
        &with("bob=/"),
        "grants:",
        "bob=/:rw names a principal no token names",
    );
    assert_fails(&with("oauth:bob=/"), "grants:", "no --oauth-issuer");
    assert_fails(&with("alice=/:rx"), "grants:", "is no mode");
    let (code, lines) = with("*=/:ro");
    assert_eq!(code, 0, "{lines:?}");
}

#[test]
fn a_shell_mount_is_reached_and_its_directory_checked_writable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mut args = vec!["--shell".to_owned(), "loc=sh".to_owned()];
    args.extend(mount(format!("/t/=shell:loc:{d}")));
    let (code, lines) = check(&args);
    assert_eq!(code, 0, "{lines:?}");
    assert!(
        lines[1].starts_with("ok    mount /t/: shell loc: ") && lines[1].contains("writable"),
        "{lines:?}"
    );
    // A directory the target's user cannot write: refused unless ,ro (as root, run as nobody).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let uid = rustix::process::geteuid().is_root().then_some(65534);
    if uid.is_none() {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let outcome = check_as(uid, &args);
    assert_fails(&outcome, "mount /t/:", "add ,ro to the mount");
    let mut read_only = vec!["--shell".to_owned(), "loc=sh".to_owned()];
    read_only.extend(mount(format!("/t/=shell:loc:{d},ro")));
    let (code, lines) = check_as(uid, &read_only);
    assert_eq!(code, 0, "{lines:?}");
    assert!(lines[1].contains("read-only as declared"), "{lines:?}");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_shell_that_cannot_be_reached_or_is_not_given_fails() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--shell".to_owned(),
        "gone=/nonexistent/program sh".to_owned(),
    ];
    args.extend(mount(format!("/t/=shell:gone:{}", dir.path().display())));
    assert_fails(
        &check(&args),
        "mount /t/:",
        "starts a POSIX sh reading commands on its standard input",
    );
    let missing_dir = [
        "--shell".to_owned(),
        "loc=sh".to_owned(),
        "--mount".to_owned(),
        "/t/=shell:loc:/nonexistent/dir".to_owned(),
    ];
    assert_fails(&check(&missing_dir), "mount /t/:", "exists in the target");
    let unnamed = mount("/t/=shell:nobody:/srv".to_owned());
    let (code, lines) = check(&unnamed);
    assert_eq!(code, 1);
    assert!(
        lines[0].contains("no --shell nobody=COMMAND was given"),
        "{lines:?}"
    );
}

#[test]
fn allow_exec_names_the_environment_passed_and_says_shell_mounts_run_unsandboxed() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = mount(format!("/=disk:{}", dir.path().display()));
    args.extend(mount(format!("/t/=shell:local:{}", dir.path().display())));
    args.extend(
        [
            "--shell",
            "local=sh",
            "--allow-exec=unsandboxed",
            "--exec-env",
            "FOO",
            "--exec-env",
            "BAR=value-never-shown",
        ]
        .map(str::to_owned),
    );
    let (code, lines) = check(&args);
    assert_eq!(code, 0, "{lines:?}");
    let environment = lines
        .iter()
        .find(|l| l.starts_with("ok    execute environment: "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        environment.ends_with("; --exec-env: FOO (the server's), BAR (set)"),
        "{environment}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("value-never-shown")),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "ok    execute on shell mounts /t/: commands with their cwd there run on the target, NOT sandboxed, with the full rights of the account the --shell command logs in as"
    );
}
