/* fuzz_trace — trace folders as the viewer reads them (viz_load.c):
 * summary.json, tiles.npy, tiles_exact.npy, columns.npy, tile_cycles.npy.
 * The input holds the files in that order, separated by "\n#FILE#\n"; a file
 * past the last separator is absent. They are written into one private
 * folder (under /dev/shm when it exists) that every run reuses. */
#define _GNU_SOURCE
#include "fuzz_util.h"

#include <sys/stat.h>

#include "viz_internal.h"

static char dir[256];
static const char *names[] = {"summary.json", "tiles.npy", "tiles_exact.npy", "columns.npy",
                              "tile_cycles.npy"};
#define NFILES ((int)(sizeof names / sizeof names[0]))

static void cleanup(void) {
  char p[400];
  for (int i = 0; i < NFILES; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_init_env();
  struct stat sb;
  snprintf(dir, sizeof dir, "%s/fmsim-fuzz-trace.XXXXXX",
           stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : "/tmp");
  if (!mkdtemp(dir)) abort();
  atexit(cleanup);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char sep[] = "\n#FILE#\n";
  const size_t seplen = sizeof sep - 1;
  size_t start = 0;
  char p[400];
  for (int i = 0; i < NFILES; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
    if (start > size) continue;
    const uint8_t *hit = memmem(data + start, size - start, sep, seplen);
    size_t end = hit ? (size_t)(hit - data) : size;
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (end > start && fwrite(data + start, 1, end - start, f) != end - start) abort();
    fclose(f);
    start = hit ? end + seplen : size + 1;
  }
  viz_source src;
  viz_source_opts o = {.strict = 1};
  fm_err err;
  viz_load_source(dir, &o, &src, &err);
  viz_source_free(&src);
  return 0;
}
