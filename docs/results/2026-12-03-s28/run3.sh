#!/usr/bin/env bash
# Session 28, run 3 on the 1x H200: AllGather over TCP on the GPU network executor, multicast against unicast.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout -k 10 400 python docs/results/2026-12-03-s28/bench_net_multicast.py > "$OUT/bench-net-multicast.log" 2>&1
echo "=== bench rc=$?"; tail -n 8 "$OUT/bench-net-multicast.log"
