/*
 * tutti.h: the stable C ABI of tutti, the collective communication library.
 *
 * Every framework binding (the Python package, a C++ trainer, Julia, Rust)
 * links this API of libtutti.so and nothing else. The ABI follows the
 * SOVERSION of the library: within one major version, functions and enum
 * values are only ever added, never changed or renumbered.
 *
 * Model. A process is one rank of a job. tutti_init() reads the job's
 * placement and knobs from the TUTTI_* environment variables (written by
 * `tuttirun`, or by hand), connects to every peer and starts one background
 * thread. Collectives are asynchronous: tutti_<op>_async() validates the local
 * input, returns a handle at once, and the op runs on the background thread
 * once every rank submitted a tensor of the same name. tutti_wait() or
 * tutti_poll() observe completion; tutti_release() forgets the handle.
 *
 * Memory. Input and output tensors are borrowed: the caller keeps them alive
 * and unchanged (inputs) until the op's handle completed. Outputs whose size
 * only the runtime knows (allgather, alltoall, reducescatter) are owned by the
 * handle: tutti_handle_output() points at them until tutti_release().
 *
 * Errors. Every function that can fail returns a tutti_status code (TUTTI_OK
 * = 0) and stores a message a user can act on in a thread-local last-error
 * string (tutti_last_error()). A completed handle carries its own status and
 * message (tutti_wait(), tutti_handle_message()).
 *
 * Thread-safety. Every function may be called from any thread at any time,
 * concurrently, unless its comment says otherwise. tutti_init() and
 * tutti_shutdown() serialise with each other.
 *
 * Names. Ops are matched across ranks by name: every rank submits the same
 * name for the same tensor. A NULL or empty name makes the runtime generate
 * one from a per-process counter, so unnamed ops must be issued in the same
 * order on every rank. A name may be reused once its previous op completed.
 */
#ifndef TUTTI_TUTTI_H_
#define TUTTI_TUTTI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TUTTI_API
#else
#define TUTTI_API __attribute__((visibility("default")))
#endif

/* Version of this header. tutti_version() returns the library's. */
#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 1
#define TUTTI_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define TUTTI_VERSION_NUMBER \
  (TUTTI_VERSION_MAJOR * 10000 + TUTTI_VERSION_MINOR * 100 + TUTTI_VERSION_PATCH)

/* Element types. Values equal tutti::DataType (core/dtype.h); never renumbered. */
typedef enum tutti_dtype {
  TUTTI_UINT8 = 0,
  TUTTI_INT8 = 1,
  TUTTI_INT16 = 2,
  TUTTI_INT32 = 3,
  TUTTI_INT64 = 4,
  TUTTI_FLOAT16 = 5,  /* IEEE 754 binary16 */
  TUTTI_BFLOAT16 = 6, /* the upper 16 bits of a float32 */
  TUTTI_FLOAT32 = 7,
  TUTTI_FLOAT64 = 8,
  TUTTI_BOOL = 9, /* one byte, 0 or 1 */
  TUTTI_UINT16 = 10,
  TUTTI_UINT32 = 11,
  TUTTI_UINT64 = 12
} tutti_dtype;

/* Reduction operators. Values equal tutti::ReduceOp (core/dtype.h). */
typedef enum tutti_reduce_op {
  TUTTI_SUM = 0,
  TUTTI_AVERAGE = 1, /* sum divided by the number of contributing ranks */
  TUTTI_MIN = 2,
  TUTTI_MAX = 3,
  TUTTI_PRODUCT = 4,
  /* Adaptive summation (Horovod's Adasum, docs/adasum.md): allreduce only, of
   * float16/float32/float64 CPU tensors, over a power-of-two number of ranks;
   * anything else is TUTTI_ERR_INVALID_ARGUMENT on every rank. */
  TUTTI_ADASUM = 5
} tutti_reduce_op;

