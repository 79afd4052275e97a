#!/usr/bin/env bash
# Smoke test of the clkv command-line tool (ctest test_cli): exit codes, error messages that
# name the bad argument, and one tiny checked benchmark whose CSV rows must say "ok" and
# "pass" with a measured same-bytes probe time. Usage: cli_smoke.sh path/to/clkv
set -uo pipefail
CLKV=$1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect RC DESCRIPTION -- COMMAND...: runs COMMAND, checks its exit status
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [[ $rc -ne $want ]]; then
        echo "FAIL: $what: exit status $rc, expected $want"
        sed 's/^/  stderr: /' "$tmp/err" | head -5
        fails=$((fails + 1))
        return 1
    fi
    echo "ok:   $what"
}

# grep_in FILE PATTERN DESCRIPTION: FILE (out or err of the last command) matches PATTERN
grep_in() {
    if ! grep -q -e "$2" "$tmp/$1"; then
        echo "FAIL: $3: '$2' not in std$1"
        fails=$((fails + 1))
    fi
}

expect 0 "clkv --help" -- "$CLKV" --help
expect 2 "unknown command" -- "$CLKV" no-such-command
expect 2 "unknown benchmark" -- "$CLKV" bench no-such-bench && grep_in err "no-such-bench" "unknown benchmark named"
expect 2 "unknown option" -- "$CLKV" bench attention-decode --no-such-option &&
    grep_in err "no-such-option" "unknown option named"
expect 0 "clkv devices" -- "$CLKV" devices && grep_in out "<- default" "default device marked"

# A head dim the operator does not support: the library's message names the argument.
expect 1 "unsupported head dim" -- "$CLKV" bench attention-decode --dim 100 --len 16 --iters 1 \
    --repeats 1 --warmup 0 --bw-runs 1 && grep_in err "head dim D = 100" "bad dim named"

# Two tiny shapes (lengths 1 and 100, B 2), checked against the CPU reference.
if expect 0 "bench attention-decode (checked)" -- "$CLKV" bench attention-decode --batch 2 \
    --len 1,100 --iters 1 --repeats 1 --warmup 0 --bw-runs 1 --format csv; then
    if ! awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        { rows++
          if ($col["status"] != "ok" || $col["check"] != "pass") bad++
          if (!($col["probe_same_bytes_us"] > 0) || !($col["median_us"] > 0)) bad++ }
        END { exit !(rows == 2 && bad == 0) }' "$tmp/out"; then
        echo "FAIL: bench attention-decode rows (want 2 rows, status ok, check pass, times > 0):"
        sed 's/^/  /' "$tmp/out"
        fails=$((fails + 1))
    fi
fi

if [[ $fails -ne 0 ]]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "all CLI checks passed"
