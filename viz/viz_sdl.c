/* viz_sdl.c — the SDL2 window: one more cairo surface for viz_draw. */
#define _POSIX_C_SOURCE 200809L
#include "viz_sdl.h"

#include <SDL.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fm_fileio.h"
#include "fm_input.h"
#include "viz_internal.h"

/* SDL event -> viz event; 0 when SDL's event means nothing to the viewer. */
static int translate(const SDL_Event *ev, const viz_state *s, viz_event *out) {
  memset(out, 0, sizeof *out);
  switch (ev->type) {
  case SDL_QUIT: out->type = VIZ_EV_QUIT; return 1;
  case SDL_TEXTINPUT: {
    const unsigned char *t = (const unsigned char *)ev->text.text;
    if (t[0] == 0 || t[1] != 0 || t[0] < 32 || t[0] > 126) return 0; /* one ASCII character */
    out->type = VIZ_EV_KEY;
    out->key = t[0];
    return 1;
  }
  case SDL_KEYDOWN:
    out->type = VIZ_EV_KEY;
    switch (ev->key.keysym.sym) {
    case SDLK_LEFT: out->key = VIZ_KEY_LEFT; return 1;
    case SDLK_RIGHT: out->key = VIZ_KEY_RIGHT; return 1;
    case SDLK_UP: out->key = VIZ_KEY_UP; return 1;
    case SDLK_DOWN: out->key = VIZ_KEY_DOWN; return 1;
    case SDLK_HOME: out->key = VIZ_KEY_HOME; return 1;
    case SDLK_ESCAPE: out->key = VIZ_KEY_ESCAPE; return 1;
    default: return 0; /* printable keys arrive as SDL_TEXTINPUT */
    }
  case SDL_MOUSEMOTION:
    out->type = VIZ_EV_MOTION;
    out->x = ev->motion.x;
    out->y = ev->motion.y;
    return 1;
  case SDL_MOUSEBUTTONDOWN:
  case SDL_MOUSEBUTTONUP:
    out->type = ev->type == SDL_MOUSEBUTTONDOWN ? VIZ_EV_BUTTON_DOWN : VIZ_EV_BUTTON_UP;
    out->x = ev->button.x;
    out->y = ev->button.y;
    out->button = ev->button.button == SDL_BUTTON_LEFT ? 1 : ev->button.button == SDL_BUTTON_RIGHT ? 3 : 2;
    return 1;
  case SDL_MOUSEWHEEL:
    out->type = VIZ_EV_WHEEL;
    out->wheel = ev->wheel.preciseY != 0 ? ev->wheel.preciseY : ev->wheel.y;
    if (ev->wheel.direction == SDL_MOUSEWHEEL_FLIPPED) out->wheel = -out->wheel;
    out->x = s->mouse_x; /* the wheel acts where the pointer last was */
    out->y = s->mouse_y;
    return 1;
  case SDL_WINDOWEVENT:
    if (ev->window.event == SDL_WINDOWEVENT_SIZE_CHANGED) {
      out->type = VIZ_EV_RESIZE;
      out->width = ev->window.data1;
      out->height = ev->window.data2;
      return 1;
    }
    if (ev->window.event == SDL_WINDOWEVENT_LEAVE) {
      out->type = VIZ_EV_LEAVE;
      return 1;
    }
    return 0;
  }
  return 0;
}

/* ---- scripted events ------------------------------------------------------- */

typedef struct script {
  FILE *f;
  const char *path;
  int line;
} script;

/* Pushes one viewer event (from a script line) as the SDL event the window
 * would get for it; a resize asks SDL to resize the window. */
static void push_event(SDL_Window *win, const viz_event *v) {
  static const struct {
    int key;
    SDL_Keycode sym;
  } named[] = {{VIZ_KEY_LEFT, SDLK_LEFT}, {VIZ_KEY_RIGHT, SDLK_RIGHT}, {VIZ_KEY_UP, SDLK_UP},
               {VIZ_KEY_DOWN, SDLK_DOWN}, {VIZ_KEY_HOME, SDLK_HOME},   {VIZ_KEY_ESCAPE, SDLK_ESCAPE}};
  SDL_Event e;
  memset(&e, 0, sizeof e);
  switch (v->type) {
  case VIZ_EV_KEY:
    e.type = SDL_TEXTINPUT;
    e.text.text[0] = (char)v->key;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
      if (v->key == named[i].key) {
        e.type = SDL_KEYDOWN;
        e.key.state = SDL_PRESSED;
        e.key.keysym.sym = named[i].sym;
      }
    break;
  case VIZ_EV_MOTION:
    e.type = SDL_MOUSEMOTION;
    e.motion.x = v->x;
    e.motion.y = v->y;
    break;
  case VIZ_EV_BUTTON_DOWN:
  case VIZ_EV_BUTTON_UP:
    e.type = v->type == VIZ_EV_BUTTON_DOWN ? SDL_MOUSEBUTTONDOWN : SDL_MOUSEBUTTONUP;
    e.button.button = SDL_BUTTON_LEFT;
    e.button.state = v->type == VIZ_EV_BUTTON_DOWN ? SDL_PRESSED : SDL_RELEASED;
    e.button.clicks = 1;
    e.button.x = v->x;
    e.button.y = v->y;
    break;
  case VIZ_EV_WHEEL:
    e.type = SDL_MOUSEWHEEL;
    e.wheel.y = (Sint32)v->wheel;
    e.wheel.direction = SDL_MOUSEWHEEL_NORMAL;
    break;
  case VIZ_EV_RESIZE: SDL_SetWindowSize(win, v->width, v->height); return;
  default: return;
  }
  SDL_PushEvent(&e);
}

