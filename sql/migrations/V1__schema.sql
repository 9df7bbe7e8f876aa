-- asyncflow schema foundation: roles, the status enum, global configuration and small helpers.
-- Everything lives in schema asyncflow and is schema-qualified; nothing relies on search_path.
-- (The schema itself is created by `asyncflow migrate` before refinery runs, because refinery's
-- history table lives in it.)
create schema if not exists asyncflow;

-- Roles are cluster-wide: several databases (tests, tenants) may migrate at once, so a lost race
-- on creation is not an error.
do $$
begin
  begin
    create role asyncflow_client nologin;
  exception when duplicate_object or unique_violation then null;
  end;
  begin
    create role asyncflow_worker nologin;
  exception when duplicate_object or unique_violation then null;
  end;
end
$$;

create type asyncflow.task_status as enum ('pending', 'running', 'succeeded', 'failed', 'cancelled');

-- One-row table of installation-wide limits. Change with a plain UPDATE.
create table asyncflow.config (
  singleton boolean primary key default true check (singleton),
  max_context_bytes integer not null default 1048576 check (max_context_bytes between 1024 and 268435456),
  updated_at timestamptz not null default now()
);
insert into asyncflow.config default values;

-- Advisory lock keys (class, key): (16710, 1) migrations, (16710, 2) maintenance leader,
-- (16711, hashtext(type)) registering a new type, (16712, hashtext(type)) the wake-up debounce.

-- Errors raised by asyncflow use SQLSTATE class AF:
--   AF001 unknown task type        AF002 stale fencing token (reserved for single reports)
--   AF003 invalid task type name   AF004 priority out of range
--   AF005 context too large        AF006 invalid argument (shape, type or value of an input)
--   AF007 unknown task
create function asyncflow.raise_error(p_code text, p_message text) returns void
language plpgsql as $$
begin
  raise exception using errcode = p_code, message = p_message;
end
$$;

-- The one pattern for task type names: they become partition names (tasks_<type>_<shard>).
create function asyncflow.check_type_name(p_task_type text) returns void
language plpgsql immutable as $$
begin
  if p_task_type is null or p_task_type !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.raise_error('AF003', format(
      'invalid task type name %s: it must match ^[a-z][a-z0-9_]{0,39}$', coalesce(quote_literal(p_task_type), 'null')));
  end if;
end
$$;

-- Retry back-off in seconds after the p_attempt-th failed try (1-based) of a stage:
--   p_max > 0  progressive  min(2^(attempt-1), p_max)   1, 2, 4, 8, 10, 10 ... for p_max = 10
--   p_max < 0  uniform      |p_max| every time
--   p_max = 0  no wait
create function asyncflow.retry_backoff(p_attempt integer, p_max integer) returns interval
language sql immutable parallel safe as $$
  select make_interval(secs => case
    when p_max > 0 then least(power(2::double precision, least(greatest(p_attempt, 1) - 1, 40)), p_max::double precision)
    when p_max < 0 then abs(p_max)::double precision
    else 0 end)
$$;
