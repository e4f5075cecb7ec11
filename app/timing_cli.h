/* timing_cli.h — what `fmsim predict`, `fmsim analyze --gpu` and the scenario
 * runner (profile:, run --gpu, bench --gpu) share: finding and loading a GPU
 * profile of the timing model (core/fm_timing.h), the profile a GPU has by
 * default, and one prediction of a mask at its kernel's tile. */
#ifndef FM_TIMING_CLI_H
#define FM_TIMING_CLI_H

#include <stddef.h>

#include "cli.h"
#include "fm_colmask.h"
#include "fm_json.h"
#include "fm_kernels.h"
#include "fm_timing.h"

/* Loads the profile that --gpu and --kernel name, for head dim head_dim:
 *   gpu given: an existing file, else data/gpu/GPU.json (GPU may omit .json);
 *   gpu NULL:  data/gpu/h200-KERNEL.json for the kernel (auto: the H200's);
 *              with kernel auto and no profile for it yet, the profile of the
 *              next kernel by preference, and a line saying so in note (for
 *              the caller to print once its input has passed; "" otherwise).
 * A profile for another kernel than a named one, one without forward
 * coefficients for head_dim, an unknown name or a malformed file: one line
 * on stderr, -1 (the caller exits 2). 0 on success. */
int timing_profile_load(const char *cmd, const char *gpu, fm_kernel_id kernel, int32_t head_dim,
                        fm_gpu_profile *out, char *note, size_t note_cap);

/* Loads the profile NAME: an existing file, else data/gpu/NAME[.json]; out->name
 * becomes NAME. `what` starts the messages (e.g. "--gpu NAME" or "FILE:LINE:
 * key 'profile': NAME"). An unknown name or a malformed file (a tile that is
 * not the kernel's included): one line on stderr, -1. */
int timing_profile_open(const char *cmd, const char *what, const char *name, fm_gpu_profile *out);

/* The short name of a GPU as profiles are named (data/gpu/SHORT-KERNEL.json,
 * docs/DESIGN.md, "Timing model"): the device name without its vendor words
 * (NVIDIA, GeForce, Tesla, Quadro), lower case, up to the first word with a
 * digit, letters and digits only: "NVIDIA H200" -> "h200", "NVIDIA H100 80GB
 * HBM3" -> "h100", "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX
 * 4090" -> "rtx4090". "" when nothing is left. */
void timing_gpu_short_name(const char *device, char *out, size_t cap);

/* The profile device's GPU has for kernel: data/gpu/SHORT-KERNEL.json. 1 with
 * its name ("h200-sm90") and path when the file exists, else 0. */
int timing_default_profile(const char *device, fm_kernel_id kernel, char *name, size_t name_cap,
                           char *path, size_t path_cap);

/* One prediction (fm_timing_predict) of pb on m at the tile (br x bc) the
 * profile has for pb->pass and pb->head_dim, which is the kernel's own
 * (fm_kernel_tile_size: the profile is refused otherwise). FM_EUNSUPPORTED
 * with "NAME has no backward fit" (or "... no fwd fit for head dim D") when
 * the profile has none; the model's own errors otherwise. O(S) memory. */
fm_status timing_predict(const fm_gpu_profile *prof, const fm_colmask *m, const fm_timing_problem *pb,
                         fm_timing_result *out, fm_err *err);

/* The predicted forward time of m (skip variant) at the profile's kernel tile
 * for head_dim: prints one line (human) or adds "predicted" to j (JSON).
 * -1 after printing an error. */
int timing_cli_predict_mask(const char *cmd, const fm_gpu_profile *prof, const fm_colmask *m,
                            int64_t batch, int64_t heads, int32_t head_dim, fm_json *j);

