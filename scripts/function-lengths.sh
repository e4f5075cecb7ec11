#!/bin/sh
# The longest C functions of the given folders (default: core app), and exit 1
# when one is longer than LIMIT lines (default 150, the rule of docs/DESIGN.md,
# "Style"). Needs Universal Ctags (its end: field gives the last line).
#   scripts/function-lengths.sh [-n LIMIT] [DIR...]
limit=150
if [ "$1" = "-n" ]; then limit=$2; shift 2; fi
[ $# -gt 0 ] || set -- core app
command -v ctags >/dev/null || { echo "function-lengths: ctags (Universal Ctags) not found" >&2; exit 2; }
lengths=$(for d in "$@"; do ls "$d"/*.c; done | xargs ctags --c-kinds=f --fields=+ne -o - |
  awk -F'\t' '{ for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) s = substr($i, 6)
                                            if ($i ~ /^end:/) e = substr($i, 5) }
                print e - s + 1 "\t" $2 ":" s "\t" $1 }' | sort -rn)
echo "$lengths" | head -n 10
echo "$lengths" | awk -F'\t' -v limit="$limit" '$1 > limit { over++ } END { exit over ? 1 : 0 }'
