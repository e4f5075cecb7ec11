/* fm_kernels.c — the kernel registry (fm_kernels.h): one row per kernel. */
#include "fm_kernels.h"

#include <stdio.h>
#include <string.h>

#include "fm_kernel_traits.h"
#include "fm_words.h"

#define ALL_VARIANTS ((1u << FM_VARIANT_SKIP) | (1u << FM_VARIANT_NOSKIP) | (1u << FM_VARIANT_DENSE))

#define TILE(d, r, c) {.head_dim = d, .br = r, .bc = c}
#define TILE2(d, r, c, br2, bc2) {.head_dim = d, .br = r, .bc = c, .bwd_br = br2, .bwd_bc = bc2}
#define NO_PASS {.kind = FM_KSCHED_NONE, .ctas_per_sm = 0}

/* One row per kernel: identity, what it needs, its tiles, what it implements,
 * how each pass is scheduled. */
static const fm_kernel_desc registry[FM_NKERNELS] = {
    [FM_KERNEL_SM80] = {.id = FM_KERNEL_SM80, .name = "sm80",
        .summary = "portable mma.sync kernel (FlashAttention-2 class), sm_80 and up",
        .cc_major = 8, .cc_minor = 0, .cc_exact = 0, .preference = 1, .ntiles = 2,
        .tiles = {TILE(64, FM_SM80_BR, FM_SM80_BC_HD64), TILE(128, FM_SM80_BR, FM_SM80_BC_HD128)},
        .variants = ALL_VARIANTS, .passes = FM_PASS_FWD,
        /* grid (Tr, B*H), row tiles of a head from the last (kernels/fm_sm80_fwd.cuh) */
        .fwd_sched = {.kind = FM_KSCHED_GRID, .ctas_per_sm = FM_SM80_CTAS_PER_SM},
        .bwd_sched = NO_PASS},
    [FM_KERNEL_SM90] = {.id = FM_KERNEL_SM90, .name = "sm90",
        .summary = "Hopper kernel: TMA, wgmma, warp specialization (sm_90a only)",
        .cc_major = 9, .cc_minor = 0, .cc_exact = 1, .preference = 2, .ntiles = 2,
        .tiles = {TILE2(64, FM_SM90_BR_HD64, FM_SM90_BC_HD64, FM_SM90_BWD_BR_HD64, FM_SM90_BWD_BC_HD64),
                  TILE2(128, FM_SM90_BR_HD128, FM_SM90_BC_HD128, FM_SM90_BWD_BR_HD128,
                        FM_SM90_BWD_BC_HD128)},
        .variants = ALL_VARIANTS, .passes = FM_PASS_BOTH,
        /* persistent grids of at most one CTA per SM: the forward's row tiles in
           kernels/fm_sm90.cu's default order, the backward's key tiles in index
           order (kernels/fm_sm90_bwd.cu) */
        .fwd_sched = {.kind = FM_KSCHED_PERSISTENT_HEAD, .ctas_per_sm = FM_SM90_CTAS_PER_SM},
        .bwd_sched = {.kind = FM_KSCHED_PERSISTENT_INDEX, .ctas_per_sm = FM_SM90_BWD_CTAS_PER_SM}},
};
#undef TILE
#undef TILE2
#undef NO_PASS

static const char *const variant_names[FM_NVARIANTS] = {"skip", "noskip", "dense"};

const char *fm_variant_name(fm_variant v) {
  return (unsigned)v < FM_NVARIANTS ? variant_names[v] : "?";
}

fm_status fm_variant_parse(const char *text, fm_variant *out, fm_err *err) {
  int v = fm_word_index(text, variant_names, FM_NVARIANTS);
  if (v >= 0) {
    *out = (fm_variant)v;
    return FM_OK;
  }
  return fm_fail(err, FM_EINVAL, "unknown variant '%s' (expected skip, noskip or dense)",
                 text ? text : "");
}

static const char *const mask_method_names[] = {
    [FM_MASK_METHOD_AUTO] = "auto", [FM_MASK_METHOD_SLICES] = "slices", [FM_MASK_METHOD_R2P] = "r2p",
    [FM_MASK_METHOD_WORDS] = "words"};
#define NMASK_METHODS ((int)(sizeof mask_method_names / sizeof mask_method_names[0]))

const char *fm_mask_method_name(fm_mask_method m) {
  return (unsigned)m < (unsigned)NMASK_METHODS ? mask_method_names[m] : "?";
}

fm_status fm_mask_method_parse(const char *text, fm_mask_method *out, fm_err *err) {
  int m = fm_word_index(text, mask_method_names, NMASK_METHODS);
  if (m >= 0) {
    *out = (fm_mask_method)m;
    return FM_OK;
  }
  return fm_fail(err, FM_EINVAL, "unknown mask method '%s' (expected auto, slices, r2p or words)",
                 text ? text : "");
}

