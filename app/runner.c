/* runner.c — the scenario runner's loop (runner.h): cases counted and
 * expanded, memory estimated and every mask built once before any case runs
 * (a bad scenario is refused with its line before anything is written), one
 * folder per case under OUT/cases (committed atomically, its row written
 * last: finished cases survive Ctrl-C and a rerun skips them), then the
 * index and the report. The single form (`fmsim run --family`) is one case
 * traced straight into --out. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runner.h"

#include "case_build.h"
#include "cli.h"
#include "fm_fileio.h"
#include "fm_families.h"
#include "fm_limits.h"
#include "index_write.h"
#include "report.h"
#include "report_figures.h"
#include "run_stop.h"

/* Per-tile arrays of one case above this are refused (as `analyze --out`). */
#define MAX_TILE_ARRAY_BYTES ((double)((int64_t)2 << 30))
/* Device bytes of the dense variant's masks ((sets, Sq, Sk) uint8) above this are refused. */
#define MAX_DENSE_BYTES ((int64_t)64 << 30)

static double tiles_of(double sets, double S, double br, double bc) {
  return sets * ceil(S / br) * ceil(S / bc);
}

/* Refuses, before anything is allocated, a case the machine cannot hold or
 * whose per-tile arrays pass the limit; the message holds the estimate. */
static int memory_check(runner_ctx *rc, const fm_scn_case *c) {
  const fm_scenario *s = rc->s;
  const char *cmd = rc->o->cmd;
  double S = (double)runner_case_length(rc, c), sets = (double)runner_case_sets(rc, c);
  /* classes and exact classes per tile; the single form also keeps each tile's modelled bytes */
  double tiles = tiles_of(sets, S, (double)c->br, (double)c->bc);
  double arrays = (rc->o->single ? 2 + sizeof(int64_t) : 2) * tiles;
  double pairs = (double)c->batch * (double)c->heads;
  for (int k = 0; (s->run & FM_SCN_GPU || rc->o->single) && k < s->nkernels; k++)
    for (int q = 0; q < RUN_NPASSES; q++) {
      int32_t br, bc; /* auto: the reference GPU's tile, as a run without a device uses */
      char why[160];
      if (!(s->pass & run_pass_of(q)) ||
          gpu_pass_tile(s->kernels[k], run_pass_of(q), (int32_t)c->head_dim, &br, &bc, why, sizeof why))
        continue;
      arrays += tiles_of(sets, S, br, bc) + (s->instrument_reps ? 9 * tiles_of(pairs, S, br, bc) : 0);
    }
  double need = arrays + sets * S * 32;
  double all_tiles = tiles_of(pairs, S, (double)c->br, (double)c->bc);
  int line = s->masks[c->mask_index].line;
  if (rc->o->single && all_tiles * 18 > MAX_TILE_ARRAY_BYTES) {
    cli_error(cmd, "%.0f tiles would need %.0f MiB of per-tile trace arrays (limit %.0f MiB); use "
              "fewer --batch/--heads or a shorter --seqlen", all_tiles, all_tiles * 18 / (1 << 20),
              MAX_TILE_ARRAY_BYTES / (1 << 20));
    return -1;
  }
  char what[400];
  fm_err err;
  snprintf(what, sizeof what, "case %s's masks and per-tile arrays", c->id);
  if (fm_mem_check(need >= 9.2e18 ? INT64_MAX : (int64_t)need, what, &err) != FM_OK) {
    cli_error(cmd, "%s%s; use larger br/bc, fewer heads or a shorter seqlen",
              runner_where(rc, line, "masks"), err.msg);
    return -1;
  }
  if (arrays > MAX_TILE_ARRAY_BYTES) {
    cli_error(cmd, "%scase %s needs %.1f GiB of per-tile arrays (%.0f tiles of %lld x %lld), more "
              "than the limit of %.0f GiB; use larger br/bc, fewer heads or a shorter seqlen",
              runner_where(rc, line, "masks"), c->id, arrays / (1 << 30), tiles, (long long)c->br,
              (long long)c->bc, MAX_TILE_ARRAY_BYTES / (1 << 30));
    return -1;
  }
  double dense = sets * S * S;
  if (s->variant == FM_VARIANT_DENSE && dense > (double)MAX_DENSE_BYTES) {
    cli_error(cmd, "%svariant dense: %.0f dense mask%s of %.0f x %.0f take %.0f GiB (limit %lld "
              "GiB); use a shorter seqlen or fewer per-head sets", runner_where(rc, line, "variant"),
              sets, sets == 1 ? "" : "s", S, S, dense / (1 << 30), (long long)(MAX_DENSE_BYTES >> 30));
    return -1;
  }
  return 0;
}

/* Every case's memory, the figures, and every mask entry built at its first
 * case: a bad parameter or file is reported at once, with its line. */
