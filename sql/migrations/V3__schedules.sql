-- Periodic schedules, and the columns that say which schedule and tick a task or run was
-- released for.

-- A schedule: a cron expression in a time zone, and what each of its ticks releases (a task of
-- task_type, or a run of pipeline). Ticks are computed by the maintenance scheduler; next_tick
-- and error are what its last pass found.
create table asyncflow.schedules (
  name text primary key check (name ~ '^[a-z][a-z0-9_.-]{0,63}$'),
  cron text not null check (length(cron) between 1 and 200),
  time_zone text not null default 'UTC',
  -- exactly one of task_type and pipeline
  task_type text check (task_type ~ '^[a-z][a-z0-9_]{0,39}$'),
  pipeline text check (pipeline ~ '^[a-z][a-z0-9_]{0,39}$'),
  -- the spec as set (normalized: every key present)
  spec jsonb not null,
  missed text not null default 'skip' check (missed in ('skip', 'last', 'all')),
  max_catch_up integer not null default 10 check (max_catch_up between 1 and 1000),
  paused boolean not null default false,
  -- only ticks after this are released: set when the schedule is created, when its cron or time
  -- zone changes and when it is resumed
  since timestamptz not null,
  next_tick timestamptz,
  last_tick timestamptz,
  last_task_id text,
  last_run_id text,
  last_released_at timestamptz,
  -- why the scheduler could not use the schedule on its last pass (null: it could)
  error text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  check ((task_type is null) <> (pipeline is null))
);

-- One row per released tick: the database's guarantee of exactly one task or run per tick,
-- however many maintainers race. Rows older than a day behind the schedule's last tick are
-- pruned (no maintainer looks that far back behind last_tick).
create table asyncflow.schedule_ticks (
  schedule text not null references asyncflow.schedules on delete cascade,
  tick timestamptz not null,
  task_id text,
  run_id text,
  created_at timestamptz not null,
  primary key (schedule, tick)
);

alter table asyncflow.tasks add column schedule text, add column tick timestamptz;
alter table asyncflow.runs add column schedule text, add column tick timestamptz;

-- Idempotent start_run: a key per pipeline names the run it started, for as long as the run's
-- records are kept (the key leaves with its day, see drop_expired_runs). The runs are partitioned
-- by day, so the uniqueness lives here, beside them (as idempotency_keys does for tasks).
alter table asyncflow.runs add column idempotency_key text;

create table asyncflow.run_idempotency_keys (
  pipeline text not null,
  idempotency_key text not null check (length(idempotency_key) between 1 and 255),
  run_id text not null,
  day date not null,
  created_at timestamptz not null,
  primary key (pipeline, idempotency_key)
);

create index run_idempotency_keys_day on asyncflow.run_idempotency_keys (day);

-- start_run takes an idempotency key: the signature without it goes
drop function if exists asyncflow.start_run(text, jsonb, text, timestamptz, text, integer, timestamptz);

-- Uniqueness by key over a window, or while the task is pending or running (create_task's
-- unique_key and unique_for): the key's newest task, independent of the shards' retention.
create table asyncflow.unique_keys (
  task_type text not null references asyncflow.task_types on delete cascade,
  unique_key text not null check (length(unique_key) between 1 and 255),
  shard integer not null,
  id bigint not null,
  created_at timestamptz not null,
  -- the end of the window; null: for as long as the task is pending or running
  expires_at timestamptz,
  primary key (task_type, unique_key)
);

create index unique_keys_expires on asyncflow.unique_keys (expires_at) where expires_at is not null;

-- create_task and create_task_general take unique_key and unique_for: the signatures without
-- them go
drop function if exists asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text);
drop function if exists asyncflow.create_task_general(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text);

-- A running call's progress (a small JSON value), set by the worker's heartbeats.
alter table asyncflow.tasks add column progress jsonb;

-- Rate limits: a type's claims start at most max_starts tasks per period seconds, across all
-- workers (a token bucket of max_starts tokens, refilled continuously). rate_limited on the type
-- tells its claim to look, so types without a limit read nothing more.
alter table asyncflow.task_types add column rate_limited boolean not null default false;

create table asyncflow.rate_limits (
  task_type text primary key references asyncflow.task_types on delete cascade,
  max_starts integer not null check (max_starts between 1 and 1000000),
  period double precision not null check (period between 0.001 and 86400),
  tokens double precision not null,
  refilled_at timestamptz not null,
  updated_at timestamptz not null
);
