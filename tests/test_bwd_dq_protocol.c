/* The dQ hand-off of the sm90 backward (kernels/fm_sm90_bwd.cuh: the
 * consumers' stage_dq / store_dkdv / END, the writers' dq_writer, the
 * producer's ring), host only: a state machine of the agents of one or more
 * CTAs, explored over every interleaving (depth-first, visited states hashed)
 * or along random schedules, in both modes and both ways of sharing the
 * deterministic counters (head dim 128: a counter per warpgroup; head dim 64:
 * one counter, turns 2 t + w, t the key tile's rank among the query tile's
 * visitors in take order, kernels/fm_sm90_bwd_order.h).
 *
 * What comes from the kernel's own header (kernels/fm_sm90_bwd_dq.h, which the
 * kernel uses for the same purposes): the barrier counts and who arrives how
 * often, the wait parities, the use index of every staging use, the
 * deterministic counter slots, turns and passes, the job codes. What is a copy
 * of the kernel's code (keep in step): the order of the steps of each agent,
 * listed at each agent below.
 *
 * Checked at every step: no consumer writes a staging buffer while a copy of
 * it is being read by the copy engine; the writer reads the job word of the
 * use it waited for and copies a buffer that holds that use; in deterministic
 * mode, every (query tile, column part)'s dQ additions complete in the rule's
 * take order. At the end of every schedule: nobody waits forever (a state
 * where no agent can move and one has not finished is a deadlock), every
 * visited pair was added once per warpgroup, every dK and dV stored once. The
 * negative tests (mutations of the protocol) show that each check can fail.
 *
 * The consumers' schedule (consumer): both warpgroups at once with one
 * 256-thread barrier per tile at head dim 128 and this tile's dQ staged before
 * the release; the model also checks that no warpgroup writes a dS^T buffer
 * that a dQ wgmma is still reading (the two buffers and BAR_DS). (The
 * ping-pong schedule, whose model sat here beside it, was removed with the
 * kernel's.)
 *
 * Model choices: a consumer warpgroup is one agent whose 128 threads arrive
 * together (FMBQ_WG_THREADS arrivals in one step); the copy engine finishes a group's read, then (deterministic dQ
 * additions; every other copy's write with its read) its write, at any later
 * time; a warpgroup's steps that touch only its own state are taken together
 * with the step before them (they commute with every other agent's); key tiles
 * below the lowest modelled one are a "stub" that passes each query tile's
 * turns at any time. One CTA is explored exhaustively; several CTAs (whose
 * product is out of reach) along random schedules. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_sm90_bwd_dq.h"

enum { MAXK = 5, MAXC = 3, MAXI = 3, MAXT = 4, NW = FMBQ_NCW, STAGES = 2, MAXOPS = 4 };
enum { M_NONE, M_EMPTY_PARITY, M_ARRIVE_BEFORE_READ, M_PASS_BEFORE_DONE, M_JOB_AFTER_ARRIVE, M_ITEM_USES,
       M_TURN_BY_KEY, M_TURN_DESC, M_FULL_HALF, M_ONE_DS_BUFFER };

typedef struct {
  int split, det;                 /* split keys (head dim 64), deterministic mode */
  int nctas, nitems[MAXC];        /* CTAs and their items (key tiles, increasing) */
  int items[MAXC][MAXI];
  int tr, batch;                  /* query tiles; the producer classifies `batch` at a time (32) */
  unsigned visit[MAXK];           /* per key tile: bit m = query tile m visited */
  int n0;                         /* lowest key tile modelled; the stub stands for those below */
  int pos[MAXK];                  /* take position of each key tile (fm_sm90_bwd_order.h; the stub's: below all) */
  int mutation;
} cfg_t;

/* ------------------------------------------------------------------- state */

typedef struct {
  uint8_t pending, phase; /* arrivals left in the current phase; phases completed (mod 256) */
} mbar_t;
typedef struct {
  uint8_t st; /* 1: reading the buffer, 2: read done, writing */
  int8_t code;
  uint8_t n;
  int16_t tag;
} op_t;

enum { EMPTY_ENTRY = -2 };
enum { C_ITEM, C_QFULL, C_KVEMPTY, C_DV, C_ITEMDONE, C_END,
       C_DONE, S_TAKE, S_WRITE, S_JOB, S_ARRIVE, C_WDS, C_BAR, C_BARWAIT, C_DQDONE, C_REL2 };
enum { W_FULL, W_JOB, W_SEM, W_ISSUE, W_READ, W_EMPTY, W_ALL, W_PASS, W_FIN, W_DONE };
enum { P_SKIP, P_EMIT, P_LAST, P_NEXT, P_DONE };

typedef struct {
  /* producer */
  uint8_t p_item, p_stage, p_batch, p_emit, p_slot[MAXT];
  int8_t p_pend;
  uint8_t q_issued, q_rel[NW], kv_done[NW];
  int8_t ring_m[STAGES];
  uint8_t ring_last[STAGES];
  /* consumer warpgroups */
  uint8_t c_pc[NW], c_it[NW], c_q[NW], c_ds[NW], c_k[NW], c_last[NW], c_ret[NW], c_u[NW];
  int8_t c_m[NW], c_code[NW];
  int8_t c_rd[NW]; /* the dS^T buffer warpgroup w's dQ wgmma is reading, -1 none */
  /* writers */
  uint8_t w_pc[NW], w_u[NW], w_n[NW];
  int8_t w_code[NW];
  /* the hand-off */
  mbar_t full[NW], empty[NW];
  int16_t buf[NW]; /* what the staging buffer holds (tag), -1 nothing */
  int8_t job_code[NW];
  uint8_t job_n[NW], job_u[NW];
  uint8_t nops[NW];
  op_t ops[NW][MAXOPS];
} cta_t;

