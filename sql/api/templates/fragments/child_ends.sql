-- Children that ended count on their parents' joins (sql/api/46_children.sql): one row update per
-- parent, whatever the number of its children ending here. After the CTE {{$rows}} (parent_id and
-- what {{$ended}} reads, as `c`: the rows written); {{$ended}} says which of them ended (a report
-- or finish: succeeded or failed; a claim: a context no worker could read failed the task).
--! rows = changed; ended = c.status in ('succeeded', 'failed')
child_ends as (
    update asyncflow.joins j set ended = j.ended + x.n
    from asyncflow.join_counts(array(select c.parent_id from {{$rows}} c where {{$ended}})) x
    where j.task_type = x.task_type and j.shard = x.shard and j.id = x.id
  )
