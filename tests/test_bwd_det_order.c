/* The sm90 backward's deterministic dQ order (kernels/fm_sm90_bwd_order.h) in
 * a host model of the persistent grid, host only.
 *
 * The model: 132 CTAs; items (one key tile of one (batch, head)) handed out
 * in take order to whichever CTA is free first (the kernel's atomic counter);
 * a CTA spends `io` on an item's prologue and epilogue, 1 on each visited
 * query tile (or a random time in [0.5, 1.5) for the schedule checks), then
 * stages the tile's dQ in its one buffer, which it must wait for when the
 * writer still holds it; the writer takes a job when it is free, waits for
 * the pair's turn (deterministic mode), has the buffer read after `lr` and
 * the addition complete (and the turn passed) after `lc` (fractions of a
 * tile: kernels/PERF_NOTES.md puts the completion and fences at 0.5 .. 0.9 of
 * a pair; the default mode's writer waits only for the read, so a deterministic
 * writer slower than a pair, lc > 1, makes every family, full included, about
 * lc times slower; FM_DET_LC sets lc for the 8K table); dK and dV take the
 * buffer once each at the item's end. Items are simulated in take order, so
 * every pass a pair waits for is known when the pair needs it, unless a rule
 * makes a pair wait for a later-taken item: the model reports that as a
 * possible deadlock (the kernel's persistent CTAs would hang on it once every
 * CTA holds such an item, or its own next item).
 *
 * Rules compared: "rule" (the header's: take order and turns by key
 * descending), "ascending" (the earlier kernel: key tiles ascending, turns in
 * key-tile order, a skipped tile's pass counted as free, so a lower bound of
 * its cost) and the default mode (ascending, no turns). The masks are the
 * bench's (fm_kernel_bench: 131072 tokens, H = 32, seed 1, built-in samples).
 *
 * Checked: every family's deterministic makespan within FM_DET_BAR of the
 * default's at 8K and 128K (32K too with FM_DET_ORDER_32K=1); the additions
 * of every (b, h, query tile) land in the rule's order under random tile
 * times (and the default mode's do not always); the rule's key equals its
 * definition by walking the tiles; a rule whose turns disagree with the take
 * order (descending turns, ascending take) is caught. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fm_colmask.h"
#include "fm_families.h"
#include "fm_samples.h"
#include "fm_sm90_bwd_order.h"
#include "fm_tiles.h"

#define FM_DET_BAR 1.15
enum { BR = 64, BC = 128, NCTAS = 132 };
enum { R_RULE, R_ASC, R_DEFAULT, R_DESC_TURNS }; /* turn rules (R_DESC_TURNS: a wrong one) */

/* One mask set: per key tile its visited query tiles (ascending) and turns. */
typedef struct {
  int32_t tc, tr;
  int32_t *take;   /* take position -> key tile */
  int64_t *off;    /* (tc + 1): key tile n's pairs at off[n] .. off[n + 1] */
  int32_t *m;      /* visited query tile of each pair */
  int32_t *turn;   /* its turn (R_DEFAULT: unused) */
} set_tab;

static int32_t *g_key;
static int by_rule(const void *a, const void *b) {
  const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (x == y) return 0;
  return fmbo_before(g_key[x], x, g_key[y], y) ? -1 : 1;
}

/* The rule's key by its definition (walk every query tile). */
static int32_t key_by_walk(const fm_tile_bounds *b, int32_t tr, int32_t sq) {
  int32_t last = -1, count = 0;
  for (int32_t m = 0; m < tr; m++)
    if (fmbo_visits(b, m, BR, sq)) last = m, count++;
  return count ? last + 1 - count : -1;
}

/* Tables of one set under `rule`: take order, visits, turns (visitors of each
 * query tile in take order; R_DESC_TURNS: in descending key-tile order). */
