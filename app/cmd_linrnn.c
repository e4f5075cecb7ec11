/* fmsim linrnn: the chunkwise linear RNN with FlashMask skipping inside
 * chunks (issue 23; docs/LINRNN.md). On the CPU (--cpu, --sweep): the
 * sub-chunk tile counts, work, rho and the proposal's estimate against the
 * exact counts at any size, and the fp64 references on random inputs at a
 * small size; on the GPU (a CUDA build): the kernel of kernels/fm_linrnn.h
 * checked against the reference and timed per variant. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fm_bf16.h"
#include "fm_fileio.h"
#include "fm_json.h"
#include "fm_linrnn_cpu.h"
#include "fm_npy.h"
#include "fm_rng.h"
#include "linrnn_gpu.h"
#include "report_table.h"

static const char *cmd = "linrnn";

static const char *help =
    "usage: fmsim linrnn --doc-len L | --doc-mean M [--tokens T] [--heads H] [--dk D] [--dv D]\n"
    "                    [--chunk C] [--sub c] [--seed N] [--variant V] [--cpu] [--json]\n"
    "                    [--verify-tokens N] [--trace DIR [--show-chunk K]]\n"
    "       fmsim linrnn --sweep [--tokens T] [--dk D] [--dv D] [--seed N] [--json]\n"
    "       fmsim linrnn --doc-len L | --doc-mean M [--tokens T] --intervals FILE.npy [--proposal]\n\n"
    "Chunkwise linear attention with a scalar decay per token and head over packed\n"
    "documents, the state reset at every document (docs/LINRNN.md). The tokens are cut\n"
    "into chunks of C from token 0, whatever the documents; inside a chunk the c x c\n"
    "sub-chunk tiles are classified by fmsim's tile rule from the packed documents' column\n"
    "intervals (causal_document: key s visible to rows [s, end of its document)). Variants:\n"
    "skip (FlashMask: masked tiles, dead inter-chunk terms and needless states skipped),\n"
    "causal (only the tiles above the diagonal skipped: today's kernels), noskip (all).\n\n"
    "  --tokens T        packed tokens (default 65536; k and M suffixes)\n"
    "  --heads H         heads, 1 to 64 (default 16)\n"
    "  --dk D --dv D     head dims: dk 64 or 128 (default 128), dv 64, 128 or 256 (default 256)\n"
    "  --chunk C         64, 128 or 256 (default 128)\n"
    "  --sub c           16, 32 or 64, at most C (default 16)\n"
    "  --doc-len L       documents of L tokens, the last one cut to fill T\n"
    "  --doc-mean M      log-normal lengths of mean M (sigma 1, at least 16 tokens, as\n"
    "                    flash-linear-attention's benchmarks draw them), M >= 16\n"
    "  --seed N          seed of the drawn lengths and of the inputs (default 0)\n"
    "  --variant V       skip, causal, noskip or all (default all)\n"
    "  --cpu             the CPU side: counts, work, rho and the estimate at T; the fp64\n"
    "                    references (chunkwise against token by token, every variant bit for\n"
    "                    bit) on random bf16 inputs of the first --verify-tokens tokens\n"
    "  --verify-tokens N the size of every check (default 1024, at most 16384; 2 heads)\n"
    "  --json            one JSON object on stdout\n"
    "  --trace DIR       a trace of the per-tile classes (GPU: the kernel's record and\n"
    "                    cycles): summary.json, tile_class.npy, tile_cycles.npy, cu_seqlens.npy;\n"
    "                    fmsim render --figure linrnn_chunk DIR draws it\n"
    "  --show-chunk K    the chunk a figure of the trace draws (default: the one with the\n"
    "                    most document boundaries)\n"
    "  --sweep           the counts table over C in {64,128,256}, c in {16,32,64}, mean length\n"
    "                    in {16,32,64,128,256,2048}, fixed and drawn (CPU)\n"
    "  --intervals FILE  write the documents' FlashMask vectors for `fmsim check --intervals\n"
    "                    FILE --causal` (causal-1: LTS = the end of each key's document);\n"
    "                    with --proposal the proposal's causal-2 LTS = s, LTE = end, which\n"
    "                    masks the diagonal\n\n"
    "Without --cpu, --sweep or --intervals it runs the GPU kernel (a CUDA build): each\n"
    "variant against the fp64 reference at the check size (relative error at most 1e-3 of\n"
    "the reference rounded to bf16, final states 1e-3), every variant bit for bit equal to\n"
    "skip, the instrumented classes equal to the CPU's; then the time of each variant at T.\n"
    "Exit status: 0 done (checks passed), 1 a check failed, 2 bad input or no GPU path.\n";

/* ---- options ---------------------------------------------------------------- */

enum {
  O_TOKENS = 4001, O_HEADS, O_DK, O_DV, O_CHUNK, O_SUB, O_DOCLEN, O_DOCMEAN, O_SEED, O_VERIFY,
  O_SHOW, O_VARIANT, O_CPU, O_JSON, O_TRACE, O_SWEEP, O_INTERVALS, O_PROPOSAL
};

typedef struct lr_opts {
  int64_t tokens, heads, dk, dv, chunk, sub, doc_len, doc_mean, seed, verify, show;
  unsigned variants; /* bits 1u << FM_LR_* */
  int cpu, json, sweep, proposal;
  const char *trace, *intervals;
  unsigned given; /* the options given: bits 1u << (O_* - O_TOKENS) */
} lr_opts;

