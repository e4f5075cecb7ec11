/* timing_cli.h — what `fmsim predict` and `fmsim analyze --gpu` share: finding
 * and loading a GPU profile of the timing model (core/fm_timing.h), and one
 * prediction of a mask at its kernel's tile. */
#ifndef FM_TIMING_CLI_H
#define FM_TIMING_CLI_H

#include <stddef.h>

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

/* The predicted forward time of m (skip variant) at the profile's kernel tile
 * for head_dim: prints one line (human) or adds "predicted" to j (JSON).
 * -1 after printing an error. */
int timing_cli_predict_mask(const char *cmd, const fm_gpu_profile *prof, const fm_colmask *m,
                            int64_t batch, int64_t heads, int32_t head_dim, fm_json *j);

/* The mask of a trace folder (summary.json and columns.npy), its batch and
 * heads. Prints the error; -1 on failure. */
int timing_load_trace(const char *cmd, const char *dir, fm_colmask **out, int64_t *batch,
                      int64_t *heads);

#endif
