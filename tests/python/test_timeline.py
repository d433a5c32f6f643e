"""tutti.torch.start_timeline / stop_timeline (docs/timeline.md) under tuttirun:
every rank writes its own Chrome-trace file; rank 0's has a "ready" mark per
rank for every tensor."""

import json
import os
import shutil
import tempfile

import pytest
import torch

import tutti.torch as hvd


def _spans(events, tid):
    spans = [e for e in events if e.get("ph") == "X" and e.get("tid") == tid]
    return sorted(spans, key=lambda e: e["ts"])


def test_start_stop_timeline_writes_a_trace_per_rank():
    r, s = hvd.rank(), hvd.size()
    # One directory for the job: rank 0 makes it, every rank learns its name.
    base_dir = hvd.broadcast_object(tempfile.mkdtemp(prefix="tutti_tl_") if r == 0 else None,
                                    root_rank=0, name="tl.dir")
    path = os.path.join(base_dir, "timeline.json")
    hvd.start_timeline(path, mark_cycles=True)
    with pytest.raises(hvd.InvalidArgumentError):
        hvd.start_timeline(path)  # already recording
    hvd.barrier()  # rank 0 records the requests of every rank from here on
    steps = 3
    for _ in range(steps):
        assert torch.equal(hvd.allreduce(torch.ones(8), op=hvd.Sum, name="tl.a"),
                           torch.full((8,), float(s)))
        hvd.grouped_allreduce([torch.ones(4), torch.ones(5)], op=hvd.Sum, name="tl.g")
    hvd.stop_timeline()
    hvd.stop_timeline()  # idempotent

    mine = os.path.join(base_dir, "timeline.rank%d.json" % r)
    with open(mine) as f:
        events = json.load(f)  # stopped: complete JSON
    tids = {e["args"]["name"]: e["tid"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert {"tl.a", "tl.g.0", "tl.g.1", "cycles"} <= set(tids)
    names = [e["name"] for e in _spans(events, tids["tl.a"])]
    assert names == ["NEGOTIATE", "QUEUE", "ALLREDUCE"] * steps
    fused = [e for e in _spans(events, tids["tl.g.1"]) if e["name"] == "ALLREDUCE"]
    assert len(fused) == steps
    assert all(e["args"]["tensors"] == 2 and e["args"]["bytes"] == 36 for e in fused)
    marks = [e for e in events if e.get("ph") == "i" and e.get("tid") == tids["tl.a"]]
    if r == 0:
        assert sorted(m["args"]["rank"] for m in marks) == sorted(list(range(s)) * steps)
    else:
        assert marks == []
    hvd.barrier()
    if r == 0:
        shutil.rmtree(base_dir, ignore_errors=True)


def test_start_timeline_errors():
    with pytest.raises(hvd.InvalidArgumentError):
        hvd.start_timeline("")
    with pytest.raises(hvd.TuttiIOError):
        hvd.start_timeline("/nonexistent-dir/for/tutti/timeline.json")


def test_start_timeline_on_a_directory_is_an_error_naming_it():
    d = tempfile.mkdtemp(prefix="tutti-tl-dir-")
    try:
        with pytest.raises(hvd.InvalidArgumentError) as info:
            hvd.start_timeline(d)
        assert ("'%s' is a directory; give a file path such as '%s/timeline.json'" % (d, d)
                in str(info.value)), str(info.value)
        assert os.listdir(d) == [] and not os.path.exists(d + ".rank%d" % hvd.rank())
    finally:
        shutil.rmtree(d)
