-- Live workers and the maintenance leader, as they report themselves (for GET /v1/workers).
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- heartbeat_worker: the worker p_id is alive: its row is written (host, pid, the types it
-- serves, the calls it has in flight, when it started) with last_seen = p_now. Bad values
-- raise AF006 and write nothing.
create or replace function asyncflow.heartbeat_worker(p_id text, p_host text, p_pid integer, p_types text[],
  p_in_flight integer, p_started_at timestamptz, p_now timestamptz default null) returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
begin
  if p_id is null or length(p_id) not between 1 and 255 then
    perform asyncflow.raise_error('AF006', 'worker id must be a string of 1 to 255 characters');
  elsif p_host is null or length(p_host) > 255 then
    perform asyncflow.raise_error('AF006', 'worker host must be a string of at most 255 characters');
  elsif p_pid is null or p_pid < 0 then
    perform asyncflow.raise_error('AF006', 'worker pid must be a non-negative integer');
  elsif p_types is null or cardinality(p_types) > 1000 or array_position(p_types, null) is not null then
    perform asyncflow.raise_error('AF006', 'worker types must be an array of at most 1000 type names');
  elsif p_in_flight is null or p_in_flight < 0 then
    perform asyncflow.raise_error('AF006', 'worker in_flight must be a non-negative integer');
  elsif p_started_at is null or not asyncflow.now_ok(p_started_at) then
    perform asyncflow.raise_error('AF006', 'worker started_at must be a timestamp from 0002-01-01 to 9999-01-01');
  end if;
  insert into asyncflow.workers as w (id, host, pid, types, in_flight, started_at, last_seen)
  values (p_id, p_host, p_pid, p_types, p_in_flight, p_started_at, v_now)
  on conflict (id) do update set host = excluded.host, pid = excluded.pid, types = excluded.types,
    in_flight = excluded.in_flight, started_at = excluded.started_at, last_seen = excluded.last_seen;
end
$$;

-- remove_worker: the worker p_id exited cleanly. Returns whether it had a row.
create or replace function asyncflow.remove_worker(p_id text) returns boolean
language sql security definer set search_path = pg_catalog, pg_temp as $$
  with gone as (delete from asyncflow.workers w where w.id = p_id returning 1)
  select exists (select 1 from gone)
$$;

