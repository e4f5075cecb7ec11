/* fmsim run: one forward kernel run on a family mask, written as a trace.
 *
 * On a GPU (a build with the CUDA kernels and a device): random bf16 Q/K/V,
 * the kernel timed after warm-up with the L2 flushed before every launch
 * (CUPTI activity records, CUDA events as fallback), one launch counted by the
 * CUPTI Range Profiler (HBM bytes, L2 sectors), and with --instrument the
 * instrumented build's per-tile classes and cycles. Without a GPU the same
 * trace comes from the CPU simulation: tile classes and the cost model's
 * bytes, no timings (summary.json "device": "cpu-simulation").
 *
 * This is the family form, `fmsim run --family ...`; main.c sends
 * `fmsim run SCENARIO.yaml` to scenario_run.c instead.
 */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fm_kernels.h"
#include "commands.h"
#include "fm_cost.h"
#include "fm_forms.h"
#include "fm_json.h"
#include "fm_memory.h"
#include "fm_run_trace.h"
#include "fm_tiles.h"
#include "fm_trace.h"
#ifdef FM_HAVE_GPU_RUN
#include "fm_measure.h"
#endif

static const char *help =
    "usage: fmsim run --family NAME [options] --out DIR\n"
    "       fmsim run SCENARIO.yaml [--out DIR] [--only PATTERN]   (a scenario file, right\n"
    "       after run: see scenarios/ and README.md)\n\n"
    "Runs the FlashMask forward kernel (bf16, fp32 accumulation) on a family mask and writes\n"
    "a trace: time (median after warm-up, L2 flushed), TFLOP/s (the paper's count\n"
    "4*B*H*S*S*D*(1-rho), rho at the kernel's tile size), bytes measured (CUPTI Range\n"
    "Profiler) next to the cost model's, per-tile classes (and cycles with --instrument), a\n"
    "Chrome-trace timeline. Without a GPU it writes the same trace from the CPU simulation\n"
    "(classes and modelled bytes, no timings) and says so.\n\n" CLI_MASK_HELP
    "  --head-dim D         64 or 128 (default 128)\n"
    "  --variant V          skip (default), noskip (every tile visited) or dense (an Sq x Sk\n"
    "                       uint8 mask per vector set, built on the device from the intervals)\n"
    "  --instrument         also run the instrumented build: per-tile classes and cycles\n"
    "  --warmup N           untimed launches first (default 3)\n"
    "  --reps N             timed launches (default 20)\n"
    "  --no-cupti           CUDA events only, no counters\n"
    "  --no-bytes           skip the counted launch\n"
    "  --cpu                the CPU simulation even when a GPU is present\n"
    "  --json               one JSON object on stdout instead of the report\n"
    "  --out DIR            the trace folder (required)\n";

/* Per-tile arrays of the trace ([B, H, Tr, Tc]: classes, exact, bytes, cycles) above
 * this are refused. */
#define MAX_TRACE_TILE_BYTES ((int64_t)2 << 30)
/* Device bytes of the dense variant's masks ((sets, Sq, Sk) uint8) above this are refused. */
#define MAX_DENSE_BYTES ((int64_t)64 << 30)

typedef struct run_opts {
  cli_mask_opts mask;
  int tile_given;
  int64_t head_dim;
  fm_variant variant;
  int instrument, cupti, count_bytes, force_cpu, json;
  int64_t warmup, reps;
  const char *out;
} run_opts;

