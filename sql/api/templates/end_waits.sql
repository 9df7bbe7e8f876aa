-- type_end_waits__<type>(shards, ids, wakes, now): the row updates of asyncflow.end_waits
-- (sql/api/45_events.sql) on the type's own table: each task, if still `waiting`, is pending at
-- once with its wake ({"event": ..., "timed_out": ...}). Returns the number changed. Rendered per
-- type by asyncflow.create_type_functions ({{end_waits}} is the function's name, {{tasks}} the
-- type's table). Planned once per type (force_generic_plan): an update of the partitioned parent
-- planned its custom plan at every call, most of a send_event's cost.
create or replace function asyncflow.{{end_waits}}(p_shards integer[], p_ids bigint[], p_wakes jsonb[],
  p_now timestamptz)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp
set jit = off set plan_cache_mode = force_generic_plan as $body$
declare
  v_n integer := 0;
  v_one integer;
begin
  -- one primary-key update per task: a join of the tasks to the unnested arrays cost about ten
  -- times as much per call (send_event wakes one task most often)
  for k in 1 .. coalesce(cardinality(p_ids), 0) loop
    update asyncflow.{{tasks}} t set status = 'pending', wake = p_wakes[k], owner = null, lease_until = null,
      order_time = p_now - make_interval(secs => t.priority), updated_at = p_now,
      schedule_log = asyncflow.append_log(t.schedule_log, jsonb_build_object(
        'event', case when (p_wakes[k] ->> 'timed_out')::boolean then 'wait timed out' else 'event received' end,
        'at', p_now))
    where t.shard = p_shards[k] and t.id = p_ids[k] and t.status = 'waiting';
    get diagnostics v_one = row_count;
    v_n := v_n + v_one;
  end loop;
  return v_n;
end
$body$;
