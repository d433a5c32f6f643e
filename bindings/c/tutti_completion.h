/*
 * tutti_completion.h: completion callbacks of tutti's C ABI, a part of tutti.h
 * (which includes it; include tutti.h). Same ABI rules, same library.
 */
#ifndef TUTTI_TUTTI_COMPLETION_H_
#define TUTTI_TUTTI_COMPLETION_H_

#include <stdint.h>

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Completion callbacks: a way to learn that an op completed without a thread
 * blocked in tutti_wait() per op.
 *
 * tutti_handle_on_complete() registers fn to run exactly once when the op of
 * `handle` completes, as fn(handle, status, user_data) with the op's final
 * status (TUTTI_OK or its error, as tutti_wait() would return it; an op pending
 * at tutti_shutdown() gets TUTTI_ERR_SHUTDOWN). fn runs on the thread that
 * completes the op: tutti's background thread, or the thread calling
 * tutti_shutdown(); when the op already completed, fn runs on the calling
 * thread before tutti_handle_on_complete() returns. It runs after the
 * handle's waiters were woken, with no tutti lock held.
 *
 * Contract of fn: it must return quickly and must not block (it delays every
 * other op of this rank while it runs), and must not call any tutti_*
 * function (it may run inside tutti_shutdown()). Hand the completion to
 * another thread (a queue, a pipe, an eventfd) and do the work there: wait,
 * read the output, release. The callback may run just after a thread woken
 * by tutti_wait() released the handle: it runs all the same, and its handle
 * is then no longer valid for other tutti_* calls. Nothing cancels a
 * registered callback.
 *
 * One callback per handle. Returns TUTTI_OK; TUTTI_ERR_INVALID_ARGUMENT for
 * fn NULL, an unknown or released handle, or a handle that already has a
 * callback (nothing runs then); TUTTI_ERR_NOT_INITIALIZED. Any thread.
 */
typedef void (*tutti_completion_fn)(tutti_handle handle, int status, void* user_data);
TUTTI_API int tutti_handle_on_complete(tutti_handle handle, tutti_completion_fn fn,
                                       void* user_data);

/* What tutti_completion_write_fd writes: 16 bytes, native byte order. */
typedef struct tutti_completion_record {
  int64_t handle;
  int32_t status; /* tutti_status */
  int32_t reserved; /* 0 */
} tutti_completion_record;

/*
 * A ready-made tutti_completion_fn for callers that cannot provide a C
 * function (e.g. Python through ctypes): writes one tutti_completion_record
 * to the file descriptor (int)(intptr_t)user_data with write(2), retrying on
 * EINTR. Use a pipe (or socket) read by a thread of yours: a record is
 * smaller than PIPE_BUF, so it is written whole, and records from several
 * threads never interleave. The write blocks only while the pipe is full
 * (4096 unread records on Linux's default 64 KiB pipe): keep reading. A write
 * that fails otherwise is dropped; a pipe whose read end was closed also
 * raises SIGPIPE, which ends the process unless it ignores SIGPIPE (Python
 * does): keep the read end open while callbacks may run.
 */
TUTTI_API void tutti_completion_write_fd(tutti_handle handle, int status, void* user_data);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TUTTI_TUTTI_COMPLETION_H_ */