typedef struct {
  cta_t cta[MAXC];
  uint8_t sem[MAXT * NW];
  uint8_t stub[MAXT];         /* the stub has passed tile m's counters */
  int8_t last_add[MAXT][NW];  /* deterministic: the last completed addition's key per (tile, part) */
  uint8_t added[MAXK][MAXT];  /* bit w: (n, m) added by warpgroup w */
  uint8_t dkdv[MAXK];         /* bits w (dK) and 2 + w (dV) */
} state_t;

static char g_why[256];
static int g_bad, g_capped; /* capped: the model's own limits reached (no verdict) */
static void violation(const char *what, int c, int w) {
  if (!g_bad) snprintf(g_why, sizeof g_why, "%s (CTA %d, warpgroup %d)", what, c, w);
  g_bad = 1;
}

static int16_t tag_of(int code, int n) { return (int16_t)((code + 8) * 16 + n); }
static int try_wait(const mbar_t *b, uint32_t parity) { return (uint32_t)(b->phase & 1) != parity; }
static void arrive(mbar_t *b, int times, int count) {
  for (int i = 0; i < times; i++)
    if (--b->pending == 0) {
      b->phase++;
      b->pending = (uint8_t)count;
    }
}
static int part_of(const cfg_t *g, int w) { return g->split ? 0 : w; }
static int visited(const cfg_t *g, int n, int m) { return (g->visit[n] >> m) & 1; }
/* the rule's order of additions: take position (head dim 64: both warpgroups of a key tile in turn) */
static int key_of(const cfg_t *g, int n, int w) { return g->split ? FMBQ_NCW * g->pos[n] + w : g->pos[n]; }
/* The turn of key tile n at query tile m (fm_sm90_bwd_order.h, rule 3): its rank among m's
 * visitors in take order, after the stub's n0 (which visit every tile). Mutations: the
 * earlier kernel's turn n without the skipped tiles' passes; ranks in reverse take order. */
static int turn_of(const cfg_t *g, int n, int m) {
  if (g->mutation == M_TURN_BY_KEY) return n;
  int t = g->n0;
  for (int k = g->n0; k < MAXK; k++)
    if (k != n && visited(g, k, m) && (g->mutation == M_TURN_DESC ? g->pos[k] > g->pos[n] : g->pos[k] < g->pos[n]))
      t++;
  return t;
}
static int sem_slots(const cfg_t *g) { return g->split ? 1 : NW; }
static int sem_index(const cfg_t *g, int m, int s) { return (int)fmbq_sem_slot(g->split, 0, g->tr, m, s); }

/* dq_full's arrivals per phase (M_FULL_HALF: half the warpgroup's threads) */
static int full_count(const cfg_t *g) { return g->mutation == M_FULL_HALF ? FMBQ_FULL_COUNT / 2 : FMBQ_FULL_COUNT; }
static void init_state(const cfg_t *g, state_t *s) {
  memset(s, 0, sizeof *s);
  for (int c = 0; c < g->nctas; c++) {
    cta_t *t = &s->cta[c];
    t->p_pend = -1;
    for (int w = 0; w < NW; w++) {
      t->c_rd[w] = -1;
      t->full[w].pending = (uint8_t)full_count(g);
      t->empty[w].pending = FMBQ_EMPTY_COUNT;
      t->buf[w] = -1;
      t->job_code[w] = 99;
    }
  }
  for (int m = 0; m < MAXT; m++)
    for (int p = 0; p < NW; p++) s->last_add[m][p] = -1; /* the stub's additions come first */
  if (g->n0 == 0 || !g->det) /* no stub: nothing below, or nobody waits for it */
    for (int m = 0; m < g->tr; m++) s->stub[m] = 1;
}

/* --------------------------------------------------------------- producer */

/* The kernel's producer (fm_sm90_bwd.cuh, producer and fmd::warp_compact): per
 * item, per batch of query tiles, the batch's visited tiles into the ring, one
 * behind (the last is held until the next one or the end, F_LAST); an item
 * with none: an EMPTY entry. The next item after both warpgroups' kv_empty. A
 * skipped tile takes no turn (fm_sm90_bwd_order.h): the P_SKIP stage of the
 * earlier kernel, which passed them, has nothing left to do. */
