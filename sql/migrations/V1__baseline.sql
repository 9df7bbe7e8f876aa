-- The asyncflow schema: tables, types, indexes, roles and seed rows. No function bodies: the
-- current text of every function is in sql/api/, applied by `asyncflow migrate` after the
-- migrations. A later migration holds one schema change (a column, an index, the drop of a
-- function whose signature changed) and is named after it; a migration that has landed is never
-- edited.
--
-- Everything lives in schema asyncflow and is schema-qualified; nothing relies on search_path.
-- The tables are private (no grants): the functions are the API.

create schema if not exists asyncflow;

-- Roles are cluster-wide: several databases (tests, tenants) may migrate at once, so a lost race
-- on creation is not an error, and a role that exists is not created again (so that the owner
-- of a database, without CREATEROLE, can migrate it once the roles exist).
do $$
begin
  if not exists (select from pg_catalog.pg_roles where rolname = 'asyncflow_client') then
    begin
      create role asyncflow_client nologin;
    exception when duplicate_object or unique_violation then null;
    end;
  end if;
  if not exists (select from pg_catalog.pg_roles where rolname = 'asyncflow_worker') then
    begin
      create role asyncflow_worker nologin;
    exception when duplicate_object or unique_violation then null;
    end;
  end if;
  if not pg_catalog.pg_has_role('asyncflow_worker', 'asyncflow_client', 'member') then
    grant asyncflow_client to asyncflow_worker;
  end if;
end
$$;

grant usage on schema asyncflow to asyncflow_client, asyncflow_worker;

-- What `asyncflow migrate` last applied of sql/api/: the checksum of its files and templates.
create table asyncflow.sql_api (
  singleton boolean primary key default true check (singleton),
  checksum text not null,
  applied_at timestamptz not null default now()
);

-- The templates of the functions generated for each task type (sql/api/templates/), written by
-- `asyncflow migrate`; read by create_type_functions.
create table asyncflow.function_templates (
  name text primary key,
  body text not null
);

create type asyncflow.task_status as enum ('pending', 'running', 'succeeded', 'failed', 'cancelled');

-- One-row table of installation-wide limits. Change with a plain UPDATE.
create table asyncflow.config (
  singleton boolean primary key default true check (singleton),
  max_context_bytes integer not null default 1048576 check (max_context_bytes between 1024 and 268435456),
  updated_at timestamptz not null default now(),
  -- how long run records are kept after their day ends (seconds)
  run_retention integer not null default 604800 check (run_retention between 60 and 315360000),
  -- a callback not delivered this long after it was first due is given up (seconds)
  callback_give_up integer not null default 86400 check (callback_give_up between 1 and 31536000),
  -- the longest wait between two delivery attempts (seconds); waits double from 1 s up to it
  callback_max_interval integer not null default 300 check (callback_max_interval between 1 and 86400)
);

insert into asyncflow.config default values;

-- Task types and their settings. Settings are copied onto each task where they are policy
-- (max_retry_num, max_retry_interval), read at claim time where they are capacity.
create table asyncflow.task_types (
  task_type text primary key constraint task_types_name_check check (task_type ~ '^[a-z][a-z0-9_]{0,39}$'),
  schedule_limit integer not null default 100 check (schedule_limit between 1 and 10000),
  schedule_interval double precision not null default 5 check (schedule_interval between 0.01 and 86400),
  max_processing_time integer not null default 300 check (max_processing_time between 1 and 31536000),
  max_retry_num integer not null default 3 check (max_retry_num between 0 and 1000),
  max_retry_interval integer not null default 60 check (max_retry_interval between -31536000 and 31536000),
  shard_max_rows bigint not null default 5000000 check (shard_max_rows between 10 and 1000000000000),
  retention integer not null default 604800 check (retention between 0 and 315360000),
  concurrency integer check (concurrency between 1 and 1000000),
  paused boolean not null default false,
  initial_stage text not null default 'start' check (initial_stage ~ '^[A-Za-z0-9_.:/-]{1,64}$'),
  id_seq regclass not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- many queues within a type: claims take the queue keys by turns
  fair_queues boolean not null default false,
  -- at most this many running tasks per queue key (null: no limit)
  queue_concurrency integer check (queue_concurrency between 1 and 1000000)
);

