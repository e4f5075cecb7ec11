/* fm_sizes.h — sizeof of the public structs, by name, for bindings that
 * mirror them (python/fmsim/_native.py checks every mirror against it at
 * import, so a header change that is not mirrored fails with one line
 * instead of reading garbage; python/README.md).
 *
 * The names are the structs' typedef names: "fm_err" (fm_status.h),
 * "fm_dense_opts", "fm_dense_column", "fm_dense_set", "fm_dense_advice",
 * "fm_dense_tiles", "fm_dense_report" (fm_dense.h), "fm_tile_counts"
 * (fm_tiles.h), "fm_mask_bytes" (fm_memory.h), "fm_family_request",
 * "fm_family_used" (fm_families.h). A struct added to a binding gets its
 * row in fm_sizes.c.
 */
#ifndef FM_SIZES_H
#define FM_SIZES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* sizeof the struct named `name` (above), in bytes; 0 for NULL or a name
 * this library does not know (a binding newer than the library). */
size_t fm_struct_size(const char *name);

/* The i-th name this library knows (0-based), NULL past the last: for a
 * binding's message or a test that every name answers. */
const char *fm_struct_name(int i);

#ifdef __cplusplus
}
#endif
#endif
