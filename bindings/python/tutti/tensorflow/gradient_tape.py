"""DistributedGradientTape and PartialDistributedGradientTape, and the
gradient allreduce they share with the Keras DistributedOptimizer (Horovod's
horovod/tensorflow/__init__.py, 0.28.1: _make_allreduce_grads_fn).

Gradients are averaged (op=Average) over the process set by one allreduce
op each, or by grouped allreduces with groups=; op=Average with
gradient_predivide_factor f scales by 1/f before the sum and f/size after
it. sparse_as_dense turns IndexedSlices gradients into dense tensors first;
otherwise they are allgathered. On a one-rank set (or a set this rank is not
in) the gradients are returned as they are. Eagerly, the allreduces run
inside one tf.function, so that they are enqueued together and fused.

Local sources (register_local_source, or PartialDistributedGradientTape's
local_layers) are not reduced; with scale_local_gradients their gradients
are divided by the set's size, as Horovod's.
"""

from typing import Any, Dict

import tensorflow as tf

from tutti import process_sets as _process_sets
from tutti.process_sets import global_process_set
from tutti.tensorflow import collectives
from tutti.tensorflow.compression import Compression
from tutti.tensorflow.mpi_ops import Average

_cache: Dict[Any, Any] = {}


def _key(var):
    """A hashable identity for a variable (tf.Variable.ref(), or the object)."""
    return var.ref() if hasattr(var, "ref") else id(var)


def split_list(items, n):
    """`items` cut into n consecutive parts of sizes differing by at most one
    (Horovod's horovod.common.util.split_list)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def var_name(var):
    """A variable's unique name: a Keras 3 variable's path ("dense/kernel";
    its name is only "kernel"), else tf.Variable.name (for an eager tensor
    watched as a source, which has none, its id)."""
    path = getattr(var, "path", None)
    if path:
        return path
    try:
        return var.name
    except AttributeError:
        return "source_%d" % id(var)


def _grad_groups(grads, names, groups):
    """[(index, grad)] lists: by groups of variable names (each variable not
    in one is a group of its own) or `groups` parts."""
    if isinstance(groups, tuple):
        by_name = {n: (i, g) for i, (n, g) in enumerate(zip(names, grads)) if g is not None}
        split = []
        for group in groups:
            members = [by_name.pop(n) for n in group if n in by_name]
            if members:
                split.append(members)
        return split + [[member] for member in by_name.values()]
    present = [(i, g) for i, g in enumerate(grads) if g is not None]
    return [part for part in split_list(present, groups) if part]


def make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                            gradient_predivide_factor, groups, process_set):
    """fn(grads, names, use_generic_names=False) -> reduced grads (None stays
    None); names: the variables' var_name(), used by groups of variables."""
    if isinstance(groups, list):
        groups = tuple(tuple(var_name(v) for v in group) for group in groups)
    if op == Average:
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    kwargs = dict(device_dense=device_dense, device_sparse=device_sparse, compression=compression,
                  op=op, prescale_factor=prescale, postscale_factor=postscale,
                  process_set=process_set)
    skip = not process_set.included() or _process_sets.set_size(process_set) == 1

    def allreduce_grads(grads, names=None, use_generic_names=False):
        if skip:
            return list(grads)
        with tf.name_scope(name + "_Allreduce"):
            if sparse_as_dense:
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                         for g in grads]
            if groups is not None:
                out = [None] * len(grads)
                for k, members in enumerate(_grad_groups(grads, names, groups)):
                    reduced = collectives.grouped_allreduce(
                        [g for _, g in members], ignore_name_scope=use_generic_names,
                        name="grad_%d" % k if use_generic_names else None, **kwargs)
                    for (i, _), r in zip(members, reduced):
                        out[i] = r
                return out
            return [collectives.allreduce(g, ignore_name_scope=use_generic_names,
                                          name="grad_%d" % i if use_generic_names else None,
                                          **kwargs) if g is not None else None
                    for i, g in enumerate(grads)]

    if tf.executing_eagerly():
        return tf.function(allreduce_grads)
    return allreduce_grads


def allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                       gradient_predivide_factor, groups, process_set):
    """make_allreduce_grads_fn, cached per arguments (Horovod's _cache), so that
    eager tf.functions are traced once per gradient signature."""
    groups_key = (tuple(tuple(var_name(v) for v in g) for g in groups)
                  if isinstance(groups, list) else groups)
    key = (name, device_dense, device_sparse, id(compression), sparse_as_dense, op,
           gradient_predivide_factor, groups_key, process_set.process_set_id,
           tf.executing_eagerly())
    fn = _cache.get(key)
    if fn is None:
        fn = make_allreduce_grads_fn(name, device_dense, device_sparse, compression,
                                     sparse_as_dense, op, gradient_predivide_factor, groups,
                                     process_set)
        _cache[key] = fn
    return fn


def check_groups(num_groups, groups):
    """Horovod's checks of num_groups (deprecated) and groups; returns groups."""
    if num_groups != 0:
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    return groups


def reduce_with_locals(allreduce_grads, grads, variables, local_keys, process_set,
                       scale_local_gradients, use_generic_names=False):
    """Reduces the gradients of the non-local variables; local ones are kept
    (divided by the set's size with scale_local_gradients). Input order."""
    grads = list(grads)
    reduce_idx = [i for i, v in enumerate(variables) if _key(v) not in local_keys]
    reduced = allreduce_grads([grads[i] for i in reduce_idx],
                              [var_name(variables[i]) for i in reduce_idx], use_generic_names)
    out = list(grads)
    for i, r in zip(reduce_idx, reduced):
        out[i] = r
    if scale_local_gradients and local_keys:
        n = _process_sets.set_size(process_set)
        for i, v in enumerate(variables):
            g = out[i]
            if _key(v) in local_keys and g is not None:
                if isinstance(g, tf.IndexedSlices):
                    out[i] = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
                else:
                    out[i] = g / n
    return out


class _DistributedGradientTape(tf.GradientTape):
    """The methods a DistributedGradientTape adds (mixed into the tape's class)."""

    def register_local_source(self, source):
        """Marks `source` as local to this rank: its gradient is not reduced."""
        self._local_sources.add(_key(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        single = not isinstance(sources, (list, tuple))
        srcs = [sources] if single else list(sources)
        grads = super(self._tutti_base, self).gradient(target, srcs, output_gradients)
        out = reduce_with_locals(self._allreduce_grads, grads, srcs, self._local_sources,
                                 self.process_set, self.scale_local_gradients, use_generic_names)
        return out[0] if single else out

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """([(source, grad)] of local sources, [(source, grad)] of the others)."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, grads):
            (local if _key(s) in self._local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """A tape like `gradtape` (after its `with` block) whose gradient()
    averages the gradients over the process set (Horovod's
    hvd.DistributedGradientTape). gradient_predivide_factor needs op=Average;
    groups: a number of groups, or lists of variables (grouped allreduces)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    groups = check_groups(num_groups, groups)
    base = gradtape.__class__
    cls = type(base.__name__, (base,), {
        k: v for k, v in _DistributedGradientTape.__dict__.items()
        if k not in ("__dict__", "__weakref__")})
    cls._tutti_base = cls
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)
    tape._allreduce_grads = allreduce_grads_fn(
        "DistributedGradientTape", device_dense, device_sparse, compression, sparse_as_dense, op,
        gradient_predivide_factor, groups, process_set)
    tape.process_set = process_set
    tape.scale_local_gradients = scale_local_gradients
    tape._local_sources = set()
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose local_layers' (Keras layers) trainable
    weights are local sources: not reduced."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    if not all(hasattr(layer, "trainable_weights") for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
