-- type_claim__<type>(owner, limit, now) of a type with fair_queues: its tasks are taken by turns
-- of queue_key. Keys go in text order from the one after where the type's last claim stopped
-- (asyncflow.queue_cursors), round after round until the batch is full or a round finds nothing.
-- Keys are taken a batch at a time in two statements: a loose scan of
-- "tasks_<type>$key_ready" walks the next keys with a pending task, each with its oldest task's
-- order_time (one index descent per key and live shard); then one statement claims the walked
-- keys' oldest ready tasks that are due and have room (a key's own limit from queue_limits,
-- else queue_concurrency, against a count of its running tasks), FOR UPDATE SKIP LOCKED, in
-- turns: every key's first, then every key's second, and so on, until the batch is full. Each
-- key gives at most its share of what is left to claim (rounded up), so a few keys with
-- backlogs fill a batch in one statement while many keys give one task each. A claim walks at
-- most max(4 × its batch + 16, 1000) keys: keys with only delayed, locked or capped tasks are
-- walked and passed; the cursor keeps the place for the next claim. A key under a rate limit
-- (56_rate_limits.sql) gives at most the whole tokens of its bucket, which the claim spends.
--
-- The same text, rendered as the hold variant (lines marked --@hold kept, --@claim dropped), is
-- the type's type_hold__<type>: the same picks locked and not updated, as hold.sql does for a
-- type without fair_queues. A type whose claims count running tasks (concurrency,
-- queue_concurrency, a key's own limit) or that a pipeline watches is not held: the hold
-- claims instead and says so (held = false). The held claim writes the cursor only when no other
-- hold of the type has it locked: an open hold keeps the row's lock until its calls end.
-- Rendered per type by asyncflow.create_type_functions, like claim_plain.sql.
create or replace function asyncflow.{{claim}}(p_owner text, p_limit integer, p_now timestamptz default null) --@claim
returns setof asyncflow.claimed_task --@claim
create or replace function asyncflow.{{hold}}(p_owner text, p_limit integer) --@hold
returns setof asyncflow.held_task --@hold
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_sort = off set enable_hashjoin = off
set enable_mergejoin = off set jit = off set plan_cache_mode = force_generic_plan as $body$
declare
  v_task_type constant text := {{task_type}};
  v_type asyncflow.task_types;
  v_now timestamptz := asyncflow.check_now(p_now); --@claim
  v_now constant timestamptz := now(); --@hold
  v_lease_until timestamptz;
  v_per_key integer;
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
  v_want integer;
  v_seg_keys text[];
  v_seg_heads timestamptz[];
  v_seg_n integer;
  v_seg_over boolean;
  v_loose boolean;
  v_scan integer;
  v_rows bigint;
  v_walked integer;
  v_budget integer;
  v_claimed asyncflow.claimed_task[]; --@claim
  v_claimed asyncflow.held_task[]; --@hold
  v_claimed_keys text[];
  v_claimed_ids bigint[];
  v_held_ids bigint[] := '{}'; --@hold
  v_n integer;
  v_wrapped boolean := false;
  v_since integer := 0;
  v_got integer := 0;
  v_probes integer := 0;
  v_unreadable integer;
  v_failed integer := 0; --@claim
  -- keys with due tasks, found from the ready index after a walk that found none
  v_due_keys text[];
  v_due_heads timestamptz[];
  -- the walked keys under a rate limit (queue_rate_limits), each with the starts it allows now
  v_rate_keys text[];
  v_rate_allows integer[];
begin
{{> claim_start}}
{{> hold_start}} --@hold
  v_lease_until := v_now + make_interval(secs => v_type.max_processing_time);
{{> claim_limit}}
  perform set_config('synchronous_commit', 'off', true); --@claim


  -- Turns of queue_key, a round at a time: every key with a pending task once, in key order
  -- from the one after the cursor (v_after) to the last, then from the first to the cursor
  -- (the second segment, v_wrapped). Keys are walked a batch at a time (one statement: a
  -- loose scan of the key index), and the walked keys' oldest ready tasks claimed in one more
  -- (one per key, in key order, passing keys at their limit, until the batch is full). A
  -- round that claims nothing (v_since = 0) ends the claim; a single key with a backlog so
  -- fills the batch one task per round. v_at: where the claim stopped (the cursor).
  -- a limit of its own for some key (asyncflow.queue_limits)?
  v_limits := exists (select 1 from asyncflow.queue_limits l where l.task_type = v_task_type);
  if v_type.queue_concurrency is not null or v_limits or v_type.queue_rate_limited then
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
    v_walk := least(v_limit - v_got + 16, v_budget - v_probes);
    v_keys := '{}';
    v_heads := '{}';
    -- the next v_walk keys of the round: after v_from, and when the first segment ends within
    -- them, on from the first key (the second segment), so that one statement below takes its
    -- turns over all of them
    v_loose := false;
    loop
      v_want := v_walk - cardinality(v_keys);
      exit when v_want <= 0;
      if v_due_keys is not null then
        -- the second pass: the next of the keys with due tasks, as the walk below would give them
        select array_agg(u.k order by u.k), array_agg(u.head order by u.k) into v_seg_keys, v_seg_heads
        from (select d.k, d.head from unnest(v_due_keys, v_due_heads) d(k, head)
              where (v_from is null or d.k > v_from) and (not v_wrapped or d.k <= v_after)
              order by d.k limit v_want) u;
        v_seg_n := coalesce(cardinality(v_seg_keys), 0);
        v_seg_over := v_seg_n < v_want;
      elsif not v_loose then
        -- one bounded range scan of the key index after v_from (in the second segment up to
        -- v_after), its rows grouped by key, each key with its oldest task's order_time: the
        -- walk when keys have a task or a few each
        v_scan := v_want + 16;
        -- (grouped in key order from the ordered scans: the aggregates take them in that order)
        select array_agg(g.k), array_agg(g.head), coalesce(sum(g.n), 0)
        into v_seg_keys, v_seg_heads, v_rows
        from (select x.k, min(x.order_time) as head, count(*) as n
              from ((select coalesce(t.queue_key, '') as k, t.order_time from asyncflow.{{tasks}} t
                     where not v_wrapped and t.shard >= v_begin and t.status = 'pending'
                       and coalesce(t.queue_key, '') >= coalesce(v_from, '')
                       and (v_from is null or coalesce(t.queue_key, '') <> v_from)
                     order by coalesce(t.queue_key, ''), t.order_time limit v_scan)
                    union all
                    (select coalesce(t.queue_key, '') as k, t.order_time from asyncflow.{{tasks}} t
                     where v_wrapped and t.shard >= v_begin and t.status = 'pending'
                       and coalesce(t.queue_key, '') >= coalesce(v_from, '')
                       and coalesce(t.queue_key, '') <= v_after
                       and (v_from is null or coalesce(t.queue_key, '') <> v_from)
                     order by coalesce(t.queue_key, ''), t.order_time limit v_scan)) x
              group by x.k order by x.k) g;
        v_seg_n := coalesce(cardinality(v_seg_keys), 0);
        if v_seg_n > v_want then
          v_seg_keys := v_seg_keys[1:v_want];
          v_seg_heads := v_seg_heads[1:v_want];
          v_seg_n := v_want;
        end if;
        -- the scan saw the whole segment when it stopped short of its bound; when it did not and
        -- found too few keys (keys with backlogs), a loose scan goes on from its last key
        v_seg_over := v_rows < v_scan and v_seg_n < v_want;
        v_loose := v_rows >= v_scan and v_seg_n < v_want;
      else
      -- a loose scan: the next keys after v_from with a pending task, one index descent each,
      -- each with its oldest one's order_time; in the second segment up to v_after
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
        where w.n < v_want and (not v_wrapped or w.k < v_after)
      )
      select array_agg(w.k order by w.n), array_agg(w.head order by w.n) into v_seg_keys, v_seg_heads
      from walk w where not v_wrapped or w.k <= v_after;
      v_seg_n := coalesce(cardinality(v_seg_keys), 0);
      v_seg_over := v_seg_n < v_want;
      v_loose := false;
      end if;
      if v_seg_n > 0 then
        v_keys := v_keys || v_seg_keys;
        v_heads := v_heads || v_seg_heads;
        v_from := v_seg_keys[v_seg_n];
      end if;
      v_seg_over := v_seg_over or coalesce(v_wrapped and v_from >= v_after, false);
      if v_seg_over then
        exit when v_wrapped or v_after is null;
        -- the first segment is over: on from the first key
        v_wrapped := true;
        v_from := null;
        v_seg_over := false;
        v_loose := false;
      elsif not v_loose then
        exit;
      end if;
    end loop;
    v_walked := cardinality(v_keys);
    v_probes := v_probes + v_walked;
    if v_walked > 0 then
      -- the walked keys' oldest ready tasks, by turns, each key at most its share
      v_per_key := ceil((v_limit - v_got)::numeric / v_walked)::integer;
      if v_type.queue_rate_limited then
        -- the due keys' buckets refilled to now: a key under a rate limit without a whole token
        -- is passed over, and every key gives at most the fewest whole tokens of the others
        -- (the statement below stays as it is for the types without such limits; the next
        -- round, its buckets spent, gives the keys without a limit the rest of the batch)
        select array_agg(a.queue_key), array_agg(a.allowance) into v_rate_keys, v_rate_allows
        from asyncflow.queue_rate_allowance(v_type,
          array(select w.k from unnest(v_keys, v_heads) w(k, head) where w.head <= v_now), v_now) a;
        if v_rate_keys is not null then
          select array_agg(w.k order by w.ord), array_agg(w.head order by w.ord) into v_keys, v_heads
          from unnest(v_keys, v_heads) with ordinality w(k, head, ord)
          where not exists (select 1 from unnest(v_rate_keys, v_rate_allows) a(k, n) where a.k = w.k and a.n <= 0);
          v_per_key := least(v_per_key, (select min(a.n) from unnest(v_rate_keys, v_rate_allows) a(k, n) where a.n > 0));
        end if;
      end if;
      with cand as (
        select w.k, w.ord, least(v_per_key, c.cap - (select count(*) from asyncflow.{{tasks}} r
                                  where c.cap is not null and r.shard >= v_begin
                                    and coalesce(r.queue_key, '') = w.k and r.status = 'running')) as room
        from unnest(v_keys, v_heads) with ordinality w(k, head, ord)
        cross join lateral (
          select coalesce((select l.concurrency from asyncflow.queue_limits l
                           where v_limits and l.task_type = v_task_type and l.queue_key = w.k),
                          v_type.queue_concurrency) as cap) c
        where w.head <= v_now
      ), picked as (
        select p.*, cand.k, cand.ord from cand
        cross join lateral (
          -- turn: the task's place within its key, in the order of the scan below (oldest first;
          -- numbered as the rows come, without sorting them again)
          select x.*, row_number() over () as turn from (
            select t.shard, t.id, t.order_time, asyncflow.unreadable('context', t.context) as unreadable
              -- the hold's answer comes along: it writes nothing, and reads no row twice --@hold
              , row({{> claimed_task t = t; attempt = t.attempt + 1; claim_seq = asyncflow.next_claim_seq(t.claim_seq); lease_until = v_lease_until; claimed_at = v_now}}, true)::asyncflow.held_task as task --@hold
            from asyncflow.{{tasks}} t
            where t.shard >= v_begin and coalesce(t.queue_key, '') = cand.k and t.status = 'pending'
              and t.order_time <= v_now
              and t.id <> all(v_held_ids) --@hold
            order by t.order_time limit coalesce(cand.room, v_per_key)
            for update skip locked) x) p
        where coalesce(cand.room, v_per_key) > 0
        order by p.turn, cand.ord
        limit v_limit - v_got
      ), claimed as ( --@hold
      ), claimed as ( --@claim
        update asyncflow.{{tasks}} t set --@claim
          -- a context no worker could read fails the task for good here, as in claim_plain.sql --@claim
          status = case when picked.unreadable is null then 'running' else 'failed' end::asyncflow.task_status, --@claim
          owner = case when picked.unreadable is null then p_owner end, attempt = t.attempt + 1, --@claim
          claim_seq = asyncflow.next_claim_seq(t.claim_seq), claimed_at = v_now, --@claim
          lease_until = case when picked.unreadable is null then v_lease_until end, --@claim
          last_error = coalesce(picked.unreadable, t.last_error), --@claim
          finished_at = case when picked.unreadable is null then t.finished_at else v_now end, --@claim
          updated_at = v_now --@claim
        from picked --@claim
        where t.shard = picked.shard and t.id = picked.id --@claim
        returning row({{> claimed_task t = t}})::asyncflow.claimed_task --@claim
          as task, picked.k, picked.ord, picked.turn, t.id, picked.unreadable, t.parent_id --@claim
        -- locked, not updated: the values the claim will have when the finish writes it (picked); --@hold
        -- a context no worker could read fails the task for good, in the hold's transaction, as --@hold
        -- in hold.sql (asyncflow.fail_unreadable, which counts it; the finish leaves it failed) --@hold
        select p.task, p.k, p.ord, p.turn, p.id, p.unreadable from picked p --@hold
        where p.unreadable is null or not asyncflow.fail_unreadable(v_task_type, p.shard, p.id, p.unreadable, v_now) --@hold
      ) --@hold
      ), {{> child_ends rows = claimed; ended = c.unreadable is not null}} --@claim
      select array_agg(c.task order by c.turn, c.ord) filter (where c.unreadable is null),
        array_agg(c.k order by c.turn, c.ord) filter (where c.unreadable is null),
        array_agg(c.id) filter (where c.unreadable is null), count(*) filter (where c.unreadable is not null)
      into v_claimed, v_claimed_keys, v_claimed_ids, v_unreadable
      from claimed c;
      v_failed := v_failed + v_unreadable; --@claim
      -- a held task is still pending, and this transaction's own locks do not hide it from the --@hold
      -- next round's picks --@hold
      v_held_ids := v_held_ids || coalesce(v_claimed_ids, '{}'); --@hold
      v_n := coalesce(cardinality(v_claimed), 0);
      if v_n > 0 and v_type.queue_rate_limited then
        perform asyncflow.queue_rate_spend(v_task_type, v_claimed_keys);
      end if;
      if v_n > 0 then
        return query select * from unnest(v_claimed);
        v_got := v_got + v_n;
        v_since := v_since + v_n;
      end if;
      if v_got >= v_limit then
        v_at := v_claimed_keys[v_n];  -- the keys walked past it get their turn next time
        exit;
      end if;
      v_at := v_from;
    end if;
    if v_seg_over then
      -- the round is over: both its segments were walked
      exit when v_since = 0;
      v_since := 0;
      v_wrapped := false;
      v_from := v_after;
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
    insert into asyncflow.queue_cursors as c (task_type, after_key, updated_at) --@claim
    values (v_task_type, v_at, v_now) --@claim
    on conflict (task_type) do update set after_key = excluded.after_key, updated_at = excluded.updated_at; --@claim
    -- the row stays locked until the hold ends: a hold that finds it locked leaves it --@hold
    perform 1 from asyncflow.queue_cursors c where c.task_type = v_task_type for update skip locked; --@hold
    if found then --@hold
      update asyncflow.queue_cursors c set after_key = v_at, updated_at = v_now where c.task_type = v_task_type; --@hold
    elsif not exists (select 1 from asyncflow.queue_cursors c where c.task_type = v_task_type) then --@hold
      insert into asyncflow.queue_cursors (task_type, after_key, updated_at) values (v_task_type, v_at, v_now) --@hold
      on conflict (task_type) do nothing; --@hold
    end if; --@hold
  end if;
  if v_type.rate_limited then
    perform asyncflow.rate_spend(v_task_type, v_got);
  end if;
  -- a claim counts its claimed and failed tasks here; a hold's are counted by its finish, and its
  -- failures by asyncflow.fail_unreadable
  if v_got > 0 or v_failed > 0 then --@claim
    insert into asyncflow.type_counters as k (task_type, slot, claimed, failed, in_pending, in_running, in_failed) --@claim
    values (v_task_type, pg_backend_pid() % 16, v_got, v_failed, -(v_got + v_failed), v_got, v_failed) --@claim
    {{> add_counts}}; --@claim
  end if; --@claim
end
$body$;
