-- claim_seq, the fencing token, becomes bigint: a claim sets it to the greater of its old value
-- + 1 and the clock in microseconds since 1970 (asyncflow.next_claim_seq), so a claim lost in a
-- crash (claims commit asynchronously) is never handed out again with the same token.
-- Rewrites every task shard once.
alter table asyncflow.tasks alter column claim_seq type bigint;
alter type asyncflow.claimed_task alter attribute claim_seq type bigint;
alter type asyncflow.held_task alter attribute claim_seq type bigint;

-- The functions whose signature or answer names claim_seq as an integer: dropped here, made
-- again with bigint by `asyncflow migrate` from sql/api/ (and, for each type's own report and
-- finish, from sql/api/templates/) in the same run.
do $$
declare
  v_function regprocedure;
begin
  for v_function in
    select p.oid::regprocedure from pg_catalog.pg_proc p
    where p.pronamespace = 'asyncflow'::regnamespace
      and (p.proname in ('held_tasks', 'report_task_arrays', 'check_report_arrays')
           or p.proname like 'type\_report\_\_%' or p.proname like 'type\_finish\_\_%')
  loop
    execute format('drop function %s', v_function);
  end loop;
end
$$;
