/* fm_words.c — "did you mean" and sizes with suffixes (fm_words.h). */
#include "fm_words.h"

#include <string.h>

int fm_edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b), d[64][64];
  if (la > 63 || lb > 63) return 99;
  for (int i = 0; i <= la; i++) d[i][0] = i;
  for (int j = 0; j <= lb; j++) d[0][j] = j;
  for (int i = 1; i <= la; i++)
    for (int j = 1; j <= lb; j++) {
      int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
  return d[la][lb];
}

const char *fm_closest(const char *word, const char *const *names, int n, int max_distance) {
  if (!word) return NULL;
  const char *best = NULL;
  int bestd = max_distance + 1;
  for (int k = 0; k < n; k++) {
    if (!names[k]) continue;
    int dd = fm_edit_distance(word, names[k]);
    if (dd == 0) return NULL; /* not a typo */
    if (dd < bestd) bestd = dd, best = names[k];
  }
  return best;
}

int fm_suggest_distance(const char *word) {
  size_t n = word ? strlen(word) : 0;
  return n <= 3 ? 1 : n <= 6 ? 2 : 3;
}

int fm_parse_size(const char *text, int64_t *out) {
  if (!text || *text < '0' || *text > '9') return -1;
  int64_t v = 0;
  const char *p = text;
  int overflow = 0;
  for (; *p >= '0' && *p <= '9'; p++) {
    int digit = *p - '0';
    if (v > (INT64_MAX - digit) / 10) overflow = 1;
    else v = v * 10 + digit;
  }
  int64_t mul = 1;
  if (*p == 'k' || *p == 'K') mul = 1024, p++;
  else if (*p == 'M') mul = 1048576, p++;
  if (*p) return -1;
  if (overflow || v > INT64_MAX / mul) return -2;
  *out = v * mul;
  return 0;
}

int fm_word_index(const char *word, const char *const *names, int n) {
  for (int i = 0; word && i < n; i++)
    if (names[i] && !strcmp(word, names[i])) return i;
  return -1;
}