/* Status codes. Values equal tutti::StatusCode (core/status.h). */
typedef enum tutti_status {
  TUTTI_OK = 0,
  TUTTI_ERR_INVALID_ARGUMENT = 1, /* bad input from this rank's caller */
  TUTTI_ERR_MISMATCH = 2,         /* ranks submitted incompatible requests for one name */
  TUTTI_ERR_PEER_LOST = 3,        /* a peer died or its connection broke */
  TUTTI_ERR_SHUTDOWN = 4,         /* the runtime was shut down while the op was pending */
  TUTTI_ERR_TIMEOUT = 5,          /* a wait's deadline expired (the op goes on) */
  TUTTI_ERR_STALLED = 6,          /* stall shutdown: some ranks never submitted the tensor */
  TUTTI_ERR_NOT_INITIALIZED = 7,  /* tutti_init() not called, or tutti_shutdown() was */
  TUTTI_ERR_DUPLICATE_NAME = 8,   /* a tensor of that name is in flight on this rank */
  TUTTI_ERR_IO = 9,               /* I/O failure that is not a lost peer (bind, auth) */
  TUTTI_ERR_INTERNAL = 10         /* a bug in tutti */
} tutti_status;

/* Where a tensor's memory lives. TUTTI_DEVICE_CUDA needs a build with CUDA
 * (tutti_built_with("cuda")); see tutti_set_cuda_stream(). */
typedef enum tutti_device { TUTTI_DEVICE_CPU = 0, TUTTI_DEVICE_CUDA = 1 } tutti_device;

/*
 * A borrowed, contiguous, row-major tensor. shape has ndim entries (ndim = 0
 * is a scalar of one element); it is read during the call only. The fields
 * that hold enum values are int32_t so that the layout is fixed.
 */
typedef struct tutti_tensor {
  void* data;           /* first element; may be NULL when the tensor has 0 elements */
  int32_t dtype;        /* a tutti_dtype */
  int32_t ndim;         /* number of dimensions, 0..64 */
  const int64_t* shape; /* ndim sizes, outermost first, each >= 0 */
  int32_t device;       /* a tutti_device */
  int32_t device_id;    /* CUDA device ordinal; -1 for the CPU */
} tutti_tensor;

/*
 * CUDA tensors. A tensor with device TUTTI_DEVICE_CUDA lives in the memory of
 * CUDA device device_id (>= 0; one device per process: the first CUDA tensor
 * decides it). Its op is ordered after the work the caller queued on the
 * calling thread's CUDA stream (see below) before the *_async call: tutti
 * records an event on that stream and its own stream waits for the event on
 * the device, so the caller's stream is never blocked on the host. The handle
 * completes once tutti's device work finished: after tutti_wait() the outputs
 * may be used on any stream. Runtime-sized outputs (tutti_handle_output) of
 * CUDA ops are in host memory (device CPU). With TUTTI_BACKEND=nccl CUDA
 * tensors go through NCCL (except int16, and top-k/int8 compressed
 * allreduces, which take the host path); with the other backends they are
 * staged through pinned host memory.
 */

/*
 * Sets the stream (a cudaStream_t; NULL = the legacy default stream, the
 * initial value) that CUDA tensors enqueued later by the calling thread are
 * ordered after. Per thread; stays until changed. Never fails (TUTTI_OK); it
 * needs no initialised runtime.
 */
TUTTI_API int tutti_set_cuda_stream(void* stream);

/* An operation in flight. Positive; 0 is never a valid handle. */
typedef int64_t tutti_handle;

/* ---- Version, build, errors ---------------------------------------------- */

/* Version of the loaded library as "MAJOR.MINOR.PATCH"; sets the three ints
 * when non-NULL. Never fails. */
TUTTI_API const char* tutti_version(int* major, int* minor, int* patch);

/* 1 when this build has `feature`, else 0. Features: "tcp", "mpi", "nccl",
 * "cuda" (backends and device support registered in this library). Unknown
 * names (and NULL) give 0. */
TUTTI_API int tutti_built_with(const char* feature);

/* NCCL_VERSION_CODE of the NCCL headers this library was built with (e.g.
 * 22809 for NCCL 2.28.9; Horovod's nccl_built()); 0 in a build without NCCL.
 * Never fails; needs no initialised runtime. */
TUTTI_API int tutti_nccl_version(void);

/* The backend of the running runtime: "tcp", "mpi" or "nccl" (CUDA tensors
 * over NCCL, the rest over tcp), as TUTTI_BACKEND resolved ("auto" is mpi
 * under mpirun, else tcp). NULL (last error TUTTI_ERR_NOT_INITIALIZED) when
 * not initialised. The string is static. */
TUTTI_API const char* tutti_backend(void);

/* 1 when MPI runs in this process with MPI_THREAD_MULTIPLE (the program may
 * call MPI itself while tutti runs), 0 with a lower thread level, -1 when no
 * runtime of this process has used MPI (other backend, or a build without
 * MPI). Never fails. */
