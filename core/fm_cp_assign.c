/* fm_cp_assign.c — the mask-aware sharding's assignment of query chunks to
 * ranks (greedy and exact) and a rank's local mask (fm_cp_plan.h). */
#include <stdlib.h>
#include <string.h>

#include "fm_cp_plan.h"
#include "fm_tile_rule.h"

/* ------------------------------------------------------------ greedy */

/* Items by work descending, ties by index: order (n,). */
static int32_t *by_work(const int64_t *work, int32_t n) {
  int32_t *order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
  if (!order) return NULL;
  for (int32_t i = 0; i < n; i++) order[i] = i;
  /* insertion sort is O(n^2); a merge sort keeps it O(n log n) for 16M / 128 chunks */
  int32_t *tmp = malloc(sizeof *tmp * (size_t)(n > 0 ? n : 1));
  if (!tmp) {
    free(order);
    return NULL;
  }
  for (int32_t width = 1; width < n; width *= 2) {
    for (int32_t lo = 0; lo < n; lo += 2 * width) {
      int32_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int32_t a = lo, b = mid, k = lo;
      while (a < mid && b < hi) {
        int32_t x = order[a], y = order[b];
        int take_b = work[y] > work[x] || (work[y] == work[x] && y < x);
        tmp[k++] = take_b ? order[b++] : order[a++];
      }
      while (a < mid) tmp[k++] = order[a++];
      while (b < hi) tmp[k++] = order[b++];
    }
    memcpy(order, tmp, sizeof *order * (size_t)n);
  }
  free(tmp);
  return order;
}

/* No rank left empty when n >= ranks: an empty rank takes the lightest item
 * of a rank holding two or more (its load is at most that rank's, so the
 * maximum never rises). */
static void fill_empty(const int64_t *work, int32_t n, int32_t ranks, int32_t *owner) {
  if (n < ranks) return;
  int32_t *count = calloc((size_t)ranks, sizeof *count);
  if (!count) return;
  for (int32_t i = 0; i < n; i++) count[owner[i]]++;
  for (int32_t r = 0; r < ranks; r++) {
    if (count[r]) continue;
    int32_t pick = -1;
    for (int32_t i = 0; i < n; i++)
      if (count[owner[i]] >= 2 && (pick < 0 || work[i] < work[pick])) pick = i;
    if (pick < 0) break;
    count[owner[pick]]--;
    owner[pick] = r;
    count[r]++;
  }
  free(count);
}

static int64_t max_load(const int64_t *work, int32_t n, int32_t ranks, const int32_t *owner) {
  int64_t *load = calloc((size_t)ranks, sizeof *load), best = 0;
  if (!load) return -1;
  for (int32_t i = 0; i < n; i++) load[owner[i]] += work[i];
  for (int32_t r = 0; r < ranks; r++)
    if (load[r] > best) best = load[r];
  free(load);
  return best;
}

int64_t fm_cp_assign_greedy(const int64_t *work, int32_t n, int32_t ranks, int32_t *owner) {
  int32_t *order = by_work(work, n);
  int64_t *load = calloc((size_t)ranks, sizeof *load);
  int32_t *count = calloc((size_t)ranks, sizeof *count);
  if (!order || !load || !count) {
    free(order);
    free(load);
    free(count);
    return -1;
  }
  for (int32_t k = 0; k < n; k++) {
    int32_t best = 0;
    for (int32_t r = 1; r < ranks; r++)
      if (load[r] < load[best] || (load[r] == load[best] && count[r] < count[best])) best = r;
    owner[order[k]] = best;
    load[best] += work[order[k]];
    count[best]++;
  }
  free(order);
  free(load);
  free(count);
  fill_empty(work, n, ranks, owner);
  return max_load(work, n, ranks, owner);
}

/* ------------------------------------------------------------ exact */

/* Branch and bound over the items in descending order: each item goes to
 * each rank whose load differs from every lower rank's (ranks of equal load
 * are interchangeable), never where it would reach the best maximum found so
 * far; the search stops at the lower bound max(heaviest item, ceil(total / P)). */
typedef struct bb {
  const int64_t *work;
  const int32_t *order;
  int32_t n, ranks;
  int64_t *load;
  int32_t *cur, *best_owner;
  int64_t best, lower;
  uint64_t nodes;
} bb;

#define BB_MAX_NODES ((uint64_t)1 << 32)

static void bb_search(bb *b, int32_t k, int64_t curmax) {
  if (b->best <= b->lower || b->nodes > BB_MAX_NODES) return;
  b->nodes++;
  if (k == b->n) {
    b->best = curmax;
    memcpy(b->best_owner, b->cur, sizeof *b->cur * (size_t)b->n);
    return;
  }
  int32_t item = b->order[k];
  int64_t w = b->work[item];
  for (int32_t r = 0; r < b->ranks; r++) {
    int64_t after = b->load[r] + w;
    if (after >= b->best) continue;
    int seen = 0;
    for (int32_t q = 0; q < r && !seen; q++) seen = b->load[q] == b->load[r];
    if (seen) continue;
    b->load[r] = after;
    b->cur[item] = r;
    bb_search(b, k + 1, after > curmax ? after : curmax);
    b->load[r] -= w;
    if (b->best <= b->lower || b->nodes > BB_MAX_NODES) return;
  }
}

