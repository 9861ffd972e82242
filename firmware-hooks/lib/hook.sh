# Shared by the board hooks (POSIX sh, BusyBox-compatible). Sourcing it reads the event from stdin.
# Protocol: one flat JSON object in (`{"event":"set-fan","duty_pct":40}`), one JSON object out
# (`{"ok":true}` or `{"ok":false,"detail":"why"}`), exit 0. `LUCEBOX_ROOT` prefixes sysfs paths
# (empty on a live machine, a fake tree in tests).

hook_input=$(cat)
sys_root=${LUCEBOX_ROOT:-}

# field NAME: a top-level string or integer field of the event; empty when absent.
field() {
  value=$(printf '%s' "$hook_input" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p")
  [ -n "$value" ] || value=$(printf '%s' "$hook_input" | sed -n "s/.*\"$1\":\([0-9][0-9]*\).*/\1/p")
  printf '%s' "$value"
}

# json_escape TEXT: TEXT as the inside of a JSON string.
json_escape() {
  printf '%s' "$1" | tr '\n\t\r' '   ' | sed 's/\\/\\\\/g; s/"/\\"/g'
}

reply_ok() {
  printf '{"ok":true,"detail":"%s"}\n' "$(json_escape "$1")"
  exit 0
}

reply_fail() {
  printf '{"ok":false,"detail":"%s"}\n' "$(json_escape "$1")"
  exit 0
}

# require_int NAME MIN MAX: sets $value to the integer field NAME, or answers a refusal naming it.
require_int() {
  value=$(field "$1")
  case "$value" in
    '' | *[!0-9]*) reply_fail "$1 missing or not an integer" ;;
  esac
  if [ "$value" -lt "$2" ] || [ "$value" -gt "$3" ]; then
    reply_fail "$1=$value outside $2..$3"
  fi
}

# run TOOL ARGS...: runs a board tool; on failure answers with its output and stops.
run() {
  command -v "$1" >/dev/null 2>&1 || reply_fail "$1 not installed"
  if ! tool_output=$("$@" 2>&1); then
    reply_fail "$* failed: $tool_output"
  fi
}
