/* fm_sizes.c — sizeof of the public structs by name (fm_sizes.h). */
#include "fm_sizes.h"

#include <string.h>

#include "fm_dense.h"
#include "fm_families.h"
#include "fm_memory.h"
#include "fm_status.h"
#include "fm_tiles.h"

#define ROW(T) {#T, sizeof(T)}

static const struct {
  const char *name;
  size_t size;
} structs[] = {
    ROW(fm_err),          ROW(fm_dense_opts),     ROW(fm_dense_column), ROW(fm_dense_set),
    ROW(fm_dense_advice), ROW(fm_dense_tiles),    ROW(fm_dense_report), ROW(fm_tile_counts),
    ROW(fm_mask_bytes),   ROW(fm_family_request), ROW(fm_family_used),
};

#define NSTRUCTS ((int)(sizeof structs / sizeof structs[0]))

size_t fm_struct_size(const char *name) {
  if (!name) return 0;
  for (int i = 0; i < NSTRUCTS; i++)
    if (!strcmp(structs[i].name, name)) return structs[i].size;
  return 0;
}

const char *fm_struct_name(int i) { return i >= 0 && i < NSTRUCTS ? structs[i].name : NULL; }
