#!/bin/sh
# probe_chains.sh OBJDUMP BINARY — the int8 probes run as many independent
# chains of their product as their sources write (compute/x86/*/probe.c).
#
# The probes' chains have the same inputs; where a compiler can see that, it
# merges them into one chain and the probe times the instruction's latency
# instead of its throughput (gcc 12 did, at both levels: a peak 1.5x too
# high at avx512, 3.7x at avx2). Only the machine code shows it, so this
# counts the product instructions in each probe's function of BINARY.
set -eu
objdump=$1
bin=$2
status=0

# count FUNCTION INSTRUCTION: how many times INSTRUCTION occurs in FUNCTION's code
count() {
    "$objdump" -d --no-show-raw-insn "$bin" |
        awk -v f="<$1>:" -v ins="$2" '
            $2 == f { on = 1; next }
            on && /^[0-9a-f]+ <.*>:$/ { on = 0 }
            on && index($0, ins) { n++ }
            END { print n + 0 }'
}

# LEVEL FUNCTION INSTRUCTION CHAINS
while read -r level fn ins want; do
    if ! "$objdump" -t "$bin" | grep -q " $fn\$"; then
        echo "$level: $fn not in $bin (the level is not built here): skipped"
        continue
    fi
    got=$(count "$fn" "$ins")
    if [ "$got" -lt "$want" ]; then
        echo "FAIL $level: $fn runs $got $ins, its source writes $want independent chains"
        status=1
    else
        echo "ok $level: $fn runs $got $ins ($want chains)"
    fi
done <<'LEVELS'
avx512 tkv__probe_int8_avx512 vpdpbusd 12
avx2 tkv__probe_int8_avx2 vpmaddubsw 6
LEVELS
exit $status
