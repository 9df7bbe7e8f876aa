-- Pipeline definitions: validation into an execution plan, versions and their status.
--
-- A definition (JSON; `asyncflow pipeline apply` also reads TOML) is
--   {"description": "...", "timeout": 86400, "retries": 0,
--    "nodes": [{"name": "probe", "type": "task", "function": "transcode", "stage": "probe"}, ...],
--    "edges": [{"from": "start", "to": "probe"}, ["probe", "end"], ...]}
-- timeout: seconds a run may take from its start (default 86400); retries: how many times the
-- checker starts a timed-out run again as a new run with the same notify key (default 0).
-- Node types and their fields (every node: name ^[a-z][a-z0-9_]{0,39}$, type, description):
--   start, end           exactly one each
--   task                 function (a task type), stage (the task's first stage), priority,
--                        async (after its task, wait for complete_node), timeout (s),
--                        timeout_retries; a task node with async and no function only waits
--   dynamic              function, stage, priority, timeout, timeout_retries, items (a jsonpath
--                        on the run's data giving an array: one task per element, joined after),
--                        max_segments (default 10000)
--   router               its out-edges carry `when` (a jsonpath predicate on the run's data);
--                        the first that holds is taken, an edge without `when` is the default
--   parallel             passes its inputs on to all its out-edges
--   pipeline             pipeline (name), version (default: the active one when the node runs),
--                        timeout: runs the sub-pipeline as a child run
--   callback             url (default: the run's notify_url): POSTs the run's data, done when
--                        delivered
-- The run's data, seen by routers and items: {"input": <run input>, "nodes": {<node>: <result>}}.

-- A validation error naming what is wrong.
create function asyncflow.pipeline_error(p_message text) returns void
language plpgsql as $$
begin
  raise exception using errcode = 'AF010', message = p_message;
end
$$;

-- True when the text is a valid jsonpath.
create function asyncflow.is_jsonpath(p_text text) returns boolean
language plpgsql immutable as $$
begin
  perform p_text::jsonpath;
  return true;
exception when others then
  return false;
end
$$;

-- compile_pipeline: checks a definition and returns its execution plan
--   {"start", "end", "timeout", "retries", "nodes": {<name>: {<fields>, "in": [..], "out":
--   [{"to", "when"}], "in_degree"}}, "order": [names in definition order], "pruned": [..]}
-- or raises AF010 naming the node or edge at fault. Router edges listed after a router's
-- default edge can never be taken: they are pruned, and so is every node left unreachable.
create function asyncflow.compile_pipeline(p_name text, p_definition jsonb) returns jsonb
language plpgsql stable as $$
declare
  v_node jsonb;
  v_edge jsonb;
  v_name text;
  v_type text;
  v_key text;
  v_nodes jsonb := '{}';
  v_order text[] := '{}';
  v_from text[] := '{}';
  v_to text[] := '{}';
  v_when text[] := '{}';
  v_live boolean[] := '{}';
  v_start text;
  v_end text;
  v_remaining text[];
  v_ready text[];
  v_reach text[];
  v_grow text[];
  v_pruned jsonb := '[]';
  v_has_default boolean;
  v_i integer;
  v_f text;
  v_t text;
  v_w text;
  v_allowed text[];
begin
  if p_definition is null or jsonb_typeof(p_definition) <> 'object' then
    perform asyncflow.pipeline_error('a pipeline definition must be a JSON object with nodes and edges');
  end if;
  select k into v_key from jsonb_object_keys(p_definition) k
  where k not in ('name', 'description', 'timeout', 'retries', 'nodes', 'edges') limit 1;
  if found then
    perform asyncflow.pipeline_error(format('unknown field %L (known: name, description, timeout, retries, nodes, edges)', v_key));
  end if;
  if p_definition ? 'name' and p_definition ->> 'name' is distinct from p_name then
    perform asyncflow.pipeline_error(format('the definition names pipeline %s, not %L', p_definition -> 'name', p_name));
  end if;
  if jsonb_typeof(p_definition -> 'timeout') not in ('number', 'null')
    or (p_definition ->> 'timeout')::numeric not between 1 and 31536000 then
    perform asyncflow.pipeline_error(format('timeout must be seconds between 1 and 31536000, got %s', p_definition -> 'timeout'));
  end if;
  if jsonb_typeof(p_definition -> 'retries') not in ('number', 'null')
    or (p_definition ->> 'retries')::numeric not between 0 and 100 then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') is distinct from 'array' or jsonb_array_length(p_definition -> 'nodes') = 0 then
    perform asyncflow.pipeline_error('nodes must be a non-empty array of node objects');
  end if;
  if jsonb_array_length(p_definition -> 'nodes') > 500 then
    perform asyncflow.pipeline_error('a pipeline has at most 500 nodes');
  end if;
  if jsonb_typeof(p_definition -> 'edges') is distinct from 'array' then
    perform asyncflow.pipeline_error('edges must be an array of {"from", "to", "when"} objects or [from, to] pairs');
  end if;

  -- Nodes: names, types, fields.
  for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e loop
    if jsonb_typeof(v_node) <> 'object' or jsonb_typeof(v_node -> 'name') is distinct from 'string' then
      perform asyncflow.pipeline_error(format('every node must be an object with a name, got %s', v_node));
    end if;
    v_name := v_node ->> 'name';
    if v_name !~ '^[a-z][a-z0-9_]{0,39}$' then
      perform asyncflow.pipeline_error(format('node %L: a node name must match ^[a-z][a-z0-9_]{0,39}$', v_name));
    end if;
    if v_nodes ? v_name then
      perform asyncflow.pipeline_error(format('node %L: the name is used twice', v_name));
    end if;
    v_type := v_node ->> 'type';
    v_allowed := case v_type
      when 'start' then '{}'::text[]
      when 'end' then '{}'
      when 'parallel' then '{}'
      when 'router' then '{}'
      when 'task' then '{function,stage,priority,async,timeout,timeout_retries}'
      when 'dynamic' then '{function,stage,priority,items,max_segments,timeout,timeout_retries}'
      when 'pipeline' then '{pipeline,version,timeout}'
      when 'callback' then '{url}'
    end;
    if v_allowed is null then
      perform asyncflow.pipeline_error(format(
        'node %L: type must be one of start, end, task, dynamic, router, parallel, pipeline, callback, got %s',
        v_name, coalesce((v_node -> 'type')::text, 'nothing')));
    end if;
    select k into v_key from jsonb_object_keys(v_node) k
    where k not in ('name', 'type', 'description') and k <> all (v_allowed) limit 1;
    if found then
      perform asyncflow.pipeline_error(format('node %L: unknown field %L for a %s node', v_name, v_key, v_type));
    end if;
    if v_type in ('task', 'dynamic') then
      if v_node ? 'function' then
        if jsonb_typeof(v_node -> 'function') <> 'string'
          or not exists (select 1 from asyncflow.task_types y where y.task_type = v_node ->> 'function') then
          perform asyncflow.pipeline_error(format('node %L: unknown function %s (register its task type first)',
            v_name, v_node -> 'function'));
        end if;
      elsif v_type = 'dynamic' or not coalesce((v_node ->> 'async')::boolean, false) then
        perform asyncflow.pipeline_error(format('node %L: a %s node needs a function', v_name, v_type));
      end if;
      if jsonb_typeof(v_node -> 'stage') not in ('string', 'null') or (v_node ->> 'stage') !~ '^[A-Za-z0-9_.:/-]{1,64}$' then
        perform asyncflow.pipeline_error(format('node %L: stage must match ^[A-Za-z0-9_.:/-]{1,64}$', v_name));
      end if;
      if jsonb_typeof(v_node -> 'priority') not in ('number', 'null')
        or (v_node ->> 'priority')::numeric not between 0 and 31104000 then
        perform asyncflow.pipeline_error(format('node %L: priority must be between 0 and 31104000', v_name));
      end if;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_name));
      end if;
      if jsonb_typeof(v_node -> 'timeout_retries') not in ('number', 'null')
        or (v_node ->> 'timeout_retries')::numeric not between 0 and 100 then
        perform asyncflow.pipeline_error(format('node %L: timeout_retries must be between 0 and 100', v_name));
      end if;
    end if;
    if jsonb_typeof(v_node -> 'timeout') not in ('number', 'null')
      or (v_node ->> 'timeout')::numeric not between 1 and 31536000 then
      perform asyncflow.pipeline_error(format('node %L: timeout must be seconds between 1 and 31536000', v_name));
    end if;
    if v_type = 'dynamic' then
      if jsonb_typeof(v_node -> 'items') is distinct from 'string' or not asyncflow.is_jsonpath(v_node ->> 'items') then
        perform asyncflow.pipeline_error(format('node %L: items must be a jsonpath such as "$.nodes.split.segments", got %s',
          v_name, coalesce((v_node -> 'items')::text, 'nothing')));
      end if;
      if jsonb_typeof(v_node -> 'max_segments') not in ('number', 'null')
        or (v_node ->> 'max_segments')::numeric not between 1 and 100000 then
        perform asyncflow.pipeline_error(format('node %L: max_segments must be between 1 and 100000', v_name));
      end if;
    end if;
    if v_type = 'pipeline' then
      if jsonb_typeof(v_node -> 'pipeline') is distinct from 'string' then
        perform asyncflow.pipeline_error(format('node %L: a pipeline node needs the name of a pipeline', v_name));
      end if;
      if v_node ->> 'pipeline' = p_name then
        perform asyncflow.pipeline_error(format('node %L: a pipeline cannot run itself', v_name));
      end if;
      if not exists (select 1 from asyncflow.pipelines p where p.name = v_node ->> 'pipeline'
          and p.status <> 'retired' and (v_node -> 'version' is null or p.version = (v_node ->> 'version')::numeric)) then
        perform asyncflow.pipeline_error(format('node %L: unknown pipeline %s%s', v_name, v_node -> 'pipeline',
          coalesce(' version ' || (v_node ->> 'version'), '')));
      end if;
    end if;
    if v_type = 'callback' and v_node ? 'url' and (jsonb_typeof(v_node -> 'url') <> 'string'
      or (v_node ->> 'url') !~ '^https?://[^\s]+$' or length(v_node ->> 'url') > 2048) then
      perform asyncflow.pipeline_error(format('node %L: url must be an http(s) URL of at most 2048 characters', v_name));
    end if;
    if v_type = 'start' then
      if v_start is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one start node (%L is one)', v_name, v_start));
      end if;
      v_start := v_name;
    elsif v_type = 'end' then
      if v_end is not null then
        perform asyncflow.pipeline_error(format('node %L: a pipeline has exactly one end node (%L is one)', v_name, v_end));
      end if;
      v_end := v_name;
    end if;
    v_nodes := v_nodes || jsonb_build_object(v_name, (v_node - 'name') || '{"in": [], "out": []}');
    v_order := v_order || v_name;
  end loop;
  if v_start is null then
    perform asyncflow.pipeline_error('the pipeline has no start node');
  end if;
  if v_end is null then
    perform asyncflow.pipeline_error('the pipeline has no end node');
  end if;

  -- Edges.
  for v_edge in select e from jsonb_array_elements(p_definition -> 'edges') e loop
    if jsonb_typeof(v_edge) = 'array' and jsonb_array_length(v_edge) = 2 then
      v_edge := jsonb_build_object('from', v_edge -> 0, 'to', v_edge -> 1);
    end if;
    if jsonb_typeof(v_edge) <> 'object' or jsonb_typeof(v_edge -> 'from') is distinct from 'string'
      or jsonb_typeof(v_edge -> 'to') is distinct from 'string'
      or exists (select 1 from jsonb_object_keys(v_edge) k where k not in ('from', 'to', 'when')) then
      perform asyncflow.pipeline_error(format('edge %s: an edge is {"from", "to", "when"} or [from, to]', v_edge));
    end if;
    v_f := v_edge ->> 'from';
    v_t := v_edge ->> 'to';
    if not v_nodes ? v_f then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_f));
    end if;
    if not v_nodes ? v_t then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_t));
    end if;
    if v_f = v_t then
      perform asyncflow.pipeline_error(format('node %L: an edge from the node to itself is a cycle', v_f));
    end if;
    if v_t = v_start then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the start node and has no in-edges', v_f, v_t, v_t));
    end if;
    if v_f = v_end then
      perform asyncflow.pipeline_error(format('edge %s -> %s: node %L is the end node and has no out-edges', v_f, v_t, v_f));
    end if;
    for v_i in 1 .. coalesce(array_length(v_from, 1), 0) loop
      if v_from[v_i] = v_f and v_to[v_i] = v_t then
        perform asyncflow.pipeline_error(format('edge %s -> %s: listed twice', v_f, v_t));
      end if;
    end loop;
    v_w := v_edge ->> 'when';
    if v_edge ? 'when' then
      if v_nodes -> v_f ->> 'type' <> 'router' then
        perform asyncflow.pipeline_error(format('edge %s -> %s: only a router''s edges have a condition (when)', v_f, v_t));
      end if;
      if jsonb_typeof(v_edge -> 'when') <> 'string' or not asyncflow.is_jsonpath(v_w) then
        perform asyncflow.pipeline_error(format('edge %s -> %s: when must be a jsonpath predicate such as "$.nodes.probe.duration_s > 60", got %s',
          v_f, v_t, v_edge -> 'when'));
      end if;
    end if;
    v_from := v_from || v_f;
    v_to := v_to || v_t;
    v_when := v_when || v_w;
    v_live := v_live || true;
  end loop;

  -- Cycles (Kahn): repeatedly remove the nodes without an in-edge from a remaining node.
  v_remaining := v_order;
  loop
    select coalesce(array_agg(n), '{}') into v_ready from unnest(v_remaining) n
    where not exists (select 1 from generate_subscripts(v_from, 1) i
                      where v_to[i] = n and v_from[i] = any (v_remaining));
    exit when cardinality(v_ready) = 0;
    v_remaining := array(select n from unnest(v_remaining) n where n <> all (v_ready));
  end loop;
  if cardinality(v_remaining) > 0 then
    -- what is left is on a cycle or downstream of one; name one on the cycle itself
    loop
      select coalesce(array_agg(n), '{}') into v_ready from unnest(v_remaining) n
      where not exists (select 1 from generate_subscripts(v_from, 1) i
                        where v_from[i] = n and v_to[i] = any (v_remaining));
      exit when cardinality(v_ready) = 0;
      v_remaining := array(select n from unnest(v_remaining) n where n <> all (v_ready));
    end loop;
    perform asyncflow.pipeline_error(format('node %L: it is on a cycle (%s)', v_remaining[1], array_to_string(v_remaining, ', ')));
  end if;

  -- Every node is reachable from start ...
  v_reach := array[v_start];
  loop
    v_grow := array(select distinct v_to[i] from generate_subscripts(v_from, 1) i
                    where v_from[i] = any (v_reach) and v_to[i] <> all (v_reach));
    exit when cardinality(v_grow) = 0;
    v_reach := v_reach || v_grow;
  end loop;
  select n into v_name from unnest(v_order) with ordinality u(n, k) where n <> all (v_reach) order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: unreachable from the start node %L', v_name, v_start));
  end if;
  -- ... and has a path to the end.
  v_reach := array[v_end];
  loop
    v_grow := array(select distinct v_from[i] from generate_subscripts(v_from, 1) i
                    where v_to[i] = any (v_reach) and v_from[i] <> all (v_reach));
    exit when cardinality(v_grow) = 0;
    v_reach := v_reach || v_grow;
  end loop;
  select n into v_name from unnest(v_order) with ordinality u(n, k) where n <> all (v_reach) order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: no path from it to the end node %L', v_name, v_end));
  end if;

  -- Routers: at most one default edge; edges listed after it can never be taken (pruned).
  foreach v_name in array v_order loop
    continue when v_nodes -> v_name ->> 'type' <> 'router';
    v_has_default := false;
    for v_i in 1 .. coalesce(array_length(v_from, 1), 0) loop
      continue when v_from[v_i] <> v_name;
      if v_has_default then
        v_live[v_i] := false;
        v_pruned := v_pruned || jsonb_build_object('edge', jsonb_build_array(v_from[v_i], v_to[v_i]),
          'why', 'listed after the router''s default edge: never taken');
      elsif v_when[v_i] is null then
        v_has_default := true;
      end if;
    end loop;
    if not exists (select 1 from generate_subscripts(v_from, 1) i where v_from[i] = v_name) then
      perform asyncflow.pipeline_error(format('node %L: a router needs out-edges', v_name));
    end if;
  end loop;
  -- Nodes left unreachable by the pruning are pruned too; the end must stay reachable.
  v_reach := array[v_start];
  loop
    v_grow := array(select distinct v_to[i] from generate_subscripts(v_from, 1) i
                    where v_live[i] and v_from[i] = any (v_reach) and v_to[i] <> all (v_reach));
    exit when cardinality(v_grow) = 0;
    v_reach := v_reach || v_grow;
  end loop;
  if v_end <> all (v_reach) then
    perform asyncflow.pipeline_error(format('node %L: the end node can never be reached', v_end));
  end if;
  foreach v_name in array v_order loop
    if v_name <> all (v_reach) then
      v_pruned := v_pruned || jsonb_build_object('node', v_name, 'why', 'reachable only through pruned edges');
      v_nodes := v_nodes - v_name;
    end if;
  end loop;
  for v_i in 1 .. coalesce(array_length(v_from, 1), 0) loop
    continue when not v_live[v_i] or v_from[v_i] <> all (v_reach);
    v_nodes := jsonb_set(v_nodes, array[v_from[v_i], 'out'],
      (v_nodes -> v_from[v_i] -> 'out') || jsonb_build_array(jsonb_build_object('to', v_to[v_i], 'when', v_when[v_i])));
    v_nodes := jsonb_set(v_nodes, array[v_to[v_i], 'in'], (v_nodes -> v_to[v_i] -> 'in') || to_jsonb(v_from[v_i]));
  end loop;
  select jsonb_object_agg(k, v || jsonb_build_object('in_degree', jsonb_array_length(v -> 'in'))) into v_nodes
  from jsonb_each(v_nodes) x(k, v);

  return jsonb_build_object('start', v_start, 'end', v_end,
    'timeout', coalesce((p_definition ->> 'timeout')::numeric, 86400),
    'retries', coalesce((p_definition ->> 'retries')::integer, 0),
    'nodes', v_nodes,
    'order', to_jsonb(array(select n from unnest(v_order) n where n = any (v_reach))),
    'pruned', v_pruned);
