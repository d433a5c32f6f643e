#!/usr/bin/python3
"""A small elastic training job for the multi-host tests (tests/elastic/elastic_tests.py).

A linear model on synthetic data, trained with tutti.torch.elastic: TorchState
holds the model, the optimizer and the step counter; every --commit-every
steps it commits. Lines the tests parse (one per event, flushed):

    STEP wid=<worker id> gen=<g> rank=<r> size=<n> step=<s> t=<unix time>
    COMMIT wid=<id> gen=<g> rank=<r> size=<n> step=<s>
    RESET wid=<id> gen=<g> rank=<r> size=<n> step=<s>      (after a membership change)
    DONE wid=<id> gen=<g> rank=<r> size=<n> step=<s> checksum=<hex>

Usage (under tuttirun's elastic mode): elastic_worker.py --steps 200 --commit-every 5
"""
import argparse
import hashlib
import os
import time

import torch
import torch.nn as nn

import tutti
import tutti.torch as hvd


def checksum(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().double().numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--commit-every", type=int, default=5)
    ap.add_argument("--step-sleep", type=float, default=0.05,
                    help="seconds of 'compute' per step, so faults land mid-run")
    args = ap.parse_args()

    wid = os.environ.get("TUTTI_ELASTIC_WORKER_ID", "?")
    hvd.init()
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    def where():
        return "wid=%s gen=%d rank=%d size=%d step=%d" % (
            wid, tutti.elastic.generation(), hvd.rank(), hvd.size(), state.step)

    state.register_reset_callbacks([lambda: print("RESET " + where(), flush=True)])

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            g = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
            x = torch.randn(16, 64, generator=g)
            y = torch.randint(0, 4, (16,), generator=g)
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            state.step += 1
            print("STEP %s t=%.3f" % (where(), time.time()), flush=True)
            if state.step % args.commit_every == 0:
                state.commit()
                print("COMMIT " + where(), flush=True)
            time.sleep(args.step_sleep)

    train(state)
    print("DONE %s checksum=%s" % (where(), checksum(model)), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
