"""``horovod.common.exceptions``: the exception classes, defined in tutti.errors."""

from tutti.errors import (  # noqa: F401
    HorovodInternalError,
    HorovodVersionMismatchError,
    HostsUpdatedInterrupt,
    get_version_mismatch_message,
)

__all__ = [
    "HorovodInternalError",
    "HorovodVersionMismatchError",
    "HostsUpdatedInterrupt",
    "get_version_mismatch_message",
]
