-- type_claim__<type>(owner, limit, now) of a type with fair_queues: its tasks are taken by turns
-- of queue_key. Keys go in text order from the one after where the type's last claim stopped
-- (asyncflow.queue_cursors), one task per key per round, round after round until the batch is
-- full or a round finds nothing. Keys are taken a batch at a time in two statements: a loose scan
-- of "tasks_<type>$key_ready" walks the next keys with a pending task, each with its oldest
-- task's order_time (one index descent per key and live shard); then one statement claims, in
-- key order, the oldest ready task of each walked key that is due and has room (its own limit
-- from queue_limits, else queue_concurrency, against a count of its running tasks), FOR UPDATE
-- SKIP LOCKED, until the batch is full. A claim walks at most max(4 × its batch + 16, 1000)
-- keys: keys with only delayed, locked or capped tasks are walked and passed; the cursor keeps
-- the place for the next claim. Rendered per type by asyncflow.create_type_functions, like
-- claim_plain.sql.
create or replace function asyncflow.{{claim}}(p_owner text, p_limit integer, p_now timestamptz default null)
returns setof asyncflow.claimed_task
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
declare
  v_task_type constant text := {{task_type}};
  v_type asyncflow.task_types;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_limit integer;
  v_running bigint;
  v_begin integer;
  v_after text;
  v_at text;
  v_limits boolean;
  v_from text;
  v_keys text[];
  v_heads timestamptz[];
  v_walk integer;
  v_walked integer;
  v_budget integer;
  v_claimed asyncflow.claimed_task[];
  v_claimed_keys text[];
  v_n integer;
  v_wrapped boolean := false;
  v_since integer := 0;
  v_got integer := 0;
  v_probes integer := 0;
  -- keys with due tasks, found from the ready index after a walk that found none
  v_due_keys text[];
  v_due_heads timestamptz[];
