/* commands.h — what a subcommand is: `int cmd_NAME(int argc, char **argv)`
 * in app/cmd_NAME.c (argv[0] is the command name), returning an FM_EXIT_*
 * code (cli.h). app/main.c's command table declares each one and lists it;
 * adding a command is its file, its row there, its line in
 * app/CMakeLists.txt and its test. */
#ifndef FM_COMMANDS_H
#define FM_COMMANDS_H

typedef int fm_command_fn(int argc, char **argv);

#endif
