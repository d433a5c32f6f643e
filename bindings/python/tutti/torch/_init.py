"""tutti.torch.init: tutti.init that also works under torchrun.

Below tutti.torch (which re-exports it), tutti.torch.mpi_ops (Horovod's
mpi_ops.init) and tutti.torch.elastic (Horovod's elastic.init).
"""

from typing import Any, Optional

from tutti.basics import init as _init_job
from tutti.torch import _torchrun


def init(comm: Optional[Any] = None, process_sets: Optional[Any] = None) -> None:
    """tutti.init() (see tutti.basics.init). Under torchrun without tuttirun's
    variables, the ranks first meet through torchrun's store
    (tutti.torch._torchrun): hvd.init() works under either launcher."""
    if comm is None and process_sets in (None, []):
        _torchrun.set_env_from_torchrun()
    _init_job(comm, process_sets)
