/* scenario_run.h — `fmsim run SCENARIO.yaml` (argv[0] is "run"). */
#ifndef FM_SCENARIO_RUN_H
#define FM_SCENARIO_RUN_H

int scenario_run_main(int argc, char **argv);

#endif