TUTTI_API int tutti_mpi_threads_supported(void);

/* Message of the last failed tutti call on the calling thread ("" if none).
 * Valid until the next tutti call on this thread. */
TUTTI_API const char* tutti_last_error(void);

/* Lower-case name of a status code ("peer lost", "mismatch", ...); "unknown"
 * for values outside tutti_status. */
TUTTI_API const char* tutti_status_name(int status);

/* Size of one element of `dtype` in bytes; 0 for an invalid dtype. */
TUTTI_API size_t tutti_dtype_size(int dtype);

/* ---- Lifecycle ------------------------------------------------------------- */

/*
 * Joins the job described by the TUTTI_* environment variables: TUTTI_RANK,
 * TUTTI_SIZE, TUTTI_RENDEZVOUS_ADDR/PORT, TUTTI_SECRET, ... (see docs). Blocks
 * until every rank connected, at most TUTTI_TIMEOUT_SECONDS.
 * Errors: TUTTI_ERR_INVALID_ARGUMENT for a bad setting (the message names the
 * variable and the accepted range), TUTTI_ERR_TIMEOUT naming the ranks that
 * never arrived, TUTTI_ERR_IO. Calling it while initialised is TUTTI_OK and
 * does nothing. After tutti_shutdown() it may be called again (another world
 * size is fine). With TUTTI_ELASTIC_WORKER_ID set it is an elastic join
 * instead (see Elastic training below).
 */
TUTTI_API int tutti_init(void);

/*
 * Completes every pending handle with TUTTI_ERR_SHUTDOWN, tells the peers,
 * and stops the background thread. Handles stay valid for tutti_wait() and
 * tutti_release() until then, not after: once this returns, every handle is
 * forgotten. Idempotent: TUTTI_OK when not initialised.
 */
TUTTI_API int tutti_shutdown(void);

/* 1 between a successful tutti_init() and tutti_shutdown(), else 0. */
TUTTI_API int tutti_is_initialized(void);

/* Placement of this process. Return -1 (and set the last error to
 * TUTTI_ERR_NOT_INITIALIZED) when not initialised.
 * rank: 0..size-1 in the job; local: among the ranks on this host;
 * cross: index of this host among the job's hosts (cross_size hosts). */
TUTTI_API int tutti_rank(void);
TUTTI_API int tutti_size(void);
TUTTI_API int tutti_local_rank(void);
TUTTI_API int tutti_local_size(void);
TUTTI_API int tutti_cross_rank(void);
TUTTI_API int tutti_cross_size(void);

/* ---- Collectives ----------------------------------------------------------- */
/*
 * Common to every *_async function:
 * - `name`: NULL or "" generates one (see Names above).
 * - `handle` (out): set on TUTTI_OK; left unchanged otherwise.
 * - Returns TUTTI_OK, or at once: TUTTI_ERR_INVALID_ARGUMENT (the message names
 *   the argument and what is accepted), TUTTI_ERR_DUPLICATE_NAME,
 *   TUTTI_ERR_NOT_INITIALIZED, TUTTI_ERR_SHUTDOWN, or TUTTI_ERR_PEER_LOST once a
 *   peer was lost. Cross-rank disagreements complete the handle with
 *   TUTTI_ERR_MISMATCH on every rank instead.
 */

/*
 * output = postscale * reduce_op(prescale * input over ranks).
 * input and output: same dtype and shape; output may be the same memory as
 * input (in place). Every op for numbers; bool allows sum/min/max/product as
 * logical or/and/or/and. Integer tensors are scaled in float64 and truncated
 * toward zero (and saturated), as Horovod's: prescale on each rank's input
 * before the sum (3 * 0.5 -> 1 per rank), postscale after it; TUTTI_AVERAGE of
 * integers is the sum divided by the size, truncated (75 / 2 -> 37, -75 / 2
 * -> -37). float16/bfloat16 scale in float32. TUTTI_ADASUM (float16/32/64
 * CPU tensors, power-of-two sizes) combines each tensor on its own, between
 * the prescale and the postscale, as Horovod (docs/adasum.md).
 * `op` is a tutti_reduce_op; scale factors are plain multipliers (1.0 = none).
 */
TUTTI_API int tutti_allreduce_async(const tutti_tensor* input, const tutti_tensor* output,
                                    const char* name, int op, double prescale, double postscale,
                                    tutti_handle* handle);

