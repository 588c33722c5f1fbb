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
//! Every case is written once in `cases.rs` and run once per fixture of the shared registry
//! (tests/support/fixtures.rs) by `per_backend!` below; a new backend is one fixture function
//! there and its name in the list here. Each refusal is checked to leave every file it names
//! byte-for-byte unchanged. `faults.rs` holds the cases that need a backend failing on purpose (half-way failures of move and apply_patch).

#[path = "../support/mod.rs"]
mod support;

mod cases;
mod crash;
mod crash_changes;
mod disk_behaviour;
mod faults;
mod grown;
mod layout;
mod names;
mod overlay_review;
mod overlay_search;
mod security;

// Every case, listed once, on every fixture.
crate::per_backend! {
    #[tokio::test]
    fixtures: [
        memory,
        composite,
        sqlite,
        stores,
        disk,
        disk_mixed,
        overlay,
    ],
    cases: [
        cases::undo_steps_back_through_every_change,
        cases::undo_keeps_twenty_steps_per_file,
        cases::undo_is_refused_when_nothing_is_left,
        cases::undo_is_refused_after_someone_else_changed_the_file,
        cases::undo_of_a_delete_recreates_the_file,
        cases::undo_of_a_delete_is_refused_when_the_file_was_recreated,
        cases::undo_of_a_create_is_refused_when_the_file_was_deleted,
        cases::undo_restores_crlf_bytes_exactly,
        cases::patch_modifies_creates_and_deletes_and_undo_takes_it_back,
        cases::patch_is_all_or_nothing_when_a_hunk_does_not_match,
        cases::patch_requires_read_and_unchanged_files,
        cases::patch_refuses_creating_an_existing_file,
        cases::patch_refuses_a_partial_delete_and_a_malformed_patch,
        cases::patch_applies_shifted_hunks,
        cases::patch_keeps_crlf_with_lf_or_crlf_rows,
        cases::patch_made_by_git_diff_round_trips_with_undo,
        cases::patch_rolls_back_when_a_later_write_fails,
        cases::delete_removes_a_file_and_undo_restores_it,
        cases::delete_allows_unread_but_refuses_stale_files,
        cases::delete_of_a_directory_needs_recursive,
        cases::delete_refuses_missing_paths_and_mount_roots,
        cases::move_renames_a_file_and_undo_reverses_it,
        cases::move_crosses_mounts,
        cases::move_never_overwrites_unless_asked,
        cases::move_refuses_bad_sources_and_destinations,
        cases::move_refuses_a_stale_source,
        cases::move_carries_a_directory,
        cases::file_info_describes_files_and_directories,
        cases::file_info_does_not_count_as_a_read,
        cases::edit_answers_show_counts_snippets_and_diffs,
        cases::a_huge_change_is_summarised,
    ],
}