static void build_set(const fm_colmask *mk, int32_t set, int rule, set_tab *t) {
  const int32_t sq = fm_colmask_sq(mk), sk = fm_colmask_sk(mk);
  t->tr = (sq + BR - 1) / BR, t->tc = (sk + BC - 1) / BC;
  const int32_t tr = t->tr, tc = t->tc;
  fm_tile_bounds *bd = malloc((size_t)tc * sizeof *bd);
  g_key = malloc((size_t)tc * 4);
  t->take = malloc((size_t)tc * 4);
  t->off = calloc((size_t)tc + 1, 8);
  cr_assert(bd && g_key && t->take && t->off);
  fm_tile_bounds_compute(mk, set, BC, bd);
  for (int32_t n = 0; n < tc; n++) {
    g_key[n] = fmbo_key(&bd[n], BR, sq);
    t->take[n] = n;
    for (int32_t m = 0; m < tr; m++) t->off[n + 1] += fmbo_visits(&bd[n], m, BR, sq);
  }
  for (int32_t n = 0; n < tc; n++) t->off[n + 1] += t->off[n];
  if (rule == R_RULE) qsort(t->take, (size_t)tc, 4, by_rule);
  t->m = malloc((size_t)t->off[tc] * 4 + 4);
  t->turn = malloc((size_t)t->off[tc] * 4 + 4);
  int64_t *cur = malloc((size_t)tc * 8);
  cr_assert(t->m && t->turn && cur);
  memcpy(cur, t->off, (size_t)tc * 8);
  for (int32_t m = 0; m < tr; m++) {
    int32_t turn = 0;
    for (int32_t k = 0; k < tc; k++) {
      const int32_t n = rule == R_DESC_TURNS ? tc - 1 - k : t->take[k];
      if (!fmbo_visits(&bd[n], m, BR, sq)) continue;
      t->m[cur[n]] = m;
      t->turn[cur[n]++] = turn++;
    }
  }
  free(cur), free(bd), free(g_key);
}
static void free_set(set_tab *t) { free(t->take), free(t->off), free(t->m), free(t->turn); }

typedef struct {
  double lr, lc, io;  /* buffer read, addition complete + pass, item prologue/epilogue */
  uint64_t seed;      /* 0: every tile takes 1; else random in [0.5, 1.5) */
  int record;         /* record each (b, h, query tile)'s addition order as a hash */
} sim_opts;
typedef struct {
  double makespan;
  int64_t waits_on_later; /* pairs whose turn needs a later-taken item (R_DESC_TURNS) */
  uint64_t *order_hash;   /* (bh, tr) when recorded */
  double *go_time;        /* scratch for recording */
} sim_out;

static double urand(uint64_t *x) {
  *x = *x * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*x >> 11) * (1.0 / 9007199254740992.0);
}

/* the CTA free first (a linear scan: 132 CTAs) */
static int first_free(const double *free_at) {
  int c = 0;
  for (int i = 1; i < NCTAS; i++)
    if (free_at[i] < free_at[c]) c = i;
  return c;
}

/* One item's timeline on CTA c from `t0`; det: wait for each pair's turn. */
typedef struct {
  double *cnt_at;  /* (bh, tr): when the counter reached its value */
  int32_t *cnt;    /* (bh, tr): the counter */
} turns_t;
static double run_item(const set_tab *st, int32_t n, int64_t bh, int det, const sim_opts *o, turns_t *tu,
                       double t0, double *bf, double *wf, uint64_t *rng, sim_out *out) {
  double t = t0 + o->io;
  for (int64_t p = st->off[n]; p < st->off[n + 1]; p++) {
    const int32_t m = st->m[p];
    t += o->seed ? 0.5 + urand(rng) : 1.0;
    const double s = t > *bf ? t : *bf; /* the staging buffer */
    t = s;
    double go = s > *wf ? s : *wf;
    const int64_t ci = bh * st->tr + m;
    if (det) {
      if (tu->cnt[ci] != st->turn[p]) out->waits_on_later++; /* its predecessor is not taken yet */
      if (tu->cnt_at[ci] > go) go = tu->cnt_at[ci];
    }
    *bf = go + o->lr;
    *wf = go + (det ? o->lc : o->lr); /* the default writer waits only for the read */
    if (det) tu->cnt[ci]++, tu->cnt_at[ci] = *wf;
    if (o->record) out->go_time[ci * st->tc + n] = go;
  }
  for (int k = 0; k < 2; k++) { /* dK, dV */
    t = t > *bf ? t : *bf;
    *bf = t + o->lr;
  }
  return t;
}

