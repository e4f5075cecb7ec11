/* fmsim run SCENARIO.yaml: runs every case of a scenario file, one trace
 * folder per case (out/cases/ID), then an index (CSV and JSON) and a
 * Markdown report. Finished cases survive Ctrl-C and are skipped on a rerun:
 * each case folder is committed atomically, with its index row (row.tsv)
 * written last. */
#define _POSIX_C_SOURCE 200809L
#include "scenario_run.h"

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "fm_kernels.h"
#include "fm_fileio.h"
#include "fm_cost.h"
#include "fm_dense.h"
#include "fm_forms.h"
#include "fm_intervals_io.h"
#include "fm_json.h"
#include "fm_memory.h"
#include "fm_npy.h"
#include "fm_paper.h"
#include "fm_scenario.h"
#include "fm_tiles.h"
#include "fm_trace.h"
#ifdef FM_HAVE_VIZ
#include "viz.h"
#endif
#ifdef FM_HAVE_GPU_RUN
#include "fm_attn.h"
#include "fm_measure.h"
#endif

static const char *cmd = "run";

static const char *help =
    "usage: fmsim run SCENARIO.yaml [--out DIR] [--only PATTERN]\n\n"
    "Runs every case of a scenario file (see scenarios/ and core/fm_scenario.h for the format):\n"
    "one trace folder per case under DIR/cases/, an index (DIR/index.csv, DIR/index.json)\n"
    "and a report (DIR/report.md). Steps that need a GPU are reported as skipped without one.\n"
    "Ctrl-C keeps the finished cases; a rerun skips them.\n\n"
    "  --out DIR       output folder (default: the scenario's output:, else out/NAME)\n"
    "  --only PATTERN  run only cases whose id matches the shell pattern (e.g. '*document*S32768*')\n";

static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* What the report needs from a case; persisted as row.tsv in its folder. */
typedef struct case_row {
  char id[256], family[64], params[512], form[16], steps[128];
  int64_t seqlen, head_dim, br, bc, batch, heads, sets, sample, seed, ndocs;
  int64_t masked, partial, unmasked, total;
  int64_t partial_but_masked, partial_but_unmasked; /* rule says partial, exact class differs */
  int64_t dense_bytes, block_mask_bytes, interval_bytes;
  double rho, rho_exact;
  double chunk_rho, chunk_boundaries; /* chunks report: NAN otherwise */
  int64_t sim_read, sim_write;         /* simulate step: modelled bytes (cost model), -1 if not run */
  double sim_flops;                    /* simulate step: the paper's FLOP count at Br x Bc */
  double gpu_ms, gpu_tflops, gpu_rho;  /* GPU step: median kernel time, paper TFLOP/s, rho at
                                          the kernel's tile size; NAN when not run */
} case_row;

#define ROW_FIELDS(X)                                                                  \
  X(S, id) X(S, family) X(S, params) X(S, form) X(I, seqlen) X(I, head_dim) X(I, br)   \
  X(I, bc) X(I, batch) X(I, heads) X(I, sets) X(I, sample) X(I, seed) X(I, ndocs) X(I, masked)     \
  X(I, partial) X(I, unmasked) X(I, total) X(I, partial_but_masked) X(I, partial_but_unmasked) \
  X(I, dense_bytes) X(I, block_mask_bytes)    \
  X(I, interval_bytes) X(D, rho) X(D, rho_exact) X(D, chunk_rho) X(D, chunk_boundaries) \
  X(I, sim_read) X(I, sim_write) X(D, sim_flops) X(D, gpu_ms) X(D, gpu_tflops) X(D, gpu_rho) \
  X(S, steps)

static int row_write(FILE *f, const case_row *r) {
#define S(name) fprintf(f, #name "\t%s\n", r->name);
#define I(name) fprintf(f, #name "\t%lld\n", (long long)r->name);
#define D(name) fprintf(f, #name "\t%.17g\n", r->name);
#define X(kind, name) kind(name)
  ROW_FIELDS(X)
#undef X
#undef S
#undef I
#undef D
  return ferror(f) ? -1 : 0;
}

static int row_read(const char *path, case_row *r) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  memset(r, 0, sizeof *r);
  char line[1024];
  int fields = 0;
  while (fgets(line, sizeof line, f)) {
    char *tab = strchr(line, '\t');
    if (!tab) continue;
    *tab = 0;
    char *v = tab + 1;
    v[strcspn(v, "\n")] = 0;
#define S(name) if (!strcmp(line, #name)) { snprintf(r->name, sizeof r->name, "%s", v); fields++; }
#define I(name) if (!strcmp(line, #name)) { r->name = strtoll(v, NULL, 10); fields++; }
#define D(name) if (!strcmp(line, #name)) { r->name = strtod(v, NULL); fields++; }
#define X(kind, name) kind(name)
    ROW_FIELDS(X)
#undef X
#undef S
#undef I
#undef D
  }
  fclose(f);
#define X(kind, name) +1
  return fields == 0 ROW_FIELDS(X) ? 0 : -1; /* every field of case_row */
#undef X
}

static int64_t available_memory_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  long long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
  if (f) fclose(f);
  if (kb > 0) return (int64_t)kb * 1024;
  return (int64_t)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
}

