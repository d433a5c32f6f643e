/*
 * tutti_p2p.h: tagged point-to-point messages of tutti's C ABI, a part of
 * tutti.h (which includes it; include tutti.h). Same ABI rules, same library.
 */
#ifndef TUTTI_TUTTI_P2P_H_
#define TUTTI_TUTTI_P2P_H_

#include "tutti.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A message from one rank to another, for pipeline parallelism:
 * tutti_send_async() sends `input` to global rank `dst`, tutti_recv_async()
 * receives the message from global rank `src` into `output`. Both return a
 * handle at once (tutti_poll, tutti_wait, tutti_handle_on_complete,
 * tutti_release as for the collectives); the memory is borrowed until the
 * handle completed (the input unchanged, the output not read).
 *
 * Matching: the n-th send from rank s to rank d with tag t meets the n-th
 * recv on d from s with tag t, in posting order on each side (messages
 * between a pair with one tag never overtake each other, as in MPI);
 * messages with other tags or between other ranks are independent and may
 * complete in any order. There are no wildcards (any source, any tag). Only
 * the two ranks take part: the other ranks of the process set call nothing.
 * The message is matched through rank 0's negotiation (one round trip to
 * rank 0 before the data moves, docs/negotiation.md), then goes directly
 * from sender to receiver over the job's transport (tcp: sockets, or shared
 * memory between ranks of one host; mpi: MPI_Isend/MPI_Irecv).
 *
 * Tensors: any dtype, CPU memory (device TUTTI_DEVICE_CPU), any number of
 * elements (0: completes without moving data). Sender and receiver must
 * agree on the dtype and the number of elements (shapes may differ);
 * otherwise both handles complete with TUTTI_ERR_MISMATCH, whose message
 * names the message ("p2p 0->1 tag 7 #3": sender, receiver, tag, number),
 * both dtypes and counts.
 *
 * options: NULL, or the process set (process_set_id; src/dst stay global
 * ranks, members of the set); compression is ignored.
 *
 * Returns TUTTI_OK, or at once: TUTTI_ERR_INVALID_ARGUMENT (handle NULL; a
 * peer that is not another member of the set, oneself included, as in
 * torch.distributed; a bad tensor descriptor; a CUDA tensor, which also
 * fails the matching message on the peer), TUTTI_ERR_NOT_INITIALIZED,
 * TUTTI_ERR_SHUTDOWN, TUTTI_ERR_PEER_LOST once a peer was lost. The handle
 * may complete with TUTTI_ERR_MISMATCH (above), TUTTI_ERR_PEER_LOST (the
 * peer died or made no progress for TUTTI_TIMEOUT_SECONDS), TUTTI_ERR_STALLED
 * (the peer never posted the matching call within
 * TUTTI_STALL_SHUTDOWN_TIME_SECONDS; rank 0 logs it after
 * TUTTI_STALL_CHECK_TIME_SECONDS), TUTTI_ERR_SHUTDOWN. Any thread; two
 * threads posting to one peer with one tag at once are numbered in the
 * order their calls take the runtime's lock.
 */
TUTTI_API int tutti_send_async(const tutti_tensor* input, int dst, int tag,
                               const tutti_op_options* options, tutti_handle* handle);
TUTTI_API int tutti_recv_async(const tutti_tensor* output, int src, int tag,
                               const tutti_op_options* options, tutti_handle* handle);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TUTTI_TUTTI_P2P_H_ */
