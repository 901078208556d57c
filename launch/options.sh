# Sourced by the launch scripts that take options. Inside the option loop,
#   --np) needs_value sweep.sh "$@"; np=$2; shift 2 ;;
# exits 2 with a usage line naming the option when no value follows it (under `set -u` the
# script would otherwise end on bash's "unbound variable").
needs_value() {
  local prog=$1
  (($# >= 3)) || { echo "$prog: $2 needs a value (usage: $prog --help)" >&2; exit 2; }
}
