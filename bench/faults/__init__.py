"""Faults under load: kill -9 each tier in turn, restart Redis, cut a gateway's link.

    python -m bench.faults --sessions 50

The cluster (synthetic stages, real processes): Redis with AOF, two stage0
and two stage1 workers, two session replicas (A, B) and two gateways. Gateway 1
talks to the replicas directly; gateway 2 through a `TcpProxy` per replica,
so its link to the session tier can be cut with both ends up. Half the
sessions open on each gateway; each runs manual-lane turns of the load
client (`antiphon.client.load`: paced 200 ms appends, a commit,
`response.create`, to `response.done`) until the run ends. A socket that
dies is resumed inside the client (`DuplexClient`: `session.resume` with the
last seq it holds) on the other gateway.

The faults, one after another, each once the previous one has healed:
`none` (the control: what "recovered" costs without a fault), kill -9 of
gateway 1 (its clients resume on gateway 2 with `session.resume`, as a
client of a dead gateway must), of the replica owning most sessions (the
gateways resume them on the other), of the stage0 and the stage1 worker
bound to most sessions (the next turn binds to the other), a Redis restart,
and a cut of gateway 2's link to every replica for `--cut-s` seconds
(dropped, then refused). A killed process is restarted after its fault.

Counted over every socket a session had, by `server_event_seq` (every
journaled event carries the next one; a resume asks for what follows the
last one received):

- `lost`: a seq below the highest one received that never arrived, or a
  `session.resync_required` (the journal could not fill a resume);
- `repeated`: a seq received twice (`conflicting`: with another event_id);
- `stuck`: a `response.created` whose `response.done` never came.

All three must be 0. Time to recovery: from the fault to each session's
first `completed` response after it (max and p50 over sessions; the control
shows what a healthy turn takes). Results go to `bench/results/faults.json`.
"""
