-- Reads for monitoring and for the start-up check, granted to asyncflow_client (so to workers and
-- servers too) in 90_grants.sql: the tables stay private, these functions read them as the owner.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

-- schema_state: the newest migration applied and the checksum of the SQL API last applied, so a
-- process that does not migrate can tell whether the database is current for its build.
create or replace function asyncflow.schema_state()
returns table (version bigint, sql_api_checksum text)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select (select max(h.version)::bigint from asyncflow.refinery_schema_history h),
         (select a.checksum from asyncflow.sql_api a)
$$;

-- missing_grants: the functions of schema asyncflow that p_role (asyncflow_client or
-- asyncflow_worker) may execute and the calling role may not, by name: empty when the caller can
-- do that role's work. Read from the grants themselves, so it follows 90_grants.sql and the
-- per-type functions' own grants. p_task_types narrows the per-type functions (type_claim__x,
-- type_hold__x, ...) to those types. Security invoker: it asks about the caller. A start-up check
-- of worker and serve, which name the grant that is missing.
create or replace function asyncflow.missing_grants(p_role text, p_task_types text[] default null)
returns text[]
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
begin
  if p_role is null or p_role not in ('asyncflow_client', 'asyncflow_worker') then
    perform asyncflow.raise_error('AF006', format(
      'p_role: %s is not asyncflow_client or asyncflow_worker', coalesce(p_role, 'null')));
  end if;
  return (
    select coalesce(array_agg(distinct p.proname::text order by p.proname::text), '{}')
    from pg_proc p
    where p.pronamespace = 'asyncflow'::regnamespace
      and has_function_privilege(p_role, p.oid, 'execute')
      and not has_function_privilege(p.oid, 'execute')
      and (p_task_types is null or p.proname !~ '^type_[a-z]+__'
           or substring(p.proname from '^type_[a-z]+__(.*)$') = any(p_task_types)));
end
$$;

-- list_task_types: every registered type's settings (task_type_json), by name.
create or replace function asyncflow.list_task_types() returns setof jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select asyncflow.task_type_json(y) from asyncflow.task_types y order by y.task_type
$$;

