/* fuzz_viz_script — viewer scripts (`fmsim view --script`): each line through
 * viz_script_parse, its events through viz_handle_event on a state whose mask
 * extent comes from bytes 0-3 (Sq, Sk in 1..65536), window 1200x800. */
#include "fuzz_util.h"
#include "viz.h"
#include "viz_sdl.h"

FUZZ_DEFAULT_INIT

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  viz_state s;
  viz_state_init(&s, 1200, 800);
  s.facts.sq = 1 + (data[0] | data[1] << 8);
  s.facts.sk = 1 + (data[2] | data[3] << 8);
  s.facts.npairs = 1;
  viz_view_reset(&s);
  char *text = fuzz_text(data + 4, size - 4);
  for (char *p = text; p && *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    viz_script_cmd c;
    fm_err err;
    if (viz_script_parse(p, &c, &err) == FM_OK) {
      viz_event ev[VIZ_SCRIPT_MAX_EVENTS];
      int n = viz_script_events(&c, ev);
      for (int i = 0; i < n; i++) viz_handle_event(&s, &ev[i]);
    }
    p = nl ? nl + 1 : NULL;
  }
  /* the view stays inside the mask whatever the events were */
  double ex = s.facts.sk, slack = 1e-9 * ex;
  if (!(s.view.x0 >= -slack && s.view.x1 <= ex + slack && s.view.x0 < s.view.x1)) abort();
  free(text);
  return 0;
}
