#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The explorer as CTest runs it: the kept seeds first, then new schedules
# for RLOCK_EXPLORE_SECONDS (default 60) from RLOCK_EXPLORE_SEED (default:
# the clock; printed, so a failure can be run again), with the slack a
# sanitizer build needs (RLOCK_EXPLORE_SLACK_MS, default 1000).
set -euo pipefail
bin=$1
seeds=$2
args=(--replay "$seeds" --seconds "${RLOCK_EXPLORE_SECONDS:-60}"
      --slack-ms "${RLOCK_EXPLORE_SLACK_MS:-1000}" --quiet)
[ -n "${RLOCK_EXPLORE_SEED:-}" ] && args+=(--seed "$RLOCK_EXPLORE_SEED")
exec "$bin" "${args[@]}"
