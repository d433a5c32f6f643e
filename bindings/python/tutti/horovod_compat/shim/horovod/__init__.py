"""tutti's alias for Horovod (tutti.horovod_compat): ``import horovod.torch``
gives tutti.torch. On sys.path only when a script runs through
``python3 -m tutti.horovod_compat`` or ``tuttirun --horovod-compat``."""

from tutti.horovod_compat import install_finder as _install_finder

_install_finder()

# The Horovod release whose PyTorch API tutti follows (docs/horovod.md).
__version__ = "0.28.1"
