#!/usr/bin/env bash
# Session 25, run 3 on the 1x H200: the one-GPU GPU suites again on the code after run 2 (a stream's memops between
# two copies fused into one batch in the GPU network executor; replay without a closure; the new hostile test of
# the GPU network executor's verification door).
exec bash "$(dirname "$0")/../2026-12-02-s24/run1.sh"
