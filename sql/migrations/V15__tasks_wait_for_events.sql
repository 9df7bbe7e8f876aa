-- Tasks that wait for an event (sql/api/45_events.sql): a stage replies
-- {"wait": {"event": KEY, "timeout": SECONDS}, "next_stage": S} and its task is `waiting`
-- until send_event(KEY) or the timeout moves it to S.
--
-- The new status value is only added here, never used: PostgreSQL refuses an enum value used in
-- the transaction that added it. sql/api, applied after the migrations in a transaction of its
-- own, is the first to use it.
alter type asyncflow.task_status add value if not exists 'waiting' after 'running';

-- Events sent, kept for config.event_retention seconds, so that a wait that begins after its
-- event (the event came while the call that waits was still running) still finds it.
create table if not exists asyncflow.events (
  id bigint generated always as identity primary key,
  event_key text not null,
  payload jsonb not null,
  sent_at timestamptz not null
);
-- a wait's own check: the first event of its key sent at or after its call began (retention
-- reads the events in id order, which is the order they were sent in, give or take the events
-- of transactions running at once: no index of its own to write on every send)
create index if not exists events_key_sent_at on asyncflow.events (event_key, sent_at);

-- One row per waiting task: what it waits for, since when (the start of the call that asked to
-- wait) and until when. Outside the tasks' tables, so that waiting tasks are in no index a claim
-- reads, and send_event finds a key's waiters through one index, whatever the number waiting.
-- The row goes when the wait ends (an event, the timeout, a cancel): each wait ends once.
create table if not exists asyncflow.waits (
  task_type text not null,
  shard integer not null,
  id bigint not null,
  event_key text not null,
  since timestamptz not null,
  until timestamptz not null,
  primary key (task_type, shard, id)
);
create index if not exists waits_event_key on asyncflow.waits (event_key);
create index if not exists waits_until on asyncflow.waits (until);

-- How long events are kept (seconds): a wait that begins later than this after its event
-- misses it. A day by default.
alter table asyncflow.config
  add column if not exists event_retention integer not null default 86400 check (event_retention between 1 and 31536000);

-- What ended a task's wait, for the call of its next stage: {"event": {"key", "payload",
-- "sent_at"} or null, "timed_out": bool}. Set when the wait ends, cleared when that stage is done.
alter table asyncflow.tasks add column if not exists wake jsonb;

-- Claims hand it to the worker. held_task keeps held last (a hold that falls back to a claim
-- answers the claim's columns followed by held = false). Each change once, like the rest of
-- this file (composite types have no IF NOT EXISTS).
do $$
begin
  if not exists (select 1 from pg_catalog.pg_attribute
                 where attrelid = 'asyncflow.claimed_task'::regclass and attname = 'wake' and not attisdropped) then
    alter type asyncflow.claimed_task add attribute wake jsonb;
    alter type asyncflow.held_task drop attribute held, add attribute wake jsonb, add attribute held boolean;
  end if;
end
$$;

-- Waiting tasks per type, kept beside the other statuses' counts.
alter table asyncflow.type_counters add column if not exists in_waiting bigint not null default 0;
alter table asyncflow.status_deltas add column if not exists in_waiting bigint not null default 0;
