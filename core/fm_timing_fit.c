/* fm_timing_fit.c — fitting the timing model to measured cases
 * (fm_timing_fit in fm_timing.h): non-negative least squares of the relative
 * error on the critical slot's work, alternated with the schedule; then the
 * boost window, its length an unknown of the least squares and its throttle
 * searched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fm_rng.h"
#include "fm_timing.h"

#define K FM_TIMING_NFEAT

/* ------------------------------------------------------------ NNLS */

/* Unknowns of a least squares: the K coefficients, and for the boost window
 * one more (fit_window). */
#define KW (K + 1)

/* Least squares on the columns in `mask` of A (n x nc, row-major, nc <= KW)
 * by modified Gram-Schmidt on unit-norm columns; x gets 0 outside mask.
 * scratch holds n * nc doubles. Returns the residual sum of squares, or -1
 * when the columns are dependent. */
static double lsq_subset(const double *A, const double *b, int n, int nc, unsigned mask, double *x,
                         double *scratch) {
  int cols[KW], k = 0;
  for (int j = 0; j < nc; j++)
    if (mask & (1u << j)) cols[k++] = j;
  double *Q = scratch, R[KW][KW], scale[KW], qb[KW];
  memset(R, 0, sizeof R);
  for (int c = 0; c < k; c++) {
    double norm = 0;
    for (int i = 0; i < n; i++) norm += A[i * nc + cols[c]] * A[i * nc + cols[c]];
    scale[c] = sqrt(norm);
    if (!(scale[c] > 0)) return -1;
    for (int i = 0; i < n; i++) Q[c * n + i] = A[i * nc + cols[c]] / scale[c];
  }
  for (int c = 0; c < k; c++) {
    for (int p = 0; p < c; p++) {
      double d = 0;
      for (int i = 0; i < n; i++) d += Q[p * n + i] * Q[c * n + i];
      R[p][c] = d;
      for (int i = 0; i < n; i++) Q[c * n + i] -= d * Q[p * n + i];
    }
    double norm = 0;
    for (int i = 0; i < n; i++) norm += Q[c * n + i] * Q[c * n + i];
    R[c][c] = sqrt(norm);
    if (R[c][c] < 1e-9) return -1; /* dependent on the earlier columns */
    for (int i = 0; i < n; i++) Q[c * n + i] /= R[c][c];
  }
  for (int c = 0; c < k; c++) {
    qb[c] = 0;
    for (int i = 0; i < n; i++) qb[c] += Q[c * n + i] * b[i];
  }
  memset(x, 0, sizeof(double) * (size_t)nc);
  for (int c = k - 1; c >= 0; c--) {
    double v = qb[c];
    for (int p = c + 1; p < k; p++) v -= R[c][p] * x[cols[p]];
    x[cols[c]] = v / R[c][c];
  }
  for (int c = 0; c < k; c++) x[cols[c]] /= scale[c];
  double rss = 0;
  for (int i = 0; i < n; i++) {
    double r = b[i];
    for (int j = 0; j < nc; j++) r -= A[i * nc + j] * x[j];
    rss += r * r;
  }
  return rss;
}

/* Non-negative least squares over the columns in `usable` of A (n x nc), by
 * the best feasible subset (nc is small: 2^nc least-squares solves). */
static double nnls(const double *A, const double *b, int n, int nc, unsigned usable, double *x,
                   double *scratch) {
  double best = -1, trial[KW];
  memset(x, 0, sizeof(double) * (size_t)nc);
  for (unsigned mask = 1; mask < (1u << nc); mask++) {
    if (mask & ~usable) continue;
    double rss = lsq_subset(A, b, n, nc, mask, trial, scratch);
    if (rss < 0) continue;
    int ok = 1;
    for (int j = 0; j < nc; j++) ok &= trial[j] >= 0;
    if (ok && (best < 0 || rss < best)) {
      best = rss;
      memcpy(x, trial, sizeof(double) * (size_t)nc);
    }
  }
  return best;
}

