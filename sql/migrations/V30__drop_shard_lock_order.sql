-- V30: drop_expired_shards locks the type's table before the shard it drops.
--
-- Dropping a shard needs ACCESS EXCLUSIVE on the shard and on its parent, tasks_<type>. V6 locked
-- the shard first and met the parent's lock at DROP TABLE, the reverse of the order claims,
-- reports and inserts take (the parent, then its shards): a claim holding the parent and waiting
-- for the shard deadlocked with it (found by a bug hunt: 18 of 375 claims failed with 40P01 in
-- ten seconds of claims beside a loop of rolls and drops). Both locks now come in the claims'
-- order, each within the same 1 s lock_timeout as before. A shard dropped meanwhile by a second
-- pass (undefined_table) is skipped like a busy one.

CREATE OR REPLACE FUNCTION asyncflow.drop_expired_shards(p_task_type text, p_now timestamp with time zone DEFAULT NULL::timestamp with time zone) RETURNS SETOF integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := coalesce(p_now, now());
  v_shard integer;
  v_leaf text;
  v_lock_timeout text := current_setting('lock_timeout');
begin
  perform asyncflow.check_type_name(p_task_type);
  for v_shard in
    select s.shard from asyncflow.shards s
    join asyncflow.positions p on p.task_type = s.task_type
    join asyncflow.task_types y on y.task_type = s.task_type
    where s.task_type = p_task_type and s.dropped_at is null and s.shard < p.begin_pos
      and s.closed_at <= v_now - make_interval(secs => y.retention)
    order by s.shard
  loop
    v_leaf := 'tasks_' || p_task_type || '_' || v_shard;
    begin
      perform set_config('lock_timeout', '1s', true);
      -- (V30) the type's table first, then the shard: the order every claim, report and insert
      -- takes them in. DROP TABLE of a shard locks its parent too; taking the shard first, as V6
      -- did, deadlocked with claims holding the parent and waiting for the shard.
      execute format('lock table asyncflow.%I in access exclusive mode', 'tasks_' || p_task_type);
      execute format('lock table asyncflow.%I in access exclusive mode', v_leaf);
      if asyncflow.shard_is_live(p_task_type, v_shard) then
        update asyncflow.shards set closed_at = null where task_type = p_task_type and shard = v_shard;
        update asyncflow.positions set begin_pos = least(begin_pos, v_shard), updated_at = v_now
        where task_type = p_task_type;
        perform set_config('lock_timeout', v_lock_timeout, true);
        continue;
      end if;
      execute format('drop table asyncflow.%I', v_leaf);
      perform set_config('lock_timeout', v_lock_timeout, true);
    exception when lock_not_available or undefined_table then
      -- busy (tried again at the next pass), or dropped meanwhile by a pass running beside this
      -- one, which records it
      perform set_config('lock_timeout', v_lock_timeout, true);
      continue;
    end;
    delete from asyncflow.idempotency_keys where task_type = p_task_type and shard = v_shard;
    update asyncflow.shards set dropped_at = v_now where task_type = p_task_type and shard = v_shard;
    return next v_shard;
  end loop;
end
$$;
