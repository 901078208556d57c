# Sourced by launch/setup.sh and launch/test.sh: `stage NAME COMMAND...` runs one stage and prints
# its wall time and the CPU time of it and its children (user + sys: on a shared machine the wall
# time alone says little), e.g. "stage 'test suite': 612 s wall, 1090 s user + 95 s sys".
stage() {
  local TIMEFORMAT="stage '$1': %0R s wall, %0U s user + %0S s sys"
  shift
  time "$@"
}
