"""Exceptions raised for errors reported by libtutti.

Every error of the C API (a tutti_status code with a message) becomes an
instance of a TuttiError subclass chosen by the code; str(error) is the core's
message, error.code the numeric tutti_status.

The classes also derive from what Horovod users catch (horovod/common/
exceptions.py, and Horovod raising ValueError for bad arguments): errors of a
failed collective (MismatchError, PeerLostError, StalledError, ShutdownError)
are HorovodInternalError (a RuntimeError); InvalidArgumentError,
DuplicateNameError and NotInitializedError are ValueError;
HostsUpdatedInterrupt is Horovod's.

Elastic training (tutti.elastic.run_fn) restores and resets on PeerLostError
only, not on every HorovodInternalError as Horovod's run_fn does: a mismatch
or a stall is a bug of the script and would fail again in the next
generation, and a ShutdownError there is the driver ending the job.
"""

from typing import Optional


class TuttiError(RuntimeError):
    """Base of every tutti error. Attributes: code (int tutti_status), message (str)."""

    code = -1

    def __init__(self, message: str, code: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class HorovodInternalError(RuntimeError):
    """A collective failed (Horovod's name, horovod.common.exceptions): the base
    of MismatchError, PeerLostError, StalledError and ShutdownError, so that
    ``except hvd.HorovodInternalError`` catches every failed-collective error."""


class InvalidArgumentError(TuttiError, ValueError):
    """Bad input from this rank's caller (shape, dtype, splits, settings)."""

    code = 1


class MismatchError(TuttiError, HorovodInternalError):
    """Ranks submitted incompatible requests for one tensor name."""

    code = 2


class PeerLostError(TuttiError, HorovodInternalError):
    """A peer died or its connection broke; the job cannot go on."""

    code = 3


class ShutdownError(TuttiError, HorovodInternalError):
    """The runtime was shut down while the op was pending."""

    code = 4


class WaitTimeoutError(TuttiError, TimeoutError):
    """A wait with a deadline expired (the op itself may still finish)."""

    code = 5


class StalledError(TuttiError, HorovodInternalError):
    """Stall shutdown: some ranks never submitted the tensor."""

    code = 6


class NotInitializedError(TuttiError, ValueError):
    """init() has not been called (or shutdown() was). A ValueError too, as
    Horovod's "Horovod has not been initialized; use hvd.init()"."""

    code = 7


class DuplicateNameError(TuttiError, ValueError):
    """A tensor of that name is already in flight on this rank."""

    code = 8


class TuttiIOError(TuttiError):
    """I/O failure that is not a lost peer (bind, resolve, authentication)."""

    code = 9


class InternalError(TuttiError):
    """A bug in tutti."""

    code = 10


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by an elastic State's commit() on every rank at once when hosts
    were added to or removed from the job (tutti_elastic_hosts_updated): the
    ranks leave the current generation and join the next one, keeping their
    in-memory state (no restore). Not a TuttiError: nothing failed.

    skip_sync: True when the new generation needs no state broadcast (Horovod:
    hosts only removed). tutti cannot tell added from removed, so it raises
    with False.
    """

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("hosts were added to or removed from the elastic job")
        self.skip_sync = skip_sync


def get_version_mismatch_message(name: str, version: str, installed_version: str) -> str:
    """Horovod's message for a framework whose version changed since the build."""
    return ("Framework %s installed with version %s but found version %s. This can result "
            "in unexpected behavior including runtime errors." % (name, installed_version,
                                                                  version))


class HorovodVersionMismatchError(ImportError):
    """Horovod's error for a framework version that differs from the one at
    installation (tutti loads libtutti with ctypes and never raises it; defined
    for code that names it)."""

    def __init__(self, name: str, version: str, installed_version: str) -> None:
        super().__init__(get_version_mismatch_message(name, version, installed_version))
        self.name = name
        self.version = version
        self.installed_version = installed_version


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        MismatchError,
        PeerLostError,
        ShutdownError,
        WaitTimeoutError,
        StalledError,
        NotInitializedError,
        DuplicateNameError,
        TuttiIOError,
        InternalError,
    )
}


def error_for(code: int, message: Optional[str]) -> TuttiError:
    """Returns the TuttiError subclass instance for a non-zero tutti_status `code`."""
    cls = _BY_CODE.get(code, TuttiError)
    return cls(message or "tutti error %d" % code, code)
