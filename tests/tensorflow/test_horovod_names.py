"""tutti.tensorflow and tutti.tensorflow.keras against Horovod 0.28.1's public
names and parameter lists (read from horovod/tensorflow/__init__.py,
mpi_ops.py, functions.py and horovod/tensorflow/keras/__init__.py), and the
names docs/tensorflow.md lists as missing."""

import inspect

import pytest

import tutti.keras
import tutti.tensorflow as hvd
import tutti.tensorflow.keras as hvd_keras

# name -> Horovod's parameters, in order (None: not a function, or no parameters checked)
HOROVOD_TF = {
    "allreduce": ["tensor", "average", "device_dense", "device_sparse", "compression", "op",
                  "prescale_factor", "postscale_factor", "name", "process_set",
                  "ignore_name_scope"],
    "reducescatter": ["tensor", "device_dense", "compression", "op", "name", "process_set",
                      "ignore_name_scope", "prescale_factor", "postscale_factor"],
    "grouped_allreduce": ["tensors", "average", "device_dense", "device_sparse", "compression",
                          "op", "prescale_factor", "postscale_factor", "process_set",
                          "ignore_name_scope", "name"],
    "grouped_reducescatter": ["tensors", "device_dense", "compression", "op", "process_set",
                              "prescale_factor", "postscale_factor"],
    "DistributedOptimizer": ["optimizer", "name", "use_locking", "device_dense", "device_sparse",
                             "compression", "sparse_as_dense", "backward_passes_per_step", "op",
                             "gradient_predivide_factor", "average_aggregated_gradients",
                             "num_groups", "groups", "process_set", "scale_local_gradients"],
    "DistributedGradientTape": ["gradtape", "device_dense", "device_sparse", "compression",
                                "sparse_as_dense", "op", "gradient_predivide_factor",
                                "num_groups", "groups", "process_set", "scale_local_gradients"],
    "PartialDistributedGradientTape": ["gradtape", "device_dense", "device_sparse",
                                       "compression", "sparse_as_dense", "op",
                                       "gradient_predivide_factor", "num_groups", "groups",
                                       "process_set", "local_layers", "scale_local_gradients"],
    "allgather": ["tensor", "name", "ignore_name_scope", "process_set"],
    "grouped_allgather": ["tensors", "name", "ignore_name_scope", "process_set"],
    "broadcast": ["tensor", "root_rank", "name", "ignore_name_scope", "process_set"],
    "alltoall": ["tensor", "splits", "name", "ignore_name_scope", "process_set"],
    "join": [],
    "size_op": ["process_set_id", "name"],
    "process_set_included_op": ["process_set_id", "name"],
    "local_size_op": ["name"],
    "rank_op": ["name"],
    "local_rank_op": ["name"],
    "broadcast_variables": ["variables", "root_rank", "process_set", "inplace"],
    "broadcast_object": ["obj", "root_rank", "session", "name", "process_set"],
    "allgather_object": ["obj", "session", "name", "process_set"],
}
HOROVOD_TF_OTHER = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size",
    "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built", "ProcessSet",
    "global_process_set", "add_process_set", "remove_process_set", "Average", "Sum", "Adasum",
    "Min", "Max", "Product", "Compression",
]
HOROVOD_TF.update({
    "broadcast_": ["variables", "root_rank", "name", "process_set"],
    "broadcast_global_variables": ["root_rank"],
    "broadcast_object_fn": ["root_rank", "session", "name", "process_set"],
})
MISSING_TF = []  # horovod.tensorflow.data and the XLA ops are not public names

HOROVOD_KERAS = {
    "DistributedOptimizer": ["optimizer", "name", "device_dense", "device_sparse",
                             "compression", "sparse_as_dense", "gradient_predivide_factor",
                             "op", "backward_passes_per_step", "average_aggregated_gradients",
                             "num_groups", "groups", "process_set", "scale_local_gradients"],
    "broadcast_global_variables": ["root_rank"],
    "allreduce": ["value", "name", "average", "prescale_factor", "postscale_factor", "op",
                  "compression"],
    "allgather": ["value", "name"],
    "broadcast": ["value", "root_rank", "name"],
    "reducescatter": ["value", "name", "op"],
    "load_model": ["filepath", "custom_optimizers", "custom_objects", "compression",
                   "legacy_opts"],
}
HOROVOD_KERAS_CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
                           "LearningRateScheduleCallback", "LearningRateWarmupCallback",
                           "BestModelCheckpoint"]


def params(fn):
    return [p for p in inspect.signature(fn).parameters]


@pytest.mark.parametrize("module,table", [(hvd, HOROVOD_TF), (hvd_keras, HOROVOD_KERAS),
                                          (tutti.keras, HOROVOD_KERAS)],
                         ids=["tensorflow", "tensorflow.keras", "keras"])
def test_horovod_functions_take_horovods_parameters_in_order(module, table):
    for name, expected in table.items():
        assert params(getattr(module, name)) == expected, name


def test_other_horovod_names_exist_and_missing_ones_do_not():
    for name in HOROVOD_TF_OTHER:
        assert hasattr(hvd, name), name
    for name in MISSING_TF:
        assert not hasattr(hvd, name), "%s exists: update docs/tensorflow.md" % name
    for name in ("run", "TensorFlowKerasState", "TensorFlowState", "ObjectState", "State"):
        assert hasattr(hvd.elastic, name), "elastic." + name
    assert params(hvd.elastic.TensorFlowKerasState.__init__)[:4] == ["self", "model", "optimizer",
                                                                     "backend"]
    for module in (hvd_keras, tutti.keras):
        for name in HOROVOD_KERAS_CALLBACKS:
            assert hasattr(module.callbacks, name), name
        for name in ("KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
                     "UpdateEpochStateCallback", "run"):
            assert hasattr(module.elastic, name), "elastic." + name
    # horovod/keras/__init__.py's PartialDistributedOptimizer
    assert params(tutti.keras.PartialDistributedOptimizer) == [
        "optimizer", "name", "device_dense", "device_sparse", "compression", "sparse_as_dense",
        "gradient_predivide_factor", "op", "groups", "process_set", "local_layers",
        "scale_local_gradients"]
