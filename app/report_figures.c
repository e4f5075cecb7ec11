/* report_figures.c — a scenario's figures (report_figures.h): each name of its
 * figures: key is a row of the figure registry (viz/viz_figures.c), drawn as
 * PNG under OUT/figures at the registry's size; a per-case figure is drawn
 * once per case trace (the first 16: a report, not an archive); the gallery
 * draws the scenario's own masks, each from the trace of its first case. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fm_fileio.h"
#include "report_figures.h"
#ifdef FM_HAVE_VIZ
#include "viz.h"
#endif

#define MAX_CASE_FIGURES 16

int report_figures_check(runner_ctx *rc) {
#ifdef FM_HAVE_VIZ
  const fm_scenario *s = rc->s;
  for (int i = 0; i < s->nfigures; i++)
    if (!viz_figure_find(s->figures[i])) {
      char names[200];
      cli_error(rc->o->cmd, "%sunknown figure '%s' (expected %s)",
                runner_where(rc, s->figures_line, "figures"), s->figures[i],
                viz_figure_names(names, sizeof names));
      return -1;
    }
#else
  (void)rc;
#endif
  return 0;
}

#ifdef FM_HAVE_VIZ
static int draw_one(runner_ctx *rc, const viz_figure *fig, const viz_figure_opts *opts,
                    const char *file, char names[][80], int *nnames) {
  char path[4500];
  fm_err err;
  snprintf(path, sizeof path, "%s/figures/%s", rc->o->out, file);
  if (viz_write_figure_ex(path, FM_OUT_NOFOLLOW, VIZ_FMT_PNG, fig->width, fig->height, 72, fig->draw,
                          (void *)opts, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  if (*nnames < REPORT_MAX_FIGURES) snprintf(names[(*nnames)++], 80, "figures/%.70s", file);
  return 0;
}
#endif

#ifdef FM_HAVE_VIZ
/* The gallery's panels: for each mask of the scenario, the first case of it
 * that ran (rows are the scenario's cases in order, some left out by --only). */
typedef struct gallery_items {
  viz_gallery_item items[FM_SCN_MAX_MASKS];
  char trace[FM_SCN_MAX_MASKS][4500], title[FM_SCN_MAX_MASKS][200];
  int n;
} gallery_items;

static int gallery_collect(runner_ctx *rc, const case_row *rows, int n, gallery_items *g) {
  const fm_scenario *s = rc->s;
  fm_scn_case *cases = NULL;
  int ncases = 0, seen[FM_SCN_MAX_MASKS] = {0};
  fm_err err;
  g->n = 0;
  if (fm_scenario_cases(s, &cases, &ncases, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  for (int i = 0, j = 0; i < n; i++) {
    while (j < ncases && strcmp(cases[j].id, rows[i].id)) j++;
    if (j == ncases) break;
    int mi = cases[j].mask_index;
    if (mi < 0 || mi >= FM_SCN_MAX_MASKS || seen[mi]) continue;
    seen[mi] = 1;
    const fm_scn_mask *m = &s->masks[mi];
    const char *base = strrchr(m->file, '/');
    snprintf(g->trace[g->n], sizeof g->trace[0], "%s/cases/%s", rc->o->out, rows[i].id);
    if (m->family[0])
      snprintf(g->title[g->n], sizeof g->title[0], "%s%s%.150s", m->family, rows[i].params[0] ? " " : "",
               rows[i].params);
    else
      snprintf(g->title[g->n], sizeof g->title[0], "%.190s", base ? base + 1 : m->file);
    g->items[g->n] = (viz_gallery_item){.trace = g->trace[g->n], .title = g->title[g->n]};
    g->n++;
  }
  free(cases);
  return 0;
}
#endif

int report_figures(runner_ctx *rc, const case_row *rows, int n, char names[][80], int *nnames) {
  const fm_scenario *s = rc->s;
  *nnames = 0;
  if (!s->nfigures) return 0;
#ifdef FM_HAVE_VIZ
  char dir[4300], file[400], trace[4500];
  fm_err err;
  snprintf(dir, sizeof dir, "%s/figures", rc->o->out);
  if (fm_mkdir_p(dir, &err) != FM_OK) {
    cli_error(rc->o->cmd, "%s", err.msg);
    return -1;
  }
  for (int f = 0; f < s->nfigures; f++) {
    const viz_figure *fig = viz_figure_find(s->figures[f]);
    viz_figure_opts opts = {.seqlen = s->seqlen.v[0], .br = (int32_t)s->br.v[0],
                            .bc = (int32_t)s->bc.v[0], .sample = -1, .seed = s->seed,
                            .samples_path = s->sample_file[0] ? s->sample_file : NULL, .text = 1};
    if (!fig->per_case) {
      gallery_items *g = NULL;
      if (!strcmp(fig->name, "gallery")) { /* the scenario's masks, not the twelve families */
        g = malloc(sizeof *g);
        if (!g || gallery_collect(rc, rows, n, g)) {
          if (!g) cli_error(rc->o->cmd, "out of memory");
          free(g);
          return -1;
        }
        if (g->n == 0) { /* no case ran: nothing of the scenario's to draw */
          free(g);
          continue;
        }
        opts.items = g->items;
        opts.nitems = g->n;
        opts.items_name = s->name;
      }
      snprintf(file, sizeof file, "%s.png", fig->name);
      int r = draw_one(rc, fig, &opts, file, names, nnames);
      free(g);
      opts.items = NULL;
      opts.nitems = 0;
      if (r) return -1;
      continue;
    }
    for (int i = 0; i < n && i < MAX_CASE_FIGURES; i++) {
      snprintf(trace, sizeof trace, "%s/cases/%s", rc->o->out, rows[i].id);
      snprintf(file, sizeof file, "%s-%.200s.png", fig->name, rows[i].id);
      opts.trace = trace;
      opts.head_dim = (int32_t)rows[i].head_dim;
      if (draw_one(rc, fig, &opts, file, names, nnames)) return -1;
    }
  }
  return 0;
#else
  (void)rows;
  (void)n;
  (void)names;
  fprintf(stderr, "fmsim %s: figures skipped: this fmsim was built without cairo\n", rc->o->cmd);
  return 0;
#endif
}