/*
 * Allreduces `count` tensors as one group: none starts before all are ready on
 * every rank; they are fused together. inputs[i] -> outputs[i] as in
 * tutti_allreduce_async. handles: an array of `count` handles (out). Names
 * are name + "." + i (generated when name is NULL or "").
 */
TUTTI_API int tutti_grouped_allreduce_async(int count, const tutti_tensor* inputs,
                                            const tutti_tensor* outputs, const char* name, int op,
                                            double prescale, double postscale,
                                            tutti_handle* handles);

/*
 * tutti_allreduce_async and tutti_grouped_allreduce_async with a compression
 * spec for this op: "none", "fp16", "bf16", "topk:<ratio in (0, 1]>" (e.g.
 * "topk:0.01", with error feedback; "topk:0.01:warmup=200" with a sparsity
 * warm-up over each tensor's first 200 steps), "int8" or "int8:<block size>"
 * (with error feedback); NULL or "" = the job's TUTTI_COMPRESSION (default none).
 * Compression applies to TUTTI_SUM/TUTTI_AVERAGE of floating-point tensors
 * and runs on the background thread; integer and bool tensors and other ops
 * pass through unchanged. Every rank must pass the same spec for a tensor
 * (else TUTTI_ERR_MISMATCH naming the specs); a bad spec is
 * TUTTI_ERR_INVALID_ARGUMENT listing what is accepted. Results are within the
 * compressor's bounds of the uncompressed ones (fp16/bf16: the type's
 * rounding; topk/int8: what is not sent now is sent in later steps of the
 * same tensor name). CUDA tensors: fp16/bf16 cast in CUDA kernels on the
 * device; topk/int8 compress on the host from a pinned copy (same results
 * as for host tensors; not yet run on a GPU, docs/device-check.md).
 */
TUTTI_API int tutti_allreduce_async_ex(const tutti_tensor* input, const tutti_tensor* output,
                                       const char* name, int op, double prescale, double postscale,
                                       const char* compression, tutti_handle* handle);
TUTTI_API int tutti_grouped_allreduce_async_ex(int count, const tutti_tensor* inputs,
                                               const tutti_tensor* outputs, const char* name,
                                               int op, double prescale, double postscale,
                                               const char* compression, tutti_handle* handles);

/*
 * Concatenates every rank's input along the first dimension, in rank order.
 * First dimensions may differ per rank; the others must match (else
 * TUTTI_ERR_MISMATCH on every rank); ndim must be >= 1. The output is owned by
 * the handle: tutti_handle_output().
 */
TUTTI_API int tutti_allgather_async(const tutti_tensor* input, const char* name,
                                    tutti_handle* handle);

/*
 * Writes rank `root`'s input into every rank's output (same dtype and shape;
 * output may be the same memory as input). Ranks naming different roots get
 * TUTTI_ERR_MISMATCH.
 */
TUTTI_API int tutti_broadcast_async(const tutti_tensor* input, const tutti_tensor* output, int root,
                                    const char* name, tutti_handle* handle);

/*
 * Sends splits[p] consecutive rows (first-dimension slices) of input to rank
 * p, in rank order. splits: NULL (with nsplits = 0) divides the first
 * dimension evenly (it must be divisible by the size); else nsplits must equal
 * the size, each split >= 0, their sum <= the first dimension. Output (rows
 * received from each rank, concatenated in rank order) and received splits
 * through the handle: tutti_handle_output(), tutti_handle_received_splits().
 */
TUTTI_API int tutti_alltoall_async(const tutti_tensor* input, const int64_t* splits, int nsplits,
                                   const char* name, tutti_handle* handle);

/*
 * Reduces the input (same shape on every rank) as allreduce does and gives
 * rank r rows [offset_r, offset_r + rows_r) of the result, where rows_r =
 * d0 / size plus one for the first d0 % size ranks. Output through the handle.
 * Every op but TUTTI_ADASUM (TUTTI_ERR_INVALID_ARGUMENT).
 */
TUTTI_API int tutti_reducescatter_async(const tutti_tensor* input, const char* name, int op,
                                        double prescale, double postscale, tutti_handle* handle);

/* Completes on every rank once every rank entered it. */
TUTTI_API int tutti_barrier_async(tutti_handle* handle);

