-- Tasks that wait for an event: send_event, the wait's own check, the timeout, retention.
-- The current text of each function: edit here, `asyncflow migrate` applies it.
--
--   call of stage A ── reply {"wait": {"event": K, "timeout": T}, "next_stage": S} ──> report:
--     task `waiting` at S, a row in asyncflow.waits (K, since = the call's claim, until = now + T),
--     then match_waits: the first event of K sent since then, if any, ends the wait at once
--   send_event(K, payload) ── inserts the event (kept event_retention seconds) and ends every
--     wait for K: the task is pending at S, its `wake` says {"event": {...}, "timed_out": false}
--   rescuer ── expire_waits: a wait past its until ends {"event": null, "timed_out": true}
--
-- No event is lost to a race. A wait's row and an event are each written under the key's
-- transaction advisory lock (16716, hashtext(key)), and each side looks for the other in a
-- statement that begins after it holds the lock: whichever transaction takes the lock second
-- sees what the first committed (send_event sees the wait, or the wait's check sees the event).
-- Each wait ends once: ending it deletes its row, and the task changes only while `waiting`, so
-- of a timeout and a send_event racing for one wait, the first to delete the row wins and the
-- other finds no row (send_event waits for the row lock, then skips the deleted row; the
-- timeout takes its rows SKIP LOCKED).

-- An event key: 1 to 200 of A-Za-z0-9_.:/@#=+- (order:42/paid). Null when it is one, else why not.
create or replace function asyncflow.event_key_problem(p_key text) returns text
language sql immutable parallel safe as $$
  select case when p_key is null then 'the event key is required'
    when p_key !~ '^[A-Za-z0-9_.:/@#=+-]+$' or length(p_key) > 200
      then format('the event key must be 1 to 200 of A-Za-z0-9_.:/@#=+- (e.g. order:42/paid), got %s',
        to_jsonb(p_key))
  end
$$;

-- The largest event payload, as JSON text in bytes: an event is a signal with a little data,
-- copied to every task it wakes.
create or replace function asyncflow.event_payload_max_bytes() returns integer
language sql immutable parallel safe as $$ select 65536 $$;

-- end_waits: waiting tasks of one type go on to the stage they waited to run, pending at once,
-- each with its wake ({"event": ..., "timed_out": ...}) for the call of that stage. Only tasks
-- still `waiting` change (the type's type_end_waits__ function, sql/api/templates/end_waits.sql).
-- Counted through status_deltas (this may run in an application's transaction: send_event). The
-- next stage starts from what ended the wait, so that must be durable: the transaction commits
-- durably (commit_durably), an application's too. Returns the number changed.
create or replace function asyncflow.end_waits(p_task_type text, p_shards integer[], p_ids bigint[], p_wakes jsonb[],
  p_now timestamptz)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_n integer;
begin
  perform asyncflow.check_type_name(p_task_type);
  execute format('select asyncflow.%I($1, $2, $3, $4)', 'type_end_waits__' || p_task_type)
    into v_n using p_shards, p_ids, p_wakes, p_now;
  if v_n > 0 then
    perform asyncflow.commit_durably();
    insert into asyncflow.status_deltas (task_type, in_waiting, in_pending) values (p_task_type, -v_n, v_n);
    perform asyncflow.wake(p_task_type);
  end if;
  return v_n;
end
$$;

-- send_event: records the event and wakes every task waiting for its key, in the caller's
-- transaction (a rollback sends nothing). Returns the number of tasks woken now; a wait that
-- begins later, within event_retention, finds the event by itself. The key and the payload
-- (any JSON, at most event_payload_max_bytes as text) are checked (AF006), nothing changed.
-- sent_at is the clock when it runs (not the transaction's start), so that an event sent late in
-- a long transaction still counts as sent after a call that began meanwhile.
-- Under REPEATABLE READ or SERIALIZABLE, a wait committed after the transaction's snapshot is
-- not seen here; it finds the event itself at its timeout at the latest (expire_waits).
create or replace function asyncflow.send_event(event_key text, payload jsonb default '{}'::jsonb,
  p_now timestamptz default null)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
declare
  p_key alias for $1;
  p_payload alias for $2;
  v_now timestamptz := asyncflow.check_now(p_now);
  v_problem text := asyncflow.event_key_problem(p_key);
  v_event jsonb;
  v_woken integer := 0;
  v record;
begin
  if p_now is null then
    v_now := clock_timestamp();
  end if;
  if v_problem is not null then
    perform asyncflow.raise_error('AF006', v_problem);
  end if;
  if p_payload is null or not asyncflow.json_ok(p_payload) then
    perform asyncflow.raise_error('AF006', format('payload: %s',
      coalesce(asyncflow.json_problem(p_payload), 'a JSON value is required')));
  end if;
  if octet_length(p_payload::text) > asyncflow.event_payload_max_bytes() then
    perform asyncflow.raise_error('AF006', format('payload is too large: %s bytes of JSON, the limit is %s',
      octet_length(p_payload::text), asyncflow.event_payload_max_bytes()));
  end if;
  -- before anything is read: a wait's check that took the lock first has committed its row
  perform pg_advisory_xact_lock(16716, hashtext(p_key));
  insert into asyncflow.events (event_key, payload, sent_at) values (p_key, p_payload, v_now);
  v_event := jsonb_build_object('event', jsonb_build_object('key', p_key, 'payload', p_payload, 'sent_at', v_now),
    'timed_out', false);
  for v in
    with ended as (
      delete from asyncflow.waits w where w.event_key = p_key and w.since <= v_now
      returning w.task_type, w.shard, w.id
    )
    select e.task_type, array_agg(e.shard) as shards, array_agg(e.id) as ids from ended e group by e.task_type
  loop
    v_woken := v_woken + asyncflow.end_waits(v.task_type, v.shards, v.ids,
      array_fill(v_event, array[cardinality(v.ids)]), v_now);
  end loop;
  return v_woken;
end
$$;

-- match_waits: the waits just begun by these tasks (a report's) take the first event of their
-- key sent at or after their call began, if one was sent: the event that came while the call
-- ran. Called by each type's report function after the reports are written, in the same
-- transaction. Returns the number of waits ended.
create or replace function asyncflow.match_waits(p_task_type text, p_task_ids text[], p_now timestamptz)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp
set enable_seqscan = off set jit = off as $$
declare
  v_key text;
  v record;
begin
  -- the keys' locks in one order, so that two reports never wait for each other
  for v_key in
    select distinct w.event_key from asyncflow.waits w
    join (select split_part(u.task_id, '-', 2)::integer as shard, split_part(u.task_id, '-', 3)::bigint as id
      from unnest(p_task_ids) u(task_id) where split_part(u.task_id, '-', 1) = p_task_type) x
      on w.task_type = p_task_type and w.shard = x.shard and w.id = x.id
    order by 1
  loop
    perform pg_advisory_xact_lock(16716, hashtext(v_key));
  end loop;
  -- a statement of its own, after the locks: it sees every event committed before them
  with mine as (
    select w.shard, w.id, w.event_key, w.since from asyncflow.waits w
    join (select split_part(u.task_id, '-', 2)::integer as shard, split_part(u.task_id, '-', 3)::bigint as id
      from unnest(p_task_ids) u(task_id) where split_part(u.task_id, '-', 1) = p_task_type) x
      on w.task_type = p_task_type and w.shard = x.shard and w.id = x.id
  ), found as (
    select m.shard, m.id, jsonb_build_object('event', jsonb_build_object('key', e.event_key, 'payload', e.payload,
      'sent_at', e.sent_at), 'timed_out', false) as wake
    from mine m
    cross join lateral (select e.event_key, e.payload, e.sent_at from asyncflow.events e
      where e.event_key = m.event_key and e.sent_at >= m.since order by e.sent_at, e.id limit 1) e
  ), ended as (
    delete from asyncflow.waits w using found f
    where w.task_type = p_task_type and w.shard = f.shard and w.id = f.id
    returning f.shard, f.id, f.wake
  )
  select array_agg(e.shard) as shards, array_agg(e.id) as ids, array_agg(e.wake) as wakes into v from ended e;
  if v.ids is null then
    return 0;
  end if;
  return asyncflow.end_waits(p_task_type, v.shards, v.ids, v.wakes, p_now);
end
$$;

-- expire_waits: waits past their until end. A wait whose event was sent but not seen (sent
-- from a REPEATABLE READ transaction that began before the wait) takes that event; the others
-- time out: {"event": null, "timed_out": true}. Locks: the waits' rows, SKIP LOCKED (a
-- send_event ending one right now wins it). At most p_limit waits per call; returns each ended
-- wait's task, key, and whether it timed out. Run by the rescuer.
create or replace function asyncflow.expire_waits(p_now timestamptz default null, p_limit integer default 1000)
returns table (task_id text, event_key text, timed_out boolean)
language plpgsql security definer set search_path = pg_catalog, pg_temp set jit = off as $$
#variable_conflict use_column
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_types text[];
  v_shards integer[];
  v_ids bigint[];
  v_keys text[];
  v_wakes jsonb[];
  v record;
begin
  with picked as (
    select w.task_type, w.shard, w.id from asyncflow.waits w
    where w.until <= v_now order by w.until limit greatest(p_limit, 1)
    for update skip locked
  ), ended as (
    delete from asyncflow.waits w using picked p
    where w.task_type = p.task_type and w.shard = p.shard and w.id = p.id
    returning w.task_type, w.shard, w.id, w.event_key, w.since
  ), woken as (
    select e.task_type, e.shard, e.id, e.event_key, coalesce(
      (select jsonb_build_object('event', jsonb_build_object('key', x.event_key, 'payload', x.payload,
         'sent_at', x.sent_at), 'timed_out', false)
       from asyncflow.events x where x.event_key = e.event_key and x.sent_at >= e.since
       order by x.sent_at, x.id limit 1),
      '{"event": null, "timed_out": true}'::jsonb) as wake
    from ended e
  )
  select array_agg(k.task_type), array_agg(k.shard), array_agg(k.id), array_agg(k.event_key), array_agg(k.wake)
  into v_types, v_shards, v_ids, v_keys, v_wakes
  from woken k;
  for v in
    select u.task_type, array_agg(u.shard) as shards, array_agg(u.id) as ids, array_agg(u.wake) as wakes
    from unnest(v_types, v_shards, v_ids, v_wakes) u(task_type, shard, id, wake) group by u.task_type
  loop
    perform asyncflow.end_waits(v.task_type, v.shards, v.ids, v.wakes, v_now);
  end loop;
  return query select asyncflow.format_task_id(u.task_type, u.shard, u.id), u.event_key,
    (u.wake ->> 'timed_out')::boolean
  from unnest(v_types, v_shards, v_ids, v_keys, v_wakes) u(task_type, shard, id, event_key, wake);
end
$$;

-- drop_expired_events: events sent more than config.event_retention seconds ago go, at most
-- p_limit per call, oldest first: in id order (the order they were sent in, give or take the
-- transactions running at once), up to the first one still kept, so that no index on sent_at
-- is written by every send. An event a little out of order goes at the next pass after the one
-- before it. Returns how many went.
create or replace function asyncflow.drop_expired_events(p_now timestamptz default null, p_limit integer default 10000)
returns integer
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  v_now timestamptz := asyncflow.check_now(p_now);
  v_cutoff timestamptz;
  v_last bigint;
  v_keep bigint;
  v_n integer;
begin
  v_cutoff := v_now - make_interval(secs => (select c.event_retention from asyncflow.config c));
  select max(x.id), min(x.id) filter (where x.sent_at >= v_cutoff) into v_last, v_keep
  from (select e.id, e.sent_at from asyncflow.events e order by e.id limit greatest(p_limit, 1)) x;
  delete from asyncflow.events e where e.id < coalesce(v_keep, v_last + 1);
  get diagnostics v_n = row_count;
  return v_n;
end
$$;
