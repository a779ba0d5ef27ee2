#!/usr/bin/env bash
# Session 25, run 2 on the 1x H200: the one-GPU GPU suites on ccd3799 (the GPU network executor's runs built as
# launch ops, HOCCL_NET_LANES): session 24's run 1 script, unchanged.
exec bash "$(dirname "$0")/../2026-12-02-s24/run1.sh"
