/* Every design document the code cites lives in the repository: each page
 * of docs/ named in a source, script, notebook or document exists, a section
 * cited after it (the page, a comma, the section in quotes) is one of its
 * headings, and no file cites the design or families page without the docs/
 * folder (docs/DESIGN.md, "Style", rule 10). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const roots[] = {"app", "core", "viz", "kernels", "tests", "notebooks", "bench",
                                    "scripts", "scenarios", "docs", "fuzz", "python", "README.md"};
static const char *const exts[] = {".c", ".h", ".cu", ".cuh", ".py", ".sh", ".md", ".ipynb",
                                   ".yaml", ".txt"};

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if (buf) buf[got] = 0;
  if (len) *len = got;
  return buf;
}

/* The cited section up to its closing quote, with comment decoration
 * (newlines, '*', '#') folded into single spaces and C string literals split
 * over lines ("Known "  "traps") joined. */
static void section_text(const char *p, char *out, size_t cap) {
  size_t n = 0;
  int space = 0;
  for (; *p && n + 1 < cap; p++) {
    if (*p == '\\' && p[1] == '"') break; /* an escaped closing quote */
    if (*p == '"') {
      const char *q = p + 1;
      while (isspace((unsigned char)*q)) q++;
      if (*q != '"') break; /* the closing quote */
      p = q;                /* "..." "...": one literal split over lines */
      continue;
    }
    if (*p == '\n' || *p == '*' || *p == '#' || isspace((unsigned char)*p) || *p == '\\') {
      space = n > 0;
      continue;
    }
    if (space) out[n++] = ' ';
    space = 0;
    out[n++] = *p;
  }
  out[n] = 0;
}

/* 1 when the document has a heading "## section" or "### section". */
static int has_heading(const char *doc, const char *section) {
  for (const char *p = doc; (p = strstr(p, "\n#")) != NULL; p++) {
    const char *h = p + 1;
    while (*h == '#') h++;
    while (*h == ' ') h++;
    size_t n = strlen(section);
    if (strncmp(h, section, n) == 0 && (h[n] == '\n' || h[n] == 0)) return 1;
  }
  return 0;
}

static int checked;

static void check_file(const char *root, const char *path) {
  char *text = slurp(path, NULL);
  cr_assert_not_null(text, "%s", path);
  for (const char *p = text; (p = strstr(p, "docs/")) != NULL; p += 5) {
    char name[64];
    size_t n = 0;
    const char *q = p + 5;
    while ((isalnum((unsigned char)*q) || *q == '_' || *q == '-') && n + 4 < sizeof name)
      name[n++] = *q++;
    name[n] = 0;
    if (strncmp(q, ".md", 3) != 0) continue;
    char doc_path[1024];
    snprintf(doc_path, sizeof doc_path, "%s/docs/%s.md", root, name);
    char *doc = slurp(doc_path, NULL);
    cr_assert_not_null(doc, "%s cites docs/%s.md, which does not exist", path, name);
    q += 3;
    int section_follows = *q == ',';
    while (*q == ',' || *q == ' ' || *q == '\n' || *q == '*' || *q == '#') q++;
    if (*q == '\\' && q[1] == '"') q++;
    if (section_follows && *q == '"') {
      char section[256];
      section_text(q + 1, section, sizeof section);
      cr_assert(has_heading(doc, section), "%s cites docs/%s.md, \"%s\": no such heading", path,
                name, section);
    }
    checked++;
    free(doc);
  }
  const char *bare[] = {"DESIGN" ".md", "FAMILIES" ".md"}; /* split: this file is scanned too */
  for (int b = 0; b < 2; b++)
    for (const char *p = text; (p = strstr(p, bare[b])) != NULL; p++)
      cr_assert(p - text >= 5 && strncmp(p - 5, "docs/", 5) == 0,
                "%s cites %s outside the repository (expected docs/%s)", path, bare[b], bare[b]);
  /* the team's notes beside the checkout are not part of the repository */
  const char *outside[] = {"../" "shared/", "shared/" "peers", "CUPTI" ".md", "KINDS" ".md"};
  for (int o = 0; o < 4; o++)
    cr_assert(strstr(text, outside[o]) == NULL, "%s cites %s, which is not in the repository", path,
              outside[o]);
  free(text);
}

