//! The backend conformance suite: ONE set of cases (cases.rs) run against every backend fixture
//! of the shared registry (tests/support/fixtures.rs), after arrow-rs `object_store`'s shared
//! suite. A case is named like
//! `memory::write_then_read`, so `cargo test --test conformance memory::` or
//! `cargo test --test conformance write_then_read` selects what you want.
//!
//! The edit tools' cases that must hold on every backend (loose quotes, edits over a file changed
//! since it was read) live in edits.rs and run the same way, through a session over the fixture;
//! so do the encodings cases (encodings.rs: every file edited in its own encoding).
//!
//! store.rs checks the `Store` trait's rules on every engine; invariants.rs checks properties of
//! the tools on generated inputs (proptest).
//!
//! object_mounts.rs checks object mounts against a second client of the bucket, two servers,
//! a missing bucket and a down endpoint (issue 44).
//!
//! Routing edge cases of the composite (prefix matching, nested mounts, mount points in listings)
//! live in routing.rs, since they need a particular mount table rather than one backend.

#[path = "../support/mod.rs"]
mod support;

mod cases;
mod edits;
mod encodings;
mod index_attack;
mod invariants;
mod object_mounts;
mod routing;
mod search_index;
mod shell_execute;
mod shell_hostile;
mod shell_mounts;
mod store;

// Every case, once per fixture (a module per fixture, a test per case): add a case to `cases`
// and write it in cases.rs (or edits.rs, encodings.rs); add a backend with one function in
// tests/support/fixtures.rs and its name in `fixtures`.
crate::per_backend! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    fixtures: [
        memory,
        composite,
        composite_nested,
        sqlite,
        postgres,
        composite_stores,
        composite_postgres,
        disk,
        composite_disk,
        overlay,
        overlay_sqlite,
        shell,
        shell_busybox,
        shell_busybox_minimal,
        shell_ssh,
        composite_shell,
        object,
        composite_object,
    ],
    cases: [
        cases::write_then_read,
        cases::reserved_names_are_refused_in_every_component,
        cases::version_is_stable_and_follows_content,
        cases::create_only_fails_if_exists,
        cases::overwrite_keeps_created_time,
        cases::if_version_writes_only_over_that_version,
        cases::binary_content_round_trips,
        cases::write_creates_parent_directories,
        cases::write_under_a_file_or_over_a_directory_is_refused,
        cases::read_missing_or_directory_is_refused,
        cases::stat_reports_files_directories_and_absence,
        cases::ls_lists_direct_children_with_sizes,
        cases::ls_missing_or_file_is_refused,
        cases::ls_of_many_files_is_complete,
        cases::delete_file_and_directories,
        cases::directories_follow_their_files,
        cases::delete_if_version_refuses_other_versions,
        cases::read_window_pages_lines,
        cases::read_window_shows_crlf_as_lf_and_hides_bom,
        cases::read_window_of_binary_gives_a_sample,
        cases::glob_matches_names_at_any_depth,
        cases::glob_with_slash_matches_relative_paths,
        cases::glob_of_missing_directory_is_empty,
        cases::grep_collects_files_counts_and_lines,
        cases::grep_filters_by_glob_and_skips_binary,
        cases::grep_of_one_file_searches_that_file,
        cases::errors_name_virtual_paths,
        cases::ls_of_a_large_directory_pages_past_subdirectories,
        cases::grep_and_glob_page_through_many_files,
        cases::read_range_gives_the_bytes_of_that_version_only,
        cases::read_range_reads_a_large_item_range_after_range,
        cases::an_upload_lands_whole_under_its_mode_or_not_at_all,
        edits::edits_match_quotes_loosely_both_ways,
        edits::loose_quote_matches_are_counted_on_the_folded_text,
        encodings::encodings_round_trip_through_every_edit_tool,
        encodings::the_latin1_edit_of_issue_9_keeps_every_other_byte,
        encodings::text_the_encoding_cannot_hold_is_refused_and_nothing_written,
        encodings::a_file_valid_in_no_encoding_is_shown_but_never_edited,
        encodings::new_files_are_utf8,
        edits::stale_edits_land_only_where_their_text_is_untouched,
        edits::concurrent_sessions_editing_distinct_lines_all_land,
        cases::rename_moves_a_file_in_place,
        cases::rename_moves_a_directory_whole,
        cases::rename_checks_versions_and_the_destination,
    ],
}