/* Peak bytes a case needs: interval vectors, two tile arrays, a dense file's rows. */
static int64_t case_memory(const fm_scenario *s, const fm_scn_case *c) {
  const fm_scn_mask *m = &s->masks[c->mask_index];
  const fm_family_info *fam = m->family[0] ? fm_family_find(m->family) : NULL;
  int64_t sets = fam && fam->per_head ? c->batch * c->heads : 1, sq = c->seqlen, sk = c->seqlen;
  if (m->file[0]) {
    /* a file mask: its sets and lengths from the .npy header (an unreadable file is
       reported by the pre-flight, with its line) */
    fm_npy_header h;
    if (fm_npy_read_header_path(m->file, &h, NULL) == FM_OK && h.ndim >= 2) {
      int interval_file = m->is_intervals && h.ndim == 4;
      sk = interval_file ? h.shape[2] : h.shape[h.ndim - 1];
      sq = interval_file ? sk : h.shape[h.ndim - 2];
      sets = interval_file ? h.shape[0] * h.shape[1] : h.count / (sq * sk > 0 ? sq * sk : 1);
    }
  }
  int64_t tiles = sets * ((sq + c->br - 1) / c->br) * ((sk + c->bc - 1) / c->bc);
  return sets * sk * 16 * 2 + 2 * tiles;
}

/* Intra-chunk study (chunkwise linear RNNs): over the diagonal C x C blocks,
 * the fraction of br x bc tiles the min/max rule masks, and the document
 * boundaries strictly inside a chunk, per chunk. */
static void chunk_study(const fm_colmask *m, const uint8_t *classes, int64_t br, int64_t bc,
                        int64_t chunk, double *rho, double *boundaries) {
  int64_t S = fm_colmask_sk(m), tr = (S + br - 1) / br, tc = (S + bc - 1) / bc;
  int64_t masked = 0, tiles = 0, bounds = 0, nchunks = S / chunk;
  for (int64_t ch = 0; ch < nchunks; ch++) {
    for (int64_t rt = ch * chunk / br; rt < (ch + 1) * chunk / br && rt < tr; rt++)
      for (int64_t ct = ch * chunk / bc; ct < (ch + 1) * chunk / bc && ct < tc; ct++) {
        masked += classes[rt * tc + ct] == FM_TILE_MASKED;
        tiles++;
      }
    /* a document boundary at p: LTS (the document end) changes between p-1 and p */
    const int32_t *lts = fm_colmask_cvec(m, 0, FM_LTS);
    for (int64_t p = ch * chunk + 1; p < (ch + 1) * chunk; p++) bounds += lts[p] != lts[p - 1];
  }
  *rho = tiles ? (double)masked / (double)tiles : NAN;
  *boundaries = nchunks ? (double)bounds / (double)nchunks : NAN;
}

/* Builds the case's mask: a family, an interval file, or (later) a dense file. */
static int build_case_mask(const fm_scenario *s, const fm_scn_case *c, fm_colmask **out,
                           fm_family_used *used) {
  const fm_scn_mask *m = &s->masks[c->mask_index];
  memset(used, 0, sizeof *used);
  if (m->family[0]) {
    cli_mask_opts o;
    cli_mask_opts_init(&o);
    o.family = m->family;
    o.seqlen = c->seqlen;
    o.sample = c->sample;
    o.batch = c->batch;
    o.heads = c->heads;
    o.seed = c->seed;
    o.samples_path = s->sample_file[0] ? s->sample_file : NULL;
    for (int p = 0; p < m->nparams; p++) o.params[o.nparams++] = m->params[p];
    fm_err err;
    if (cli_family_build(&o, out, used, &err) != FM_OK) {
      cli_error(cmd, "%s:%d: key 'family': %s", s->path, m->line, err.msg);
      return -1;
    }
    return 0;
  }
  fm_err err;
  if (m->is_intervals) {
    if (fm_colmask_load_npy(m->file, m->causal, 0, out, &err) != FM_OK) {
      cli_error(cmd, "%s:%d: %s", s->path, m->line, err.msg);
      return -1;
    }
    return 0;
  }
  /* a dense mask: scanned once (O(Sk) state), converted to its smallest form */
  fm_dense_opts dopts = {.masked_true = m->masked_true, .keep_intervals = 1};
  fm_dense_result *res = NULL;
  fm_status st = fm_dense_check_file(m->file, &dopts, &res, &err);
  if (st == FM_OK) st = fm_dense_result_to_colmask(res, FM_FORM_NONE, out, &err);
  fm_dense_result_destroy(res);
  if (st != FM_OK) {
    cli_error(cmd, "%s:%d: key 'dense': %s", s->path, m->line, err.msg);
    return -1;
  }
  return 0;
}

/* The GPU step: one session for the whole scenario when fmsim has a usable
 * GPU, else the reason it is skipped (said in the report and in each row). */
typedef struct gpu_step {
  int wanted;
  char skip_reason[400]; /* "" when the GPU runs */
  char device[256];
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_session *session;
#endif
} gpu_step;

static void gpu_step_open(const fm_scenario *s, const fm_scn_case *cases, int ncases, gpu_step *g) {
  memset(g, 0, sizeof *g);
  g->wanted = (s->run & FM_SCN_GPU) != 0;
  if (!g->wanted) return;
#ifdef FM_HAVE_GPU_RUN
  fm_err err;
  if (fm_attn_device_info(g->device, sizeof g->device, &err) != FM_OK) {
    snprintf(g->skip_reason, sizeof g->skip_reason, "no GPU: %.300s", err.msg);
    return;
  }
  int64_t tokens = 0, hidden = 0;
  for (int i = 0; i < ncases; i++) {
    if (cases[i].batch * cases[i].seqlen > tokens) tokens = cases[i].batch * cases[i].seqlen;
    if (cases[i].heads * cases[i].head_dim > hidden) hidden = cases[i].heads * cases[i].head_dim;
  }
  if (fm_gpu_session_create(tokens, hidden, 0, s->seed, &g->session, &err) != FM_OK)
    snprintf(g->skip_reason, sizeof g->skip_reason, "GPU session failed: %.300s", err.msg);
#else
  (void)cases;
  (void)ncases;
  snprintf(g->skip_reason, sizeof g->skip_reason, "this fmsim was built without the CUDA kernels");
#endif
}