/* The integer options: range, the values allowed (0-terminated; none: the
 * whole range), the field. */
static const struct int_opt {
  int id;
  const char *name;
  int64_t lo, hi;
  int64_t allowed[4];
  const char *why;
  size_t off;
} int_opts[] = {
    {O_TOKENS, "--tokens", 1, (int64_t)1 << 28, {0}, NULL, offsetof(lr_opts, tokens)},
    {O_HEADS, "--heads", 1, 64, {0}, NULL, offsetof(lr_opts, heads)},
    {O_DK, "--dk", 64, 128, {64, 128, 0}, "the kernel's dk", offsetof(lr_opts, dk)},
    {O_DV, "--dv", 64, 256, {64, 128, 256, 0}, "the kernel's dv", offsetof(lr_opts, dv)},
    {O_CHUNK, "--chunk", 64, 256, {64, 128, 256, 0}, "the kernel's chunks", offsetof(lr_opts, chunk)},
    {O_SUB, "--sub", 16, 64, {16, 32, 64, 0}, "the kernel's sub-chunks", offsetof(lr_opts, sub)},
    {O_DOCLEN, "--doc-len", 1, (int64_t)1 << 28, {0}, NULL, offsetof(lr_opts, doc_len)},
    {O_DOCMEAN, "--doc-mean", 16, (int64_t)1 << 28, {0}, NULL, offsetof(lr_opts, doc_mean)},
    {O_SEED, "--seed", 0, INT64_MAX, {0}, NULL, offsetof(lr_opts, seed)},
    {O_VERIFY, "--verify-tokens", 1, 16384, {0}, NULL, offsetof(lr_opts, verify)},
    {O_SHOW, "--show-chunk", 0, (int64_t)1 << 28, {0}, NULL, offsetof(lr_opts, show)},
};
#define NINT_OPTS ((int)(sizeof int_opts / sizeof int_opts[0]))

static int int_option(lr_opts *o, int id, const char *arg) {
  for (int i = 0; i < NINT_OPTS; i++) {
    const struct int_opt *t = &int_opts[i];
    if (t->id != id) continue;
    int64_t *field = (int64_t *)((char *)o + t->off);
    if (cli_size(cmd, t->name, arg, t->lo, t->hi, field)) return -1;
    if (!t->allowed[0]) return 1;
    for (int k = 0; t->allowed[k]; k++)
      if (*field == t->allowed[k]) return 1;
    char list[64] = "";
    for (int k = 0; t->allowed[k]; k++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%lld",
               k == 0 ? "" : t->allowed[k + 1] ? ", " : " or ", (long long)t->allowed[k]);
    cli_error(cmd, "%s %s: expected %s (%s)", t->name, arg, list, t->why);
    return -1;
  }
  return 0;
}

static int variant_option(lr_opts *o, const char *arg) {
  if (!strcmp(arg, "all")) {
    o->variants = (1u << FM_LR_NVARIANTS) - 1;
    return 0;
  }
  int v = fm_lr_variant_parse(arg);
  if (v < 0) {
    cli_error(cmd, "--variant '%s': expected skip, causal, noskip or all", arg);
    return -1;
  }
  o->variants = 1u << v;
  return 0;
}

/* linrnn's options: 1 taken, -1 a bad value (printed), 0 none of them. */
static int lr_option(const char *c, void *v, int opt, const char *arg) {
  (void)c;
  lr_opts *o = v;
  if (opt >= O_TOKENS && opt <= O_PROPOSAL) o->given |= 1u << (opt - O_TOKENS);
  int r = int_option(o, opt, arg);
  if (r) return r;
  switch (opt) {
  case O_VARIANT: return variant_option(o, arg) ? -1 : 1;
  case O_CPU: o->cpu = 1; return 1;
  case O_JSON: o->json = 1; return 1;
  case O_TRACE: o->trace = arg; return 1;
  case O_SWEEP: o->sweep = 1; return 1;
  case O_INTERVALS: o->intervals = arg; return 1;
  case O_PROPOSAL: o->proposal = 1; return 1;
  }
  return 0;
}

