-- Figures that cost the same at any number of tasks: per-status counts kept beside the
-- monotonic counters, a ring of history sampled from them, and the live workers and the
-- maintenance leader.

-- Tasks stored now in each status, per type, as sums of deltas: a slot's values may be negative,
-- only the sum over a type's slots (and its unfolded status_deltas) is the count. Claims and
-- reports add to them in the statement that already adds to the row's monotonic counters.
alter table asyncflow.type_counters
  add column in_pending bigint not null default 0,
  add column in_running bigint not null default 0,
  add column in_succeeded bigint not null default 0,
  add column in_failed bigint not null default 0,
  add column in_cancelled bigint not null default 0;

-- Status deltas of transitions made inside callers' own transactions (create, cancel, retry by
-- hand) and of dropped shards: appended, never updated, so a long application transaction never
-- holds a counter row that another one waits for. Folded into type_counters by maintenance.
create table asyncflow.status_deltas (
  task_type text not null,
  in_pending bigint not null default 0,
  in_running bigint not null default 0,
  in_succeeded bigint not null default 0,
  in_failed bigint not null default 0,
  in_cancelled bigint not null default 0
);

-- The counts start from the tasks stored when this change is applied; the share lock keeps
-- writers out until the new functions that keep them are in place (same transaction).
lock table asyncflow.tasks in share mode;
insert into asyncflow.type_counters as k (task_type, slot, in_pending, in_running, in_succeeded, in_failed, in_cancelled)
select t.task_type, 0, count(*) filter (where t.status = 'pending'), count(*) filter (where t.status = 'running'),
  count(*) filter (where t.status = 'succeeded'), count(*) filter (where t.status = 'failed'),
  count(*) filter (where t.status = 'cancelled')
from asyncflow.tasks t group by t.task_type
on conflict (task_type, slot) do update set in_pending = excluded.in_pending, in_running = excluded.in_running,
  in_succeeded = excluded.in_succeeded, in_failed = excluded.in_failed, in_cancelled = excluded.in_cancelled;

-- History: per type, one point per minute (a ring of 1440 slots: a day) and one per hour (744
-- slots: 31 days). A slot is overwritten when its time comes round again, so old points go
-- whole and the table never grows. succeeded / failed / retried count what happened in the
-- interval; ready, running and lag_seconds are the last sample taken in it.
create table asyncflow.stats_points (
  task_type text not null,
  resolution integer not null check (resolution in (60, 3600)),
  slot integer not null,
  at timestamptz not null,
  succeeded bigint not null default 0,
  failed bigint not null default 0,
  retried bigint not null default 0,
  ready bigint not null default 0,
  running bigint not null default 0,
  lag_seconds double precision not null default 0,
  primary key (task_type, resolution, slot)
);

-- The monotonic totals at the last sample, per type: the next sample counts from them.
create table asyncflow.stats_last (
  task_type text primary key,
  at timestamptz not null,
  succeeded bigint not null,
  failed bigint not null,
  retried bigint not null
);

-- Live workers: each writes its row every few seconds and removes it when it exits cleanly;
-- maintenance removes the rows of workers not seen for a while.
create table asyncflow.workers (
  id text primary key,
  host text not null,
  pid integer not null,
  types text[] not null,
  in_flight integer not null,
  started_at timestamptz not null,
  last_seen timestamptz not null
);

-- The maintenance leader: the process holding the maintenance advisory lock, as it last said.
create table asyncflow.maintenance_leader (
  one boolean primary key default true check (one),
  id text not null,
  host text not null,
  since timestamptz not null,
  last_seen timestamptz not null
);
