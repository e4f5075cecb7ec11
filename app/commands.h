/* commands.h — entry points of the subcommands (argv[0] is the command name). */
#ifndef FM_COMMANDS_H
#define FM_COMMANDS_H

int cmd_families(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_expand(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_view(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

#endif