/*
 * This rank has no more data: until every rank joined, it takes part in the
 * other ranks' allreduces and reducescatters with zeros (TUTTI_AVERAGE still
 * divides by the whole size); an allgather, broadcast or alltoall meanwhile
 * completes with TUTTI_ERR_MISMATCH on the ranks that submitted it. Completes
 * once every rank joined;
 * tutti_handle_join_result() gives the last rank to join (same on every rank).
 */
TUTTI_API int tutti_join_async(tutti_handle* handle);

/* ---- Options and process sets -------------------------------------------------- */
/*
 * Per-op options for the *_async_opts functions (ABI-stable: struct_size says
 * which fields the caller knows; later versions only append fields). Fill it
 * with tutti_op_options_init(), then set what you need. NULL options = all
 * defaults (the global process set, the job's compression).
 */
typedef struct tutti_op_options {
  uint32_t struct_size;    /* sizeof(tutti_op_options), set by tutti_op_options_init() */
  int32_t process_set_id;  /* the process set the op runs over; 0 = every rank (the global set) */
  const char* compression; /* allreduce only: as in tutti_allreduce_async_ex; NULL = the job's */
  /*
   * 1 = the ordered lane; 0 (default) = negotiated. Contract: the caller
   * issues its ordered ops of a process set in the same order, with
   * matching arguments, on every member of the set (torch.distributed's,
   * JAX's under jit). They then skip the negotiation through rank 0: no
   * name is matched (`name` is ignored), each op is numbered per set
   * ("ordered #N"), and its members exchange signatures (collective, dtype,
   * shape, reduce op, scale factors, root, splits) before any data moves.
   * A broken contract (another collective, dtype, shape or root on some
   * rank; a skipped call) fails that op with TUTTI_ERR_MISMATCH on every
   * member, with the same message naming N, the ranks and the values; the
   * lane stays usable. A rank that never issues an op some peer waits in
   * is TUTTI_ERR_PEER_LOST on that peer after TUTTI_ORDERED_TIMEOUT_SECONDS.
   * tutti_wait() runs the op on the waiting thread (no hand-off) unless
   * another thread runs that set's lane; ops nobody waits for run on the
   * lane's thread. Ordered and negotiated ops may be mixed, from any
   * threads: the lanes never share a connection. CUDA tensors, Adasum,
   * compressed allreduces and the mpi backend are negotiated instead.
   * Other values: TUTTI_ERR_INVALID_ARGUMENT.
   */
  int32_t ordered;
} tutti_op_options;

/* Sets every field to its default (struct_size included). Never fails. */
TUTTI_API int tutti_op_options_init(tutti_op_options* options);

/*
 * The collectives above, over a process set. In a set other than the global
 * one, its members take the place of every rank: the ranks, sizes, splits
 * and output order are within the set (rank i of a set is its i-th smallest
 * global rank), except broadcast's root, which is the root's global rank
 * (a member). A rank that is not a member, or an unknown set id, is
 * TUTTI_ERR_INVALID_ARGUMENT at once; ranks outside the set never take part.
 * CUDA tensors run over a set as over the global set (with
 * TUTTI_BACKEND=nccl on an NCCL communicator of the set's members); that
 * path is compiled but not yet run on a GPU (docs/process-sets.md).
 */
TUTTI_API int tutti_allreduce_async_opts(const tutti_tensor* input, const tutti_tensor* output,
                                         const char* name, int op, double prescale,
                                         double postscale, const tutti_op_options* options,
                                         tutti_handle* handle);
TUTTI_API int tutti_grouped_allreduce_async_opts(int count, const tutti_tensor* inputs,
                                                 const tutti_tensor* outputs, const char* name,
                                                 int op, double prescale, double postscale,
                                                 const tutti_op_options* options,
                                                 tutti_handle* handles);
TUTTI_API int tutti_allgather_async_opts(const tutti_tensor* input, const char* name,
                                         const tutti_op_options* options, tutti_handle* handle);
/*
 * tutti_allgather_async_opts into the caller's `output` (CPU, the input's
 * dtype, borrowed until the handle completes). When `output` holds exactly
 * the result's bytes (every rank's rows) the result is written there and
 * tutti_handle_output() reports no output (TUTTI_ERR_INVALID_ARGUMENT);
 * otherwise, and for CUDA tensors, the result is the handle's output as
 * for tutti_allgather_async_opts. Saves allocating and copying the result
 * (torch.distributed's all_gather_into_tensor uses it).
 */
