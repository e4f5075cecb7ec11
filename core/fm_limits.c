#define _POSIX_C_SOURCE 200809L
#include "fm_limits.h"

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

int64_t fm_mem_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return INT64_MAX;
  if (a != 0 && b > INT64_MAX / a) return INT64_MAX;
  return a * b;
}

int64_t fm_mem_add(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || a > INT64_MAX - b) return INT64_MAX;
  return a + b;
}

const char *fm_mem_format(int64_t bytes, char *buf, int cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(buf, (size_t)cap, "%lld B", (long long)bytes);
  else snprintf(buf, (size_t)cap, "%.1f %s", v, units[u]);
  return buf;
}

int fm_mem_parse(const char *text, int64_t *bytes) {
  char *end;
  errno = 0;
  if (!text || !isdigit((unsigned char)text[0])) return -1;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno) return -1;
  int shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 0: break;
  case 'K': shift = 10; break;
  case 'M': shift = 20; break;
  case 'G': shift = 30; break;
  case 'T': shift = 40; break;
  default: return -1;
  }
  if (*end) {
    end++;
    if (toupper((unsigned char)*end) == 'I') end++; /* "4GiB" */
    if (toupper((unsigned char)*end) == 'B') end++;
    if (*end) return -1;
  }
  if (v > (unsigned long long)(INT64_MAX >> shift)) return -1;
  *bytes = (int64_t)(v << shift);
  return 0;
}

/* The first integer of a small file ("max" or a missing file: -1). */
static int64_t read_number(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char buf[64];
  int64_t v = -1;
  if (fgets(buf, sizeof buf, f) && isdigit((unsigned char)buf[0])) {
    unsigned long long u = strtoull(buf, NULL, 10);
    v = u > (unsigned long long)INT64_MAX ? INT64_MAX : (int64_t)u;
  }
  fclose(f);
  return v;
}

static int64_t meminfo_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  while (fgets(line, sizeof line, f)) {
    long long kb;
    if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) {
      v = fm_mem_mul(kb, 1024);
      break;
    }
  }
  fclose(f);
  return v;
}

/* Room left under one cgroup folder's limit (-1: no limit there). */
static int64_t cgroup_room(const char *dir, int v2, int64_t *max_out) {
  char p[8500];
  snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
  int64_t max = read_number(p);
  /* v1 says "no limit" with a huge number (a page-rounded LONG_MAX) */
  if (max < 0 || max >= ((int64_t)1 << 60)) return -1;
  snprintf(p, sizeof p, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
  int64_t cur = read_number(p);
  if (cur < 0) cur = 0;
  if (*max_out == 0 || max < *max_out) *max_out = max;
  return max > cur ? max - cur : 0;
}

/* The smallest room of the process's cgroup and its ancestors, v2 then v1. */
static int64_t cgroup_limit(int64_t *max_out) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1;
  char line[4096], rel[4096] = "";
  int v2 = 0, found = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
    if (!b) continue;
    *b = 0;
    const char *ctrls = a + 1;
    if (strncmp(line, "0", 1) == 0 && *ctrls == 0 && !found) { /* "0::/path" (v2) */
      snprintf(rel, sizeof rel, "%s", b + 1);
      v2 = found = 1;
    } else if (strstr(ctrls, "memory")) { /* "N:memory:/path" (v1) wins when present */
      snprintf(rel, sizeof rel, "%s", b + 1);
      v2 = 0;
      found = 1;
    }
  }
  fclose(f);
  if (!found) return -1;
  const char *base = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
  int64_t best = -1;
  /* the cgroup path as seen from a container's namespace may not exist under
     /sys/fs/cgroup: then the root folder is the process's own cgroup */
  for (;;) {
    char dir[8400];
    snprintf(dir, sizeof dir, "%s%s", base, rel);
    int64_t r = cgroup_room(dir, v2, max_out);
    if (r >= 0 && (best < 0 || r < best)) best = r;
    char *slash = strrchr(rel, '/');
    if (!slash || rel[0] == 0) break;
    *slash = 0;
  }
  return best;
}

