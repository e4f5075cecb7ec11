#include "fm_status.h"

#include <stdarg.h>
#include <stdio.h>

const char *fm_status_str(fm_status s) {
  switch (s) {
  case FM_OK: return "ok";
  case FM_EINVAL: return "invalid argument";
  case FM_ENOMEM: return "out of memory or over a size limit";
  case FM_EIO: return "input/output error";
  case FM_EFORMAT: return "malformed file";
  case FM_ERANGE: return "value out of range";
  case FM_ENOTFOUND: return "not found";
  case FM_EUNSUPPORTED: return "unsupported";
  }
  return "unknown status";
}

fm_status fm_fail(fm_err *err, fm_status status, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return status;
}
