-- V35: the running tasks a worker holds, read by owner in one statement.
--
-- POST /v1/worker/held (a remote worker that lost the answer to a hold finds what it claimed)
-- paged through every running task of the type with list_tasks, 1,000 whole tasks at a time
-- (context, result and schedule log built into JSON), and kept those of the worker in Rust: a
-- type with 100,000 running tasks cost a hundred statements and all their JSON for a worker
-- holding ten. held_tasks reads the type's running tasks through its partial index on running
-- tasks and returns only the worker's, with only the fields the route answers.

create function asyncflow.held_tasks(p_task_type text, p_owner text)
returns table (task_id text, claim_seq integer, stage text, attempt integer, lease_until timestamptz)
language plpgsql stable security definer set search_path = pg_catalog, pg_temp as $$
begin
  perform asyncflow.check_type_name(p_task_type);
  if not exists (select 1 from asyncflow.task_types y where y.task_type = p_task_type) then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', p_task_type));
  end if;
  return query
  select asyncflow.format_task_id(t.task_type, t.shard, t.id), t.claim_seq, t.stage, t.attempt, t.lease_until
  from asyncflow.tasks t
  where t.task_type = p_task_type and t.status = 'running' and t.owner = p_owner
  order by t.shard, t.id;
end
$$;

revoke all on function asyncflow.held_tasks(text, text) from public;
grant execute on function asyncflow.held_tasks(text, text) to asyncflow_worker;
