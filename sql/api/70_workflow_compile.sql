-- Workflow pipelines: definitions compiled to plans, versions and their status.
-- The current text of each function: edit here, `asyncflow migrate` applies it.

create or replace function asyncflow.pipeline_error(p_message text) returns void
    language plpgsql
    as $$
begin
  -- cut (shorten): the message may repeat a name from the definition, of any size
  raise exception using errcode = 'AF010', message = asyncflow.shorten(p_message);
end
$$;

create or replace function asyncflow.compile_pipeline(p_name text, p_definition jsonb) returns jsonb
    language plpgsql stable
    as $_$
declare
  v_node jsonb;
  v_edge jsonb;
  v_name text;
  v_type text;
  v_key text;
  v_nodes jsonb;
  v_defs jsonb[] := '{}';
  v_types text[] := '{}';
  v_order text[] := '{}';
  v_start text;
  v_end text;
  v_allowed text[];
  -- nodes by number (their position in v_order, v_defs and v_types)
  v_n integer;
  v_number jsonb := '{}';
  -- edges in definition order, by node name and by node number
  v_e integer := 0;
  v_from text[] := '{}';
  v_to text[] := '{}';
  v_when text[] := '{}';
  v_fi integer[] := '{}';
  v_ti integer[] := '{}';
  v_live boolean[];
  v_dup integer;
  v_f text;
  v_t text;
  v_w text;
  -- edges grouped by node (graph_index)
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_seen boolean[];
  v_queue integer[];
  v_head integer;
  v_k integer;
  v_j integer;
  v_i integer;
  v_cycle text[];
  v_pruned jsonb := '[]';
  v_has_default boolean;
  v_plan jsonb;
  v_path text[];
