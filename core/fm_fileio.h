/* fm_fileio.h — safe file output: the one place where fmsim writes files.
 *
 * Every command that writes (convert, expand, analyze --out, run, bench,
 * render, the viewer's screenshots) goes through fm_atomic_open /
 * fm_atomic_write / fm_atomic_close, directly or through fm_npy's writer and
 * fm_trace's folder writer. The rules they enforce:
 *
 * 1. What may be replaced. A target is written only when it is a new path or
 *    an existing regular file. A directory, a character or block device
 *    (/dev/null, /dev/full), a FIFO or a socket is refused before anything is
 *    written, with FM_EINVAL and one line ("PATH: is a character device, not a
 *    regular file; refusing to replace it"); commands exit 2 on it. (Renaming a
 *    regular file over /dev/null would replace the device node for the whole
 *    machine when run as root.)
 * 2. Atomic replacement. The data go to a temporary file NAME.tmp.PID.XXXXXX in
 *    the target's own directory (same file system, so rename is atomic); on
 *    commit it is flushed, closed and renamed onto the target. fsync policy:
 *    not by default. Other processes see the old file or the whole new one
 *    whatever happens to fmsim; only a power failure or kernel crash within
 *    seconds of the rename could leave an empty file on a file system that
 *    does not order data before a replacing rename (ext4 does, with its
 *    default auto_da_alloc; so do xfs and btrfs). A sync costs 50-150 ms per
 *    file on the network disks measured here, times the dozens of files of a
 *    scenario run; FMSIM_FSYNC=1 in the environment syncs every file before
 *    its rename where that guarantee is wanted. An existing target keeps its permission bits; a new one gets
 *    0666 less the umask. On any failure the temporary is removed and the
 *    target is left exactly as it was.
 * 3. Every fwrite, the flush, the fsync (when on) and the close are checked; the first
 *    failure is reported with strerror ("No space left on device").
 * 4. Symbolic links. A path the user named (-o FILE, the default, flags 0)
 *    whose last component is a symbolic link is followed: the link stays and
 *    the file it points to (which must itself be a regular file) is replaced,
 *    with the temporary in *that* file's directory. A dangling link is
 *    refused. Names fmsim makes up itself inside a folder (trace members via
 *    fm_trace; any other writer of made-up names passes FM_OUT_NOFOLLOW: a
 *    scenario run's index, run.json, report, tables, figures, and its cases'
 *    gpu.json and row.tsv; bench's table.txt; the viewer's screenshots and
 *    exports) never follow a link: a symbolic link found there is refused, so a planted link
 *    cannot redirect a write to a file the user never named. (The viewer's
 *    numbered screenshots skip every name that exists, links included.) Links
 *    in the directory part of a path are the user's business and are followed
 *    as the kernel does.
 * 5. Standard output. With FM_OUT_STDOUT the path "-" writes to stdout
 *    (streams only: no temporary, no rename, but every write and the final
 *    flush are still checked, so `> /dev/full` fails with "No space left on
 *    device"). Without the flag "-" is an ordinary file name.
 * 6. Interruption. Temporary files (and the staging folders of fm_trace) are
 *    registered in a small process-wide table that a handler of SIGINT,
 *    SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ (a file size limit), SIGXCPU, SIGPIPE
 *    and SIGALRM empties (removes) before the process dies of the signal; the
 *    handler is installed on first use only for signals whose disposition is
 *    still the default. A program that installs its own handler for these
 *    signals calls fm_cleanup_now() from it (it is async-signal-safe).
 *    SIGKILL cannot be caught: the next fm_atomic_open of the same target
 *    (and the next fm_trace_begin of the same folder) sweeps temporaries whose
 *    writer process no longer exists (the PID in the name; same user only).
 *    This table is the one piece of global state in core: a signal handler can
 *    reach nothing else. Register and unregister from one thread.
 * 7. Output folders. A command that writes a folder (analyze --out, run
 *    --out, a scenario's output) takes fm_outdir_lock before any work: one
 *    writer per folder (a second is refused at once, not mixed in), and a
 *    folder holding a planted symbolic link is refused before anything is
 *    computed or written, not after.
 */
#ifndef FM_FILEIO_H
#define FM_FILEIO_H

#include <stdio.h>

#include "fm_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Flags of fm_atomic_open_ex. */
enum {
  FM_OUT_STDOUT = 1u << 0,   /* "-" means standard output */
  FM_OUT_NOFOLLOW = 1u << 1  /* a name fmsim chose: refuse a symbolic link */
};

typedef struct fm_atomic_file {
  FILE *f;             /* write here (or through fm_atomic_write) */
  char path[4096];     /* final path (the link's target when a link was followed) */
  char tmp_path[4160]; /* path.tmp.PID.XXXXXX while open; "" for stdout */
  int to_stdout;       /* 1: f is stdout, nothing to rename */
  int slot;            /* cleanup table slot, -1 when not registered */
} fm_atomic_file;

/* Checks the target (rules 1 and 4) and opens a temporary beside it.
 * FM_EINVAL: the target may not be replaced (message says why);
 * FM_EIO: the temporary cannot be created (no folder, no permission). */
