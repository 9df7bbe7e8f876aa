-- Rate limits per queue key of a type with fair_queues: every key at most queue_max_starts
-- starts per queue_rate_period seconds (the type's limit for every key), and/or a key's own
-- limit; one token bucket per key, in asyncflow.queue_rate_limits. queue_rate_limited on the
-- type tells its fair claim to look, so types without such a limit read nothing more.
alter table asyncflow.task_types
  add column queue_rate_limited boolean not null default false,
  add column queue_max_starts integer check (queue_max_starts between 1 and 1000000),
  add column queue_rate_period double precision check (queue_rate_period between 0.001 and 86400),
  add constraint task_types_queue_rate_check check ((queue_max_starts is null) = (queue_rate_period is null));

-- One row per key with a limit of its own (max_starts and period set) or a bucket under the
-- type's limit for every key (both null); the key '' is the queue of the tasks without a key.
create table asyncflow.queue_rate_limits (
  task_type text not null references asyncflow.task_types on delete cascade,
  queue_key text not null check (length(queue_key) <= 255),
  max_starts integer check (max_starts between 1 and 1000000),
  period double precision check (period between 0.001 and 86400),
  tokens double precision not null,
  refilled_at timestamptz not null,
  updated_at timestamptz not null,
  primary key (task_type, queue_key),
  check ((max_starts is null) = (period is null))
);
