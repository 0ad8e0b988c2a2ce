"""The server's guards: what any visitor may send, spend and hold, checked before a tab sees a request.

This package never imports a tab (``explorer.ui``); the tabs ask it for their budget (``Access.budget``) and
their messages. ``explorer.ui`` is the tabs and the app's assembly. Every limit of the public page, its
number (``budget.PUBLIC`` unless named otherwise), where it is enforced and the test that holds it:

===========================================  =============================  ====================================================  =================================================================================================
limit                                        public number                  enforced in (``explorer.serve.``...)                  held by (tests/...)
===========================================  =============================  ====================================================  =================================================================================================
caption characters (any text input)          20,000 (owner 200k)            request_rules.checked                                 test_page_budget::test_every_handler_refuses_a_text_past_the_cap_before_it_runs
sentences per Draw                           64 (owner 512)                 Budget.check_sentences (tabs)                         test_page_budget::test_every_draw_of_the_public_page_counts_its_sentences
full-size decodes at once                    2                              core.images.decode_slot                               test_page_budget::test_at_most_the_slots_decode_at_once_whatever_the_requests
heavy requests at once / per session         2 / 2                          request_rules.install, queue_guard.over_cap           test_page_budget::test_heavy_requests_share_the_budgets_slots_across_events_and_two_per_session
heavy / all requests per address             4 / 24                         queue_guard.over_cap                                  test_page_clients::test_one_address_flooding_the_queue_does_not_hold_another_behind_it
turns in a busy group                        by address                     queue_guard.take_turns                                test_page_clients::test_addresses_take_turns_whatever_session_hashes_they_send
caption counts (token summary) per address   2 (2 at once)                  queue_guard.over_cap                                  test_request_deadline::test_caption_counts_are_capped_per_address_not_per_session
model and picture handlers                   heavy group                    budget.HEAVY on each event                            test_page_part4::test_every_model_and_picture_handler_is_in_the_heavy_group
a handler's time                             120 s                          request_rules.checked (core.deadline)                 test_request_deadline::test_a_generator_past_the_deadline_is_stopped_and_says_so
splitting a caption                          linear, <0.1 s/200k            core sentence splitter                                test_sentences_linear::test_the_splitter_is_linear_on_adversarial_captions
requests per session (``access``)            12                             queue_guard.over_cap                                  test_page_access::test_a_session_may_hold_only_a_few_requests
HTTP requests open per address               64                             page_guard (clients.enter)                            test_page_clients::test_a_slow_body_is_dropped_and_one_address_holds_only_a_few_requests_open
page sessions (cookies) per address          32                             page_guard (clients.mint)                             test_page_clients::test_minting_sessions_from_one_address_never_forgets_anothers
state sessions per address                   32                             queue_guard -> session_state                          test_page_part4::test_sessions_past_an_addresss_share_or_the_pages_cap_are_forgotten_oldest_first
state bytes per address / on the page        256 MB / 1 GB                  queue_guard -> session_state                          test_page_part4::test_sessions_past_an_addresss_share_or_the_pages_cap_are_forgotten_oldest_first
an idle session's state                      30 min                         session_state (each request, every 60 s)              test_page_part4::test_idle_sessions_expire_and_a_busy_one_is_kept
an IPv6 client                               its /64                        clients.address_of                                    test_page_part4::test_an_ipv6_visitor_is_one_client_per_64
request body time                            20 s + 1 s/128 KB              page_guard._timed                                     test_page_clients::test_a_slow_body_is_dropped_and_one_address_holds_only_a_few_requests_open
request body bytes (not an upload)           1 MB (owner 32 MB)             page_guard._body                                      test_page_budget::test_a_request_body_past_the_budget_is_refused_before_it_is_parsed
JSON nesting                                 64                             json_body.check_depth                                 test_page_budget::test_a_body_nested_past_the_limit_is_refused_before_anything_parses_it
uploads per session / bytes per session      20 / 200 MB                    upload_ledger                                         test_page_budget::test_uploads_need_a_session_take_pictures_only_and_keep_to_their_quota
uploads on the page: files / bytes           2,000 / 1 GB                   upload_ledger                                         test_page_budget::test_a_sessions_upload_bytes_and_age_are_bounded
uploads one address holds: files / bytes     500 / 256 MB (1/4)             upload_ledger._check_share                            test_upload_share::test_over_http_address_a_fills_its_share_and_b_still_uploads
a forgotten session's uploads                deleted at once                upload_ledger.forget                                  test_upload_share::test_a_forgotten_session_gives_its_files_back_at_once
upload age                                   1 h                            upload_ledger._expire                                 test_page_budget::test_a_sessions_upload_bytes_and_age_are_bounded
what opening an upload allocates (metadata)  16 MB, 1,000 frames            picture_metadata.check (upload_ledger.accepted_file)  test_page_part4::test_every_format_s_amplifying_metadata_is_refused_within_its_own_size
bytes copied joining a GIF's comments        256 MB                         picture_metadata.check                                test_page_part4::test_every_format_s_amplifying_metadata_is_refused_within_its_own_size
the upload check                             off the event loop, 2 at once  page_guard._take (a thread)                           test_page_part4::test_an_upload_is_checked_off_the_event_loop
memory of one picture read                   decode + reduced               core.images.load_image                                test_decode_memory::test_every_mode_reads_within_the_documented_bound
upload file (``access``)                     25 MB                          Gradio's max_file_size (ui.app.page_options)          test_page_budget::test_uploads_need_a_session_take_pictures_only_and_keep_to_their_quota
exports: bytes / age                         200 MB / 1 h                   core.disk_quota (ui.view_controls)                    test_page_budget::test_public_exports_are_capped_and_no_call_leaves_an_empty_folder
Gradio's temp folder: bytes / age            512 MB / 1 h                   gradio_cache.CachePruner                              test_page_budget::test_gradios_cache_is_pruned_by_age_and_bytes_but_never_a_held_upload
queue size (``access``)                      64                             Gradio's queue (queue_guard.install)                  test_page_clients::test_one_address_flooding_the_queue_does_not_hold_another_behind_it
log lines / tracebacks a minute              30 / 3, dropped counted        log_limit.LogLimit                                    test_page_clients::test_a_flood_of_refusals_is_logged_once_with_a_count
Gradio's tracebacks and warnings             through the log limit          log_limit.route_gradio_tracebacks                     test_page_part4::test_gradios_own_tracebacks_go_through_the_limiter
an example index the list lacks              one line, not echoed           request_rules.bound_example_indices                   test_page_part4::test_an_example_index_the_list_lacks_is_one_line_and_not_echoed
a number a message repeats                   12 digits                      messages.short_numbers                                test_page_part4::test_a_long_number_is_not_echoed
visitor text in the page's HTML              escaped                        core.markup.escape (views, ui)                        test_page_part4::test_every_visitor_text_that_builds_html_goes_through_the_one_helper
temp files of two servers on one machine     a folder each                  temp_folder                                           test_two_servers::test_stopping_one_server_leaves_the_others_files
a request head's time (the app)              10 s                           startup.head_deadline                                 test_head_deadline::test_a_slow_or_silent_head_is_closed_and_a_whole_one_is_answered
slow heads, connections, rate (nginx)        10 s, 32, 20/s                 deploy/nginx-explorer.conf                            test_proxy_edge::test_slow_header_connections_from_one_address_do_not_starve_another
Host / Origin (owner mode)                   loopback + --allow-host        host_guard                                            test_host_guard::test_the_owner_page_refuses_a_foreign_host_in_one_line
===========================================  =============================  ====================================================  =================================================================================================

One module per guard: ``budget`` (the numbers), ``access`` (what a visitor may touch), ``clients`` (who is
asking: the address, not the session hash), ``page_guard`` (uploads, bodies and per-address caps in front of
Gradio's routes), ``upload_ledger`` (what uploads are held), ``picture_metadata`` (what opening a picture
allocates), ``json_body``, ``queue_guard`` (the queue: per-session and per-address caps, turns, and the sessions'
state through ``session_state``), ``request_rules`` (what wraps every handler), ``host_guard``, ``log_limit``,
``gradio_cache``, ``refusals``, ``messages`` (failures as page text), ``startup`` (launching the page),
``temp_folder`` (each server's files in a folder of its own). The escaping helper every HTML view uses is
``explorer.core.markup.escape`` (below the views, which cannot import this package).
"""