/* The mask of a timing command (predict, cp-plan): --family NAME with the
 * family mask's options, --mask FILE (an interval file, with --causal or
 * --bidir, --seqlen-q, --strict; or a dense mask, converted to its smallest
 * interval form as fmsim check reads it, no flags) or --trace DIR (a trace
 * folder's columns.npy). Batch and heads default to the file's or the
 * trace's sets. */
#define TIMING_MASK_LONGOPTS                                                                  \
  CLI_MASK_LONGOPTS, CLI_INTERVAL_LONGOPTS, {"mask", required_argument, 0, 'M'},             \
      {"trace", required_argument, 0, 'T'}
#define TIMING_MASK_HELP                                                                      \
  "  --mask FILE          an interval file (Paddle startend_row_indices .npy) instead of\n"   \
  "                       a family; --causal or --bidir says which it is; --seqlen-q N\n"     \
  "                       sets Sq (default Sk); --strict refuses indices above Sq;\n"         \
  "                       batch and heads default to its sets. A dense mask (.npy,\n"        \
  "                       [B,H,Sq,Sk] or [Sq,Sk], read as fmsim check reads it) is\n"        \
  "                       converted to its smallest interval form (no flags needed)\n"       \
  "  --trace DIR          the mask of an fmsim trace folder (columns.npy, summary.json);\n"  \
  "                       batch and heads default to the trace's\n"
typedef struct timing_mask {
  cli_mask_opts mask;           /* --family and its options; mask.batch, mask.heads: B and H */
  cli_interval_opts io;         /* --causal, --bidir, --seqlen-q, --strict of --mask */
  const char *mask_file, *trace; /* --mask, --trace (NULL: not given) */
  int batch_given, heads_given; /* --batch, --heads on the command line */
  int dense;                    /* --mask names a dense mask (set by timing_mask_check) */
} timing_mask;
void timing_mask_init(timing_mask *t);
/* A cli_shared_opt_fn over a timing_mask (opts): the options above. */
int timing_mask_opt(const char *cmd, void *opts, int opt, const char *arg);
/* After the options: exactly one source, and the interval file's flags only
 * with an interval file (one that needs --causal or --bidir gets
 * cli_intervals_causal's line). 0, or -1 after printing. */
int timing_mask_check(const char *cmd, timing_mask *t);
/* The mask (the caller destroys it), t->mask.batch and heads defaulted to the
 * file's or trace's sets unless given; NULL after printing the error (a dense
 * mask no interval form holds is refused with where to look). */
fm_colmask *timing_mask_build(const char *cmd, timing_mask *t);

/* The bound on the work one command asks of the timing model. Its cost is the
 * work items it schedules over the SMs: batch x heads x the items of one
 * (batch, head) pair (row tiles forward, key tiles backward), per
 * prediction; about 30 M items a second on one core. Above TIMING_MAX_ITEMS
 * (2^28: about ten seconds) a command refuses unless confirmed with
 * TIMING_CONFIRM_FLAG, so that a batch or head count typed by mistake
 * (--batch 65535 --heads 65535: hours) is one line, not a silent wait. */
#define TIMING_MAX_ITEMS ((double)(1 << 28))
#define TIMING_CONFIRM_FLAG "--long-run"
/* Items of one prediction of the pass on a (sq x sk) mask at br x bc, batch x heads. */
double timing_items(fm_pass pass, int64_t sq, int64_t sk, int32_t br, int32_t bc, int64_t batch,
                    int64_t heads);
/* 0 when items <= TIMING_MAX_ITEMS or confirmed; else one line on stderr
 * ("what: N work items for the timing model, above the bound of 2^28
 * (268435456, about ten seconds); pass --long-run to run it (about T)")
 * and -1. */
int timing_work_check(const char *cmd, const char *what, double items, int confirmed);

/* The mask of a trace folder (summary.json and columns.npy), its batch and
 * heads. Prints the error; -1 on failure. */
int timing_load_trace(const char *cmd, const char *dir, fm_colmask **out, int64_t *batch,
                      int64_t *heads);

#endif
