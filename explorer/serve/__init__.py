"""The server's guards: what any visitor may send, spend and hold, checked before a tab sees a request.

This package never imports a tab (``explorer.ui``); the tabs ask it for their budget (``Access.budget``) and
their messages. ``explorer.ui`` is the tabs and the app's assembly. Every limit of the public page, its
number (``budget.PUBLIC`` unless named otherwise) and the test that holds it:

==========================================  ===================  ==================================================
limit                                       public number        held by (tests/...)
==========================================  ===================  ==================================================
caption characters (any text input)         20,000 (owner 200k)  test_page_budget::test_every_handler_refuses_a_text_past_the_cap_before_it_runs
sentences per Draw                          64 (owner 512)       test_page_budget::test_every_draw_of_the_public_page_counts_its_sentences
full-size decodes at once                   2                    test_page_budget::test_at_most_the_slots_decode_at_once_whatever_the_requests
heavy requests at once / per session        2 / 2                test_page_budget::test_heavy_requests_share_the_budgets_slots_across_events_and_two_per_session
heavy / all requests per address            4 / 24               test_page_clients::test_one_address_flooding_the_queue_does_not_hold_another_behind_it
caption counts (token summary) per address 2 (2 at once)        test_request_deadline::test_caption_counts_are_capped_per_address_not_per_session
a handler's time                            120 s                test_request_deadline::test_a_generator_past_the_deadline_is_stopped_and_says_so
splitting a caption                         linear, <0.1 s/200k  test_sentences_linear::test_the_splitter_is_linear_on_adversarial_captions
requests per session (``access``)           12                   test_page_access::test_a_session_may_hold_only_a_few_requests
HTTP requests open per address              64                   test_page_clients::test_a_slow_body_is_dropped_and_one_address_holds_only_a_few_requests_open
sessions per address                        32                   test_page_clients::test_minting_sessions_from_one_address_never_forgets_anothers
request body time                           20 s + 1 s/128 KB    test_page_clients::test_a_slow_body_is_dropped_and_one_address_holds_only_a_few_requests_open
request body bytes (not an upload)          1 MB (owner 32 MB)   test_page_budget::test_a_request_body_past_the_budget_is_refused_before_it_is_parsed
JSON nesting                                64                   test_page_budget::test_a_body_nested_past_the_limit_is_refused_before_anything_parses_it
uploads per session / bytes per session     20 / 200 MB          test_page_budget::test_uploads_need_a_session_take_pictures_only_and_keep_to_their_quota
uploads on the page: files / bytes          2,000 / 1 GB         test_page_budget::test_a_sessions_upload_bytes_and_age_are_bounded
uploads one address holds: files / bytes    500 / 256 MB (1/4)  test_upload_share::test_over_http_address_a_fills_its_share_and_b_still_uploads
a forgotten session's uploads               deleted at once      test_upload_share::test_a_forgotten_session_gives_its_files_back_at_once
upload age                                  1 h                  test_page_budget::test_a_sessions_upload_bytes_and_age_are_bounded
memory of one picture read                  decode + reduced     test_decode_memory::test_every_mode_reads_within_the_documented_bound
upload file (``access``)                    25 MB                test_page_budget::test_uploads_need_a_session_take_pictures_only_and_keep_to_their_quota
exports: bytes / age                        200 MB / 1 h         test_page_budget::test_public_exports_are_capped_and_no_call_leaves_an_empty_folder
Gradio's temp folder: bytes / age           512 MB / 1 h         test_page_budget::test_gradios_cache_is_pruned_by_age_and_bytes_but_never_a_held_upload
queue size (``access``)                     64                   test_page_clients::test_one_address_flooding_the_queue_does_not_hold_another_behind_it
refusal log lines                           one per kind, counted test_page_clients::test_a_flood_of_refusals_is_logged_once_with_a_count
temp files of two servers on one machine    a folder each       test_two_servers::test_stopping_one_server_leaves_the_others_files
a request head's time (the app)            10 s                 test_head_deadline::test_a_slow_or_silent_head_is_closed_and_a_whole_one_is_answered
slow heads, connections, rate (nginx)       10 s, 32, 20/s      test_proxy_edge::test_slow_header_connections_from_one_address_do_not_starve_another
Host / Origin (owner mode)                  loopback + --allow-host  test_host_guard::test_the_owner_page_refuses_a_foreign_host_in_one_line
==========================================  ===================  ==================================================

One module per guard: ``budget`` (the numbers), ``access`` (what a visitor may touch), ``clients`` (who is
asking: the address, not the session hash), ``page_guard`` (uploads, bodies and per-address caps in front of
Gradio's routes), ``upload_ledger`` (what uploads are held), ``json_body``, ``request_rules`` (what wraps every
handler), ``host_guard``, ``log_limit``, ``gradio_cache``, ``refusals``, ``messages`` (failures as page text),
``startup`` (launching the page), ``temp_folder`` (each server's files in a folder of its own).
"""
