# Sourced by the scripts that run the tests (test, sync-model, fs-model): what every such run
# needs around it. Not a command of its own.

# Only mounts whose process is gone (ENOTCONN): a live one may be another test run's (a long
# `scripts/sync-model` beside `scripts/test` once lost its fresh mounts to this).
clear_stale_mounts() {
  local m
  for m in $(awk '$3 ~ /^fuse/ && $2 ~ /bucketfs-test/ {print $2}' /proc/mounts 2>/dev/null); do
    timeout 5 stat "$m" >/dev/null 2>&1 && continue
    fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

# Every Swift process the run starts (mounts, servers, the test bundle) writes its crash report
# to a file of its own in BUCKETFS_CRASH_DIR, not to a log that a passing test deletes: a crash
# at shutdown, or of a server a test then restarts, fails no test but is a bug (issue 34's
# server crash was seen only in the kernel log). `report_crashes` lists the run's reports.
crash_dir="${BUCKETFS_CRASH_DIR:-/tmp/bucketfs-crashes}"
mkdir -p "$crash_dir"
crash_marker="$(mktemp /tmp/bucketfs-run-started.XXXXXX)"
export SWIFT_BACKTRACE="enable=yes,interactive=no,color=no,output-to=$crash_dir"

report_crashes() {
  local reports
  reports="$(find "$crash_dir" -type f -newer "$crash_marker" 2>/dev/null | sort)"
  rm -f "$crash_marker"
  [ -z "$reports" ] && return 0
  echo "$(basename "$0"): $(echo "$reports" | wc -l) Swift process(es) crashed during this run; their reports:" >&2
  local report
  for report in $reports; do
    echo "== $report" >&2
    head -40 "$report" >&2
  done
}

# What every run does on its way out, whatever ends it.
end_of_run() {
  clear_stale_mounts
  report_crashes
}