/* 0 parsed, -1 --help printed, FM_EXIT_USAGE after an error (printed). */
static int parse_args(int argc, char **argv, lr_opts *o) {
  static const struct option longopts[] = {
      {"tokens", required_argument, 0, O_TOKENS},   {"heads", required_argument, 0, O_HEADS},
      {"dk", required_argument, 0, O_DK},           {"dv", required_argument, 0, O_DV},
      {"chunk", required_argument, 0, O_CHUNK},     {"sub", required_argument, 0, O_SUB},
      {"doc-len", required_argument, 0, O_DOCLEN},  {"doc-mean", required_argument, 0, O_DOCMEAN},
      {"seed", required_argument, 0, O_SEED},       {"verify-tokens", required_argument, 0, O_VERIFY},
      {"show-chunk", required_argument, 0, O_SHOW}, {"variant", required_argument, 0, O_VARIANT},
      {"cpu", no_argument, 0, O_CPU},               {"json", no_argument, 0, O_JSON},
      {"trace", required_argument, 0, O_TRACE},     {"sweep", no_argument, 0, O_SWEEP},
      {"intervals", required_argument, 0, O_INTERVALS}, {"proposal", no_argument, 0, O_PROPOSAL},
      {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
  const cli_opts_def def = {.shortopts = ":h", .longopts = longopts, .own = lr_option, .help = help};
  *o = (lr_opts){.tokens = 65536, .heads = 16, .dk = 128, .dv = 256, .chunk = 128, .sub = 16,
                 .verify = 1024, .show = -1, .variants = (1u << FM_LR_NVARIANTS) - 1};
  int r = cli_parse_opts(cmd, argc, argv, &def, o);
  return r > 0 ? -1 : r < 0 ? FM_EXIT_USAGE : 0;
}

#define GIVEN(g, opt) (((g) >> ((opt) - O_TOKENS)) & 1u)

/* The options that exclude each other or depend on each other. */
static int check_args(const lr_opts *o) {
  const unsigned g = o->given;
  const char *bad = NULL;
  if (o->sweep && (GIVEN(g, O_DOCLEN) || GIVEN(g, O_DOCMEAN) || GIVEN(g, O_CHUNK) || GIVEN(g, O_SUB)))
    bad = "--sweep runs its own chunks, sub-chunks and document lengths; give none of them";
  else if (o->sweep && (o->trace || o->intervals || o->cpu || GIVEN(g, O_VARIANT)))
    bad = "--sweep prints the counts table only; --trace, --intervals, --cpu and --variant go without it";
  else if (!o->sweep && GIVEN(g, O_DOCLEN) == GIVEN(g, O_DOCMEAN))
    bad = "give the documents: --doc-len L (fixed) or --doc-mean M (drawn), one of them";
  else if (o->sub > o->chunk)
    bad = "--sub must be at most --chunk";
  else if (o->doc_len > o->tokens || o->doc_mean > o->tokens)
    bad = "the document length exceeds --tokens";
  else if (o->intervals && !strcmp(o->intervals, "-"))
    bad = "--intervals -: give a file name (the report goes to standard output)";
  else if (o->proposal && !o->intervals)
    bad = "--proposal goes with --intervals FILE";
  else if (o->intervals && (o->trace || o->json || o->cpu))
    bad = "--intervals writes the vectors only; --trace, --json and --cpu go without it";
  else if (GIVEN(g, O_SHOW) && !o->trace)
    bad = "--show-chunk goes with --trace DIR";
  else if (o->show >= (o->tokens + o->chunk - 1) / o->chunk)
    bad = "--show-chunk is past the last chunk";
  if (bad) cli_error(cmd, "%s", bad);
  return bad ? FM_EXIT_USAGE : 0;
}

/* ---- documents ------------------------------------------------------------- */

typedef struct lr_case {
  int32_t *cu, ndocs;
  char source[160];
  fm_colmask *mask;
  fm_lr_counts counts;
  fm_lr_estimate est;
  fm_lr_aligned aligned;
} lr_case;

static void case_free(lr_case *c) {
  free(c->cu);
  fm_colmask_destroy(c->mask);
  memset(c, 0, sizeof *c);
}

/* Documents (len > 0 fixed, else drawn of mean `mean`), their mask and counts. */
static fm_status case_build(int64_t T, int64_t len, int64_t mean, uint64_t seed, int32_t chunk,
                            int32_t sub, int32_t dk, int32_t dv, lr_case *c, fm_err *err) {
  memset(c, 0, sizeof *c);
  fm_status st = len > 0 ? fm_lr_docs_fixed(T, len, &c->cu, &c->ndocs, err)
                         : fm_lr_docs_lognormal(T, (double)mean, 1.0, 16, seed, &c->cu, &c->ndocs, err);
  if (st == FM_OK && len > 0)
    snprintf(c->source, sizeof c->source, "fixed: %d documents of %lld tokens%s", c->ndocs,
             (long long)len, T % len ? ", the last cut" : "");
  else if (st == FM_OK)
    snprintf(c->source, sizeof c->source,
             "drawn: log-normal, mean %lld, sigma 1, min 16 (seed %llu): %d documents", (long long)mean,
             (unsigned long long)seed, c->ndocs);
  if (st == FM_OK) st = fm_lr_docs_colmask(c->cu, c->ndocs, &c->mask, err);
  if (st == FM_OK) st = fm_lr_count(c->mask, chunk, sub, dk, dv, &c->counts, err);
  if (st == FM_OK) st = fm_lr_aligned_count(c->cu, c->ndocs, chunk, sub, dk, dv, &c->aligned, err);
  if (st == FM_OK) fm_lr_estimate_of(&c->counts, &c->est);
  if (st != FM_OK) case_free(c);
  return st;
}

/* ---- --intervals ------------------------------------------------------------ */

static int write_intervals(const lr_opts *o, const lr_case *c) {
  fm_err err;
  fm_colmask *m = NULL;
  fm_status st = o->proposal ? fm_lr_proposal_colmask(c->cu, c->ndocs, &m, &err) : FM_OK;
  const fm_colmask *src = o->proposal ? m : c->mask;
  int k = o->proposal ? 2 : 1;
  int64_t T = o->tokens, shape[4] = {1, 1, T, k};
  int32_t *iv = st == FM_OK ? malloc(sizeof(int32_t) * (size_t)(T * k)) : NULL;
  if (st == FM_OK && !iv) st = fm_fail(&err, FM_ENOMEM, "cannot allocate %lld interval values", (long long)(T * k));
  for (int64_t j = 0; st == FM_OK && j < T; j++) {
    iv[j * k] = fm_colmask_cvec(src, 0, FM_LTS)[j];
    if (k == 2) iv[j * k + 1] = fm_colmask_cvec(src, 0, FM_LTE)[j];
  }
  if (st == FM_OK) st = fm_npy_save(o->intervals, FM_DT_I32, 4, shape, iv, &err);
  free(iv);
  fm_colmask_destroy(m);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  printf("wrote %s (%s, [1, 1, %lld, %d] int32: check it with fmsim check --intervals %s --causal)\n",
         o->intervals, o->proposal ? "the proposal's causal-2 vectors" : "causal-1", (long long)T, k,
         o->intervals);
  return FM_EXIT_OK;
}

/* ---- the CPU report ---------------------------------------------------------- */

/* The variants' table of one case: visits, element masks, inter terms, state
 * rows, FLOPs over every head, against noskip and against the useful work. */
static void variants_table(const lr_opts *o, const fm_lr_counts *c, rpt_table *t) {
  rpt_init(t, "linrnn_variants", "What each variant computes");
  static const char *const head[] = {"variant", "tiles visited", "visited %", "element-masked",
                                     "inter blocks", "state rows", "GFLOP (all heads)",
                                     "vs noskip", "vs useful"};
  for (int k = 0; k < 9; k++) rpt_col(t, head[k]);
  const double H = (double)o->heads, noskip = c->work[FM_LR_NOSKIP].flops;
  for (int v = 0; v < FM_LR_NVARIANTS; v++) {
    if (!(o->variants & (1u << v))) continue;
    const fm_lr_work *w = &c->work[v];
    rpt_cell(t, "%s", fm_lr_variant_name(v));
    rpt_cell(t, "%lld", (long long)w->tiles_visited);
    rpt_num(t, "%.2f", 100.0 * (double)w->tiles_visited / (double)c->tiles);
    rpt_cell(t, "%lld", (long long)w->tiles_elementwise);
    rpt_cell(t, "%lld", (long long)w->inter_blocks);
    rpt_cell(t, "%lld", (long long)w->state_rows);
    rpt_num(t, "%.3f", w->flops * H / 1e9);
    rpt_num(t, "%.4f", w->flops / noskip);
    rpt_num(t, "%.3f", w->flops / c->flops_useful);
  }
}

static void print_case_text(const lr_opts *o, const lr_case *lc) {
  const fm_lr_counts *c = &lc->counts;
  const fm_lr_estimate *e = &lc->est;
  printf("chunkwise linear RNN: T = %lld tokens, H = %lld heads, dk = %lld, dv = %lld, chunks of C = "
         "%d, sub-chunks of c = %d (%d x %d tiles a chunk, %d chunks)\n",
         (long long)o->tokens, (long long)o->heads, (long long)o->dk, (long long)o->dv, c->chunk,
         c->sub, c->n, c->n, c->nchunks);
  printf("documents    %s; %.3f boundaries inside a chunk on average (m)\n", lc->source, e->m);
  printf("tiles        %lld sub-tiles on the diagonal blocks (one head): masked %lld, partial %lld, "
         "unmasked %lld; rho = %.4f\n",
         (long long)c->tiles, (long long)c->tiles_class[FM_TILE_MASKED],
         (long long)c->tiles_class[FM_TILE_PARTIAL], (long long)c->tiles_class[FM_TILE_UNMASKED], c->rho);
  rpt_table t;
  variants_table(o, c, &t);
  rpt_text(&t, stdout);
  rpt_free(&t);
  printf("estimate     the proposal's rho = causal %.4f + m (n-1)(n-2)/(6n^2) = %.4f (visited %.4f); "
         "exact rho %.4f (visited %.4f): off by %+.4f\n",
         e->rho_causal, e->rho_estimate, e->visited_estimate, e->rho_exact, e->visited_exact, e->error);
  printf("useful work  %.3f GFLOP (all heads): visible pairs, carried and crossing states\n",
         c->flops_useful * (double)o->heads / 1e9);
  printf("fla packing  every document starts a chunk of %d: %lld padded tokens (%.2fx T), %.3f GFLOP "
         "by the causal rules: %.2fx unaligned causal, %.2fx skip\n",
         c->chunk, (long long)lc->aligned.tokens_padded, (double)lc->aligned.tokens_padded / (double)o->tokens,
         lc->aligned.work.flops * (double)o->heads / 1e9, lc->aligned.work.flops / c->work[FM_LR_CAUSAL].flops,
         lc->aligned.work.flops / c->work[FM_LR_SKIP].flops);
  char b1[32], b2[32];
  printf("mask memory  %s of column vectors (16 bytes a token: O(T)), %s of scratch while counting\n",
         cli_bytes(c->mask_bytes, b1, sizeof b1), cli_bytes(c->scratch_bytes, b2, sizeof b2));
}

/* The counts of one case as members of the open object (FLOPs over every head). */
static void case_json(fm_json *j, const lr_case *lc, int64_t heads, unsigned variants) {
  const fm_lr_counts *c = &lc->counts;
  fm_json_int(j, "tokens", c->tokens);
  fm_json_int(j, "chunk", c->chunk);
  fm_json_int(j, "sub", c->sub);
  fm_json_int(j, "ndocs", c->ndocs);
  fm_json_string(j, "docs_source", lc->source);
  fm_json_int(j, "tiles", c->tiles);
  fm_json_int(j, "tiles_masked", c->tiles_class[FM_TILE_MASKED]);
  fm_json_int(j, "tiles_partial", c->tiles_class[FM_TILE_PARTIAL]);
  fm_json_int(j, "tiles_unmasked", c->tiles_class[FM_TILE_UNMASKED]);
  fm_json_double(j, "rho", c->rho);
  fm_json_double(j, "boundaries_per_chunk", lc->est.m);
  fm_json_double(j, "rho_estimate", lc->est.rho_estimate);
  fm_json_double(j, "visited_exact", lc->est.visited_exact);
  fm_json_double(j, "visited_estimate", lc->est.visited_estimate);
  fm_json_double(j, "flops_useful", c->flops_useful * (double)heads);
  fm_json_object(j, "variants");
  for (int v = 0; v < FM_LR_NVARIANTS; v++)
    if (variants & (1u << v)) fm_lr_work_json(j, fm_lr_variant_name(v), &c->work[v], (double)heads);
  fm_json_end(j);
  fm_json_object(j, "fla_aligned");
  fm_json_int(j, "tokens_padded", lc->aligned.tokens_padded);
  fm_json_int(j, "chunks", lc->aligned.chunks);
  fm_json_double(j, "flops", lc->aligned.work.flops * (double)heads);
  fm_json_end(j);
  fm_json_object(j, "memory");
  fm_json_int(j, "mask_bytes", c->mask_bytes);
  fm_json_int(j, "scratch_bytes", c->scratch_bytes);
  fm_json_end(j);
}

/* ---- the fp64 references at the check size ------------------------------------ */

typedef struct ref_check {
  int64_t tokens;
  int32_t heads;
  double out_err, state_err; /* chunkwise (skip) against the recurrence */
  int identical;             /* causal and noskip == skip, bit for bit */
} ref_check;

static float ref_draw(fm_rng *r) {
  double u1 = ((double)(fm_rng_next(r) >> 11) + 1.0) * 0x1.0p-53, u2 = (double)(fm_rng_next(r) >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Random bf16 inputs for T tokens x H heads into one allocation *buf. */
static fm_status ref_inputs(int64_t T, int32_t H, int32_t dk, int32_t dv, uint64_t seed, fm_lr_problem *p,
                            float **buf, fm_err *err) {
  int64_t nk = T * H * dk, nv = T * H * dv, n = 2 * nk + nv + T * H;
  float *b = *buf = malloc(sizeof(float) * (size_t)n);
  if (!b) return fm_fail(err, FM_ENOMEM, "cannot allocate the check's inputs");
  fm_rng r;
  fm_rng_seed(&r, seed, 0x63686b /* "chk" */);
  for (int64_t i = 0; i < 2 * nk + nv; i++) b[i] = fm_round_bf16(ref_draw(&r));
  for (int64_t i = 0; i < T * H; i++) b[2 * nk + nv + i] = (float)log(0.9 + 0.1 * ((double)(fm_rng_next(&r) >> 11) * 0x1.0p-53));
  p->q = b, p->k = b + nk, p->v = b + 2 * nk, p->g = b + 2 * nk + nv;
  return FM_OK;
}

static fm_status ref_run(const lr_opts *o, const lr_case *lc, ref_check *rc, fm_err *err) {
  const int64_t T = o->verify < o->tokens ? o->verify : o->tokens;
  const int32_t H = o->heads < 2 ? (int32_t)o->heads : 2, dk = (int32_t)o->dk, dv = (int32_t)o->dv;
  *rc = (ref_check){.tokens = T, .heads = H, .identical = 1, .out_err = NAN, .state_err = NAN};
  int32_t *cu = malloc(sizeof(int32_t) * (size_t)(lc->ndocs + 1)), nd = 0;
  if (!cu) return fm_fail(err, FM_ENOMEM, "cannot allocate the documents");
  while (nd < lc->ndocs && lc->cu[nd] < T) cu[nd] = lc->cu[nd], nd++;
  cu[nd] = (int32_t)T;
  fm_lr_problem p = {.tokens = T, .heads = H, .dk = dk, .dv = dv, .scale = 1.0 / sqrt((double)dk),
                     .ndocs = nd, .cu_seqlens = cu};
  float *in = NULL;
  const int64_t no = T * H * dv, ns = (int64_t)nd * H * dk * dv;
  double *buf = malloc(sizeof(double) * (size_t)(2 * (no + ns)));
  fm_status st = buf ? ref_inputs(T, H, dk, dv, (uint64_t)o->seed, &p, &in, err)
                     : fm_fail(err, FM_ENOMEM, "cannot allocate the check's outputs");
  double *o_rec = buf, *s_rec = buf + no, *o_ch = buf + no + ns, *s_ch = o_ch + no;
  if (st == FM_OK) st = fm_lr_reference_recurrent(&p, o_rec, s_rec, err);
  for (int v = 0; st == FM_OK && v < FM_LR_NVARIANTS; v++) {
    if (v > 0) memcpy(o_rec, o_ch, sizeof(double) * (size_t)(no + ns)); /* skip's, in place of the recurrence */
    st = fm_lr_reference_chunkwise(&p, (int32_t)o->chunk, (int32_t)o->sub, v, o_ch, s_ch, err);
    if (st == FM_OK && v == 0) rc->out_err = fm_lr_rel_error(o_ch, o_rec, no), rc->state_err = fm_lr_rel_error(s_ch, s_rec, ns);
    if (st == FM_OK && v > 0) rc->identical &= !memcmp(o_ch, o_rec, sizeof(double) * (size_t)(no + ns));
  }
  free(in);
  free(buf);
  free(cu);
  return st;
}

/* ---- the sweep ------------------------------------------------------------------ */

static const int32_t sweep_chunks[] = {64, 128, 256}, sweep_subs[] = {16, 32, 64};
static const int64_t sweep_means[] = {16, 32, 64, 128, 256, 2048};

static void sweep_row(rpt_table *t, const lr_case *lc, int64_t mean, int drawn) {
  const fm_lr_counts *c = &lc->counts;
  const double tiles = (double)c->tiles;
  rpt_cell(t, "%d", c->chunk);
  rpt_cell(t, "%d", c->sub);
  rpt_cell(t, "%lld", (long long)mean);
  rpt_cell(t, "%s", drawn ? "drawn" : "fixed");
  rpt_cell(t, "%d", c->ndocs);
  rpt_num(t, "%.3f", lc->est.m);
  rpt_num(t, "%.4f", c->rho);
  rpt_num(t, "%.4f", lc->est.rho_estimate);
  rpt_num(t, "%.4f", lc->est.visited_exact);
  rpt_num(t, "%.4f", lc->est.visited_estimate);
  rpt_num(t, "%.4f", (double)c->work[FM_LR_CAUSAL].tiles_visited / tiles);
  rpt_num(t, "%.4f", (double)c->tiles_class[FM_TILE_PARTIAL] / tiles);
  rpt_num(t, "%.4f", (double)c->work[FM_LR_SKIP].inter_blocks / (double)c->row_blocks);
  rpt_num(t, "%.4f", c->work[FM_LR_SKIP].flops / c->work[FM_LR_NOSKIP].flops);
  rpt_num(t, "%.4f", c->work[FM_LR_SKIP].flops / c->work[FM_LR_CAUSAL].flops);
  rpt_num(t, "%.2f", lc->aligned.work.flops / c->work[FM_LR_CAUSAL].flops);
}

static int run_sweep(const lr_opts *o) {
  rpt_table t;
  char title[200];
  snprintf(title, sizeof title, "Sub-chunk tiles of packed documents, T = %lld, dk = %lld, dv = %lld",
           (long long)o->tokens, (long long)o->dk, (long long)o->dv);
  rpt_init(&t, "linrnn_sweep", title);
  static const char *const head[] = {"C", "c", "mean len", "lengths", "docs", "m", "rho exact",
                                     "rho estimate", "visited skip", "visited estimate",
                                     "visited causal", "partial", "inter live skip",
                                     "work skip/noskip", "work skip/causal", "fla aligned/causal"};
  for (int k = 0; k < 16; k++) rpt_col(&t, head[k]);
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_array(&j, "rows");
  int rc = FM_EXIT_OK;
  for (int a = 0; a < 3 && rc == FM_EXIT_OK; a++)
    for (int b = 0; b < 3 && rc == FM_EXIT_OK && sweep_subs[b] <= sweep_chunks[a]; b++)
      for (int m = 0; m < 6 && rc == FM_EXIT_OK && sweep_means[m] <= o->tokens; m++)
        for (int drawn = 0; drawn < 2 && rc == FM_EXIT_OK; drawn++) {
          lr_case lc;
          fm_err err;
          if (case_build(o->tokens, drawn ? 0 : sweep_means[m], sweep_means[m], (uint64_t)o->seed,
                         sweep_chunks[a], sweep_subs[b], (int32_t)o->dk, (int32_t)o->dv, &lc, &err) != FM_OK) {
            cli_error(cmd, "%s", err.msg);
            rc = FM_EXIT_USAGE;
            break;
          }
          sweep_row(&t, &lc, sweep_means[m], drawn);
          fm_json_object(&j, NULL);
          fm_json_int(&j, "mean_len", sweep_means[m]);
          fm_json_bool(&j, "drawn", drawn);
          case_json(&j, &lc, 1, (1u << FM_LR_NVARIANTS) - 1);
          fm_json_end(&j);
          case_free(&lc);
        }
  fm_json_end(&j);
  if (rc == FM_EXIT_OK && o->json) cli_print_json(&j);
  else fm_json_free(&j);
  if (rc == FM_EXIT_OK && !o->json) {
    printf("%s (one head; m: document boundaries inside a chunk; estimate: the proposal's "
           "causal + m (n-1)(n-2)/(6n^2))\n", title);
    rpt_text(&t, stdout);
  }
  rpt_free(&t);
  return rc;
}

/* ---- the trace ------------------------------------------------------------------ */

/* The trace of the CPU's classes (record NULL) or of the GPU's record into
 * o->trace (locked by cmd_linrnn before any work). */
static int write_trace(const lr_opts *o, const lr_case *lc, const linrnn_gpu_result *g) {
  fm_err err;
  const int64_t len = fm_lr_class_len(o->tokens, (int32_t)o->chunk, (int32_t)o->sub);
  uint8_t *own = NULL, *cls = g ? g->tile_class : NULL;
  fm_status st = FM_OK;
  if (!cls && !(cls = own = malloc((size_t)len)))
    st = fm_fail(&err, FM_ENOMEM, "cannot allocate %lld tile classes", (long long)len);
  if (st == FM_OK && own) st = fm_lr_classify(lc->mask, (int32_t)o->chunk, (int32_t)o->sub, own, &err);
  int variant = g && g->tile_class ? g->record_variant : FM_LR_SKIP;
  fm_lr_trace t = {.tokens = o->tokens, .chunk = (int32_t)o->chunk, .sub = (int32_t)o->sub,
                   .nchunks = lc->counts.nchunks, .ndocs = lc->ndocs,
                   .record_heads = g && g->tile_class ? (int32_t)o->heads : 1,
                   .shown_chunk = o->show >= 0 ? (int32_t)o->show
                                               : fm_lr_busiest_chunk(lc->cu, lc->ndocs, (int32_t)o->chunk),
                   .cu_seqlens = lc->cu, .tile_class = cls, .tile_cycles = g ? g->tile_cycles : NULL};
  snprintf(t.device, sizeof t.device, "%s", g && g->tile_class ? g->device : "cpu");
  snprintf(t.variant, sizeof t.variant, "%s", fm_lr_variant_name(variant));
  snprintf(t.docs_source, sizeof t.docs_source, "%s", lc->source);
  if (st == FM_OK) st = fm_lr_trace_write(o->trace, &t, &lc->counts, &err);
  free(own);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  if (!o->json) printf("trace        %s (chunk %d drawn by fmsim render --figure linrnn_chunk %s -o FILE)\n",
                       o->trace, t.shown_chunk, o->trace);
  return FM_EXIT_OK;
}

/* ---- the CPU run -------------------------------------------------------------------- */

static int run_cpu(const lr_opts *o, const lr_case *lc) {
  ref_check rc;
  fm_err err;
  if (ref_run(o, lc, &rc, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  const int pass = rc.out_err <= 1e-12 && rc.state_err <= 1e-12 && rc.identical;
  if (o->json) {
    fm_json j;
    fm_json_init(&j, 1);
    fm_json_object(&j, NULL);
    fm_json_int(&j, "heads", o->heads);
    fm_json_int(&j, "dk", o->dk);
    fm_json_int(&j, "dv", o->dv);
    case_json(&j, lc, o->heads, o->variants);
    fm_json_object(&j, "reference");
    fm_json_int(&j, "tokens", rc.tokens);
    fm_json_int(&j, "heads", rc.heads);
    fm_json_double(&j, "chunkwise_vs_recurrent", rc.out_err);
    fm_json_double(&j, "final_states_vs_recurrent", rc.state_err);
    fm_json_bool(&j, "variants_bit_identical", rc.identical);
    fm_json_bool(&j, "pass", pass);
    fm_json_end(&j);
    cli_print_json(&j);
  } else {
    print_case_text(o, lc);
    printf("reference    fp64 on random bf16 inputs, first %lld tokens x %d heads: chunkwise vs token by "
           "token %.2e (outputs), %.2e (final states); skip == causal == noskip bit for bit: %s\n",
           (long long)rc.tokens, rc.heads, rc.out_err, rc.state_err, rc.identical ? "yes" : "NO");
  }
  int trc = o->trace ? write_trace(o, lc, NULL) : FM_EXIT_OK;
  return trc ? trc : pass ? FM_EXIT_OK : FM_EXIT_FAIL;
}

/* ---- the GPU run ----------------------------------------------------------------- */

static void gpu_table(const lr_opts *o, const lr_case *lc, const linrnn_gpu_result *r, rpt_table *t) {
  rpt_init(t, "linrnn_gpu", "The kernel per variant");
  static const char *const head[] = {"variant", "error vs bf16(ref)", "vs fp64 ref", "states",
                                     "median ms", "ns/token/head", "useful TFLOP/s",
                                     "speed-up vs noskip", "model (FLOPs)"};
  for (int k = 0; k < 9; k++) rpt_col(t, head[k]);
  const fm_lr_counts *c = &lc->counts;
  const double TH = (double)o->tokens * (double)o->heads, useful = c->flops_useful * (double)o->heads;
  for (int v = 0; v < FM_LR_NVARIANTS; v++) {
    if (!(o->variants & (1u << v))) continue;
    double ms = r->timing[v].median_ms;
    rpt_cell(t, "%s", fm_lr_variant_name(v));
    rpt_num(t, "%.2e", r->out_err[v]);
    rpt_num(t, "%.2e", r->out_err_raw[v]);
    rpt_num(t, "%.2e", r->state_err[v]);
    rpt_num(t, "%.4f", ms);
    rpt_num(t, "%.3f", ms * 1e6 / TH);
    rpt_num(t, "%.1f", useful / (ms * 1e-3) / 1e12);
    rpt_num(t, "%.3f", r->ratio[FM_LR_NOSKIP] / r->ratio[v]);
    rpt_num(t, "%.3f", c->work[FM_LR_NOSKIP].flops / c->work[v].flops);
  }
}

static void gpu_json(const lr_opts *o, const lr_case *lc, const linrnn_gpu_result *r, int pass) {
  fm_json j;
  fm_json_init(&j, 1);
  fm_json_object(&j, NULL);
  fm_json_string(&j, "device", r->device);
  fm_json_int(&j, "heads", o->heads);
  case_json(&j, lc, o->heads, o->variants);
  fm_json_object(&j, "gpu");
  for (int v = 0; v < FM_LR_NVARIANTS; v++) {
    if (!(o->variants & (1u << v))) continue;
    fm_json_object(&j, fm_lr_variant_name(v));
    fm_json_double(&j, "error_vs_bf16_reference", r->out_err[v]);
    fm_json_double(&j, "error_vs_fp64_reference", r->out_err_raw[v]);
    fm_json_double(&j, "final_state_error", r->state_err[v]);
    fm_timing_json(&j, "timing", &r->timing[v]);
    fm_json_double(&j, "ratio_to_first", r->ratio[v]);
    fm_json_end(&j);
  }
  fm_json_bool(&j, "bit_identical", r->identical);
  fm_json_int(&j, "class_mismatches", r->class_mismatches);
  fm_json_double(&j, "instrumentation_overhead", r->instr_overhead);
  fm_json_bool(&j, "pass", pass);
  fm_json_end(&j);
  cli_print_json(&j);
}

static int run_gpu(const lr_opts *o, const lr_case *lc) {
  if (!linrnn_gpu_available()) {
    cli_error(cmd, "the GPU path needs the CUDA build (nvcc and the CUDA toolkit); --cpu runs the CPU side");
    return FM_EXIT_USAGE;
  }
  linrnn_gpu_case gc = {.tokens = o->tokens, .heads = (int32_t)o->heads, .dk = (int32_t)o->dk,
                        .dv = (int32_t)o->dv, .chunk = (int32_t)o->chunk, .sub = (int32_t)o->sub,
                        .ndocs = lc->ndocs, .cu = lc->cu, .verify_tokens = o->verify,
                        .verify_heads = o->heads < 2 ? (int32_t)o->heads : 2, .seed = (uint64_t)o->seed,
                        .variants = o->variants, .warmup = 5, .reps = 20, .want_record = o->trace != NULL};
  linrnn_gpu_result r;
  fm_err err;
  fm_status st = linrnn_gpu_run(&gc, &r, &err);
  if (st != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    linrnn_gpu_result_free(&r);
    return st == FM_EUNSUPPORTED ? FM_EXIT_USAGE : FM_EXIT_FAIL;
  }
  int pass = r.identical && r.class_mismatches == 0;
  for (int v = 0; v < FM_LR_NVARIANTS; v++)
    pass &= r.out_err[v] <= LINRNN_GPU_REL_BAR && r.state_err[v] <= LINRNN_GPU_REL_BAR;
  if (o->json) {
    gpu_json(o, lc, &r, pass);
  } else {
    print_case_text(o, lc);
    rpt_table t;
    gpu_table(o, lc, &r, &t);
    printf("gpu          %s: check at %lld tokens x %d heads (bar %.0e): %s; every variant == skip bit for "
           "bit: %s; instrumented classes vs the CPU's: %lld mismatches\n",
           r.device, (long long)(o->verify < o->tokens ? o->verify : o->tokens), gc.verify_heads,
           LINRNN_GPU_REL_BAR, pass ? "pass" : "FAIL", r.identical ? "yes" : "NO",
           (long long)r.class_mismatches);
    rpt_text(&t, stdout);
    rpt_free(&t);
  }
  int trc = o->trace ? write_trace(o, lc, &r) : FM_EXIT_OK;
  linrnn_gpu_result_free(&r);
  return trc ? trc : pass ? FM_EXIT_OK : FM_EXIT_FAIL;
}

int cmd_linrnn(int argc, char **argv) {
  lr_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc < 0) return FM_EXIT_OK; /* --help */
  if (rc || (rc = check_args(&o))) return rc;
  if (o.sweep) return run_sweep(&o);
  if (!o.cpu && !o.intervals && !linrnn_gpu_available()) /* before any work */
    return run_gpu(&o, NULL);
  /* the trace folder: locked and checked for planted links before any work (fm_fileio.h rule 7) */
  fm_outdir_lock lock = {.held = 0};
  fm_err err;
  if (o.trace && fm_outdir_lock_take(&lock, o.trace, 1, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    return FM_EXIT_USAGE;
  }
  lr_case lc;
  if (case_build(o.tokens, o.doc_len, o.doc_mean, (uint64_t)o.seed, (int32_t)o.chunk, (int32_t)o.sub,
                 (int32_t)o.dk, (int32_t)o.dv, &lc, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  } else {
    rc = o.intervals ? write_intervals(&o, &lc) : o.cpu ? run_cpu(&o, &lc) : run_gpu(&o, &lc);
    case_free(&lc);
  }
  fm_outdir_lock_release(&lock);
  return rc;
}