/* ------------------------------------------------------------ fit */

typedef struct fit_ctx {
  fm_kernel_id kernel;
  int32_t sms;
  double hbm_gbs;
  const fm_fit_case *cases;
  int n;
  int max_it;
  unsigned fixed;                /* pinned coefficients */
  double fixed_value[K];
  double x[K];                   /* the last fit: the next one starts there */
  double *A, *b, *scratch, *pred; /* (n, K), (n,), (KW, n), (n,) */
  double *crit, *floor_us;       /* (n, K), (n,): the last schedule's critical work and floors */
  double *Aw, *tmp;              /* (n, KW), (n,): the window's least squares, a sort */
  unsigned char *over;           /* (n,): the cases past the window */
  double items;                  /* work items over all cases: what an evaluation simulates */
  int polish_evals;              /* a pattern search's budget of evaluations */
} fit_ctx;

static void coef_set(fm_timing_coef *c, const double *x) {
  c->launch_us = x[0];
  c->item_us = x[1];
  c->key_tile_us = x[2];
  c->unmasked_us = x[3];
  c->partial_us = x[4];
  c->partial_causal_us = x[5];
}

/* Row i of the least squares from the critical work crit of case i: the
 * time is launch + clocked(schedule), so past the window (over) the
 * schedule's work counts throttle times and (throttle - 1) * boost_us joins
 * the right-hand side; pinned coefficients move there too. *same &= the row
 * did not change. */
static void set_row(fit_ctx *f, int i, const double *crit, int over, double boost_us, double throttle,
                    int *same) {
  double m = f->cases[i].measured_us;
  f->b[i] = over ? 1 + (throttle - 1) * boost_us / m : 1;
  for (int k = 0; k < K; k++) {
    double a = crit[k] * (over && k > 0 ? throttle : 1) / m;
    if (f->fixed & (1u << k)) {
      f->b[i] -= a * f->fixed_value[k];
      a = 0;
    }
    *same &= f->A[i * K + k] == a;
    f->A[i * K + k] = a;
  }
}

/* Predicts every case with c; fills the rows of the least squares and keeps
 * each case's critical work and floor. *same: the rows did not change. */
static fm_status predict_all(fit_ctx *f, const fm_timing_coef *c, int *same, fm_err *err) {
  *same = 1;
  for (int i = 0; i < f->n; i++) {
    fm_timing_result r;
    fm_status st = fm_timing_predict_coef(c, f->kernel, f->sms, f->hbm_gbs, f->cases[i].work,
                                          &f->cases[i].problem, &r, err);
    if (st != FM_OK) return st;
    f->pred[i] = r.time_us;
    memcpy(f->crit + (size_t)i * K, r.critical, sizeof r.critical);
    f->floor_us[i] = r.floor_us;
    int over = r.throttle_us > 0 && r.floor_us <= r.schedule_us + r.throttle_us;
    set_row(f, i, r.critical, over, c->boost_us, c->throttle, same);
  }
  return FM_OK;
}

/* Coefficients that no case exercises take their kin's value, or 0. */
static unsigned fill_unidentified(unsigned usable, double *x) {
  unsigned missing = ((1u << K) - 1) & ~usable;
  if ((missing & (1u << 4)) && !(missing & (1u << 5))) x[4] = x[5];
  if ((missing & (1u << 5)) && !(missing & (1u << 4))) x[5] = x[4];
  if ((missing & (1u << 4)) && (missing & (1u << 5))) x[4] = x[5] = x[3];
  return missing;
}

/* Residual sum of squares of the relative errors at coefficients x; leaves
 * the least-squares rows of x in f. */
