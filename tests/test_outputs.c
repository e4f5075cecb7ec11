/* test_outputs.c — reliability of what fmsim writes: reports on a full or
 * closed stdout, output folders (locks, planted links), predicted-work bounds
 * and the scenario reader's refusals (issue 20, Deliver item 4). Each test
 * runs the fmsim binary. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "fm_fileio.h"
#include "fm_test_util.h"

/* A fresh scratch folder FM_TEST_TMP_DIR/outputs_NAME. */
static void scratch(char *dir, size_t cap, const char *name) {
  snprintf(dir, cap, "%s/outputs_%s", FM_TEST_TMP_DIR, name);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
  cr_assert_eq(system(cmd), 0);
}

typedef struct run_out {
  int status;      /* exit code, -1 when killed */
  char err[8192];  /* stderr */
  int err_lines;   /* lines on stderr */
  long out_bytes;  /* bytes on stdout (0 when stdout was a device) */
} run_out;

/* Runs `fmsim ARGS` in dir (through the shell) with stdout on `out` (a path:
 * /dev/full, or a file) and stderr captured; no display. */
static void run_to(run_out *r, const char *dir, const char *args, const char *out) {
  char cmd[8192], err_path[1024];
  snprintf(err_path, sizeof err_path, "%s/.stderr", dir);
  snprintf(cmd, sizeof cmd, "cd '%s' && env -u DISPLAY -u WAYLAND_DISPLAY %s %s >%s 2>%s </dev/null",
           dir, FMSIM_BIN, args, out, err_path);
  int st = system(cmd);
  r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  fmt_slurp(err_path, r->err, sizeof r->err);
  r->err_lines = 0;
  for (const char *p = r->err; *p; p++) r->err_lines += *p == '\n';
  unlink(err_path);
  struct stat sb;
  r->out_bytes = stat(out, &sb) == 0 && S_ISREG(sb.st_mode) ? (long)sb.st_size : 0;
}

/* The names of app/main.c's COMMANDS table: its `X(name, "...")` rows and
 * the quoted names of its `N(fn, "name", "...")` rows. */
static int registry_commands(char names[][32], int cap) {
  char path[1024];
  snprintf(path, sizeof path, "%s/../app/main.c", FM_TEST_SOURCE_DIR);
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s", path);
  char line[1024];
  int n = 0, in_table = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "#define COMMANDS(X")) in_table = 1;
    if (!in_table) continue;
    const char *x = strstr(line, "X("), *nm = strstr(line, "  N(");
    if (x && x[2] != 'X' && n < cap && sscanf(x + 2, "%31[a-z_0-9]", names[n]) == 1) n++;
    if (nm && n < cap && sscanf(nm + 4, "%*[a-z_0-9], \"%31[a-z_0-9-]", names[n]) == 1) n++;
    if (!strchr(line, '\\')) break; /* the table's last line */
  }
  fclose(f);
  return n;
}

/* Every command of the registry, run as a user would with a report on stdout,
 * and its --help. {DIR} is the scratch folder's fixtures. */
static const struct {
  const char *name, *args;
} typical[] = {
    {"families", "families"},
    {"analyze", "analyze --family causal --seqlen 64 --json"},
    {"predict", "predict --family causal --seqlen 1024"},
    {"cp-plan", "cp-plan --family causal --seqlen 4096 --ranks 2"},
    {"cp-run", "cp-run --family causal --seqlen 1024 --ranks 2 --chunk 256 --cpu"},
    {"calibrate", "calibrate meas.json --out prof.json"},
    {"check", "check mask.npy"},
    {"convert", "convert mask.npy -o conv.npy"},
    {"expand", "expand trace/columns.npy --bidir -o -"},
    {"run", "run --family causal --seqlen 64 --cpu --json --out runtrace"},
    {"bench", "bench --export-only --seqlens 8192 --families causal --sweep-draws 0 --out benchdir"},
    {"verify", "verify --quick --families causal --json"},
    {"view", "view --family causal --seqlen 64"},
    {"render", "render --family causal --seqlen 64 -o fig.png"},
    {"linrnn", "linrnn --cpu --doc-len 16 --tokens 1024 --verify-tokens 64"},
};

