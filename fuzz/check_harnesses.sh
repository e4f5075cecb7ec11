#!/bin/sh
# Every fuzz harness (fuzz/fuzz_NAME.c) is built and replayed: it is named in
# fuzz/CMakeLists.txt (the names given here), has a committed corpus
# (corpus/NAME, not empty) and a dictionary (dict/NAME.dict), and fuzz/run.sh
# runs it by default. ctest fuzz_harnesses_listed:
#   fuzz/check_harnesses.sh NAME...   (the names fuzz/CMakeLists.txt builds)
here=$(cd "$(dirname "$0")" && pwd)
status=0
for f in "$here"/fuzz_*.c; do
  n=$(basename "$f" .c)
  n=${n#fuzz_}
  [ "$n" = util ] && continue
  case " $* " in *" $n "*) ;; *) echo "fuzz/fuzz_$n.c is not built (add it to fuzz/CMakeLists.txt)"; status=1 ;; esac
  [ -n "$(ls "$here/corpus/$n" 2>/dev/null)" ] || { echo "fuzz/corpus/$n is missing or empty"; status=1; }
  [ -f "$here/dict/$n.dict" ] || { echo "fuzz/dict/$n.dict is missing"; status=1; }
  grep -Eq "names=\((.* )?$n[ )]" "$here/run.sh" || { echo "fuzz/run.sh does not run $n by default"; status=1; }
done
[ $status = 0 ] && echo "every harness is built, has a corpus and a dictionary, and is run"
exit $status