begin
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
  perform set_config('synchronous_commit', 'off', true);


  -- Turns of queue_key, a round at a time: every key with a pending task once, in key order
  -- from the one after the cursor (v_after) to the last, then from the first to the cursor
  -- (the second segment, v_wrapped). Keys are walked a batch at a time (one statement: a
  -- loose scan of the key index), and the walked keys' oldest ready tasks claimed in one more
  -- (one per key, in key order, passing keys at their limit, until the batch is full). A
  -- round that claims nothing (v_since = 0) ends the claim; a single key with a backlog so
  -- fills the batch one task per round. v_at: where the claim stopped (the cursor).
  -- a limit of its own for some key (asyncflow.queue_limits)?
  v_limits := exists (select 1 from asyncflow.queue_limits l where l.task_type = v_task_type);
  if v_type.queue_concurrency is not null or v_limits then
    -- the type's claimers count and claim one at a time; each waits here for the one before
    -- it to commit, and its counts below (each statement a new snapshot) see that claim
    perform pg_advisory_xact_lock(16713, hashtext(v_task_type));
  end if;
  select begin_pos into v_begin from asyncflow.positions where task_type = v_task_type;
  select after_key into v_after from asyncflow.queue_cursors where task_type = v_task_type;
  v_at := v_after;
  v_from := v_after;
  v_budget := greatest(4 * v_limit + 16, 1000);
  <<passes>>
  loop
  while v_got < v_limit and v_probes < v_budget loop
    v_walk := least(greatest(2 * (v_limit - v_got), 32), v_budget - v_probes);
    if v_due_keys is not null then
      -- the second pass: the next of the keys with due tasks, as the walk below would give them
      select array_agg(u.k order by u.k), array_agg(u.head order by u.k) into v_keys, v_heads
      from (select d.k, d.head from unnest(v_due_keys, v_due_heads) d(k, head)
            where (v_from is null or d.k > v_from) and (not v_wrapped or d.k <= v_after)
            order by d.k limit v_walk) u;
    else
    -- the next keys after v_from (null: from the first) with a pending task, each with its
    -- oldest one's order_time; in the second segment up to v_after
    with recursive walk(k, head, n) as (
      (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.{{tasks}} t
       where v_from is null and t.shard >= v_begin and t.status = 'pending'
       order by coalesce(t.queue_key, ''), t.order_time limit 1)
      union all
      (select coalesce(t.queue_key, ''), t.order_time, 1 from asyncflow.{{tasks}} t
       where v_from is not null and t.shard >= v_begin and t.status = 'pending'
         and coalesce(t.queue_key, '') > v_from
       order by coalesce(t.queue_key, ''), t.order_time limit 1)
      union all
      select x.k, x.head, w.n + 1 from walk w
      cross join lateral (
        select coalesce(t.queue_key, '') as k, t.order_time as head from asyncflow.{{tasks}} t
        where t.shard >= v_begin and t.status = 'pending' and coalesce(t.queue_key, '') > w.k
        order by coalesce(t.queue_key, ''), t.order_time limit 1) x
      where w.n < v_walk and (not v_wrapped or w.k < v_after)
    )
    select array_agg(w.k order by w.n), array_agg(w.head order by w.n) into v_keys, v_heads
    from walk w where not v_wrapped or w.k <= v_after;
    end if;
    v_walked := coalesce(cardinality(v_keys), 0);
    v_probes := v_probes + v_walked;
    if v_walked > 0 then
      -- the walked keys' oldest ready tasks, one per key that has room, in key order
      with cand as (
        select w.k, w.ord from unnest(v_keys, v_heads) with ordinality w(k, head, ord)
        cross join lateral (
          select coalesce((select l.concurrency from asyncflow.queue_limits l
                           where v_limits and l.task_type = v_task_type and l.queue_key = w.k),
                          v_type.queue_concurrency) as cap) c
        where w.head <= v_now
          and (c.cap is null or (select count(*) from asyncflow.{{tasks}} r
                                 where r.shard >= v_begin and coalesce(r.queue_key, '') = w.k
                                   and r.status = 'running') < c.cap)
      ), picked as (
        select p.shard, p.id, cand.k, cand.ord from cand
        cross join lateral (
          select t.shard, t.id from asyncflow.{{tasks}} t
          where t.shard >= v_begin and coalesce(t.queue_key, '') = cand.k and t.status = 'pending'
            and t.order_time <= v_now
          order by t.order_time limit 1
          for update skip locked) p
        order by cand.ord
        limit v_limit - v_got
      ), claimed as (
        update asyncflow.{{tasks}} t set
          status = 'running', owner = p_owner, attempt = t.attempt + 1, claim_seq = t.claim_seq + 1,
          claimed_at = v_now, lease_until = v_now + make_interval(secs => v_type.max_processing_time),
          updated_at = v_now
        from picked
        where t.shard = picked.shard and t.id = picked.id
        returning row(asyncflow.format_task_id(v_task_type, t.shard, t.id), v_task_type, t.stage, t.context,
          t.priority, t.attempt, t.claim_seq, t.user_id, t.lease_until, t.claimed_at, t.queue_key)::asyncflow.claimed_task
          as task,
          picked.k, picked.ord
      )
      select array_agg(c.task order by c.ord), array_agg(c.k order by c.ord) into v_claimed, v_claimed_keys
      from claimed c;
      v_n := coalesce(cardinality(v_claimed), 0);
      if v_n > 0 then
        return query select * from unnest(v_claimed);
        v_got := v_got + v_n;
        v_since := v_since + v_n;
      end if;
      if v_got >= v_limit then
        v_at := v_claimed_keys[v_n];  -- the keys walked past it get their turn next time
        exit;
      end if;
      v_from := v_keys[v_walked];
      v_at := v_from;
    end if;
    if v_walked < v_walk or (v_wrapped and v_from >= v_after) then
      -- the segment is over
      if not v_wrapped and v_after is not null then
        v_wrapped := true;
        v_from := null;
      else
        -- so is the round
        exit when v_since = 0;
        v_since := 0;
        v_wrapped := false;
        v_from := v_after;
      end if;
    end if;
  end loop;
  -- A walk that passed its whole budget of keys without claiming anything (keys whose tasks
  -- are all delayed, held or at their limit, ahead of the few with due tasks) would leave the
  -- due tasks to later claims, one budget of keys at a time, while the worker backs off between
  -- empty claims. The ready index knows the due tasks: their keys are walked instead, in the same
  -- order from the cursor, in a second pass.
  exit passes when v_got > 0 or v_probes < v_budget or v_due_keys is not null;
  select array_agg(d.k order by d.k), array_agg(d.head order by d.k) into v_due_keys, v_due_heads
  from (select coalesce(t.queue_key, '') as k, min(t.order_time) as head
        from (select t.queue_key, t.order_time from asyncflow.{{tasks}} t
              where t.shard >= v_begin and t.status = 'pending' and t.order_time <= v_now
              order by t.order_time limit v_budget) t
        group by 1) d;
  exit passes when v_due_keys is null;
  v_from := v_after;
  v_at := v_after;
  v_wrapped := false;
  v_since := 0;
  v_probes := 0;
  end loop;
  -- a claim that claimed nothing and walked all it could leaves the cursor: an idle type's
  -- polls write nothing
  if v_at is distinct from v_after and (v_got > 0 or v_probes >= v_budget) then
    insert into asyncflow.queue_cursors as c (task_type, after_key, updated_at)
    values (v_task_type, v_at, v_now)
    on conflict (task_type) do update set after_key = excluded.after_key, updated_at = excluded.updated_at;
  end if;
  if v_type.rate_limited then
    perform asyncflow.rate_spend(v_task_type, v_got);
  end if;
  if v_got > 0 then
    insert into asyncflow.type_counters as k (task_type, slot, claimed)
    values (v_task_type, pg_backend_pid() % 16, v_got)
    on conflict (task_type, slot) do update set claimed = k.claimed + excluded.claimed;
  end if;
end
$body$;