static int ring_issue(cta_t *t, int m, int last) {
  const int lo = t->q_rel[0] < t->q_rel[1] ? t->q_rel[0] : t->q_rel[1];
  if (t->q_issued >= lo + STAGES) return 0;
  t->ring_m[t->q_issued % STAGES] = (int8_t)m;
  t->ring_last[t->q_issued % STAGES] = (uint8_t)last;
  t->q_issued++;
  return 1;
}
static int skip_task(const cfg_t *g, int n, int m) { return (void)g, (void)n, (void)m, 0; }
/* the producer's moves that wait for nobody, done at once */
static void producer_settle(const cfg_t *g, int c, cta_t *t) {
  for (;;) {
    if (t->p_stage == P_SKIP) {
      const int n = g->items[c][t->p_item], lo = t->p_batch * g->batch;
      int left = 0;
      for (int m = lo; m < lo + g->batch && m < g->tr; m++)
        left |= skip_task(g, n, m) && t->p_slot[m] < sem_slots(g);
      if (left) return;
      t->p_stage = P_EMIT;
      t->p_emit = 0;
    } else if (t->p_stage == P_EMIT) {
      const int n = g->items[c][t->p_item], m = t->p_batch * g->batch + t->p_emit;
      if (t->p_emit >= g->batch || m >= g->tr) {
        t->p_batch++;
        memset(t->p_slot, 0, sizeof t->p_slot);
        t->p_stage = t->p_batch * g->batch >= g->tr ? P_LAST : P_SKIP;
        continue;
      }
      if (!visited(g, n, m)) {
        t->p_emit++;
        continue;
      }
      if (t->p_pend >= 0) return; /* an issue: a visible move */
      t->p_pend = (int8_t)m;
      t->p_emit++;
    } else {
      return;
    }
  }
}
static int producer_step(const cfg_t *g, state_t *s, int c, int choice) {
  cta_t *t = &s->cta[c];
  const int n = t->p_stage == P_DONE ? 0 : g->items[c][t->p_item];
  switch (t->p_stage) {
  case P_SKIP: { /* choice: the tile whose lane moves */
    const int m = t->p_batch * g->batch + choice;
    (void)s;
    if (choice >= g->batch || m >= g->tr || !skip_task(g, n, m) || t->p_slot[m] >= sem_slots(g)) return 0;
    t->p_slot[m]++;
    break;
  }
  case P_EMIT: {
    if (choice) return 0;
    const int m = t->p_batch * g->batch + t->p_emit;
    if (!ring_issue(t, t->p_pend, 0)) return 0;
    t->p_pend = (int8_t)m;
    t->p_emit++;
    break;
  }
  case P_LAST:
    if (choice || !ring_issue(t, t->p_pend >= 0 ? t->p_pend : EMPTY_ENTRY, 1)) return 0;
    t->p_pend = -1;
    t->p_stage = P_NEXT;
    break;
  case P_NEXT:
    if (choice || t->kv_done[0] <= t->p_item || t->kv_done[1] <= t->p_item) return 0;
    if (t->p_item + 1 < g->nitems[c]) {
      t->p_item++;
      t->p_stage = P_SKIP;
      t->p_batch = 0;
      memset(t->p_slot, 0, sizeof t->p_slot);
    } else {
      t->p_stage = P_DONE;
    }
    break;
  default:
    return 0;
  }
  producer_settle(g, c, t);
  return 1;
}

/* --------------------------------------------------------------- consumers */

/* A consumer warpgroup (fm_sm90_bwd.cuh, consumer): per item, per ring entry:
 * q_full; EMPTY: release, end of the tile loop; else its half of dS^T written
 * (head dim 128: BAR_DS), this tile's dQ staged (stage_dq, use
 * fmbq_use(ds_iter, it_n)), the release of the entry; then kv_empty, dK and dV
 * (store_dkdv, uses fmbq_use(ds_iter, it_n) and the next); after the last
 * item the END job (fmbq_use(ds_iter, it_n)). A staging use (take_stage,
 * the stores, hand_stage): wait dq_empty at fmbq_empty_parity(u); write; the
 * job word; FMBQ_WG_THREADS arrivals on dq_full. */