end
$$;

create function asyncflow.pipeline_json(p asyncflow.pipelines) returns jsonb
language sql stable as $$
  select jsonb_build_object('name', p.name, 'version', p.version, 'status', p.status, 'definition', p.definition,
    'plan', p.plan, 'created_at', p.created_at, 'updated_at', p.updated_at)
$$;

-- put_pipeline: validates a definition and stores it as the next version of the pipeline, with
-- p_status 'active' (the default: the previously active version is retired; runs already
-- started keep theirs) or 'draft'. A definition equal to the latest version's stores nothing new
-- (that version's status is set instead), so applying the same file twice is harmless.
-- Returns the version as JSON, with "created": false when nothing new was stored.
-- Locks: a transaction advisory lock on the pipeline's name.
create function asyncflow.put_pipeline(name text, definition jsonb, status text default 'active')
returns jsonb
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_name alias for $1;
  p_definition alias for $2;
  p_status alias for $3;
  v_plan jsonb;
  v_latest asyncflow.pipelines;
  v_row asyncflow.pipelines;
  v_created boolean := true;
begin
  if p_name is null or p_name !~ '^[a-z][a-z0-9_]{0,39}$' then
    perform asyncflow.pipeline_error(format('invalid pipeline name %s: it must match ^[a-z][a-z0-9_]{0,39}$',
      coalesce(quote_literal(p_name), 'null')));
  end if;
  if p_status is null or p_status not in ('active', 'draft') then
    perform asyncflow.raise_error('AF006', format('status must be active or draft, got %s', coalesce(quote_literal(p_status), 'null')));
  end if;
  v_plan := asyncflow.compile_pipeline(p_name, p_definition);
  perform pg_advisory_xact_lock(16714, hashtext(p_name));
  -- the engine hears of the tasks of these functions (see wf_watch_type)
  perform asyncflow.wf_watch_type(f) from (
    select distinct v ->> 'function' as f from jsonb_each(v_plan -> 'nodes') x(k, v) where v ? 'function') fs;
  select * into v_latest from asyncflow.pipelines p where p.name = p_name order by p.version desc limit 1;
  if found and v_latest.definition = p_definition then
    v_created := false;
    v_row := v_latest;
  else
    insert into asyncflow.pipelines (name, version, status, definition, plan)
    values (p_name, coalesce(v_latest.version, 0) + 1, 'draft', p_definition, v_plan)
    returning * into v_row;
  end if;
  if p_status = 'active' and v_row.status <> 'active' then
    v_row := asyncflow.set_pipeline_status(p_name, v_row.version, 'active');
  end if;
  return asyncflow.pipeline_json(v_row) || jsonb_build_object('created', v_created);
end
$$;

-- set_pipeline_status: activates (retiring the active version), drafts or retires a version.
-- Runs already started are not affected; retired versions start no new runs.
create function asyncflow.set_pipeline_status(name text, version integer, status text)
returns asyncflow.pipelines
language plpgsql security definer set search_path = pg_catalog, pg_temp as $$
declare
  p_name alias for $1;
  p_version alias for $2;
  p_status alias for $3;
  v_row asyncflow.pipelines;
begin
  if p_status is null or p_status not in ('active', 'draft', 'retired') then
    perform asyncflow.raise_error('AF006', format('status must be active, draft or retired, got %s',
      coalesce(quote_literal(p_status), 'null')));
  end if;
  perform pg_advisory_xact_lock(16714, hashtext(p_name));
  if p_status = 'active' then
    update asyncflow.pipelines p set status = 'retired', updated_at = now()
    where p.name = p_name and p.status = 'active' and p.version <> p_version;
  end if;
  update asyncflow.pipelines p set status = p_status, updated_at = now()
  where p.name = p_name and p.version = p_version returning * into v_row;
  if not found then
    raise exception using errcode = 'AF011', message = format('unknown pipeline %L version %s', p_name, p_version);
  end if;
  return v_row;
end
$$;

-- get_pipeline: one version (default: the active one, else the latest) as JSON, or null.
create function asyncflow.get_pipeline(name text, version integer default null) returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select asyncflow.pipeline_json(p) from asyncflow.pipelines p
  where p.name = $1 and ($2 is null or p.version = $2)
  order by (p.status = 'active') desc, p.version desc limit 1
$$;

-- list_pipelines: every pipeline's versions, newest first, without definitions and plans.
create function asyncflow.list_pipelines() returns setof jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_build_object('name', p.name, 'version', p.version, 'status', p.status,
    'nodes', jsonb_array_length(p.plan -> 'order'), 'created_at', p.created_at, 'updated_at', p.updated_at)
  from asyncflow.pipelines p order by p.name, p.version desc
$$;