static void gpu_step_close(gpu_step *g) {
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_session_destroy(g->session);
  g->session = NULL;
#else
  (void)g;
#endif
}

/* Times the skip kernel on the case's mask (median after warm-up, L2 flushed)
 * and writes gpu.json beside the trace. 0 on success or when skipped. */
static int gpu_step_run(gpu_step *g, const fm_scn_case *c, const fm_colmask *m, const char *case_dir,
                        case_row *row) {
  row->gpu_ms = row->gpu_tflops = row->gpu_rho = NAN;
  if (!g->wanted || g->skip_reason[0]) return 0;
#ifdef FM_HAVE_GPU_RUN
  fm_err err;
  int32_t kbr, kbc;
  fm_kernel_tile_size(FM_KERNEL_SM80, (int32_t)c->head_dim, &kbr, &kbc, NULL);
  fm_tile_counts kc;
  if (fm_classify(m, kbr, kbc, &kc, NULL, NULL, &err) != FM_OK) {
    cli_error(cmd, "case %s: %s", c->id, err.msg);
    return -1;
  }
  fm_gpu_case gc = {.mask = m, .batch = (int32_t)c->batch, .heads = (int32_t)c->heads, .head_dim = (int32_t)c->head_dim, .variant = FM_VARIANT_SKIP, .kernel = FM_KERNEL_SM80};
  fm_gpu_opts go = {2, 5, 0, 0, 0, 1, 0, 0};
  fm_gpu_result res;
  memset(&res, 0, sizeof res);
  if (fm_gpu_session_run(g->session, &gc, &go, &res, &err) != FM_OK) {
    cli_error(cmd, "case %s: GPU run failed: %s", c->id, err.msg);
    fm_gpu_result_free(&res);
    return -1;
  }
  double S = (double)c->seqlen;
  double flops = 4.0 * (double)c->batch * (double)c->heads * S * S * (double)c->head_dim * (1 - kc.sparsity);
  row->gpu_ms = res.timing.median_ms;
  row->gpu_rho = kc.sparsity;
  row->gpu_tflops = flops / (res.timing.median_ms * 1e-3) / 1e12;
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", g->device);
  fm_json_string(&j, "variant", "skip");
  fm_json_int(&j, "tile_rows", kbr);
  fm_json_int(&j, "tile_cols", kbc);
  fm_json_double(&j, "sparsity", kc.sparsity);
  fm_json_string(&j, "timing_source", res.timing.source);
  fm_json_int(&j, "warmup", res.timing.warmup);
  fm_json_int(&j, "reps", res.timing.reps);
  fm_json_bool(&j, "l2_flushed", res.timing.l2_flushed);
  fm_json_double(&j, "median_ms", res.timing.median_ms);
  fm_json_double(&j, "min_ms", res.timing.min_ms);
  fm_json_double(&j, "max_ms", res.timing.max_ms);
  fm_json_double(&j, "tflops", row->gpu_tflops);
  fm_json_end(&j);
  char path[4700];
  snprintf(path, sizeof path, "%s/gpu.json", case_dir);
  fm_status st = fm_write_file_atomic(path, j.buf, j.len, &err);
  fm_json_free(&j);
  fm_gpu_result_free(&res);
  if (st != FM_OK) {
    cli_error(cmd, "case %s: %s", c->id, err.msg);
    return -1;
  }
  return 0;
#else
  (void)c;
  (void)m;
  (void)case_dir;
  return 0;
#endif
}