static void stage(cta_t *t, int w, int code, int u, int ret) {
  t->c_code[w] = (int8_t)code;
  t->c_u[w] = (uint8_t)u;
  t->c_ret[w] = (uint8_t)ret;
  t->c_pc[w] = S_TAKE;
}
static int use_of(const cfg_t *g, int dq_done, int items_done) {
  return g->mutation == M_ITEM_USES ? dq_done + items_done : fmbq_use(dq_done, items_done);
}
static int consumer_move(const cfg_t *g, state_t *s, int c, int w) {
  cta_t *t = &s->cta[c];
  const int item_n = t->c_it[w] < g->nitems[c] ? g->items[c][t->c_it[w]] : 0;
  switch (t->c_pc[w]) {
  case C_ITEM:
    if (t->c_it[w] >= g->nitems[c]) {
      t->c_pc[w] = C_END;
      return 1;
    }
    if (t->p_item < t->c_it[w]) return 0; /* kv_full: the producer has taken the item */
    t->c_pc[w] = C_QFULL;
    return 1;
  case C_QFULL: {
    if (t->q_issued <= t->c_q[w]) return 0;
    const int m = t->ring_m[t->c_q[w] % STAGES];
    t->c_last[w] = t->ring_last[t->c_q[w] % STAGES];
    t->c_q[w]++;
    if (m == EMPTY_ENTRY) {
      t->q_rel[w]++;
      t->c_pc[w] = C_KVEMPTY;
    } else {
      t->c_m[w] = (int8_t)m;
      t->c_pc[w] = C_WDS;
    }
    return 1;
  }
  /* write this warpgroup's half of dS^T to
     buffer ds_iter & 1; head dim 128: BAR_DS (both warpgroups) before the dQ
     wgmma, which reads both halves (head dim 64: its own half, no barrier)
     until the wait that precedes the staging; this tile's dQ staged; release */
  case C_WDS: {
    const int b = g->mutation == M_ONE_DS_BUFFER ? 0 : t->c_ds[w] & 1;
    for (int v = 0; v < NW; v++)
      if (t->c_rd[v] == b && (v == w || !g->split))
        violation("dS^T buffer written while a dQ wgmma reads it", c, w);
    if (g->split) {
      t->c_rd[w] = (int8_t)b;
      t->c_pc[w] = C_DQDONE;
    } else {
      t->c_k[w]++; /* arrives on BAR_DS */
      t->c_pc[w] = C_BARWAIT;
    }
    return 1;
  }
  case C_BARWAIT:
    if (t->c_k[w ^ 1] < t->c_k[w]) return 0;
    t->c_rd[w] = (int8_t)(g->mutation == M_ONE_DS_BUFFER ? 0 : t->c_ds[w] & 1);
    t->c_pc[w] = C_DQDONE;
    return 1;
  case C_DQDONE:
    t->c_rd[w] = -1;
    stage(t, w, t->c_m[w], use_of(g, t->c_ds[w], t->c_it[w]), C_REL2);
    return 1;
  case C_REL2:
    t->q_rel[w]++;
    t->c_ds[w]++;
    t->c_pc[w] = t->c_last[w] ? C_KVEMPTY : C_QFULL;
    return 1;
  case C_KVEMPTY:
    t->kv_done[w]++;
    stage(t, w, FMBQ_JOB_DK, use_of(g, t->c_ds[w], t->c_it[w]), C_DV);
    return 1;
  case C_DV:
    stage(t, w, FMBQ_JOB_DV, use_of(g, t->c_ds[w], t->c_it[w]) + 1, C_ITEMDONE);
    return 1;
  case C_ITEMDONE:
    t->c_it[w]++;
    t->c_pc[w] = C_ITEM;
    return 1;
  case C_END:
    stage(t, w, FMBQ_JOB_END, use_of(g, t->c_ds[w], t->c_it[w]), C_DONE);
    return 1;
  case S_TAKE: {
    const uint32_t par =
        g->mutation == M_EMPTY_PARITY ? fmbq_full_parity(t->c_u[w]) : fmbq_empty_parity(t->c_u[w]);
    if (!try_wait(&t->empty[w], par)) return 0;
    t->c_pc[w] = t->c_code[w] == FMBQ_JOB_END ? S_JOB : S_WRITE;
    return 1;
  }
  case S_WRITE:
    for (int i = 0; i < t->nops[w]; i++)
      if (t->ops[w][i].st == 1) violation("staging buffer written while the copy engine reads it", c, w);
    t->buf[w] = tag_of(t->c_code[w], item_n);
    t->c_pc[w] = g->mutation == M_JOB_AFTER_ARRIVE ? S_ARRIVE : S_JOB;
    return 1;
  case S_JOB:
    t->job_code[w] = t->c_code[w];
    t->job_n[w] = (uint8_t)item_n;
    t->job_u[w] = t->c_u[w];
    t->c_pc[w] = g->mutation == M_JOB_AFTER_ARRIVE && t->c_code[w] != FMBQ_JOB_END ? t->c_ret[w] : S_ARRIVE;
    return 1;
  case S_ARRIVE:
    arrive(&t->full[w], FMBQ_WG_THREADS, full_count(g));
    t->c_pc[w] = g->mutation == M_JOB_AFTER_ARRIVE && t->c_code[w] != FMBQ_JOB_END ? S_JOB : t->c_ret[w];
    return 1;
  default:
    return 0;
  }
}

/* A step, then the steps that touch only the warpgroup's own state (or wait
 * for nothing but the producer's item count, which only grows), done at once:
 * they commute with every other agent's, so this prunes no interleaving that
 * matters. */
static int consumer_private(const cta_t *t, int w) {
  const int pc = t->c_pc[w];
  return pc == C_DV || pc == C_ITEMDONE || pc == C_END ||
         (pc == C_ITEM && t->p_item >= t->c_it[w]);
}
static int consumer_step(const cfg_t *g, state_t *s, int c, int w) {
  if (!consumer_move(g, s, c, w)) return 0;
  while (consumer_private(&s->cta[c], w)) consumer_move(g, s, c, w);
  return 1;
}

/* ----------------------------------------------------------------- writers */

/* dq_writer (fm_sm90_bwd.cuh): wait dq_full at fmbq_full_parity(u); read the
 * job; END: wait for every copy, done; a dQ job in deterministic mode waits
 * for fmbq_turn; issue the copy; wait for its read; one arrival on dq_empty;
 * deterministic dQ: wait for the copy's completion, pass fmbq_turn_after. */
