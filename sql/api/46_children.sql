-- Child tasks and a join: the spawn reply, the children's latch, the join, the cancel cascade.
-- The current text of each function: edit here, `asyncflow migrate` applies it.
--
--   call of stage A ── reply {"spawn": [{"type", "context", ...}, ...], "next_stage": S} ──> report:
--     (fenced like every report) task `waiting` at S, a row in asyncflow.joins holding the list,
--     then spawn_children, in the same transaction: the children are created (parent_id = the
--     task), their ids kept in spawn order, total = their number
--   a child ends (succeeded, failed, cancelled) ── count_child_ends: ended = ended + 1 on its
--     parent's joins row, one row update whatever the number of children (a latch, as the
--     workflow engine's in-degree count)
--   ended reaches total ── the trigger on asyncflow.joins runs end_join: the parent is pending at
--     S, its `wake` says {"children": [{"id", "type", "status", "result", "error"}, ...]}
--   cancel_task(parent) ── cancel_children: its unfinished children are cancelled (and theirs)
--
-- An empty spawn list goes straight to S: the join starts in the report's own transaction, and
-- the call of S gets "children": [].

-- The most children one spawn may create (the list is bounded by config.max_context_bytes too).
create or replace function asyncflow.spawn_max_children() returns integer
language sql immutable parallel safe as $$ select 100000 $$;

-- A child's result is in the join's "children" array when its JSON is at most this many bytes
-- and the results before it (in spawn order) and it come to at most children_results_max_bytes;
-- otherwise its "result" is null and "result_left_out" is true: read it with get_task.
create or replace function asyncflow.child_result_max_bytes() returns integer
language sql immutable parallel safe as $$ select 4096 $$;

create or replace function asyncflow.children_results_max_bytes() returns integer
language sql immutable parallel safe as $$ select 1048576 $$;

-- spawn_problem: why a spawn list cannot be taken, or null. The list is a JSON array of objects,
-- each with a registered "type" and otherwise the fields of a create_tasks element except
-- idempotency_key (a spawn is applied once: its children are created exactly once). The values
-- of those fields are checked by create_tasks' own rules when the children are created.
create or replace function asyncflow.spawn_problem(p_spawn jsonb) returns text
language plpgsql stable set search_path = pg_catalog, pg_temp as $$
declare
  v_bad record;
begin
  if p_spawn is null or jsonb_typeof(p_spawn) <> 'array' then
    return 'spawn must be a JSON array of objects, each with a "type"';
  end if;
  if jsonb_array_length(p_spawn) > asyncflow.spawn_max_children() then
    return format('spawn has %s children, the limit is %s', jsonb_array_length(p_spawn), asyncflow.spawn_max_children());
  end if;
  select n, problem into v_bad from (
    select x.n, case
      when jsonb_typeof(x.e) <> 'object' then 'must be a JSON object'
      when jsonb_typeof(x.e -> 'type') is distinct from 'string' then 'type must be a string, a registered task type'
      when not exists (select 1 from asyncflow.task_types y where y.task_type = x.e ->> 'type')
        then format('unknown task type %s', x.e -> 'type')
      when x.e ? 'idempotency_key' then 'idempotency_key is not taken in a spawn (its children are created once)'
      when exists (select 1 from jsonb_object_keys(x.e) k where k not in ('type', 'context', 'priority', 'run_at',
          'stage', 'user_id', 'queue_key', 'traceparent'))
        then format('unknown field %s (known: type, context, priority, run_at, stage, user_id, queue_key, traceparent)',
          (select to_jsonb(k) from jsonb_object_keys(x.e) k where k not in ('type', 'context', 'priority', 'run_at',
            'stage', 'user_id', 'queue_key', 'traceparent') limit 1))
      when jsonb_typeof(x.e -> 'context') not in ('object', 'null') then 'context must be a JSON object'
    end as problem
    from jsonb_array_elements(p_spawn) with ordinality x(e, n)
  ) checked where problem is not null order by n limit 1;
  if found then
    return format('spawn[%s]: %s', v_bad.n - 1, v_bad.problem);
  end if;
  return null;
end
$$;

-- spawn_children: the spawns just accepted by a type's report (the joins rows of these tasks
-- that still hold their list) create their children, in the report's transaction: per type in
-- the list, one create_tasks insert, then each child's parent_id. A value create_tasks refuses
-- fails the whole report (nothing changed), naming the type. A spawn of no child starts its join
-- at once. Returns the number of children created.
create or replace function asyncflow.spawn_children(p_task_type text, p_task_ids text[], p_now timestamptz)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  v_join record;
  v_group record;
  v_ids text[];
  v_created text[];
  v_n integer := 0;