static const struct {
  fm_pass pass;
  const char *name;
} pass_names[] = {{FM_PASS_FWD, "fwd"}, {FM_PASS_BWD, "bwd"}, {FM_PASS_BOTH, "both"}};

const char *fm_pass_name(fm_pass p) {
  for (size_t i = 0; i < sizeof pass_names / sizeof pass_names[0]; i++)
    if (pass_names[i].pass == p) return pass_names[i].name;
  return "?";
}

fm_status fm_pass_parse(const char *text, fm_pass *out, fm_err *err) {
  for (size_t i = 0; i < sizeof pass_names / sizeof pass_names[0]; i++)
    if (text && !strcmp(text, pass_names[i].name)) {
      *out = pass_names[i].pass;
      return FM_OK;
    }
  return fm_fail(err, FM_EINVAL, "unknown pass '%s' (expected fwd, bwd or both)", text ? text : "");
}

const fm_kernel_desc *fm_kernel_get(fm_kernel_id id) {
  return (int)id >= 0 && (int)id < FM_NKERNELS ? &registry[id] : NULL;
}

fm_status fm_kernel_parse(const char *text, fm_kernel_id *out, fm_err *err) {
  if (text && !strcmp(text, "auto")) {
    *out = FM_KERNEL_AUTO;
    return FM_OK;
  }
  for (int k = 0; k < FM_NKERNELS; k++)
    if (text && !strcmp(text, registry[k].name)) {
      *out = registry[k].id;
      return FM_OK;
    }
  char names[256];
  return fm_fail(err, FM_EINVAL, "unknown kernel '%s' (expected %s or auto)", text ? text : "",
                 fm_kernel_names(names, sizeof names));
}

const char *fm_kernel_names(char *buf, int cap) {
  int n = 0;
  buf[0] = 0;
  for (int k = 0; k < FM_NKERNELS && n >= 0 && n < cap; k++)
    n += snprintf(buf + n, (size_t)(cap - n), "%s%s", k ? ", " : "", registry[k].name);
  return buf;
}

int fm_kernel_runs_on(fm_kernel_id id, int32_t major, int32_t minor) {
  const fm_kernel_desc *d = fm_kernel_get(id);
  if (!d) return 0;
  if (d->cc_exact) return major == d->cc_major && minor == d->cc_minor;
  return major > d->cc_major || (major == d->cc_major && minor >= d->cc_minor);
}

/* The reference GPU of CPU-only runs: the H200 (compute capability 9.0). */
#define REF_CC_MAJOR 9
#define REF_CC_MINOR 0

fm_status fm_kernel_auto(int32_t major, int32_t minor, fm_kernel_id *out, fm_err *err) {
  if (major < 0) {
    major = REF_CC_MAJOR;
    minor = REF_CC_MINOR;
  }
  int best = -1;
  for (int k = 0; k < FM_NKERNELS; k++)
    if (fm_kernel_runs_on((fm_kernel_id)k, major, minor) &&
        (best < 0 || registry[k].preference > registry[best].preference))
      best = k;
  if (best < 0)
    return fm_fail(err, FM_EUNSUPPORTED,
                   "no fmsim kernel runs on compute capability %d.%d (sm80 needs 8.0 or newer)",
                   major, minor);
  *out = (fm_kernel_id)best;
  return FM_OK;
}

fm_status fm_kernel_tile_size(fm_kernel_id id, fm_pass pass, int32_t head_dim, int32_t *br, int32_t *bc,
                              fm_err *err) {
  if (id == FM_KERNEL_AUTO) {
    fm_status st = fm_kernel_auto(-1, -1, &id, err);
    if (st != FM_OK) return st;
  }
  const fm_kernel_desc *d = fm_kernel_get(id);
  if (!d) return fm_fail(err, FM_EINVAL, "unknown kernel id %d", (int)id);
  if (pass != FM_PASS_FWD && pass != FM_PASS_BWD)
    return fm_fail(err, FM_EINVAL, "a tile belongs to one pass, fwd or bwd (got %s)", fm_pass_name(pass));
  if (!(d->passes & pass))
    return fm_fail(err, FM_EUNSUPPORTED, "kernel %s has no %s pass", d->name, fm_pass_name(pass));
  for (int i = 0; i < d->ntiles; i++)
    if (d->tiles[i].head_dim == head_dim) {
      if (br) *br = pass == FM_PASS_FWD ? d->tiles[i].br : d->tiles[i].bwd_br;
      if (bc) *bc = pass == FM_PASS_FWD ? d->tiles[i].bc : d->tiles[i].bwd_bc;
      return FM_OK;
    }
  return fm_fail(err, FM_EUNSUPPORTED, "kernel %s has no head dim %d (it supports %d and %d)",
                 d->name, head_dim, d->tiles[0].head_dim, d->tiles[d->ntiles - 1].head_dim);
}
