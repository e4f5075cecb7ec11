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

/* Opens the window and runs until quit. FM_EUNSUPPORTED when no display can
 * be opened (the message says so); FM_EINVAL for a bad script line. */
fm_status viz_window_run(viz_state *s, const viz_window_opts *o, fm_err *err);

#ifdef __cplusplus
}
#endif
#endif
