/* run_stop.h — Ctrl-C (SIGINT) and SIGTERM during a run of the scenario
 * runner: the run stops within a second, keeps the cases it finished and
 * removes what the interrupted case had begun to write.
 *
 * Between run_stop_begin and run_stop_end the two signals are blocked in the
 * calling thread (and in every thread it starts, CUDA's included) and taken
 * by a watcher thread. On a signal, run_stop_requested() turns non-zero: the
 * runner checks it between cases and between the steps of a case, cleans up
 * and returns. A step that runs longer (a large classification, a kernel
 * run) is cut: after a grace period the watcher freezes the runner's thread,
 * removes the current case's staging folder and temporary files (and the
 * case's folder when it was not finished), prints the message set by
 * run_stop_message and exits with 128 + the signal.
 */
#ifndef FM_RUN_STOP_H
#define FM_RUN_STOP_H

/* Grace period before a running step is cut, milliseconds. */
#define RUN_STOP_GRACE_MS 400

int run_stop_begin(void); /* 0, or -1 when the watcher cannot start (signals then as before) */
void run_stop_end(void);
int run_stop_requested(void); /* the signal asked to stop with, 0 when none */

/* The folder the current case writes; unfinished: remove it (and its
 * contents) when cut, else only its staging folder and temporary files. */
void run_stop_case(const char *dir, int unfinished);
/* The line printed when the watcher cuts the run (formatted here, printed
 * there without touching stdio). */
void run_stop_message(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Prints the message (once, whoever stops the run first). */
void run_stop_say(void);

/* Removes dir's staging folders (.staging.*) and temporary files (*.tmp.*),
 * and dir itself with its files when unfinished. Async-safe: no stdio, no
 * allocation. Also used to sweep what a killed run left behind. */
void run_stop_sweep(const char *dir, int unfinished);

#endif