static int preflight(runner_ctx *rc, const fm_scn_case *cases, int n) {
  for (int i = 0; i < n; i++)
    if (memory_check(rc, &cases[i])) return -1;
  if (report_figures_check(rc)) return -1;
  for (int mi = 0, i = 0; mi < rc->s->nmasks; mi++) {
    while (i < n && cases[i].mask_index < mi) i++;
    if (i == n || cases[i].mask_index != mi) continue;
    fm_colmask *m = NULL;
    fm_family_used used;
    int bad = case_build_mask(rc, &cases[i], &m, &used);
    fm_colmask_destroy(m);
    if (bad) return -1;
  }
  return 0;
}

/* ---- the output folder ------------------------------------------------------------------ */

/* What a killed run left behind: staging folders and temporary files, and
 * case folders it had not finished (no row.tsv). */
static void sweep_stale(runner_ctx *rc) {
  const char *sub[] = {"", "/tables", "/figures"};
  char path[4600];
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s%s", rc->o->out, sub[i]);
    run_stop_sweep(path, 0);
  }
  snprintf(path, sizeof path, "%s/cases", rc->o->out);
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char dir[4900], row[5000];
    snprintf(dir, sizeof dir, "%s/%s", path, e->d_name);
    snprintf(row, sizeof row, "%s/row.tsv", dir);
    run_stop_sweep(dir, access(row, F_OK) != 0);
  }
  if (d) closedir(d);
}

/* A finished case is reused unless this run could add to it: kernels timed
 * where it has none, other kernels or passes, or other settings. */
static int reusable(runner_ctx *rc, const char *dir, case_row *row) {
  char path[4800];
  snprintf(path, sizeof path, "%s/row.tsv", dir);
  if (case_row_read(path, row) != 0) return 0;
  const gpu_step *g = rc->gpu;
  if (row->nkernels != (g->wanted ? g->nkernels : 0)) return 0;
  for (int k = 0; k < row->nkernels; k++)
    if (strcmp(row->k[k].kernel, fm_kernel_get(g->kernel[k])->name)) return 0;
  if (row->pass != (int64_t)rc->s->pass) return 0; /* the kernels' records are per pass */
  if (!g->wanted || g->skip_reason[0]) return 1;
  char settings[sizeof row->gpu_settings];
  runner_gpu_settings(rc->s, settings, sizeof settings);
  return row->gpu_ran && !strcmp(row->gpu_settings, settings);
}

/* A reused case whose predictions came from another profile (or none) than
 * this run's: predicted again on its mask (built anew), its row rewritten;
 * its measurements stay. 0, or -1 after printing. */
static int refresh_predictions(runner_ctx *rc, const fm_scn_case *c, const char *dir, case_row *row) {
  const gpu_step *g = rc->gpu;
  int stale = 0;
  for (int k = 0; k < row->nkernels; k++) stale |= strcmp(row->k[k].profile, g->profile_sig[k]) != 0;
  if (!stale) return 0;
  fm_colmask *m = NULL;
  fm_family_used used;
  if (case_build_mask(rc, c, &m, &used)) return -1;
  for (int k = 0; k < row->nkernels; k++) gpu_step_predict(g, rc, c, m, k, &row->k[k]);
  fm_colmask_destroy(m);
  return case_row_save(rc, c, dir, row);
}

/* One progress line: cases done / total, elapsed, ETA. On a terminal it is
 * rewritten in place (with the case just finished); elsewhere a line at each
 * quarter of the run and at its end, so that a log gets a few lines. */
static void progress(const char *cmd, int done, int total, const case_row *r, double elapsed,
                     int tty) {
  double eta = done ? elapsed / done * (total - done) : 0;
  if (tty) {
    fprintf(stderr, "\rfmsim %s: %d/%d cases done (elapsed %.1f s, ETA %.0f s)  %-40.40s", cmd, done,
            total, elapsed, eta, r->id);
    if (done == total) fputc('\n', stderr);
    return;
  }
  if (done != total && done * 4 / total == (done - 1) * 4 / total) return;
  fprintf(stderr, "fmsim %s: %d/%d cases done (elapsed %.1f s, ETA %.0f s)\n", cmd, done, total,
          elapsed, eta);
}

/* ---- the loops ---------------------------------------------------------------------------- */

static int stopped(runner_ctx *rc, int done, int n, int tty) {
  if (tty) fputc('\n', stderr);
  run_stop_message("fmsim %s: interrupted: %d of %d cases finished and kept in %s; rerun to "
                   "continue", rc->o->cmd, done, n, rc->o->out);
  run_stop_say();
  return 128 + run_stop_requested();
}

/* The partial index after a finished case: always the first time, then once the
 * time since the last write is 20 times what that write took (at most 5% of the
 * run on the index, however many cases). 0, or -1 after printing. */