static int reads_done(const cta_t *t, int w) {
  for (int i = 0; i < t->nops[w]; i++)
    if (t->ops[w][i].st == 1) return 0;
  return 1;
}
static int writer_step(const cfg_t *g, state_t *s, int c, int w) {
  cta_t *t = &s->cta[c];
  const int code = t->w_code[w], n = t->w_n[w], dq = code >= 0;
  switch (t->w_pc[w]) {
  case W_FULL:
    if (!try_wait(&t->full[w], fmbq_full_parity(t->w_u[w]))) return 0;
    t->w_pc[w] = W_JOB;
    return 1;
  case W_JOB:
    if (t->job_u[w] != t->w_u[w]) violation("the writer read the job word of another use", c, w);
    t->w_code[w] = t->job_code[w];
    t->w_n[w] = t->job_n[w];
    if (t->w_code[w] == FMBQ_JOB_END) {
      t->w_pc[w] = W_FIN;
      return 1;
    }
    if (t->buf[w] != tag_of(t->w_code[w], t->w_n[w]))
      violation("the writer copies a staging buffer that does not hold its use", c, w);
    t->w_pc[w] = g->det && t->w_code[w] >= 0 ? W_SEM : W_ISSUE;
    return 1;
  case W_SEM:
    if (s->sem[sem_index(g, code, w)] != fmbq_turn(g->split, turn_of(g, n, code), w)) return 0;
    t->w_pc[w] = W_ISSUE;
    return 1;
  case W_ISSUE: {
    if (t->nops[w] >= MAXOPS) {
      violation("model: more copies in flight than MAXOPS", c, w);
      g_capped = 1;
      return 1;
    }
    op_t *o = &t->ops[w][t->nops[w]++];
    o->st = 1;
    o->code = (int8_t)code;
    o->n = (uint8_t)n;
    o->tag = t->buf[w];
    t->w_pc[w] = g->mutation == M_ARRIVE_BEFORE_READ ? W_EMPTY : W_READ;
    return 1;
  }
  case W_READ:
    if (!reads_done(t, w)) return 0;
    if (g->mutation == M_ARRIVE_BEFORE_READ) {
      t->w_pc[w] = g->det && dq ? W_ALL : W_FULL;
      if (t->w_pc[w] == W_FULL) t->w_u[w]++;
    } else {
      t->w_pc[w] = W_EMPTY;
    }
    return 1;
  case W_EMPTY:
    arrive(&t->empty[w], 1, FMBQ_EMPTY_COUNT);
    if (g->mutation == M_ARRIVE_BEFORE_READ) {
      t->w_pc[w] = W_READ;
    } else if (g->det && dq) {
      t->w_pc[w] = g->mutation == M_PASS_BEFORE_DONE ? W_PASS : W_ALL;
    } else {
      t->w_u[w]++;
      t->w_pc[w] = W_FULL;
    }
    return 1;
  case W_ALL:
    if (t->nops[w]) return 0;
    t->w_pc[w] = W_PASS;
    return 1;
  case W_PASS:
    s->sem[sem_index(g, code, w)] = (uint8_t)fmbq_turn_after(g->split, turn_of(g, n, code), w);
    t->w_u[w]++;
    t->w_pc[w] = W_FULL;
    return 1;
  case W_FIN:
    if (t->nops[w]) return 0;
    t->w_pc[w] = W_DONE;
    return 1;
  default:
    return 0;
  }
}

/* ------------------------------------------------- copy engine, stub, end */

static int op_step(const cfg_t *g, state_t *s, int c, int w, int i) {
  cta_t *t = &s->cta[c];
  if (i >= t->nops[w]) return 0;
  op_t *o = &t->ops[w][i];
  if (o->st == 1) {
    if (t->buf[w] != o->tag) violation("staging buffer changed under the copy engine's read", c, w);
    o->st = 2;
    /* the order of completions matters only for the deterministic additions:
       every other copy's write completes with its read (fewer states; a later
       completion would only make the writer's waits longer) */
    if (g->det && o->code >= 0) return 1;
  }
  if (o->code >= 0) { /* the dQ addition lands */
    const int p = part_of(g, w), k = key_of(g, o->n, w);
    if (g->det && s->last_add[o->code][p] >= k) violation("deterministic dQ additions out of take order", c, w);
    if (s->last_add[o->code][p] < k) s->last_add[o->code][p] = (int8_t)k;
    if (s->added[o->n][o->code] & (1u << w)) violation("a dQ part added twice", c, w);
    s->added[o->n][o->code] |= (uint8_t)(1u << w);
  } else {
    const unsigned bit = 1u << (o->code == FMBQ_JOB_DK ? w : 2 + w);
    if (s->dkdv[o->n] & bit) violation("dK or dV stored twice", c, w);
    s->dkdv[o->n] |= (uint8_t)bit;
  }
  memmove(&t->ops[w][i], &t->ops[w][i + 1], (size_t)(t->nops[w] - i - 1) * sizeof(op_t));
  t->nops[w]--;
  memset(&t->ops[w][t->nops[w]], 0, sizeof(op_t));
  return 1;
}
/* the key tiles below n0: the counters of each query tile passed to n0's
   turns, tile by tile in any order, at any time */
static int stub_step(const cfg_t *g, state_t *s, int m) {
  if (m >= g->tr || s->stub[m]) return 0;
  for (int sl = 0; sl < sem_slots(g); sl++)
    s->sem[sem_index(g, m, sl)] = (uint8_t)fmbq_turn(g->split, g->n0, sl);
  s->stub[m] = 1;
  return 1;
}

static int finished(const cfg_t *g, const state_t *s) {
  for (int c = 0; c < g->nctas; c++) {
    const cta_t *t = &s->cta[c];
    if (t->p_stage != P_DONE) return 0;
    for (int w = 0; w < NW; w++)
      if (t->c_pc[w] != C_DONE || t->w_pc[w] != W_DONE || t->nops[w]) return 0;
  }
  for (int m = 0; m < g->tr; m++)
    if (!s->stub[m]) return 0;
  return 1;
}
/* every visited pair added once per warpgroup, nothing else; dK, dV once */
static void check_outcome(const cfg_t *g, const state_t *s) {
  for (int c = 0; c < g->nctas; c++)
    for (int i = 0; i < g->nitems[c]; i++) {
      const int n = g->items[c][i];
      for (int m = 0; m < g->tr; m++)
        if (s->added[n][m] != (visited(g, n, m) ? (1u << NW) - 1 : 0)) violation("dQ parts missing or extra", c, m);
      if (s->dkdv[n] != 0xf) violation("dK or dV missing", c, n);
    }
}