static fm_status eval_at(fit_ctx *f, fm_timing_coef *c, const double *x, double *rss, fm_err *err) {
  int same;
  coef_set(c, x);
  fm_status st = predict_all(f, c, &same, err);
  *rss = 0;
  for (int i = 0; st == FM_OK && i < f->n; i++) *rss += pow(f->pred[i] / f->cases[i].measured_us - 1, 2);
  return st;
}

/* Gauss-Newton at a fixed solo, from the last fit's coefficients: the time of
 * a case is its critical work times the coefficients, so the least squares on
 * the critical work of the current schedule gives the next coefficients
 * (non-negative); a step that does not lower the residual is halved, up to
 * three times (the schedule is piecewise linear in the coefficients). Stops
 * when no step helps or three rounds in a row gain less than 0.1%. */
static fm_status fit_at_solo(fit_ctx *f, fm_timing_coef *c, unsigned *unident, double *rss,
                             fm_err *err) {
  double *x = f->x, best_rss;
  unsigned un = 0;
  fm_status st = eval_at(f, c, x, &best_rss, err);
  for (int it = 0, stall = 0; st == FM_OK && it < f->max_it && stall < 3 && best_rss > 1e-24; it++) {
    unsigned usable = 0;
    for (int k = 0; k < K; k++)
      for (int i = 0; i < f->n; i++)
        if (f->A[i * K + k] > 0) usable |= 1u << k;
    double next[K], trial[K], r = -1;
    if (nnls(f->A, f->b, f->n, K, usable, next, f->scratch) < 0)
      return fm_fail(err, FM_EINVAL, "the cases do not determine the model (degenerate least squares)");
    for (int k = 0; k < K; k++)
      if (f->fixed & (1u << k)) next[k] = f->fixed_value[k];
    unsigned un_next = fill_unidentified(usable | f->fixed, next);
    double t = 1;
    for (int h = 0; h < 4 && st == FM_OK; h++, t /= 2) {
      for (int k = 0; k < K; k++) trial[k] = x[k] + t * (next[k] - x[k]);
      if ((st = eval_at(f, c, trial, &r, err)) == FM_OK && r < best_rss) break;
    }
    if (st != FM_OK || !(r < best_rss)) break; /* no step lowers the residual */
    stall = r > best_rss * (1 - 1e-3) ? stall + 1 : 0;
    best_rss = r;
    memcpy(x, trial, sizeof trial);
    un = un_next;
  }
  coef_set(c, x);
  *rss = best_rss;
  *unident = un;
  return st;
}

/* The parameters a pattern search moves: the coefficients, solo, boost_us
 * and throttle (x[K], x[K + 1], x[K + 2]). */
enum { P_SOLO = K, P_BOOST, P_THROTTLE, NPARAM };

/* The residual at parameters x, or -1 on error (then st says why). */
static double rss_at(fit_ctx *f, fm_timing_coef *c, const double *x, fm_status *st, fm_err *err) {
  double r = -1;
  c->solo = x[P_SOLO];
  c->boost_us = x[P_BOOST];
  c->throttle = x[P_THROTTLE];
  *st = eval_at(f, c, x, &r, err);
  return *st == FM_OK ? r : -1;
}

/* Parameter k's step at relative step `step`, and its lower bound. */
static double param_step(int k, const double *x, double floor_, double step, double *lo) {
  *lo = k == P_SOLO || k == P_THROTTLE ? 1 : 0;
  if (k < K) return step * fmax(fabs(x[k]), floor_);
  if (k == P_BOOST) return step * fmax(x[k], 1);
  return k == P_THROTTLE ? 0.2 * step : step;
}

/* A pattern search that polishes the Gauss-Newton result: the makespan is a
 * maximum over SMs, so near its kinks the critical work of one SM is a poor
 * guide; moving one parameter at a time by a relative step (solo on the
 * grid schedule, boost_us and throttle when c has a window), keeping what
 * lowers the residual and halving the step when nothing does, needs no
 * gradient. At most `budget` evaluations. */