/* The grid over B*H heads; sets[set_of(bh)]. */
static sim_out simulate(set_tab *sets, int32_t nb, int32_t nh, int32_t B, int32_t H, int rule, const sim_opts *o) {
  const int det = rule != R_DEFAULT;
  const int32_t tr = sets[0].tr, tc = sets[0].tc;
  const int64_t nbh = (int64_t)B * H;
  sim_out out = {0};
  turns_t tu = {calloc((size_t)(nbh * tr), 8), calloc((size_t)(nbh * tr), 4)};
  double free_at[NCTAS] = {0}, bf[NCTAS] = {0}, wf[NCTAS] = {0};
  uint64_t rng = o->seed;
  cr_assert(tu.cnt_at && tu.cnt);
  if (o->record) {
    out.go_time = malloc((size_t)(nbh * tr * tc) * 8);
    out.order_hash = calloc((size_t)(nbh * tr), 8);
    cr_assert(out.go_time && out.order_hash);
    for (int64_t i = 0; i < nbh * tr * tc; i++) out.go_time[i] = -1;
  }
  for (int64_t i = 0; i < nbh * tc; i++) { /* the kernel's item i */
    int32_t bh = (int32_t)(i / tc), k = (int32_t)(i % tc);
    if (rule == R_RULE) fmbo_item((int32_t)i, (int32_t)nbh, tc, &bh, &k);
    const int32_t b = (int32_t)(bh / H), h = (int32_t)(bh % H);
    const set_tab *st = &sets[(nb == 1 ? 0 : b) * nh + (nh == 1 ? 0 : h)];
    const int32_t n = rule == R_DEFAULT || rule == R_ASC ? k : st->take[k];
    const int c = first_free(free_at);
    free_at[c] = run_item(st, n, bh, det, o, &tu, free_at[c], &bf[c], &wf[c], &rng, &out);
  }
  for (int c = 0; c < NCTAS; c++) {
    const double e = free_at[c] > wf[c] ? free_at[c] : wf[c];
    if (e > out.makespan) out.makespan = e;
  }
  if (o->record) /* the key tiles of each (bh, m) in the order of their additions */
    for (int64_t ci = 0; ci < nbh * tr; ci++) {
      uint64_t hsh = 1469598103934665603ull;
      for (;;) {
        int32_t best = -1;
        for (int32_t n = 0; n < tc; n++)
          if (out.go_time[ci * tc + n] >= 0 && (best < 0 || out.go_time[ci * tc + n] < out.go_time[ci * tc + best]))
            best = n;
        if (best < 0) break;
        out.go_time[ci * tc + best] = -1;
        hsh = (hsh ^ (uint64_t)(best + 1)) * 1099511628211ull;
      }
      out.order_hash[ci] = hsh;
    }
  free(tu.cnt_at), free(tu.cnt), free(out.go_time);
  out.go_time = NULL;
  return out;
}

/* The rule's order of each (bh, m) as the same hash (visitors in turn order). */
static uint64_t *rule_hashes(set_tab *sets, int32_t nb, int32_t nh, int32_t B, int32_t H) {
  const int32_t tr = sets[0].tr, tc = sets[0].tc;
  uint64_t *hs = malloc((size_t)B * H * tr * 8);
  int32_t *who = malloc((size_t)tc * 4);
  cr_assert(hs && who);
  for (int64_t bh = 0; bh < (int64_t)B * H; bh++) {
    const int32_t b = (int32_t)(bh / H), h = (int32_t)(bh % H);
    const set_tab *st = &sets[(nb == 1 ? 0 : b) * nh + (nh == 1 ? 0 : h)];
    for (int32_t m = 0; m < tr; m++) {
      int32_t nv = 0;
      for (int32_t n = 0; n < tc; n++)
        for (int64_t p = st->off[n]; p < st->off[n + 1]; p++)
          if (st->m[p] == m) who[st->turn[p]] = n, nv++;
      uint64_t hsh = 1469598103934665603ull;
      for (int32_t i = 0; i < nv; i++) hsh = (hsh ^ (uint64_t)(who[i] + 1)) * 1099511628211ull;
      hs[bh * tr + m] = hsh;
    }
  }
  free(who);
  return hs;
}

