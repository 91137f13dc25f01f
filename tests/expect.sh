# The checks of the shell tests of a program's command line (sourced by tests/cli_test.sh and
# tests/gpu_faults_test.sh): each passes or fails by name, and the test ends with the counts.
#   expect "what" <wanted exit> "text the output must contain" -- command...
# The command's output stays in $out for further checks. With EXPECT_NO_RAW_ERRORS=1, an output holding a
# raw CUDA error or an abort fails too, whatever its exit.
fails=0
passes=0
pass() { echo "ok: $1"; passes=$((passes+1)); }
failed() { echo "FAIL: $1"; fails=$((fails+1)); }
expect() {
  local what=$1 want=$2 text=$3; shift 4
  local got
  out=$("$@" 2>&1); got=$?
  if [ "$got" != "$want" ] || ! grep -qF -- "$text" <<<"$out"; then
    failed "$what (exit $got, wanted $want; output must contain '$text')"; echo "$out" | tail -5
  elif [ "${EXPECT_NO_RAW_ERRORS:-0}" = 1 ] && grep -q "CUDA error\|Abort\|terminate called" <<<"$out"; then
    failed "$what: a raw CUDA error or an abort"; echo "$out" | tail -5
  else
    pass "$what"
  fi
}