static void stdout_fixtures(const char *dir) {
  run_out r;
  run_to(&r, dir, "analyze --family causal --seqlen 64 --br 16 --bc 16 --out trace", "/dev/null");
  cr_assert_eq(r.status, 0, "%s", r.err);
  run_to(&r, dir, "expand trace/columns.npy --bidir -o mask.npy", "/dev/null");
  cr_assert_eq(r.status, 0, "%s", r.err);
  char path[1024];
  snprintf(path, sizeof path, "%s/meas.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"format\": \"fmsim-measurements\", \"version\": 1, \"gpu\": \"NVIDIA H200\", \"kernel\": "
        "\"sm80\", \"date\": \"2026-01-02\", \"cases\": [\n"
        "{\"id\": \"a\", \"family\": \"full\", \"params\": [], \"seqlen\": 2048, \"batch\": 1, "
        "\"heads\": 4, \"head_dim\": 128, \"seed\": 0, \"time_ms\": 0.1},\n"
        "{\"id\": \"b\", \"family\": \"causal\", \"params\": [], \"seqlen\": 8192, \"batch\": 1, "
        "\"heads\": 16, \"head_dim\": 128, \"seed\": 0, \"time_ms\": 0.5}]}\n", f);
  fclose(f);
}

/* One invocation, first with stdout on a file, then on /dev/full: a command
 * that printed a report must now exit 2 with its stderr plus exactly one line
 * naming standard output; one that printed nothing on stdout is unchanged. */
static void full_stdout_is_one_line(const char *dir, const char *args) {
  char out[1024], rm[2400];
  snprintf(out, sizeof out, "%s/.stdout", dir);
  run_out ok, full;
  run_to(&ok, dir, args, out);
  unlink(out);
  /* the second run must not find the first one's outputs (an existing folder) */
  snprintf(rm, sizeof rm, "cd '%s' && rm -rf runtrace benchdir prof.json conv.npy fig.png", dir);
  cr_assert_eq(system(rm), 0);
  run_to(&full, dir, args, "/dev/full");
  cr_assert_eq(system(rm), 0);
  if (ok.out_bytes == 0) {
    cr_assert_eq(full.status, ok.status, "fmsim %s: nothing on stdout, yet exit %d then %d (%s)", args,
                 ok.status, full.status, full.err);
    cr_assert_eq(full.err_lines, ok.err_lines, "fmsim %s: %s", args, full.err);
    return;
  }
  cr_assert_eq(full.status, 2, "fmsim %s > /dev/full: exit %d, expected 2 (stderr: %s)", args,
               full.status, full.err);
  cr_assert_eq(full.err_lines, ok.err_lines + 1, "fmsim %s > /dev/full: %d lines on stderr, expected %d: %s",
               args, full.err_lines, ok.err_lines + 1, full.err);
  cr_assert(strstr(full.err, "standard output") && strstr(full.err, "No space left on device"),
            "fmsim %s > /dev/full: %s", args, full.err);
}

Test(stdout, a_full_disk_is_one_line_and_exit_2_on_every_command, .timeout = 300) {
  char dir[512];
  scratch(dir, sizeof dir, "full");
  stdout_fixtures(dir);
  char names[64][32];
  int n = registry_commands(names, 64);
  cr_assert_geq(n, 12, "the command table of app/main.c: %d rows", n);
  for (int i = 0; i < n; i++) {
    size_t k = 0;
    while (k < sizeof typical / sizeof typical[0] && strcmp(typical[k].name, names[i])) k++;
    cr_assert(k < sizeof typical / sizeof typical[0],
              "command '%s' has no typical invocation in this test: add one", names[i]);
    char args[256];
    snprintf(args, sizeof args, "%s --help", names[i]);
    full_stdout_is_one_line(dir, args);
    snprintf(args, sizeof args, "help %s", names[i]);
    full_stdout_is_one_line(dir, args);
    full_stdout_is_one_line(dir, typical[k].args);
  }
  full_stdout_is_one_line(dir, "--help");
  full_stdout_is_one_line(dir, "--version");
  /* a closed stdout is a write error too */
  run_out r;
  run_to(&r, dir, "families", "&-");
  cr_assert_eq(r.status, 2, "fmsim families >&-: exit %d (%s)", r.status, r.err);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
}