typedef struct {
  fm_colmask *mk;
  set_tab *sets;
  int32_t nsets, nb, nh, B, H;
} mask_t;
static fm_sample_set g_samples;
static int g_samples_ok;
static mask_t load_mask(const char *family, int64_t S, int32_t B, int32_t H, int rule) {
  mask_t k = {0};
  fm_err err;
  if (!g_samples_ok) {
    cr_assert_eq(fm_samples_builtin(&g_samples, &err), FM_OK);
    g_samples_ok = 1;
  }
  fm_family_request req = {family, S, B, H, 1, -1, &g_samples, 0, NULL};
  cr_assert_eq(fm_family_build(&req, &k.mk, NULL, &err), FM_OK, "%s: %s", family, err.msg);
  k.nsets = fm_colmask_nsets(k.mk), k.nb = fm_colmask_nb(k.mk), k.nh = fm_colmask_nh(k.mk), k.B = B, k.H = H;
  k.sets = calloc((size_t)k.nsets, sizeof *k.sets);
  cr_assert(k.sets);
  for (int32_t s = 0; s < k.nsets; s++) build_set(k.mk, s, rule, &k.sets[s]);
  return k;
}
static void free_mask(mask_t *k) {
  for (int32_t s = 0; s < k->nsets; s++) free_set(&k->sets[s]);
  free(k->sets);
  fm_colmask_destroy(k->mk);
}

static sim_opts k_timing = {.lr = 0.3, .lc = 0.7, .io = 1.0};

/* Every family at S (the bench's shape: 131072 tokens, H = 32): the rule's
 * deterministic makespan against the default's; returns the worst ratio. */
static double family_table(int64_t S, int with_ascending) {
  const int32_t H = 32, B = (int32_t)(131072 / S);
  double worst = 0;
  printf("S = %lld (B %d, H %d), 132 CTAs, tile 1, lr %.1f lc %.1f io %.1f\n", (long long)S, B, H, k_timing.lr,
         k_timing.lc, k_timing.io);
  printf("  %-22s %10s %10s %7s %s\n", "family", "default", "rule", "ratio", with_ascending ? "  ascending ratio" : "");
  for (int f = 0; f < fm_family_count(); f++) {
    const char *fam = fm_family_at(f)->name;
    mask_t k = load_mask(fam, S, B, H, R_RULE);
    const sim_out d = simulate(k.sets, k.nb, k.nh, B, H, R_DEFAULT, &k_timing);
    const sim_out r = simulate(k.sets, k.nb, k.nh, B, H, R_RULE, &k_timing);
    cr_assert_eq(r.waits_on_later, 0, "%s: the rule waits for a later-taken item", fam);
    const double ratio = r.makespan / d.makespan;
    printf("  %-22s %10.0f %10.0f %7.3f", fam, d.makespan, r.makespan, ratio);
    free_mask(&k);
    if (with_ascending) {
      mask_t a = load_mask(fam, S, B, H, R_ASC);
      const sim_out x = simulate(a.sets, a.nb, a.nh, B, H, R_ASC, &k_timing);
      printf("  %7.3f", x.makespan / d.makespan);
      free_mask(&a);
    }
    printf("\n");
    fflush(stdout);
    cr_expect_leq(ratio, FM_DET_BAR, "%s at S %lld: deterministic / default %.3f above %.2f", fam, (long long)S,
                  ratio, FM_DET_BAR);
    if (ratio > worst) worst = ratio;
  }
  return worst;
}

Test(bwd_det_order, every_family_8k) {
  if (getenv("FM_DET_LC")) k_timing.lc = atof(getenv("FM_DET_LC"));
  printf("worst 8K: %.3f\n", family_table(8192, 1));
}
Test(bwd_det_order, every_family_32k) {
  if (!getenv("FM_DET_ORDER_32K")) return;
  printf("worst 32K: %.3f\n", family_table(32768, 0));
}
Test(bwd_det_order, every_family_128k) {
  printf("worst 128K: %.3f\n", family_table(131072, 0));
}