static int run_case(const fm_scenario *s, const fm_scn_case *c, const char *case_dir, gpu_step *g,
                    case_row *row) {
  const fm_scn_mask *sm = &s->masks[c->mask_index];
  fm_colmask *m = NULL;
  fm_family_used used;
  if (build_case_mask(s, c, &m, &used)) return -1;
  fm_analysis a;
  fm_analysis_init(&a, m, sm->family[0] ? sm->family : sm->file, used.params, used.docs_source,
                   c->batch, c->heads, (int32_t)c->br, (int32_t)c->bc);
  size_t n = (size_t)fm_colmask_nsets(m) * (size_t)a.tr * (size_t)a.tc;
  uint8_t *classes = malloc(n), *exact = malloc(n);
  fm_err err;
  int rc = 0;
  if (!classes || !exact) {
    cli_error(cmd, "case %s: cannot allocate %zu bytes of tile arrays", c->id, 2 * n);
    rc = -1;
  } else if (fm_classify(m, a.br, a.bc, &a.counts, classes, exact, &err) != FM_OK ||
             fm_trace_write_analysis(case_dir, &a, m, classes, exact, &err) != FM_OK) {
    cli_error(cmd, "case %s: %s", c->id, err.msg);
    rc = -1;
  }
  if (rc == 0) {
    memset(row, 0, sizeof *row);
    snprintf(row->id, sizeof row->id, "%s", c->id);
    snprintf(row->family, sizeof row->family, "%s", sm->family[0] ? sm->family : "file");
    snprintf(row->params, sizeof row->params, "%s", used.params);
    snprintf(row->form, sizeof row->form, "%s", fm_form_name(a.form));
    row->seqlen = fm_colmask_sk(m);
    row->head_dim = c->head_dim;
    row->br = c->br;
    row->bc = c->bc;
    row->batch = c->batch;
    row->heads = c->heads;
    row->sets = fm_colmask_nsets(m);
    row->sample = c->sample;
    row->seed = (int64_t)c->seed;
    row->ndocs = used.ndocs;
    row->masked = a.counts.minmax[FM_TILE_MASKED];
    row->partial = a.counts.minmax[FM_TILE_PARTIAL];
    row->unmasked = a.counts.minmax[FM_TILE_UNMASKED];
    row->total = a.counts.total;
    row->partial_but_masked = a.counts.partial_but_masked;
    row->partial_but_unmasked = a.counts.partial_but_unmasked;
    row->rho = a.counts.sparsity;
    row->rho_exact = a.counts.sparsity_exact;
    row->dense_bytes = a.bytes.dense;
    row->block_mask_bytes = a.bytes.block_mask;
    row->interval_bytes = a.bytes.intervals;
    row->chunk_rho = row->chunk_boundaries = NAN;
    if (s->report == FM_SCN_REPORT_CHUNKS)
      chunk_study(m, classes, c->br, c->bc, s->chunk, &row->chunk_rho, &row->chunk_boundaries);
    row->sim_read = row->sim_write = -1;
    row->sim_flops = NAN;
    if (s->run & FM_SCN_SIMULATE) {
      /* the CPU simulation: the cost model of the skip kernel at this tile size */
      fm_cost_shape shape = {c->batch, c->heads, (int32_t)c->head_dim, a.br, a.bc, 2, FM_VARIANT_SKIP};
      fm_cost cost;
      if (fm_cost_compute(m, &shape, classes, NULL, &cost, &err) != FM_OK) {
        cli_error(cmd, "case %s: %s", c->id, err.msg);
        rc = -1;
      } else {
        row->sim_read = cost.bytes_read;
        row->sim_write = cost.bytes_write;
        row->sim_flops = cost.flops_paper;
      }
    }
    if (rc == 0 && gpu_step_run(g, c, m, case_dir, row)) rc = -1;
    snprintf(row->steps, sizeof row->steps, "analyze%s%s%s",
             s->run & FM_SCN_SIMULATE ? ",simulate" : "",
             !g->wanted ? "" : g->skip_reason[0] ? ",gpu:skipped" : ",gpu",
             s->run & FM_SCN_PEER ? ",peer:skipped(bench/h200.sh runs the peer)" : "");
    /* the row is the case's completion mark: written last, atomically */
    char path[4700];
    snprintf(path, sizeof path, "%s/row.tsv", case_dir);
    fm_atomic_file af;
    if (rc == 0 && (fm_atomic_open(&af, path, &err) != FM_OK || row_write(af.f, row) != 0 ||
                    fm_atomic_close(&af, 1, &err) != FM_OK)) {
      fm_atomic_close(&af, 0, NULL);
      cli_error(cmd, "case %s: %s", c->id, err.msg);
      rc = -1;
    }
  }
  free(classes);
  free(exact);
  fm_colmask_destroy(m);
  return rc;
}

static void progress(int done, int total, const char *id, double elapsed, int tty) {
  double eta = done ? elapsed / done * (total - done) : 0;
  if (tty) {
    int width = 30, filled = total ? done * width / total : width;
    fprintf(stderr, "\r[%.*s%*s] %d/%d  ETA %4.0fs  %-60.60s", filled,
            "==============================", width - filled, "", done, total, eta, id);
    if (done == total) fputc('\n', stderr);
  } else {
    fprintf(stderr, "fmsim run: [%d/%d] %s (elapsed %.1fs, ETA %.0fs)\n", done, total, id, elapsed, eta);
  }
}

static int write_index(const char *out_dir, const case_row *rows, int n) {
  char path[4400];
  fm_err err;
  /* CSV */
  size_t cap = 4096 + (size_t)n * 1024, len = 0;
  char *csv = malloc(cap);
  if (!csv) return -1;
  len += (size_t)snprintf(csv + len, cap - len,
                          "id,family,seqlen,head_dim,br,bc,batch,heads,sets,sample,seed,form,"
                          "tiles_total,tiles_masked,tiles_partial,tiles_unmasked,sparsity,"
                          "sparsity_exact,bytes_dense,bytes_block_mask,bytes_intervals,steps\n");
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    len += (size_t)snprintf(csv + len, cap - len,
                            "%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%lld,%lld,%lld,%lld,%.6f,%.6f,%lld,%lld,%lld,\"%s\"\n",
                            r->id, r->family, (long long)r->seqlen, (long long)r->head_dim,
                            (long long)r->br, (long long)r->bc, (long long)r->batch,
                            (long long)r->heads, (long long)r->sets, (long long)r->sample,
                            (long long)r->seed, r->form, (long long)r->total, (long long)r->masked,
                            (long long)r->partial, (long long)r->unmasked, r->rho, r->rho_exact,
                            (long long)r->dense_bytes, (long long)r->block_mask_bytes,
                            (long long)r->interval_bytes, r->steps);
  }
  snprintf(path, sizeof path, "%s/index.csv", out_dir);
  int rc = fm_write_file_atomic(path, csv, len, &err) == FM_OK ? 0 : -1;
  free(csv);
  /* JSON */
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_array(&j, NULL);
  for (int i = 0; i < n && rc == 0; i++) {
    const case_row *r = &rows[i];
    fm_json_object(&j, NULL);
    fm_json_string(&j, "id", r->id);
    fm_json_string(&j, "trace", r->id[0] ? r->id : NULL);
    fm_json_string(&j, "family", r->family);
    fm_json_string(&j, "params", r->params);
    fm_json_int(&j, "seqlen", r->seqlen);
    fm_json_int(&j, "head_dim", r->head_dim);
    fm_json_int(&j, "br", r->br);
    fm_json_int(&j, "bc", r->bc);
    fm_json_int(&j, "batch", r->batch);
    fm_json_int(&j, "heads", r->heads);
    fm_json_int(&j, "sets", r->sets);
    fm_json_int(&j, "sample", r->sample);
    fm_json_int(&j, "seed", r->seed);
    fm_json_int(&j, "ndocs", r->ndocs);
    fm_json_string(&j, "form", r->form);
    fm_json_int(&j, "tiles_total", r->total);
    fm_json_int(&j, "tiles_masked", r->masked);
    fm_json_int(&j, "tiles_partial", r->partial);
    fm_json_int(&j, "tiles_unmasked", r->unmasked);
    fm_json_double(&j, "sparsity", r->rho);
    fm_json_double(&j, "sparsity_exact", r->rho_exact);
    fm_json_object(&j, "bytes");
    fm_json_int(&j, "dense", r->dense_bytes);
    fm_json_int(&j, "block_mask", r->block_mask_bytes);
    fm_json_int(&j, "intervals", r->interval_bytes);
    fm_json_end(&j);
    fm_json_double(&j, "chunk_sparsity", r->chunk_rho);
    fm_json_double(&j, "chunk_boundaries", r->chunk_boundaries);
    if (r->sim_read >= 0) {
      fm_json_object(&j, "simulated");
      fm_json_int(&j, "bytes_read", r->sim_read);
      fm_json_int(&j, "bytes_write", r->sim_write);
      fm_json_double(&j, "flops", r->sim_flops);
      fm_json_end(&j);
    }
    if (!isnan(r->gpu_ms)) {
      fm_json_object(&j, "gpu");
      fm_json_double(&j, "time_ms", r->gpu_ms);
      fm_json_double(&j, "tflops", r->gpu_tflops);
      fm_json_double(&j, "sparsity", r->gpu_rho);
      fm_json_end(&j);
    }
    fm_json_string(&j, "steps", r->steps);
    fm_json_end(&j);
  }
  fm_json_end(&j);
  snprintf(path, sizeof path, "%s/index.json", out_dir);
  if (rc == 0 && (j.oom || fm_write_file_atomic(path, j.buf, j.len, &err) != FM_OK)) rc = -1;
  fm_json_free(&j);
  if (rc) cli_error(cmd, "%s: cannot write the index", out_dir);
  return rc;
}