TUTTI_API int tutti_allgather_into_async_opts(const tutti_tensor* input, const tutti_tensor* output,
                                              const char* name, const tutti_op_options* options,
                                              tutti_handle* handle);
TUTTI_API int tutti_broadcast_async_opts(const tutti_tensor* input, const tutti_tensor* output,
                                         int root, const char* name,
                                         const tutti_op_options* options, tutti_handle* handle);
TUTTI_API int tutti_alltoall_async_opts(const tutti_tensor* input, const int64_t* splits,
                                        int nsplits, const char* name,
                                        const tutti_op_options* options, tutti_handle* handle);
TUTTI_API int tutti_reducescatter_async_opts(const tutti_tensor* input, const char* name, int op,
                                             double prescale, double postscale,
                                             const tutti_op_options* options, tutti_handle* handle);
TUTTI_API int tutti_barrier_async_opts(const tutti_op_options* options, tutti_handle* handle);
#include "tutti_p2p.h" /* tagged point-to-point messages: tutti_send_async, tutti_recv_async */

/*
 * Registers a process set of `n` global ranks (any order; distinct, in
 * [0, size)) and writes its id (> 0) to *id. Collective over every rank of
 * the job: all call it, in the same order, with the same ranks; it blocks
 * until the set is registered everywhere. Ids count up from 1 in
 * registration order and are not reused. Errors, on every rank:
 * TUTTI_ERR_INVALID_ARGUMENT (bad ranks on some rank; a set with these ranks
 * exists already, the global set included), TUTTI_ERR_MISMATCH (ranks passed
 * different lists). Sets last until removed or tutti_shutdown(); an elastic
 * job's new generation starts with the global set only.
 */
TUTTI_API int tutti_add_process_set(const int* ranks, int n, int* id);
/* Removes a set, collective like tutti_add_process_set. Its pending ops fail
 * with TUTTI_ERR_INVALID_ARGUMENT. The global set (0) and unknown ids are
 * TUTTI_ERR_INVALID_ARGUMENT. */
TUTTI_API int tutti_remove_process_set(int id);
/* Size of set `id` and this rank's rank in it (-1 when not a member).
 * TUTTI_ERR_INVALID_ARGUMENT for an unknown id. Either out-pointer may be NULL. */
TUTTI_API int tutti_process_set_info(int id, int* size, int* rank_in_set);
/* Copies the set's global ranks (ascending) into ranks[0..capacity) and their
 * number to *count (which may exceed capacity: call again with more room). */
TUTTI_API int tutti_process_set_ranks(int id, int* ranks, int capacity, int* count);
/* The registered set ids, ascending (0 first), as tutti_process_set_ranks. */
TUTTI_API int tutti_process_set_ids(int* ids, int capacity, int* count);

/* ---- Handles ----------------------------------------------------------------- */

/* 1 once the op completed (successfully or not), 0 while it runs, or a
 * negative -tutti_status: -TUTTI_ERR_INVALID_ARGUMENT for an unknown or
 * released handle, -TUTTI_ERR_NOT_INITIALIZED without a runtime (the message
 * is then the last error). Never blocks. */
TUTTI_API int tutti_poll(tutti_handle handle);

/*
 * Waits until the op completed and returns its status (TUTTI_OK or the op's
 * error; the message is then also the last error). timeout_seconds < 0 waits
 * without a deadline (the runtime itself fails every op within
 * TUTTI_TIMEOUT_SECONDS of losing a peer, so this never hangs forever); on
 * expiry returns TUTTI_ERR_TIMEOUT and the op goes on. Unknown or released
 * handle: TUTTI_ERR_INVALID_ARGUMENT. May be called again after completion:
 * returns the same status. Several threads may wait on one handle.
 */
TUTTI_API int tutti_wait(tutti_handle handle, double timeout_seconds);

/*
 * Copies the completed op's message (NUL-terminated, truncated to fit) into
 * buf of buf_size bytes (buf may be NULL when buf_size is 0). Returns the
 * message length without the NUL (like snprintf), so a caller can size the
 * buffer; the message is "" for a successful op. For a pending op the status
 * and message say so. status (out, may be NULL): the op's tutti_status, or
 * TUTTI_ERR_INVALID_ARGUMENT for an unknown handle.
 */
