-- The start of every claim and hold: the owner checked, the type read into v_type (declared by
-- the template, with v_task_type), nothing claimed from a paused type or for a limit of 0.
  if p_owner is null or length(p_owner) not between 1 and 200 then
    perform asyncflow.raise_error('AF006', 'owner must be a worker id of 1 to 200 characters');
  end if;
  select * into v_type from asyncflow.task_types where task_type = v_task_type;
  if not found then
    perform asyncflow.raise_error('AF001', format('unknown task type %L', v_task_type));
  end if;
  if v_type.paused or coalesce(p_limit, 0) <= 0 then
    return;
  end if;
