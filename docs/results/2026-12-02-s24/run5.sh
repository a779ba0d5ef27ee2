#!/usr/bin/env bash
# Session 24, run 5 on the 1x H200: the GPU suites again after the intra-node Communicator became parts that own
# their state (bd7db5f): the same command as run 1.
exec bash "$(dirname "$0")/run1.sh"