static int wanted(const char *name) {
  size_t n = strlen(name);
  for (size_t e = 0; e < sizeof exts / sizeof exts[0]; e++) {
    size_t k = strlen(exts[e]);
    if (n > k && strcmp(name + n - k, exts[e]) == 0) return 1;
  }
  return 0;
}

static void walk(const char *root, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) return;
  if (!S_ISDIR(sb.st_mode)) {
    check_file(root, path);
    return;
  }
  DIR *d = opendir(path);
  cr_assert_not_null(d, "%s", path);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char child[2048];
    snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    if (stat(child, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode) || wanted(e->d_name)) walk(root, child);
  }
  closedir(d);
}

Test(docs, every_cited_document_and_section_exists) {
  char root[1024];
  snprintf(root, sizeof root, "%s/..", FM_TEST_SOURCE_DIR);
  for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", root, roots[r]);
    walk(root, path);
  }
  cr_assert_gt(checked, 20, "only %d citations found: is the tree where the test looks?", checked);
}

/* ---- docs/DESIGN.md, "How to add ...": what each step names exists ---------- */

/* A backticked token of a step: a repository path (it has a '/' and an
 * extension, no placeholder NAME or wildcard) or a C/Python name (letters,
 * digits, '_', optionally followed by "()" or "[]", at least 4 characters);
 * anything else (commands, code with spaces, placeholders) is prose. */
enum { TOK_PROSE, TOK_PATH, TOK_NAME };

static int token_kind(char *tok) {
  size_t n = strlen(tok);
  if (strstr(tok, "NAME") || strchr(tok, '*') || strchr(tok, ' ')) return TOK_PROSE;
  if (strchr(tok, '/')) return strchr(strrchr(tok, '/'), '.') ? TOK_PATH : TOK_PROSE;
  if (n > 2 && (!strcmp(tok + n - 2, "()") || !strcmp(tok + n - 2, "[]"))) tok[n -= 2] = 0;
  if (n < 4 || !(isalpha((unsigned char)tok[0]) || tok[0] == '_')) return TOK_PROSE;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)tok[i]) && tok[i] != '_') return TOK_PROSE;
  return TOK_NAME;
}

/* Checks one numbered step (text up to the next step or section): every
 * path it names exists, and every name it names occurs in one of those
 * files. Returns the number of tokens checked; *why says what failed. */
static int check_step(const char *root, const char *step, size_t len, char *why, size_t cap) {
  char toks[32][160], *files[32];
  int kinds[32], nt = 0, nf = 0, checked_here = 0;
  why[0] = 0;
  for (const char *p = step; p < step + len && nt < 32; p++) {
    if (*p != '`') continue;
    const char *e = memchr(p + 1, '`', (size_t)(step + len - p - 1));
    if (!e) break;
    size_t n = (size_t)(e - p - 1);
    if (n > 0 && n < sizeof toks[0]) {
      memcpy(toks[nt], p + 1, n);
      toks[nt][n] = 0;
      kinds[nt] = token_kind(toks[nt]);
      nt++;
    }
    p = e;
  }
  for (int t = 0; t < nt; t++) {
    if (kinds[t] != TOK_PATH) continue;
    char path[1200];
    snprintf(path, sizeof path, "%.1000s/%.159s", root, toks[t]);
    files[nf] = slurp(path, NULL);
    if (!files[nf]) {
      snprintf(why, cap, "%.159s does not exist", toks[t]);
      break;
    }
    nf++;
    checked_here++;
  }
  for (int t = 0; !why[0] && t < nt; t++) {
    if (kinds[t] != TOK_NAME || nf == 0) continue;
    int found = 0;
    for (int f = 0; f < nf && !found; f++) found = strstr(files[f], toks[t]) != NULL;
    if (!found) snprintf(why, cap, "`%.159s` is in none of the files the step names", toks[t]);
    checked_here++;
  }
  for (int f = 0; f < nf; f++) free(files[f]);
  return checked_here;
}

