/* fm_sm90_bwd_dq.h — the sm90 backward's dQ hand-off (kernels/fm_sm90_bwd.cuh),
 * written in plain C so that the host model of the protocol
 * (tests/test_bwd_dq_protocol.c) runs the kernel's own counts, parities, turns
 * and job codes.
 *
 * Each consumer warpgroup w has one staging buffer in shared memory: its part
 * of a query tile's dQ in fp32 (one "use" per visited pair), and at an item's
 * end its 64 keys of dK, then of dV, in bf16 (two more uses). The copy engine
 * reads the buffer (cp.reduce.async.bulk .add into the fp32 accumulator, or
 * cp.async.bulk stores of dK, dV); the instruction is issued by the buffer's
 * writer, thread 0 of producer warp FMBQ_WRITER_WARP0 + w, so that no consumer
 * waits on the copy engine or on a deterministic turn. Use u = 0, 1, ... of the
 * buffer, with two mbarriers per warpgroup:
 *
 *   consumer warpgroup w (every thread)        writer of w (one thread)
 *   wait dq_empty[w], fmbq_empty_parity(u)     wait dq_full[w], fmbq_full_parity(u)
 *   write its part of the buffer                read the job word
 *   fence.proxy.async.shared::cta               [deterministic dQ: wait for the turn]
 *   thread 0: the job word                      issue the job's boxes, commit the group
 *   arrive dq_full[w]                           wait for the group's reads (wait_group.read)
 *                                               arrive dq_empty[w]
 *                                               [deterministic dQ: wait_group 0, fence,
 *                                                pass the turn]
 *
 * Phase u of dq_full completes when the 128 consumer threads have written use
 * u (FMBQ_FULL_COUNT arrivals: every thread that wrote the buffer arrives
 * itself, the project's hand-off rule); phase u of dq_empty when the copy
 * engine has read it (FMBQ_EMPTY_COUNT: the writer). A consumer thread cannot
 * arrive for use u + 1 before phase u of dq_empty, which needs phase u of
 * dq_full: so each barrier is at most one phase ahead of its waiter, and a
 * parity wait cannot miss a phase. The first use waits for parity 1 on a fresh
 * barrier, which passes at once.
 *
 * Deterministic mode: every (batch, head, query tile) has FMBQ_NCW counters;
 * the key tiles that visit query tile m add their dQ parts in the order of
 * kernels/fm_sm90_bwd_order.h: the one with turn t (its rank among m's
 * visitors, from the order's turn table) adds on fmbq_turn(t) and passes
 * fmbq_turn_after(t) once its addition has completed. Key tiles that skip m
 * take no turn and pass nothing. Head dim 128 (the warpgroups own different
 * columns): counter w, turns t. Head dim 64 (both warpgroups add to all
 * columns): counter 0, turns FMBQ_NCW t + w. */
#ifndef FM_SM90_BWD_DQ_H
#define FM_SM90_BWD_DQ_H

#include <stdint.h>

#ifdef __CUDACC__
#define FMBQ_FN __host__ __device__ __forceinline__
#else
#define FMBQ_FN static inline
#endif

enum {
  FMBQ_NCW = 2,                      /* consumer warpgroups, each with its buffer and writer */
  FMBQ_WG_THREADS = 128,             /* threads of a consumer warpgroup: every one arrives on dq_full */
  FMBQ_FULL_COUNT = FMBQ_WG_THREADS, /* dq_full: arrivals per phase */
  FMBQ_EMPTY_COUNT = 1,              /* dq_empty: arrivals per phase (the writer) */
  FMBQ_WRITER_WARP0 = 2              /* producer warp of warpgroup 0's writer; w's is 2 + w */
};

/* The job word's first field: >= 0 the dQ part of that query tile; else one of these. */
enum { FMBQ_JOB_DK = -1, FMBQ_JOB_DV = -2, FMBQ_JOB_END = -3 };

/* The job word of a use (8 bytes in shared memory per warpgroup; written by
 * consumer thread 0 before its dq_full arrival; the consumers keep only the
 * item number, the writer derives key tile, batch and head from it). */
typedef struct {
  int32_t code; /* query tile, or FMBQ_JOB_* */
  int32_t item; /* the work item: (batch, head) and key tile */
} fmbq_job;

/* The index of a use, from the consumer's own counts: before a use, dq_done dQ
 * parts staged and items_done items finished (each FMBQ_ITEM_USES more: dK,
 * dV); dK of the item is fmbq_use(dq_done, items_done), dV the one after, the
 * END job fmbq_use(all dQ parts, all items). In the kernel, dq_done is the dS^T
 * tile count ds_iter (each visited tile's dQ is staged once, the pending one
 * at ds_iter - 1) and items_done the item loop's it_n, so the use needs no
 * register of its own. */
enum { FMBQ_ITEM_USES = 2 };
FMBQ_FN int fmbq_use(int dq_done, int items_done) { return dq_done + FMBQ_ITEM_USES * items_done; }

/* mbarrier.try_wait.parity p succeeds once the phase of parity p has
 * completed. Use u needs dq_empty's phase u - 1 (the read of use u - 1) and
 * provides dq_full's phase u. */
FMBQ_FN uint32_t fmbq_empty_parity(int u) { return ((uint32_t)u & 1u) ^ 1u; }
FMBQ_FN uint32_t fmbq_full_parity(int u) { return (uint32_t)u & 1u; }

/* Deterministic turns. The counter of (bh, query tile m) that warpgroup w's
 * addition waits on (an index into the kernel's sem array), the value it waits
 * for as the visitor with turn t (fm_sm90_bwd_order.h), and the value it
 * passes on. */
FMBQ_FN int64_t fmbq_sem_slot(int split_keys, int64_t bh, int32_t tr, int32_t m, int w) {
  return (bh * tr + m) * FMBQ_NCW + (split_keys ? 0 : w);
}
FMBQ_FN int32_t fmbq_turn(int split_keys, int32_t t, int w) { return split_keys ? FMBQ_NCW * t + w : t; }
FMBQ_FN int32_t fmbq_turn_after(int split_keys, int32_t t, int w) { return fmbq_turn(split_keys, t, w) + 1; }

#endif
