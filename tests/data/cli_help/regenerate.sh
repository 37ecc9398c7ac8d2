#!/usr/bin/env bash
# tests/data/cli_help/regenerate.sh [KVIDX_BINARY] — rewrites the golden --help texts that
# tests/apps/cli_help_golden_test.cpp compares byte for byte: one file per command and nested
# subcommand (kvidx.txt, kvidx_serve.txt, kvidx_nkey_new.txt, ...), found by following the
# "Subcommands:" sections of --help from the root. Run it only after a deliberate change of the
# CLI (default binary: build/bin/kvidx), then review `git diff tests/data/cli_help` and commit.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kvidx=${1:-$here/../../../build/bin/kvidx}
rm -f "$here"/kvidx*.txt
write() {  # write COMMAND_PATH...: one golden file, then its subcommands'
  local file
  file="$here/$(IFS=_; echo "kvidx${*:+_$*}").txt"
  "$kvidx" "$@" --help >"$file"
  local sub
  for sub in $(awk '/^Subcommands:$/ {on = 1; next} on && /^$/ {on = 0} on {print $1}' "$file"); do
    write "$@" "$sub"
  done
}
write
ls "$here"/kvidx*.txt | wc -l | xargs echo "golden --help files written:"
