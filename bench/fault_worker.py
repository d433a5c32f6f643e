"""One rank of bench/fault_matrix. Prints (flushed, one line each):

    ready rank R pid P              after init
    running rank R                  after its third allreduce
    error rank R at T: MESSAGE      a tutti call raised, or Ctrl-C (SIGINT) arrived
                                    (T: time.time()); exit 1 (130) at once
    done rank R                     finished (cooperative stop); exit 0

Loops allreduces (average) of --elements float32 until --stop-file exists on
some rank (checked every step with a max-allreduce, so every rank stops at the
same step), then shuts down. --early-exit-rank R: that rank leaves with exit
code 0 at step 20 without shutting down. --bad-setting-rank R: that rank sets
TUTTI_FUSION_THRESHOLD_BYTES=-1 before init. --compute-seconds S: each step
first sleeps S s (a training step's compute: with a small --elements the
ranks are then almost always between collectives). --marker is only there to find
the job's processes by their command line. TUTTI_FAULT_ORDERED=1: the
allreduces go through tutti's ordered lane (as torch.distributed's do).
"""
import argparse
import contextlib
import os
import time


def env_rank():
    for name in ("TUTTI_RANK", "OMPI_COMM_WORLD_RANK"):
        if name in os.environ:
            return int(os.environ[name])
    return -1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 22)
    ap.add_argument("--stop-file", default="")
    ap.add_argument("--early-exit-rank", type=int, default=-1)
    ap.add_argument("--bad-setting-rank", type=int, default=-1)
    ap.add_argument("--compute-seconds", type=float, default=0)
    ap.add_argument("--marker", default="")
    args = ap.parse_args()
    if env_rank() == args.bad_setting_rank:
        os.environ["TUTTI_FUSION_THRESHOLD_BYTES"] = "-1"
    import torch
    import tutti.torch as hvd
    from tutti.torch import _core
    torch.set_num_threads(1)
    lane = (_core.ordered_lane if os.environ.get("TUTTI_FAULT_ORDERED") == "1"
            else contextlib.nullcontext)
    rank = env_rank()
    try:
        hvd.init()
        rank = hvd.rank()
        print("ready rank %d pid %d" % (rank, os.getpid()), flush=True)
        t = torch.ones(args.elements)
        step = 0
        while True:
            time.sleep(args.compute_seconds)
            with lane():
                hvd.allreduce_(t, name="grad", op=hvd.Average)
            step += 1
            if step == 3:
                print("running rank %d" % rank, flush=True)
            if rank == args.early_exit_rank and step == 20:
                os._exit(0)
            stop = float(bool(args.stop_file) and os.path.exists(args.stop_file))
            with lane():
                stopped = hvd.allreduce(torch.tensor([stop]), name="stop", op=hvd.Max).item()
            if stopped > 0:
                break
        hvd.shutdown()
        print("done rank %d" % rank, flush=True)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - every tutti error, and Ctrl-C
        msg = " ".join(str(e).split())[:240]
        print("error rank %d at %.3f: %s: %s" % (rank, time.time(), type(e).__name__, msg),
              flush=True)
        # Not sys.exit: the interpreter's teardown with torch loaded takes 2-5 s
        # on a loaded 2-core machine (also without tutti), which would hide
        # what tutti does. tutti is shut down already (the error closed it).
        os._exit(130 if isinstance(e, KeyboardInterrupt) else 1)


if __name__ == "__main__":
    main()
