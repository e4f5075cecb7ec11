/* fm_status.h — status codes shared by every fmsim module.
 *
 * Functions that can fail return an fm_status and, when the caller passes a
 * non-NULL fm_err, a one-line human message saying what, where and what was
 * expected. Core keeps no global state: the message lives in the caller's
 * fm_err.
 */
#ifndef FM_STATUS_H
#define FM_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fm_status {
  FM_OK = 0,          /* success */
  FM_EINVAL = 1,      /* an argument or parameter is out of range or inconsistent */
  FM_ENOMEM = 2,      /* an allocation failed or would exceed a size limit */
  FM_EIO = 3,         /* a file could not be opened, read or written */
  FM_EFORMAT = 4,     /* a file is malformed (bad magic, header, dtype, shape) */
  FM_ERANGE = 5,      /* a value in the data is outside its allowed range */
  FM_ENOTFOUND = 6,   /* a named thing (family, parameter, sample) does not exist */
  FM_EUNSUPPORTED = 7 /* valid input that this build or form cannot handle */
} fm_status;

/* The one-line meaning of a status code (static string, never NULL). */
const char *fm_status_str(fm_status s);

/* Error detail filled by failing functions; msg is always NUL-terminated. */
typedef struct fm_err {
  char msg[512];
} fm_err;

/* Format a message into err (no-op when err is NULL) and return status. */
fm_status fm_fail(fm_err *err, fm_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