/* ---- the temporary goes with the process, whatever signal ends it ----------- */

/* In a child: an atomic output is open with data in its temporary when `sig`
 * arrives (SIGXFSZ for real: the file outgrows RLIMIT_FSIZE). The child dies of
 * sig and its folder is left empty. */
static void signal_leaves_no_temporary(int sig, const char *name) {
  char dir[512], path[700];
  scratch(dir, sizeof dir, name);
  snprintf(path, sizeof path, "%s/out.bin", dir);
  pid_t p = fork();
  if (p == 0) {
    struct rlimit no_core = {.rlim_cur = 0, .rlim_max = 0};
    setrlimit(RLIMIT_CORE, &no_core);
    fm_atomic_file af;
    if (fm_atomic_open(&af, path, NULL) != FM_OK) _exit(3);
    fm_atomic_write(&af, "partial", 7, NULL);
    fflush(af.f);
    if (sig == SIGXFSZ) {
      struct rlimit small = {.rlim_cur = 4096, .rlim_max = 4096};
      setrlimit(RLIMIT_FSIZE, &small);
      static char block[8192];
      for (int i = 0; i < 4; i++)
        if (write(fileno(af.f), block, sizeof block) < 0) break;
    } else {
      raise(sig);
    }
    _exit(4); /* not reached: the handler re-raises with the default action */
  }
  int st;
  waitpid(p, &st, 0);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == sig, "%s: status %d", name, st);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    cr_assert(!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."), "%s left %s", name, e->d_name);
  closedir(d);
}

Test(signals, sigquit_removes_the_temporary) { signal_leaves_no_temporary(SIGQUIT, "sigquit"); }
Test(signals, sigxfsz_of_a_file_size_limit_removes_the_temporary) {
  signal_leaves_no_temporary(SIGXFSZ, "sigxfsz");
}
Test(signals, sigpipe_sigxcpu_sigalrm_remove_the_temporary) {
  signal_leaves_no_temporary(SIGPIPE, "sigpipe");
  signal_leaves_no_temporary(SIGXCPU, "sigxcpu");
  signal_leaves_no_temporary(SIGALRM, "sigalrm");
}

/* The command itself under a file size limit (ulimit -f): expand of a 1 GiB
 * dense mask dies of SIGXFSZ and leaves neither the output nor its temporary. */
Test(signals, expand_over_a_file_size_limit_leaves_nothing, .timeout = 60) {
  char dir[512];
  scratch(dir, sizeof dir, "ulimit");
  run_out r;
  run_to(&r, dir, "analyze --family causal --seqlen 4096 --out big", "/dev/null");
  cr_assert_eq(r.status, 0, "%s", r.err);
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "cd '%s' && ulimit -c 0 && ulimit -f 64 && exec %s expand big/columns.npy --bidir "
           "-o dense.npy 2>/dev/null", dir, FMSIM_BIN);
  int st = system(cmd);
  /* the shell exec'd fmsim: system() sees its death by the signal itself */
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ, "status %d", st);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    cr_assert(strncmp(e->d_name, "dense.npy", 9) != 0, "left %s", e->d_name);
  closedir(d);
}

/* ---- output folders: one writer at a time (fm_fileio.h rule 7) ------------------------ */

static int entries(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d))) n += strstr(e->d_name, part) != NULL;
  if (d) closedir(d);
  return n;
}

