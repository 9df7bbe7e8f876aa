-- Children that ended count on their parents' joins (sql/api/46_children.sql): one row update per
-- parent, whatever the number of its children ending here. After the CTE {{$rows}} (parent_id and
-- what {{$ended}} reads, as `c`: the rows written); {{$ended}} says which of them ended (a report
-- or finish: succeeded or failed; a claim: a context no worker could read failed the task).
--! rows = changed; ended = c.status in ('succeeded', 'failed')
child_ends as (
    update asyncflow.joins j set ended = j.ended + x.n
    -- the ids as a column, not a subquery in join_counts' argument: that kept the function from
    -- being inlined, and its query was planned again at every statement (about 0.3 ms each)
    from (select array(select c.parent_id from {{$rows}} c where {{$ended}}) as ids) a
      cross join lateral asyncflow.join_counts(a.ids) x
    where j.task_type = x.task_type and j.shard = x.shard and j.id = x.id
  )