fm_status fm_atomic_open_ex(fm_atomic_file *af, const char *path, unsigned flags, fm_err *err);
/* fm_atomic_open_ex with flags 0 (a path the user named, no stdout). */
fm_status fm_atomic_open(fm_atomic_file *af, const char *path, fm_err *err);
fm_status fm_atomic_write(fm_atomic_file *af, const void *data, size_t n, fm_err *err);
/* commit = 1: flush (fsync with FMSIM_FSYNC=1), close and rename onto path;
 * 0: close and remove.
 * Safe to call on a file that failed to open or is already closed. */
fm_status fm_atomic_close(fm_atomic_file *af, int commit, fm_err *err);

/* Writes a whole buffer atomically (flags as fm_atomic_open_ex; FM_OUT_NOFOLLOW
 * for a name fmsim chose inside a folder, rule 4). */
fm_status fm_write_file_atomic_ex(const char *path, const char *text, size_t n, unsigned flags,
                                  fm_err *err);
/* fm_write_file_atomic_ex with flags 0 (a path the user named). */
fm_status fm_write_file_atomic(const char *path, const char *text, size_t n, fm_err *err);

/* FM_OK when `path` may be written under rule 1 (new, or a regular file,
 * following a last-component link unless FM_OUT_NOFOLLOW; "-" with
 * FM_OUT_STDOUT); else FM_EINVAL with the one-line reason. Nothing is created. */
fm_status fm_output_check(const char *path, unsigned flags, fm_err *err);

/* Creates a directory (and missing parents); an existing directory is fine. */
fm_status fm_mkdir_p(const char *path, fm_err *err);

/* ---- cleanup on interruption (rule 6) ------------------------------------ */

typedef enum fm_cleanup_kind {
  FM_CLEANUP_FILE = 1, /* unlink */
  FM_CLEANUP_TREE = 2, /* unlink the plain entries of the folder, then rmdir (one level) */
  FM_CLEANUP_EMPTY_DIR = 3 /* rmdir when empty (a folder the run created) */
} fm_cleanup_kind;

/* Registers a path to remove if the process is interrupted; returns the slot
 * (>= 0), or -1 when the table (32 slots) is full or the path too long (the
 * path is then simply not cleaned on a signal). */
int fm_cleanup_add(const char *path, fm_cleanup_kind kind);
/* Forgets a slot (the path was committed or removed); -1 is a no-op. */
void fm_cleanup_forget(int slot);
/* Removes every registered path now: files, then trees, then empty folders.
 * Async-signal-safe (unlink, rmdir, open, getdents64, close only). */
void fm_cleanup_now(void);

/* mkdtemp(tmpl) registered as FM_CLEANUP_TREE with the signals blocked in
 * between (no window where an interruption leaves it behind); *slot receives
 * the slot. Returns tmpl, or NULL with errno set. */
char *fm_mkdtemp_registered(char *tmpl, int *slot);

/* ---- output folders (rule 7) ---------------------------------------------- */

typedef struct fm_outdir_lock {
  int held;         /* 1 between a successful take and its release */
  int fd;           /* the lock file, open and flock'ed */
  int slot;         /* its cleanup slot (FM_CLEANUP_FILE), -1: none */
  int dir_slot;     /* the folder's (FM_CLEANUP_EMPTY_DIR) when the lock created it */
  int created_dir;  /* the folder did not exist: release removes it when empty */
  char dir[4096];
  char top[4096];   /* the shallowest folder take created (dir or a parent), "" : none */
  char path[4200];  /* DIR/.fmsim.lock */
} fm_outdir_lock;

/* Creates DIR (and parents) when missing, then takes DIR/.fmsim.lock: created
 * without following a link (O_NOFOLLOW), held with flock(LOCK_EX) so that the
 * kernel releases it on any exit, SIGKILL included, re-checked to be the file
 * still at that path (a lock on a file another writer just removed does not
 * count), and registered for removal on the signals of rule 6. Then scans the
 * folder `depth` levels deep (1: its entries; 3: a scenario's cases/ID/FILE)
 * and refuses any symbolic link among the entries (a name fmsim will write
 * there could be redirected; the folder path itself may be a link: the
 * user's business, rule 4).
 * FM_EINVAL: another process holds the lock ("DIR: another fmsim run is
 * writing this folder"), DIR exists and is not a directory, or a planted link
 * (named); FM_EIO: the folder or the lock file cannot be created. On failure
 * nothing is left: no lock file, no folder it created. */
fm_status fm_outdir_lock_take(fm_outdir_lock *l, const char *dir, int depth, fm_err *err);
/* Removes the lock file and releases the lock; removes the folder, and the
 * parents take created for it, where they are empty. Does nothing unless held (a zeroed
 * struct, a failed take, a second release). */
void fm_outdir_lock_release(fm_outdir_lock *l);

/* Removes leftovers of killed writers: in `dir`, entries named
 * PREFIX<pid>.<6 chars> whose <pid> is not a live process, owned by this
 * user; plain files, or (trees = 1) folders of plain files. Returns how many
 * were removed. fm_atomic_open and fm_trace_begin call it; exposed for tests. */
int fm_sweep_stale(const char *dir, const char *prefix, int trees);

#ifdef __cplusplus
}
#endif
#endif
