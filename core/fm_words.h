/* fm_words.h — words and numbers a user types: the closest known name to a
 * typo ("did you mean"), and sizes with a k/K/M suffix. One helper for every
 * command and file reader that parses names from a registry or sizes.
 *
 * Sizes: a suffix is binary, as the paper and fmsim's own tables write them
 * (32K = 32768): k or K = 1024, M = 1048576 (m is not accepted: it reads as
 * milli). "32k" = 32768, "1M" = 1048576, "0.5M" is refused (whole numbers
 * only).
 */
#ifndef FM_WORDS_H
#define FM_WORDS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The index of word among n names (a registry's name table), -1 when it is none of them
 * or NULL. The one lookup behind the fm_*_parse functions of short name tables. */
int fm_word_index(const char *word, const char *const *names, int n);

/* Levenshtein distance between a and b (99 when either is over 63 chars). */
int fm_edit_distance(const char *a, const char *b);

/* The closest of n names to word, NULL when none is within max_distance or
 * word is one of them already. Ties go to the first name. */
const char *fm_closest(const char *word, const char *const *names, int n, int max_distance);

/* The distance "did you mean" allows for a word: 1 for words of up to 3
 * characters, 2 up to 6, 3 beyond (a short word is close to every short name). */
int fm_suggest_distance(const char *word);

/* A size: decimal digits with an optional k, K (x1024) or M (x1048576)
 * suffix, the whole string. 0 with *out; -1 when text is not of that shape;
 * -2 when it is but the value overflows int64. */
int fm_parse_size(const char *text, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
