/* fm_input.h — opening a file of outside input for reading.
 *
 * Every reader of an input file (.npy arrays: dense masks, interval files,
 * trace arrays; JSON: GPU profiles, trace summaries; document samples) opens
 * it here. fmsim's readers need a regular file: they check the size a header
 * promises against the file's own before allocating (fm_limits.h), seek back
 * to the header, and some read the data twice. A FIFO, a pipe
 * (`<(command)`, /dev/stdin on a pipe), a socket or a device is therefore
 * refused at once with one line, never read:
 *
 *   "PATH: is a FIFO or pipe, not a regular file; fmsim reads its inputs from
 *    regular files (save the data to a file first)"
 *
 * "At once" includes a FIFO that no process writes to: the file is opened
 * with O_NONBLOCK, so open() returns instead of waiting for a writer, the
 * kind is checked on the open descriptor (fstat: no race with a rename), and
 * a regular file is then set back to blocking reads. Symbolic links are
 * followed; what they name is checked. A directory is refused as
 * "PATH: is a directory, not a file". This is one function of its own, kept
 * apart from fm_fileio.h's writing side.
 */
#ifndef FM_INPUT_H
#define FM_INPUT_H

#include <stdio.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens `path` for binary reading into *out (the caller fcloses it).
 * FM_EIO: it cannot be opened ("PATH: cannot open: REASON"; errno is left
 * as open() set it, for callers with their own wording); FM_EUNSUPPORTED:
 * it is not a regular file (the lines above). Allocates only the FILE. */
fm_status fm_input_open(const char *path, FILE **out, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
