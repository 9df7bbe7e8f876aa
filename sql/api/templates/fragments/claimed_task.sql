-- The claim's answer: the columns of asyncflow.claimed_task (and of asyncflow.held_task, which
-- adds `held`), in its order, from the task row {{$t}}. A claim reads them from the row it has
-- just updated; a hold, which writes nothing, passes the values the claim will have as
-- attempt, claim_seq, lease_until and claimed_at. A column added to the claim's answer is added
-- here (and to the two types, by a migration).
--! attempt = {{$t}}.attempt; claim_seq = {{$t}}.claim_seq; lease_until = {{$t}}.lease_until; claimed_at = {{$t}}.claimed_at
asyncflow.format_task_id(v_task_type, {{$t}}.shard, {{$t}}.id), v_task_type, {{$t}}.stage, {{$t}}.context,
  {{$t}}.priority, {{$attempt}}, {{$claim_seq}}, {{$t}}.user_id, {{$lease_until}}, {{$claimed_at}},
  {{$t}}.queue_key, {{$t}}.traceparent, {{$t}}.wake
