-- Admin reads for the HTTP API and the CLI: list_tasks (filtered, keyset-paginated).

-- list_tasks: tasks as JSON, filtered by any of type, status, stage, user, in id order within a
-- type (types by name), starting after the task id p_after (keyset pagination: pass the last id
-- of a page to get the next). At most p_limit (1..1000) rows.
create function asyncflow.list_tasks(
  p_task_type text default null,
  p_status asyncflow.task_status default null,
  p_stage text default null,
  p_user_id text default null,
  p_after text default null,
  p_limit integer default 100
) returns setof jsonb
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_after record;
  v_after_type text;
  v_after_id bigint;
begin
  if p_limit is null or p_limit not between 1 and 1000 then
    perform asyncflow.raise_error('AF006', 'limit must be between 1 and 1000');
  end if;
  if p_after is not null then
    select * into v_after from asyncflow.parse_task_id(p_after);
    if v_after.task_type is null then
      perform asyncflow.raise_error('AF006', format('after must be a task id, got %L', p_after));
    end if;
    v_after_type := v_after.task_type;
    v_after_id := v_after.id;
  end if;
  return query
  select asyncflow.task_json(t) from asyncflow.tasks t
  where (p_task_type is null or t.task_type = p_task_type)
    and (p_status is null or t.status = p_status)
    and (p_stage is null or t.stage = p_stage)
    and (p_user_id is null or t.user_id = p_user_id)
    and (v_after_type is null or (t.task_type, t.id) > (v_after_type, v_after_id))
  order by t.task_type, t.id
  limit p_limit;
end
$$;

revoke all on function asyncflow.list_tasks(text, asyncflow.task_status, text, text, text, integer) from public;
grant execute on function asyncflow.list_tasks(text, asyncflow.task_status, text, text, text, integer) to asyncflow_client;
