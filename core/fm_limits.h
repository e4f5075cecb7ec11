/* fm_limits.h — what this machine can hold, asked before a large allocation.
 *
 * Every size that comes from outside (a count in a file, a sequence length on
 * the command line, a scenario's case list) is turned into a byte estimate and
 * checked here *before* the memory is taken, so that an implausible input is
 * refused with one line that gives the estimate and the limit, instead of the
 * process being killed by the kernel's OOM killer with no message.
 *
 * The limit is the smallest of:
 *   - MemAvailable from /proc/meminfo (what the kernel can give without
 *     swapping);
 *   - the cgroup memory limit minus the cgroup's current usage, when a limit is
 *     set: cgroup v2 (memory.max / memory.current of this process's cgroup and
 *     its ancestors) or v1 (memory.limit_in_bytes / memory.usage_in_bytes);
 *   - RLIMIT_AS and RLIMIT_DATA, when set (ulimit -v / -d);
 *   - FMSIM_MEM_LIMIT, when set in the environment: a byte count with an
 *     optional K, M, G or T suffix (powers of 1024). It stands for a smaller
 *     machine in tests and lets a user reserve memory for other work.
 * The first three are taken at four fifths: a fifth stays for the rest of
 * the machine (other processes, the page cache, the allocator's overhead and
 * the allocations no estimate names); FMSIM_MEM_LIMIT is taken as it is.
 * Where none of these can be read (not Linux, /proc not mounted), the limit
 * is unknown and only the environment variable applies.
 *
 * The figures are read fresh on every call that needs them (a few small files
 * in /proc and /sys: tens of microseconds); nothing is cached. Requests up to
 * FM_MEM_SMALL are granted without reading them (only FMSIM_MEM_LIMIT and
 * what is already reserved can refuse those), so that checking every
 * allocation that depends on input costs nothing for the small ones.
 *
 * The limit is a total, not a per-allocation cap. fmsim keeps a running
 * budget: fm_mem_reserve adds a request to it once the check passed, and
 * fm_mem_release takes it back when the memory is freed. A check compares
 *   - reserved + bytes with the limits that bound the whole process
 *     (FMSIM_MEM_LIMIT, RLIMIT_AS / RLIMIT_DATA), and
 *   - bytes alone with MemAvailable and the cgroup's room, which are already
 *     net of what this process holds.
 * Who reserves: the owners of large buffers whose size comes from input keep
 * them reserved for their lifetime and release them in their _destroy (the
 * interval vectors of fm_colmask, the dense scanner's state and read buffer,
 * the dense result's kept runs and tiles, the viewer's scene); a buffer that
 * is handed to a caller who frees it with free() (fm_npy_load, the document
 * samples) is checked against the total but not kept in it.
 *
 * Global state (docs/DESIGN.md, Style rule 3): the running budget is the one
 * piece of global state in core besides what the C library keeps. It has to
 * be: the limit it is compared with (FMSIM_MEM_LIMIT, ulimit) is a property
 * of the process, not of any handle, and threading a budget handle through
 * every reader's signature would change the whole public API for one
 * counter. It is a C11 atomic (threads see one total), it only moves through
 * fm_mem_reserve / fm_mem_release pairs, and fm_mem_reserved reads it (tests).
 *
 * A malformed FMSIM_MEM_LIMIT ("2X", "-1", "", "lots") is an error, never
 * ignored: fm_mem_env_check gives the one line, every fm_mem_check and
 * fm_mem_reserve fails with it (FM_EINVAL), and `fmsim` checks it before any
 * command runs (one line on stderr, exit 2). Set-but-empty counts as
 * malformed; unset means no such limit.
 *
 * Usage, before an allocation whose size depends on input:
 *
 *     int64_t bytes = fm_mem_mul(sk, 16);          // saturates at INT64_MAX
 *     if (fm_mem_check(bytes, "the column runs of S = 536870912", err) != FM_OK)
 *       return FM_ENOMEM;                           // err->msg is the line to print
 *
 * The message reads, e.g.:
 *   "the column runs of S = 536870912 would take about 21.4 GiB; this machine
 *    can give 3.9 GiB now (cgroup limit 4.0 GiB)"
 * Callers print it as is (one line) or prefix it with the file or command.
 */
#ifndef FM_LIMITS_H
#define FM_LIMITS_H

#include <stdint.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FM_MEM_SMALL ((int64_t)1 << 20) /* 1 MiB */

/* Where the limit comes from (the smallest one wins). */
typedef enum fm_mem_source {
  FM_MEM_UNKNOWN = 0,  /* nothing could be read: no limit */
  FM_MEM_AVAILABLE,    /* /proc/meminfo MemAvailable */
  FM_MEM_CGROUP,       /* cgroup v2 or v1 limit minus usage */
  FM_MEM_RLIMIT,       /* RLIMIT_AS or RLIMIT_DATA */
  FM_MEM_ENV           /* FMSIM_MEM_LIMIT */
} fm_mem_source;

typedef struct fm_mem_limit {
  int64_t bytes;        /* what may be allocated now (4/5 of the figure read,
                           FMSIM_MEM_LIMIT as is; the totals less what is
                           reserved); INT64_MAX when unknown */
  fm_mem_source source; /* which of the limits above gave `bytes` */
  int64_t cgroup_max;   /* the cgroup's limit, 0 when none is set */
} fm_mem_limit;

/* Reads the current limit (never fails; unknown parts are left out, and so
 * is a malformed FMSIM_MEM_LIMIT: fm_mem_env_check reports that). */
void fm_mem_limit_get(fm_mem_limit *out);

/* FM_OK when FMSIM_MEM_LIMIT is unset or a size fm_mem_parse reads; else
 * FM_EINVAL with the one line "FMSIM_MEM_LIMIT=VALUE: not a size (expected
 * a byte count with an optional K, M, G or T suffix, e.g. 4G)". */
fm_status fm_mem_env_check(fm_err *err);

/* FM_OK when `bytes` more fit the current limit, counting what is reserved
 * (see above); else FM_ENOMEM with the message
 * "WHAT would take about X; this machine can give Y now (SOURCE)" in err
 * (Y: the limit less what is reserved, where the limit is a total).
 * `what` names the allocation for the user ("the column runs of S = ...");
 * bytes < 0 (an overflowed estimate) is refused as "more than 8 EiB".
 * FM_EINVAL when FMSIM_MEM_LIMIT is malformed. Reserves nothing: for a
 * buffer freed before the next check, or handed to a caller. */
fm_status fm_mem_check(int64_t bytes, const char *what, fm_err *err);

/* fm_mem_check, and on FM_OK `bytes` are added to the running budget; the
 * caller gives them back with fm_mem_release(bytes) when it frees them. */
fm_status fm_mem_reserve(int64_t bytes, const char *what, fm_err *err);

/* Takes `bytes` out of the running budget (never below 0; <= 0: nothing). */
void fm_mem_release(int64_t bytes);

/* The bytes reserved now (the running budget). */
int64_t fm_mem_reserved(void);

/* Saturating arithmetic for estimates: INT64_MAX on overflow (or when an
 * operand is negative), so that a checked estimate can never wrap around. */
int64_t fm_mem_mul(int64_t a, int64_t b);
int64_t fm_mem_add(int64_t a, int64_t b);

/* "21.4 GiB"-style text of a byte count into buf (returns buf). */
const char *fm_mem_format(int64_t bytes, char *buf, int cap);

/* Parses "4G", "512M", "123456" (K/M/G/T: powers of 1024) into bytes; 0 on
 * success, -1 when the text is not such a size. */
int fm_mem_parse(const char *text, int64_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