/* Walks the numbered steps of every "### Adding ..." section of text;
 * returns the tokens checked and fails on the first bad step. */
static int check_howto(const char *root, const char *text, int *sections) {
  int total = 0;
  *sections = 0;
  for (const char *s = text; (s = strstr(s, "\n### Adding ")) != NULL; s++) {
    const char *end = strstr(s + 1, "\n## ");
    const char *next = strstr(s + 1, "\n### ");
    if (!end || (next && next < end)) end = next;
    if (!end) end = s + strlen(s);
    (*sections)++;
    const char *title_end = strchr(s + 1, '\n');
    for (const char *p = s; p && p < end; p = strstr(p + 1, "\n")) {
      if (!isdigit((unsigned char)p[1]) || p[2] != '.') continue; /* "\n1. " starts a step */
      const char *q = p + 1;
      const char *stop = q;
      while ((stop = strchr(stop + 1, '\n')) && stop < end && !(isdigit((unsigned char)stop[1]) && stop[2] == '.') &&
             stop[1] != '\n')
        ;
      if (!stop || stop > end) stop = end;
      char why[256];
      total += check_step(root, q, (size_t)(stop - q), why, sizeof why);
      cr_assert(why[0] == 0, "docs/DESIGN.md: section \"%.*s\", step %c: %s", (int)(title_end - s - 5),
                s + 5, q[0], why);
    }
  }
  return total;
}

Test(docs, every_how_to_step_names_what_exists) {
  char root[1024], path[1100];
  snprintf(root, sizeof root, "%s/..", FM_TEST_SOURCE_DIR);
  snprintf(path, sizeof path, "%s/docs/DESIGN.md", root);
  char *design = slurp(path, NULL);
  cr_assert_not_null(design, "%s", path);
  int sections = 0, tokens = check_howto(root, design, &sections);
  const char *want[] = {"a family", "a kernel", "a kernel variant", "a figure", "a command",
                        "a scenario key"};
  for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
    char h[64];
    snprintf(h, sizeof h, "Adding %s", want[w]);
    cr_assert(has_heading(design, h), "docs/DESIGN.md has no section \"%s\"", h);
  }
  cr_assert_geq(sections, 6);
  cr_assert_gt(tokens, 40, "only %d files and names checked", tokens);
  free(design);
}

/* The step checker itself: a missing file or name is caught. */
Test(docs, the_how_to_checker_sees_a_missing_file_or_name) {
  char root[1024], why[256];
  snprintf(root, sizeof root, "%s/..", FM_TEST_SOURCE_DIR);
  const char *ok = "1. `app/main.c`: one row `X(NAME, \"...\")` in `COMMANDS`.";
  cr_assert_eq(check_step(root, ok, strlen(ok), why, sizeof why), 2, "%s", why);
  cr_assert_eq(why[0], 0, "%s", why);
  const char *no_file = "1. `app/cmd_nosuch.c`: `int cmd_NAME(int argc)`.";
  check_step(root, no_file, strlen(no_file), why, sizeof why);
  cr_assert(strstr(why, "app/cmd_nosuch.c does not exist"), "%s", why);
  const char *no_name = "1. `app/main.c`: a row in `COMMANDZ`, read by `params()`.";
  check_step(root, no_name, strlen(no_name), why, sizeof why);
  cr_assert(strstr(why, "`COMMANDZ` is in none"), "%s", why);
}

/* The checker itself: a missing heading is caught. */
Test(docs, the_checker_sees_a_bad_section) {
  const char *doc = "# T\n\n## Semantics\n\ntext\n### Adding a family\n";
  char s[256];
  section_text("Known \"\n    \"traps\\\"), more", s, sizeof s);
  cr_assert_str_eq(s, "Known traps");
  section_text("Adding a\n * family\") more", s, sizeof s);
  cr_assert_str_eq(s, "Adding a family");
  cr_assert(has_heading(doc, s));
  cr_assert(has_heading(doc, "Semantics"));
  cr_assert_not(has_heading(doc, "Semantic"));
  cr_assert_not(has_heading(doc, "Traces"));
}
