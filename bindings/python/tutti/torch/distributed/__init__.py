"""tutti as a torch.distributed backend, and a DDP communication hook.

    import tutti.torch.distributed          # registers backend "tutti"
    dist.init_process_group("tutti")        # under tuttirun or torchrun
    model = DistributedDataParallel(model)  # its buckets go through tutti

    # or keep gloo and route DDP's buckets through tutti:
    from tutti.torch.distributed import TuttiHookState, allreduce_hook
    ddp.register_comm_hook(TuttiHookState(compression="fp16"), allreduce_hook)

Importing this module registers the backend. Under tuttirun it also joins
the tutti job and sets torch's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
where they are unset (a collective: every rank must import it); see
tutti.torch.distributed._backend. docs/torch-distributed.md has the
supported ops and their mapping.
"""

from tutti.torch.distributed import _backend
from tutti.torch.distributed.hook import TuttiHookState, allreduce_hook
from tutti.torch.distributed.process_group import ProcessGroupTutti

BACKEND = _backend.BACKEND
process_set_for = _backend.process_set_for

_backend.register()
_backend.hook_new_groups()
_backend.hook_ddp_comm_hooks()
_backend.prepare_tuttirun_env()

__all__ = ["BACKEND", "ProcessGroupTutti", "TuttiHookState", "allreduce_hook", "process_set_for"]
