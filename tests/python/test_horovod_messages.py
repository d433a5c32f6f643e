"""The warning and exception texts of Horovod 0.28.1's horovod/torch/
optimizer.py, functions.py and mpi_ops.py (and the helpers they call) that
users and tests match on: tutti's message contains Horovod's sentence
(tutti may add detail after it). Each text is copied here from Horovod's
source; docs/horovod.md lists every one beside tutti's."""

import os
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tutti.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "horovod.md")

STEP_AFTER_SYNC = ("optimizer.step() called without optimizer.skip_synchronize() context after "
                   "optimizer.synchronize(). This can cause training slowdown. You may want to "
                   "consider using optimizer.skip_synchronize() context if you use "
                   "optimizer.synchronize() in your code.")
ZERO_GRAD = ("optimizer.zero_grad() was called after loss.backward() but before "
             "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
             "a race condition.")
TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before "
                   "call to step(). Increase backward_passes_per_step to accumulate gradients "
                   "locally.")
NOT_TUPLES = ("named_parameters should be a sequence of tuples (name, parameter), usually "
              "produced by model.named_parameters().")
DUPLICATES = "Parameter names in named_parameters must be unique. Found duplicates: "
UNNAMED = ("named_parameters was specified, but one or more model parameters were not named. "
           "Python object ids: ")
GROUPS = "groups should be a non-negative integer or a list of list of torch.Tensor."
GROUPS_TENSORS = "groups must consist of torch.Tensor."
GROUPS_ONCE = "A parameter can only appear once in groups."
PASSES = "backward_passes_per_step must be > 0"
PREDIVIDE = "gradient_predivide_factor not supported with op != Average"
NUM_GROUPS = ("Parameter `num_groups` has been replaced by `groups` and will be removed in "
              "v0.23.0.")
ADASUM_SKIP = "Skipping synchronization is not supported when using Adasum optimizer."
ADASUM_NON_POW2 = "Running Adasum with non-power of 2 ranks is not supported yet."
PARAMS_TYPE = "invalid params of type: "
LBFGS = "cannot broadcast torch.optim.LBFGS state"
TENSOR_TYPE = "Tensor type torch.ComplexFloatTensor is not supported."
SUPERSEDES = "The op parameter supersedes average. Please provide only one of them."
AVERAGE = "Parameter `average` has been replaced with `op` and will be removed in v1.0"
BN_DIM = "expected at least 2D input (got 1D input)"

TEXTS = [STEP_AFTER_SYNC, ZERO_GRAD, TOO_MANY_PASSES, NOT_TUPLES, DUPLICATES, UNNAMED, GROUPS,
         GROUPS_TENSORS, GROUPS_ONCE, PASSES, PREDIVIDE, NUM_GROUPS, ADASUM_SKIP,
         ADASUM_NON_POW2, PARAMS_TYPE, LBFGS, TENSOR_TYPE, SUPERSEDES, AVERAGE]


def raised(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    return str(info.value)


def model_and_sgd():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def backward(model):
    F.mse_loss(model(torch.ones(4, 3)), torch.zeros(4, 2)).backward()


def test_step_after_synchronize_warns_horovods_text():
    model, opt = model_and_sgd()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    backward(model)
    opt.synchronize()
    with pytest.warns(UserWarning) as caught:
        opt.step()
    assert any(STEP_AFTER_SYNC in str(w.message) for w in caught), [str(w.message) for w in caught]
    backward(model)
    opt.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()  # no warning inside the context


def test_zero_grad_and_too_many_backward_passes():
    if hvd.size() == 1:
        pytest.skip("the gradient hooks run with more than one rank")
    model, opt = model_and_sgd()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    backward(model)
    assert ZERO_GRAD in raised(AssertionError, opt.zero_grad)
    assert TOO_MANY_PASSES in raised(AssertionError, lambda: backward(model))
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()


def test_construction_errors():
    model, opt = model_and_sgd()
    named = list(model.named_parameters())
    make = hvd.DistributedOptimizer
    assert NOT_TUPLES in raised(ValueError, lambda: make(opt, named_parameters=[named[0][1]]))
    dup = [("w", named[0][1]), ("w", named[1][1])]
    assert DUPLICATES + "w" in raised(ValueError, lambda: make(opt, named_parameters=dup))
    assert UNNAMED in raised(ValueError, lambda: make(opt, named_parameters=named[:1]))
    assert GROUPS in raised(ValueError, lambda: make(opt, named_parameters=named, groups=-1))
    assert GROUPS_TENSORS in raised(ValueError, lambda: make(opt, named_parameters=named,
                                                             groups=[["x"]]))
    w = named[0][1]
    assert GROUPS_ONCE in raised(ValueError, lambda: make(opt, named_parameters=named,
                                                          groups=[[w], [w]]))
    assert PASSES in raised(ValueError, lambda: make(opt, named_parameters=named,
                                                     backward_passes_per_step=0))
    assert PREDIVIDE in raised(ValueError, lambda: make(opt, named_parameters=named, op=hvd.Sum,
                                                        gradient_predivide_factor=2.0))
    with pytest.warns(DeprecationWarning) as caught:
        make(opt, named_parameters=named, num_groups=1)
    assert any(NUM_GROUPS in str(w.message) for w in caught)


def test_adasum_texts():
    s = hvd.size()
    x = torch.ones(3)
    if s & (s - 1):
        assert ADASUM_NON_POW2 in raised(NotImplementedError,
                                         lambda: hvd.allreduce(x, op=hvd.Adasum))
        return
    if s == 1:
        pytest.skip("the Adasum optimizer needs more than one rank")
    model, opt = model_and_sgd()
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), op=hvd.Adasum)

    def skip():
        with opt.skip_synchronize():
            pass

    assert ADASUM_SKIP in raised(AssertionError, skip)


def test_functions_and_ops_texts():
    assert PARAMS_TYPE in raised(ValueError, lambda: hvd.broadcast_parameters(3, root_rank=0))
    p = nn.Parameter(torch.ones(2))
    lbfgs = torch.optim.LBFGS([p])
    assert LBFGS in raised(ValueError, lambda: hvd.broadcast_optimizer_state(lbfgs, 0))
    z = torch.ones(2, dtype=torch.complex64)
    assert TENSOR_TYPE in raised(ValueError, lambda: hvd.allreduce(z))
    assert SUPERSEDES in raised(ValueError, lambda: hvd.allreduce(torch.ones(2), average=True,
                                                                  op=hvd.Sum))
    with pytest.warns(DeprecationWarning) as caught:
        hvd.allreduce(torch.ones(2), average=False, name="hm.average")
    assert any(AVERAGE in str(w.message) for w in caught)
    bn = hvd.SyncBatchNorm(3)
    assert BN_DIM in raised(ValueError, lambda: bn(torch.ones(3)))


def test_every_text_is_in_the_docs_table():
    with open(DOC) as f:
        doc = re.sub(r"\s+", " ", f.read())
    source = [t.replace("torch.ComplexFloatTensor", "%s") for t in TEXTS]  # as in Horovod
    missing = [t for t in source + [BN_DIM.replace("1D", "{}D")] if t not in doc]
    assert not missing, "docs/horovod.md lacks %s" % missing