/* ---------------------------------------------------------------- explorer */

/* Transition t of state s: CTA-local moves (producer lanes, two consumers, two
 * writers, copies) and the stub's. Returns 1 and the successor if enabled. */
enum { T_PROD = 4, T_PER_CTA = 4 + 2 * NW + NW * MAXOPS };
static int n_transitions(const cfg_t *g) { return g->nctas * T_PER_CTA + MAXT; }
static int transition(const cfg_t *g, const state_t *s, int k, state_t *out) {
  if (k >= g->nctas * T_PER_CTA) {
    k -= g->nctas * T_PER_CTA;
    if (k >= g->tr || s->stub[k]) return 0;
    *out = *s;
    return stub_step(g, out, k);
  }
  const int c = k / T_PER_CTA;
  k %= T_PER_CTA;
  if (k < T_PROD) {
    if (s->cta[c].p_stage == P_DONE || (k && s->cta[c].p_stage != P_SKIP)) return 0;
    *out = *s;
    return producer_step(g, out, c, k);
  }
  k -= T_PROD;
  if (k < NW) {
    if (s->cta[c].c_pc[k] == C_DONE) return 0;
    *out = *s;
    return consumer_step(g, out, c, k);
  }
  k -= NW;
  if (k < NW) {
    if (s->cta[c].w_pc[k] == W_DONE) return 0;
    *out = *s;
    return writer_step(g, out, c, k);
  }
  k -= NW;
  if (k % MAXOPS >= s->cta[c].nops[k / MAXOPS]) return 0;
  *out = *s;
  return op_step(g, out, c, k / MAXOPS, k % MAXOPS);
}

/* two independent 64-bit hashes of the state's bytes */
static void hash_state(const state_t *s, uint64_t *a, uint64_t *b) {
  const unsigned char *p = (const unsigned char *)s;
  uint64_t h = 0xcbf29ce484222325ull, k = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizeof *s; i++) {
    h = (h ^ p[i]) * 0x100000001b3ull;
    k = (k + p[i] + 1) * 0xff51afd7ed558ccdull;
    k ^= k >> 29;
  }
  *a = h ? h : 1;
  *b = k;
}
typedef struct {
  uint64_t *a, *b;
  size_t cap, n;
} seen_t;
/* 1 if new (two independent 64-bit hashes of the state: a false "seen" needs
   both to collide) */
static int seen_add(seen_t *t, const state_t *s) {
  uint64_t a, b;
  hash_state(s, &a, &b);
  if (2 * t->n >= t->cap) {
    seen_t u = {calloc(2 * t->cap, 8), calloc(2 * t->cap, 8), 2 * t->cap, 0};
    cr_assert(u.a && u.b);
    for (size_t i = 0; i < t->cap; i++)
      if (t->a[i]) {
        size_t j = t->a[i] & (u.cap - 1);
        while (u.a[j]) j = (j + 1) & (u.cap - 1);
        u.a[j] = t->a[i], u.b[j] = t->b[i], u.n++;
      }
    free(t->a), free(t->b);
    *t = u;
  }
  size_t j = a & (t->cap - 1);
  for (; t->a[j]; j = (j + 1) & (t->cap - 1))
    if (t->a[j] == a && t->b[j] == b) return 0;
  t->a[j] = a, t->b[j] = b, t->n++;
  return 1;
}

typedef struct {
  int ok, capped;
  size_t states;
} result_t;
static size_t g_max_states = 2000000; /* a test that outgrows it fails instead of running on */

/* Every interleaving (depth-first over states). */
static result_t explore_all(const cfg_t *g) {
  result_t r = {1, 0, 0};
  g_bad = g_capped = 0;
  g_why[0] = 0;
  seen_t seen = {calloc(1 << 16, 8), calloc(1 << 16, 8), 1 << 16, 0};
  size_t cap = 1024, top = 0;
  state_t *stack = malloc(cap * sizeof *stack), next;
  cr_assert(seen.a && seen.b && stack);
  init_state(g, &stack[top++]);
  for (int c = 0; c < g->nctas; c++) producer_settle(g, c, &stack[0].cta[c]);
  seen_add(&seen, &stack[0]);
  while (top && !g_bad) {
    if (seen.n > g_max_states) {
      violation("model: more states than the test allows", -1, -1);
      g_capped = 1;
    }
    const state_t cur = stack[--top];
    int moves = 0;
    for (int k = 0; k < n_transitions(g) && !g_bad; k++) {
      if (!transition(g, &cur, k, &next)) continue;
      moves++;
      if (!seen_add(&seen, &next)) continue;
      if (top == cap) stack = realloc(stack, (cap *= 2) * sizeof *stack);
      cr_assert(stack);
      stack[top++] = next;
    }
    if (!moves && !g_bad) {
      if (!finished(g, &cur)) violation("deadlock: no agent can move", -1, -1);
      else check_outcome(g, &cur);
    }
  }
  r.ok = !g_bad;
  r.capped = g_capped;
  r.states = seen.n;
  free(stack), free(seen.a), free(seen.b);
  return r;
}

