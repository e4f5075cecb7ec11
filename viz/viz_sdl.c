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

static void push_mouse(int type, int x, int y) {
  SDL_Event e;
  memset(&e, 0, sizeof e);
  e.type = (Uint32)type;
  if (type == SDL_MOUSEMOTION) {
    e.motion.x = x;
    e.motion.y = y;
  } else {
    e.button.button = SDL_BUTTON_LEFT;
    e.button.state = type == SDL_MOUSEBUTTONDOWN ? SDL_PRESSED : SDL_RELEASED;
    e.button.clicks = 1;
    e.button.x = x;
    e.button.y = y;
  }
  SDL_PushEvent(&e);
}

/* Pushes the events of the next script line; 0 at the end of the script. */
static fm_status script_step(script *sc, SDL_Window *win, int *more, fm_err *err) {
  char buf[256];
  *more = 0;
  while (fgets(buf, sizeof buf, sc->f)) {
    sc->line++;
    char *p = buf;
    while (isspace((unsigned char)*p)) p++;
    if (*p == 0 || *p == '#') continue;
    char word[32], arg[32];
    int a[4], n;
    *more = 1;
    if (sscanf(p, "key %31s", arg) == 1) {
      SDL_Event e;
      memset(&e, 0, sizeof e);
      static const struct {
        const char *name;
        SDL_Keycode sym;
      } named[] = {{"left", SDLK_LEFT}, {"right", SDLK_RIGHT}, {"up", SDLK_UP}, {"down", SDLK_DOWN},
                   {"home", SDLK_HOME}, {"escape", SDLK_ESCAPE}};
      for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(arg, named[i].name)) {
          e.type = SDL_KEYDOWN;
          e.key.state = SDL_PRESSED;
          e.key.keysym.sym = named[i].sym;
        }
      if (!e.type) {
        if (strlen(arg) != 1) return fm_fail(err, FM_EINVAL, "%s:%d: key '%s' is not one character or a named key", sc->path, sc->line, arg);
        e.type = SDL_TEXTINPUT;
        e.text.text[0] = arg[0];
      }
      SDL_PushEvent(&e);
    } else if ((n = sscanf(p, "%31s %d %d %d %d", word, &a[0], &a[1], &a[2], &a[3])) >= 1) {
      if (!strcmp(word, "motion") && n == 3) push_mouse(SDL_MOUSEMOTION, a[0], a[1]);
      else if (!strcmp(word, "down") && n == 3) push_mouse(SDL_MOUSEBUTTONDOWN, a[0], a[1]);
      else if (!strcmp(word, "up") && n == 3) push_mouse(SDL_MOUSEBUTTONUP, a[0], a[1]);
      else if (!strcmp(word, "drag") && n == 5) {
        push_mouse(SDL_MOUSEMOTION, a[0], a[1]);
        push_mouse(SDL_MOUSEBUTTONDOWN, a[0], a[1]);
        for (int k = 1; k <= 4; k++)
          push_mouse(SDL_MOUSEMOTION, a[0] + (a[2] - a[0]) * k / 4, a[1] + (a[3] - a[1]) * k / 4);
        push_mouse(SDL_MOUSEBUTTONUP, a[2], a[3]);
      } else if (!strcmp(word, "wheel") && (n == 2 || n == 4)) {
        if (n == 4) push_mouse(SDL_MOUSEMOTION, a[1], a[2]);
        SDL_Event e;
        memset(&e, 0, sizeof e);
        e.type = SDL_MOUSEWHEEL;
        e.wheel.y = a[0];
        e.wheel.direction = SDL_MOUSEWHEEL_NORMAL;
        SDL_PushEvent(&e);
      } else if (!strcmp(word, "resize") && n == 3) {
        SDL_SetWindowSize(win, a[0], a[1]);
      } else {
        return fm_fail(err, FM_EINVAL, "%s:%d: cannot read '%.60s' (see fmsim view --help)", sc->path,
                       sc->line, p);
      }
    }
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
    sc.f = fopen(o->script, "r");
    if (!sc.f) return fm_fail(err, FM_EIO, "%s: cannot open: %s", o->script, strerror(errno));
  }
  if (SDL_Init(SDL_INIT_VIDEO) != 0) {
    if (sc.f) fclose(sc.f);
    return fm_fail(err, FM_EUNSUPPORTED, "no display available (SDL: %s); draw into a file with "
                   "'fmsim render ... -o FILE.png' instead", SDL_GetError());
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
      if (viz_write_figure(path, pdf ? VIZ_FMT_PDF : VIZ_FMT_SVG, s->width, s->height,
                           o->export_dpi > 0 ? o->export_dpi : 300, viz_draw_state_fn, &copy,
                           &e2) == FM_OK)
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
