-- A type may ask for speculative chaining: a held call's next stage run at once by the same
-- worker, before the hold that writes the call's advance has committed. Off by default: a
-- stage's call then starts only from a committed, durable completion of the stage before
-- (docs/architecture.md, Guarantees). (if not exists: a test runs the migrations from V11 again)
alter table asyncflow.task_types add column if not exists speculative_chaining boolean not null default false;