-- begin_pos: oldest shard that may still hold a live (pending or running) task; claims read
-- shards >= begin_pos. end_pos: the shard receiving inserts. Both move only forward, except that
-- retry_task and advance_begin_pos move begin_pos back to a shard found live again.
create table asyncflow.positions (
  task_type text primary key references asyncflow.task_types on delete cascade,
  begin_pos integer not null default 1 check (begin_pos >= 1),
  end_pos integer not null default 1,
  updated_at timestamptz not null default now(),
  check (begin_pos <= end_pos)
);

-- One row per shard ever created: when it was opened, when it was last seen without live tasks
-- (closed_at, set as begin_pos moves past it) and when it was dropped.
create table asyncflow.shards (
  task_type text not null references asyncflow.task_types on delete cascade,
  shard integer not null,
  created_at timestamptz not null default now(),
  closed_at timestamptz,
  dropped_at timestamptz,
  primary key (task_type, shard)
);

-- Idempotency keys live beside the tasks: a unique index on a partitioned table must contain the
-- partition keys, so uniqueness per type cannot be enforced on the tasks themselves.
create table asyncflow.idempotency_keys (
  task_type text not null references asyncflow.task_types on delete cascade,
  idempotency_key text not null,
  shard integer not null,
  id bigint not null,
  created_at timestamptz not null default now(),
  primary key (task_type, idempotency_key)
);

create index idempotency_keys_shard on asyncflow.idempotency_keys (task_type, shard);

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
  -- one of many queues within a type (claims take the keys by turns where the type has fair_queues)
  queue_key text,
  user_id text,
  idempotency_key text,
  context jsonb not null default '{}',
  result jsonb,
  last_error text,
  schedule_log jsonb not null default '[]',
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  finished_at timestamptz,
  -- the run record a workflow's task works for: an event id, or for a segment
  -- event_id || '#' || n; null for every task that is not a workflow's
  run_ref text
) partition by list (task_type);

-- Monotonic counters for monitoring (GET /metrics), per type and per (type, stage): they
-- survive retention dropping shards, unlike counts of the task rows. Each connection adds to
-- its own slot (backend pid mod 16), so concurrent workers never queue on one counter row;
-- readers sum the slots. Written once per claim / report / rescue statement, not per task.
create table asyncflow.type_counters (
  task_type text not null,
  slot smallint not null,
  claimed bigint not null default 0,
  succeeded bigint not null default 0,
  -- failed for good
  failed bigint not null default 0,
  -- failed tries that will be tried again
  retried bigint not null default 0,
  -- leases that ran out (see rescue_expired)
  rescued bigint not null default 0,
  primary key (task_type, slot)
);

-- Stage call durations from the reports' schedule-log entries (cost_ms): buckets[k + 1] counts
-- the calls with exactly k of asyncflow.stage_time_bounds() (seconds) below their duration, so
-- bucket 1 is "<= the first bound" and the last is "above every bound" (a reader makes them
-- cumulative).
create table asyncflow.stage_times (
  task_type text not null,
  stage text not null,
  slot smallint not null,
  calls bigint not null default 0,
  seconds double precision not null default 0,
  buckets bigint[] not null,
  primary key (task_type, stage, slot)
);

-- What a worker receives for each claimed task.
create type asyncflow.claimed_task as (
  task_id text,
  task_type text,
  stage text,
  context jsonb,
  priority integer,
  attempt integer,
  claim_seq integer,
  user_id text,
  lease_until timestamptz,
  claimed_at timestamptz,
  -- the task's queue key (null: none)
  queue_key text
);

-- What a held claim returns for each task (type_hold__<type>).
create type asyncflow.held_task as (
  task_id text,
  task_type text,
  stage text,
  context jsonb,
  priority integer,
  attempt integer,
  claim_seq integer,
  user_id text,
  lease_until timestamptz,
  claimed_at timestamptz,
  queue_key text,
  -- true: locked by the caller's transaction, still 'pending' until type_finish__; false:
  -- claimed ('running') by type_claim__
  held boolean
);

