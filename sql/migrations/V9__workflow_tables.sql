-- Workflows (seed dag-engine-design): versioned pipeline definitions and the records of their
-- runs. Every node's work is an ordinary task of its function's type (claims, leases, retries
-- and fencing are the task engine's); these tables only say where each run stands.
--
--   pipelines       name + version -> status (draft / active / retired), definition, compiled plan
--   runs            one per started pipeline (seed cloud_process_task); pinned to its version
--   run_events      one per plan node of a run, event_id = run_id || '_' || node (seed cloud_process_event)
--   run_segments    one per slice of a dynamic fan-out, segment_id = event_id || '_' || n
--   run_traces      one per function call made for a run (seed cloud_process_trace)
--   callbacks       notify_url deliveries (run outcomes, callback nodes), each attempt recorded
--
-- Run records are partitioned by day (the day is part of every id: runs are 'r<yyyymmdd>-<hex>'),
-- and retention drops whole days (drop_expired_runs): no DELETE, no dead tuples. The tasks that
-- did the work live in their types' shards and are dropped with them.

alter table asyncflow.config
  -- how long run records are kept after their day ends (seconds)
  add column run_retention integer not null default 604800 check (run_retention between 60 and 315360000),
  -- a callback not delivered this long after it was first due is given up (seconds)
  add column callback_give_up integer not null default 86400 check (callback_give_up between 1 and 31536000),
  -- the longest wait between two delivery attempts (seconds); waits double from 1 s up to it
  add column callback_max_interval integer not null default 300 check (callback_max_interval between 1 and 86400);

-- Errors of the workflow API (class AF, see V1):
--   AF010 invalid pipeline definition (the message names the node or edge)
--   AF011 unknown pipeline or version  AF012 unknown run or node
--   AF013 the run or node is not in a state that allows the operation

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
  primary key (run_id, day)
) partition by range (day);
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
  -- seed latch_cnt: in-edges resolved so far; the node runs when latch_cnt = in_degree and at
  -- least one of them was taken (live_cnt > 0), and is skipped when none was
  in_degree integer not null,
  latch_cnt integer not null default 0,
  live_cnt integer not null default 0,
  -- activations (1 normally; a retried node counts on)
  exec_cnt integer not null default 0,
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
  exec_cnt integer not null default 1,
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

-- The link from a task to the run record it works for: an event id, or for a segment
-- event_id || '#' || n. Null for every task that is not a workflow's (no cost to them: the
-- trigger below is filtered on it).
alter table asyncflow.tasks add column run_ref text;

-- A run id's day; null when the text is not a run id (nor starts with one: event, segment and
-- callback ids do).
create function asyncflow.run_day(p_id text) returns date
language sql immutable parallel safe as $$
  select to_date(substr(p_id, 2, 8), 'YYYYMMDD') where p_id ~ '^r[0-9]{8}-[0-9a-f]{32}'
$$;

-- Creates the day's partition of every run table unless it exists. Runs rarely: the checker
-- creates today's and tomorrow's ahead of need. Leaves are created alone and then attached
-- (SHARE UPDATE EXCLUSIVE on the parent, like create_shard); the names are built from a date.
create function asyncflow.ensure_run_day(p_day date) returns void
language plpgsql as $$
declare
  v_table text;
begin
  if exists (select 1 from asyncflow.run_days where day = p_day) then
    return;
  end if;
  perform pg_advisory_xact_lock(16713, 0);
  if exists (select 1 from asyncflow.run_days where day = p_day) then
    return;
  end if;
  foreach v_table in array array['runs', 'run_events', 'run_segments', 'run_traces', 'callbacks'] loop
    execute format('create table asyncflow.%I (like asyncflow.%I including defaults including constraints)',
      v_table || '_' || to_char(p_day, 'YYYYMMDD'), v_table);
    execute format('alter table asyncflow.%I attach partition asyncflow.%I for values from (%L) to (%L)',
      v_table, v_table || '_' || to_char(p_day, 'YYYYMMDD'), p_day, p_day + 1);
  end loop;
  insert into asyncflow.run_days (day) values (p_day);
end
$$;