-- prune_workers: removes the rows of workers not seen for p_stale_seconds (they died without
-- a clean exit). Returns how many. Maintenance.
create or replace function asyncflow.prune_workers(p_stale_seconds double precision, p_now timestamptz default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_n integer;
begin
  delete from asyncflow.workers w where w.last_seen < v_now - make_interval(secs => p_stale_seconds);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;

-- list_workers: the workers seen within p_within_seconds of p_now, by id.
create or replace function asyncflow.list_workers(p_within_seconds double precision, p_now timestamptz default null)
returns table (id text, host text, pid integer, types text[], in_flight integer, started_at timestamptz,
  last_seen timestamptz)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select w.id, w.host, w.pid, w.types, w.in_flight, w.started_at, w.last_seen from asyncflow.workers w
  where w.last_seen >= asyncflow.check_now(p_now) - make_interval(secs => p_within_seconds)
  order by w.id
$$;

-- note_leader: the caller holds the maintenance lock. The same leader only moves last_seen;
-- a new one replaces the row, with since = p_now. Called by the leader only, so never raced.
create or replace function asyncflow.note_leader(p_id text, p_host text, p_now timestamptz default null) returns void
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
begin
  if p_id is null or length(p_id) not between 1 and 255 or p_host is null or length(p_host) > 255 then
    perform asyncflow.raise_error('AF006', 'leader id and host must be strings of at most 255 characters');
  end if;
  insert into asyncflow.maintenance_leader as m (one, id, host, since, last_seen)
  values (true, p_id, p_host, v_now, v_now)
  on conflict (one) do update set
    since = case when m.id = excluded.id and m.host = excluded.host then m.since else excluded.since end,
    id = excluded.id, host = excluded.host, last_seen = excluded.last_seen;
end
$$;

-- leave_leadership: the leader p_id stepped down cleanly: its row goes.
create or replace function asyncflow.leave_leadership(p_id text) returns void
language sql security definer set search_path = pg_catalog, pg_temp as $$
  delete from asyncflow.maintenance_leader m where m.id = p_id
$$;

-- take_lead: the maintenance lead as a lease, for processes that reach the database through a
-- pooler in transaction mode, where a session advisory lock cannot be held. The caller leads when
-- the row is its own or was last renewed more than p_lease_seconds ago, and leading renews it
-- (as note_leader). Two callers at once on an expired row: the second waits on the first's row
-- lock, then finds the row renewed by someone else, and does not lead.
create or replace function asyncflow.take_lead(p_id text, p_host text, p_lease_seconds double precision,
  p_now timestamptz default null) returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_led boolean;
begin
  if p_id is null or length(p_id) not between 1 and 255 or p_host is null or length(p_host) > 255 then
    perform asyncflow.raise_error('AF006', 'leader id and host must be strings of at most 255 characters');
  end if;
  if p_lease_seconds is null or not (p_lease_seconds between 0.01 and 86400) then
    perform asyncflow.raise_error('AF006', 'the lease must be between 0.01 and 86400 seconds');
  end if;
  insert into asyncflow.maintenance_leader as m (one, id, host, since, last_seen)
  values (true, p_id, p_host, v_now, v_now)
  on conflict (one) do update set
    since = case when m.id = excluded.id and m.host = excluded.host then m.since else excluded.since end,
    id = excluded.id, host = excluded.host, last_seen = excluded.last_seen
  where (m.id = excluded.id and m.host = excluded.host)
    or m.last_seen < v_now - make_interval(secs => p_lease_seconds)
  returning true into v_led;
  return coalesce(v_led, false);
end
$$;

-- current_leader: the maintenance leader, if it said so within p_within_seconds of p_now.
create or replace function asyncflow.current_leader(p_within_seconds double precision, p_now timestamptz default null)
returns table (id text, host text, since timestamptz, last_seen timestamptz)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select m.id, m.host, m.since, m.last_seen from asyncflow.maintenance_leader m
  where m.last_seen >= asyncflow.check_now(p_now) - make_interval(secs => p_within_seconds)
$$;

-- maintenance_functions: the functions the maintenance services call (src/maintenance, the
-- workflows' services in src/workflow and the leader's note_leader/leave_leadership/take_lead). A test
-- runs every service as a role granted exactly these, so the list cannot fall behind.
create or replace function asyncflow.maintenance_functions() returns setof text
language sql immutable security invoker set search_path = pg_catalog, pg_temp as $$
  select unnest(array['rescue_expired', 'expire_waits', 'drop_expired_events', 'roll_shard', 'advance_begin_pos', 'drop_expired_shards',
    'list_task_types', 'shard_positions', 'list_schedules', 'release_schedule_tick', 'note_schedule',
    'drop_expired_unique_keys', 'sample_stats', 'prune_workers', 'prune_rate_buckets', 'check_runs',
    'claim_callbacks', 'record_callback', 'drop_expired_runs', 'note_leader', 'leave_leadership', 'take_lead',
    'status_counts'])
$$;

-- can_maintain: whether the calling role may run every maintenance service, and if not, which
-- of their functions it may not execute (or which are missing). A process checks it before it
-- tries for the maintenance lock, so that a role that would hold the lock and fail every pass
-- (a worker role) never keeps the owner's `asyncflow maintain` from leading. Security invoker:
-- the question is about the caller, not the schema's owner.
create or replace function asyncflow.can_maintain(out ok boolean, out denied text[])
language sql stable security invoker set search_path = pg_catalog, pg_temp as $$
  with needed as (
    select f.name, bool_and(has_function_privilege(p.oid, 'execute')) as allowed
    from asyncflow.maintenance_functions() f(name)
    left join pg_proc p on p.proname = f.name and p.pronamespace = 'asyncflow'::regnamespace
    group by f.name
  )
  select coalesce(bool_and(allowed), false),
    coalesce(array_agg(name order by name) filter (where allowed is not true), '{}')
  from needed
$$;

-- max_context_bytes: the largest context or result a report takes (the config's limit), for a
-- worker that runs a task's next stage at once (a hold's chained stages, templates/finish.sql)
-- and must know beforehand that its report will pass.
create or replace function asyncflow.max_context_bytes() returns integer
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select max_context_bytes from asyncflow.config
$$;