static int64_t rlimit_bytes(void) {
  int64_t best = -1;
  int which[2] = {RLIMIT_AS, RLIMIT_DATA};
  for (int i = 0; i < 2; i++) {
    struct rlimit rl;
    if (getrlimit(which[i], &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
      int64_t v = rl.rlim_cur > (rlim_t)INT64_MAX ? INT64_MAX : (int64_t)rl.rlim_cur;
      if (best < 0 || v < best) best = v;
    }
  }
  return best;
}

/* The running budget (fm_limits.h, "Global state"). */
static _Atomic int64_t reserved_bytes;

int64_t fm_mem_reserved(void) { return atomic_load(&reserved_bytes); }

void fm_mem_release(int64_t bytes) {
  if (bytes <= 0) return;
  int64_t cur = atomic_load(&reserved_bytes);
  while (!atomic_compare_exchange_weak(&reserved_bytes, &cur, cur > bytes ? cur - bytes : 0)) {
  }
}

/* FMSIM_MEM_LIMIT: 0 unset, 1 read into *v, -1 malformed (set but not a size). */
static int env_limit(int64_t *v) {
  const char *env = getenv("FMSIM_MEM_LIMIT");
  if (!env) return 0;
  return fm_mem_parse(env, v) == 0 ? 1 : -1;
}

fm_status fm_mem_env_check(fm_err *err) {
  int64_t v;
  if (env_limit(&v) >= 0) return FM_OK;
  char shown[48];
  const char *env = getenv("FMSIM_MEM_LIMIT");
  snprintf(shown, sizeof shown, "%.40s%s", env, strlen(env) > 40 ? "..." : "");
  for (char *c = shown; *c; c++) /* one line, whatever the variable holds */
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
  return fm_fail(err, FM_EINVAL,
                 "FMSIM_MEM_LIMIT=%s: not a size (expected a byte count with an optional K, M, G "
                 "or T suffix, e.g. 4G)", shown);
}

/* The limits read now: the process totals (FMSIM_MEM_LIMIT, ulimit) and the
 * room now (MemAvailable, cgroup), each -1 when absent. */
typedef struct mem_figures {
  int64_t cand[4]; /* MemAvailable, cgroup room, rlimit (4/5 each), FMSIM_MEM_LIMIT */
  int64_t cgroup_max;
} mem_figures;

static const fm_mem_source fig_source[4] = {FM_MEM_AVAILABLE, FM_MEM_CGROUP, FM_MEM_RLIMIT,
                                            FM_MEM_ENV};
static const int fig_is_total[4] = {0, 0, 1, 1};

static void mem_figures_read(mem_figures *f) {
  f->cgroup_max = 0;
  f->cand[0] = meminfo_available();
  f->cand[1] = cgroup_limit(&f->cgroup_max);
  f->cand[2] = rlimit_bytes();
  f->cand[3] = -1;
  if (env_limit(&f->cand[3]) <= 0) f->cand[3] = -1;
  for (int i = 0; i < 3; i++) /* a fifth stays for the rest of the machine */
    if (f->cand[i] >= 0) f->cand[i] = f->cand[i] / 5 * 4;
}

/* What may be allocated now: each total less what is reserved, each room as
 * it is; the smallest wins. */
static void limit_from(const mem_figures *f, int64_t held, fm_mem_limit *out) {
  out->bytes = INT64_MAX;
  out->source = FM_MEM_UNKNOWN;
  out->cgroup_max = f->cgroup_max;
  for (int i = 0; i < 4; i++) {
    if (f->cand[i] < 0) continue;
    int64_t v = f->cand[i];
    if (fig_is_total[i]) v = v > held ? v - held : 0;
    if (v < out->bytes) {
      out->bytes = v;
      out->source = fig_source[i];
    }
  }
}

void fm_mem_limit_get(fm_mem_limit *out) {
  mem_figures f;
  mem_figures_read(&f);
  limit_from(&f, fm_mem_reserved(), out);
}

static fm_status check_held(int64_t bytes, int64_t held, const char *what, fm_err *err) {
  int64_t lim;
  int env = env_limit(&lim);
  if (env < 0) return fm_mem_env_check(err);
  if (bytes >= 0 && bytes <= FM_MEM_SMALL) { /* only FMSIM_MEM_LIMIT can refuse these */
    if (env == 0 || fm_mem_add(held, bytes) <= lim) return FM_OK;
  }
  mem_figures f;
  mem_figures_read(&f);
  fm_mem_limit l;
  limit_from(&f, held, &l);
  if (bytes >= 0 && bytes <= l.bytes) return FM_OK;
  char need[32], have[32], cg[32];
  if (bytes < 0 || bytes == INT64_MAX) snprintf(need, sizeof need, "more than 8 EiB");
  else fm_mem_format(bytes, need, sizeof need);
  if (l.bytes == INT64_MAX) /* only an overflowed estimate gets here */
    return fm_fail(err, FM_ENOMEM, "%s would take %s: more than any machine holds", what, need);
  fm_mem_format(l.bytes, have, sizeof have);
  char why[96];
  switch (l.source) {
  case FM_MEM_CGROUP:
    snprintf(why, sizeof why, "cgroup limit %s", fm_mem_format(l.cgroup_max, cg, sizeof cg));
    break;
  case FM_MEM_RLIMIT: snprintf(why, sizeof why, "ulimit"); break;
  case FM_MEM_ENV: snprintf(why, sizeof why, "FMSIM_MEM_LIMIT"); break;
  default: snprintf(why, sizeof why, "MemAvailable"); break;
  }
  char more[64] = "";
  if (held > 0 && (l.source == FM_MEM_ENV || l.source == FM_MEM_RLIMIT))
    snprintf(more, sizeof more, ", %s already reserved", fm_mem_format(held, cg, sizeof cg));
  return fm_fail(err, FM_ENOMEM, "%s would take about %s; this machine can give %s now (%s%s)", what,
                 need, have, why, more);
}

fm_status fm_mem_check(int64_t bytes, const char *what, fm_err *err) {
  return check_held(bytes, fm_mem_reserved(), what, err);
}

fm_status fm_mem_reserve(int64_t bytes, const char *what, fm_err *err) {
  fm_status st = check_held(bytes, fm_mem_reserved(), what, err);
  if (st == FM_OK && bytes > 0) atomic_fetch_add(&reserved_bytes, bytes);
  return st;
}