-- shard_positions: per type (or only p_task_type), begin_pos, end_pos and the shards not dropped.
create or replace function asyncflow.shard_positions(p_task_type text default null)
returns table (task_type text, begin_pos integer, end_pos integer, shards bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select p.task_type, p.begin_pos, p.end_pos,
    (select count(*) from asyncflow.shards s where s.task_type = p.task_type and s.dropped_at is null)
  from asyncflow.positions p
  where p_task_type is null or p.task_type = p_task_type
  order by p.task_type
$$;

-- count_by_status: a type's stored tasks per status (a full count: for reports, not hot paths).
create or replace function asyncflow.count_by_status(p_task_type text)
returns table (status text, n bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select t.status::text, count(*) from asyncflow.tasks t where t.task_type = p_task_type group by t.status
$$;

-- status_counts: per type, the tasks stored now in each status, from the counters the SQL API
-- keeps on every transition (type_counters' in_* columns summed over slots, plus the deltas not
-- yet folded): a few rows per type whatever the number of tasks.
create or replace function asyncflow.status_counts()
returns table (task_type text, pending bigint, running bigint, succeeded bigint, failed bigint, cancelled bigint,
  waiting bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp set jit = off as $$
  with c as (
    select k.task_type, k.in_pending, k.in_running, k.in_succeeded, k.in_failed, k.in_cancelled, k.in_waiting
    from asyncflow.type_counters k
    union all
    select d.task_type, d.in_pending, d.in_running, d.in_succeeded, d.in_failed, d.in_cancelled, d.in_waiting
    from asyncflow.status_deltas d
  )
  select y.task_type, coalesce(sum(c.in_pending), 0)::bigint, coalesce(sum(c.in_running), 0)::bigint,
    coalesce(sum(c.in_succeeded), 0)::bigint, coalesce(sum(c.in_failed), 0)::bigint,
    coalesce(sum(c.in_cancelled), 0)::bigint, coalesce(sum(c.in_waiting), 0)::bigint
  from asyncflow.task_types y left join c on c.task_type = y.task_type
  group by y.task_type order by y.task_type
$$;

-- fold_status_deltas: moves the appended status deltas into the counters' rows (maintenance,
-- every few seconds), so readers sum a few rows. Returns the deltas folded.
create or replace function asyncflow.fold_status_deltas() returns bigint
language sql security definer set search_path = pg_catalog, pg_temp as $$
  with moved as (
    delete from asyncflow.status_deltas d returning d.*
  ), folded as (
    insert into asyncflow.type_counters as k (task_type, slot, in_pending, in_running, in_succeeded, in_failed, in_cancelled,
      in_waiting)
    select m.task_type, pg_backend_pid() % 16, sum(m.in_pending), sum(m.in_running), sum(m.in_succeeded),
      sum(m.in_failed), sum(m.in_cancelled), sum(m.in_waiting)
    from moved m group by m.task_type
    on conflict (task_type, slot) do update set in_pending = k.in_pending + excluded.in_pending,
      in_waiting = k.in_waiting + excluded.in_waiting,
      in_running = k.in_running + excluded.in_running, in_succeeded = k.in_succeeded + excluded.in_succeeded,
      in_failed = k.in_failed + excluded.in_failed, in_cancelled = k.in_cancelled + excluded.in_cancelled
  )
  select count(*) from moved
$$;

-- task_type_figures: per type, ids handed out by its sequence, stored tasks per status (from
-- status_counts, not a count of the rows) and the age of the longest-held running task (read
-- from the running tasks only), for GET /metrics and the dashboard.
create or replace function asyncflow.task_type_figures()
returns table (task_type text, created bigint, pending bigint, running bigint, succeeded bigint,
  failed bigint, cancelled bigint, oldest_running_age double precision, waiting bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp set jit = off as $$
  select y.task_type, coalesce(s.last_value, 0),
    n.pending, n.running, n.succeeded, n.failed, n.cancelled,
    coalesce(extract(epoch from (now() - (select min(t.claimed_at) from asyncflow.tasks t
      where t.task_type = y.task_type and t.status = 'running'))), 0)::double precision,
    n.waiting
  from asyncflow.task_types y
  join asyncflow.status_counts() n on n.task_type = y.task_type
  join pg_catalog.pg_class q on q.oid = y.id_seq
  join pg_catalog.pg_namespace ns on ns.oid = q.relnamespace
  left join pg_catalog.pg_sequences s on s.schemaname = ns.nspname and s.sequencename = q.relname
  order by y.task_type
$$;

-- task_counter_totals: the monotonic per-type counters, summed over their slots.
create or replace function asyncflow.task_counter_totals()
returns table (task_type text, claimed bigint, succeeded bigint, failed bigint, retried bigint, rescued bigint)
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select c.task_type, sum(c.claimed)::bigint, sum(c.succeeded)::bigint, sum(c.failed)::bigint,
    sum(c.retried)::bigint, sum(c.rescued)::bigint
  from asyncflow.type_counters c group by c.task_type order by c.task_type
$$;

-- stage_time_totals: stage call durations per (type, stage), summed over their slots; buckets[k]
-- counts the calls with exactly k of bounds below their duration.
create or replace function asyncflow.stage_time_totals()
returns table (task_type text, stage text, calls bigint, seconds double precision,
  bounds double precision[], buckets bigint[])
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select s.task_type, s.stage, sum(s.calls)::bigint, sum(s.seconds)::double precision,
    asyncflow.stage_time_bounds(),
    array(select sum(b)::bigint from asyncflow.stage_times s2, unnest(s2.buckets) with ordinality u(b, i)
          where s2.task_type = s.task_type and s2.stage = s.stage group by i order by i)
  from asyncflow.stage_times s group by s.task_type, s.stage order by s.task_type, s.stage
$$;
