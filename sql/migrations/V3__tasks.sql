-- Tasks: one row per task for its whole life, in declarative partitions.
--
--   asyncflow.tasks                       partitioned by list (task_type)
--     asyncflow.tasks_<type>              partitioned by list (shard), created by register_task_type
--       asyncflow.tasks_<type>_<shard>    leaves, created by roll_shard, dropped whole by retention
--
-- The public id of a task is '<type>-<shard>-<id>' (see asyncflow.parse_task_id): it names the
-- leaf, so a lookup by id never scans.
create table asyncflow.tasks (
  task_type text not null,
  shard integer not null,
  id bigint not null,
  stage text not null,
  status asyncflow.task_status not null default 'pending',
  priority integer not null default 0,
  -- tries of the current stage: +1 at claim, back to 0 on a stage change; a 'later' reply or a
  -- hand-back on shutdown gives the try back
  attempt integer not null default 0,
  -- failed tries over the whole life of the task (rescues included)
  retry_count integer not null default 0,
  max_retry_num integer not null,
  max_retry_interval integer not null,
  -- fencing counter: +1 at every claim; a report must carry the value it was claimed with
  claim_seq integer not null default 0,
  owner text,
  claimed_at timestamptz,
  lease_until timestamptz,
  -- the one sort key: workers take the smallest order_time <= now
  order_time timestamptz not null,
  -- reserved for many-queues (fair turn-taking across keys within a type)
  queue_key text,
  user_id text,
  idempotency_key text,
  context jsonb not null default '{}',
  result jsonb,
  last_error text,
  schedule_log jsonb not null default '[]',
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  finished_at timestamptz
) partition by list (task_type);

-- Indexes are declared per type (on asyncflow.tasks_<type>, inherited by every shard) by
-- register_task_type, so they do not repeat the constant task_type column:
--   primary key (id, shard)
--   tasks_<type>_ready   (order_time) where status = 'pending'    the claim: finished rows are
--                                                                  never in it
--   tasks_<type>_running (lease_until) where status = 'running'   the rescuer

-- '<type>-<shard>-<id>' -> parts; null when the text is not a task id.
create function asyncflow.parse_task_id(p_task_id text, out task_type text, out shard integer, out id bigint)
language sql immutable parallel safe as $$
  select split_part(p_task_id, '-', 1), split_part(p_task_id, '-', 2)::integer, split_part(p_task_id, '-', 3)::bigint
  where p_task_id ~ '^[a-z][a-z0-9_]{0,39}-[1-9][0-9]{0,8}-[1-9][0-9]{0,17}$'
$$;

-- Explicit casts: `text || integer` resolves to the stable anytextcat, which keeps the planner
-- from inlining this immutable function (a full function call per id, about 15 times slower).
create function asyncflow.format_task_id(p_task_type text, p_shard integer, p_id bigint) returns text
language sql immutable parallel safe as $$
  select p_task_type || '-' || p_shard::text || '-' || p_id::text
$$;

-- Appends one entry to a schedule log, keeping the last 20. A plain expression (inlined by the
-- planner): the hot report path calls it once per task.
create function asyncflow.append_log(p_log jsonb, p_entry jsonb) returns jsonb
language sql immutable parallel safe as $$
  -- each argument appears once (p_log is a column, cheap to repeat): otherwise the planner
  -- refuses to inline a call whose argument is an expression
  select case when jsonb_array_length(p_log) < 20 then p_log
    else jsonb_path_query_array(p_log, '$[last - 18 to last]') end || jsonb_build_array(p_entry)
$$;


-- Wakes workers of a type: NOTIFY asyncflow, <type> at commit. PostgreSQL serialises the commits
-- of notifying transactions behind one database-wide lock held through the commit's flush, so a
-- NOTIFY in every enqueue would cap enqueue throughput at one flush at a time. Only the
-- transaction that wins a per-type transaction-scoped try-lock notifies; concurrent ones skip,
-- and their tasks are found by the workers' re-check right after each wake-up (or by the poll at
-- schedule_interval). At most one NOTIFY per call either way.
create function asyncflow.wake(p_task_type text) returns void
language sql as $$
  select pg_notify('asyncflow', p_task_type) where pg_try_advisory_xact_lock(16712, hashtext(p_task_type))
$$;
