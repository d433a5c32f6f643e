"""Elastic training for PyTorch (Horovod's horovod.torch.elastic; docs/elastic.md).

    import tutti.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        ...                      # steps; state.commit() every few steps

    train(state)

run(func) calls state.sync() and func(state); when a peer is lost it restores
the last commit, leaves the generation, joins the next one and continues with
the new rank and size; when hosts are added or removed (seen at a commit) it
does the same without restoring. Collectives must not run at import or
before run(): a newcomer's first collectives are the ones of state.sync().

Thread-safety: one training thread runs func; no other thread may issue
collectives while run() moves to a new generation.
"""

import warnings

from tutti import elastic as _elastic
from tutti.basics import shutdown  # noqa: F401 (Horovod's elastic module has init, shutdown)
from tutti.elastic import ObjectState, State, run_fn  # noqa: F401
from tutti.errors import HostsUpdatedInterrupt, TuttiIOError, WaitTimeoutError
from tutti.torch import _handles
from tutti.torch._init import init  # noqa: F401 (Horovod's elastic module has init, shutdown)
from tutti.torch.elastic.sampler import ElasticSampler
from tutti.torch.elastic.state import TorchState


def run(func):
    """Decorator: runs func(state, *args, **kwargs) elastically (see module doc).

    The first argument of func must be a tutti.elastic.State (a TorchState).
    Returns func's result. Raises what func raises except PeerLostError (in
    an elastic job) and HostsUpdatedInterrupt; ShutdownError with the driver's
    message when the job cannot go on (below --min-np, reset limit).
    """
    return _elastic.run_fn(func, _reset)


def _reset():
    """Moves this worker to the next generation: leave, forget the Python
    side of the ops in flight (their C handles died with the runtime), join.
    A leave whose report did not reach the driver's store (timeout, I/O
    error) has shut the runtime down all the same: warn and join; exiting
    here would get this survivor's host blacklisted."""
    try:
        _elastic.leave()
    except (WaitTimeoutError, TuttiIOError) as e:
        # stacklevel 1: the warning is about the job, not the caller's line.
        warnings.warn("tutti.elastic: leaving generation: %s; joining the next one anyway" % e,
                      stacklevel=1)
    _handles.forget_all()
    _elastic.join()


__all__ = ["ElasticSampler", "HostsUpdatedInterrupt", "ObjectState", "State", "TorchState", "run"]
