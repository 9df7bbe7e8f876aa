-- Task types (seed t_schedule_cfg), shard positions (seed t_schedule_pos), the shard ledger and
-- idempotency keys.

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
  updated_at timestamptz not null default now()
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