-- What create_task needs of a type, in one row (its newest shard, id sequence, initial stage,
-- retry settings, and the context limit): each table a statement reads costs a transaction a
-- lock and the start of a scan. Kept by triggers on task_types, positions and config, in the
-- transaction that changes them; when the row is missing, create_task reads the three tables.
create table asyncflow.enqueue_info (
  task_type text primary key references asyncflow.task_types on delete cascade,
  end_pos integer not null,
  id_seq regclass not null,
  initial_stage text not null,
  max_retry_num integer not null,
  max_retry_interval integer not null,
  max_context_bytes integer not null
);

-- Where the type's last fair claim stopped: the next one starts at the key after after_key.
create table asyncflow.queue_cursors (
  task_type text primary key references asyncflow.task_types on delete cascade,
  -- null: from the first key
  after_key text,
  updated_at timestamptz not null default now()
);

-- Per-key limits that differ from the type's queue_concurrency: a busy tenant allowed more, a
-- misbehaving site held (0: none of its tasks is claimed until the limit goes). Read by the
-- claims of a type with fair_queues; the key '' is the queue of the tasks without a key.
create table asyncflow.queue_limits (
  task_type text not null references asyncflow.task_types on delete cascade,
  queue_key text not null check (length(queue_key) <= 255),
  concurrency integer not null check (concurrency between 0 and 1000000),
  updated_at timestamptz not null default now(),
  primary key (task_type, queue_key)
);

-- Workflows: versioned pipeline definitions and the records of their runs. Every node's work is
-- an ordinary task of its function's type (claims, leases, retries and fencing are the task
-- engine's); these tables only say where each run stands.
--
--   pipelines       name + version -> status (draft / active / retired), definition, compiled plan
--   runs            one per started pipeline; pinned to its version
--   run_events      one per plan node of a run, event_id = run_id || '_' || node
--   run_segments    one per slice of a dynamic fan-out, segment_id = event_id || '_' || n
--   run_traces      one per function call made for a run
--   callbacks       notify_url deliveries (run outcomes, callback nodes), each attempt recorded
--
-- Run records are partitioned by day (the day is part of every id: runs are 'r<yyyymmdd>-<hex>'),
-- and retention drops whole days (drop_expired_runs): no DELETE, no dead tuples. The tasks that
-- did the work live in their types' shards and are dropped with them.

create table asyncflow.pipelines (
  name text not null check (name ~ '^[a-z][a-z0-9_]{0,39}$'),
  version integer not null check (version >= 1),
  status text not null check (status in ('draft', 'active', 'retired')),
  -- as given by the user
  definition jsonb not null,
  -- validated and pruned: what runs execute (see compile_pipeline)
  plan jsonb not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (name, version)
);

create unique index pipelines_one_active on asyncflow.pipelines (name) where status = 'active';

-- Days that have run partitions (created by ensure_run_day, dropped by drop_expired_runs).
create table asyncflow.run_days (
  day date primary key,
  created_at timestamptz not null default now(),
  dropped_at timestamptz
);

