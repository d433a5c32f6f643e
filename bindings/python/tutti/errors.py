"""Exceptions raised for errors reported by libtutti.

Every error of the C API (a tutti_status code with a message) becomes an
instance of a TuttiError subclass chosen by the code; str(error) is the core's
message, error.code the numeric tutti_status.
"""


class TuttiError(RuntimeError):
    """Base of every tutti error. Attributes: code (int tutti_status), message (str)."""

    code = -1

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidArgumentError(TuttiError, ValueError):
    """Bad input from this rank's caller (shape, dtype, splits, settings)."""

    code = 1


class MismatchError(TuttiError):
    """Ranks submitted incompatible requests for one tensor name."""

    code = 2


class PeerLostError(TuttiError):
    """A peer died or its connection broke; the job cannot go on."""

    code = 3


class ShutdownError(TuttiError):
    """The runtime was shut down while the op was pending."""

    code = 4


class WaitTimeoutError(TuttiError, TimeoutError):
    """A wait with a deadline expired (the op itself may still finish)."""

    code = 5


class StalledError(TuttiError):
    """Stall shutdown: some ranks never submitted the tensor."""

    code = 6


class NotInitializedError(TuttiError):
    """init() has not been called (or shutdown() was)."""

    code = 7


class DuplicateNameError(TuttiError):
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

    def __init__(self, skip_sync=False):
        super().__init__("hosts were added to or removed from the elastic job")
        self.skip_sync = skip_sync


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


def error_for(code, message):
    """Returns the TuttiError subclass instance for a non-zero tutti_status `code`."""
    cls = _BY_CODE.get(code, TuttiError)
    return cls(message or "tutti error %d" % code, code)