/* Pushes the events of the next script line; *more = 0 at the end of the script. */
static fm_status script_step(script *sc, SDL_Window *win, int *more, fm_err *err) {
  char buf[256];
  *more = 0;
  while (fgets(buf, sizeof buf, sc->f)) {
    sc->line++;
    if (!strchr(buf, '\n') && !feof(sc->f))
      return fm_fail(err, FM_EINVAL, "%s:%d: line longer than %d characters", sc->path, sc->line,
                     (int)sizeof buf - 2);
    viz_script_cmd c;
    fm_err e2;
    if (viz_script_parse(buf, &c, &e2) != FM_OK)
      return fm_fail(err, FM_EINVAL, "%s:%d: %s", sc->path, sc->line, e2.msg);
    if (c.op == VIZ_SCRIPT_NONE) continue;
    *more = 1;
    viz_event ev[VIZ_SCRIPT_MAX_EVENTS];
    int n = viz_script_events(&c, ev);
    for (int i = 0; i < n; i++) push_event(win, &ev[i]);
    return FM_OK;
  }
  return FM_OK;
}

/* ---- the window ------------------------------------------------------------- */

typedef struct frame {
  cairo_surface_t *surface;
  int w, h;
} frame;

static int frame_fit(frame *fr, int w, int h) {
  if (fr->surface && fr->w == w && fr->h == h) return 1;
  if (fr->surface) cairo_surface_destroy(fr->surface);
  fr->surface = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, w, h);
  fr->w = w;
  fr->h = h;
  return cairo_surface_status(fr->surface) == CAIRO_STATUS_SUCCESS;
}

static void present(SDL_Window *win, frame *fr) {
  SDL_Surface *ws = SDL_GetWindowSurface(win);
  if (!ws) return;
  cairo_surface_flush(fr->surface);
  SDL_Surface *src = SDL_CreateRGBSurfaceWithFormatFrom(
      cairo_image_surface_get_data(fr->surface), fr->w, fr->h, 32,
      cairo_image_surface_get_stride(fr->surface), SDL_PIXELFORMAT_ARGB8888);
  if (src) {
    SDL_BlitSurface(src, NULL, ws, NULL);
    SDL_FreeSurface(src);
  }
  SDL_UpdateWindowSurface(win);
}

/* DIR/fmsim-view-NNN.EXT, the first name not taken. */
static void export_path(viz_state *s, const char *dir, const char *ext, char *buf, size_t cap) {
  for (;;) {
    s->exports++;
    snprintf(buf, cap, "%s/fmsim-view-%03d.%s", dir, s->exports, ext);
    if (access(buf, F_OK) != 0) return;
  }
}

static void set_title(SDL_Window *win, const viz_state *s) {
  char t[400];
  snprintf(t, sizeof t, "fmsim view \xE2\x80\x94 %s, S = %d, %d \xC3\x97 %d tiles  (? lists the keys)",
           viz_scene_label(s->scene), s->facts.sk, s->br, s->bc);
  SDL_SetWindowTitle(win, t);
}