begin
  -- Field types the casts below rely on: an integer field with a fraction, or async or version
  -- of the wrong JSON type, is refused here (AF010), not stored to fail a cast later (22P02).
  if jsonb_typeof(p_definition -> 'retries') = 'number' and not asyncflow.is_integral(p_definition -> 'retries') then
    perform asyncflow.pipeline_error(format('retries must be an integer between 0 and 100, got %s', p_definition -> 'retries'));
  end if;
  if jsonb_typeof(p_definition -> 'nodes') = 'array' then
    for v_node in select e from jsonb_array_elements(p_definition -> 'nodes') e where jsonb_typeof(e) = 'object' loop
      foreach v_key in array array['priority', 'timeout_retries', 'max_segments', 'version'] loop
        if (v_key = 'version' and jsonb_typeof(v_node -> v_key) not in ('number', 'null'))
          or (jsonb_typeof(v_node -> v_key) = 'number' and not asyncflow.is_integral(v_node -> v_key)) then
          perform asyncflow.pipeline_error(format('node %L: %s must be an integer, got %s',
            v_node ->> 'name', v_key, v_node -> v_key));
        end if;
      end loop;
      if jsonb_typeof(v_node -> 'async') not in ('boolean', 'null') then
        perform asyncflow.pipeline_error(format('node %L: async must be true or false', v_node ->> 'name'));
      end if;
    end loop;
  end if;

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
  if jsonb_array_length(p_definition -> 'edges') > 5000 then
    perform asyncflow.pipeline_error('a pipeline has at most 5000 edges');
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
    if v_number ? v_name then
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
    v_order := v_order || v_name;
    v_defs := v_defs || (v_node - 'name');
    v_types := v_types || v_type;
    v_number := v_number || jsonb_build_object(v_name, cardinality(v_order));
  end loop;
  if v_start is null then
    perform asyncflow.pipeline_error('the pipeline has no start node');
  end if;
  if v_end is null then
    perform asyncflow.pipeline_error('the pipeline has no end node');
  end if;
  v_n := cardinality(v_order);

  -- Edges. The first edge listed twice is found in one pass; it is refused where the edge loop
  -- reaches it, after the checks of the edges before it and its own shape checks.
  select min(k) into v_dup from (
    select k, row_number() over (partition by f, t order by k) as nth
    from (select k, case when jsonb_typeof(e) = 'array' then e ->> 0 else e ->> 'from' end as f,
            case when jsonb_typeof(e) = 'array' then e ->> 1 else e ->> 'to' end as t
          from jsonb_array_elements(p_definition -> 'edges') with ordinality x(e, k)) y
  ) z where nth > 1;
  for v_edge in select e from jsonb_array_elements(p_definition -> 'edges') e loop
    v_e := v_e + 1;
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
    if not v_number ? v_f then
      perform asyncflow.pipeline_error(format('edge %s -> %s: unknown node %L', v_f, v_t, v_f));
    end if;
    if not v_number ? v_t then
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
    if v_e = v_dup then
      perform asyncflow.pipeline_error(format('edge %s -> %s: listed twice', v_f, v_t));
    end if;
    v_w := v_edge ->> 'when';
    if v_edge ? 'when' then
      if v_types[(v_number ->> v_f)::integer] <> 'router' then
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
    v_fi := v_fi || (v_number ->> v_f)::integer;
    v_ti := v_ti || (v_number ->> v_t)::integer;
  end loop;
  v_live := array_fill(true, array[v_e]);
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- Cycles (Kahn): take away the nodes without an in-edge from a node still there, until none is
  -- left or every node left has one.
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_queue := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  v_head := 1;
  while v_head <= cardinality(v_queue) loop
    v_k := v_queue[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_queue := v_queue || v_i;
      end if;
    end loop;
  end loop;
  if cardinality(v_queue) < v_n then
    -- what is left is on a cycle or downstream of one; take away, the same way backwards, the
    -- nodes without an out-edge to a node left, and name one on the cycle itself
    v_seen := array(select v_count[k] > 0 from generate_series(1, v_n) k);
    v_count := array(select count(*) filter (where v_seen[k] and v_seen[v_ti[v_out[j]]])::integer
                     from generate_series(1, v_n) k
                     left join lateral generate_series(v_out_at[k], v_out_at[k + 1] - 1) j on true
                     group by k order by k);
    v_queue := array(select k from generate_series(1, v_n) k where v_seen[k] and v_count[k] = 0);
    v_head := 1;
    while v_head <= cardinality(v_queue) loop
      v_k := v_queue[v_head];
      v_head := v_head + 1;
      v_seen[v_k] := false;
      for v_j in v_in_at[v_k] .. v_in_at[v_k + 1] - 1 loop
        v_i := v_fi[v_in[v_j]];
        continue when not v_seen[v_i];
        v_count[v_i] := v_count[v_i] - 1;
        if v_count[v_i] = 0 then
          v_queue := v_queue || v_i;
        end if;
      end loop;
    end loop;
    v_cycle := array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k);
    perform asyncflow.pipeline_error(format('node %L: it is on a cycle (%s)', v_cycle[1], array_to_string(v_cycle, ', ')));
  end if;

  -- Every node is reachable from start ...
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: unreachable from the start node %L', v_name, v_start));
  end if;
  -- ... and has a path to the end.
  v_seen := asyncflow.graph_reach((v_number ->> v_end)::integer, v_n, v_in_at, v_in, v_fi);
  select n into v_name from unnest(v_order) with ordinality u(n, k) where not v_seen[k] order by k limit 1;
  if found then
    perform asyncflow.pipeline_error(format('node %L: no path from it to the end node %L', v_name, v_end));
  end if;

  -- Routers: at most one default edge; edges listed after it can never be taken (pruned).
  for v_k in 1 .. v_n loop
    continue when v_types[v_k] <> 'router';
    v_has_default := false;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_out[v_j];
      if v_has_default then
        v_live[v_i] := false;
        v_pruned := v_pruned || jsonb_build_object('edge', jsonb_build_array(v_from[v_i], v_to[v_i]),
          'why', 'listed after the router''s default edge: never taken');
      elsif v_when[v_i] is null then
        v_has_default := true;
      end if;
    end loop;
    if v_out_at[v_k + 1] = v_out_at[v_k] then
      perform asyncflow.pipeline_error(format('node %L: a router needs out-edges', v_order[v_k]));
    end if;
  end loop;
  -- Nodes left unreachable by the pruning are pruned too; the end must stay reachable.
  v_seen := asyncflow.graph_reach((v_number ->> v_start)::integer, v_n, v_out_at, v_out, v_ti, v_live);
  if not v_seen[(v_number ->> v_end)::integer] then
    perform asyncflow.pipeline_error(format('node %L: the end node can never be reached', v_end));
  end if;
  for v_k in 1 .. v_n loop
    if not v_seen[v_k] then
      v_pruned := v_pruned || jsonb_build_object('node', v_order[v_k], 'why', 'reachable only through pruned edges');
    end if;
  end loop;
  -- in and out of the nodes kept: their live edges from kept nodes, in definition order
  select jsonb_object_agg(x.k, x.v || jsonb_build_object('in', coalesce(i.edges, '[]'), 'out', coalesce(o.edges, '[]'),
    'in_degree', coalesce(jsonb_array_length(i.edges), 0))) into v_nodes
  from unnest(v_order, v_defs) with ordinality x(k, v, n)
  left join (select f, jsonb_agg(jsonb_build_object('to', t, 'when', w) order by e) as edges
             from unnest(v_from, v_to, v_when, v_fi) with ordinality u(f, t, w, fi, e)
             where v_live[e] and v_seen[fi] group by f) o on o.f = x.k
  left join (select t, jsonb_agg(to_jsonb(f) order by e) as edges
             from unnest(v_from, v_to, v_fi) with ordinality u(f, t, fi, e)
             where v_live[e] and v_seen[fi] group by t) i on i.t = x.k
  where v_seen[x.n];

  v_plan := jsonb_build_object('start', v_start, 'end', v_end,
    'timeout', coalesce((p_definition ->> 'timeout')::numeric, 86400),
    'retries', coalesce((p_definition ->> 'retries')::integer, 0),
    'nodes', v_nodes,
    'order', to_jsonb(array(select n from unnest(v_order) with ordinality u(n, k) where v_seen[k] order by k)),
    'pruned', v_pruned);

  -- The steps one call can run through the plan, within the stack (plan_steps).
  select * into v_plan, v_path from asyncflow.plan_steps(v_plan);
  if (v_plan ->> 'steps')::integer > asyncflow.plan_step_limit() then
    perform asyncflow.pipeline_error(format('node %L: reaching it can take %s steps in one call (%s), more than the limit '
      'of %s: the engine runs the nodes that complete at once (3 steps each; a sub-pipeline 5 plus its own) and skips a '
      'branch a router does not take (1 step a node) by recursion, within PostgreSQL''s stack',
      v_path[cardinality(v_path)], v_plan ->> 'steps',
      array_to_string(case when cardinality(v_path) > 7
        then v_path[1:3] || '...'::text || v_path[cardinality(v_path) - 2:] else v_path end, ' -> '),
      asyncflow.plan_step_limit()));
  end if;
  return v_plan;