static fm_status polish(fit_ctx *f, fm_timing_coef *c, int grid, double *rss, int budget,
                        fm_err *err) {
  int window = c->throttle > 1;
  double x[NPARAM] = {c->launch_us,   c->item_us, c->key_tile_us, c->unmasked_us, c->partial_us,
                      c->partial_causal_us, c->solo, c->boost_us,  window ? c->throttle : 1};
  double floor_ = 1e-2 * (x[3] > 0 ? x[3] : 1), step = 0.1;
  fm_status st = FM_OK;
  for (int evals = 0; step > 1e-3 && evals < budget && st == FM_OK;) {
    int improved = 0;
    for (int k = 0; k < NPARAM && evals < budget && st == FM_OK; k++) {
      if (k < K ? (f->fixed >> k & 1) != 0 : k == P_SOLO ? !grid : !window) continue;
      for (int sign = -1; sign <= 1; sign += 2) {
        double lo, keep = x[k], d = param_step(k, x, floor_, step, &lo);
        x[k] = fmax(lo, keep + sign * d);
        double r = rss_at(f, c, x, &st, err);
        evals++;
        if (st == FM_OK && r < *rss) {
          *rss = r;
          improved = 1;
          break;
        }
        x[k] = keep;
      }
    }
    if (!improved) step /= 2;
  }
  coef_set(c, x);
  c->solo = x[P_SOLO];
  c->boost_us = x[P_BOOST];
  c->throttle = x[P_THROTTLE];
  memcpy(f->x, x, sizeof(double) * K);
  return st;
}

static double uniform(fm_rng *r) { return (double)fm_rng_below(r, 1u << 20) / (double)(1u << 20); }

/* Restarts from the best, perturbed (solo too, on the grid schedule):
 * Gauss-Newton on a piecewise-linear residual can stop at a kink short of the
 * minimum; then a pattern search. Budgets shrink for large sets (every
 * evaluation simulates every item of every case). */
static fm_status refine(fit_ctx *f, int grid, fm_timing_coef *best, double *best_rss,
                        unsigned *best_un, fm_err *err) {
  int restarts = f->items <= 2e5 ? 16 : f->items <= 2e6 ? 4 : 1;
  fm_rng rng;
  fm_rng_seed(&rng, 1, 0x666974 /* "fit" */);
  double base[K] = {best->launch_us, best->item_us,    best->key_tile_us,
                    best->unmasked_us, best->partial_us, best->partial_causal_us};
  fm_status st = FM_OK;
  for (int rs = 0; rs < restarts && st == FM_OK; rs++) {
    for (int k = 0; k < K; k++) {
      double u = uniform(&rng);
      f->x[k] = f->fixed >> k & 1 ? f->fixed_value[k]
                                 : base[k] * (0.6 + 0.8 * u) + (base[k] == 0) * 0.01 * base[3] * u;
    }
    fm_timing_coef c = *best;
    if (grid) c.solo = fmax(1, best->solo + 0.3 * (uniform(&rng) - 0.5));
    double rss = 0;
    unsigned un = 0;
    st = fit_at_solo(f, &c, &un, &rss, err);
    if (st == FM_OK && rss < *best_rss) {
      *best_rss = rss;
      *best = c;
      *best_un = un;
      memcpy(base, f->x, sizeof base);
    }
  }
  memcpy(f->x, base, sizeof base);
  if (st == FM_OK) st = polish(f, best, grid, best_rss, f->polish_evals, err);
  return st;
}

/* ------------------------------------------------------------ boost window */

static int cmp_double(const void *a, const void *b);

/* The time of case i at coefficients x and window w on the schedule held at
 * the last predict_all: launch + max(clocked(critical work . x), floor);
 * *sched receives the makespan. */