static int partial_index(runner_ctx *rc, const case_row *rows, int done, int n, double *next) {
  double t = runner_now();
  if (done == n || t < *next) return 0;
  if (index_write(rc, rows, done, n)) return -1;
  double now = runner_now();
  *next = now + 20 * (now - t);
  return 0;
}

static int run_cases(runner_ctx *rc, const fm_scn_case *cases, int n, case_row *rows, int *reused) {
  int tty = isatty(2), done = 0;
  double t0 = runner_now(), next_index = 0;
  for (int i = 0; i < n; i++) {
    char dir[4500];
    snprintf(dir, sizeof dir, "%s/cases/%s", rc->o->out, cases[i].id);
    run_stop_message("fmsim %s: interrupted: %d of %d cases finished and kept in %s; rerun to "
                     "continue", rc->o->cmd, done, n, rc->o->out);
    if (run_stop_requested()) return stopped(rc, done, n, tty);
    if (reusable(rc, dir, &rows[i])) {
      (*reused)++;
      if (refresh_predictions(rc, &cases[i], dir, &rows[i])) return FM_EXIT_USAGE;
    } else {
      char row_path[4600];
      snprintf(row_path, sizeof row_path, "%s/row.tsv", dir);
      unlink(row_path); /* redone: not finished until its new row is written */
      run_stop_case(dir, 1);
      int r = runner_case(rc, &cases[i], dir, &rows[i]);
      if (r != 0) run_stop_sweep(dir, 1);
      run_stop_case(NULL, 0);
      if (r == RUNNER_STOPPED) return stopped(rc, done, n, tty);
      if (r != 0) return r == RUNNER_GPU_FAILED ? FM_EXIT_FAIL : FM_EXIT_USAGE;
    }
    done++;
    progress(rc->o->cmd, done, n, &rows[i], runner_now() - t0, tty);
    if (partial_index(rc, rows, done, n, &next_index)) return FM_EXIT_FAIL;
  }
  return FM_EXIT_OK;
}