TUTTI_API size_t tutti_handle_message(tutti_handle handle, int* status, char* buf, size_t buf_size);

/*
 * Describes the runtime-sized output of a successfully completed allgather,
 * alltoall or reducescatter: out->data, dtype, ndim, shape (device CPU). The
 * data and shape pointers stay valid until tutti_release(handle) or
 * tutti_shutdown(). Errors: TUTTI_ERR_INVALID_ARGUMENT for an unknown handle,
 * a pending one, or an op without such output; the op's own error if it failed.
 */
TUTTI_API int tutti_handle_output(tutti_handle handle, tutti_tensor* out);

/* Copies that output into dst (dst_bytes >= its size in bytes, else
 * TUTTI_ERR_INVALID_ARGUMENT naming both sizes). */
TUTTI_API int tutti_handle_output_copy(tutti_handle handle, void* dst, size_t dst_bytes);

/*
 * Received splits of a completed alltoall: rows that came from each rank.
 * Writes min(capacity, size) entries to splits; *count (may be NULL) = size.
 */
TUTTI_API int tutti_handle_received_splits(tutti_handle handle, int64_t* splits, int capacity,
                                           int* count);

/* Last rank to join, for a completed tutti_join_async handle. */
TUTTI_API int tutti_handle_join_result(tutti_handle handle, int* last_rank);

/* Completion callbacks (tutti_handle_on_complete): tutti_completion.h. */
#include "tutti_completion.h"

/* ---- Statistics -------------------------------------------------------------- */

/*
 * Bytes this rank was asked to send by the collectives it ran since
 * tutti_init() (compressed sizes for compressed allreduces; ring-aware: an
 * allreduce of B bytes counts 2 (n-1) / n * B, an allgather (n-1) chunks).
 * For benchmarks: bytes on the wire per step is the difference across a
 * step. 0 when not initialised.
 */
TUTTI_API uint64_t tutti_bytes_sent(void);

/* Forgets a completed handle and frees its output. A pending handle is
 * TUTTI_ERR_INVALID_ARGUMENT (wait first); so is an unknown one. */
TUTTI_API int tutti_release(tutti_handle handle);

/* ---- Timeline ------------------------------------------------------------------ */

/*
 * Starts recording this rank's timeline: a Chrome-trace JSON file (open it in
 * ui.perfetto.dev or chrome://tracing; see docs/timeline.md) with, per
 * tensor, negotiation, queueing, fusion-buffer copies and the collective.
 * Every rank writes its own file: `path` with ".rank<R>" inserted before the
 * extension ("timeline.json" -> "timeline.rank0.json"); only rank 0's file
 * has the per-rank "ready" marks. Call it on every rank, like the
 * collectives. mark_cycles != 0 also marks every background-loop round.
 * Events are written by a thread of their own, off the critical path; the
 * file loads even when the process is killed. Setting TUTTI_TIMELINE (or
 * tuttirun --timeline-filename) starts one at tutti_init().
 * Errors: TUTTI_ERR_INVALID_ARGUMENT (path NULL or empty, or a timeline is
 * already recording: stop it first), TUTTI_ERR_IO (the file cannot be
 * created), TUTTI_ERR_NOT_INITIALIZED.
 */
TUTTI_API int tutti_start_timeline(const char* path, int mark_cycles);

/*
 * Writes the queued events and closes the file, which is then complete JSON.
 * Blocks briefly (tens of milliseconds) for the writer. TUTTI_OK when no
 * timeline is recording; tutti_shutdown() stops it too. Errors:
 * TUTTI_ERR_IO (a write had failed), TUTTI_ERR_NOT_INITIALIZED.
 */
TUTTI_API int tutti_stop_timeline(void);

/* ---- Elastic training ------------------------------------------------------------ */
/*
 * A worker started by tuttirun's elastic driver (--min-np, --max-np,
 * --host-discovery-script; docs/elastic.md) has TUTTI_ELASTIC_WORKER_ID set.
 * Its tutti_init() is a join: it waits (polling the driver's store every
 * 20 ms, up to TUTTI_ELASTIC_TIMEOUT_SECONDS, default 600) for the next
 * membership generation that includes this worker, takes its rank, size and
 * local/cross placement from it (TUTTI_RANK, TUTTI_SIZE, ... are ignored),
 * and meets the generation's other members; a generation superseded while
 * they meet is left for the newer one. Errors of tutti_init() there:
 * TUTTI_ERR_SHUTDOWN with the driver's message when it gave up on the job,
 * TUTTI_ERR_TIMEOUT naming the worker id and the timeout, and
 * TUTTI_ERR_INVALID_ARGUMENT when TUTTI_BACKEND is not tcp. After a lost peer
 * (TUTTI_ERR_PEER_LOST) or a hosts update, every survivor calls
 * tutti_elastic_leave() then tutti_elastic_join() and restores its state from
 * the new rank 0 (always a surviving member).
 *
 * Thread-safety: as tutti_init()/tutti_shutdown() for leave and join (they
 * serialise with them and with each other); the others as any call.
 */

