-- How many tasks a claim may take (v_limit): the asked number, at most the type's
-- schedule_limit, the room under its concurrency limit (a count of its running tasks, under
-- the type row's lock) and what its rate limit allows now; nothing to take ends the claim.
  v_limit := least(p_limit, v_type.schedule_limit);
  if v_type.concurrency is not null then
    perform 1 from asyncflow.task_types where task_type = v_task_type for update;
    select count(*) into v_running from asyncflow.{{tasks}} where status = 'running';
    v_limit := least(v_limit, v_type.concurrency - v_running);
    if v_limit <= 0 then
      return;
    end if;
  end if;
  if v_type.rate_limited then
    v_limit := least(v_limit, coalesce(asyncflow.rate_allowance(v_task_type, v_now), v_limit));
    if v_limit <= 0 then
      return;
    end if;
  end if;