end
$_$;

create or replace function asyncflow.pipeline_json(p asyncflow.pipelines) returns jsonb
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
create or replace function asyncflow.put_pipeline(name text, definition jsonb, status text default 'active')
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
  -- what is stored must read back (a description holding 1e400 would break GET of the pipeline)
  perform asyncflow.check_json(p_definition, 'definition');
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

create or replace function asyncflow.set_pipeline_status(name text, version integer, status text) returns asyncflow.pipelines
    language plpgsql security definer
    set search_path to 'pg_catalog', 'pg_temp'
    as $_$
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
    -- through raise_error, which cuts a long name
    perform asyncflow.raise_error('AF011', format('unknown pipeline %L version %s', p_name, p_version));
  end if;
  return v_row;
end
$_$;

-- get_pipeline: one version (default: the active one, else the latest) as JSON, or null.
create or replace function asyncflow.get_pipeline(name text, version integer default null) returns jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select asyncflow.pipeline_json(p) from asyncflow.pipelines p
  where p.name = $1 and ($2 is null or p.version = $2)
  order by (p.status = 'active') desc, p.version desc limit 1
$$;

-- list_pipelines: every pipeline's versions, newest first, without definitions and plans.
create or replace function asyncflow.list_pipelines() returns setof jsonb
language sql stable security definer set search_path = pg_catalog, pg_temp as $$
  select jsonb_build_object('name', p.name, 'version', p.version, 'status', p.status,
    'nodes', jsonb_array_length(p.plan -> 'order'), 'created_at', p.created_at, 'updated_at', p.updated_at)
  from asyncflow.pipelines p order by p.name, p.version desc
$$;

-- The edges of a graph grouped by one of their ends: p_ends[i] is edge i's end (its from node
-- for out-edges, its to node for in-edges) as a node number 1..p_nodes. Node k's edges are
-- edges[at[k]] .. edges[at[k + 1] - 1], in definition order.
create or replace function asyncflow.graph_index(p_ends integer[], p_nodes integer, out edges integer[], out at integer[])
language sql immutable parallel safe as $$
  select array(select i::integer from unnest(p_ends) with ordinality u(k, i) order by k, i),
    array(select (1 + coalesce(sum(c) over (order by k rows between unbounded preceding and 1 preceding), 0))::integer
          from (select k, count(u.e) as c from generate_series(1, p_nodes + 1) k
                left join unnest(p_ends) u(e) on u.e = k group by k) x
          order by k)
$$;

-- The nodes reached from p_root along the edges of graph_index (p_at, p_edges), p_far[i] being
-- edge i's other end; only the edges with p_live[i] when p_live is given. One flag per node.
create or replace function asyncflow.graph_reach(p_root integer, p_nodes integer, p_at integer[], p_edges integer[],
  p_far integer[], p_live boolean[] default null) returns boolean[]