/* Random schedules, for configurations too large for explore_all: even walks
 * pick among the enabled moves uniformly, odd walks by random priorities of
 * the moves, lowered now and then (PCT-like: it starves an agent for long
 * stretches, which uniform choice almost never does). */
static uint64_t lcg(uint64_t *x) { return (*x = *x * 6364136223846793005ull + 1442695040888963407ull) >> 33; }
static int explore_random(const cfg_t *g, int walks, uint64_t seed) {
  g_bad = g_capped = 0;
  g_why[0] = 0;
  const int nt = n_transitions(g);
  state_t cur, next, top, *succ = malloc((size_t)nt * sizeof *succ);
  uint32_t *prio = malloc((size_t)nt * sizeof *prio);
  cr_assert(succ && prio);
  for (int wk = 0; wk < walks && !g_bad; wk++) {
    init_state(g, &cur);
    for (int c = 0; c < g->nctas; c++) producer_settle(g, c, &cur.cta[c]);
    for (int k = 0; k < nt; k++) prio[k] = (uint32_t)lcg(&seed);
    for (;;) {
      int ns = 0, best = -1;
      for (int k = 0; k < nt && !g_bad; k++)
        if (transition(g, &cur, k, &next)) {
          if (best < 0 || prio[k] > prio[best]) best = k;
          succ[ns++] = next;
          if (best == k) top = next;
        }
      if (g_bad) break;
      if (!ns) {
        if (!finished(g, &cur)) violation("deadlock: no agent can move", -1, -1);
        else check_outcome(g, &cur);
        break;
      }
      if (wk & 1) {
        cur = top;
        if (lcg(&seed) % 16 == 0) prio[best] = (uint32_t)lcg(&seed) >> 4; /* demote it */
      } else {
        cur = succ[lcg(&seed) % (uint64_t)ns];
      }
    }
  }
  free(succ), free(prio);
  return !g_bad;
}

/* ------------------------------------------------------------------ tests */

/* One CTA with three consecutive key tiles of a head, one of them empty, the
 * stub below; three query tiles in two classification batches. */
static cfg_t one_cta(int split, int det) {
  cfg_t g;
  memset(&g, 0, sizeof g);
  g.split = split, g.det = det, g.nctas = 1, g.nitems[0] = 3;
  g.items[0][0] = 1, g.items[0][1] = 2, g.items[0][2] = 3;
  g.tr = 3, g.batch = 2, g.n0 = 1;
  for (int n = 0; n < MAXK; n++) g.pos[n] = n;
  g.visit[1] = 0x5; /* tiles 0, 2 */
  g.visit[2] = 0x0; /* none: an EMPTY entry, dK = dV = 0 */
  g.visit[3] = 0x6; /* tiles 1, 2 */
  return g;
}
/* Two CTAs, key tiles 0 and 1 of one head (the chain across CTAs). */
static cfg_t two_ctas(int split, int det) {
  cfg_t g;
  memset(&g, 0, sizeof g);
  g.split = split, g.det = det, g.nctas = 2, g.nitems[0] = g.nitems[1] = 1;
  g.items[0][0] = 0, g.items[1][0] = 1;
  g.tr = 3, g.batch = 2, g.n0 = 0;
  for (int n = 0; n < MAXK; n++) g.pos[n] = n;
  g.visit[0] = 0x3; /* tiles 0, 1 */
  g.visit[1] = 0x6; /* tiles 1, 2: skips 0 */
  return g;
}

Test(bwd_dq_protocol, the_header_is_the_kernels) {
  /* the rules the kernel static_asserts or relies on */
  cr_assert_eq(FMBQ_FULL_COUNT, FMBQ_WG_THREADS);
  cr_assert_eq(FMBQ_EMPTY_COUNT, 1);
  cr_assert_eq(fmbq_empty_parity(0), 1u); /* a fresh barrier passes parity 1 at once */
  cr_assert_eq(fmbq_full_parity(0), 0u);
  /* head dim 64: both warpgroups' turns in sequence, then the next key tile's */
  cr_assert_eq(fmbq_turn_after(1, 3, 0), fmbq_turn(1, 3, 1));
  cr_assert_eq(fmbq_turn_after(1, 3, 1), fmbq_turn(1, 4, 0));
  cr_assert_eq(fmbq_turn_after(0, 3, 1), fmbq_turn(0, 4, 1));
  cr_assert_eq(fmbq_sem_slot(0, 5, 7, 2, 1), (5 * 7 + 2) * 2 + 1);
  cr_assert_eq(fmbq_sem_slot(1, 5, 7, 2, 1), (5 * 7 + 2) * 2);
}

/* Every interleaving of one CTA's agents, its predecessors' turns at any
 * time: both modes, both counter layouts (head dim 64: no barrier between the
 * warpgroups). (Two CTAs' product is out of reach of an exhaustive search: the
 * tests below take random schedules for them.) */
Test(bwd_dq_protocol, one_cta_every_interleaving) {
  for (int split = 0; split < 2; split++)
    for (int det = 0; det < 2; det++) {
      const cfg_t g = one_cta(split, det);
      const result_t r = explore_all(&g);
      cr_assert(r.ok, "split %d det %d: %s", split, det, g_why);
      cr_assert_gt(r.states, 1000);
      printf("one CTA, split %d det %d: %zu states, no violation, no deadlock\n", split, det, r.states);
    }
}