static void print_report(const fm_run_info *r, const fm_analysis *a, const char *out) {
  const fm_cost *c = r->cost;
  char b1[32], b2[32], b3[32], b4[32], b5[32];
  printf("family      %s (%s), S=%lld, batch %lld, heads %lld, head dim %d\n", a->family,
         a->causal ? "causal" : "bidirectional", (long long)a->seqlen_k, (long long)a->batch,
         (long long)a->heads, r->head_dim);
  if (a->params[0]) printf("params      %s\n", a->params);
  printf("kernel      variant %s, tiles %d x %d (%d x %d per head)%s\n",
         fm_variant_name(r->variant), a->br, a->bc, a->tr, a->tc,
         r->instrumented ? ", instrumented" : "");
  printf("device      %s%s%s\n", r->device, r->device_note[0] ? ": " : "", r->device_note);
  printf("rho         %.4f (min/max rule; exact %.4f); visited tiles %lld of %lld\n", c->rho,
         a->counts.sparsity_exact, (long long)c->tiles_visited, (long long)c->tiles_total);
  printf("FLOPs       paper %.4g, executed %.4g\n", c->flops_paper, c->flops_executed);
  printf("bytes model read %s (Q %s, K/V %s), write %s; compulsory read %s\n",
         cli_bytes(c->bytes_read, b1, sizeof b1), cli_bytes(c->bytes_q, b2, sizeof b2),
         cli_bytes(c->bytes_kv, b3, sizeof b3), cli_bytes(c->bytes_write, b4, sizeof b4),
         cli_bytes(c->unique_read, b5, sizeof b5));
  const fm_timing *t = r->timing;
  if (t && t->source[0]) {
    printf("time        %.4f ms median of %d after %d warm-up, L2 flushed (%s", t->median_ms,
           t->reps, t->warmup, t->source);
    if (isfinite(t->events_median_ms)) printf("; CUDA events %.4f ms", t->events_median_ms);
    printf(")%s%s\n", t->note[0] ? "; " : "", t->note);
    printf("TFLOP/s     %.1f paper count, %.1f executed; %.0f GB/s of modelled reads\n",
           fm_cost_tflops(c->flops_paper, t->median_ms),
           fm_cost_tflops(c->flops_executed, t->median_ms),
           (double)c->bytes_read / (t->median_ms * 1e-3) / 1e9);
  } else {
    printf("time        none (no GPU run)\n");
  }
  const fm_measured_bytes *mb = r->measured;
  if (mb && mb->source[0])
    printf("bytes meas. DRAM read %s (%.2fx compulsory), write %s; L2 read %s (%.2fx model) (%s)\n",
           cli_bytes((int64_t)mb->dram_read, b1, sizeof b1), mb->dram_read / (double)c->unique_read,
           cli_bytes((int64_t)mb->dram_write, b2, sizeof b2),
           cli_bytes((int64_t)(32.0 * mb->l2_read_sectors), b3, sizeof b3),
           32.0 * mb->l2_read_sectors / (double)c->bytes_read, mb->source);
  else if (mb)
    printf("bytes meas. none: %s\n", mb->note);
  const fm_timing *ti = r->timing_instrumented;
  if (ti && ti->source[0] && t && t->source[0])
    printf("instrumented %.4f ms (%+.1f%% over plain)\n", ti->median_ms,
           100.0 * (ti->median_ms / t->median_ms - 1.0));
  if (r->class_mismatches >= 0)
    printf("tile record kernel classes vs CPU: %lld mismatch%s\n", (long long)r->class_mismatches,
           r->class_mismatches == 1 ? "" : "es");
  printf("trace       %s\n", out);
}

