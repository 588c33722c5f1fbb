//! The backend conformance suite: ONE set of cases (cases.rs) run against every backend fixture
//! (fixtures.rs), after arrow-rs `object_store`'s shared suite. A case is named like
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
mod fixtures;
mod index_attack;
mod invariants;
mod object_mounts;
mod routing;
mod search_index;
mod shell_execute;
mod shell_hostile;
mod shell_mounts;
mod store;

/// One `#[tokio::test]` running `cases::$case` on a fresh `fixtures::$fixture()`. A fixture that
/// cannot run here (no PostgreSQL configured) returns `None` and the case passes after saying so.
macro_rules! case {
    ($fixture:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(fx) = crate::fixtures::$fixture().await else {
                return;
            };
            crate::cases::$case(&fx).await;
        }
    };
}

/// One `#[tokio::test]` running the edit-tool case `edits::$case` on a fresh fixture.
macro_rules! edit_case {
    ($fixture:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(fx) = crate::fixtures::$fixture().await else {
                return;
            };
            crate::edits::$case(&fx).await;
        }
    };
}

/// [`case!`] for the tool-level cases of encodings.rs.
macro_rules! encodings_case {
    ($fixture:ident, $case:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(fx) = crate::fixtures::$fixture().await else {
                return;
            };
            crate::encodings::$case(&fx).await;
        }
    };
}

/// Every case, once per fixture. Add a case here and in cases.rs; add a backend with one line at
/// the bottom.
macro_rules! conformance {
    ($fixture:ident) => {
        mod $fixture {
            case!($fixture, write_then_read);
            case!($fixture, reserved_names_are_refused_in_every_component);
            case!($fixture, version_is_stable_and_follows_content);
            case!($fixture, create_only_fails_if_exists);
            case!($fixture, overwrite_keeps_created_time);
            case!($fixture, if_version_writes_only_over_that_version);
            case!($fixture, binary_content_round_trips);
            case!($fixture, write_creates_parent_directories);
            case!($fixture, write_under_a_file_or_over_a_directory_is_refused);
            case!($fixture, read_missing_or_directory_is_refused);
            case!($fixture, stat_reports_files_directories_and_absence);
            case!($fixture, ls_lists_direct_children_with_sizes);
            case!($fixture, ls_missing_or_file_is_refused);
            case!($fixture, ls_of_many_files_is_complete);
            case!($fixture, delete_file_and_directories);
            case!($fixture, directories_follow_their_files);
            case!($fixture, delete_if_version_refuses_other_versions);
            case!($fixture, read_window_pages_lines);
            case!($fixture, read_window_shows_crlf_as_lf_and_hides_bom);
            case!($fixture, read_window_of_binary_gives_a_sample);
            case!($fixture, glob_matches_names_at_any_depth);
            case!($fixture, glob_with_slash_matches_relative_paths);
            case!($fixture, glob_of_missing_directory_is_empty);
            case!($fixture, grep_collects_files_counts_and_lines);
            case!($fixture, grep_filters_by_glob_and_skips_binary);
            case!($fixture, grep_of_one_file_searches_that_file);
            case!($fixture, errors_name_virtual_paths);
            case!($fixture, ls_of_a_large_directory_pages_past_subdirectories);
            case!($fixture, grep_and_glob_page_through_many_files);
            case!($fixture, read_range_gives_the_bytes_of_that_version_only);
            case!($fixture, read_range_reads_a_large_item_range_after_range);
            case!($fixture, an_upload_lands_whole_under_its_mode_or_not_at_all);
            edit_case!($fixture, edits_match_quotes_loosely_both_ways);
            edit_case!($fixture, loose_quote_matches_are_counted_on_the_folded_text);
            encodings_case!($fixture, encodings_round_trip_through_every_edit_tool);
            encodings_case!($fixture, the_latin1_edit_of_issue_9_keeps_every_other_byte);
            encodings_case!(
                $fixture,
                text_the_encoding_cannot_hold_is_refused_and_nothing_written
            );
            encodings_case!(
                $fixture,
                a_file_valid_in_no_encoding_is_shown_but_never_edited
            );
            encodings_case!($fixture, new_files_are_utf8);
            edit_case!(
                $fixture,
                stale_edits_land_only_where_their_text_is_untouched
            );
            edit_case!(
                $fixture,
                concurrent_sessions_editing_distinct_lines_all_land
            );
            case!($fixture, rename_moves_a_file_in_place);
            case!($fixture, rename_moves_a_directory_whole);
            case!($fixture, rename_checks_versions_and_the_destination);
        }
    };
}

conformance!(memory);
conformance!(composite);
conformance!(composite_nested);
conformance!(sqlite);
conformance!(postgres);
conformance!(composite_stores);
conformance!(composite_postgres);
conformance!(disk);
conformance!(composite_disk);
conformance!(overlay);
conformance!(overlay_sqlite);
conformance!(shell);
conformance!(shell_busybox);
conformance!(shell_busybox_minimal);
conformance!(shell_ssh);
conformance!(composite_shell);
conformance!(object);
conformance!(composite_object);
