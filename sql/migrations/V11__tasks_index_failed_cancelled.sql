-- Each type's failed and cancelled tasks by id, so that the task search (find_tasks and the bulk
-- actions) finds them without reading the type's other tasks. A partial index: a task gets an
-- entry only when it ends failed or cancelled, so creating, claiming and finishing tasks well
-- write nothing more. Types registered from now on get it with their table (register_task_type).
do $$
declare
  v_type text;
begin
  for v_type in select task_type from asyncflow.task_types order by task_type loop
    execute format('create index if not exists %I on asyncflow.%I (id) where status in (''failed'', ''cancelled'')',
      'tasks_' || v_type || '$failed_cancelled', 'tasks_' || v_type);
  end loop;
end
$$;