create type asyncflow.run_status as enum ('scheduled', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled');

create table asyncflow.runs (
  day date not null,
  run_id text not null,
  pipeline text not null,
  version integer not null,
  status asyncflow.run_status not null,
  input jsonb not null,
  result jsonb,
  error text,
  -- where the outcome is POSTed, and the caller's own key for it (kept by run retries)
  notify_url text,
  notify_key text,
  -- a sub-pipeline run: the parent's event waiting for it, and the nesting depth
  parent_event text,
  depth integer not null default 0,
  -- 1 for a first run; a retried run (new run, same notify key) counts on
  attempt integer not null default 1,
  retry_of text,
  retried_by text,
  run_at timestamptz not null,
  deadline timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  total_cost_ms bigint,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  sub_runs integer not null default 0,
  primary key (run_id, day)
) partition by range (day);

comment on column asyncflow.runs.sub_runs is
  'on a root run: the sub-pipeline runs started in its tree, at most 1000';

create index runs_open on asyncflow.runs (status, deadline) where status in ('scheduled', 'running');
create index runs_scheduled on asyncflow.runs (run_at) where status = 'scheduled';
create index runs_notify_key on asyncflow.runs (notify_key) where notify_key is not null;
create index runs_pipeline on asyncflow.runs (pipeline, created_at);

-- Event statuses: waiting (not all in-edges resolved), pending (its task is queued), running,
-- external (an asynchronous node waiting for complete_node), succeeded, failed, skipped (on a
-- branch a router did not take), cancelled (the run ended first).
create table asyncflow.run_events (
  day date not null,
  event_id text not null,
  run_id text not null,
  node text not null,
  node_type text not null,
  status text not null default 'waiting'
    check (status in ('waiting', 'pending', 'running', 'external', 'succeeded', 'failed', 'skipped', 'cancelled')),
  -- the status it was cancelled from, so that a retried run resumes where it stopped
  cancelled_from text,
  -- in-edges resolved so far (latch_cnt); the node runs when latch_cnt = in_degree and at least
  -- one of them was taken (live_cnt > 0), and is skipped when none was
  in_degree integer not null,
  latch_cnt integer not null default 0,
  live_cnt integer not null default 0,
  -- executions: calls of its task (each claim, function retries and rescues included) for a
  -- task node, activations for any other node
  exec_cnt integer not null default 0,
  -- activations: 1 normally, more after timeout restarts or a retry by hand (the timeout
  -- restarts are counted against timeout_retries with it)
  activations integer not null default 0,
  segment_cnt integer not null default 0,
  segments_done integer not null default 0,
  task_id text,
  child_run text,
  result jsonb,
  error text,
  deadline timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  total_cost_ms bigint,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (event_id, day)
) partition by range (day);

create index run_events_run on asyncflow.run_events (run_id);
create index run_events_deadline on asyncflow.run_events (deadline) where status in ('pending', 'running', 'external');

create table asyncflow.run_segments (
  day date not null,
  segment_id text not null,
  event_id text not null,
  run_id text not null,
  n integer not null,
  status text not null default 'pending' check (status in ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
  -- calls of its task (each claim)
  exec_cnt integer not null default 0,
  -- starts: 1, more after timeout restarts or a retry by hand
  activations integer not null default 1,
  item jsonb,
  task_id text,
  result jsonb,
  error text,
  deadline timestamptz,
  started_at timestamptz,
  finished_at timestamptz,
  total_cost_ms bigint,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (segment_id, day)
) partition by range (day);

create index run_segments_event on asyncflow.run_segments (event_id, n);
create index run_segments_deadline on asyncflow.run_segments (deadline) where status in ('pending', 'running');

create table asyncflow.run_traces (
  day date not null,
  trace_id uuid not null default gen_random_uuid(),
  run_id text not null,
  event_id text not null,
  segment_id text,
  task_id text not null,
  stage text,
  attempt integer,
  worker text,
  -- the call's outcome: advance, succeed, fail, later, release, rescued, cancelled
  outcome text,
  -- what the function was given and what it answered
  request jsonb,
  response jsonb,
  error text,
  started_at timestamptz,
  cost_ms bigint,
  created_at timestamptz not null,
  primary key (trace_id, day)
) partition by range (day);

create index run_traces_run on asyncflow.run_traces (run_id, created_at);

create sequence asyncflow.callback_seq;

create table asyncflow.callbacks (
  day date not null,
  -- run_id || '_cb' || n: the day is derivable from it
  callback_id text not null,
  run_id text not null,
  -- 'run': the run's outcome to its notify_url; 'node': a callback node's POST
  kind text not null check (kind in ('run', 'node')),
  event_id text,
  url text not null,
  payload jsonb not null,
  status text not null default 'pending' check (status in ('pending', 'delivered', 'failed', 'cancelled')),
  attempts integer not null default 0,
  -- when the next attempt is due; while an attempt is out, when it is presumed lost
  next_attempt_at timestamptz not null,
  owner text,
  give_up_at timestamptz not null,
  last_error text,
  -- every attempt: {attempt, at, http_status, error, cost_ms}
  log jsonb not null default '[]',
  delivered_at timestamptz,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (callback_id, day)
) partition by range (day);

create index callbacks_due on asyncflow.callbacks (next_attempt_at) where status = 'pending';
create index callbacks_run on asyncflow.callbacks (run_id);

-- Runs ended per pipeline and status, for monitoring (GET /metrics): monotonic, they survive
-- retention dropping the run records. Sharded by slot (backend pid mod 16) like type_counters.
create table asyncflow.pipeline_counters (
  pipeline text not null,
  status asyncflow.run_status not null,
  slot smallint not null,
  runs bigint not null default 0,
  primary key (pipeline, status, slot)
);

revoke all on all tables in schema asyncflow from public;