int cmd_run(int argc, char **argv) {
  enum { O_HD = 2001, O_VAR, O_INST, O_WARM, O_REPS, O_NOCUPTI, O_NOBYTES, O_CPU, O_JSON, O_OUT };
  static const struct option longopts[] = {CLI_MASK_LONGOPTS,
                                           {"head-dim", required_argument, 0, O_HD},
                                           {"variant", required_argument, 0, O_VAR},
                                           {"instrument", no_argument, 0, O_INST},
                                           {"warmup", required_argument, 0, O_WARM},
                                           {"reps", required_argument, 0, O_REPS},
                                           {"no-cupti", no_argument, 0, O_NOCUPTI},
                                           {"no-bytes", no_argument, 0, O_NOBYTES},
                                           {"cpu", no_argument, 0, O_CPU},
                                           {"json", no_argument, 0, O_JSON},
                                           {"out", required_argument, 0, O_OUT},
                                           {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *cmd = "run";
  run_opts o;
  memset(&o, 0, sizeof o);
  cli_mask_opts_init(&o.mask);
  o.head_dim = 128;
  o.variant = FM_VARIANT_SKIP;
  o.cupti = o.count_bytes = 1;
  o.warmup = 3;
  o.reps = 20;
  fm_err err;
  int opt;
  opterr = 0;
  optind = 1;
  while ((opt = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    int r = cli_mask_opt(cmd, &o.mask, opt, optarg);
    if (r < 0) return FM_EXIT_USAGE;
    if (r > 0) {
      if (opt == 1001 || opt == 1002) o.tile_given = 1;
      continue;
    }
    switch (opt) {
    case O_HD:
      if (cli_int(cmd, "--head-dim", optarg, 1, 1 << 20, &o.head_dim)) return FM_EXIT_USAGE;
      if (o.head_dim != 64 && o.head_dim != 128) {
        cli_error(cmd, "--head-dim %lld: the kernels support head dims 64 and 128",
                  (long long)o.head_dim);
        return FM_EXIT_USAGE;
      }
      break;
    case O_VAR:
      if (fm_variant_parse(optarg, &o.variant, &err) != FM_OK) {
        cli_error(cmd, "--variant: %s", err.msg);
        return FM_EXIT_USAGE;
      }
      break;
    case O_INST: o.instrument = 1; break;
    case O_WARM:
      if (cli_int(cmd, "--warmup", optarg, 0, 100000, &o.warmup)) return FM_EXIT_USAGE;
      break;
    case O_REPS:
      if (cli_int(cmd, "--reps", optarg, 1, 100000, &o.reps)) return FM_EXIT_USAGE;
      break;
    case O_NOCUPTI: o.cupti = 0; break;
    case O_NOBYTES: o.count_bytes = 0; break;
    case O_CPU: o.force_cpu = 1; break;
    case O_JSON: o.json = 1; break;
    case O_OUT: o.out = optarg; break;
    case 'h': fputs(help, stdout); return FM_EXIT_OK;
    default: return cli_bad_option(cmd, opt, argv);
    }
  }
  if (optind < argc) {
    size_t n = strlen(argv[optind]);
    if ((n > 5 && !strcmp(argv[optind] + n - 5, ".yaml")) || (n > 4 && !strcmp(argv[optind] + n - 4, ".yml")))
      cli_error(cmd, "a scenario file comes right after run: fmsim run %s [--out DIR] [--only PATTERN]",
                argv[optind]);
    else
      cli_error(cmd, "unexpected argument '%s'", argv[optind]);
    return FM_EXIT_USAGE;
  }
  if (!o.mask.family) {
    cli_error(cmd, "--family is required (fmsim families lists them)");
    return FM_EXIT_USAGE;
  }
  if (!o.out) {
    cli_error(cmd, "--out DIR is required (the trace folder)");
    return FM_EXIT_USAGE;
  }

  /* the kernel's tile size */
  int32_t br = (int32_t)o.mask.br, bc = (int32_t)o.mask.bc;
  const char *tile_note = "--br/--bc (a build without the CUDA kernels does not know the kernel's)";
#ifdef FM_HAVE_GPU_RUN
  int32_t kbr, kbc;
  fm_kernel_tile_size(FM_KERNEL_SM80, (int32_t)o.head_dim, &kbr, &kbc, NULL);
  if (!o.tile_given) {
    br = kbr;
    bc = kbc;
    tile_note = "";
  } else if (br != kbr || bc != kbc) {
    tile_note = "--br/--bc, not the kernel's";
  } else {
    tile_note = "";
  }
#endif

  fm_colmask *m = NULL;
  fm_family_used used;
  if (cli_build_family(cmd, &o.mask, &m, &used)) return FM_EXIT_USAGE;
  int32_t nsets = fm_colmask_nsets(m);
  int64_t dense_bytes = (int64_t)nsets * fm_colmask_sq(m) * (int64_t)fm_colmask_sk(m);
  if (o.variant == FM_VARIANT_DENSE && dense_bytes > MAX_DENSE_BYTES) {
    cli_error(cmd, "--variant dense: %d dense mask%s of %d x %d take %lld GiB (limit %lld GiB); "
              "use a shorter --seqlen or fewer per-head sets", nsets, nsets == 1 ? "" : "s",
              fm_colmask_sq(m), fm_colmask_sk(m), (long long)(dense_bytes >> 30),
              (long long)(MAX_DENSE_BYTES >> 30));
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  fm_analysis a;
  fm_analysis_init(&a, m, o.mask.family, used.params, used.docs_source, o.mask.batch,
                   o.mask.heads, br, bc);
  int64_t per_set = (int64_t)a.tr * a.tc;
  int64_t all_tiles = a.batch * a.heads * per_set;
  if (all_tiles * 18 > MAX_TRACE_TILE_BYTES) {
    cli_error(cmd, "%lld tiles would need %lld MiB of per-tile trace arrays (limit %lld MiB); use "
              "fewer --batch/--heads or a shorter --seqlen", (long long)all_tiles,
              (long long)(all_tiles * 18 >> 20), (long long)(MAX_TRACE_TILE_BYTES >> 20));
    fm_colmask_destroy(m);
    return FM_EXIT_USAGE;
  }
  uint8_t *classes = malloc((size_t)(nsets * per_set));
  uint8_t *exact = malloc((size_t)(nsets * per_set));
  int64_t *tile_bytes = malloc(sizeof(int64_t) * (size_t)(nsets * per_set));
  int rc = FM_EXIT_OK;
  fm_cost cost;
  if (!classes || !exact || !tile_bytes) {
    cli_error(cmd, "cannot allocate the tile arrays (%lld tiles)", (long long)(nsets * per_set));
    rc = FM_EXIT_USAGE;
  } else if (fm_classify(m, br, bc, &a.counts, classes, exact, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  } else {
    fm_cost_shape shape = {a.batch, a.heads, (int32_t)o.head_dim, br, bc, 2, o.variant};
    if (fm_cost_compute(m, &shape, classes, tile_bytes, &cost, &err) != FM_OK) {
      cli_error(cmd, "%s", err.msg);
      rc = FM_EXIT_USAGE;
    }
  }

  fm_run_info info;
  memset(&info, 0, sizeof info);
  info.analysis = &a;
  info.head_dim = (int32_t)o.head_dim;
  info.variant = o.variant;
  info.cost = &cost;
  info.class_mismatches = -1;
  char device[160] = "cpu-simulation", note[512] = "";
  fm_measured_bytes none;
  memset(&none, 0, sizeof none);
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_session *sess = NULL;
  fm_gpu_result gres;
  memset(&gres, 0, sizeof gres);
  char gdesc[256];
  fm_err gerr;
  int use_gpu = 0;
  if (rc == FM_EXIT_OK) {
    if (o.force_cpu) snprintf(note, sizeof note, "--cpu: classes and modelled bytes, no timings");
    else if (fm_attn_device_info(gdesc, sizeof gdesc, &gerr) != FM_OK)
      snprintf(note, sizeof note, "no GPU (%.300s): classes and modelled bytes, no timings",
               gerr.msg);
    else if (tile_note[0]) {
      cli_error(cmd, "--br %d --bc %d: the kernel's tile size for head dim %lld is %d x %d; a "
                "GPU run cannot change it", br, bc, (long long)o.head_dim, kbr, kbc);
      rc = FM_EXIT_USAGE;
    } else
      use_gpu = 1;
  }
  if (rc == FM_EXIT_OK && use_gpu) {
    int64_t s = a.seqlen_k;
    fm_gpu_case gc = {.mask = m, .batch = (int32_t)a.batch, .heads = (int32_t)a.heads,
                      .head_dim = (int32_t)o.head_dim, .variant = o.variant, .kernel = FM_KERNEL_SM80};
    fm_gpu_opts go = {(int32_t)o.warmup, (int32_t)o.reps, o.instrument,
                      o.instrument ? (int32_t)o.reps : 0, o.count_bytes && o.cupti, o.cupti,
                      o.instrument, 1};
    if (fm_gpu_session_create(a.batch * s, a.heads * o.head_dim,
                              o.variant == FM_VARIANT_DENSE ? dense_bytes : 0, o.mask.seed, &sess,
                              &err) != FM_OK ||
        fm_gpu_session_run(sess, &gc, &go, &gres, &err) != FM_OK) {
      cli_error(cmd, "GPU run failed: %s", err.msg);
      rc = FM_EXIT_FAIL;
    } else {
      const fm_gpu_props *p = fm_gpu_session_props(sess);
      snprintf(device, sizeof device, "%s", p->name);
      info.timing = &gres.timing;
      info.timing_instrumented = o.instrument ? &gres.timing_instrumented : NULL;
      info.measured = &gres.measured;
      if (!o.count_bytes || !o.cupti) {
        snprintf(gres.measured.note, sizeof gres.measured.note, "%s",
                 !o.cupti ? "--no-cupti: no counters" : "--no-bytes: not counted");
      }
      info.instrumented = o.instrument;
      info.gpu_classes = gres.tile_class;
      info.gpu_cycles = gres.tile_cycles;
      info.clock_khz = p->clock_khz;
      if (gres.tile_class && o.variant == FM_VARIANT_SKIP)
        info.class_mismatches =
            fm_class_mismatches(m, classes, gres.tile_class, a.batch, a.heads, per_set);
      if (gres.tile_cycles && gres.tile_class &&
          fm_timeline_add_tiles(&gres.timeline, gres.tile_class, gres.tile_cycles, a.tr, a.tc,
                                p->clock_khz, 1, 50000, &err) != FM_OK) {
        cli_error(cmd, "%s", err.msg);
        rc = FM_EXIT_FAIL;
      }
      gres.timeline.process_names[0] = "GPU kernels of the timed launches (L2 flush between)";
      if (gres.tile_cycles)
        gres.timeline.process_names[1] =
            "instrumented tiles of (b=0, h=0): one row per row tile, visited tiles end to end "
            "in key-tile order (cycles at the SM clock)";
      info.timeline = &gres.timeline;
    }
  }
#else
  if (rc == FM_EXIT_OK)
    snprintf(note, sizeof note, "%s: classes and modelled bytes, no timings",
             o.force_cpu ? "--cpu" : "built without the CUDA kernels");
#endif
  info.device = device;
  info.device_note = note;
  if (!info.timing) {
    snprintf(none.note, sizeof none.note, "no counters: %s",
             !strcmp(device, "cpu-simulation") ? "CPU simulation" : "not measured");
    info.measured = &none;
  }
  if (rc == FM_EXIT_OK && tile_note[0] && !info.timing) {
    size_t n = strlen(note);
    snprintf(note + n, sizeof note - n, "; tile size %d x %d from %s", br, bc, tile_note);
  }
  if (rc == FM_EXIT_OK && fm_run_trace_write(o.out, &info, m, classes, exact, tile_bytes, &err) != FM_OK) {
    cli_error(cmd, "%s", err.msg);
    rc = FM_EXIT_USAGE;
  }
  if (rc == FM_EXIT_OK) {
    if (!info.timing) fprintf(stderr, "fmsim run: note: %s; wrote the CPU simulation\n", note);
    if (o.json) {
      fm_json j;
      fm_json_init(&j, 1);
      fm_json_object(&j, NULL);
      fm_json_string(&j, "kind", "run");
      fm_run_json(&info, &j);
      fm_analysis_json(&a, &j);
      fm_json_string(&j, "trace", o.out);
      fm_json_end(&j);
      fputs(j.buf, stdout);
      fm_json_free(&j);
    } else {
      print_report(&info, &a, o.out);
    }
  }
#ifdef FM_HAVE_GPU_RUN
  fm_gpu_result_free(&gres);
  fm_gpu_session_destroy(sess);
  fm_cupti_shutdown();
#endif
  free(classes);
  free(exact);
  free(tile_bytes);
  fm_colmask_destroy(m);
  return rc;
}
