-- The start of every hold, after claim_start: a type whose tasks may not be held is claimed
-- instead (type_claim__, its answer marked held = false), and the hold's transaction gets its
-- idle limit. Written out here, not called: the two helper functions a hold called, each with
-- its own SET search_path, cost a hold on an idle connection about 20 µs of server time (a
-- one-task hold at 50 a second, alternated four times: 308 against 326 µs, pg_stat_statements).
--
-- Not held when the type's claims count running tasks (its concurrency, or with fair_queues a
-- queue_concurrency or a key's own limit), which a held task is not yet; not under a rate
-- limit, the type's or its keys' (its claims spend the allowance); and not when a pipeline
-- watches its table (the workflow trigger follows running tasks).
  if v_type.concurrency is not null or v_type.rate_limited
    or (v_type.fair_queues and (v_type.queue_concurrency is not null or v_type.queue_rate_limited
        or exists (select 1 from asyncflow.queue_limits l where l.task_type = v_task_type)))
    or exists (select 1 from pg_catalog.pg_trigger g
               where g.tgrelid = 'asyncflow.{{tasks}}'::regclass and g.tgname = 'tg_tasks__workflow') then
    return query select c.*, false from asyncflow.{{claim}}(p_owner, p_limit) c;
    return;
  end if;
  -- a worker that stops answering (and so never ends its hold) loses its locks after 60 s idle
  -- in the hold's transaction; a shorter limit set on the server stays
  if current_setting('idle_in_transaction_session_timeout') = '0' then
    perform set_config('idle_in_transaction_session_timeout', '60s', true);
  end if;