begin
  for v_join in
    select j.shard, j.id, j.spawn from asyncflow.joins j
    join (select split_part(u.task_id, '-', 2)::integer as shard, split_part(u.task_id, '-', 3)::bigint as id
      from unnest(p_task_ids) u(task_id) where split_part(u.task_id, '-', 1) = p_task_type) x
      on j.task_type = p_task_type and j.shard = x.shard and j.id = x.id
    where j.spawn is not null
    order by j.shard, j.id
    for update of j
  loop
    v_ids := array_fill(null::text, array[jsonb_array_length(v_join.spawn)]);
    for v_group in
      select x.e ->> 'type' as task_type, array_agg(x.n order by x.n) as positions,
        jsonb_agg(x.e - 'type' order by x.n) as tasks
      from jsonb_array_elements(v_join.spawn) with ordinality x(e, n)
      group by x.e ->> 'type' order by min(x.n)
    loop
      begin
        v_created := asyncflow.insert_tasks(v_group.task_type, v_group.tasks, p_now, false);
      exception when others then
        raise exception using errcode = sqlstate, message = asyncflow.shorten(format(
          'spawn of task %s: the children of type %s: %s', asyncflow.format_task_id(p_task_type, v_join.shard, v_join.id),
          v_group.task_type, sqlerrm));
      end;
      update asyncflow.tasks t set parent_id = asyncflow.format_task_id(p_task_type, v_join.shard, v_join.id)
      from unnest(v_created) c(task_id)
      where t.task_type = v_group.task_type and t.shard = split_part(c.task_id, '-', 2)::integer
        and t.id = split_part(c.task_id, '-', 3)::bigint;
      for k in 1 .. cardinality(v_created) loop
        v_ids[v_group.positions[k]] := v_created[k];
      end loop;
    end loop;
    update asyncflow.joins j set children = v_ids, total = cardinality(v_ids), spawn = null
    where j.task_type = p_task_type and j.shard = v_join.shard and j.id = v_join.id;
    v_n := v_n + cardinality(v_ids);
    if cardinality(v_ids) = 0 then
      perform asyncflow.end_join(p_task_type, v_join.shard, v_join.id, p_now);
    end if;
  end loop;
  return v_n;
end
$$;

-- join_counts: parent ids (nulls and repeats allowed) as the keys of their joins rows, each with
-- how many times it was named, in key order (the order the rows are then locked in, so that two
-- reports never wait for each other). What each type's report and finish functions count with,
-- in the statement that ends the children.
create or replace function asyncflow.join_counts(p_parent_ids text[])
returns table (task_type text, shard integer, id bigint, n bigint)
language sql immutable parallel safe as $$
  select split_part(p, '-', 1), split_part(p, '-', 2)::integer, split_part(p, '-', 3)::bigint, count(*)
  from unnest(p_parent_ids) u(p) where p is not null group by 1, 2, 3 order by 1, 2, 3
$$;

-- count_child_ends: children that just ended (their parent ids, one per child, repeats
-- allowed) count on their parents' joins: one row update per parent. A parent with no joins
-- row (it was cancelled, or its join started already) is passed over. The trigger on
-- asyncflow.joins starts the join of a parent whose count reaches its total.
create or replace function asyncflow.count_child_ends(p_parent_ids text[]) returns void
language sql security definer set search_path = pg_catalog, pg_temp as $$
  update asyncflow.joins j set ended = j.ended + x.n
  from asyncflow.join_counts(p_parent_ids) x
  where j.task_type = x.task_type and j.shard = x.shard and j.id = x.id
$$;

-- end_join: the parent's children have all ended: it is pending at the stage it named, its
-- `wake` the children's outcomes in spawn order (see child_result_max_bytes), and its joins row
-- goes. The stage after the join starts from this, so the transaction commits durably.
create or replace function asyncflow.end_join(p_task_type text, p_shard integer, p_id bigint, p_now timestamptz)
returns boolean
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  v_children text[];
  v_outcomes jsonb;
begin
  delete from asyncflow.joins j where j.task_type = p_task_type and j.shard = p_shard and j.id = p_id
  returning j.children into v_children;
  if not found then
    return false;
  end if;
  select coalesce(jsonb_agg(case when o.keep then o.item else o.item || '{"result": null, "result_left_out": true}'
      end order by o.n), '[]'::jsonb)
  into v_outcomes
  from (
    select c.n, c.item, c.size <= asyncflow.child_result_max_bytes()
        and sum(case when c.size <= asyncflow.child_result_max_bytes() then c.size else 0 end)
          over (order by c.n) <= asyncflow.children_results_max_bytes() as keep
    from (
      select u.n, jsonb_build_object('id', u.child, 'type', t.task_type, 'status', t.status, 'result', t.result,
          'error', t.last_error) as item, coalesce(octet_length(t.result::text), 0) as size
      from unnest(v_children) with ordinality u(child, n)
      join asyncflow.tasks t on t.task_type = split_part(u.child, '-', 1)
        and t.shard = split_part(u.child, '-', 2)::integer and t.id = split_part(u.child, '-', 3)::bigint
    ) c
  ) o;
  update asyncflow.tasks t set status = 'pending', wake = jsonb_build_object('children', v_outcomes),
    order_time = p_now - make_interval(secs => t.priority), updated_at = p_now,
    schedule_log = asyncflow.append_log(t.schedule_log, jsonb_build_object('event', 'children ended', 'at', p_now))
  where t.task_type = p_task_type and t.shard = p_shard and t.id = p_id and t.status = 'waiting';
  if found then
    perform asyncflow.commit_durably();
    insert into asyncflow.status_deltas (task_type, in_waiting, in_pending) values (p_task_type, -1, 1);
    perform asyncflow.wake(p_task_type);
  end if;
  return found;