/* Another process holds DIR/.fmsim.lock: analyze --out and run --out into DIR
 * are refused in one line before any work, and leave DIR as it was. */
Test(outdir, a_held_lock_refuses_a_second_writer) {
  char dir[512], trace[700], lock[800];
  scratch(dir, sizeof dir, "lock");
  snprintf(trace, sizeof trace, "%s/trace", dir);
  mkdir(trace, 0755);
  snprintf(lock, sizeof lock, "%s/.fmsim.lock", trace);
  int fd = open(lock, O_RDWR | O_CREAT, 0644);
  cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
  const char *cmds[] = {"analyze --family causal --seqlen 64 --out trace",
                        "run --family causal --seqlen 64 --cpu --out trace"};
  run_out r;
  for (int i = 0; i < 2; i++) {
    run_to(&r, dir, cmds[i], "/dev/null");
    cr_assert_eq(r.status, 2, "%s: exit %d (%s)", cmds[i], r.status, r.err);
    cr_assert_eq(r.err_lines, 1, "%s: %s", cmds[i], r.err);
    cr_assert(strstr(r.err, "another fmsim run is writing this folder"), "%s", r.err);
    cr_assert_eq(entries(trace, ".npy") + entries(trace, ".json") + entries(trace, ".staging."), 0,
                 "%s wrote into a locked folder", cmds[i]);
    cr_assert_eq(access(lock, F_OK), 0, "the holder's lock file is not removed");
  }
  close(fd);
  run_to(&r, dir, cmds[0], "/dev/null");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_eq(entries(trace, ".fmsim.lock"), 0, "a finished run removes its lock file");
}

/* Two real runs into one folder: the second, started while the first
 * computes, is refused; the first writes its whole trace. */
Test(outdir, two_runs_into_one_folder_do_not_mix, .timeout = 120) {
  char dir[512], trace[700], lock[800];
  scratch(dir, sizeof dir, "two_runs");
  snprintf(trace, sizeof trace, "%s/trace", dir);
  snprintf(lock, sizeof lock, "%s/.fmsim.lock", trace);
  pid_t p = fork();
  if (p == 0) {
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execl(FMSIM_BIN, FMSIM_BIN, "analyze", "--family", "random_eviction", "--seqlen", "131072",
          "--br", "16", "--bc", "16", "--out", trace, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 3000 && access(lock, F_OK) != 0; i++) usleep(1000);
  cr_assert_eq(access(lock, F_OK), 0, "the first run never took its lock");
  run_out r;
  run_to(&r, dir, "analyze --family causal --seqlen 64 --out trace", "/dev/null");
  int st;
  waitpid(p, &st, 0);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the first run: status %d", st);
  cr_assert_eq(r.status, 2, "the second run: exit %d (%s)", r.status, r.err);
  cr_assert_eq(r.err_lines, 1, "%s", r.err);
  char summary[900], text[4096];
  snprintf(summary, sizeof summary, "%s/summary.json", trace);
  fmt_slurp(summary, text, sizeof text);
  cr_assert(strstr(text, "random_eviction") && strstr(text, "131072"), "the first run's trace: %s", text);
  cr_assert_eq(entries(trace, ".fmsim.lock") + entries(trace, ".staging."), 0);
}

/* A killed writer's lock is no lock: flock dies with the process. */
Test(outdir, a_killed_writers_lock_file_does_not_block) {
  char dir[512], trace[700], lock[800];
  scratch(dir, sizeof dir, "stale_lock");
  snprintf(trace, sizeof trace, "%s/trace", dir);
  mkdir(trace, 0755);
  snprintf(lock, sizeof lock, "%s/.fmsim.lock", trace);
  close(open(lock, O_RDWR | O_CREAT, 0644)); /* what SIGKILL leaves: the file, no lock */
  run_out r;
  run_to(&r, dir, "analyze --family causal --seqlen 64 --out trace", "/dev/null");
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert_eq(entries(trace, ".fmsim.lock"), 0);
}