language plpgsql immutable parallel safe as $$
declare
  v_seen boolean[] := array_fill(false, array[p_nodes]);
  v_queue integer[] := array[p_root];
  v_head integer := 1;
  v_k integer;
  v_j integer;
  v_t integer;
begin
  v_seen[p_root] := true;
  while v_head <= cardinality(v_queue) loop
    v_k := v_queue[v_head];
    v_head := v_head + 1;
    for v_j in p_at[v_k] .. p_at[v_k + 1] - 1 loop
      continue when p_live is not null and not p_live[p_edges[v_j]];
      v_t := p_far[p_edges[v_j]];
      if not v_seen[v_t] then
        v_seen[v_t] := true;
        v_queue := v_queue || v_t;
      end if;
    end loop;
  end loop;
  return v_seen;
end
$$;

-- The most steps one call may run through a plan (see plan_steps).
create or replace function asyncflow.plan_step_limit() returns integer
language sql immutable parallel safe as $$ select 300 $$;

-- A plan with its steps: the most one call can run through it, by the recursion of wf_activate,
-- wf_complete_event and wf_arrive (plan.steps), and for each sub-pipeline node the steps its
-- pipeline adds around the child's own (steps_around: the longest chain to it, its own 5, the
-- longest chain on after it). A node that may complete at once counts 3; a task or callback node
-- counts 1, and unless a router's choice may skip it, it cuts the chain: what follows it runs in
-- the call that ends its task. A sub-pipeline node counts 5 plus the steps of the version it
-- would start now (none when there is none: wf_activate checks the version it does start).
-- path: the nodes of the longest chain.
--
-- A node is skippable only when it is neither start, nor the target of a live node that is not
-- a router, nor a post-dominator of a live node. Counting every node below a router as
-- skippable would let task nodes that always run (after a join of all of a router's branches)
-- carry the chain on, and refuse valid pipelines of about 300 such task nodes with AF010 for
-- steps that can never run in one call.
create or replace function asyncflow.plan_steps(p_plan jsonb, out plan jsonb, out path text[])
language plpgsql stable as $$
declare
  v_names text[] := array(select jsonb_array_elements_text(p_plan -> 'order'));
  v_n integer := cardinality(v_names);
  v_types text[];
  v_weight integer[];
  v_fi integer[];
  v_ti integer[];
  v_out integer[];
  v_out_at integer[];
  v_in integer[];
  v_in_at integer[];
  v_count integer[];
  v_topo integer[];
  v_head integer := 1;
  v_k integer;
  v_j integer;
  v_i integer;
  -- per node: may a router's choice skip it; does the call go on from it; the steps of the
  -- longest chain before it, and through it; the node before it on that chain; the steps of the
  -- longest chain after it
  v_skippable boolean[];
  v_carries boolean[];
  v_before integer[];
  v_through integer[];
  v_prev integer[];
  v_after integer[];
  v_last integer := 1;
  v_around jsonb := '{}';
  -- per node: its place in v_topo; its immediate post-dominator (the first node every path
  -- from it to the end passes); whether the call that reaches it live always reaches it live
  v_pos integer[];
  v_ipdom integer[];
  v_a integer;
  v_d integer;
  v_live boolean[];
begin
  select array_agg(d ->> 'type' order by k),
    array_agg(case when d ->> 'type' in ('task', 'callback') then 1
      when d ->> 'type' = 'pipeline' then 5 + coalesce((select (p.plan ->> 'steps')::integer from asyncflow.pipelines p
        where p.name = d ->> 'pipeline' and case when d ->> 'version' is null then p.status = 'active'
          else p.version = (d ->> 'version')::numeric end), 0)
      else 3 end order by k)
  into v_types, v_weight
  from unnest(v_names) with ordinality u(n, k), jsonb_extract_path(p_plan, 'nodes', n) d;
  select coalesce(array_agg(f.k::integer order by f.k, e.o), '{}'), coalesce(array_agg(t.k::integer order by f.k, e.o), '{}')
  into v_fi, v_ti
  from unnest(v_names) with ordinality f(n, k)
  cross join lateral jsonb_array_elements(p_plan -> 'nodes' -> f.n -> 'out') with ordinality e(edge, o)
  join unnest(v_names) with ordinality t(n, k) on t.n = e.edge ->> 'to';
  select * into v_out, v_out_at from asyncflow.graph_index(v_fi, v_n);
  select * into v_in, v_in_at from asyncflow.graph_index(v_ti, v_n);

  -- topological order (Kahn; the plan has no cycle)
  v_count := array(select v_in_at[k + 1] - v_in_at[k] from generate_series(1, v_n) k);
  v_topo := array(select k from generate_series(1, v_n) k where v_count[k] = 0);
  while v_head <= cardinality(v_topo) loop
    v_k := v_topo[v_head];
    v_head := v_head + 1;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      v_count[v_i] := v_count[v_i] - 1;
      if v_count[v_i] = 0 then
        v_topo := v_topo || v_i;
      end if;
    end loop;
  end loop;

  -- Which nodes a router's choice may skip. A node is skipped only when every in-edge is dead
  -- (wf_arrive), so a node below a router is not skippable when it has a live in-edge whatever
  -- the routers choose: a join of all of a router's branches, or one fed by a node no router can
  -- skip (counted as skippable, its task nodes would carry the chain on, and a valid pipeline of
  -- about 300 task nodes after such a join would be refused, its parents counting its steps).
  -- A node cannot be skipped (is live) when it is start, when a live node that is not a router
  -- has an edge to it (every such edge is taken), or when it post-dominates a live node (from a
  -- live node some branch is always taken, on to the end, and every branch passes it).
  v_pos := array_fill(0, array[v_n]);
  for v_head in 1 .. cardinality(v_topo) loop
    v_pos[v_topo[v_head]] := v_head;
  end loop;
  -- immediate post-dominators, from the end back (Cooper, Harvey and Kennedy's intersection; in a
  -- DAG whose every node reaches the end, which is last in v_topo, one pass suffices)
  v_ipdom := array_fill(null::integer, array[v_n]);
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    v_d := null;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_a := v_ti[v_out[v_j]];
      if v_d is null then
        v_d := v_a;
        continue;
      end if;
      while v_a <> v_d loop
        while v_pos[v_a] < v_pos[v_d] loop
          v_a := v_ipdom[v_a];
        end loop;
        while v_pos[v_d] < v_pos[v_a] loop
          v_d := v_ipdom[v_d];
        end loop;
      end loop;
    end loop;
    v_ipdom[v_k] := v_d;
  end loop;
  v_live := array_fill(false, array[v_n]);
  if v_n > 0 then
    v_live[v_topo[1]] := true;
  end if;
  foreach v_k in array v_topo loop
    continue when not v_live[v_k];
    if v_types[v_k] <> 'router' then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_live[v_ti[v_out[v_j]]] := true;
      end loop;
    end if;
    -- a node already live walks its own post-dominators when its turn comes
    v_i := v_ipdom[v_k];
    while v_i is not null and not v_live[v_i] loop
      v_live[v_i] := true;
      v_i := v_ipdom[v_i];
    end loop;
  end loop;

  v_skippable := array(select not v_live[k] from generate_series(1, v_n) k);
  v_carries := array_fill(false, array[v_n]);
  v_before := array_fill(0, array[v_n]);
  v_through := array_fill(0, array[v_n]);
  v_prev := array_fill(null::integer, array[v_n]);
  v_after := array_fill(0, array[v_n]);
  foreach v_k in array v_topo loop
    v_through[v_k] := v_before[v_k] + v_weight[v_k];
    v_carries[v_k] := v_types[v_k] not in ('task', 'callback') or v_skippable[v_k];
    if v_through[v_k] > v_through[v_last] then
      v_last := v_k;
    end if;
    for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
      v_i := v_ti[v_out[v_j]];
      if v_carries[v_k] and v_through[v_k] > v_before[v_i] then
        v_before[v_i] := v_through[v_k];
        v_prev[v_i] := v_k;
      end if;
    end loop;
  end loop;
  for v_head in reverse cardinality(v_topo) .. 1 loop
    v_k := v_topo[v_head];
    if v_carries[v_k] then
      for v_j in v_out_at[v_k] .. v_out_at[v_k + 1] - 1 loop
        v_i := v_ti[v_out[v_j]];
        v_after[v_k] := greatest(v_after[v_k], v_weight[v_i] + v_after[v_i]);
      end loop;
    end if;
    if v_types[v_k] = 'pipeline' then
      v_around := v_around || jsonb_build_object(v_names[v_k], v_before[v_k] + 5 + v_after[v_k]);
    end if;
  end loop;

  path := '{}';
  v_k := v_last;
  while v_k is not null loop
    path := v_names[v_k] || path;
    v_k := v_prev[v_k];
  end loop;
  plan := p_plan || jsonb_build_object('steps', v_through[v_last],
    'nodes', (select jsonb_object_agg(x.n, case when v_around ? x.n
      then x.d || jsonb_build_object('steps_around', v_around -> x.n) else x.d end)
      from jsonb_each(p_plan -> 'nodes') x(n, d)));
end
$$;
