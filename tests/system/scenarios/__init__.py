"""Scenario catalog (issue #7, item 1): every seed scenario, end to end, one test each.

Each test drives the whole system as processes through its public edges (the surface's
HTTP API and WebSocket stream, a Twilio-protocol phone, the provider's fault endpoint,
kill -9 and named crash points) and asserts, through `checks`: durable state read from the
streams, side effects from the provider's ledger, exactly one final delivery said once,
causal order on the timeline, and what the user saw (history, stream) or heard (marks).
`test_conversation` runs on chat, `test_voice` and `test_voice_catalog` on a phone call
(every scenario of seed 002's list runs on a call); one system per module.

Each entry: seed scenario → test here; (narrower earlier variant, where one exists).

Seed 000 (chapter 4, "tools and state")

- barge-in before ADMITTED
  → test_voice::test_barge_in_before_admitted
- barge-in after RUNNING
  → test_voice::test_barge_in_after_running
  (system/voice/test_calls::test_barge_in_during_the_acceptance_truncates_history_and_keeps_the_batch)
- timeout after sending a mutation
  → test_conversation::test_timeout_after_sending_a_mutation
  (component/operations/test_failures::test_timeout_after_commit_on_transfer_ends_committed_via_reconcile)
- duplicated result
  → test_conversation::test_duplicated_result
  (component/operations/test_failures::test_async_completion_with_a_duplicated_callback_commits_once)
- reconnect while the action is still running
  → test_conversation::test_reconnect_while_the_action_is_still_running
  (system/surface/test_flows::test_the_stream_resumes_after_a_reconnect_without_loss_or_duplicates)
- handoff before an async tool completes
  → test_conversation::test_handoff_before_an_async_tool_completes
  (system/surface/test_flows::test_handoff_delivers_a_session_owned_result_to_the_new_agent)
- crash between COMMITTED and the acknowledgement to the user
  → test_conversation::test_crash_between_committed_and_the_acknowledgement_to_the_user
  (component/coordination/test_scenarios::test_coordinator_crash_at_each_step_still_closes_once)
- late result after the intent changed
  → test_conversation::test_late_result_after_the_intent_changed
  (component/operations/test_cancel_compensate::test_a_newer_intent_cancels_the_older_one_still_running)
- two concurrent tool calls on the same resource
  → test_conversation::test_two_concurrent_tool_calls_on_the_same_resource
  (component/operations/test_exactly_once::test_two_workers_racing_for_one_operation_make_one_effect)
- retry with idempotency support at the provider
  → test_conversation::test_retry_with_idempotency_support_at_the_provider
  (system/surface/test_flows::test_a_retry_is_visible_as_attempts_and_still_closes_once)
- retry without idempotency support at the provider
  → test_conversation::test_retry_without_idempotency_support_at_the_provider
  (component/operations/test_failures::
   test_non_idempotent_transfer_killed_after_commit_is_reconciled_not_resent)

Seed 002 ("reactive and proactive voice agents"), "what to test before production"

- the tool finishes while the user is still speaking
  → test_conversation::test_tool_finishes_while_the_user_is_still_speaking
  → test_voice_catalog::test_tool_finishes_while_the_user_is_still_speaking
    (the caller talks over the commit; the closing waits, then is heard once)
  (component/coordination/test_scenarios::test_tool_finishes_while_the_user_is_speaking)
- the tool finishes during playback
  → test_voice::test_tool_finishes_during_playback
  (component/coordination/test_scenarios::test_tool_finishes_during_playback)
- two tools of the same batch finish in reverse order
  → test_conversation::test_two_tools_of_the_same_batch_finish_in_reverse_order
  → test_voice_catalog::test_two_tools_of_the_same_batch_finish_in_reverse_order
    (asked for by voice)
  (component/coordination/test_scenarios::test_two_members_finish_in_reverse_order)
- a callback arrives twice
  → test_conversation::test_duplicated_result (the same scenario as seed 000's)
  → test_voice_catalog::test_a_callback_arrives_twice
  (component/coordination/test_scenarios::test_a_callback_arrives_twice)
- the user interrupts before hearing the closing
  → test_voice::test_user_interrupts_before_hearing_the_closing
  (system/voice/test_calls::test_barge_in_clears_the_closing_keeps_the_operation_and_retries_shorter)
- the user explicitly cancels an operation
  → test_conversation::test_user_explicitly_cancels_an_operation
  → test_voice_catalog::test_user_explicitly_cancels_an_operation (cancelled by voice)
  (component/operations/test_cancel_compensate::
   test_cancel_while_running_asks_the_provider_and_waits_for_its_answer)
- the channel disconnects with pending deliveries
  → test_voice::test_channel_disconnects_with_pending_deliveries
  (system/voice/test_calls::test_disconnect_with_pending_closing_then_next_call_hears_it)
- the process restarts after the effect and before the follow-up
  → test_conversation::test_process_restarts_after_the_effect_and_before_the_follow_up
  → test_voice_catalog::test_process_restarts_after_the_effect_and_before_the_follow_up
    (the surface and the policy die while the caller talks; the next call hears it)
  (component/coordination/test_scenarios::test_restart_after_the_effect_and_before_the_follow_up)
- a new intent makes an earlier update stale
  → test_conversation::test_late_result_after_the_intent_changed
    (the stale closing is superseded, with its reason)
  → test_conversation::test_stale_update_is_not_said_after_the_intent_changed
    (the stale closing waited for the very turn that changed the intent: that turn
    supersedes it after admission, and its reply never says it)
  → test_voice_catalog::test_a_new_intent_makes_an_earlier_update_stale
    (the closing waits while the caller talks; the new intent supersedes it unplayed)
  (component/coordination/test_scenarios::test_a_new_intent_makes_an_earlier_update_stale)
- an urgent result interrupts and a normal one waits
  → test_conversation::test_an_urgent_result_interrupts_and_a_normal_one_waits
  → test_voice_catalog::test_an_urgent_result_interrupts_and_a_normal_one_waits
  (component/coordination/test_scenarios::test_an_urgent_result_interrupts_while_a_normal_one_waits)
- the TTS generated audio Twilio has not played yet
  → test_voice::test_tts_generated_audio_twilio_has_not_played
  (unit/voice/test_edge::test_mark_after_clear_is_not_heard)
- the VAD fires a false `speech_started`
  → test_voice::test_vad_fires_a_false_speech_started
  (system/voice/test_calls::test_a_blip_shorter_than_min_speech_does_not_interrupt)

Beyond the seeds' lists

- the same request from two sessions of one user at once
  → test_conversation::test_the_same_request_from_two_sessions_of_one_user_is_done_once
    (one effect; the joining session is told where the result goes, never promised it)
- partial failure in a batch
  → test_conversation::test_partial_failure_in_a_batch
  (system/surface/test_flows::test_one_failure_closes_once_with_an_explanation_and_an_alternative)
"""
