/* viz_sdl.h — the interactive window of `fmsim view` (SDL2): SDL events are
 * translated into viz_events, handled by viz_handle_event, and each frame is
 * viz_draw into a cairo image surface blitted to the window. */
#ifndef VIZ_SDL_H
#define VIZ_SDL_H

#include "viz.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct viz_window_opts {
  const char *out_dir; /* screenshots and exports: DIR/fmsim-view-NNN.{png,pdf,svg} */
  const char *script;  /* NULL, or a file of events pushed into SDL's queue one line
                        * per frame, then quit (tests, demos):
                        *   key CHAR | key left|right|up|down|home|escape
                        *   motion X Y | down X Y | up X Y | drag X0 Y0 X1 Y1
                        *   wheel N [X Y] | resize W H | # comment */
  double export_dpi;   /* raster resolution inside PDF/SVG exports */
} viz_window_opts;

/* ---- script lines (parsed without SDL: viz_state.c; tests and fuzz/ use it) ---- */

#define VIZ_SCRIPT_MAX_COORD (1 << 20) /* |x|, |y| of script coordinates, pixels */
#define VIZ_SCRIPT_MAX_WHEEL 1000      /* |notches| of one wheel line */
#define VIZ_SCRIPT_MAX_EVENTS 7        /* events of one line at most (a drag) */

typedef enum viz_script_op {
  VIZ_SCRIPT_NONE = 0, /* blank line or # comment */
  VIZ_SCRIPT_KEY,      /* key CHAR | key left|right|up|down|home|escape */
  VIZ_SCRIPT_MOTION,   /* motion X Y */
  VIZ_SCRIPT_DOWN,     /* down X Y (left button) */
  VIZ_SCRIPT_UP,       /* up X Y */
  VIZ_SCRIPT_DRAG,     /* drag X0 Y0 X1 Y1: motion, down, 4 motions, up */
  VIZ_SCRIPT_WHEEL,    /* wheel N [X Y] */
  VIZ_SCRIPT_RESIZE    /* resize W H, 1..16384 */
} viz_script_op;

typedef struct viz_script_cmd {
  viz_script_op op;
  int key;   /* KEY: printable ASCII, or VIZ_KEY_* for the named keys */
  int nargs; /* numbers given */
  int a[4];  /* coordinates within +-VIZ_SCRIPT_MAX_COORD, wheel notches, W H */
} viz_script_cmd;

/* Parses one script line (with or without its newline). FM_EINVAL with a
 * message (without file:line, which the caller adds) for anything else:
 * unknown words, missing or extra numbers, numbers out of range. */
fm_status viz_script_parse(const char *line, viz_script_cmd *out, fm_err *err);

/* The viewer events a parsed line stands for, in order (at most
 * VIZ_SCRIPT_MAX_EVENTS; RESIZE gives one VIZ_EV_RESIZE); returns the count. */
int viz_script_events(const viz_script_cmd *c, viz_event *ev);

/* Opens the window and runs until quit. FM_EUNSUPPORTED when no display can
 * be opened (the message says so); FM_EINVAL for a bad script line. */
fm_status viz_window_run(viz_state *s, const viz_window_opts *o, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