end
$$;

-- The latch's trigger: the count that reaches the total starts the join (after the statement
-- that counted, which sees every child's end it wrote).
create or replace function asyncflow.tg_joins__ended() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform asyncflow.end_join(new.task_type, new.shard, new.id, clock_timestamp());
  return null;
end
$$;

-- cancel_children: a parent waiting for its children is cancelled: the join is dropped and its
-- unfinished children are cancelled (theirs too, through cancel_task). A child a worker is
-- writing at that moment (its report, or a held claim's finish, holds its row) is not waited
-- for: that worker's statement waits for this join's row, which this transaction holds, so
-- waiting for it would be a deadlock; it ends as that worker writes it. A child's own join is
-- waited for (a grandchild's end may be counting on it), before the child's row is taken.
-- Returns how many.
create or replace function asyncflow.cancel_children(p_task_type text, p_shard integer, p_id bigint, p_now timestamptz)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_children text[];
  v_n integer := 0;
  v_child text;
begin
  delete from asyncflow.joins j where j.task_type = p_task_type and j.shard = p_shard and j.id = p_id
  returning j.children into v_children;
  foreach v_child in array coalesce(v_children, '{}') loop
    -- the child's own join before its row, as cancel_task takes them (and as a grandchild's end
    -- does: its count, then the join's start writes the child): holding the child's row while
    -- waiting for its join would close a cycle with that grandchild's statement
    perform 1 from asyncflow.joins j where j.task_type = split_part(v_child, '-', 1)
      and j.shard = split_part(v_child, '-', 2)::integer and j.id = split_part(v_child, '-', 3)::bigint
    for update;
    perform 1 from asyncflow.tasks t where t.task_type = split_part(v_child, '-', 1)
      and t.shard = split_part(v_child, '-', 2)::integer and t.id = split_part(v_child, '-', 3)::bigint
      and t.status in ('pending', 'running', 'waiting')
    for update skip locked;
    if found and asyncflow.cancel_task(v_child, p_now) then
      v_n := v_n + 1;
    end if;
  end loop;
  return v_n;
end
$$;

-- A retry by hand of a child that ended while its parent still waits: the child is live
-- again, so it no longer counts as ended.
create or replace function asyncflow.uncount_child_end(p_parent_id text) returns void
language sql security definer set search_path = pg_catalog, pg_temp as $$
  update asyncflow.joins j set ended = j.ended - 1
  where j.task_type = split_part(p_parent_id, '-', 1) and j.shard = split_part(p_parent_id, '-', 2)::integer
    and j.id = split_part(p_parent_id, '-', 3)::bigint and j.children is not null and j.ended > 0
$$;

-- task_children: the tasks a task spawned, as {"total", "children": [{"id", "type", "status"}]},
-- at most p_limit (1..1000) of them, oldest first (spawn order within a spawn and a type), through
-- the partial index on parent_id. Null when there is no such task. For the dashboard's task page
-- and GET /v1/tasks/{id}/children.
create or replace function asyncflow.task_children(task_id text, p_limit integer default 100) returns jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_task_id alias for $1;
  v_key record;
begin
  select * into v_key from asyncflow.parse_task_id(p_task_id);
  if v_key.task_type is null or not exists (select 1 from asyncflow.tasks t
      where t.task_type = v_key.task_type and t.shard = v_key.shard and t.id = v_key.id) then
    return null;
  end if;
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', format('limit must be between 1 and 1000, got %s', coalesce(p_limit::text, 'null')));
  end if;
  return jsonb_build_object(
    'total', (select count(*) from asyncflow.tasks t where t.parent_id = p_task_id),
    'children', coalesce((select jsonb_agg(jsonb_build_object('id', asyncflow.format_task_id(c.task_type, c.shard, c.id),
        'type', c.task_type, 'status', c.status) order by c.created_at, c.task_type, c.shard, c.id)
      from (select t.task_type, t.shard, t.id, t.status, t.created_at from asyncflow.tasks t
        where t.parent_id = p_task_id order by t.created_at, t.task_type, t.shard, t.id limit p_limit) c), '[]'::jsonb));
end
$$;