static double held_time(const fit_ctx *f, int i, const double *x, const fm_timing_coef *w,
                        double *sched) {
  const double *cr = f->crit + (size_t)i * K;
  *sched = 0;
  for (int k = 1; k < K; k++) *sched += cr[k] * x[k];
  return cr[0] * x[0] + fmax(fm_timing_clocked(w, FM_CLOCK_BURST, *sched), f->floor_us[i]);
}

/* Row i of the window's least squares (n x KW in f->Aw, f->b): past the
 * window a case takes launch + rho * work - (rho - 1) * boost_us, linear in
 * the coefficients and boost_us (unknown KW - 1). */
static void window_row(fit_ctx *f, int i, int over, double rho) {
  const double *cr = f->crit + (size_t)i * K;
  double m = f->cases[i].measured_us, *row = f->Aw + (size_t)i * KW;
  f->b[i] = 1;
  for (int k = 0; k < K; k++) {
    row[k] = cr[k] * (over && k > 0 ? rho : 1) / m;
    if (f->fixed & (1u << k)) {
      f->b[i] -= row[k] * f->fixed_value[k];
      row[k] = 0;
    }
  }
  row[K] = over ? -(rho - 1) / m : 0;
}

/* The least squares of a window of throttle rho on the held schedules, its
 * length boost_us an unknown too. From x and *boost: each case on the side
 * they put it, solved (non-negative), and again until no case changes side
 * (8 rounds at most). x and *boost receive the fit; returns its residual sum
 * of squares, -1 when the rows are degenerate or a side has fewer than 3
 * cases. */
static double held_fit(fit_ctx *f, double rho, unsigned usable, double *x, double *boost) {
  double y[KW], sched;
  for (int round = 0; round < 8; round++) {
    int changed = 0, nover = 0;
    for (int i = 0; i < f->n; i++) {
      held_time(f, i, x, &(fm_timing_coef){0}, &sched);
      unsigned char over = sched > *boost;
      changed |= over != f->over[i];
      f->over[i] = over;
      nover += over;
      window_row(f, i, over, rho);
    }
    if (nover < 3 || f->n - nover < 3) return -1;
    if (round > 0 && !changed) break;
    if (nnls(f->Aw, f->b, f->n, KW, usable | 1u << K, y, f->scratch) < 0) return -1;
    for (int k = 0; k < K; k++)
      if (f->fixed & (1u << k)) y[k] = f->fixed_value[k];
    fill_unidentified(usable | f->fixed, y);
    memcpy(x, y, sizeof(double) * K);
    *boost = y[K];
  }
  fm_timing_coef w = {.boost_us = *boost, .throttle = rho};
  double rss = 0;
  for (int i = 0; i < f->n; i++) rss += pow(held_time(f, i, x, &w, &sched) / f->cases[i].measured_us - 1, 2);
  return rss;
}

/* One window: throttle, boost_us, the coefficients. */
typedef struct window_fit {
  double rho, boost, x[K];
} window_fit;

/* Throttles from rho0 by step, n of them (those above 1), each fitted by
 * held_fit from `from`; *out receives the best. Returns its residual, -1
 * when none fits. */
static double rho_search(fit_ctx *f, unsigned usable, double rho0, double step, int n,
                         const window_fit *from, window_fit *out) {
  double best = -1;
  for (int j = 0; j < n; j++) {
    window_fit t = *from;
    t.rho = rho0 + j * step;
    if (!(t.rho > 1)) continue;
    double r = held_fit(f, t.rho, usable, t.x, &t.boost);
    if (r >= 0 && (best < 0 || r < best)) {
      best = r;
      *out = t;
    }
  }
  return best;
}

/* The first window, on the schedule of the fit without one (held): every
 * split of the cases by makespan with 3 or more on each side, throttle 1.02
 * to 1.5. Returns its residual, -1 when none fits. */