/* ---- the report ---- */

static void report_cases(FILE *f, const case_row *rows, int n) {
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  int sim = 0, gpu = 0;
  for (int i = 0; i < n; i++) {
    sim |= rows[i].sim_read >= 0;
    gpu |= !isnan(rows[i].gpu_ms);
  }
  fprintf(f, "| case | S | D | Br x Bc | sets | form | rho (min/max) | rho (exact) | masked / partial / unmasked | rule's partial: exactly masked / unmasked | dense | block mask | intervals |%s%s\n",
          sim ? " modelled read / write | modelled GFLOP |" : "", gpu ? " GPU ms | GPU TFLOP/s |" : "");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|---|---|---|---|%s%s\n", sim ? "---|---|" : "",
          gpu ? "---|---|" : "");
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    fprintf(f, "| %s | %lld | %lld | %lld x %lld | %lld | %s | %.4f | %.4f | %lld / %lld / %lld | %lld / %lld | %s | %s | %s |",
            r->id, (long long)r->seqlen, (long long)r->head_dim, (long long)r->br, (long long)r->bc,
            (long long)r->sets, r->form, r->rho, r->rho_exact, (long long)r->masked,
            (long long)r->partial, (long long)r->unmasked, (long long)r->partial_but_masked,
            (long long)r->partial_but_unmasked, cli_bytes(r->dense_bytes, b1, sizeof b1),
            cli_bytes(r->block_mask_bytes, b2, sizeof b2), cli_bytes(r->interval_bytes, b3, sizeof b3));
    if (sim) fprintf(f, " %s / %s | %.4g |", cli_bytes(r->sim_read, b4, sizeof b4),
                     cli_bytes(r->sim_write, b5, sizeof b5), r->sim_flops / 1e9);
    if (gpu) fprintf(f, " %.3f | %.1f |", r->gpu_ms, r->gpu_tflops);
    fputc('\n', f);
  }
}

/* Mean rho per (family, S) over samples, draws and head dims, beside the paper. */
static void report_paper_table(FILE *f, const case_row *rows, int n) {
  fprintf(f, "Block sparsity rho by the min/max rule, mean over the cases of each family and length "
             "(the paper's five document samples), beside the paper's figure. The paper's document "
             "column comes from a generator that is not block diagonal, so fmsim's true document "
             "mask is sparser there.\n\n");
  int64_t lengths[FM_SCN_MAX_LIST];
  int nl = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int l = 0; l < nl; l++) seen |= lengths[l] == rows[i].seqlen;
    if (!seen && nl < FM_SCN_MAX_LIST) lengths[nl++] = rows[i].seqlen;
  }
  fprintf(f, "| family |");
  for (int l = 0; l < nl; l++) fprintf(f, " S=%lld fmsim | paper | diff |", (long long)lengths[l]);
  fprintf(f, "\n|---|");
  for (int l = 0; l < nl; l++) fprintf(f, "---|---|---|");
  fprintf(f, "\n");
  for (int i = 0; i < n; i++) {
    int first = 1;
    for (int k = 0; k < i; k++) first &= strcmp(rows[k].family, rows[i].family) != 0;
    if (!first) continue;
    fprintf(f, "| %s |", rows[i].family);
    for (int l = 0; l < nl; l++) {
      double sum = 0;
      int cnt = 0;
      for (int k = 0; k < n; k++)
        if (!strcmp(rows[k].family, rows[i].family) && rows[k].seqlen == lengths[l]) {
          sum += rows[k].rho;
          cnt++;
        }
      double paper = fm_paper_sparsity(rows[i].family, lengths[l]);
      if (!cnt) fprintf(f, " - | - | - |");
      else if (paper < 0) fprintf(f, " %.3f | - | - |", sum / cnt);
      else fprintf(f, " %.3f | %.2f | %+.3f |", sum / cnt, paper, sum / cnt - paper);
    }
    fprintf(f, "\n");
  }
}

