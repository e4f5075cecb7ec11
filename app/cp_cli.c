/* cp_cli.c — the options and the plan of cp-plan and cp-run (cp_cli.h). */
#define _POSIX_C_SOURCE 200809L
#include "cp_cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cp_cli_init(cp_cli_opts *o) {
  memset(o, 0, sizeof *o);
  timing_mask_init(&o->src);
  o->head_dim = 128;
  o->kernel = FM_KERNEL_AUTO;
  o->clock = FM_CLOCK_SUSTAINED; /* --clock auto: a step of training as cp-run times it */
  o->allgather_clock = FM_CLOCK_BURST;
}

/* A positive number in (0, hi]. */
static int positive(const char *cmd, const char *opt, const char *text, double hi, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (end == text || *end || !(v > 0) || v > hi) {
    cli_error(cmd, "%s '%s': expected a number in (0, %.0f]", opt, text, hi);
    return -1;
  }
  *out = v;
  return 0;
}

int cp_cli_mask_opt(const char *c, void *opts, int opt, const char *arg) {
  if (opt == 1001 || opt == 1002) {
    cli_error(c, "%s: %s plans at the kernel's own tiles (--kernel and --head-dim pick them)",
              opt == 1001 ? "--br" : "--bc", c);
    return -1;
  }
  return timing_mask_opt(c, &((cp_cli_opts *)opts)->src, opt, arg);
}

int cp_cli_opt(const char *cmd, cp_cli_opts *o, int opt, const char *arg) {
  fm_err err;
  switch (opt) {
  case CP_O_RANKS: return cli_int(cmd, "--ranks", arg, 1, FM_CP_MAX_RANKS, &o->ranks) ? -1 : 1;
  case CP_O_CHUNK: return cli_size(cmd, "--chunk", arg, 1, FM_MAX_SEQLEN, &o->chunk) ? -1 : 1;
  case CP_O_HEAD_DIM: return cli_int(cmd, "--head-dim", arg, 1, 1024, &o->head_dim) ? -1 : 1;
  case CP_O_EXACT: o->exact = 1; return 1;
  case CP_O_JSON: o->json = 1; return 1;
  case CP_O_LONG: o->long_run = 1; return 1;
  case CP_O_GPU: o->gpu = arg; return 1;
  case CP_O_LINK_GBS: return positive(cmd, "--link-gbs", arg, 1e6, &o->link_gbs) ? -1 : 1;
  case CP_O_LINK_US: return positive(cmd, "--link-us", arg, 1e6, &o->link_us) ? -1 : 1;
  case CP_O_GPU_GBS: return positive(cmd, "--gpu-gbs", arg, 1e6, &o->gpu_gbs) ? -1 : 1;
  case CP_O_MEM: return positive(cmd, "--mem-gib", arg, 1 << 20, &o->mem_gib) ? -1 : 1;
  case CP_O_COMM_SMS: {
    char *end;
    double f = strtod(arg, &end);
    if (end == arg || *end || !(f >= 0 && f < 1)) {
      cli_error(cmd, "--comm-sms %s: expected a fraction of the SMs in [0, 1)", arg);
      return -1;
    }
    o->comm_sm_frac = f > 0 ? f : -1;
    return 1;
  }
  case CP_O_CLOCK:
    if (fm_cp_clock_parse(arg, &o->clock, &o->allgather_clock, &err) == FM_OK) return 1;
    cli_error(cmd, "--clock: %s", err.msg);
    return -1;
  case CP_O_SHARDING:
    if (!strcmp(arg, "plan")) { /* the plan's best: every sharding planned, the best one kept */
      o->shardings = 0;
      o->best = 1;
      return 1;
    }
    o->best = 0;
    if (fm_cp_shardings_parse(arg, &o->shardings, &err) == FM_OK) return 1;
    cli_error(cmd, "--sharding: %s, or plan (the best)", err.msg);
    return -1;
  case CP_O_KERNEL:
    if (fm_kernel_parse(arg, &o->kernel, &err) == FM_OK) return 1;
    cli_error(cmd, "--kernel: %s", err.msg);
    return -1;
  }
  return 0;
}

int cp_cli_check(const char *cmd, cp_cli_opts *o) {
  if (!o->ranks) {
    cli_error(cmd, "--ranks P is required (the GPUs to split the sequence over)");
    return -1;
  }
  return timing_mask_check(cmd, &o->src);
}

/* The timing model's work of the plan: the whole mask once, and per sharding
 * every rank's forward row tiles (S in all) and every rank's backward key
 * tiles (P x S). */
int cp_cli_work_check(const char *cmd, const cp_cli_opts *o, const fm_gpu_profile *prof,
                      const fm_colmask *m) {
  int n = 0;
  for (int s = 0; s < FM_CP_NSHARDINGS; s++) n += !o->shardings || (o->shardings & (1u << s));
  double items = 0;
  for (int k = 0; k < FM_CP_NPASSES; k++) {
    fm_pass pass = k == FM_CP_FWD ? FM_PASS_FWD : FM_PASS_BWD;
    const fm_timing_coef *c = fm_profile_coef(prof, pass, (int32_t)o->head_dim);
    if (!c) continue;
    double one = timing_items(pass, fm_colmask_sq(m), fm_colmask_sk(m), c->br, c->bc,
                              o->src.mask.batch, o->src.mask.heads);
    items += one * (1 + n * (k == FM_CP_BWD ? (double)o->ranks : 1));
  }
  char what[96];
  snprintf(what, sizeof what, "%lld ranks, batch %lld x heads %lld", (long long)o->ranks,
           (long long)o->src.mask.batch, (long long)o->src.mask.heads);
  return timing_work_check(cmd, what, items, o->long_run);
}

fm_cp_plan *cp_cli_plan(const char *cmd, const cp_cli_opts *o, const fm_colmask *m,
                        const fm_gpu_profile *prof) {
  fm_cp_options co = {.ranks = (int32_t)o->ranks, .shardings = o->shardings, .chunk = (int32_t)o->chunk,
                      .exact = o->exact, .kernel = o->kernel, .head_dim = (int32_t)o->head_dim,
                      .batch = o->src.mask.batch, .heads = o->src.mask.heads, .profile = prof,
                      .link_gbs = o->link_gbs, .link_us = o->link_us, .gpu_gbs = o->gpu_gbs, .comm_sm_frac = o->comm_sm_frac,
                      .clock = o->clock, .allgather_clock = o->allgather_clock, .mem_budget = (int64_t)(o->mem_gib * (double)(1 << 30))};
  fm_cp_plan *plan = NULL;
  fm_err err;
  if (fm_cp_plan_create(m, &co, &plan, &err) != FM_OK) cli_error(cmd, "%s", err.msg);
  return plan;
}