int64_t fm_cp_assign_exact(const int64_t *work, int32_t n, int32_t ranks, int32_t *owner,
                           fm_err *err) {
  if (n > FM_CP_EXACT_MAX_CHUNKS) {
    fm_fail(err, FM_EUNSUPPORTED, "the exact solver takes at most %d chunks (here %d)",
            FM_CP_EXACT_MAX_CHUNKS, n);
    return -1;
  }
  int64_t greedy = fm_cp_assign_greedy(work, n, ranks, owner);
  bb b = {.work = work, .n = n, .ranks = ranks, .best = greedy};
  int64_t total = 0, heaviest = 0;
  for (int32_t i = 0; i < n; i++) {
    total += work[i];
    if (work[i] > heaviest) heaviest = work[i];
  }
  b.lower = (total + ranks - 1) / ranks > heaviest ? (total + ranks - 1) / ranks : heaviest;
  int32_t *order = by_work(work, n);
  b.order = order;
  b.load = calloc((size_t)ranks, sizeof *b.load);
  b.cur = malloc(sizeof *b.cur * (size_t)(n > 0 ? n : 1));
  b.best_owner = malloc(sizeof *b.best_owner * (size_t)(n > 0 ? n : 1));
  if (greedy < 0 || !order || !b.load || !b.cur || !b.best_owner) {
    fm_fail(err, FM_ENOMEM, "cannot allocate the exact solver's state for %d chunks", n);
    greedy = -1;
  } else if (greedy > b.lower) { /* only a strictly better assignment replaces the greedy one */
    bb_search(&b, 0, 0);
    if (b.nodes > BB_MAX_NODES) {
      fm_fail(err, FM_EUNSUPPORTED, "the exact solver gave up after %llu search nodes (%d chunks "
              "on %d ranks); use the greedy assignment", (unsigned long long)b.nodes, n, ranks);
      greedy = -1;
    } else if (b.best < greedy) {
      memcpy(owner, b.best_owner, sizeof *owner * (size_t)n);
      fill_empty(work, n, ranks, owner);
      greedy = max_load(work, n, ranks, owner);
    }
  }
  free(order);
  free(b.load);
  free(b.cur);
  free(b.best_owner);
  return greedy;
}

/* ------------------------------------------------------------ the rank's mask */

/* Rows of the rank's segments below x: L(x). segs are the rank's own, by row;
 * before (nseg + 1,) their rows before each. */
static int32_t local_row(const fm_cp_segment *segs, const int32_t *before, int32_t nseg, int32_t x) {
  int32_t lo = 0, hi = nseg; /* the first segment with row1 > x */
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    if (segs[mid].row1 > x) hi = mid;
    else lo = mid + 1;
  }
  if (lo == nseg) return before[nseg];
  int32_t in = x - segs[lo].row0;
  return before[lo] + (in > 0 ? in : 0);
}

fm_status fm_cp_rank_mask(const fm_colmask *m, const fm_cp_segment *seg, int32_t nseg,
                          int32_t rank, fm_colmask **out, fm_err *err) {
  *out = NULL;
  int32_t sq = fm_colmask_sq(m), sk = fm_colmask_sk(m), n = 0;
  if (sq != sk)
    return fm_fail(err, FM_EINVAL, "context parallelism needs Sq = Sk (got %d x %d)", sq, sk);
  fm_cp_segment *own = malloc(sizeof *own * (size_t)(nseg > 0 ? nseg : 1));
  int32_t *before = malloc(sizeof *before * (size_t)(nseg + 1));
  if (!own || !before) {
    free(own);
    free(before);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the segments of rank %d", rank);
  }
  before[0] = 0;
  for (int32_t k = 0; k < nseg; k++)
    if (seg[k].rank == rank) {
      own[n] = seg[k];
      before[n + 1] = before[n] + seg[k].row1 - seg[k].row0;
      n++;
    }
  int32_t rows = before[n];
  int causal = fm_colmask_causal(m), keep_causal = causal && n == 1 && own[0].row1 == sq;
  fm_status st = rows > 0 ? fm_colmask_create(rows, sk, fm_colmask_nb(m), fm_colmask_nh(m),
                                              keep_causal, out, err)
                          : fm_fail(err, FM_EINVAL, "rank %d owns no rows", rank);
  for (int32_t s = 0; st == FM_OK && s < fm_colmask_nsets(m); s++) {
    const int32_t *v[4];
    int32_t *w[4];
    for (int q = 0; q < 4; q++) {
      v[q] = fm_colmask_cvec(m, s, (fm_vec)q);
      w[q] = fm_colmask_vec(*out, s, (fm_vec)q);
    }
    for (int32_t j = 0; j < sk; j++) {
      int32_t us = v[FM_UTS][j], ue = v[FM_UTE][j];
      if (causal && !keep_causal) fm_effective_upper(us, ue, 1, j, sq, sk, &us, &ue);
      w[FM_LTS][j] = local_row(own, before, n, v[FM_LTS][j]);
      w[FM_LTE][j] = local_row(own, before, n, v[FM_LTE][j]);
      w[FM_UTS][j] = local_row(own, before, n, us);
      w[FM_UTE][j] = local_row(own, before, n, ue);
    }
  }
  free(own);
  free(before);
  return st;
}
