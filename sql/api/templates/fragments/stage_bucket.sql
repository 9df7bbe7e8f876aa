-- The stage-time histogram's bucket of a call of {{$secs}} seconds: how many bounds lie below it
-- (0 .. cardinality(bounds)). width_bucket counts the bounds <= secs (a binary search, in C),
-- less one when secs is a bound itself (a bucket includes its upper bound, as Prometheus' "le").
width_bucket({{$secs}}, asyncflow.stage_time_bounds()) - ({{$secs}} = any (asyncflow.stage_time_bounds()))::integer