static int run_scenario(runner_ctx *rc, const fm_scn_case *cases, int n) {
  char path[4300];
  fm_err err;
  gpu_step g;
  if (preflight(rc, cases, n)) return FM_EXIT_USAGE;
  rc->gpu = &g; /* the kernels and their profiles before anything is written */
  gpu_step_open(&g, rc, cases, n);
  if (gpu_step_profiles(&g, rc)) {
    gpu_step_close(&g);
    return FM_EXIT_USAGE;
  }
  snprintf(path, sizeof path, "%s/cases", rc->o->out);
  int reused = 0, code;
  if (fm_mkdir_p(path, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    gpu_step_close(&g);
    return FM_EXIT_USAGE;
  }
  sweep_stale(rc);
  case_row *rows = calloc((size_t)n, sizeof *rows);
  if (!rows || run_stop_begin()) {
    free(rows);
    gpu_step_close(&g);
    cli_error(rc->o->cmd, "out of memory");
    return FM_EXIT_FAIL;
  }
  if (g.wanted && g.skip_reason[0])
    fprintf(stderr, "fmsim %s: GPU step skipped: %s\n", rc->o->cmd, g.skip_reason);
  code = run_cases(rc, cases, n, rows, &reused);
  run_stop_end();
  if (code == FM_EXIT_OK && (index_write(rc, rows, n, n) || report_write(rc, rows, n)))
    code = FM_EXIT_FAIL;
  gpu_step_close(&g);
  if (code == FM_EXIT_OK && !rc->o->quiet)
    printf("%d cases (%d from an earlier run) -> %s/report.md\n", n, reused, rc->o->out);
  free(rows);
  return code;
}

/* The single form's tile: the kernel's own unless --br/--bc gave another,
 * which a GPU run cannot use (refused) and a simulation notes. */
static int single_tile(runner_ctx *rc, fm_scn_case *c) {
  const gpu_step *g = rc->gpu;
  const char *kname = fm_kernel_get(g->kernel[0])->name;
  int32_t kbr, kbc;
  fm_err err;
  if (fm_kernel_tile_size(g->kernel[0], FM_PASS_FWD, (int32_t)c->head_dim, &kbr, &kbc, &err) != FM_OK) {
    cli_error(rc->o->cmd, "--head-dim %lld: %s", (long long)c->head_dim, err.msg);
    return -1;
  }
  int given = c->br != 0, same = !given || (c->br == kbr && c->bc == kbc);
  if (!given) {
    c->br = kbr;
    c->bc = kbc;
  }
  if (g->session && !same) {
    cli_error(rc->o->cmd, "--br %lld --bc %lld: the tile size of kernel %s for head dim %lld is "
              "%d x %d; a GPU run cannot change it", (long long)c->br, (long long)c->bc, kname,
              (long long)c->head_dim, kbr, kbc);
    return -1;
  }
  for (int q = 0; q < RUN_NPASSES; q++) { /* every pass asked for has a tile */
    int32_t br, bc;
    char why[160];
    if ((rc->s->pass & run_pass_of(q)) &&
        gpu_pass_tile(g->kernel[0], run_pass_of(q), (int32_t)c->head_dim, &br, &bc, why, sizeof why)) {
      cli_error(rc->o->cmd, "--pass %s: %s", fm_pass_name(rc->s->pass), why);
      return -1;
    }
  }
  int reference = rc->s->kernels[0] == FM_KERNEL_AUTO && !g->session;
  if (!same)
    snprintf(rc->tile_note, sizeof rc->tile_note, "; tile size %lld x %lld from --br/--bc, not "
             "kernel %s's %d x %d", (long long)c->br, (long long)c->bc, kname, kbr, kbc);
  else
    snprintf(rc->tile_note, sizeof rc->tile_note, "; tile size %d x %d of kernel %s%s", kbr, kbc,
             kname, reference ? " (auto without a GPU: the reference GPU's kernel)" : "");
  return 0;
}

static int run_single(runner_ctx *rc, fm_scn_case *c) {
  gpu_step g;
  rc->gpu = &g;
  if (run_stop_begin()) return FM_EXIT_FAIL;
  gpu_step_open(&g, rc, c, 1);
  int code = FM_EXIT_OK;
  if (!g.session && !strncmp(g.skip_reason, "GPU session failed", 18)) {
    cli_error(rc->o->cmd, "GPU run failed: %s", g.skip_reason);
    code = FM_EXIT_FAIL;
  } else if (g.session && g.kernel_status[0][0]) {
    cli_error(rc->o->cmd, "--kernel: %s", g.kernel_status[0]);
    code = FM_EXIT_USAGE;
  } else if (single_tile(rc, c) || memory_check(rc, c)) {
    code = FM_EXIT_USAGE;
  }
  if (code == FM_EXIT_OK) {
    case_row row;
    run_stop_sweep(rc->o->out, 0); /* what a killed run left in the trace folder */
    run_stop_case(rc->o->out, 0);
    run_stop_message("fmsim %s: interrupted: no trace written to %s", rc->o->cmd, rc->o->out);
    int r = runner_case(rc, c, rc->o->out, &row);
    run_stop_case(NULL, 0);
    if (r != 0) run_stop_sweep(rc->o->out, 0);
    if (r == RUNNER_STOPPED) run_stop_say();
    code = r == 0 ? FM_EXIT_OK : r == RUNNER_STOPPED ? 128 + run_stop_requested()
                  : r == RUNNER_GPU_FAILED ? FM_EXIT_FAIL : FM_EXIT_USAGE;
  }
  run_stop_end();
  gpu_step_close(&g);
  return code;
}

int runner_run(const fm_scenario *s, const runner_opts *o) {
  runner_ctx rc;
  memset(&rc, 0, sizeof rc);
  rc.s = s;
  rc.o = o;
  fm_err err;
  fm_status st = s->sample_file[0] ? fm_samples_load(s->sample_file, &rc.samples, &err)
                                   : fm_samples_builtin(&rc.samples, &err);
  if (st != FM_OK) {
    cli_error(o->cmd, "%s%s", runner_where(&rc, 1, "sample_file"), err.msg);
    return FM_EXIT_USAGE;
  }
  fm_scn_case *cases = NULL;
  int n = 0, code = FM_EXIT_OK;
  if (fm_scenario_cases(s, &cases, &n, &err) != FM_OK) {
    cli_error(o->cmd, "%s", err.msg);
    code = FM_EXIT_USAGE;
  }
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (!o->only || fnmatch(o->only, cases[i].id, 0) == 0) cases[kept++] = cases[i];
  if (code == FM_EXIT_OK && kept == 0) {
    cli_error(o->cmd, "%s: no case matches --only '%s'", s->path, o->only ? o->only : "");
    code = FM_EXIT_USAGE;
  }
  if (code == FM_EXIT_OK && gpu_step_profile_load(&rc)) code = FM_EXIT_USAGE;
  /* the folder is locked and checked for planted links before any work
     (fm_fileio.h rule 7): a scenario's cases/ID/FILE, a trace's members */
  fm_outdir_lock lock = {.held = 0};
  if (code == FM_EXIT_OK && fm_outdir_lock_take(&lock, o->out, o->single ? 1 : 3, &err) != FM_OK) {
    cli_error(o->cmd, "%s", err.msg);
    code = FM_EXIT_USAGE;
  }
  if (code == FM_EXIT_OK) code = o->single ? run_single(&rc, &cases[0]) : run_scenario(&rc, cases, kept);
  fm_outdir_lock_release(&lock);
  free(cases);
  free(rc.profile);
  fm_samples_free(&rc.samples);
  return code;
}