/* The key in O(1) equals its definition, key tile by key tile, every family. */
Test(bwd_det_order, key_is_its_definition) {
  fm_err err;
  fm_sample_set smp;
  cr_assert_eq(fm_samples_builtin(&smp, &err), FM_OK);
  const int64_t lengths[] = {1000, 6000, 8192};
  for (int f = 0; f < fm_family_count(); f++)
    for (size_t si = 0; si < sizeof lengths / sizeof *lengths; si++) {
      const int64_t S = lengths[si];
      fm_family_request req = {fm_family_at(f)->name, S, 2, 2, 3, -1, &smp, 0, NULL};
      fm_colmask *mk = NULL;
      cr_assert_eq(fm_family_build(&req, &mk, NULL, &err), FM_OK, "%s", err.msg);
      const int32_t tc = (int32_t)((S + BC - 1) / BC), tr = (int32_t)((S + BR - 1) / BR);
      fm_tile_bounds *bd = malloc((size_t)tc * sizeof *bd);
      cr_assert(bd);
      for (int32_t s = 0; s < fm_colmask_nsets(mk); s++) {
        fm_tile_bounds_compute(mk, s, BC, bd);
        for (int32_t n = 0; n < tc; n++)
          cr_assert_eq(fmbo_key(&bd[n], BR, (int32_t)S), key_by_walk(&bd[n], tr, (int32_t)S), "%s S %lld n %d",
                       fm_family_at(f)->name, (long long)S, n);
      }
      free(bd);
      fm_colmask_destroy(mk);
    }
  fm_samples_free(&smp);
}

/* Scheduling independence: under random tile times the additions of every
 * (b, h, query tile) land in the rule's order, the same for every seed;
 * the default mode's order changes with the timings. */
Test(bwd_det_order, order_is_the_rules_under_random_timings) {
  const char *fams[] = {"causal", "sliding_window", "document", "share_question", "random_eviction", "full"};
  for (size_t f = 0; f < sizeof fams / sizeof *fams; f++) {
    const int32_t B = 2, H = 4;
    mask_t k = load_mask(fams[f], 4096, B, H, R_RULE);
    uint64_t *want = rule_hashes(k.sets, k.nb, k.nh, B, H);
    const int64_t ncnt = (int64_t)B * H * k.sets[0].tr;
    int64_t default_diff = 0;
    for (uint64_t seed = 1; seed <= 3; seed++) {
      sim_opts o = k_timing;
      o.seed = seed * 0x9e3779b97f4a7c15ull, o.record = 1;
      sim_out r = simulate(k.sets, k.nb, k.nh, B, H, R_RULE, &o);
      sim_out d = simulate(k.sets, k.nb, k.nh, B, H, R_DEFAULT, &o);
      for (int64_t i = 0; i < ncnt; i++) {
        cr_assert_eq(r.order_hash[i], want[i], "%s seed %llu: (bh, m) %lld added out of the rule's order", fams[f],
                     (unsigned long long)seed, (long long)i);
        default_diff += d.order_hash[i] != want[i];
      }
      free(r.order_hash), free(d.order_hash);
    }
    printf("%s: deterministic order == the rule's at 3 random timings; default differs at %lld (bh, m)\n", fams[f],
           (long long)default_diff);
    if (strcmp(fams[f], "causal") == 0) cr_assert_gt(default_diff, 0, "the check cannot fail");
    free(want);
    free_mask(&k);
  }
}

/* A rule whose turns disagree with the take order is caught: descending turns
 * with ascending take make key tiles wait for later-taken ones (with more key
 * tiles than CTAs, a hang in the kernel). */
Test(bwd_det_order, wrong_rule_is_caught) {
  mask_t k = load_mask("causal", 32768, 1, 2, R_DESC_TURNS);
  const sim_out r = simulate(k.sets, k.nb, k.nh, 1, 2, R_ASC, &k_timing);
  cr_assert_gt(r.waits_on_later, 0, "descending turns with ascending take not caught");
  printf("descending turns, ascending take: %lld pairs wait for a later-taken item\n", (long long)r.waits_on_later);
  free_mask(&k);
}