fm_status viz_window_run(viz_state *s, const viz_window_opts *o, fm_err *err) {
  script sc = {NULL, o->script, 0};
  if (o->script) {
    fm_status ost = fm_input_open(o->script, &sc.f, err); /* a FIFO is refused, never waited on */
    if (ost != FM_OK) return ost;
  }
  /* no SDL_VIDEODRIVER (or an empty one): try only the displays the
     environment names, so that SDL neither probes Wayland without one (its
     library prints to stderr) nor falls back to a driver that shows nothing */
  const char *drv = getenv("SDL_VIDEODRIVER"), *wl = getenv("WAYLAND_DISPLAY");
  if (!drv || !*drv)
    SDL_SetHint(SDL_HINT_VIDEODRIVER, wl && *wl ? "wayland,x11" : "x11");
  if (SDL_Init(SDL_INIT_VIDEO) != 0) {
    if (sc.f) fclose(sc.f);
    return fm_fail(err, FM_EUNSUPPORTED, "no display available (SDL: %s); draw into a file with "
                   "'fmsim render ... -o FILE.png' instead", SDL_GetError());
  }
  /* drivers that show nothing: without a script the window would wait forever */
  const char *cur = SDL_GetCurrentVideoDriver();
  if (!o->script && cur && (!strcmp(cur, "dummy") || !strcmp(cur, "offscreen") || !strcmp(cur, "evdev"))) {
    SDL_Quit();
    return fm_fail(err, FM_EUNSUPPORTED, "no display available (SDL video driver '%s' shows no "
                   "window); draw into a file with 'fmsim render ... -o FILE.png' instead", cur);
  }
  /* where the window manager wants it (top-left without one, e.g. under Xvfb) */
  SDL_Window *win = SDL_CreateWindow("fmsim view", SDL_WINDOWPOS_UNDEFINED, SDL_WINDOWPOS_UNDEFINED,
                                     s->width, s->height, SDL_WINDOW_RESIZABLE | SDL_WINDOW_SHOWN);
  if (!win) {
    fm_status st = fm_fail(err, FM_EUNSUPPORTED, "no display available (SDL: %s); draw into a file "
                           "with 'fmsim render ... -o FILE.png' instead", SDL_GetError());
    SDL_Quit();
    if (sc.f) fclose(sc.f);
    return st;
  }
  SDL_StartTextInput();
  SDL_GetWindowSize(win, &s->width, &s->height);
  frame fr = {NULL, 0, 0};
  fm_status st = FM_OK;
  int running = 1, dirty = 1, script_more = sc.f != NULL;
  const char *dir = o->out_dir ? o->out_dir : ".";
  set_title(win, s);
  while (running && st == FM_OK) {
    unsigned act = 0;
    SDL_Event ev;
    int got = script_more ? SDL_PollEvent(&ev) : SDL_WaitEventTimeout(&ev, 100);
    while (got) {
      viz_event ve;
      if (translate(&ev, s, &ve)) act |= viz_handle_event(s, &ve);
      if (ev.type == SDL_WINDOWEVENT && ev.window.event == SDL_WINDOWEVENT_EXPOSED) dirty = 1;
      /* files and rebuilds see the state of this very event: handle them first */
      if (act & (VIZ_DO_SCREENSHOT | VIZ_DO_EXPORT_PDF | VIZ_DO_EXPORT_SVG | VIZ_DO_SYNC | VIZ_DO_QUIT))
        break;
      got = SDL_PollEvent(&ev);
    }
    if (act & VIZ_DO_QUIT) break;
    if (act & VIZ_DO_SYNC) {
      fm_err e2;
      viz_scene_sync(s->scene, s, &e2); /* a failure is shown in the status line */
      set_title(win, s);
    }
    if (act & (VIZ_DO_REDRAW | VIZ_DO_SYNC)) dirty = 1;
    if (dirty) {
      if (!frame_fit(&fr, s->width, s->height)) {
        st = fm_fail(err, FM_ENOMEM, "cannot allocate a %dx%d frame", s->width, s->height);
        break;
      }
      cairo_t *cr = cairo_create(fr.surface);
      viz_draw(cr, s, s->width, s->height);
      cairo_destroy(cr);
      present(win, &fr);
      dirty = 0;
    }
    char path[4200];
    if (act & VIZ_DO_SCREENSHOT) {
      fm_err e2;
      export_path(s, dir, "png", path, sizeof path);
      if (viz_write_png_surface(path, fr.surface, &e2) == FM_OK)
        snprintf(s->status, sizeof s->status, "saved %.400s", path);
      else
        snprintf(s->status, sizeof s->status, "%s", e2.msg);
      fprintf(stderr, "fmsim view: %s\n", s->status);
      dirty = 1;
    }
    if (act & (VIZ_DO_EXPORT_PDF | VIZ_DO_EXPORT_SVG)) {
      int pdf = (act & VIZ_DO_EXPORT_PDF) != 0;
      viz_state copy = *s;
      copy.mouse_in = 0; /* exports show the view, not the pointer or the key list */
      copy.show_help = 0;
      copy.status[0] = 0;
      fm_err e2;
      export_path(s, dir, pdf ? "pdf" : "svg", path, sizeof path);
      if (viz_write_figure_ex(path, FM_OUT_NOFOLLOW, pdf ? VIZ_FMT_PDF : VIZ_FMT_SVG, s->width,
                              s->height, o->export_dpi > 0 ? o->export_dpi : 300, viz_draw_state_fn,
                              &copy, &e2) == FM_OK)
        snprintf(s->status, sizeof s->status, "saved %.400s", path);
      else
        snprintf(s->status, sizeof s->status, "%s", e2.msg);
      fprintf(stderr, "fmsim view: %s\n", s->status);
      dirty = 1;
    }
    if (script_more && !dirty) {
      /* every event of the previous line is handled and drawn: next line */
      SDL_PumpEvents();
      if (!SDL_HasEvents(SDL_FIRSTEVENT, SDL_LASTEVENT)) {
        st = script_step(&sc, win, &script_more, err);
        if (!script_more) running = 0;
      }
    }
  }
  if (sc.f) fclose(sc.f);
  if (fr.surface) cairo_surface_destroy(fr.surface);
  SDL_DestroyWindow(win);
  SDL_Quit();
  return st;
}
