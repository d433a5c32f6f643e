"""One rank of the job whose traffic tests/fuzz/record_seeds.py records.

Run by tuttirun. Before loading tutti it points the rank at the recording
proxy (RECORD_PROXY_PORT) instead of tuttirun's rendezvous server, after
writing the server's real port to RECORD_DIR/target_port for the proxy.
Then it runs every collective kind a few times (RECORD_STEPS, default 3:
fusion, the response cache, errors, an alltoall with splits) so that the
control messages cover them.
"""
import os

record_dir = os.environ["RECORD_DIR"]
real_port = os.environ["TUTTI_RENDEZVOUS_PORT"]
tmp = os.path.join(record_dir, "target_port.%d" % os.getpid())
with open(tmp, "w") as f:
    f.write(real_port)
os.replace(tmp, os.path.join(record_dir, "target_port"))
os.environ["TUTTI_RENDEZVOUS_PORT"] = os.environ["RECORD_PROXY_PORT"]

import torch  # noqa: E402
import tutti.torch as hvd  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
for step in range(int(os.environ.get("RECORD_STEPS", "3"))):
    # zeros compress well: zstd frames on the wire when the level is set
    grads = [torch.zeros(5000) + (rank if i % 2 else 0) for i in range(4)]
    handles = [hvd.allreduce_async(g, name="grad.%d" % i, op=hvd.Sum) for i, g in enumerate(grads)]
    for h in handles:
        hvd.synchronize(h)
    hvd.allreduce(torch.ones(3), name="avg", op=hvd.Average, prescale_factor=0.5)
    hvd.grouped_allreduce([torch.ones(2), torch.ones(3)], name="group")
    hvd.allgather(torch.ones(rank + 1, 2), name="gather")
    hvd.broadcast(torch.arange(4.0), root_rank=size - 1, name="bcast")
    splits = torch.tensor([1] * size)
    hvd.alltoall(torch.arange(float(size)), splits=splits, name="a2a")
    hvd.reducescatter(torch.ones(size * 2), name="rs")
    hvd.allreduce(torch.ones(4), name="fp16", compression=hvd.Compression.fp16)
    hvd.barrier()
try:
    # rank 1 disagrees on the shape: an error response for every rank
    hvd.allreduce(torch.ones(2 + (rank == 1)), name="mismatch")
except Exception:
    pass
hvd.join()
hvd.shutdown()