static double window_start(fit_ctx *f, unsigned usable, const double *x0, window_fit *out) {
  double *ms = f->tmp, best = -1;
  for (int i = 0; i < f->n; i++) held_time(f, i, x0, &(fm_timing_coef){0}, &ms[i]);
  qsort(ms, (size_t)f->n, sizeof *ms, cmp_double);
  for (int j = 3; j <= f->n - 3; j++) {
    window_fit from = {.boost = 0.5 * (ms[j - 1] + ms[j])}, t;
    memcpy(from.x, x0, sizeof from.x);
    double r = ms[j] > ms[j - 1] ? rho_search(f, usable, 1.02, 0.02, 25, &from, &t) : -1;
    if (r >= 0 && (best < 0 || r < best)) {
      best = r;
      *out = t;
    }
  }
  return best;
}

/* Adds a boost window to the fit without one (best, *best_rss), kept where
 * the F test says so (fm_timing_fit in fm_timing.h); best->fit_boost_p gets
 * the test's p either way. */
static fm_status fit_window(fit_ctx *f, int grid, fm_timing_coef *best, double *best_rss,
                            fm_err *err) {
  int same;
  fm_status st = predict_all(f, best, &same, err);
  double x0[K] = {best->launch_us,   best->item_us,    best->key_tile_us,
                  best->unmasked_us, best->partial_us, best->partial_causal_us};
  unsigned usable = 0;
  for (int i = 0; st == FM_OK && i < f->n; i++)
    for (int k = 0; k < K; k++) usable |= (unsigned)(f->crit[(size_t)i * K + k] > 0) << k;
  usable &= ~f->fixed;
  best->fit_boost_p = 1;
  window_fit w, next;
  if (st != FM_OK || f->n < 8 || window_start(f, usable, x0, &w) < 0) return st;
  /* on the true schedule: hold it at the window found, search the throttle
     finer around it, until the residual stops falling; then the pattern
     search, which moves the window too */
  fm_timing_coef c = *best;
  double rss = -1;
  for (int round = 0; round < 8; round++) {
    fm_timing_coef t = c;
    t.boost_us = w.boost;
    t.throttle = w.rho;
    double r;
    if ((st = eval_at(f, &t, w.x, &r, err)) != FM_OK) return st;
    if (rss >= 0 && !(r < rss * (1 - 1e-9))) break;
    c = t;
    rss = r;
    if (rho_search(f, usable, w.rho - 0.02, 0.0025, 17, &w, &next) < 0) break;
    if (rho_search(f, usable, next.rho - 0.0025, 0.0003125, 17, &next, &w) < 0) w = next;
  }
  if ((st = polish(f, &c, grid, &rss, f->polish_evals, err)) != FM_OK) return st;
  int k = grid + 2; /* the parameters fitted: solo, the window, the coefficients exercised */
  for (int j = 0; j < K; j++) k += (usable >> j) & 1;
  double p = f->n > k && rss < *best_rss ? pow(rss / *best_rss, (f->n - k) / 2.0) : 1;
  best->fit_boost_p = p;
  if (p < FM_FIT_BOOST_P && c.throttle > 1) {
    c.fit_boost_p = p;
    *best = c;
    *best_rss = rss;
  }
  return FM_OK;
}

/* Fitted coefficients that the cases do not determine, as when two kinds of
 * work are proportional in every case: a standard error (residual variance
 * times (A^T A)^-1 over every exercised column) above half the value, or,
 * for a coefficient fitted as 0, one that could make 5% of some case. */