/* Cases bucketed by block sparsity (0.1 wide), per family. */
static void report_sweep(FILE *f, const case_row *rows, int n) {
  fprintf(f, "Cases bucketed by block sparsity rho (min/max rule), per family, as the paper's "
             "Figure 4a samples them. Kernel times per bucket come from GPU runs (`run: [gpu]` on a "
             "machine with a GPU, or `fmsim bench`).\n\n");
  fprintf(f, "| family | rho bucket | cases | mean rho | min rho | max rho |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    int first = 1;
    for (int k = 0; k < i; k++) first &= strcmp(rows[k].family, rows[i].family) != 0;
    if (!first) continue;
    for (int b = 0; b < 10; b++) {
      double sum = 0, lo = 1, hi = 0;
      int cnt = 0;
      for (int k = 0; k < n; k++) {
        int bucket = (int)(rows[k].rho * 10);
        if (bucket > 9) bucket = 9;
        if (strcmp(rows[k].family, rows[i].family) || bucket != b) continue;
        sum += rows[k].rho;
        lo = rows[k].rho < lo ? rows[k].rho : lo;
        hi = rows[k].rho > hi ? rows[k].rho : hi;
        cnt++;
      }
      if (cnt)
        fprintf(f, "| %s | [%.1f, %.1f) | %d | %.3f | %.3f | %.3f |\n", rows[i].family, b / 10.0,
                (b + 1) / 10.0, cnt, sum / cnt, lo, hi);
    }
  }
  /* kernel time against 1 - rho (rho at the kernel's tile size): least squares */
  double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
  int m = 0;
  for (int i = 0; i < n; i++) {
    if (isnan(rows[i].gpu_ms)) continue;
    double x = 1 - rows[i].gpu_rho, y = rows[i].gpu_ms;
    sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
    m++;
  }
  if (m >= 3) {
    double b = (m * sxy - sx * sy) / (m * sxx - sx * sx), a = (sy - b * sx) / m;
    double ss_tot = syy - sy * sy / m, ss_res = 0;
    for (int i = 0; i < n; i++)
      if (!isnan(rows[i].gpu_ms)) {
        double e = rows[i].gpu_ms - (a + b * (1 - rows[i].gpu_rho));
        ss_res += e * e;
      }
    fprintf(f, "\nKernel time against 1 - rho over %d masks: time = %.3f ms + %.3f ms x (1 - rho), "
               "R^2 = %.4f.\n", m, a, b, ss_tot > 0 ? 1 - ss_res / ss_tot : NAN);
  }
}

