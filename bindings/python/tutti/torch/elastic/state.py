"""TorchState: the in-memory state of a PyTorch training loop for elastic jobs.

Each keyword argument of TorchState whose type has a handler (a module, an
optimizer, a learning-rate scheduler, an ElasticSampler) is saved, restored
and synced through its state_dict; every other value is a plain ObjectState
attribute. Handlers run in the order of the keyword arguments (the same on
every rank, since every rank runs the same code), model and optimizer last.
"""

import copy

import torch

from tutti import _library
from tutti.basics import is_initialized, rank
from tutti.elastic import ObjectState, compression_residuals, set_compression_residuals
from tutti.torch.elastic.sampler import ElasticSampler
from tutti.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)


class StateHandler:
    """Keeps one object's snapshot: a deep copy of its state_dict() in host memory."""

    def __init__(self, value):
        self.value = value
        self._saved = self._snapshot()

    def _snapshot(self):
        return copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved = self._snapshot()

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self, root):
        """Rank `root`'s value on every rank (collective), then a snapshot of it."""
        raise NotImplementedError()

    def reset(self):
        """After joining a new generation (rank and size changed)."""

    def set_value(self, value):
        self.value = value
        self._saved = self._snapshot()


class ModelStateHandler(StateHandler):
    """torch.nn.Module: parameters and buffers (state_dict), broadcast in place."""

    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)
        self.save()


class OptimizerStateHandler(StateHandler):
    """torch.optim.Optimizer (a DistributedOptimizer too): param_groups and
    per-parameter state. At a reset a DistributedOptimizer forgets its
    gradient allreduces still in flight (their handles died with the old
    generation)."""

    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)
        self.save()

    def reset(self):
        drop = getattr(self.value, "_drop_in_flight", None)
        if drop is not None:
            drop()


class LRSchedulerStateHandler(StateHandler):
    """A learning-rate scheduler (its state_dict is plain values)."""

    def sync(self, root):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root,
                                                    name="elastic.lr_scheduler"))
        self.save()


class SamplerStateHandler(StateHandler):
    """ElasticSampler. save() and sync() are collectives: they gather every
    rank's processed indices, so that the snapshot (and the live sampler)
    holds the whole job's progress in the epoch, not only this rank's."""

    def _gathered(self, root=0):
        # The root's epoch; the union of the processed indices of the ranks in
        # that epoch (a newcomer's fresh sampler adds nothing).
        states = allgather_object(self.value.state_dict(), name="elastic.sampler")
        epoch = states[root]["epoch"]
        processed = set().union(*(s["processed_indices"] for s in states if s["epoch"] == epoch))
        return {"epoch": epoch, "processed_indices": processed}

    def save(self):
        gathered = self._gathered()
        self.value.processed_indices = set(gathered["processed_indices"])
        self._saved = gathered

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self, root):
        gathered = self._gathered(root)
        self.value.load_state_dict(gathered)
        self._saved = copy.deepcopy(gathered)

    def reset(self):
        self.value.reset()


# torch 2.x's schedulers derive from LRScheduler (its _LRScheduler is a
# deprecated subclass of it that they no longer derive from); torch 1.x has
# _LRScheduler only.
_LR_SCHEDULER = getattr(torch.optim.lr_scheduler, "LRScheduler",
                        torch.optim.lr_scheduler._LRScheduler)

_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_LR_SCHEDULER, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    """The list of (type, handler class) pairs TorchState consults, first match wins."""
    return _handler_registry


def set_handler_registry(registry):
    """Replaces the registry (e.g. to add a handler for a custom type)."""
    global _handler_registry
    _handler_registry = registry


def _handler_for(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


class TorchState(ObjectState):
    """State of a PyTorch training process (Horovod's TorchState).

    model, optimizer and every keyword argument become attributes
    (``state.model``, ``state.epoch``). commit() = save() + the hosts-updated
    check; save() keeps deep copies of each state_dict (model parameters and
    buffers, optimizer state, scheduler, sampler progress gathered from every
    rank) and of the plain values in host memory; restore() loads them back
    (in place: the model and optimizer objects stay the same); sync()
    broadcasts the current values of the rank with the newest commit (rank 0
    unless a peer was lost mid-step, see State.sync_root) to every rank and
    snapshots them there.
    save() and sync() are collectives (call them on every rank at the same
    point); restore() is local. Assigning a handled attribute
    (``state.model = other``) snapshots the new object.

    Also saved: this rank's error-feedback residuals of top-k/int8
    compression (rank-local, never broadcast). The runtime of a new
    generation starts without them; reset() (after the join) puts the
    committed ones back, so a survivor keeps what it still owed its peers at
    the commit, and a newcomer starts from zeros.

    Thread-safety: none; one training loop drives it.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        object.__setattr__(self, "_handlers", handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(
            bcast_object=lambda obj, root_rank=0: broadcast_object(obj, root_rank,
                                                                   name="elastic.state"),
            get_rank=rank,
            allgather_object=lambda obj: allgather_object(obj, name="elastic.commits"),
            **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()
        if is_initialized() and _library.has_function("tutti_get_compression_residuals"):
            object.__setattr__(self, "_residuals", compression_residuals())

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        root = self.sync_root()
        for handler in self._handlers.values():
            handler.sync(root)
        self._sync_values(root)

    def reset(self):
        for handler in self._handlers.values():
            handler.reset()
        residuals = self.__dict__.get("_residuals")
        if residuals is not None:
            set_compression_residuals(residuals)

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)
