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

#   tap_failures D [LABEL]  after a failed TAP run in D: each failed
#                file's failures and diagnostics (the last 300 of them) and
#                its log's last 30 lines (a die's message), not the passing
#                files' logs; also appended to $GM_FAILURES when set, for
#                scripts/test to print again at its end.  LABEL names the
#                environment
tap_failures() {
  local f label=${2:+$2: }
  for f in "$1"/tmp_check/log/regress_log_*; do
    # (PostgreSQL 13's logs have no timestamps)
    [ -f "$f" ] && grep -qE '(^|\) )(not ok |Bail out!)|# Looks like' "$f" || continue
    {
      echo "---- ${label}${f##*/}: its failures and diagnostics"
      sed -nE 's/^\[[0-9:.]+\]\([0-9.]+s\) //; /^(not ok |# |Bail out)/p' "$f" | tail -n 300
      echo "---- ${label}${f##*/}: its last 30 lines"
      tail -n 30 "$f"
    } | { tee -a "${GM_FAILURES:-/dev/null}" 2>/dev/null || true; }
  done
  return 0
}
