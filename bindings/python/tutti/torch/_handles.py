"""Waiting for one C handle of libtutti (used by tutti.torch.ops.synchronize).

The wait is sliced (WAIT_SLICE_SECONDS per tutti_wait call) so that Ctrl-C
reaches Python between slices. A slice that expires is never the op's result:
once tutti_poll says the op completed, a wait with timeout 0 fetches its real
status (TUTTI_OK or the op's error), so an op that completes between a
slice's expiry and the poll is reported as what it is.
"""

import ctypes

from tutti import _library

STATUS_SHUTDOWN = 4
STATUS_TIMEOUT = 5
STATUS_NOT_INITIALIZED = 7

# Seconds per tutti_wait call. A module attribute so that tests can make it
# tiny (every slice then expires) to exercise the slice boundary.
WAIT_SLICE_SECONDS = 1.0


def _status_until_done(lib, c_handle):
    """The op's final tutti_status (a wait that expired is never returned)."""
    while True:
        rc = lib.tutti_wait(c_handle, WAIT_SLICE_SECONDS)
        if rc != STATUS_TIMEOUT:
            return rc
        done = lib.tutti_poll(c_handle)
        if done == 1:
            # Completed after the slice expired: its real status. (No loop on
            # TIMEOUT here: a completed op's status is final, whatever it is.)
            return lib.tutti_wait(c_handle, 0.0)
        if done < 0:
            return -done  # unknown handle, or no runtime any more


def wait(lib, c_handle):
    """Waits for one C handle; returns (status, message), (0, "") on success."""
    rc = _status_until_done(lib, c_handle)
    if rc == 0:
        return 0, ""
    if rc == STATUS_NOT_INITIALIZED:
        # The runtime was shut down (and its handles forgotten) while this op
        # was pending: that is the op's shutdown error.
        return STATUS_SHUTDOWN, "tutti was shut down while this op was pending"
    status = ctypes.c_int()
    size = lib.tutti_handle_message(c_handle, ctypes.byref(status), None, 0)
    buf = ctypes.create_string_buffer(size + 1)
    lib.tutti_handle_message(c_handle, ctypes.byref(status), buf, size + 1)
    message = buf.value.decode("utf-8", "replace") or _library.last_error()
    return rc, message
