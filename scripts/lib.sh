# Sourced by the scripts in scripts/: what they share.
#   PGVER        the PostgreSQL major (default 15)
#   PG_CONFIG    its pg_config, unless already set
#   SUDO         "sudo" unless running as root

PGVER=${PGVER:-15}
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$PGVER/bin/pg_config}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

#   copy_tree D [built]  copy the working tree into D: no .git, no test
#                output, and no build output unless "built" (t/016 reads the
#                object files)
copy_tree() {
  local excludes=(--exclude=./.git --exclude=./results --exclude=./tmp_check --exclude='./regression.*')
  [ "${2:-}" = built ] || excludes+=(--exclude='*.o' --exclude='*.so')
  mkdir -p "$1"
  tar "${excludes[@]}" -cf - . | tar -C "$1" -xf -
}

#   tap_failures D  after a failed TAP run in D: each failed file's failures
#                and diagnostics (not its whole log; the passing files' logs
#                not at all), also appended to $GM_FAILURES when set, for
#                scripts/test to print again at its end
tap_failures() {
  local f
  for f in "$1"/tmp_check/log/regress_log_*; do
    [ -f "$f" ] && grep -qE '\) not ok |# Looks like' "$f" || continue
    {
      echo "---- ${f##*/}: its failures and diagnostics"
      sed -nE 's/^\[[0-9:.]+\]\([0-9.]+s\) //; /^(not ok |# |Bail out)/p' "$f" | head -n 300
    } | { tee -a "${GM_FAILURES:-/dev/null}" 2>/dev/null || true; }
  done
  return 0
}
