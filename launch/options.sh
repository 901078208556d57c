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

# A rank, node or GPU count: whole, from MIN (default 1) to 2^20 (scalebench's own bound; a
# larger one would overflow bash's arithmetic and loop forever), decimal (never octal).
#   whole_count sweep.sh --np "$np"        whole_count node_sweep.sh --gpus-per-node "$gpus" 0
max_count=1048576
whole_count() {
  local prog=$1 what=$2 value=$3 min=${4:-1}
  [[ $value =~ ^[0-9]{1,7}$ ]] && ((10#$value >= min && 10#$value <= max_count)) ||
    { echo "$prog: $what '$value': not a whole number from $min to $max_count" >&2; exit 2; }
}

# A list that names one count twice is refused, as scalebench refuses every list it is given
# (src/core/choices.h): one line naming the entries.  no_repeats node_sweep.sh --nodes "${list[@]}"
# Entries are compared as numbers (01 is 1: "01 is given twice (entries 1 and 2, as 1)"), as
# results/tool_input.py refuse_repeats words it; check each with whole_count first.
no_repeats() {
  local prog=$1 what=$2; shift 2
  local -A _nr_first=()
  local -a _nr_entries=("$@")
  local i=0 entry key earlier
  for entry in "$@"; do
    i=$((i + 1)) key=$((10#$entry))
    if [[ -n ${_nr_first[$key]:-} ]]; then
      earlier=${_nr_entries[_nr_first[$key] - 1]}
      [[ $earlier == "$entry" ]] && earlier="" || earlier=", as $earlier"
      echo "$prog: $what: $entry is given twice (entries ${_nr_first[$key]} and $i$earlier)" >&2; exit 2
    fi
    _nr_first[$key]=$i
  done
}

# Splits pass-through launcher flags as a shell would split them into words, nothing expanded or
# run: blanks separate words; '...' is literal; in "..." a backslash escapes $ ` " \ and a
# newline, as in sh; outside quotes it escapes the next character; quotes are removed, and '' is
# an empty word. Unbalanced quotes or a trailing backslash are refused in one line, exit 2.
#   shell_words sweep.sh --mpirun-args mpirun_extra "$2"     (sets the array mpirun_extra)
shell_words() {
  local _sw_prog=$1 _sw_what=$2 _sw_text=$4
  local -n _sw_into=$3
  local -a _sw_words=()
  local _sw_word="" _sw_have=0 _sw_quote="" _sw_c _sw_next _sw_i _sw_n=${#4}
  for ((_sw_i = 0; _sw_i < _sw_n; _sw_i++)); do
    _sw_c=${_sw_text:_sw_i:1} _sw_next=${_sw_text:_sw_i+1:1}
    if [[ $_sw_quote == "'" ]]; then
      if [[ $_sw_c == "'" ]]; then _sw_quote=""; else _sw_word+=$_sw_c; fi
    elif [[ $_sw_quote == '"' ]]; then
      if [[ $_sw_c == '"' ]]; then
        _sw_quote=""
      elif [[ $_sw_c == '\' ]] && ((_sw_i + 1 < _sw_n)) && [[ $_sw_next == [\$\`\"\\$'\n'] ]]; then
        _sw_i=$((_sw_i + 1))
        if [[ $_sw_next != $'\n' ]]; then _sw_word+=$_sw_next; fi
      else
        _sw_word+=$_sw_c
      fi
    else
      case $_sw_c in
        ' ' | $'\t' | $'\n')
          if ((_sw_have)); then _sw_words+=("$_sw_word"); fi
          _sw_word="" _sw_have=0 ;;
        "'" | '"') _sw_quote=$_sw_c _sw_have=1 ;;
        '\')
          ((_sw_i + 1 < _sw_n)) || { echo "$_sw_prog: $_sw_what '$_sw_text': a trailing backslash" >&2; exit 2; }
          _sw_i=$((_sw_i + 1))
          if [[ $_sw_next != $'\n' ]]; then _sw_word+=$_sw_next _sw_have=1; fi ;;
        *) _sw_word+=$_sw_c _sw_have=1 ;;
      esac
    fi
  done
  [[ -z $_sw_quote ]] || { echo "$_sw_prog: $_sw_what '$_sw_text': unbalanced quotes" >&2; exit 2; }
  if ((_sw_have)); then _sw_words+=("$_sw_word"); fi
  _sw_into=("${_sw_words[@]}")
}

# An output path as the user meant it: relative to the folder the script was started from,
# whatever folder the script works in.  out=$(absolute_path "$out")
absolute_path() {
  case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac
}
