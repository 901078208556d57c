# Sourced by the launch scripts: the one way they read what a user gives them. Each refusal is
# one line naming the option or variable, exit 2, before anything is done.
#
#   --np) needs_value sweep.sh "$@"; np=$2; shift 2 ;;
# exits 2 with a usage line naming the option when no value follows it (under `set -u` the
# script would otherwise end on bash's "unbound variable").
needs_value() {
  local prog=$1
  (($# >= 3)) || { echo "$prog: $2 needs a value (usage: $prog --help)" >&2; exit 2; }
}

# A rank or world-size count: whole, from 1 to 2^20 (scalebench's own bound; a larger one would
# overflow bash's arithmetic and loop forever).  whole_count sweep.sh --np "$np"
max_count=1048576
whole_count() {
  local prog=$1 what=$2 value=$3
  [[ $value =~ ^[0-9]{1,7}$ ]] && ((10#$value >= 1 && 10#$value <= max_count)) ||
    { echo "$prog: $what '$value': not a whole number from 1 to $max_count" >&2; exit 2; }
}

# Splits pass-through launcher flags as a shell would split them, quotes honoured and removed,
# nothing expanded or run:  shell_words sweep.sh --mpirun-args mpirun_extra "$2"
shell_words() {
  local prog=$1 what=$2 name=$3 text=$4 words
  words=$(printf '%s' "$text" | xargs -r printf '%s\0' 2>&1 >/dev/null) &&
    [[ -z $words ]] || { echo "$prog: $what '$text': unbalanced quotes" >&2; exit 2; }
  mapfile -d '' -t "$name" < <(printf '%s' "$text" | xargs -r printf '%s\0')
}

# An output path as the user meant it: relative to the folder the script was started from,
# whatever folder the script works in.  out=$(absolute_path "$out")
absolute_path() {
  case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}