/* 1 when TUTTI_ELASTIC_WORKER_ID is set (>= 0) in the environment, else 0.
 * Needs no initialised runtime; never fails. */
TUTTI_API int tutti_elastic_enabled(void);

/* The membership generation of the running runtime (0, 1, ...); -1 when not
 * initialised or not elastic. Never fails. */
TUTTI_API int64_t tutti_elastic_generation(void);

/*
 * Leaves the current generation: if the runtime failed because a peer was
 * lost, reports that rank to the driver (store key
 * elastic/report/<generation>/<worker id>, so that the driver treats its
 * worker as failed even when its process is alive but unreachable), then
 * shuts the runtime down as tutti_shutdown() does. TUTTI_OK when not
 * initialised. In a job that is not elastic it is tutti_shutdown(). Errors:
 * TUTTI_ERR_TIMEOUT/TUTTI_ERR_IO when the report could not reach the driver's
 * store (the runtime is shut down all the same).
 */
TUTTI_API int tutti_elastic_leave(void);

/*
 * Joins the next generation that includes this worker (newer than the last
 * one it joined), as tutti_init() does for an elastic worker; blocks up to
 * TUTTI_ELASTIC_TIMEOUT_SECONDS (plus the meeting). Errors: those of the
 * elastic tutti_init() above; TUTTI_ERR_INVALID_ARGUMENT when the runtime is
 * still initialised (call tutti_elastic_leave() first) or
 * TUTTI_ELASTIC_WORKER_ID is not set.
 */
TUTTI_API int tutti_elastic_join(void);

/*
 * Collective over the current ranks (every rank calls it at the same point,
 * e.g. at each commit of the training state): *updated = 1 on every rank if
 * any rank sees a generation newer than the current one in the driver's store
 * (hosts were added or removed; the ranks then leave and join), else 0. A
 * rank that cannot reach the store counts as seeing none (logged). In a job
 * that is not elastic *updated = 0 and nothing is exchanged. Errors:
 * TUTTI_ERR_INVALID_ARGUMENT (updated NULL), TUTTI_ERR_NOT_INITIALIZED, and
 * those of an allreduce (TUTTI_ERR_PEER_LOST, TUTTI_ERR_SHUTDOWN); *updated
 * is left unchanged on error. Runs an allreduce named
 * "tutti.elastic.hosts_updated.<n>": do not use that name.
 */
TUTTI_API int tutti_elastic_hosts_updated(int* updated);

/*
 * Error-feedback residuals of top-k and int8 compression (what this rank
 * still owes its peers from earlier steps, per tensor name) as opaque bytes,
 * so that an elastic training state can commit them with the model and
 * restore them after a membership change (coordinator/residual_codec.h has
 * the format). Rank-local: each rank keeps its own; never broadcast. Take
 * them between steps (no compressed allreduce in flight), as the model.
 *
 * get: *size = the bytes needed; writes them to buffer when capacity is
 * enough (call with buffer NULL, capacity 0 to ask the size). Errors:
 * TUTTI_ERR_INVALID_ARGUMENT (size NULL, or buffer non-NULL with capacity
 * below *size: nothing written), TUTTI_ERR_NOT_INITIALIZED.
 * set: replaces the residuals of every compression spec in the bytes; a
 * residual whose tensor changed shape since is reset to zeros on next use.
 * Errors: TUTTI_ERR_INVALID_ARGUMENT naming what is wrong with the bytes
 * (nothing changes then), TUTTI_ERR_NOT_INITIALIZED. Any thread.
 */
TUTTI_API int tutti_get_compression_residuals(void* buffer, size_t capacity, size_t* size);
TUTTI_API int tutti_set_compression_residuals(const void* data, size_t size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TUTTI_TUTTI_H_ */
