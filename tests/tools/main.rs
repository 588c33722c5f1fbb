//! The tools in-process, on sessions over real backends, always through the wire's argument
//! validation (`MountfsServer::run_tool` or `support::backends::call`).
//!
//! - cases.rs, faults.rs, grown.rs: the file toolset (issue 5): `undo_edit`, `apply_patch`,
//!   `delete`, `move`, `file_info`, and the change report of every edit-type answer, driven
//!   through the MCP server's `run_tool` (schema validation, dispatch, `isError`) on each fixture.
//! - names.rs: names that could forge an answer; disk_behaviour.rs: what the disk backend does
//!   beyond the conformance suite; security.rs: containment attacks; crash.rs: SIGKILLed writers.
//! - overlay_review.rs: overlay mounts (issue 14) over a populated directory: the base never written,
//!   layers per workspace, SQLite layers across restarts, and `changes`/`commit`/`discard`.
//! - overlay_search.rs: glob, grep (every page) and ls through an overlay equal the plain disk
//!   mount's on the same tree, ignore rules included.
//! - layout.rs: every file under `tests/` is compiled by one of the test binaries.
//!
//! Every case is written once in `cases.rs` and run once per fixture by [`toolset!`]; a new
//! backend is one fixture function in `fixtures.rs` and one `toolset!(name);` line here. Each
//! refusal is checked to leave every file it names byte-for-byte unchanged. `faults.rs` holds
//! the cases that need a backend failing on purpose (half-way failures of move and apply_patch).

#[path = "../support/mod.rs"]
mod support;

mod cases;
mod crash;
mod crash_changes;
mod disk_behaviour;
mod faults;
mod fixtures;
mod grown;
mod layout;
mod names;
mod overlay_review;
mod overlay_search;
mod security;

/// One `#[tokio::test]` per case for the fixture `$fixture`.
macro_rules! cases {
    ($fixture:ident: $($case:ident),* $(,)?) => {
        mod $fixture {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some(fx) = crate::fixtures::$fixture().await else {
                        return;
                    };
                    crate::cases::$case(&fx).await;
                }
            )*
        }
    };
}

/// Every case, listed once.
macro_rules! toolset {
    ($fixture:ident) => {
        cases!($fixture:
            undo_steps_back_through_every_change,
            undo_keeps_twenty_steps_per_file,
            undo_is_refused_when_nothing_is_left,
            undo_is_refused_after_someone_else_changed_the_file,
            undo_of_a_delete_recreates_the_file,
            undo_of_a_delete_is_refused_when_the_file_was_recreated,
            undo_of_a_create_is_refused_when_the_file_was_deleted,
            undo_restores_crlf_bytes_exactly,
            patch_modifies_creates_and_deletes_and_undo_takes_it_back,
            patch_is_all_or_nothing_when_a_hunk_does_not_match,
            patch_requires_read_and_unchanged_files,
            patch_refuses_creating_an_existing_file,
            patch_refuses_a_partial_delete_and_a_malformed_patch,
            patch_applies_shifted_hunks,
            patch_keeps_crlf_with_lf_or_crlf_rows,
            patch_made_by_git_diff_round_trips_with_undo,
            patch_rolls_back_when_a_later_write_fails,
            delete_removes_a_file_and_undo_restores_it,
            delete_allows_unread_but_refuses_stale_files,
            delete_of_a_directory_needs_recursive,
            delete_refuses_missing_paths_and_mount_roots,
            move_renames_a_file_and_undo_reverses_it,
            move_crosses_mounts,
            move_never_overwrites_unless_asked,
            move_refuses_bad_sources_and_destinations,
            move_refuses_a_stale_source,
            move_carries_a_directory,
            file_info_describes_files_and_directories,
            file_info_does_not_count_as_a_read,
            edit_answers_show_counts_snippets_and_diffs,
            a_huge_change_is_summarised,
        );
    };
}

toolset!(memory);
toolset!(composite);
toolset!(sqlite);
toolset!(stores);
toolset!(disk);
toolset!(disk_mixed);
toolset!(overlay);