/* Several CTAs on one head, along random schedules: the chain of turns across
 * CTAs (and a CTA taking a later key tile of the same head), random masks. */
Test(bwd_dq_protocol, ctas_random_schedules) {
  uint64_t seed = 26;
  for (int split = 0; split < 2; split++)
    for (int det = 0; det < 2; det++) {
      const cfg_t g = two_ctas(split, det);
      cr_assert(explore_random(&g, 400, lcg(&seed)), "two CTAs, split %d det %d: %s", split, det, g_why);
    }
  for (int round = 0; round < 16; round++)
    for (int split = 0; split < 2; split++) {
      cfg_t g;
      memset(&g, 0, sizeof g);
      g.split = split, g.det = 1, g.nctas = 3, g.tr = 4, g.batch = 2;
      g.nitems[0] = 2, g.nitems[1] = g.nitems[2] = 1; /* CTA 0 takes key tiles 0 and 3 */
      g.items[0][0] = 0, g.items[1][0] = 1, g.items[2][0] = 2, g.items[0][1] = 3;
      for (int n = 0; n < 4; n++) g.visit[n] = (unsigned)lcg(&seed) & 0xf;
      /* take order: key tiles 0 .. 3 or, every other round, 2 1 0 3 (a descending rule's) */
      for (int n = 0; n < 4; n++) g.pos[n] = round & 1 && n < 3 ? 2 - n : n;
      cr_assert(explore_random(&g, 100, lcg(&seed)), "round %d split %d: %s", round, split, g_why);
      g.det = 0;
      cr_assert(explore_random(&g, 25, lcg(&seed)), "round %d split %d default: %s", round, split, g_why);
    }
}

/* Each mutation of the protocol is caught (so the checks above can fail). */
static void expect_caught(cfg_t g, int mutation, const char *what) {
  g.mutation = mutation;
  const result_t r = explore_all(&g);
  cr_assert(!r.ok && !r.capped, "mutation '%s' not caught (%s)", what, g_why);
  printf("mutation '%s': %s\n", what, g_why);
}
Test(bwd_dq_protocol, mutations_are_caught) {
  /* the consumer waits for the wrong phase of dq_empty: its first use never starts */
  expect_caught(one_cta(0, 0), M_EMPTY_PARITY, "dq_empty waited at fmbq_full_parity");
  /* the buffer handed back before the copy engine has read it */
  expect_caught(one_cta(0, 0), M_ARRIVE_BEFORE_READ, "dq_empty arrived before wait_group.read");
  /* the turn passed before the addition completed: a later key tile's lands first */
  expect_caught(two_ctas(0, 1), M_PASS_BEFORE_DONE, "turn passed before wait_group 0");
  expect_caught(one_cta(1, 1), M_PASS_BEFORE_DONE, "turn passed before wait_group 0 (head dim 64)");
  /* thread 0's job word after its arrival: the writer may read the previous one */
  expect_caught(one_cta(0, 0), M_JOB_AFTER_ARRIVE, "job word written after the dq_full arrival");
  /* the use index miscounting the item's two dK / dV uses */
  expect_caught(one_cta(0, 0), M_ITEM_USES, "one use per item instead of FMBQ_ITEM_USES");
  /* dq_full completing with half the warpgroup's arrivals */
  expect_caught(one_cta(0, 0), M_FULL_HALF, "dq_full counting half the threads");
  /* the turn rule: the earlier kernel's turn n without the skipped tiles' passes (key tile 1
     skips query tile 0, key tile 2 waits for it there forever) */
  cfg_t d = one_cta(0, 1);
  d.n0 = 0, d.nitems[0] = 3, d.items[0][0] = 0, d.items[0][1] = 1, d.items[0][2] = 2;
  d.visit[0] = 0x1, d.visit[1] = 0x2, d.visit[2] = 0x1;
  expect_caught(d, M_TURN_BY_KEY, "turn = key tile (no passes for skipped tiles)");
  /* ranks against the take order: the later-taken key tile adds first */
  expect_caught(two_ctas(0, 1), M_TURN_DESC, "turns in reverse take order");
  expect_caught(two_ctas(1, 1), M_TURN_DESC, "turns in reverse take order (head dim 64)");
  /* one dS^T buffer: the next tile's stores overwrite what the other
     warpgroup's dQ wgmma still reads */
  cfg_t g1 = one_cta(0, 0);
  expect_caught(g1, M_ONE_DS_BUFFER, "one dS^T buffer");
  g1.split = 1; /* head dim 64 reads only its own half: one buffer would do there, but a
                   warpgroup still may not overwrite its own half before its dQ wgmma read it */
  g1.mutation = M_ONE_DS_BUFFER;
  cr_assert(explore_all(&g1).ok, "head dim 64, one dS^T buffer: %s", g_why);
  /* the random schedules find a mutation too */
  cfg_t g = two_ctas(0, 1);
  g.mutation = M_PASS_BEFORE_DONE;
  uint64_t seed = 7;
  cr_assert(!explore_random(&g, 300, lcg(&seed)) && !g_capped,
            "random schedules missed 'turn passed before wait_group 0' (%s)", g_why);
}