static void report_memory(FILE *f, const case_row *rows, int n) {
  char b1[32], b2[32], b3[32];
  fprintf(f, "Mask memory against sequence length (one mask shared by all heads; the block mask at "
             "FlexAttention's 128 x 128 blocks; intervals include the 8 tile-bound vectors).\n\n");
  fprintf(f, "| family | S | dense bool | FlexAttention BlockMask | FlashMask intervals | dense / intervals |\n|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++)
    fprintf(f, "| %s | %lld | %s | %s | %s | %.0fx |\n", rows[i].family, (long long)rows[i].seqlen,
            cli_bytes(rows[i].dense_bytes, b1, sizeof b1), cli_bytes(rows[i].block_mask_bytes, b2, sizeof b2),
            cli_bytes(rows[i].interval_bytes, b3, sizeof b3),
            (double)rows[i].dense_bytes / (double)rows[i].interval_bytes);
}

/* Chunkwise linear RNNs: intra-chunk tiles skipped beyond the causal ones,
 * against the estimate causal + m * (n-1)(n-2)/6 / n^2 (n sub-chunks per
 * chunk, m document boundaries per chunk; 28/64 + m * 7/64 for n = 8). */
static void report_chunks(FILE *f, const case_row *rows, int n, int64_t chunk) {
  fprintf(f, "Intra-chunk tiling of a chunkwise linear RNN with document packing: chunks of C = %lld "
             "tokens, sub-chunk tiles of Br x Bc. Measured: the fraction of sub-chunk tiles of the "
             "diagonal chunks that the min/max rule skips. Estimate: causal + m (n-1)(n-2) / (6 n^2) "
             "with n sub-chunks per chunk and m document boundaries inside a chunk (for C = 128, "
             "c = 16: 28/64 + 7m/64).\n\n", (long long)chunk);
  fprintf(f, "| case | mean document length | boundaries per chunk m | skipped (measured) | beyond causal (measured) | estimate | beyond causal (estimate) |\n|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const case_row *r = &rows[i];
    double sub = (double)chunk / (double)r->br, causal = sub * (sub - 1) / 2 / (sub * sub);
    double per_boundary = (sub - 1) * (sub - 2) / 6 / (sub * sub);
    double est = causal + r->chunk_boundaries * per_boundary;
    fprintf(f, "| %s | %.1f | %.3f | %.4f | %.4f | %.4f | %.4f |\n", r->id,
            r->ndocs ? (double)r->seqlen / (double)r->ndocs : NAN, r->chunk_boundaries, r->chunk_rho,
            r->chunk_rho - causal, est, est - causal);
  }
}

#ifdef FM_HAVE_VIZ
/* One PNG figure into dir/name, listed in names[] as figures/name. */
static int write_figure(const char *dir, const char *name, double w, double h, viz_draw_fn draw,
                        void *ctx, char names[][64], int *nnames) {
  char path[4400];
  fm_err err;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (viz_write_figure(path, VIZ_FMT_PNG, w, h, 72, draw, ctx, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  snprintf(names[(*nnames)++], 64, "figures/%.50s", name);
  return 0;
}
#endif

/* The scenario's figures, as PNG under OUT/figures; the report links them.
 * Names of the files written go to names[] (relative to out_dir). */
static int write_figures(const fm_scenario *s, const char *out_dir, const case_row *rows, int n,
                         char names[][64], int *nnames) {
  *nnames = 0;
  if (!s->figures) return 0;
#ifdef FM_HAVE_VIZ
  char dir[4200], path[4400];
  fm_err err;
  snprintf(dir, sizeof dir, "%s/figures", out_dir);
  if (fm_mkdir_p(dir, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  if (s->figures & FM_SCN_FIG_GALLERY) {
    viz_gallery_opts go = {s->seqlen.v[0], (int32_t)s->br.v[0], (int32_t)s->bc.v[0], -1, s->seed,
                           NULL, 1};
    if (write_figure(dir, "gallery.png", 1600, 1350, viz_draw_gallery, &go, names, nnames)) return -1;
  }
  if (s->figures & FM_SCN_FIG_MEMORY) {
    viz_memory_opts mo = {(int32_t)s->bc.v[0], 1};
    if (write_figure(dir, "memory.png", 1000, 650, viz_draw_memory, &mo, names, nnames)) return -1;
  }
  if (s->figures & FM_SCN_FIG_TILES) {
    /* one figure per case trace, at most 16 (a report, not an archive) */
    for (int i = 0; i < n && i < 16; i++) {
      viz_state st;
      viz_state_init(&st, 1200, 800);
      viz_scene *scene = NULL;
      char trace[4300];
      snprintf(trace, sizeof trace, "%s/cases/%s", out_dir, rows[i].id);
      viz_scene_opts so;
      memset(&so, 0, sizeof so);
      so.path = trace;
      so.head_dim = (int32_t)rows[i].head_dim;
      snprintf(path, sizeof path, "%s/tiles-%s.png", dir, rows[i].id);
      fm_status vs = viz_scene_create(&so, &st, &scene, &err);
      if (vs == FM_OK) {
        st.scene = scene;
        vs = viz_scene_sync(scene, &st, &err);
      }
      if (vs == FM_OK) vs = viz_write_figure(path, VIZ_FMT_PNG, 1200, 800, 72, viz_draw_state_fn, &st, &err);
      viz_scene_destroy(scene);
      if (vs != FM_OK) {
        cli_error(cmd, "%s", err.msg);
        return -1;
      }
      if (*nnames < 18) snprintf(names[(*nnames)++], 64, "figures/tiles-%.40s.png", rows[i].id);
    }
  }
  return 0;
#else
  (void)out_dir;
  (void)rows;
  (void)n;
  (void)names;
  fprintf(stderr, "fmsim run: figures skipped: this fmsim was built without cairo\n");
  return 0;
#endif
}

static int write_report(const fm_scenario *s, const char *out_dir, const gpu_step *g, case_row *rows,
                        int n) {
  char path[4400];
  snprintf(path, sizeof path, "%s/report.md", out_dir);
  fm_atomic_file af;
  fm_err err;
  if (fm_atomic_open(&af, path, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  FILE *f = af.f;
  fprintf(f, "# %s\n\n", s->name);
  if (s->description[0]) fprintf(f, "%s\n\n", s->description);
  fprintf(f, "Scenario `%s`, %d case%s, run with fmsim %s. Traces: `cases/ID/`; index: `index.csv`, "
             "`index.json`.\n\n", s->path, n, n == 1 ? "" : "s", FM_VERSION);
  if (g->wanted && g->skip_reason[0])
    fprintf(f, "GPU step (kernels) skipped: %s.\n\n", g->skip_reason);
  else if (g->wanted)
    fprintf(f, "Kernels timed on %s (skip variant, median of 5 after 2 warm-up launches, L2 "
               "flushed; TFLOP/s by the paper's count at the kernel's own tile size).\n\n", g->device);
  if (s->run & FM_SCN_PEER)
    fprintf(f, "The FlexAttention peer runs through `fmsim bench` and `bench/peer_flex.py` "
               "(bench/h200.sh), not in scenarios.\n\n");
  fprintf(f, "## %s\n\n", s->report == FM_SCN_REPORT_CASES ? "Cases" :
                          s->report == FM_SCN_REPORT_PAPER_TABLE ? "Block sparsity against the paper" :
                          s->report == FM_SCN_REPORT_SWEEP ? "Sparsity sweep" :
                          s->report == FM_SCN_REPORT_MEMORY ? "Mask memory" : "Intra-chunk tiles");
  switch (s->report) {
  case FM_SCN_REPORT_CASES: report_cases(f, rows, n); break;
  case FM_SCN_REPORT_PAPER_TABLE: report_paper_table(f, rows, n); break;
  case FM_SCN_REPORT_SWEEP: report_sweep(f, rows, n); break;
  case FM_SCN_REPORT_MEMORY: report_memory(f, rows, n); break;
  case FM_SCN_REPORT_CHUNKS: report_chunks(f, rows, n, s->chunk); break;
  }
  char figures[18][64];
  int nfig = 0;
  if (write_figures(s, out_dir, rows, n, figures, &nfig)) {
    fm_atomic_close(&af, 0, NULL);
    return -1;
  }
  if (nfig) {
    fprintf(f, "\n## Figures\n\n");
    for (int i = 0; i < nfig; i++) fprintf(f, "![%s](%s)\n\n", figures[i], figures[i]);
  } else if (s->figures) {
    fprintf(f, "\nFigures were asked for but this fmsim was built without cairo.\n");
  }
  if (s->report != FM_SCN_REPORT_CASES) {
    fprintf(f, "\n## All cases\n\n");
    report_cases(f, rows, n);
  }
  if (fm_atomic_close(&af, 1, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return -1;
  }
  return 0;
}

int scenario_run_main(int argc, char **argv) {
  static const struct option longopts[] = {{"out", required_argument, 0, 'o'},
                                           {"only", required_argument, 0, 'O'},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *out_dir = NULL, *only = NULL, *path = NULL;
  int opt;
  opterr = 0;
  optind = 1;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    if (opt == 'o') out_dir = optarg;
    else if (opt == 'O') only = optarg;
    else if (opt == 'h') {
      fputs(help, stdout);
      return FM_EXIT_OK;
    } else if (opt == ':') {
      return cli_bad_option(cmd, opt, argv);
    } else {
      cli_error(cmd, "unknown option '%s' for a scenario run (it takes --out and --only; one mask "
                "is fmsim run --family ...: see fmsim run --help)", argv[optind - 1]);
      return FM_EXIT_USAGE;
    }
  }
  if (optind != argc - 1) {
    cli_error(cmd, "give exactly one scenario file");
    return FM_EXIT_USAGE;
  }
  path = argv[optind];
  fm_scenario *s = malloc(sizeof *s);
  fm_err err;
  if (!s) return FM_EXIT_FAIL;
  if (fm_scenario_load(path, s, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    free(s);
    return FM_EXIT_USAGE;
  }
  if (!out_dir) out_dir = s->output;
  fm_scn_case *cases = NULL;
  int ncases = 0;
  if (fm_scenario_cases(s, &cases, &ncases, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    free(s);
    return FM_EXIT_USAGE;
  }
  int kept = 0;
  for (int i = 0; i < ncases; i++)
    if (!only || fnmatch(only, cases[i].id, 0) == 0) cases[kept++] = cases[i];
  ncases = kept;
  int rc = FM_EXIT_OK;
  if (ncases == 0) {
    cli_error(cmd, "%s: no case matches --only '%s'", path, only ? only : "");
    rc = FM_EXIT_USAGE;
  }
  /* refuse up front what the machine cannot hold */
  int64_t avail = available_memory_bytes();
  for (int i = 0; i < ncases && rc == FM_EXIT_OK; i++) {
    int64_t need = case_memory(s, &cases[i]);
    if (need > avail * 8 / 10) {
      cli_error(cmd, "%s:%d: case %s needs about %.1f GiB, more than this machine has (%.1f GiB "
                "available); use larger br/bc, fewer heads or a shorter seqlen",
                path, s->masks[cases[i].mask_index].line, cases[i].id, (double)need / (1 << 30),
                (double)avail / (1 << 30));
      rc = FM_EXIT_USAGE;
    }
  }
  /* pre-flight: every mask entry builds at its first case before any case runs,
     so a bad parameter or file is reported at once, with its line */
  for (int mi = 0, i = 0; mi < s->nmasks && rc == FM_EXIT_OK; mi++) {
    while (i < ncases && cases[i].mask_index < mi) i++;
    if (i == ncases || cases[i].mask_index != mi) continue;
    fm_colmask *m = NULL;
    fm_family_used used;
    if (build_case_mask(s, &cases[i], &m, &used)) rc = FM_EXIT_USAGE;
    fm_colmask_destroy(m);
  }
  char cases_dir[4200];
  snprintf(cases_dir, sizeof cases_dir, "%s/cases", out_dir);
  if (rc == FM_EXIT_OK && fm_mkdir_p(cases_dir, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  }
  case_row *rows = rc == FM_EXIT_OK ? calloc((size_t)ncases, sizeof *rows) : NULL;
  if (rc == FM_EXIT_OK && !rows) rc = FM_EXIT_FAIL;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigaction(SIGINT, &sa, &old);
  gpu_step gpu;
  gpu_step_open(s, cases, rc == FM_EXIT_OK ? ncases : 0, &gpu);
  if (gpu.wanted && gpu.skip_reason[0] && rc == FM_EXIT_OK)
    fprintf(stderr, "fmsim run: GPU step skipped: %s\n", gpu.skip_reason);
  int tty = isatty(2), skipped = 0, done = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < ncases && rc == FM_EXIT_OK; i++) {
    if (interrupted) {
      if (tty) fputc('\n', stderr);
      cli_error(cmd, "interrupted: %d of %d cases finished and kept in %s; rerun to continue", done,
                ncases, out_dir);
      rc = 130;
      break;
    }
    char case_dir[4500], row_path[4600];
    snprintf(case_dir, sizeof case_dir, "%s/%s", cases_dir, cases[i].id);
    snprintf(row_path, sizeof row_path, "%s/row.tsv", case_dir);
    if (row_read(row_path, &rows[i]) == 0) {
      skipped++;
    } else if (run_case(s, &cases[i], case_dir, &gpu, &rows[i]) != 0) {
      rc = FM_EXIT_USAGE;
      break;
    }
    done++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    progress(done, ncases, cases[i].id, (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, tty);
  }
  sigaction(SIGINT, &old, NULL);
  gpu_step_close(&gpu);
  if (rc == FM_EXIT_OK && (write_index(out_dir, rows, ncases) || write_report(s, out_dir, &gpu, rows, ncases)))
    rc = FM_EXIT_FAIL;
  if (rc == FM_EXIT_OK)
    printf("%d cases (%d from an earlier run) -> %s/report.md\n", ncases, skipped, out_dir);
  free(rows);
  free(cases);
  free(s);
  return rc;
}
