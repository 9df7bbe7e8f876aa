-- The W3C trace context of a task's enqueue (a `traceparent` header value,
-- 00-<trace id>-<parent id>-<flags>), checked by create_task and create_tasks; null when the
-- caller gave none. Claims hand it to the worker, which continues the trace.
alter table asyncflow.tasks add column traceparent text;

-- What a claim returns carries it too. held_task keeps held last (a hold that falls back to a
-- claim answers the claim's columns followed by held = false).
alter type asyncflow.claimed_task add attribute traceparent text;
alter type asyncflow.held_task drop attribute held, add attribute traceparent text, add attribute held boolean;

-- create_task and create_task_general take traceparent: the signatures without it go
drop function if exists asyncflow.create_task(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text, text, integer);
drop function if exists asyncflow.create_task_general(text, jsonb, integer, timestamptz, text, text, text, timestamptz, text, text, integer);