static unsigned undetermined(const fit_ctx *f, const double *x) {
  int cols[K], k = 0;
  double amax[K] = {0};
  for (int j = 0; j < K; j++)
    for (int i = 0; i < f->n; i++) amax[j] = fmax(amax[j], fabs(f->A[i * K + j]));
  for (int j = 0; j < K; j++)
    if (!(f->fixed >> j & 1) && amax[j] > 0) cols[k++] = j;
  if (k == 0 || f->n <= k) return 0;
  double M[K][2 * K], rss = 0;
  for (int i = 0; i < f->n; i++) {
    double r = f->b[i];
    for (int j = 0; j < K; j++) r -= f->A[i * K + j] * x[j];
    rss += r * r;
  }
  for (int a = 0; a < k; a++)
    for (int b = 0; b < 2 * k; b++) {
      M[a][b] = b >= k ? (b - k == a) : 0;
      for (int i = 0; b < k && i < f->n; i++) M[a][b] += f->A[i * K + cols[a]] * f->A[i * K + cols[b]];
    }
  for (int c = 0; c < k; c++) { /* Gauss-Jordan with partial pivoting */
    int p = c;
    for (int r = c + 1; r < k; r++)
      if (fabs(M[r][c]) > fabs(M[p][c])) p = r;
    if (fabs(M[p][c]) < 1e-300) return 0; /* singular: the exercise check covers it */
    for (int b = 0; b < 2 * k; b++) {
      double t = M[c][b];
      M[c][b] = M[p][b];
      M[p][b] = t;
    }
    double d = M[c][c];
    for (int b = 0; b < 2 * k; b++) M[c][b] /= d;
    for (int r = 0; r < k; r++)
      if (r != c && M[r][c] != 0) {
        double m = M[r][c];
        for (int b = 0; b < 2 * k; b++) M[r][b] -= m * M[c][b];
      }
  }
  unsigned out = 0;
  double var = rss / (f->n - k);
  for (int a = 0; a < k; a++) {
    double se = sqrt(var * fabs(M[a][k + a])), v = x[cols[a]];
    if (v > 0 ? se > 0.5 * v : se * amax[cols[a]] > 0.05) out |= 1u << cols[a];
  }
  return out;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static fm_status fit_check(const fm_fit_case *cases, int n, int32_t head_dim, fm_err *err) {
  if (n < 2) return fm_fail(err, FM_EINVAL, "the fit needs at least 2 cases at head dim %d (got %d)", head_dim, n);
  for (int i = 0; i < n; i++) {
    if (!(cases[i].measured_us > 0) || !isfinite(cases[i].measured_us))
      return fm_fail(err, FM_EINVAL, "case %d: measured time must be positive (got %g us)", i,
                     cases[i].measured_us);
    if (cases[i].problem.head_dim != head_dim || cases[i].problem.pass != cases[0].problem.pass)
      return fm_fail(err, FM_EINVAL, "case %d: head dim %d / pass %s; the fit takes one head dim "
                     "and one pass", i, cases[i].problem.head_dim, fm_pass_name(cases[i].problem.pass));
    if (cases[i].work->br != cases[0].work->br || cases[i].work->bc != cases[0].work->bc)
      return fm_fail(err, FM_EINVAL, "case %d: work counted at %d x %d, case 0 at %d x %d", i,
                     cases[i].work->br, cases[i].work->bc, cases[0].work->br, cases[0].work->bc);
  }
  return FM_OK;
}

fm_status fm_timing_fit(fm_kernel_id kernel, int32_t sms, double hbm_gbs, int32_t head_dim,
                        const fm_fit_case *cases, int n, const fm_fit_options *opt,
                        fm_timing_coef *out, double *predicted_us, unsigned *unidentified,
                        fm_err *err) {
  fm_sched kind;
  int32_t ctas;
  fm_status st = fit_check(cases, n, head_dim, err);
  if (st == FM_OK) st = fm_timing_kernel_sched(kernel, cases[0].problem.pass, &kind, &ctas, err);
  if (st != FM_OK) return st;
  if (opt && opt->ctas_per_sm > 0) ctas = opt->ctas_per_sm;
  fit_ctx f = {.kernel = kernel, .sms = sms, .hbm_gbs = hbm_gbs, .cases = cases, .n = n,
               .max_it = opt && opt->max_iterations > 0 ? opt->max_iterations : 12,
               .fixed = opt ? opt->fixed & ((1u << K) - 1) : 0,
               .x = {0, 1, 0.01, 1, 1, 1}}; /* any positive start: it only picks the first critical slots */
  for (int k = 0; k < K; k++) f.fixed_value[k] = f.fixed & (1u << k) ? opt->fixed_value[k] : 0;
  f.A = calloc((size_t)n * (2 * K + 2 * KW + 4), sizeof(double));
  f.over = calloc((size_t)n, 1);
  if (!f.A || !f.over) {
    free(f.A);
    free(f.over);
    return fm_fail(err, FM_ENOMEM, "cannot allocate the fit of %d cases", n);
  }
  f.b = f.A + (size_t)n * K;
  f.scratch = f.b + n;               /* n x KW */
  f.pred = f.scratch + (size_t)n * KW;
  f.crit = f.pred + n;
  f.floor_us = f.crit + (size_t)n * K;
  f.Aw = f.floor_us + n;
  f.tmp = f.Aw + (size_t)n * KW;
  for (int i = 0; i < n; i++)
    f.items += (double)cases[i].problem.batch * cases[i].problem.heads *
               (cases[i].problem.pass == FM_PASS_BWD ? cases[i].work->tc : cases[i].work->tr);
  f.polish_evals = (int)fmin(200, fmax(12, 2e7 / fmax(f.items, 1)));
  fm_timing_coef c = {.head_dim = head_dim, .br = cases[0].work->br, .bc = cases[0].work->bc,
                      .ctas_per_sm = ctas, .solo = 1, .throttle = 1, .fit_boost_p = -1};
  fm_timing_coef best = c;
  double best_rss = -1;
  unsigned un = 0, best_un = 0;
  /* solo (grid schedule only): a coarse pass over [1, 2], then around the best */
  static const double coarse[] = {1.0, 1.25, 1.5, 1.75, 2.0}, fine[] = {-0.1, 0.1};
  int ncoarse = kind == FM_SCHED_GRID ? 5 : 1, nfine = kind == FM_SCHED_GRID ? 2 : 0;
  double center = 1;
  for (int q = 0; q < ncoarse + nfine && st == FM_OK; q++) {
    if (q == ncoarse) center = best.solo;
    c.solo = q < ncoarse ? coarse[q] : center + fine[q - ncoarse];
    if (c.solo < 1) continue;
    double rss = 0;
    st = fit_at_solo(&f, &c, &un, &rss, err);
    if (st == FM_OK && (best_rss < 0 || rss < best_rss)) {
      best_rss = rss;
      best = c;
      best_un = un;
    }
  }
  if (st == FM_OK) st = refine(&f, kind == FM_SCHED_GRID, &best, &best_rss, &best_un, err);
  if (st == FM_OK && opt && opt->boost_window)
    st = fit_window(&f, kind == FM_SCHED_GRID, &best, &best_rss, err);
  int same;
  if (st == FM_OK) st = predict_all(&f, &best, &same, err);
  if (st == FM_OK) {
    double *abs_err = f.scratch; /* n doubles are free there now */
    for (int i = 0; i < n; i++) {
      if (predicted_us) predicted_us[i] = f.pred[i];
      abs_err[i] = fabs(f.pred[i] / cases[i].measured_us - 1);
    }
    qsort(abs_err, (size_t)n, sizeof *abs_err, cmp_double);
    best.fit_cases = n;
    best.fit_median_err = n % 2 ? abs_err[n / 2] : 0.5 * (abs_err[n / 2 - 1] + abs_err[n / 2]);
    best.fit_worst_err = abs_err[n - 1];
    *out = best;
    double bx[K] = {best.launch_us, best.item_us, best.key_tile_us, best.unmasked_us,
                    best.partial_us, best.partial_causal_us};
    if (unidentified) *unidentified = best_un | undetermined(&f, bx);
  }
  free(f.A);
  free(f.over);
  return st;
}
