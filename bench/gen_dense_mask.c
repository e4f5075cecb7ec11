/* gen_dense_mask.c — writes large dense bool masks (.npy, True = may attend)
 * for bench/dense_check_bench.sh, one row at a time (O(Sk) memory).
 *
 *   gen_dense_mask KIND SQ SK OUT.npy [SEED [H]]
 *     KIND: causal_document  causal within documents of S/16..S/4 keys (seeded),
 *                            the same for every head
 *           random           each element True with probability 1/2 (seeded),
 *                            a different draw per head
 *     H > 0 writes [H, SQ, SK]; otherwise [SQ, SK].
 *   gen_dense_mask evict FILE
 *     drops FILE's pages from the page cache (posix_fadvise DONTNEED), for a
 *     cold-read measurement of that one file.
 *
 * Standalone on purpose (no fmsim library): the benchmark measures fmsim on
 * files it did not write itself. Deterministic for a given seed. The file is
 * written to OUT.npy.tmp and renamed at the end: nothing half-written is left. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t next(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1Dull;
}

static int evict(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    perror(path);
    return 1;
  }
  fdatasync(fd);
  int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  return rc != 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "evict")) return evict(argv[2]);
  if (argc < 5) {
    fprintf(stderr, "usage: gen_dense_mask causal_document|random SQ SK OUT.npy [SEED [H]]\n"
                    "       gen_dense_mask evict FILE\n");
    return 2;
  }
  const char *kind = argv[1];
  long long sq = atoll(argv[2]), sk = atoll(argv[3]), heads = argc > 6 ? atoll(argv[6]) : 0;
  uint64_t seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
  int rnd = !strcmp(kind, "random");
  if ((!rnd && strcmp(kind, "causal_document")) || sq < 1 || sk < 1 || heads < 0) {
    fprintf(stderr, "gen_dense_mask: bad arguments\n");
    return 2;
  }
  size_t plen = strlen(argv[4]);
  char *tmp = malloc(plen + 5);
  unsigned char *row = malloc((size_t)sk + 8); /* (Sk,) bool */
  if (!tmp || !row) {
    fprintf(stderr, "gen_dense_mask: out of memory\n");
    return 1;
  }
  memcpy(tmp, argv[4], plen);
  memcpy(tmp + plen, ".tmp", 5);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    perror(tmp);
    return 1;
  }
  char dict[256];
  int len = heads > 0 ? snprintf(dict, sizeof dict, "{'descr': '|b1', 'fortran_order': False, 'shape': (%lld, %lld, %lld), }", heads, sq, sk)
                      : snprintf(dict, sizeof dict, "{'descr': '|b1', 'fortran_order': False, 'shape': (%lld, %lld), }", sq, sk);
  int pad = (64 - (10 + len + 1) % 64) % 64, hlen = len + pad + 1;
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 255), (unsigned char)(hlen >> 8)};
  fwrite(pre, 1, 10, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  long long lo = sk / 16 > 0 ? sk / 16 : 1, hi = sk / 4 > lo ? sk / 4 : lo;
  uint64_t rst = seed * 0x9E3779B97F4A7C15ull + 1; /* random: one stream across heads */
  for (long long h = 0; h < (heads > 0 ? heads : 1); h++) {
    /* causal document: documents over the key axis, query i aligned bottom-right;
     * the same documents for every head */
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    long long doc_start = 0, doc_end = 0;
    for (long long i = 0; i < sq; i++) {
      if (rnd) {
        for (long long j = 0; j < sk; j += 8) {
          uint64_t r = next(&rst);
          for (int k = 0; k < 8; k++) row[j + k] = (unsigned char)((r >> (8 * k + 3)) & 1);
        }
      } else {
        long long d = i + sk - sq; /* the key on the diagonal of row i */
        memset(row, 0, (size_t)sk);
        if (d >= 0) {
          while (d >= doc_end) {
            doc_start = doc_end;
            doc_end = doc_start + lo + (long long)(next(&st) % (uint64_t)(hi - lo + 1));
          }
          memset(row + doc_start, 1, (size_t)(d - doc_start + 1));
        }
      }
      if (fwrite(row, 1, (size_t)sk, f) != (size_t)sk) {
        perror(tmp);
        fclose(f);
        remove(tmp);
        return 1;
      }
    }
  }
  free(row);
  int bad = ferror(f); /* the header writes above are checked here */
  if (fclose(f) != 0) bad = 1;
  if (bad || rename(tmp, argv[4]) != 0) {
    perror(argv[4]);
    remove(tmp);
    return 1;
  }
  free(tmp);
  return 0;
}
